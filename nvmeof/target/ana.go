package target

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Asymmetric Namespace Access: every namespace is in an ANA group
// (NamespaceConfig.ANAGroupID, the NSID by default, as in SPDK), and
// every listener of a subsystem has a state per group (Optimized until
// SetANAState says otherwise), as a port has in Linux nvmet and a
// listener in SPDK. A controller reports and enforces the states of the
// listener its admin queue came through: the ANA log page (0Ch) lists
// the groups that have namespaces, with their state there; I/O commands
// to a namespace of a group that is Inaccessible, in Persistent Loss or
// in Change there are aborted with the Path Related Status the state
// gives (SCT 3h, without DNR, so that a host retries on another path);
// a change is told with an Asynchronous Event (Notice, ANA Change, log
// page 0Ch) to the controllers that enabled it.

const (
	// MaxANAGroups is ANAGRPMAX and NANAGRPID: ANA group IDs are 1 to
	// MaxANAGroups, so each namespace can have a group of its own.
	MaxANAGroups = MaxNamespaces
	// anaTransitionTime is ANATT, in seconds: how long a host waits for
	// a group in the Change state, as Linux nvmet reports (the target
	// never moves a group out of Change by itself; SetANAState does).
	anaTransitionTime = 10
	// anaCapabilities is ANACAP: every state can be reported, and a
	// namespace's group does not change while it is attached.
	anaCapabilities = nvmeof.ANACAPOptimized | nvmeof.ANACAPNonOptimized | nvmeof.ANACAPInaccessible |
		nvmeof.ANACAPPersistentLoss | nvmeof.ANACAPChange | nvmeof.ANACAPGroupIDFixed
	// oaesANAChange is the OAES bit for ANA Change notices.
	oaesANAChange = uint32(nvmeof.AECANAChange)
)

// anaPort is the ANA state of one listener of a subsystem. Controllers
// connected through the listener keep a pointer to it, so the I/O path
// reads a state with one atomic load and no lock.
type anaPort struct {
	url string
	// states holds the ANAState of each group by ANAGRPID (index 0
	// unused); 0 stands for Optimized. Written under Subsystem.mu.
	states [MaxANAGroups + 1]atomic.Uint32

	// Guarded by Subsystem.mu: the log page's Change Count, and each
	// group's (the Change Count of the change that last set it).
	changeCount uint64
	groupChange [MaxANAGroups + 1]uint64
}

// state returns the state of group grp through the port. A nil port (a
// discovery controller's) is Optimized.
func (p *anaPort) state(grp uint32) nvmeof.ANAState {
	if p == nil || grp == 0 || grp > MaxANAGroups {
		return nvmeof.ANAOptimized
	}
	if s := nvmeof.ANAState(p.states[grp].Load()); s != 0 {
		return s
	}
	return nvmeof.ANAOptimized
}

// anaPortLocked returns the ANA state of the listener at url, making it
// (every group Optimized) on first use. s.mu is held.
func (s *Subsystem) anaPortLocked(url string) *anaPort {
	p := s.ana[url]
	if p == nil {
		p = &anaPort{url: url}
		s.ana[url] = p
	}
	return p
}

// anaPortFor returns the ANA state a controller connected through the
// listener at url reports; nil for the discovery subsystem.
func (s *Subsystem) anaPortFor(url string) *anaPort {
	if s.discovery {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anaPortLocked(url)
}

// SetANAState sets the ANA state of group grp on the listener at url (as
// Target.Listen returned it), or of every group (1 to MaxANAGroups) when
// grp is 0, as SPDK's nvmf_subsystem_listener_set_ana_state does without
// an anagrpid. The listener must serve the subsystem. Controllers
// connected through it report the new state at once: their I/O to the
// group's namespaces completes with the state's Path Related Status
// unless the state is Optimized or Non-Optimized, and those that enabled
// ANA Change notices get an Asynchronous Event. Setting a state a group
// already has changes nothing and tells no one.
func (s *Subsystem) SetANAState(url string, grp uint32, state nvmeof.ANAState) error {
	if s.discovery {
		return fmt.Errorf("%w: the discovery subsystem has no namespaces", ErrInvalidANA)
	}
	if !state.Valid() {
		return fmt.Errorf("%w: state %v", ErrInvalidANA, state)
	}
	if grp > MaxANAGroups {
		return fmt.Errorf("%w: group %d: want 1 to %d, or 0 for all", ErrInvalidANA, grp, MaxANAGroups)
	}
	if !slices.Contains(s.t.Listeners(), url) || !s.ListenerAllowed(url) {
		return fmt.Errorf("%w: %s does not serve %s", ErrNoListener, url, s.nqn)
	}
	s.mu.Lock()
	p := s.anaPortLocked(url)
	first, last := grp, grp
	if grp == 0 {
		first, last = 1, MaxANAGroups
	}
	var changed []uint32
	for g := first; g <= last; g++ {
		if p.state(g) != state {
			changed = append(changed, g)
		}
	}
	if len(changed) == 0 {
		s.mu.Unlock()
		return nil
	}
	p.changeCount++
	for _, g := range changed {
		p.states[g].Store(uint32(state))
		p.groupChange[g] = p.changeCount
	}
	var ctrls []*controller
	for _, c := range s.controllers {
		if c.ana == p {
			ctrls = append(ctrls, c)
		}
	}
	s.mu.Unlock()
	for _, c := range ctrls {
		c.anaChanged()
	}
	s.t.log.Info("ANA state set", "subnqn", s.nqn, "listener", url, "anagrpid", grp, "state", state.String(), "controllers", len(ctrls))
	return nil
}

// ANAState returns the ANA state of group grp on the listener at url:
// Optimized unless SetANAState set another.
func (s *Subsystem) ANAState(url string, grp uint32) nvmeof.ANAState {
	if s.discovery {
		return nvmeof.ANAOptimized
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ana[url].state(grp)
}

// forgetANALocked drops the ANA states of the listener at url: a listener
// allowed again starts with every group Optimized. Controllers already
// connected through it keep the states they had. s.mu is held.
func (s *Subsystem) forgetANALocked(url string) { delete(s.ana, url) }

// ANAGroupID is the namespace's ANA group (ANAGRPID).
func (ns *Namespace) ANAGroupID() uint32 { return ns.anaGroup }

// anaChanged raises an ANA Change event if the host asked for them.
func (c *controller) anaChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || c.discovery || c.aec&nvmeof.AECANAChange == 0 {
		return
	}
	c.anaEventPending = true
	c.deliverEventsLocked()
}

// anaLogPage renders the ANA log page as c reports it: one descriptor
// per group that has namespaces, in ANAGRPID order, each with its NSIDs
// in order unless rgo (Return Groups Only). With rae false, reading it
// unmasks the ANA Change event.
func (c *controller) anaLogPage(rgo, rae bool) []byte {
	tab := c.sub.ns.Load()
	var l nvmeof.ANALog
	c.sub.mu.Lock()
	l.ChangeCount = c.ana.changeCount
	for _, id := range tab.ids {
		ns := tab.byID[id]
		i, found := slices.BinarySearchFunc(l.Groups, ns.anaGroup, func(g nvmeof.ANAGroupDescriptor, grp uint32) int {
			return int(int64(g.ANAGRPID) - int64(grp))
		})
		if !found {
			l.Groups = slices.Insert(l.Groups, i, nvmeof.ANAGroupDescriptor{ANAGRPID: ns.anaGroup,
				ChangeCount: c.ana.groupChange[ns.anaGroup], State: c.ana.state(ns.anaGroup)})
		}
		if !rgo {
			l.Groups[i].NSIDs = append(l.Groups[i].NSIDs, id) // ids ascend
		}
	}
	c.sub.mu.Unlock()
	page, err := l.MarshalBinary()
	if err != nil { // every group and state above is valid
		panic(fmt.Sprintf("target: ANA log page: %v", err))
	}
	if !rae {
		c.mu.Lock()
		c.anaEventMasked = false
		c.deliverEventsLocked()
		c.mu.Unlock()
	}
	return page
}
