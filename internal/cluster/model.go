package cluster

import (
	"fmt"
	"slices"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/admin"
)

// NodeState says whether a node takes new shards.
type NodeState string

const (
	// Active nodes take shards and serve volumes.
	Active NodeState = "active"
	// Draining nodes keep serving what they hold, but placement leaves
	// them out, so the rebalancer moves their shards away; node_remove
	// needs a node drained to nothing.
	Draining NodeState = "draining"
)

// Node is a member of the cluster: a `target serve` that contributes its
// devices.
type Node struct {
	// ID names the node in the map, for life (a hostname, say).
	ID string `json:"id"`
	// Domain is the failure domain above the node (a rack, a room); ""
	// makes the node a domain of its own.
	Domain string `json:"domain,omitempty"`
	// Addrs are the URLs of its internal subsystem's listeners
	// (tcp://, iwarp://, rdma://), in the order peers should try them.
	Addrs []string `json:"addrs"`
	// HostNQN is the NQN the node connects to its peers with; peers
	// allow it on their internal subsystem.
	HostNQN string `json:"hostnqn"`
	// Devices are the device directories it contributes.
	Devices []Device `json:"devices"`
	// State is Active or Draining.
	State NodeState `json:"state"`
	// Index numbers the node among the map's nodes, from 1: AddNode
	// gives it the smallest number no other node has, and it stays for
	// the node's life. Nodes give out disjoint controller IDs by it
	// (CNTLIDRange).
	Index uint16 `json:"index,omitempty"`
}

// CNTLIDRange is the range of controller IDs the node numbered index
// gives out in a volume's subsystem, which every node serves (one path
// each): 1000 of them, disjoint for the first 65 nodes, as hosts that
// reach a subsystem through several targets need.
func CNTLIDRange(index uint16) (lo, hi uint16) {
	const per = 1000
	slot := (max(index, 1) - 1) % 65
	return slot*per + 1, slot*per + per
}

// Device is one device directory of a node.
type Device struct {
	// ID names the device within its node ("d0").
	ID string `json:"id"`
	// Capacity in bytes: its weight in placement.
	Capacity uint64 `json:"capacity"`
}

// DeviceRef names one device of the cluster.
type DeviceRef struct {
	Node   string `json:"node"`
	Device string `json:"device"`
}

func (d DeviceRef) String() string { return d.Node + "/" + d.Device }

// Spread is the failure domain that a volume's shards must not share.
type Spread string

const (
	// SpreadNode puts every shard on a node of its own: a volume
	// survives the loss of M nodes.
	SpreadNode Spread = "node"
	// SpreadDomain puts every shard in a failure domain of its own
	// (Node.Domain; a node without one is its own): a volume survives
	// the loss of M domains.
	SpreadDomain Spread = "domain"
)

// Volume is an erasure-coded volume of the cluster: a chunk store whose
// K+M devices are spread over the cluster, served by one node at a time.
type Volume struct {
	Name string `json:"name"`
	// Geometry is "K+M", as chunkstore.ParseGeometry reads it.
	Geometry string `json:"geometry"`
	// Size in bytes, as the namespace shows it.
	Size uint64 `json:"size"`
	// Spread is SpreadNode unless set.
	Spread Spread `json:"spread,omitempty"`
	// UUID identifies the volume to hosts (its namespace's NGUID and
	// UUID), the same on every node; CreateVolume makes a random one.
	UUID string `json:"uuid,omitempty"`
	// Hosts are the host NQNs that may connect to the volume's subsystem
	// on every node; none lets any host connect.
	Hosts []string `json:"hosts,omitempty"`
	// Shards[i] is the device that holds the volume's device position i
	// (chunkstore's device i). Set by CreateVolume, changed by the
	// rebalancer one position at a time.
	Shards []DeviceRef `json:"shards"`
}

// geometry parses v.Geometry.
func (v Volume) geometry() (chunkstore.Geometry, error) {
	g, err := chunkstore.ParseGeometry(v.Geometry)
	if err != nil {
		return g, fmt.Errorf("%w: volume %q: %v", ErrInvalid, v.Name, err)
	}
	return g, nil
}

func (v Volume) spread() Spread {
	if v.Spread == "" {
		return SpreadNode
	}
	return v.Spread
}

// checkName accepts 1 to 64 of [A-Za-z0-9._-], not starting with a dot:
// names become etcd key segments and directory names.
func checkName(what, s string) error {
	if len(s) == 0 || len(s) > 64 || s[0] == '.' {
		return fmt.Errorf("%w: %s %q: want 1 to 64 of A-Z a-z 0-9 . _ -, not starting with a dot", ErrInvalid, what, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %s %q: want 1 to 64 of A-Z a-z 0-9 . _ -, not starting with a dot", ErrInvalid, what, s)
		}
	}
	return nil
}

// Validate checks a node record.
func (n Node) Validate() error {
	if err := checkName("node", n.ID); err != nil {
		return err
	}
	if n.Domain != "" {
		if err := checkName("domain", n.Domain); err != nil {
			return err
		}
	}
	switch n.State {
	case Active, Draining:
	default:
		return fmt.Errorf("%w: node %s: state %q, want %q or %q", ErrInvalid, n.ID, n.State, Active, Draining)
	}
	if len(n.Addrs) == 0 {
		return fmt.Errorf("%w: node %s: no address", ErrInvalid, n.ID)
	}
	seen := map[string]bool{}
	for _, d := range n.Devices {
		if err := checkName("device", d.ID); err != nil {
			return fmt.Errorf("node %s: %w", n.ID, err)
		}
		if d.Capacity == 0 {
			return fmt.Errorf("%w: node %s: device %s has no capacity", ErrInvalid, n.ID, d.ID)
		}
		if seen[d.ID] {
			return fmt.Errorf("%w: node %s: device %s twice", ErrInvalid, n.ID, d.ID)
		}
		seen[d.ID] = true
	}
	return nil
}

// Validate checks a volume record; Shards may be empty (not yet placed).
func (v Volume) Validate() error {
	if err := checkName("volume", v.Name); err != nil {
		return err
	}
	g, err := v.geometry()
	if err != nil {
		return err
	}
	if v.Size == 0 {
		return fmt.Errorf("%w: volume %s: size 0", ErrInvalid, v.Name)
	}
	switch v.spread() {
	case SpreadNode, SpreadDomain:
	default:
		return fmt.Errorf("%w: volume %s: spread %q, want %q or %q", ErrInvalid, v.Name, v.Spread, SpreadNode, SpreadDomain)
	}
	if len(v.Shards) != 0 && len(v.Shards) != g.Devices() {
		return fmt.Errorf("%w: volume %s: %d shard devices for %s", ErrInvalid, v.Name, len(v.Shards), g)
	}
	for i, d := range v.Shards {
		if slices.Contains(v.Shards[:i], d) {
			return fmt.Errorf("%w: volume %s: device %s holds two shards", ErrInvalid, v.Name, d)
		}
	}
	for _, h := range v.Hosts {
		if err := admin.CheckNQN(h); err != nil {
			return fmt.Errorf("%w: volume %s: host %q: %v", ErrInvalid, v.Name, h, err)
		}
	}
	return nil
}

// Holds reports whether v keeps a shard on node.
func (v Volume) Holds(node string) bool {
	for _, d := range v.Shards {
		if d.Node == node {
			return true
		}
	}
	return false
}
