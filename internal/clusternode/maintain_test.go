package clusternode

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// volumeIO writes and reads the volume through its head.
func volumeIO(t *testing.T, ctx context.Context, h *testNode, off int64, write []byte, check []byte) {
	t.Helper()
	c, err := host.Dial(ctx, h.addr, host.WithSubsystem(VolumeNQN("v")))
	require.NoError(t, err)
	defer c.Close()
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	if write != nil {
		_, err = ns.WriteAt(write, off)
		require.NoError(t, err)
		require.NoError(t, ns.Flush())
	}
	if check != nil {
		got := make([]byte, len(check))
		_, err = ns.ReadAt(got, off)
		require.NoError(t, err)
		require.True(t, bytes.Equal(check, got), "the volume reads back other bytes through %s", h.id)
	}
}

// settled waits until the head serves v with every position healthy on
// the map's devices and no rebuild running.
func settled(t *testing.T, head *testNode, until func(cluster.Volume) bool) cluster.Volume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		v, _, err := head.cli.Volume(ctx, "v")
		require.NoError(t, err)
		head.node.mu.Lock()
		vs := head.node.served["v"]
		head.node.mu.Unlock()
		if vs != nil && len(head.node.Rebuilds()) == 0 && until(v) {
			ok := true
			for i, d := range vs.store.Info().Devices {
				if d.State != chunkstore.DeviceHealthy || vs.have[i] != v.Shards[i] {
					ok = false
				}
			}
			if ok {
				return v
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the volume did not settle")
	return cluster.Volume{}
}

// TestClusterMaintenance: a node that held a shard and comes back is
// rebuilt in place; a drained node's shard moves to the node that has
// none; the drained node then leaves the map; every byte reads back.
func TestClusterMaintenance(t *testing.T) {
	e, err := cluster.StartEmbedded(cluster.EmbedOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	dir := t.TempDir()
	nodes := map[string]*testNode{}
	for i := range 4 {
		id := fmt.Sprintf("n%d", i)
		nodes[id] = startNode(t, e.Endpoints(), id, dir)
	}
	var all []*testNode
	for _, n := range nodes {
		all = append(all, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	v, err := nodes["n0"].cli.CreateVolume(ctx, cluster.Volume{Name: "v", Geometry: "2+1", Size: 32 << 20})
	require.NoError(t, err)
	head := headOf(t, all, "v", "")
	r := rand.New(rand.NewPCG(1, 1))
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	volumeIO(t, ctx, head, 0, data, data)

	// A shard holder that is not the head crashes; more writes land
	// degraded; it comes back with its files as they were, stale.
	var gone *testNode
	for _, d := range v.Shards {
		if d.Node != head.id {
			gone = nodes[d.Node]
			break
		}
	}
	gone.crash()
	more := make([]byte, 1<<20)
	for i := range more {
		more[i] = byte(r.Uint32())
	}
	copy(data[2<<20:], more)
	// Wait for the head to give the device up, then write.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c, err := host.Dial(ctx, head.addr, host.WithSubsystem(VolumeNQN("v")))
		require.NoError(t, err)
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		_, werr := ns.WriteAt(more, 2<<20)
		ferr := ns.Flush()
		c.Close()
		if werr == nil && ferr == nil {
			break
		}
	}
	nodes[gone.id] = startNode(t, e.Endpoints(), gone.id, dir)
	settled(t, head, func(cluster.Volume) bool { return true })
	volumeIO(t, ctx, head, 0, nil, data)
	finished, rebuilt := head.node.RebuildTotals()
	require.Equal(t, int64(1), finished, "the returning node's position, rebuilt in place")
	require.Positive(t, rebuilt)

	// Drain a shard holder that is not the head: its position moves to
	// the fourth node, and it can leave.
	var drained string
	for _, d := range v.Shards {
		if d.Node != head.id {
			drained = d.Node
			break
		}
	}
	require.NoError(t, head.cli.UpdateNode(ctx, drained, func(n *cluster.Node) error { n.State = cluster.Draining; return nil }))
	after := settled(t, head, func(x cluster.Volume) bool { return !x.Holds(drained) })
	require.False(t, after.Holds(drained))
	volumeIO(t, ctx, head, 0, nil, data)
	require.NoError(t, head.cli.RemoveNode(ctx, drained))
}

// TestRetries: a position rebuilt in place three times within the hour
// waits 2, 4, 8, … maintenance periods before the next, at most half an
// hour; an hour later it starts afresh.
func TestRetries(t *testing.T) {
	r := retries{}
	t0 := time.Unix(1_800_000_000, 0)
	every := 2 * time.Second
	for i := range 3 {
		now := t0.Add(time.Duration(i) * every)
		require.True(t, r.due(1, now, every))
		require.Equal(t, i+1, r.note(1, now))
	}
	last := t0.Add(2 * every)
	require.False(t, r.due(1, last.Add(every), every))
	require.True(t, r.due(1, last.Add(2*every), every))
	require.Equal(t, 4, r.note(1, last.Add(2*every)))
	last = last.Add(2 * every)
	require.False(t, r.due(1, last.Add(3*every), every))
	require.True(t, r.due(1, last.Add(4*every), every))
	require.True(t, r.due(2, last, every), "another position is not held back")
	for range 30 {
		r.note(1, last)
	}
	require.False(t, r.due(1, last.Add(29*time.Minute), every))
	require.True(t, r.due(1, last.Add(30*time.Minute), every), "at most half an hour")
	require.True(t, r.due(1, last.Add(61*time.Minute), every))
	require.Equal(t, 1, r.note(1, last.Add(61*time.Minute)), "an hour later it starts afresh")
}
