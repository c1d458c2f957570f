package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultPrefix is where a cluster keeps its map in etcd.
const DefaultPrefix = "/capsule/"

// Map is the cluster map, kept in etcd under a key prefix:
//
//	PREFIX nodes/ID     Node, JSON
//	PREFIX live/ID      present while the node runs (its member lease)
//	PREFIX volumes/NAME Volume, JSON
//	PREFIX heads/NAME   the node serving the volume, under its head lease;
//	                    the key's create revision is the head's epoch
//
// Every change is one etcd transaction that compares what it read, so
// concurrent changes from several nodes or operators never lose one
// another's work: the loser gets ErrConflict or, in the Update methods,
// retries on a fresh read.
type Map struct {
	cli    *clientv3.Client
	prefix string
}

// Connect dials the etcd cluster at endpoints (host:port or URLs). The
// client's own logging is off: errors come back as values.
func Connect(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
}

// New returns the map under prefix (DefaultPrefix when ""). The caller
// keeps owning cli.
func New(cli *clientv3.Client, prefix string) *Map {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Map{cli: cli, prefix: prefix}
}

// Client returns the etcd client the map uses.
func (m *Map) Client() *clientv3.Client { return m.cli }

func (m *Map) nodeKey(id string) string  { return m.prefix + "nodes/" + id }
func (m *Map) liveKey(id string) string  { return m.prefix + "live/" + id }
func (m *Map) volKey(name string) string { return m.prefix + "volumes/" + name }
func (m *Map) headKey(name string) string {
	return m.prefix + "heads/" + name
}

// AddNode puts a new node in the map, numbered (Node.Index) with the
// smallest number no other node has; ErrExists if its ID is taken.
func (m *Map) AddNode(ctx context.Context, n Node) error {
	if n.State == "" {
		n.State = Active
	}
	if err := n.Validate(); err != nil {
		return err
	}
	k := m.nodeKey(n.ID)
	for {
		nodes, _, rev, err := m.nodes(ctx)
		if err != nil {
			return err
		}
		used := map[uint16]bool{}
		for _, o := range nodes {
			used[o.Index] = true
		}
		n.Index = 1
		for used[n.Index] {
			n.Index++
		}
		// No node came or went since the read, so the number is free.
		r, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0),
			clientv3.Compare(clientv3.ModRevision(m.prefix+"nodes/").WithPrefix(), "<", rev+1)).
			Then(clientv3.OpPut(k, mustJSON(n))).Commit()
		if err != nil {
			return err
		}
		if r.Succeeded {
			return nil
		}
		if _, _, err := m.Node(ctx, n.ID); err == nil {
			return fmt.Errorf("%w: node %s", ErrExists, n.ID)
		}
	}
}

// Node reads one node and the revision it was last changed at.
func (m *Map) Node(ctx context.Context, id string) (Node, int64, error) {
	r, err := m.cli.Get(ctx, m.nodeKey(id))
	if err != nil {
		return Node{}, 0, err
	}
	if len(r.Kvs) == 0 {
		return Node{}, 0, fmt.Errorf("%w: node %s", ErrNotFound, id)
	}
	var n Node
	if err := json.Unmarshal(r.Kvs[0].Value, &n); err != nil {
		return Node{}, 0, fmt.Errorf("%w: node %s in etcd: %v", ErrInvalid, id, err)
	}
	return n, r.Kvs[0].ModRevision, nil
}

// Nodes returns every node, sorted by ID, and the revision of the read.
func (m *Map) Nodes(ctx context.Context) ([]Node, int64, error) {
	nodes, _, rev, err := m.nodes(ctx)
	return nodes, rev, err
}

// nodes returns every node, sorted by ID, the revision each was last
// changed at, and the revision of the read.
func (m *Map) nodes(ctx context.Context) ([]Node, []int64, int64, error) {
	r, err := m.cli.Get(ctx, m.prefix+"nodes/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, nil, 0, err
	}
	out := make([]Node, 0, len(r.Kvs))
	revs := make([]int64, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var n Node
		if err := json.Unmarshal(kv.Value, &n); err != nil {
			return nil, nil, 0, fmt.Errorf("%w: %s in etcd: %v", ErrInvalid, kv.Key, err)
		}
		out = append(out, n)
		revs = append(revs, kv.ModRevision)
	}
	return out, revs, r.Header.Revision, nil
}

// UpdateNode changes node id with fn, on a fresh read each time another
// change got in first. fn may be called more than once and must not keep
// the node.
func (m *Map) UpdateNode(ctx context.Context, id string, fn func(*Node) error) error {
	for {
		n, rev, err := m.Node(ctx, id)
		if err != nil {
			return err
		}
		if err := fn(&n); err != nil {
			return err
		}
		if n.ID != id {
			return fmt.Errorf("%w: node %s renamed to %s", ErrInvalid, id, n.ID)
		}
		if err := n.Validate(); err != nil {
			return err
		}
		k := m.nodeKey(id)
		r, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, mustJSON(n))).Commit()
		if err != nil {
			return err
		}
		if r.Succeeded {
			return nil
		}
	}
}

// RemoveNode takes a drained node out of the map. It refuses (ErrInUse)
// while the node is not Draining, holds a shard of any volume, or serves
// one.
func (m *Map) RemoveNode(ctx context.Context, id string) error {
	n, nrev, err := m.Node(ctx, id)
	if err != nil {
		return err
	}
	if n.State != Draining {
		return fmt.Errorf("%w: node %s is %s: drain it first", ErrInUse, id, n.State)
	}
	vols, revs, err := m.volumes(ctx)
	if err != nil {
		return err
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(m.nodeKey(id)), "=", nrev)}
	for i, v := range vols {
		if v.Holds(id) {
			return fmt.Errorf("%w: node %s holds shards of volume %s", ErrInUse, id, v.Name)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(m.volKey(v.Name)), "=", revs[i]))
	}
	heads, err := m.Heads(ctx)
	if err != nil {
		return err
	}
	for vol, h := range heads {
		if h.Node == id {
			return fmt.Errorf("%w: node %s serves volume %s", ErrInUse, id, vol)
		}
	}
	r, err := m.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(m.nodeKey(id))).Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return fmt.Errorf("%w: node %s or a volume", ErrConflict, id)
	}
	return nil
}

// CreateVolume puts a new volume in the map, placed on the nodes of the
// map now (Place) unless v.Shards is set, and returns it as stored.
func (m *Map) CreateVolume(ctx context.Context, v Volume) (Volume, error) {
	if err := v.Validate(); err != nil {
		return Volume{}, err
	}
	nodes, revs, _, err := m.nodes(ctx)
	if err != nil {
		return Volume{}, err
	}
	if v.UUID == "" {
		v.UUID = uuid.NewString()
	}
	if len(v.Shards) == 0 {
		if v.Shards, _, err = Plan(v, nodes); err != nil {
			return Volume{}, err
		}
	}
	k := m.volKey(v.Name)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)}
	// The nodes it lands on must still be as read (present, not
	// draining); a node added meanwhile only makes the placement one
	// the rebalancer improves.
	for _, d := range v.Shards {
		i := slices.IndexFunc(nodes, func(n Node) bool { return n.ID == d.Node })
		if i < 0 || !slices.ContainsFunc(nodes[i].Devices, func(x Device) bool { return x.ID == d.Device }) {
			return Volume{}, fmt.Errorf("%w: volume %s: device %s is not in the map", ErrInvalid, v.Name, d)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(m.nodeKey(d.Node)), "=", revs[i]))
	}
	r, err := m.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, mustJSON(v))).Commit()
	if err != nil {
		return Volume{}, err
	}
	if !r.Succeeded {
		if _, _, err := m.Volume(ctx, v.Name); err == nil {
			return Volume{}, fmt.Errorf("%w: volume %s", ErrExists, v.Name)
		}
		return Volume{}, fmt.Errorf("%w: the nodes of volume %s", ErrConflict, v.Name)
	}
	return v, nil
}

func mustJSON(x any) string {
	b, err := json.Marshal(x)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Volume reads one volume and the revision it was last changed at.
func (m *Map) Volume(ctx context.Context, name string) (Volume, int64, error) {
	r, err := m.cli.Get(ctx, m.volKey(name))
	if err != nil {
		return Volume{}, 0, err
	}
	if len(r.Kvs) == 0 {
		return Volume{}, 0, fmt.Errorf("%w: volume %s", ErrNotFound, name)
	}
	var v Volume
	if err := json.Unmarshal(r.Kvs[0].Value, &v); err != nil {
		return Volume{}, 0, fmt.Errorf("%w: volume %s in etcd: %v", ErrInvalid, name, err)
	}
	return v, r.Kvs[0].ModRevision, nil
}

// Volumes returns every volume, sorted by name.
func (m *Map) Volumes(ctx context.Context) ([]Volume, error) {
	v, _, err := m.volumes(ctx)
	return v, err
}

func (m *Map) volumes(ctx context.Context) ([]Volume, []int64, error) {
	r, err := m.cli.Get(ctx, m.prefix+"volumes/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, nil, err
	}
	vols := make([]Volume, 0, len(r.Kvs))
	revs := make([]int64, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var v Volume
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, nil, fmt.Errorf("%w: %s in etcd: %v", ErrInvalid, kv.Key, err)
		}
		vols = append(vols, v)
		revs = append(revs, kv.ModRevision)
	}
	return vols, revs, nil
}

// UpdateVolume changes volume name with fn, on a fresh read each time
// another change got in first. fn may be called more than once.
func (m *Map) UpdateVolume(ctx context.Context, name string, fn func(*Volume) error) (Volume, error) {
	for {
		v, rev, err := m.Volume(ctx, name)
		if err != nil {
			return Volume{}, err
		}
		if err := fn(&v); err != nil {
			return Volume{}, err
		}
		if v.Name != name {
			return Volume{}, fmt.Errorf("%w: volume %s renamed to %s", ErrInvalid, name, v.Name)
		}
		if err := v.Validate(); err != nil {
			return Volume{}, err
		}
		k := m.volKey(name)
		r, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, mustJSON(v))).Commit()
		if err != nil {
			return Volume{}, err
		}
		if r.Succeeded {
			return v, nil
		}
	}
}

// DeleteVolume takes a volume out of the map; ErrInUse while a node
// serves it.
func (m *Map) DeleteVolume(ctx context.Context, name string) error {
	hk := m.headKey(name)
	r, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(hk), "=", 0)).
		Then(clientv3.OpDelete(m.volKey(name))).Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return fmt.Errorf("%w: volume %s is served", ErrInUse, name)
	}
	if r.Responses[0].GetResponseDeleteRange().Deleted == 0 {
		return fmt.Errorf("%w: volume %s", ErrNotFound, name)
	}
	return nil
}

// HeadInfo says which node serves a volume, and since which epoch.
type HeadInfo struct {
	Node  string `json:"node"`
	Epoch int64  `json:"epoch"`
}

// Heads returns the head of every served volume.
func (m *Map) Heads(ctx context.Context) (map[string]HeadInfo, error) {
	r, err := m.cli.Get(ctx, m.prefix+"heads/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]HeadInfo, len(r.Kvs))
	for _, kv := range r.Kvs {
		var h HeadInfo
		if err := json.Unmarshal(kv.Value, &h); err != nil {
			return nil, fmt.Errorf("%w: %s in etcd: %v", ErrInvalid, kv.Key, err)
		}
		h.Epoch = kv.CreateRevision
		out[strings.TrimPrefix(string(kv.Key), m.prefix+"heads/")] = h
	}
	return out, nil
}

// HeadOf says which node serves volume name; ErrNotFound when none does.
func (m *Map) HeadOf(ctx context.Context, name string) (HeadInfo, error) {
	r, err := m.cli.Get(ctx, m.headKey(name))
	if err != nil {
		return HeadInfo{}, err
	}
	if len(r.Kvs) == 0 {
		return HeadInfo{}, fmt.Errorf("%w: no node serves volume %s", ErrNotFound, name)
	}
	var h HeadInfo
	if err := json.Unmarshal(r.Kvs[0].Value, &h); err != nil {
		return HeadInfo{}, fmt.Errorf("%w: head of %s in etcd: %v", ErrInvalid, name, err)
	}
	h.Epoch = r.Kvs[0].CreateRevision
	return h, nil
}

// Live returns the IDs of the nodes whose member lease is alive.
func (m *Map) Live(ctx context.Context) (map[string]bool, error) {
	r, err := m.cli.Get(ctx, m.prefix+"live/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(r.Kvs))
	for _, kv := range r.Kvs {
		out[strings.TrimPrefix(string(kv.Key), m.prefix+"live/")] = true
	}
	return out, nil
}

// Member is a node's presence in the cluster: its live key, under a
// lease the client keeps alive until Close.
type Member struct {
	m     *Map
	id    string
	lease clientv3.LeaseID
	stop  context.CancelFunc
}

// Join adds node n to the map, or updates its addresses, NQN, domain
// and devices if it is there (its state stays), and marks it live under
// a lease of ttl that is kept alive until Close. Liveness is for
// operators and for choosing a head; nothing depends on it for safety.
func (m *Map) Join(ctx context.Context, n Node, ttl time.Duration) (*Member, error) {
	err := m.AddNode(ctx, n)
	if errors.Is(err, ErrExists) {
		err = m.UpdateNode(ctx, n.ID, func(old *Node) error {
			state, index := old.State, old.Index
			*old = n
			old.State, old.Index = state, index
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	g, err := m.cli.Grant(ctx, ttlSeconds(ttl))
	if err != nil {
		return nil, err
	}
	if _, err := m.cli.Put(ctx, m.liveKey(n.ID), time.Now().UTC().Format(time.RFC3339), clientv3.WithLease(g.ID)); err != nil {
		return nil, err
	}
	kctx, stop := context.WithCancel(context.Background())
	ch, err := m.cli.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		return nil, err
	}
	go func() {
		for range ch {
		}
	}()
	return &Member{m: m, id: n.ID, lease: g.ID, stop: stop}, nil
}

// Close ends the membership: the live key goes at once.
func (mb *Member) Close(ctx context.Context) error {
	mb.stop()
	_, err := mb.m.cli.Revoke(ctx, mb.lease)
	return err
}

// ttlSeconds rounds d up to whole seconds, at least 1: etcd's leases
// count seconds.
func ttlSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
