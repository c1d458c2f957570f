package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nodesOf makes n active nodes "n0".."n{n-1}" with devs devices of 1 TiB
// each, in domains "r0".."r{racks-1}" round robin (no domain if racks is 0).
func nodesOf(n, devs, racks int) []Node {
	var out []Node
	for i := range n {
		nd := Node{ID: fmt.Sprintf("n%d", i), Addrs: []string{fmt.Sprintf("tcp://10.0.0.%d:4420", i+1)}, State: Active}
		if racks > 0 {
			nd.Domain = fmt.Sprintf("r%d", i%racks)
		}
		for d := range devs {
			nd.Devices = append(nd.Devices, Device{ID: fmt.Sprintf("d%d", d), Capacity: 1 << 40})
		}
		out = append(out, nd)
	}
	return out
}

func TestPlaceDistinctAndDeterministic(t *testing.T) {
	nodes := nodesOf(8, 3, 0)
	for v := range 50 {
		name := fmt.Sprintf("vol%d", v)
		got, err := Place(name, 6, SpreadNode, nodes)
		require.NoError(t, err)
		require.Len(t, got, 6)
		seen := map[string]bool{}
		for _, d := range got {
			assert.False(t, seen[d.Node], "%s: two shards on node %s: %v", name, d.Node, got)
			seen[d.Node] = true
		}
		shuffled := slices.Clone(nodes)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		again, err := Place(name, 6, SpreadNode, shuffled)
		require.NoError(t, err)
		assert.Equal(t, got, again, "placement depends on the order of nodes")
	}
}

func TestPlaceDomains(t *testing.T) {
	// 12 nodes in 6 racks: spread by domain puts one shard per rack.
	nodes := nodesOf(12, 2, 6)
	rack := map[string]string{}
	for _, n := range nodes {
		rack[n.ID] = n.Domain
	}
	for v := range 50 {
		got, err := Place(fmt.Sprintf("v%d", v), 6, SpreadDomain, nodes)
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, d := range got {
			assert.False(t, seen[rack[d.Node]], "two shards in rack %s: %v", rack[d.Node], got)
			seen[rack[d.Node]] = true
		}
	}
	// Five racks cannot hold six shards apart; twelve nodes can.
	_, err := Place("v", 6, SpreadDomain, nodesOf(12, 2, 5))
	assert.ErrorIs(t, err, ErrTooFewDomains)
	_, err = Place("v", 6, SpreadNode, nodesOf(12, 2, 5))
	assert.NoError(t, err)
	_, err = Place("v", 6, SpreadNode, nodesOf(5, 4, 0))
	assert.ErrorIs(t, err, ErrTooFewDomains)
}

// placeAll places count volumes named v0.. with geometry 4+2.
func placeAll(t *testing.T, count int, nodes []Node) []Volume {
	var vols []Volume
	for i := range count {
		v := Volume{Name: fmt.Sprintf("v%d", i), Geometry: "4+2", Size: 1 << 30}
		shards, moves, err := Plan(v, nodes)
		require.NoError(t, err)
		require.Empty(t, moves)
		v.Shards = shards
		require.NoError(t, v.Validate())
		vols = append(vols, v)
	}
	return vols
}

func TestPlanAddNodeMovesOnlyToIt(t *testing.T) {
	const count = 300
	nodes := nodesOf(6, 2, 0)
	vols := placeAll(t, count, nodes)
	grown := append(slices.Clone(nodes), nodesOf(7, 2, 0)[6])
	moved := 0
	for _, v := range vols {
		target, moves, err := Plan(v, grown)
		require.NoError(t, err)
		for _, m := range moves {
			assert.Equal(t, "n6", m.To.Node, "a move to an old node: %+v", m)
			assert.Equal(t, v.Shards[m.Position], m.From)
			assert.Equal(t, target[m.Position], m.To)
		}
		for i := range v.Shards {
			if !slices.ContainsFunc(moves, func(m Move) bool { return m.Position == i }) {
				assert.Equal(t, v.Shards[i], target[i], "position %d changed without a move", i)
			}
		}
		moved += len(moves)
	}
	// The new node's fair share: 6 of 7 nodes' worth of positions per
	// volume means each node holds 6/7 of the volumes.
	fair := float64(count*6) / 7
	assert.InDelta(t, fair, float64(moved), fair*0.2, "shards moved to the new node")
	// Nothing else moves: exactly the shards the new node takes.
}

func TestPlanRemoveAndDrain(t *testing.T) {
	nodes := nodesOf(8, 2, 0)
	vols := placeAll(t, 200, nodes)
	for _, how := range []string{"remove", "drain"} {
		var after []Node
		for _, n := range nodes {
			if n.ID == "n3" {
				if how == "remove" {
					continue
				}
				n.State = Draining
			}
			after = append(after, n)
		}
		moved, held := 0, 0
		for _, v := range vols {
			if v.Holds("n3") {
				held++
			}
			target, moves, err := Plan(v, after)
			require.NoError(t, err)
			for _, m := range moves {
				assert.Equal(t, "n3", m.From.Node, "%s: a shard moved off a node that stays", how)
			}
			assert.False(t, Volume{Shards: target}.Holds("n3"), "%s: n3 still holds a shard", how)
			moved += len(moves)
		}
		assert.Equal(t, held, moved, "%s: every shard of n3 moves, nothing else", how)
	}
}

func TestPlaceBalance(t *testing.T) {
	nodes := nodesOf(8, 2, 0)
	// One node with twice the capacity per device.
	for i := range nodes[0].Devices {
		nodes[0].Devices[i].Capacity *= 2
	}
	per := map[string]int{}
	perDev := map[DeviceRef]int{}
	const count = 2000
	for _, v := range placeAll(t, count, nodes) {
		for _, d := range v.Shards {
			per[d.Node]++
			perDev[d]++
		}
	}
	// Equal nodes: within 10 % of their mean.
	mean := 0.0
	for i := 1; i < 8; i++ {
		mean += float64(per[fmt.Sprintf("n%d", i)])
	}
	mean /= 7
	for i := 1; i < 8; i++ {
		assert.InEpsilon(t, mean, float64(per[fmt.Sprintf("n%d", i)]), 0.1, "node n%d", i)
	}
	// The heavier node takes more, short of every volume (one shard each).
	assert.Greater(t, float64(per["n0"]), mean*1.2)
	assert.LessOrEqual(t, per["n0"], count)
	// Devices of one node share its shards evenly.
	for i := 1; i < 8; i++ {
		a, b := perDev[DeviceRef{fmt.Sprintf("n%d", i), "d0"}], perDev[DeviceRef{fmt.Sprintf("n%d", i), "d1"}]
		assert.InEpsilon(t, a, b, 0.2, "n%d's devices", i)
	}
}

func TestValidate(t *testing.T) {
	good := nodesOf(1, 1, 1)[0]
	require.NoError(t, good.Validate())
	for name, mut := range map[string]func(*Node){
		"empty id":      func(n *Node) { n.ID = "" },
		"slash in id":   func(n *Node) { n.ID = "a/b" },
		"dot first":     func(n *Node) { n.ID = ".." },
		"no address":    func(n *Node) { n.Addrs = nil },
		"bad state":     func(n *Node) { n.State = "gone" },
		"zero capacity": func(n *Node) { n.Devices[0].Capacity = 0 },
		"device twice":  func(n *Node) { n.Devices = append(n.Devices, n.Devices[0]) },
		"bad domain":    func(n *Node) { n.Domain = "rack 1" },
		"long id":       func(n *Node) { n.ID = string(make([]byte, 65)) },
		"space in id":   func(n *Node) { n.ID = "n 1" },
	} {
		n := good
		n.Devices = slices.Clone(good.Devices)
		mut(&n)
		assert.ErrorIs(t, n.Validate(), ErrInvalid, name)
	}
	v := Volume{Name: "v", Geometry: "4+2", Size: 1}
	require.NoError(t, v.Validate())
	for name, mut := range map[string]func(*Volume){
		"geometry":     func(v *Volume) { v.Geometry = "4" },
		"size":         func(v *Volume) { v.Size = 0 },
		"spread":       func(v *Volume) { v.Spread = "rack" },
		"shard count":  func(v *Volume) { v.Shards = []DeviceRef{{"a", "b"}} },
		"shared shard": func(v *Volume) { v.Shards = slices.Repeat([]DeviceRef{{"a", "b"}}, 6) },
		"name":         func(v *Volume) { v.Name = "a/b" },
	} {
		w := v
		mut(&w)
		assert.ErrorIs(t, w.Validate(), ErrInvalid, name)
	}
}
