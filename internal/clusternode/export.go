package clusternode

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// export is a volume's subsystem on this node. Every node serves every
// volume of the map as namespace 1 of VolumeNQN, one path of it each:
// the head's listeners report the namespace's ANA group Optimized, every
// other node's Inaccessible, so that a host connected to all of them
// (Linux or SPDK multipath, host.DialMultipath) sends its I/O to the
// head and follows it when it moves.
type export struct {
	name string
	sub  *target.Subsystem
	dev  *volumeDev
}

// errStandby is the answer of a node that does not head the volume, to a
// command that got past the ANA state (sent just as it changed).
var errStandby = fmt.Errorf("cluster: this node does not head the volume: %w", nvmeof.StatusANAInaccessible)

// volumeDev is an export's device: the head's volume while this node
// heads it, nothing otherwise. Writes, FUA writes, Write Zeroes, Discard
// and Flush are refused with ANA Transition once the head's lease is no
// longer known to be held (Head.Valid), so that the host retries them,
// here once the lease is renewed or on the next head.
type volumeDev struct {
	size int64
	// mu is held shared by every command for its whole run, and
	// exclusively by attach and detach, so that detach returns when
	// nothing runs on the volume any more.
	mu   sync.RWMutex
	dev  blockdev.Device // nil unless this node heads the volume
	head *cluster.Head
}

func (d *volumeDev) attach(dev blockdev.Device, h *cluster.Head) {
	d.mu.Lock()
	d.dev, d.head = dev, h
	d.mu.Unlock()
}

// detach takes the volume away once every command on it has finished.
func (d *volumeDev) detach() {
	d.mu.Lock()
	d.dev, d.head = nil, nil
	d.mu.Unlock()
}

// writable returns the device if it may be changed. d.mu is held.
func (d *volumeDev) writable() (blockdev.Device, error) {
	if d.dev == nil {
		return nil, errStandby
	}
	if err := d.head.Valid(); err != nil {
		return nil, fmt.Errorf("%w: %w", err, nvmeof.StatusANATransition)
	}
	return d.dev, nil
}

func (d *volumeDev) Size() int64 { return d.size }

func (d *volumeDev) ReadAt(p []byte, off int64) (int, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.dev == nil {
		return 0, errStandby
	}
	return d.dev.ReadAt(p, off)
}

func (d *volumeDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	dev, err := d.writable()
	if err != nil {
		return 0, err
	}
	return dev.WriteAt(p, off)
}

func (d *volumeDev) WriteAtFUA(p []byte, off int64) (int, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	dev, err := d.writable()
	if err != nil {
		return 0, err
	}
	return dev.(blockdev.FUAWriter).WriteAtFUA(p, off)
}

// Sync of a node that does not head the volume has nothing to do: the
// volume was synced when this node last stopped heading it (serve), and
// a host's Flush through a standby path is refused by its ANA state
// before it gets here.
func (d *volumeDev) Sync() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.dev == nil {
		return nil
	}
	dev, err := d.writable()
	if err != nil {
		return err
	}
	return dev.Sync()
}

func (d *volumeDev) WriteZeroes(off, n int64) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	dev, err := d.writable()
	if err != nil {
		return err
	}
	return dev.(blockdev.WriteZeroer).WriteZeroes(off, n)
}

func (d *volumeDev) Discard(off, n int64) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	dev, err := d.writable()
	if err != nil {
		return err
	}
	return dev.(blockdev.Discarder).Discard(off, n)
}

var (
	_ blockdev.FUAWriter   = (*volumeDev)(nil)
	_ blockdev.WriteZeroer = (*volumeDev)(nil)
	_ blockdev.Discarder   = (*volumeDev)(nil)
)

// volumeIDs are the namespace's UUID and NGUID: the volume's UUID from
// the map (both the same 16 bytes), or for a volume that has none a hash
// of its name, so that every node reports the same.
func volumeIDs(v cluster.Volume) (id [16]byte) {
	if u, err := uuid.Parse(v.UUID); err == nil {
		return u
	}
	sum := sha256.Sum256([]byte("capsule cluster volume " + v.Name))
	copy(id[:], sum[:])
	return id
}

// export returns volume v's export, making it (every listener
// Inaccessible) if this node has none yet, with the volume's hosts
// allowed.
func (n *Node) export(v cluster.Volume) (*export, error) {
	n.exportMu.Lock()
	defer n.exportMu.Unlock()
	n.mu.Lock()
	ex := n.exports[v.Name]
	n.mu.Unlock()
	if ex != nil {
		applyHosts(ex.sub, v.Hosts)
		return ex, nil
	}
	nqn := VolumeNQN(v.Name)
	lo, hi := cluster.CNTLIDRange(n.index)
	sub, err := n.cfg.Target.AddSubsystem(target.SubsystemConfig{NQN: nqn, AllowAnyHost: len(v.Hosts) == 0, Hosts: v.Hosts,
		MinCNTLID: lo, MaxCNTLID: hi})
	if err != nil {
		return nil, err
	}
	n.setANA(sub, nvmeof.ANAInaccessible)
	ex = &export{name: v.Name, sub: sub, dev: &volumeDev{size: int64(v.Size)}}
	id := volumeIDs(v)
	if _, err := sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: ex.dev, BlockSize: 4096, UUID: id, NGUID: id}); err != nil {
		n.cfg.Target.RemoveSubsystem(nqn)
		return nil, err
	}
	n.mu.Lock()
	n.exports[v.Name] = ex
	n.mu.Unlock()
	return ex, nil
}

// applyHosts makes sub's allow-list hosts, or any host when there are
// none. The subsystem changes (and tells) only what differs.
func applyHosts(sub *target.Subsystem, hosts []string) {
	sub.SetAllowAnyHost(len(hosts) == 0)
	for _, h := range hosts {
		_ = sub.AllowHost(h) // checked by the map
	}
	for _, h := range sub.Hosts() {
		if !slices.Contains(hosts, h) {
			sub.DisallowHost(h)
		}
	}
}

// setANA sets the state of every ANA group of sub on every listener of
// the target.
func (n *Node) setANA(sub *target.Subsystem, st nvmeof.ANAState) {
	for _, url := range n.cfg.Target.Listeners() {
		if err := sub.SetANAState(url, 0, st); err != nil && !errors.Is(err, target.ErrNoListener) {
			n.log.Warn("cluster: setting the ANA state", "subnqn", sub.NQN(), "listener", url, "err", err)
		}
	}
}

// syncExports exports the volumes of the map this node does not export
// yet, and removes the exports of volumes the map no longer has.
func (n *Node) syncExports(vols []cluster.Volume) {
	for _, v := range vols {
		if _, err := n.export(v); err != nil && n.ctx.Err() == nil {
			n.log.Warn("cluster: exporting volume", "volume", v.Name, "err", err)
		}
	}
	n.exportMu.Lock()
	defer n.exportMu.Unlock()
	n.mu.Lock()
	var gone []*export
	for name, ex := range n.exports {
		_, serving := n.served[name]
		if !serving && !slices.ContainsFunc(vols, func(v cluster.Volume) bool { return v.Name == name }) {
			gone = append(gone, ex)
			delete(n.exports, name)
		}
	}
	n.mu.Unlock()
	for _, ex := range gone {
		if _, err := n.cfg.Target.RemoveSubsystem(VolumeNQN(ex.name)); err != nil {
			n.log.Debug("cluster: removing a volume's export", "volume", ex.name, "err", err)
		}
	}
}

// advertise puts the other live nodes' paths to every volume in this
// node's discovery log, with referrals to their discovery subsystems, so
// that a host that discovers through any node finds every path, the
// head's among them.
func (n *Node) advertise(ctx context.Context, vols []cluster.Volume) {
	nodes, _, err := n.cfg.Map.Nodes(ctx)
	if err != nil {
		return
	}
	live, err := n.cfg.Map.Live(ctx)
	if err != nil {
		return
	}
	var entries []target.RemoteEntry
	for _, p := range nodes {
		if p.ID == n.cfg.ID || !live[p.ID] {
			continue
		}
		for i, url := range p.Addrs {
			port := p.Index<<4 | uint16(i&0xf)
			entries = append(entries, target.RemoteEntry{NQN: nvmeof.DiscoveryNQN, URL: url, PortID: port})
			for _, v := range vols {
				entries = append(entries, target.RemoteEntry{NQN: VolumeNQN(v.Name), URL: url, PortID: port})
			}
		}
	}
	if err := n.cfg.Target.SetRemoteEntries(entries); err != nil {
		n.log.Warn("cluster: the discovery log's entries for peers", "err", err)
	}
}
