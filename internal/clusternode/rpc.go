package clusternode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/internal/cluster"
)

// Register adds the cluster's methods to the admin socket:
//
//	cluster_get_status      members (with liveness), volumes with their
//	                        placement, head and pending moves
//	node_add                a node record, ahead of the node's own start
//	node_remove             drain a node ({"id"}: active → draining), or
//	                        take a drained one out of the map
//	cluster_volume_create   {"name", "geometry" (4+2), "size", "spread"}
//	cluster_volume_delete   {"name"}: a volume nobody serves
//	volume_get_placement    {"name"}: where its shards are, where they
//	                        belong, and the moves between the two
func (n *Node) Register(srv *admin.Server) {
	srv.Register("cluster_get_status", n.rpcStatus)
	srv.Register("node_add", n.rpcNodeAdd)
	srv.Register("node_remove", n.rpcNodeRemove)
	srv.Register("cluster_volume_create", n.rpcVolumeCreate)
	srv.Register("cluster_volume_delete", n.rpcVolumeDelete)
	srv.Register("cluster_volume_set_hosts", n.rpcVolumeSetHosts)
	srv.Register("volume_get_placement", n.rpcPlacement)
}

// decode reads params strictly: an unknown field is an error.
func decode(params json.RawMessage, v any) error {
	if len(params) == 0 {
		params = []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(params))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return admin.Errorf(admin.CodeInvalidParams, "%v", err)
	}
	return nil
}

// rpcErr gives the map's errors the invalid-params code, others internal.
func rpcErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrInvalid), errors.Is(err, cluster.ErrExists), errors.Is(err, cluster.ErrNotFound),
		errors.Is(err, cluster.ErrInUse), errors.Is(err, cluster.ErrTooFewDomains), errors.Is(err, cluster.ErrConflict):
		return admin.Errorf(admin.CodeInvalidParams, "%v", err)
	}
	return admin.Errorf(admin.CodeInternal, "%v", err)
}

// MemberStatus is a node of the map, as cluster_get_status shows it.
type MemberStatus struct {
	cluster.Node
	Live bool `json:"live"`
}

// VolumeStatus is a volume of the map, as cluster_get_status shows it:
// its head, the moves its placement still wants, and the head's report.
type VolumeStatus struct {
	cluster.Volume
	Head  *cluster.HeadInfo `json:"head"`
	Moves []cluster.Move    `json:"moves"`
	Error string            `json:"placement_error,omitempty"`
	// Report is what the head reports of the volume, if it does.
	Report *VolumeReport `json:"report,omitempty"`
}

// ServedStatus is a volume this node heads, as its store sees it.
type ServedStatus struct {
	Volume   string           `json:"volume"`
	Epoch    int64            `json:"epoch"`
	Degraded bool             `json:"degraded"`
	Devices  []ServedPosition `json:"devices"`
}

// ServedPosition is a position of a served volume: the device, and its
// state in the store.
type ServedPosition struct {
	Device cluster.DeviceRef `json:"device"`
	State  string            `json:"state"`
}

// Stores describes the stores of the volumes this node heads.
func (n *Node) stores() []ServedStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := []ServedStatus{}
	for _, vs := range n.served {
		in := vs.store.Info()
		st := ServedStatus{Volume: vs.name, Epoch: vs.head.Epoch, Degraded: in.Degraded}
		vs.mu.Lock()
		for i, d := range in.Devices {
			st.Devices = append(st.Devices, ServedPosition{Device: vs.have[i], State: d.State.String()})
		}
		vs.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Status is cluster_get_status's answer: this node's own part (what it
// serves, its stores, its rebuilds) and the map's (members, volumes).
type Status struct {
	Node     string          `json:"node"`
	Serving  []string        `json:"serving"`
	Stores   []ServedStatus  `json:"stores"`
	Rebuilds []RebuildStatus `json:"rebuilds"`
	Members  []MemberStatus  `json:"members"`
	Volumes  []VolumeStatus  `json:"volumes"`
	// MapError says why the cluster map could not be read (etcd out of
	// reach): then only this node's own part is there.
	MapError string `json:"map_error,omitempty"`
}

func (n *Node) rpcStatus(ctx context.Context, params json.RawMessage) (any, error) {
	if err := decode(params, &struct{}{}); err != nil {
		return nil, err
	}
	// What this node knows answers even when etcd does not.
	st := Status{Node: n.cfg.ID, Serving: n.Serving(), Stores: n.stores(), Rebuilds: n.Rebuilds(),
		Members: []MemberStatus{}, Volumes: []VolumeStatus{}}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := n.mapStatus(ctx, &st); err != nil {
		st.MapError = err.Error()
	}
	return st, nil
}

// mapStatus fills in what the cluster map says.
func (n *Node) mapStatus(ctx context.Context, st *Status) error {
	m := n.cfg.Map
	nodes, _, err := m.Nodes(ctx)
	if err != nil {
		return err
	}
	live, err := m.Live(ctx)
	if err != nil {
		return err
	}
	heads, err := m.Heads(ctx)
	if err != nil {
		return err
	}
	vols, err := m.Volumes(ctx)
	if err != nil {
		return err
	}
	reports, err := m.Reports(ctx)
	if err != nil {
		return err
	}
	for _, p := range nodes {
		st.Members = append(st.Members, MemberStatus{Node: p, Live: live[p.ID]})
	}
	for _, v := range vols {
		vs := VolumeStatus{Volume: v, Moves: []cluster.Move{}}
		if h, ok := heads[v.Name]; ok {
			vs.Head = &h
			var r VolumeReport
			if raw, ok := reports[v.Name]; ok && json.Unmarshal(raw, &r) == nil && r.Node == h.Node {
				vs.Report = &r
			}
		}
		if _, moves, err := cluster.Plan(v, nodes); err != nil {
			vs.Error = err.Error()
		} else if moves != nil {
			vs.Moves = moves
		}
		st.Volumes = append(st.Volumes, vs)
	}
	return nil
}

func (n *Node) rpcNodeAdd(ctx context.Context, params json.RawMessage) (any, error) {
	var p cluster.Node
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	if p.HostNQN == "" {
		p.HostNQN = HostNQN(p.ID)
	}
	if err := n.cfg.Map.AddNode(ctx, p); err != nil {
		return nil, rpcErr(err)
	}
	return true, nil
}

func (n *Node) rpcNodeRemove(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		ID string `json:"id"`
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	nd, _, err := n.cfg.Map.Node(ctx, p.ID)
	if err != nil {
		return nil, rpcErr(err)
	}
	if nd.State == cluster.Active {
		err := n.cfg.Map.UpdateNode(ctx, p.ID, func(x *cluster.Node) error { x.State = cluster.Draining; return nil })
		if err != nil {
			return nil, rpcErr(err)
		}
		return map[string]string{"id": p.ID, "state": string(cluster.Draining)}, nil
	}
	if err := n.cfg.Map.RemoveNode(ctx, p.ID); err != nil {
		return nil, rpcErr(err)
	}
	return map[string]string{"id": p.ID, "state": "removed"}, nil
}

func (n *Node) rpcVolumeCreate(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		Name     string         `json:"name"`
		Geometry string         `json:"geometry"`
		Size     uint64         `json:"size"`
		Spread   cluster.Spread `json:"spread"`
		Hosts    []string       `json:"hosts"`
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	if p.Geometry == "" {
		p.Geometry = "4+2"
	}
	v, err := n.cfg.Map.CreateVolume(ctx, cluster.Volume{Name: p.Name, Geometry: p.Geometry, Size: p.Size, Spread: p.Spread,
		Hosts: p.Hosts})
	if err != nil {
		return nil, rpcErr(err)
	}
	return v, nil
}

// rpcVolumeSetHosts replaces the hosts a volume lets connect (none: any
// host); every node applies it within a second. Controllers already
// connected stay, as with nvmf_subsystem_remove_host.
func (n *Node) rpcVolumeSetHosts(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		Name  string   `json:"name"`
		Hosts []string `json:"hosts"`
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	v, err := n.cfg.Map.UpdateVolume(ctx, p.Name, func(v *cluster.Volume) error {
		v.Hosts = p.Hosts
		return v.Validate()
	})
	if err != nil {
		return nil, rpcErr(err)
	}
	return v, nil
}

func (n *Node) rpcVolumeDelete(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		Name string `json:"name"`
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	if err := n.cfg.Map.DeleteVolume(ctx, p.Name); err != nil {
		return nil, rpcErr(err)
	}
	return true, nil
}

func (n *Node) rpcPlacement(ctx context.Context, params json.RawMessage) (any, error) {
	var p struct {
		Name string `json:"name"`
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	v, _, err := n.cfg.Map.Volume(ctx, p.Name)
	if err != nil {
		return nil, rpcErr(err)
	}
	nodes, _, err := n.cfg.Map.Nodes(ctx)
	if err != nil {
		return nil, rpcErr(err)
	}
	target, moves, err := cluster.Plan(v, nodes)
	if err != nil {
		return nil, rpcErr(fmt.Errorf("volume %s: %w", p.Name, err))
	}
	if moves == nil {
		moves = []cluster.Move{}
	}
	return map[string]any{"name": v.Name, "geometry": v.Geometry, "shards": v.Shards, "target": target, "moves": moves}, nil
}
