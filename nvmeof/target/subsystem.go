package target

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// SubsystemConfig describes an NVM subsystem for Target.AddSubsystem.
type SubsystemConfig struct {
	// NQN names the subsystem.
	NQN string
	// AllowAnyHost lets every host connect. When false, only the hosts
	// in Hosts (and those added with AllowHost) may; a Connect from any
	// other gets Connect Invalid Host (84h).
	AllowAnyHost bool
	// Hosts are host NQNs allowed to connect.
	Hosts []string
	// SerialNumber is SN of Identify Controller, up to 20 printable ASCII
	// characters; empty derives one from the NQN.
	SerialNumber string
	// OwnListeners makes the subsystem reachable only through the
	// listeners in Listeners and those added with AllowListener (SPDK's
	// and Linux nvmet's model: a port serves the subsystems linked to
	// it); the discovery log lists it on those alone, and a Connect
	// through any other gets Connect Invalid Parameters (SUBNQN), as for
	// an unknown subsystem. When false, every listener serves it.
	OwnListeners bool
	// Listeners are listener URLs (as Target.Listen returns them) that
	// serve the subsystem when OwnListeners is set.
	Listeners []string
	// MinCNTLID and MaxCNTLID bound the controller IDs the subsystem
	// gives out (1 and MaxCNTLID, FFEFh, when zero), as Linux nvmet's
	// attr_cntlid_min and _max and SPDK's min_cntlid and max_cntlid do:
	// targets that serve one subsystem between them give each a range of
	// its own, so that a host reaching them all (multipath) never sees
	// one CNTLID twice, which Linux and SPDK hosts refuse.
	MinCNTLID, MaxCNTLID uint16
}

// nsTable is an immutable snapshot of a subsystem's namespaces, replaced
// whole on every change so that the I/O path reads it without a lock.
type nsTable struct {
	byID map[uint32]*Namespace
	ids  []uint32 // ascending
}

// Subsystem is an NVM subsystem (or the discovery subsystem): an NQN, its
// namespaces, the hosts allowed to connect, and its controllers. Its
// methods are safe for concurrent use.
type Subsystem struct {
	t         *Target
	nqn       string
	discovery bool
	serial    string

	ns atomic.Pointer[nsTable] // replaced under mu

	// mu guards the fields below, and is held while a new nsTable is
	// built. Lock order: Target.mu, Subsystem.mu, Controller.mu.
	mu          sync.Mutex
	allowAny    bool
	hosts       map[string]struct{}
	controllers map[uint16]*controller
	nextCNTLID  uint16
	minCNTLID   uint16 // the range allocCNTLID gives out; fixed
	maxCNTLID   uint16
	removed     bool // RemoveSubsystem ran: no new controllers
	ownListen   bool
	listeners   map[string]struct{}      // with ownListen: the listener URLs that serve it
	ana         map[string]*anaPort      // ANA states by listener URL (ana.go)
	hostStats   map[string]*hostCounters // by host NQN, at most maxTrackedHosts (stats.go)
}

func newSubsystem(t *Target, cfg SubsystemConfig, discovery bool) (*Subsystem, error) {
	if err := nvmeof.ValidateNQN(cfg.NQN); err != nil {
		return nil, fmt.Errorf("%w: subsystem %q", ErrInvalidNQN, cfg.NQN)
	}
	if !discovery && cfg.NQN == nvmeof.DiscoveryNQN {
		return nil, fmt.Errorf("%w: %s is the discovery subsystem", ErrInvalidNQN, cfg.NQN)
	}
	sn := cfg.SerialNumber
	if sn == "" {
		sn = deriveSerialNumber(cfg.NQN)
	}
	if !printable(sn, nvmeof.SerialNumberSize) {
		return nil, fmt.Errorf("%w: serial number %q: want up to 20 printable ASCII characters", ErrInvalidOption, sn)
	}
	minID, maxID := cmp.Or(cfg.MinCNTLID, 1), cmp.Or(cfg.MaxCNTLID, nvmeof.MaxCNTLID)
	if minID > maxID || maxID > nvmeof.MaxCNTLID {
		return nil, fmt.Errorf("%w: controller IDs %d to %d: want 1 <= min <= max <= %d", ErrInvalidOption, minID, maxID, nvmeof.MaxCNTLID)
	}
	s := &Subsystem{
		t:           t,
		nqn:         cfg.NQN,
		discovery:   discovery,
		serial:      sn,
		allowAny:    cfg.AllowAnyHost,
		hosts:       make(map[string]struct{}),
		controllers: make(map[uint16]*controller),
		nextCNTLID:  minID,
		minCNTLID:   minID,
		maxCNTLID:   maxID,
		ownListen:   cfg.OwnListeners && !discovery,
		listeners:   make(map[string]struct{}),
		ana:         make(map[string]*anaPort),
		hostStats:   make(map[string]*hostCounters),
	}
	for _, u := range cfg.Listeners {
		s.listeners[u] = struct{}{}
	}
	for _, h := range cfg.Hosts {
		if err := nvmeof.ValidateNQN(h); err != nil {
			return nil, fmt.Errorf("%w: host %q", ErrInvalidNQN, h)
		}
		s.hosts[h] = struct{}{}
	}
	s.ns.Store(&nsTable{byID: map[uint32]*Namespace{}})
	return s, nil
}

// NQN returns the subsystem's NQN.
func (s *Subsystem) NQN() string { return s.nqn }

// SerialNumber returns SN of the subsystem's controllers.
func (s *Subsystem) SerialNumber() string { return s.serial }

// AllowHost adds a host NQN to the allow-list. Like DisallowHost and
// SetAllowAnyHost, it changes the discovery log (and tells the discovery
// controllers) only when it changes the list: callers may apply a whole
// list again and again.
func (s *Subsystem) AllowHost(hostNQN string) error {
	if err := nvmeof.ValidateNQN(hostNQN); err != nil {
		return fmt.Errorf("%w: host %q", ErrInvalidNQN, hostNQN)
	}
	s.mu.Lock()
	_, had := s.hosts[hostNQN]
	s.hosts[hostNQN] = struct{}{}
	s.mu.Unlock()
	if !had {
		s.t.discoveryChanged()
	}
	return nil
}

// DisallowHost removes a host NQN from the allow-list. Controllers the
// host already has keep running.
func (s *Subsystem) DisallowHost(hostNQN string) {
	s.mu.Lock()
	_, had := s.hosts[hostNQN]
	delete(s.hosts, hostNQN)
	s.mu.Unlock()
	if had {
		s.t.discoveryChanged()
	}
}

// SetAllowAnyHost sets whether any host may connect.
func (s *Subsystem) SetAllowAnyHost(on bool) {
	s.mu.Lock()
	changed := s.allowAny != on
	s.allowAny = on
	s.mu.Unlock()
	if changed {
		s.t.discoveryChanged()
	}
}

// AllowListener lets the listener at url (as Target.Listen returned it)
// serve a subsystem made with OwnListeners; the discovery log changes.
func (s *Subsystem) AllowListener(url string) {
	s.mu.Lock()
	s.listeners[url] = struct{}{}
	s.mu.Unlock()
	s.t.discoveryChanged()
}

// DisallowListener stops the listener at url serving the subsystem (made
// with OwnListeners): no new Connect through it, and its ANA states are
// forgotten (allowed again, it starts Optimized). Controllers connected
// through it keep running, with the ANA states they had.
func (s *Subsystem) DisallowListener(url string) {
	s.mu.Lock()
	delete(s.listeners, url)
	if s.ownListen {
		s.forgetANALocked(url)
	}
	s.mu.Unlock()
	s.t.discoveryChanged()
}

// ListenerAllowed reports whether the listener at url serves the
// subsystem.
func (s *Subsystem) ListenerAllowed(url string) bool {
	if s.discovery {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ownListen {
		return true
	}
	_, ok := s.listeners[url]
	return ok
}

// HostAllowed reports whether a host may connect.
func (s *Subsystem) HostAllowed(hostNQN string) bool {
	if s.discovery {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.allowAny {
		return true
	}
	_, ok := s.hosts[hostNQN]
	return ok
}

// AddNamespace adds a namespace and tells the subsystem's controllers
// (an Asynchronous Event, Namespace Attribute Changed, to those that
// asked for it).
func (s *Subsystem) AddNamespace(cfg NamespaceConfig) (*Namespace, error) {
	if s.discovery {
		return nil, fmt.Errorf("%w: the discovery subsystem has no namespaces", ErrInvalidNamespace)
	}
	if cfg.NSID > MaxNamespaces {
		return nil, fmt.Errorf("%w: NSID %d: want 1..%d", ErrInvalidNamespace, cfg.NSID, MaxNamespaces)
	}
	s.mu.Lock()
	old := s.ns.Load()
	if cfg.NSID == 0 {
		for id := uint32(1); id <= MaxNamespaces; id++ {
			if old.byID[id] == nil {
				cfg.NSID = id
				break
			}
		}
		if cfg.NSID == 0 {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: all %d NSIDs are in use", ErrNamespaceExists, MaxNamespaces)
		}
	}
	if old.byID[cfg.NSID] != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: NSID %d in %s", ErrNamespaceExists, cfg.NSID, s.nqn)
	}
	ns, err := newNamespace(s, cfg)
	if err == nil {
		err = ns.res.restore(ns)
	}
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	next := &nsTable{byID: make(map[uint32]*Namespace, len(old.byID)+1), ids: append(slices.Clone(old.ids), ns.nsid)}
	for id, n := range old.byID {
		next.byID[id] = n
	}
	next.byID[ns.nsid] = ns
	sort.Slice(next.ids, func(i, j int) bool { return next.ids[i] < next.ids[j] })
	s.ns.Store(next)
	ctrls := s.controllerListLocked()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.namespaceChanged(ns.nsid)
	}
	s.t.log.Info("namespace added", "subnqn", s.nqn, "nsid", ns.nsid, "blocks", ns.blocks, "block_size", ns.blockSize)
	return ns, nil
}

// RemoveNamespace removes a namespace, tells the controllers as
// AddNamespace does, syncs the device and returns it; the caller owns it
// again. Commands already running on it finish on it, so the caller
// must not close it while hosts may still have I/O in flight.
func (s *Subsystem) RemoveNamespace(nsid uint32) (*Namespace, error) {
	s.mu.Lock()
	old := s.ns.Load()
	ns := old.byID[nsid]
	if ns == nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: NSID %d in %s", ErrNoNamespace, nsid, s.nqn)
	}
	next := &nsTable{byID: make(map[uint32]*Namespace, len(old.byID)), ids: make([]uint32, 0, len(old.ids))}
	for id, n := range old.byID {
		if id != nsid {
			next.byID[id] = n
		}
	}
	for _, id := range old.ids {
		if id != nsid {
			next.ids = append(next.ids, id)
		}
	}
	s.ns.Store(next)
	ctrls := s.controllerListLocked()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.namespaceChanged(nsid)
	}
	s.t.log.Info("namespace removed", "subnqn", s.nqn, "nsid", nsid)
	return ns, ns.dev.Sync()
}

// Namespace returns the namespace with the given NSID, or nil.
func (s *Subsystem) Namespace(nsid uint32) *Namespace { return s.ns.Load().byID[nsid] }

// Namespaces returns the namespaces in NSID order.
func (s *Subsystem) Namespaces() []*Namespace {
	tab := s.ns.Load()
	out := make([]*Namespace, len(tab.ids))
	for i, id := range tab.ids {
		out[i] = tab.byID[id]
	}
	return out
}

// DisconnectHost ends every controller the host has with the subsystem
// (their queues are disconnected; the host may reconnect if it is still
// allowed) and returns how many it ended.
func (s *Subsystem) DisconnectHost(hostNQN string) int {
	s.mu.Lock()
	var ends []*controller
	for _, c := range s.controllers {
		if c.hostNQN == hostNQN {
			ends = append(ends, c)
		}
	}
	s.mu.Unlock()
	for _, c := range ends {
		c.destroy("host removed from the subsystem")
	}
	return len(ends)
}

// AllowAnyHost reports whether any host may connect.
func (s *Subsystem) AllowAnyHost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allowAny
}

// Hosts returns the allow-list, sorted.
func (s *Subsystem) Hosts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.hosts))
	for h := range s.hosts {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// ControllerInfo describes a live controller of a subsystem.
type ControllerInfo struct {
	CNTLID    uint16
	HostNQN   string
	HostID    [16]byte
	IOQueues  int           // I/O queues connected now
	KeepAlive time.Duration // KATO; 0 for none
	// Queues are the connected queues, the admin queue (QID 0) first.
	Queues []QueueInfo
}

// ControllerInfos returns the live controllers, by CNTLID.
func (s *Subsystem) ControllerInfos() []ControllerInfo {
	s.mu.Lock()
	ctrls := s.controllerListLocked()
	s.mu.Unlock()
	out := make([]ControllerInfo, 0, len(ctrls))
	for _, c := range ctrls {
		c.mu.Lock()
		ci := ControllerInfo{CNTLID: c.cntlid, HostNQN: c.hostNQN, HostID: c.hostID, IOQueues: c.ioCount, KeepAlive: c.kato,
			Queues: make([]QueueInfo, 0, 1+c.ioCount)}
		if c.adminEntries > 0 {
			ci.Queues = append(ci.Queues, QueueInfo{QID: 0, Entries: c.adminEntries, Outstanding: int(c.admin.outstanding.Load())})
		}
		for qid, q := range c.io {
			if q != nil {
				ci.Queues = append(ci.Queues, QueueInfo{QID: uint16(qid), Entries: q.entries, Outstanding: int(q.outstanding.Load())})
			}
		}
		out = append(out, ci)
		c.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CNTLID < out[j].CNTLID })
	return out
}

// Controllers returns how many controllers the subsystem has now.
func (s *Subsystem) Controllers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.controllers)
}

func (s *Subsystem) controllerListLocked() []*controller {
	out := make([]*controller, 0, len(s.controllers))
	for _, c := range s.controllers {
		out = append(out, c)
	}
	return out
}

// allocCNTLID picks a free controller ID and registers c under it. It
// returns false when every ID is taken.
func (s *Subsystem) allocCNTLID(c *controller) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return false
	}
	for range int(s.maxCNTLID-s.minCNTLID) + 1 {
		id := s.nextCNTLID
		s.nextCNTLID++
		if s.nextCNTLID == 0 || s.nextCNTLID > s.maxCNTLID {
			s.nextCNTLID = s.minCNTLID
		}
		if _, used := s.controllers[id]; !used {
			c.cntlid = id
			s.controllers[id] = c
			s.hostLocked(c.hostNQN).connects.Add(1)
			return true
		}
	}
	return false
}

// findController returns the live controller with the ID, or nil.
func (s *Subsystem) findController(id uint16) *controller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.controllers[id]
}

func (s *Subsystem) removeController(c *controller) {
	s.mu.Lock()
	if s.controllers[c.cntlid] == c {
		delete(s.controllers, c.cntlid)
	}
	s.mu.Unlock()
}

// flush syncs every namespace's device.
func (s *Subsystem) flush() error {
	var first error
	for _, ns := range s.Namespaces() {
		if err := ns.dev.Sync(); err != nil && first == nil {
			first = fmt.Errorf("target: sync of %s namespace %d: %w", s.nqn, ns.nsid, err)
		}
	}
	return first
}

// closeDevices closes the devices that are io.Closers.
func (s *Subsystem) closeDevices() error {
	var first error
	for _, ns := range s.Namespaces() {
		if c, ok := ns.dev.(io.Closer); ok {
			if err := c.Close(); err != nil && first == nil {
				first = fmt.Errorf("target: close of %s namespace %d: %w", s.nqn, ns.nsid, err)
			}
		}
	}
	return first
}
