package cluster

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
)

// Rank orders every device of the active nodes for volume name, best
// first, by weighted rendezvous hashing: device d scores
// capacity(d) / -ln(u(name, d)), where u is a hash of the volume's name
// and the device's name mapped into (0, 1). The order depends on the
// names and capacities only, not on the order of nodes, so every node
// computes the same ranking from the same map.
func Rank(name string, nodes []Node) []DeviceRef {
	type scored struct {
		ref   DeviceRef
		score float64
	}
	var all []scored
	for _, n := range nodes {
		if n.State != Active {
			continue
		}
		for _, d := range n.Devices {
			ref := DeviceRef{Node: n.ID, Device: d.ID}
			u := unit(hashOf(name, ref))
			w := float64(d.Capacity) / (1 << 30)
			all = append(all, scored{ref, w / -math.Log(u)})
		}
	}
	slices.SortFunc(all, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.ref.Node, b.ref.Node), cmp.Compare(a.ref.Device, b.ref.Device))
	})
	out := make([]DeviceRef, len(all))
	for i, s := range all {
		out[i] = s.ref
	}
	return out
}

// hashOf is FNV-1a of the volume and device names with NUL separators,
// then a 64-bit finalizer (splitmix64's) so that names differing in one
// byte spread over the whole range.
func hashOf(name string, d DeviceRef) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(d.Node))
	h.Write([]byte{0})
	h.Write([]byte(d.Device))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// unit maps x into the open interval (0, 1).
func unit(x uint64) float64 {
	return (float64(x>>11) + 0.5) / (1 << 53)
}

// domainOf is the failure domain of node n under spread s.
func domainOf(n Node, s Spread) string {
	if s == SpreadDomain && n.Domain != "" {
		return "d:" + n.Domain
	}
	return "n:" + n.ID
}

// Place chooses the K+M devices of a volume named name: the best-ranked
// devices (Rank) that share no failure domain under spread, taken in
// rank order. Adding a node changes a volume's set only where one of the
// new node's devices outranks a chosen one, so a new node takes about
// its share of shards and nothing else moves; removing or draining a
// node moves only the shards it held.
func Place(name string, want int, spread Spread, nodes []Node) ([]DeviceRef, error) {
	byID := make(map[string]Node, len(nodes))
	for _, n := range nodes {
		byID[n.ID] = n
	}
	used := map[string]bool{}
	var out []DeviceRef
	for _, d := range Rank(name, nodes) {
		dom := domainOf(byID[d.Node], spread)
		if used[dom] {
			continue
		}
		used[dom] = true
		out = append(out, d)
		if len(out) == want {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w: volume %s needs %d, the map has %d active", ErrTooFewDomains, name, want, len(out))
}

// Move is one shard position of a volume changing device: what the
// rebalancer does, one position at a time (rebuild the position onto To
// from the other shards, then point the volume at To).
type Move struct {
	Volume   string    `json:"volume"`
	Position int       `json:"position"`
	From     DeviceRef `json:"from"`
	To       DeviceRef `json:"to"`
}

// Plan returns where v's shards belong under nodes, and the moves that
// take v there. A position whose device is still among the chosen set
// (Place) stays; each other position gets one of the chosen devices not
// yet in use, in rank order. A volume not yet placed gets the chosen set
// in rank order and no moves.
func Plan(v Volume, nodes []Node) ([]DeviceRef, []Move, error) {
	g, err := v.geometry()
	if err != nil {
		return nil, nil, err
	}
	want, err := Place(v.Name, g.Devices(), v.spread(), nodes)
	if err != nil {
		return nil, nil, err
	}
	if len(v.Shards) == 0 {
		return want, nil, nil
	}
	target := slices.Clone(v.Shards)
	var spare []DeviceRef
	for _, d := range want {
		if !slices.Contains(v.Shards, d) {
			spare = append(spare, d)
		}
	}
	var moves []Move
	for i, d := range v.Shards {
		if slices.Contains(want, d) {
			continue
		}
		target[i] = spare[0]
		spare = spare[1:]
		moves = append(moves, Move{Volume: v.Name, Position: i, From: d, To: target[i]})
	}
	return target, moves, nil
}
