package clusternode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/internal/devsvc"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev/ecvolume"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// InternalNQN is the subsystem through which node id exports its
// devices to its peers, one namespace per device (NSID = index + 1).
func InternalNQN(id string) string { return "nqn.2026-12.io.capsule:internal:" + id }

// HostNQN is the NQN node id connects to its peers with.
func HostNQN(id string) string { return "nqn.2026-12.io.capsule:node:" + id }

// VolumeNQN is the subsystem the head of volume name serves it in, as
// namespace 1.
func VolumeNQN(name string) string { return "nqn.2026-12.io.capsule:volume:" + name }

// Device is one device directory the node contributes.
type Device struct {
	ID  string // "d0"
	Dir string
}

// Config configures a node.
type Config struct {
	Map     *cluster.Map
	ID      string
	Domain  string
	Devices []Device
	// Target is the node's target, listening already; the node adds its
	// internal subsystem and the subsystems of the volumes it serves.
	Target *target.Target
	// Addrs are the URLs peers reach Target at, in order of preference.
	Addrs []string
	// HeadTTL is the head lease's TTL (cluster.HeadOptions); 10 s by
	// default.
	HeadTTL time.Duration
	// DeviceTimeout: how long a peer's device may be unreachable before
	// the head gives it up and serves degraded; 5 s by default.
	DeviceTimeout time.Duration
	// RebuildRate limits the reads of a rebuild or a move, in bytes per
	// second; 64 MiB/s by default, negative for no limit.
	RebuildRate int64
	// MaintainEvery is how often a head looks for positions to rebuild
	// or move; 2 s by default.
	MaintainEvery time.Duration
	Log           *slog.Logger
}

// Node is a running member of the cluster.
type Node struct {
	cfg    Config
	log    *slog.Logger
	member *cluster.Member
	sub    *target.Subsystem
	// servers are the device services of this node's devices, by device
	// ID: the head reaches its own devices through them directly.
	servers map[string]*devsvc.Server

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	index uint16 // Node.Index in the map: its CNTLID range

	exportMu sync.Mutex // serializes the making and removing of exports
	mu       sync.Mutex // guards ctrls, served, exports
	ctrls    map[string]*host.Controller
	served   map[string]*served
	exports  map[string]*export

	// Since Start: positions rebuilt to the end, and the data rebuilds
	// reconstructed.
	rebuildsFinished, rebuiltBytes atomic.Int64
}

// served is a volume this node heads.
type served struct {
	name  string
	head  *cluster.Head
	store *chunkstore.Store
	// have[i] is the device the store uses at position i (the map's at
	// open, then each finished move). Only the maintenance goroutine
	// changes it, under mu; it reads it without.
	have []cluster.DeviceRef
	// fss[i] is what the store reaches position i through (a
	// devsvc.FS, or missing), changed with have.
	fss []vfs.FS

	mu      sync.Mutex // guards rebuild, and have's and fss's changes
	rebuild *RebuildStatus
	// retries are the recent rebuilds in place, by position; only the
	// maintenance goroutine uses them.
	retries retries
}

// Start exports the devices, joins the map and begins campaigning for
// the volumes in it.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.HeadTTL <= 0 {
		cfg.HeadTTL = 10 * time.Second
	}
	if cfg.DeviceTimeout <= 0 {
		cfg.DeviceTimeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.RebuildRate == 0 {
		cfg.RebuildRate = 64 << 20
	}
	if cfg.MaintainEvery <= 0 {
		cfg.MaintainEvery = 2 * time.Second
	}
	n := &Node{cfg: cfg, log: cfg.Log, ctrls: map[string]*host.Controller{}, served: map[string]*served{},
		exports: map[string]*export{}, servers: map[string]*devsvc.Server{}}
	me := cluster.Node{ID: cfg.ID, Domain: cfg.Domain, Addrs: cfg.Addrs, HostNQN: HostNQN(cfg.ID), State: cluster.Active}
	sub, err := cfg.Target.AddSubsystem(target.SubsystemConfig{NQN: InternalNQN(cfg.ID)})
	if err != nil {
		return nil, err
	}
	n.sub = sub
	for i, d := range cfg.Devices {
		if err := os.MkdirAll(d.Dir, 0o700); err != nil {
			return nil, err
		}
		var st unix.Statfs_t
		if err := unix.Statfs(d.Dir, &st); err != nil {
			return nil, fmt.Errorf("device %s: %w", d.Dir, err)
		}
		me.Devices = append(me.Devices, cluster.Device{ID: d.ID, Capacity: st.Blocks * uint64(st.Bsize)})
		srv := devsvc.NewServer(vfs.NewOS(d.Dir), cfg.Log)
		n.servers[d.ID] = srv
		if _, err := sub.AddNamespace(target.NamespaceConfig{NSID: uint32(i + 1), Vendor: srv}); err != nil {
			return nil, err
		}
	}
	if err := n.allowPeers(ctx); err != nil {
		return nil, err
	}
	mb, err := cfg.Map.Join(ctx, me, cfg.HeadTTL)
	if err != nil {
		return nil, err
	}
	n.member = mb
	self, _, err := cfg.Map.Node(ctx, cfg.ID)
	if err != nil {
		mb.Close(ctx)
		return nil, err
	}
	n.index = self.Index
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Go(n.watch)
	return n, nil
}

// allowPeers lets every member's host NQN connect to the internal
// subsystem.
func (n *Node) allowPeers(ctx context.Context) error {
	nodes, _, err := n.cfg.Map.Nodes(ctx)
	if err != nil {
		return err
	}
	// A host already allowed changes nothing (no discovery log change).
	_ = n.sub.AllowHost(HostNQN(n.cfg.ID))
	for _, p := range nodes {
		if p.HostNQN != "" {
			_ = n.sub.AllowHost(p.HostNQN)
		}
	}
	return nil
}

// watch keeps the peer list current and campaigns for every volume of
// the map, once a second.
func (n *Node) watch() {
	campaigning := map[string]context.CancelFunc{}
	defer func() {
		for _, c := range campaigning {
			c()
		}
	}()
	for {
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		if err := n.allowPeers(ctx); err != nil && n.ctx.Err() == nil {
			n.log.Warn("cluster: reading the map", "err", err)
		}
		vols, err := n.cfg.Map.Volumes(ctx)
		if err == nil {
			n.syncExports(vols)
			n.advertise(ctx, vols)
		}
		cancel()
		if err == nil {
			for _, v := range vols {
				if _, ok := campaigning[v.Name]; !ok {
					cctx, ccancel := context.WithCancel(n.ctx)
					campaigning[v.Name] = ccancel
					n.wg.Go(func() { n.campaign(cctx, v.Name) })
				}
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// campaign serves volume name whenever this node can become its head.
// The node that ranks first for the volume among the live members (by
// the same rendezvous hash as placement) campaigns at once; the others
// wait one TTL per rank before they try, so a volume's head is its
// preferred node when that node is up.
func (n *Node) campaign(ctx context.Context, name string) {
	for ctx.Err() == nil {
		if d := n.delay(ctx, name); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		h, err := n.cfg.Map.AcquireHead(ctx, name, n.cfg.ID, cluster.HeadOptions{TTL: n.cfg.HeadTTL})
		if errors.Is(err, cluster.ErrHeld) {
			// Wait for the key to go, then rank again.
			wctx, cancel := context.WithTimeout(ctx, n.cfg.HeadTTL)
			h, err = n.cfg.Map.CampaignHead(wctx, name, n.cfg.ID, cluster.HeadOptions{TTL: n.cfg.HeadTTL})
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				continue
			}
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, cluster.ErrNotFound) {
				n.log.Warn("cluster: campaign", "volume", name, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if err := n.serve(ctx, name, h); err != nil && ctx.Err() == nil {
			n.log.Warn("cluster: serving volume", "volume", name, "err", err)
			time.Sleep(time.Second)
		}
	}
}

// delay is how long this node waits before it campaigns for name: its
// rank among the live nodes times the TTL.
func (n *Node) delay(ctx context.Context, name string) time.Duration {
	nodes, _, err := n.cfg.Map.Nodes(ctx)
	if err != nil {
		return 0
	}
	live, err := n.cfg.Map.Live(ctx)
	if err != nil {
		return 0
	}
	var up []cluster.Node
	for _, p := range nodes {
		if live[p.ID] {
			up = append(up, p)
		}
	}
	seen := map[string]bool{}
	rank := 0
	for _, d := range cluster.Rank(name, up) {
		if seen[d.Node] {
			continue
		}
		if d.Node == n.cfg.ID {
			return time.Duration(rank) * n.cfg.HeadTTL
		}
		seen[d.Node] = true
		rank++
	}
	return time.Duration(rank) * n.cfg.HeadTTL
}

// serve opens volume name's store on its devices, exports it, and
// returns when the head is lost.
func (n *Node) serve(ctx context.Context, name string, h *cluster.Head) (err error) {
	defer func() {
		if err != nil {
			n.release(h)
		}
	}()
	v, _, err := n.cfg.Map.Volume(ctx, name)
	if err != nil {
		return err
	}
	g, err := chunkstore.ParseGeometry(v.Geometry)
	if err != nil {
		return err
	}
	nodes, _, err := n.cfg.Map.Nodes(ctx)
	if err != nil {
		return err
	}
	epoch := func() uint64 { return uint64(h.Epoch) }
	fss := make([]vfs.FS, len(v.Shards))
	for i, ref := range v.Shards {
		fss[i] = n.deviceFS(ctx, nodes, ref, name, epoch)
	}
	store, err := chunkstore.OpenOrCreate(fss, chunkstore.WithGeometry(g), chunkstore.WithMetaLog(), chunkstore.WithLogger(n.log))
	if err != nil {
		return err
	}
	dev, err := ecvolume.OpenOrCreate(store, "data", int64(v.Size))
	if err != nil {
		store.Close()
		return err
	}
	ex, err := n.export(v)
	if err == nil && dev.Size() != ex.dev.size {
		err = fmt.Errorf("cluster: volume %s holds %d bytes, the map says %d", name, dev.Size(), ex.dev.size)
	}
	if err != nil {
		dev.Sync()
		store.Close()
		return err
	}
	ex.dev.attach(dev, h)
	n.setANA(ex.sub, nvmeof.ANAOptimized)
	n.log.Info("cluster: serving volume", "volume", name, "epoch", h.Epoch)
	n.mu.Lock()
	vs := &served{name: name, head: h, store: store, have: slices.Clone(v.Shards), fss: fss, retries: retries{}}
	n.served[name] = vs
	n.mu.Unlock()
	mctx, stopMaintain := context.WithCancel(ctx)
	maintained := make(chan struct{})
	go func() {
		defer close(maintained)
		var wg sync.WaitGroup
		wg.Go(func() { n.report(mctx, vs) })
		n.maintain(mctx, vs)
		wg.Wait()
	}()
	select {
	case <-h.Lost():
		n.log.Warn("cluster: lost volume", "volume", name, "err", h.Err())
	case <-ctx.Done():
	}
	// Hosts are sent elsewhere first, then what runs drains.
	n.setANA(ex.sub, nvmeof.ANAInaccessible)
	ex.dev.detach()
	stopMaintain()
	<-maintained
	n.mu.Lock()
	delete(n.served, name)
	n.mu.Unlock()
	if err := dev.Sync(); err != nil {
		n.log.Warn("cluster: syncing the volume", "volume", name, "err", err)
	}
	store.Close()
	n.release(h)
	return nil
}

// release gives a head up, waiting for etcd at most a TTL: the lease
// runs out by itself anyway.
func (n *Node) release(h *cluster.Head) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HeadTTL)
	defer cancel()
	if err := h.Release(ctx); err != nil {
		n.log.Debug("cluster: releasing the head", "volume", h.Volume, "err", err)
	}
}

// deviceFS reaches volume vol's directory on device ref: through the
// device's node's internal subsystem, or for this node's own devices
// through their device services directly (devsvc.NewLocal); either way
// every change passes the device's fence.
func (n *Node) deviceFS(ctx context.Context, nodes []cluster.Node, ref cluster.DeviceRef, vol string, epoch func() uint64) vfs.FS {
	if srv := n.servers[ref.Device]; ref.Node == n.cfg.ID && srv != nil {
		f, err := devsvc.NewLocal(srv, vol, devsvc.WithEpoch(epoch))
		if err != nil {
			return missing(ref.String())
		}
		if err := f.MkdirAll("."); err != nil {
			n.log.Warn("cluster: device unusable", "device", ref.String(), "err", err)
		}
		return f
	}
	i := slices.IndexFunc(nodes, func(p cluster.Node) bool { return p.ID == ref.Node })
	if i < 0 {
		return missing(fmt.Sprintf("%s (not in the map)", ref))
	}
	nsid := slices.IndexFunc(nodes[i].Devices, func(d cluster.Device) bool { return d.ID == ref.Device }) + 1
	if nsid == 0 {
		return missing(fmt.Sprintf("%s (not in the map)", ref))
	}
	ctrl, err := n.ctrl(ctx, nodes[i])
	if err != nil {
		n.log.Warn("cluster: device unreachable", "device", ref.String(), "err", err)
		return missing(ref.String())
	}
	f, err := devsvc.New(ctrl, uint32(nsid), vol, devsvc.WithEpoch(epoch))
	if err != nil {
		return missing(ref.String())
	}
	if err := f.MkdirAll("."); err != nil {
		n.log.Warn("cluster: device unusable", "device", ref.String(), "err", err)
	}
	return f
}

// ctrl returns the controller to a peer's internal subsystem.
func (n *Node) ctrl(ctx context.Context, p cluster.Node) (*host.Controller, error) {
	n.mu.Lock()
	c := n.ctrls[p.ID]
	n.mu.Unlock()
	if c != nil && c.State() != host.StateDead {
		return c, nil
	}
	var lastErr error
	for _, addr := range p.Addrs {
		dctx, cancel := context.WithTimeout(ctx, n.cfg.DeviceTimeout)
		c, err := host.Dial(dctx, addr, host.WithSubsystem(InternalNQN(p.ID)), host.WithHostNQN(HostNQN(n.cfg.ID)),
			host.WithCtrlLossTimeout(n.cfg.DeviceTimeout), host.WithReconnectDelay(100*time.Millisecond, time.Second))
		cancel()
		if err == nil {
			n.mu.Lock()
			n.ctrls[p.ID] = c
			n.mu.Unlock()
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// Serving returns the names of the volumes this node heads.
func (n *Node) Serving() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for name := range n.served {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Close stops serving (each head released, so that another node takes
// over at once), removes the volumes' subsystems, leaves the map's live
// set and closes the peer connections. The internal subsystem stays on the target, which the
// caller closes.
func (n *Node) Close() error {
	n.cancel()
	n.wg.Wait()
	n.syncExports(nil)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HeadTTL)
	defer cancel()
	err := n.member.Close(ctx)
	n.mu.Lock()
	for id, c := range n.ctrls {
		c.Close()
		delete(n.ctrls, id)
	}
	n.mu.Unlock()
	return err
}

// missing is a device that cannot be reached: every operation fails, so
// the store counts it out and serves degraded.
type missing string

func (m missing) err(name string) error {
	return &os.PathError{Op: "cluster", Path: name, Err: fmt.Errorf("device %s unreachable", string(m))}
}
func (m missing) OpenFile(name string, _ int) (vfs.File, error) { return nil, m.err(name) }
func (m missing) Rename(o, _ string) error                      { return m.err(o) }
func (m missing) Remove(name string) error                      { return m.err(name) }
func (m missing) MkdirAll(name string) error                    { return m.err(name) }
func (m missing) SyncDir(name string) error                     { return m.err(name) }
func (m missing) Stat(name string) (os.FileInfo, error)         { return nil, m.err(name) }
func (m missing) List(name string) ([]string, error)            { return nil, m.err(name) }
func (m missing) HostPath(string) (string, error)               { return "", vfs.ErrNotSupported }
func (m missing) String() string                                { return string(m) }
