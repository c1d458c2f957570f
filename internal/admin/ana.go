package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// ANA states per listener: nvmf_subsystem_listener_set_ana_state, with
// SPDK's params, and ana_set_state, capsule's name for the same method.
// The model keeps the states set, per subsystem, in the order that
// rebuilds them; save_config writes them with SPDK's method name after
// the subsystem's listeners and namespaces.

// anaModel is one ANA state set on a listener of a subsystem: for group
// Group, or for every group when Group is 0.
type anaModel struct {
	Listener string
	Group    uint32
	State    nvmeof.ANAState
}

// anaStateNames are the ana_state values, as SPDK spells the first three
// (its nvmf_subsystem_listener_set_ana_state takes those alone).
var anaStateNames = []struct {
	name  string
	state nvmeof.ANAState
}{
	{"optimized", nvmeof.ANAOptimized},
	{"non_optimized", nvmeof.ANANonOptimized},
	{"inaccessible", nvmeof.ANAInaccessible},
	{"persistent_loss", nvmeof.ANAPersistentLoss},
	{"change", nvmeof.ANAChange},
}

// ParseANAState reads an ana_state value, in any case.
func ParseANAState(s string) (nvmeof.ANAState, error) {
	for _, n := range anaStateNames {
		if strings.EqualFold(s, n.name) {
			return n.state, nil
		}
	}
	return 0, fmt.Errorf("ana_state %q: want optimized, non_optimized, inaccessible, persistent_loss or change", s)
}

// ANAStateName is the ana_state value of a state.
func ANAStateName(s nvmeof.ANAState) string {
	for _, n := range anaStateNames {
		if n.state == s {
			return n.name
		}
	}
	return s.String()
}

// setANA records a state set on a listener of s: one for every group
// replaces what the listener had; one for a group replaces that group's.
func (s *subModel) setANA(a anaModel) {
	s.ANA = slices.DeleteFunc(s.ANA, func(x anaModel) bool {
		return x.Listener == a.Listener && (a.Group == 0 || x.Group == a.Group)
	})
	if a.Group == 0 && a.State == nvmeof.ANAOptimized {
		return // what a listener starts with
	}
	s.ANA = append(s.ANA, a)
}

// forgetANA drops the states of a listener removed from s, as the target
// forgets them.
func (s *subModel) forgetANA(url string) {
	s.ANA = slices.DeleteFunc(s.ANA, func(x anaModel) bool { return x.Listener == url })
}

// anaSetState is nvmf_subsystem_listener_set_ana_state and
// ana_set_state: the ANA state of one group (anagrpid), or of every
// group when anagrpid is absent or 0, on a listener of the subsystem.
// Controllers connected through the listener are told by Asynchronous
// Event, and their I/O follows the state.
type anaSetState struct {
	tgtName
	NQN           string         `json:"nqn"`
	ListenAddress *ListenAddress `json:"listen_address"`
	ANAState      string         `json:"ana_state"`
	ANAGrpID      *uint32        `json:"anagrpid,omitempty"`

	// Set by check.
	url   string
	group uint32
	state nvmeof.ANAState
}

func (c *anaSetState) check(m *model, _ *Service) error {
	if err := c.tgtName.check(); err != nil {
		return err
	}
	s, err := m.subFor(c.NQN)
	if err != nil {
		return err
	}
	if c.ListenAddress == nil {
		return invalid("listen_address is missing")
	}
	u, err := c.ListenAddress.URL()
	if err != nil {
		return invalid("%v", err)
	}
	if real, ok := m.Requested[u]; ok {
		u = real
	}
	if !slices.Contains(s.Listeners, u) {
		return invalid("%s is not a listener of %s", u, c.NQN)
	}
	st, err := ParseANAState(c.ANAState)
	if err != nil {
		return invalid("%v", err)
	}
	var grp uint32
	if c.ANAGrpID != nil {
		grp = *c.ANAGrpID
	}
	if grp > target.MaxANAGroups {
		return invalid("anagrpid %d: want 1 to %d, or none for every group", grp, target.MaxANAGroups)
	}
	c.url, c.group, c.state = u, grp, st
	s.setANA(anaModel{Listener: u, Group: grp, State: st})
	return nil
}

func (c *anaSetState) apply(sv *Service, _ *model) (any, error) {
	if err := sv.opts.Target.Subsystem(c.NQN).SetANAState(c.url, c.group, c.state); err != nil {
		return nil, invalid("%v", err)
	}
	return true, nil
}

// anaConfigEntry is the save_config entry that sets a.
func anaConfigEntry(nqn string, a anaModel) anaSetState {
	la, err := ListenAddressOf(a.Listener)
	if err != nil { // every URL in the model was checked
		panic(fmt.Sprintf("admin: listener %s in the model: %v", a.Listener, err))
	}
	e := anaSetState{NQN: nqn, ListenAddress: &la, ANAState: ANAStateName(a.State)}
	if a.Group != 0 {
		g := a.Group
		e.ANAGrpID = &g
	}
	return e
}

// getListeners is nvmf_subsystem_get_listeners: the subsystem's
// listeners, each with the ANA state of every group of the subsystem's
// namespaces there, in SPDK's shape.
func (sv *Service) getListeners(_ context.Context, params json.RawMessage) (any, error) {
	var p struct {
		tgtName
		NQN string `json:"nqn"`
	}
	if err := DecodeParams(params, &p); err != nil {
		return nil, err
	}
	if err := p.tgtName.check(); err != nil {
		return nil, err
	}
	type anaGroupState struct {
		Group uint32 `json:"ana_group"`
		State string `json:"ana_state"`
	}
	type listener struct {
		Address       ListenAddress   `json:"address"`
		SecureChannel bool            `json:"secure_channel"`
		ANAStates     []anaGroupState `json:"ana_states"`
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	urls := sv.model.Listeners
	var live *target.Subsystem
	if p.NQN != nvmeof.DiscoveryNQN {
		s, err := sv.model.subFor(p.NQN)
		if err != nil {
			return nil, err
		}
		urls, live = s.Listeners, sv.opts.Target.Subsystem(p.NQN)
	}
	var groups []uint32
	if live != nil {
		for _, ns := range live.Namespaces() {
			if i, found := slices.BinarySearch(groups, ns.ANAGroupID()); !found {
				groups = slices.Insert(groups, i, ns.ANAGroupID())
			}
		}
	}
	out := []listener{}
	for _, u := range urls {
		a, err := ListenAddressOf(u)
		if err != nil {
			continue
		}
		l := listener{Address: a, ANAStates: []anaGroupState{}}
		for _, g := range groups {
			l.ANAStates = append(l.ANAStates, anaGroupState{Group: g, State: ANAStateName(live.ANAState(u, g))})
		}
		out = append(out, l)
	}
	return out, nil
}
