package clusternode

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/internal/devsvc"
)

// RebuildStatus is a position of a served volume being filled on a
// device: a node's device brought back, a dead one's replaced, or a
// position moved by the rebalancer.
type RebuildStatus struct {
	Volume   string            `json:"volume"`
	Position int               `json:"position"`
	From     cluster.DeviceRef `json:"from"`
	To       cluster.DeviceRef `json:"to"`
	Stripes  int64             `json:"stripes"`
	Done     int64             `json:"done"`
	Bytes    int64             `json:"bytes"`
	Started  time.Time         `json:"started"`
}

// ShardIO is the remote I/O of one position of a volume this node heads,
// since its store was opened.
type ShardIO struct {
	Volume   string
	Epoch    int64
	Position int
	Device   cluster.DeviceRef
	// Kinds are the commands sent to the device, indexed by devsvc.Kind;
	// nil for a device the store could not reach at all.
	Kinds []devsvc.KindStats
}

// ShardIO returns the remote I/O of every position of every volume this
// node heads.
func (n *Node) ShardIO() []ShardIO {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []ShardIO
	for _, vs := range n.served {
		vs.mu.Lock()
		for i, f := range vs.fss {
			io := ShardIO{Volume: vs.name, Epoch: vs.head.Epoch, Position: i, Device: vs.have[i]}
			if d, ok := f.(*devsvc.FS); ok {
				io.Kinds = d.Stats()
			}
			out = append(out, io)
		}
		vs.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b ShardIO) int {
		return cmp.Or(strings.Compare(a.Volume, b.Volume), a.Position-b.Position)
	})
	return out
}

// RebuildTotals returns the positions this node rebuilt to the end since
// Start, and the data its rebuilds reconstructed, running ones included.
func (n *Node) RebuildTotals() (finished, bytes int64) {
	return n.rebuildsFinished.Load(), n.rebuiltBytes.Load()
}

// inPlaceWarn is how many rebuilds in place of one position within an
// hour make the head warn and back off: a device that fails again each
// time it is rebuilt is failing for good, and rebuilding it over and
// over costs the other devices' reads for nothing. After k ≥ 3 of them
// the next waits 2^(k−2) maintenance periods after the last, at most
// half an hour.
const inPlaceWarn = 3

// retries keeps each position's recent rebuilds in place.
type retries map[int][]time.Time

// note records a rebuild in place of pos at now and returns how many
// there were within the hour, this one included.
func (r retries) note(pos int, now time.Time) int {
	recent := slices.DeleteFunc(r[pos], func(t time.Time) bool { return now.Sub(t) > time.Hour })
	r[pos] = append(recent, now)
	return len(r[pos])
}

// due reports whether pos may be rebuilt in place at now.
func (r retries) due(pos int, now time.Time, every time.Duration) bool {
	recent := slices.DeleteFunc(r[pos], func(t time.Time) bool { return now.Sub(t) > time.Hour })
	r[pos] = recent
	if len(recent) < inPlaceWarn {
		return true
	}
	wait := every << min(len(recent)-inPlaceWarn+1, 20)
	return now.Sub(recent[len(recent)-1]) >= min(wait, 30*time.Minute)
}

// VolumeReport is what a head reports of a volume it serves, in the map
// (cluster.Head.Report), so that cluster_get_status on any node shows
// it: its store's health and the rebuild it runs.
type VolumeReport struct {
	Node     string `json:"node"`
	Degraded bool   `json:"degraded"`
	// Out are the positions out of use (missing, failed, rebuilding).
	Out     []int          `json:"out,omitempty"`
	Rebuild *RebuildStatus `json:"rebuild,omitempty"`
}

// volumeReport is vs's report now.
func (n *Node) volumeReport(vs *served) VolumeReport {
	r := VolumeReport{Node: n.cfg.ID}
	in := vs.store.Info()
	r.Degraded = in.Degraded
	for i, d := range in.Devices {
		if d.State != chunkstore.DeviceHealthy {
			r.Out = append(r.Out, i)
		}
	}
	vs.mu.Lock()
	if vs.rebuild != nil {
		rb := *vs.rebuild
		r.Rebuild = &rb
	}
	vs.mu.Unlock()
	return r
}

// report puts vs's report in the map every second that it changed, until
// ctx ends (the key goes with the head's lease).
func (n *Node) report(ctx context.Context, vs *served) {
	var last []byte
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		r := n.volumeReport(vs)
		if b, _ := json.Marshal(r); !bytes.Equal(b, last) {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if err := vs.head.Report(rctx, r); err == nil {
				last = b
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Rebuilds returns the rebuilds this node runs now.
func (n *Node) Rebuilds() []RebuildStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := []RebuildStatus{}
	for _, vs := range n.served {
		vs.mu.Lock()
		if vs.rebuild != nil {
			out = append(out, *vs.rebuild)
		}
		vs.mu.Unlock()
	}
	return out
}

// maintain is the head's background work on a served volume, every
// MaintainEvery until ctx ends: one step of maintainOnce at a time.
func (n *Node) maintain(ctx context.Context, vs *served) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.cfg.MaintainEvery):
		}
		if err := n.maintainOnce(ctx, vs); err != nil && ctx.Err() == nil {
			n.log.Warn("cluster: volume maintenance", "volume", vs.name, "err", err)
		}
	}
}

// maintainOnce does the first thing a volume needs, in this order:
//
//  1. a position the map gives another device than the store uses: move
//     it there (the rebalancer recorded the move in the map first, so a
//     new head resumes it);
//  2. a position out of use whose device's node is live: rebuild it
//     there, in place (a node that came back, a device that failed);
//  3. a move of the volume's plan (cluster.Plan: a new node, a drained
//     one), recorded in the map: one of a position out of use first,
//     any other only when every position is in use.
func (n *Node) maintainOnce(ctx context.Context, vs *served) error {
	v, _, err := n.cfg.Map.Volume(ctx, vs.name)
	if err != nil {
		return err
	}
	nodes, _, err := n.cfg.Map.Nodes(ctx)
	if err != nil {
		return err
	}
	live, err := n.cfg.Map.Live(ctx)
	if err != nil {
		return err
	}
	if len(v.Shards) != len(vs.have) {
		return fmt.Errorf("the map gives %d positions, the store has %d", len(v.Shards), len(vs.have))
	}
	for pos, want := range v.Shards {
		if want != vs.have[pos] && live[want.Node] {
			return n.fill(ctx, vs, pos, want, nodes)
		}
	}
	info := vs.store.Info()
	healthy := true
	for pos, d := range info.Devices {
		if d.State == chunkstore.DeviceHealthy {
			continue
		}
		healthy = false
		if want := v.Shards[pos]; want == vs.have[pos] && live[want.Node] {
			now := time.Now()
			if !vs.retries.due(pos, now, n.cfg.MaintainEvery) {
				continue
			}
			if k := vs.retries.note(pos, now); k >= inPlaceWarn {
				n.log.Warn("cluster: a position keeps failing on its device; drain its node to move it elsewhere",
					"volume", vs.name, "position", pos, "device", want.String(), "rebuilds_this_hour", k)
			}
			return n.fill(ctx, vs, pos, want, nodes)
		}
	}
	_, moves, err := cluster.Plan(v, nodes)
	if err != nil || len(moves) == 0 {
		return err
	}
	// A position out of use moves first and at any time (it costs no
	// redundancy); one in use only when every position is.
	i := slices.IndexFunc(moves, func(m cluster.Move) bool {
		return info.Devices[m.Position].State != chunkstore.DeviceHealthy
	})
	if i < 0 {
		if !healthy {
			return nil
		}
		i = 0
	}
	m := moves[i]
	_, err = n.cfg.Map.UpdateVolume(ctx, vs.name, func(x *cluster.Volume) error {
		if x.Shards[m.Position] != m.From {
			return fmt.Errorf("%w: position %d moved meanwhile", cluster.ErrConflict, m.Position)
		}
		x.Shards[m.Position] = m.To
		return nil
	})
	if err == nil {
		n.log.Info("cluster: moving a position", "volume", vs.name, "position", m.Position, "from", m.From.String(), "to", m.To.String())
	}
	return err
}

// fill rebuilds position pos of the store onto device want: out of use
// first (Retire) if it is still in use, then the volume's directory on
// want emptied unless a rebuild onto it is under way, then Rebuild.
func (n *Node) fill(ctx context.Context, vs *served, pos int, want cluster.DeviceRef, nodes []cluster.Node) error {
	fsys := n.deviceFS(ctx, nodes, want, vs.name, func() uint64 { return uint64(vs.head.Epoch) })
	if _, ok := fsys.(missing); ok {
		return fmt.Errorf("position %d: device %s unreachable", pos, want)
	}
	st := vs.store.Info().Devices[pos].State
	resume := st == chunkstore.DeviceRebuilding && want == vs.have[pos]
	if st == chunkstore.DeviceHealthy {
		if err := vs.store.Retire(pos); err != nil {
			return err
		}
	}
	opts := chunkstore.RebuildOptions{FS: fsys, BytesPerSecond: max(n.cfg.RebuildRate, 0)}
	if resume {
		opts.FS = nil
	} else {
		// A device that comes back, or held this volume before, keeps
		// an old identity there: the rebuild needs the directory empty.
		names, err := fsys.List(".")
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := fsys.Remove(name); err != nil {
				return err
			}
		}
	}
	rs := &RebuildStatus{Volume: vs.name, Position: pos, From: vs.have[pos], To: want, Started: time.Now()}
	vs.mu.Lock()
	vs.rebuild = rs
	vs.mu.Unlock()
	defer func() {
		vs.mu.Lock()
		vs.rebuild = nil
		vs.mu.Unlock()
	}()
	opts.Progress = func(p chunkstore.Progress) {
		vs.mu.Lock()
		n.rebuiltBytes.Add(p.Bytes - rs.Bytes)
		rs.Stripes, rs.Done, rs.Bytes = p.Stripes, p.Done, p.Bytes
		vs.mu.Unlock()
	}
	n.log.Info("cluster: rebuilding a position", "volume", vs.name, "position", pos, "from", vs.have[pos].String(), "to", want.String())
	rep, err := vs.store.Rebuild(ctx, pos, opts)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil // resumed by the next head, or the next round
		}
		return err
	}
	vs.mu.Lock()
	vs.have[pos] = want
	vs.fss[pos] = fsys
	vs.mu.Unlock()
	n.rebuildsFinished.Add(1)
	n.log.Info("cluster: position rebuilt", "volume", vs.name, "position", pos, "device", want.String(),
		"stripes", rep.Rebuilt, "unrecoverable", rep.Unrecoverable, "took", time.Since(rs.Started).Round(time.Millisecond))
	return nil
}
