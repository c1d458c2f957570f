package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMapNodes(t *testing.T) {
	m := testMap(t)
	ctx := ctxFor(t)
	nodes := addNodes(t, m, 3)
	assert.ErrorIs(t, m.AddNode(ctx, nodes[1]), ErrExists)
	assert.ErrorIs(t, m.AddNode(ctx, Node{ID: "bad id", Addrs: []string{"tcp://x"}}), ErrInvalid)

	got, _, err := m.Nodes(ctx)
	require.NoError(t, err)
	assert.Equal(t, nodes, got)
	for i, n := range nodes {
		assert.Equal(t, uint16(i+1), n.Index, "nodes are numbered from 1 as they come")
	}

	// Nodes added at once still get numbers of their own.
	var adds sync.WaitGroup
	for i := range 6 {
		adds.Go(func() {
			assert.NoError(t, m.AddNode(ctx, Node{ID: fmt.Sprintf("c%d", i), Addrs: []string{"tcp://10.0.1.1:4420"}}))
		})
	}
	adds.Wait()
	all, _, err := m.Nodes(ctx)
	require.NoError(t, err)
	seen := map[uint16]string{}
	for _, n := range all {
		assert.NotContains(t, seen, n.Index, "%s and %s", n.ID, seen[n.Index])
		seen[n.Index] = n.ID
	}
	assert.Len(t, seen, 9)
	lo, hi := CNTLIDRange(2)
	assert.Equal(t, [2]uint16{1001, 2000}, [2]uint16{lo, hi})
	lo, hi = CNTLIDRange(65)
	assert.LessOrEqual(t, hi, uint16(0xFFEF), "within MaxCNTLID")
	assert.Equal(t, uint16(64001), lo)

	// Concurrent updates all land: each adds a device.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			assert.NoError(t, m.UpdateNode(ctx, "n1", func(n *Node) error {
				n.Devices = append(n.Devices, Device{ID: fmt.Sprintf("x%d", i), Capacity: 1 << 30})
				return nil
			}))
		})
	}
	wg.Wait()
	n1, _, err := m.Node(ctx, "n1")
	require.NoError(t, err)
	assert.Len(t, n1.Devices, 2+8)
	_, _, err = m.Node(ctx, "n9")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestMapVolumes(t *testing.T) {
	m := testMap(t)
	ctx := ctxFor(t)
	addNodes(t, m, 5)
	_, err := m.CreateVolume(ctx, Volume{Name: "v0", Geometry: "4+2", Size: 1 << 30})
	assert.ErrorIs(t, err, ErrTooFewDomains, "five nodes cannot hold six shards apart")
	addNodes6 := nodesOf(6, 2, 0)[5]
	require.NoError(t, m.AddNode(ctx, addNodes6))

	v, err := m.CreateVolume(ctx, Volume{Name: "v0", Geometry: "4+2", Size: 1 << 30})
	require.NoError(t, err)
	assert.Len(t, v.Shards, 6)
	got, _, err := m.Volume(ctx, "v0")
	require.NoError(t, err)
	assert.Equal(t, v, got)
	_, err = m.CreateVolume(ctx, Volume{Name: "v0", Geometry: "4+2", Size: 1 << 30})
	assert.ErrorIs(t, err, ErrExists)
	_, err = m.CreateVolume(ctx, Volume{Name: "v1", Geometry: "2+1", Size: 1 << 20,
		Shards: []DeviceRef{{"n0", "d0"}, {"n1", "d0"}, {"nX", "d0"}}})
	assert.ErrorIs(t, err, ErrInvalid, "a shard on a node not in the map")

	// Concurrent updates of one volume all land.
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			_, err := m.UpdateVolume(ctx, "v0", func(v *Volume) error { v.Size += 1 << 20; return nil })
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	got, _, err = m.Volume(ctx, "v0")
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<30+5<<20), got.Size)

	vols, err := m.Volumes(ctx)
	require.NoError(t, err)
	assert.Len(t, vols, 1)

	// A served volume cannot be deleted.
	h, err := m.AcquireHead(ctx, "v0", "n0", HeadOptions{TTL: 5 * time.Second})
	require.NoError(t, err)
	assert.ErrorIs(t, m.DeleteVolume(ctx, "v0"), ErrInUse)
	require.NoError(t, h.Release(ctx))
	require.NoError(t, m.DeleteVolume(ctx, "v0"))
	assert.ErrorIs(t, m.DeleteVolume(ctx, "v0"), ErrNotFound)
}

// TestMapRemoveNode: a node leaves only drained, holding no shard and
// serving nothing; draining then moving its shards (Plan) frees it.
func TestMapRemoveNode(t *testing.T) {
	m := testMap(t)
	ctx := ctxFor(t)
	addNodes(t, m, 7)
	var held []string
	for i := range 6 {
		v, err := m.CreateVolume(ctx, Volume{Name: fmt.Sprintf("v%d", i), Geometry: "4+2", Size: 1 << 30})
		require.NoError(t, err)
		if v.Holds("n2") {
			held = append(held, v.Name)
		}
	}
	require.NotEmpty(t, held, "no volume on n2: pick more volumes")
	assert.ErrorIs(t, m.RemoveNode(ctx, "n2"), ErrInUse, "an active node")
	require.NoError(t, m.UpdateNode(ctx, "n2", func(n *Node) error { n.State = Draining; return nil }))
	assert.ErrorIs(t, m.RemoveNode(ctx, "n2"), ErrInUse, "a node that holds shards")

	nodes, _, err := m.Nodes(ctx)
	require.NoError(t, err)
	for _, name := range held {
		_, err := m.UpdateVolume(ctx, name, func(v *Volume) error {
			target, moves, err := Plan(*v, nodes)
			if err != nil {
				return err
			}
			require.NotEmpty(t, moves)
			v.Shards = target
			return nil
		})
		require.NoError(t, err)
	}
	h, err := m.AcquireHead(ctx, held[0], "n2", HeadOptions{TTL: 5 * time.Second})
	require.NoError(t, err)
	assert.ErrorIs(t, m.RemoveNode(ctx, "n2"), ErrInUse, "a node that serves a volume")
	require.NoError(t, h.Release(ctx))
	require.NoError(t, m.RemoveNode(ctx, "n2"))
	_, _, err = m.Node(ctx, "n2")
	assert.ErrorIs(t, err, ErrNotFound)

	// The next node takes the number n2 left.
	require.NoError(t, m.AddNode(ctx, Node{ID: "n9", Addrs: []string{"tcp://10.0.0.9:4420"}}))
	n9, _, err := m.Node(ctx, "n9")
	require.NoError(t, err)
	assert.Equal(t, uint16(3), n9.Index)
}

func TestJoinAndLive(t *testing.T) {
	m := testMap(t)
	ctx := ctxFor(t)
	n := nodesOf(1, 1, 0)[0]
	mb, err := m.Join(ctx, n, 2*time.Second)
	require.NoError(t, err)
	live, err := m.Live(ctx)
	require.NoError(t, err)
	assert.True(t, live["n0"])
	// The lease is kept alive beyond its TTL.
	time.Sleep(3 * time.Second)
	live, err = m.Live(ctx)
	require.NoError(t, err)
	assert.True(t, live["n0"], "the member lease expired while the member ran")
	require.NoError(t, mb.Close(ctx))
	live, err = m.Live(ctx)
	require.NoError(t, err)
	assert.False(t, live["n0"])

	// A node that joins again keeps its state and takes its new addresses.
	require.NoError(t, m.UpdateNode(ctx, "n0", func(n *Node) error { n.State = Draining; return nil }))
	n.Addrs = []string{"tcp://10.9.9.9:4420"}
	mb, err = m.Join(ctx, n, 2*time.Second)
	require.NoError(t, err)
	defer mb.Close(ctx)
	got, _, err := m.Node(ctx, "n0")
	require.NoError(t, err)
	assert.Equal(t, Draining, got.State)
	assert.Equal(t, n.Addrs, got.Addrs)
}
