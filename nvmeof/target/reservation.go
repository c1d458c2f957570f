package target

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Reservations (NVMe Base 2.x 8.19): Register, Acquire (preempt, preempt
// and abort), Release (and clear) and Report on a namespace, every
// reservation type, and the reservation conflicts of I/O. A host is its
// 128-bit host identifier (the HOSTID of its Connect): its controllers
// share its registration. Reservations live in memory, and through
// restarts where the namespace has a ReservationStore and a host turned
// Persist Through Power Loss on (ptpl.go). Preempt and Abort
// preempts and aborts nothing in flight (commands are not queued in the
// target), which the specification allows.
//
// Reservation notices go to every controller of the hosts concerned, in
// log page 80h with an Asynchronous Event (I/O command specific status),
// unless the host masked them (Set Features 82h): Registration Preempted
// to the hosts a Preempt or Clear removed, Reservation Preempted to the
// other registrants when a Preempt moved the reservation, Reservation
// Released to the other registrants when a reservation of a Registrants
// Only or All Registrants type ended by Release or Unregister.

// reservation is the reservation state of one namespace.
type reservation struct {
	// active is set while a reservation is held: only then does I/O
	// look at the rest, under mu.
	active atomic.Bool

	mu     sync.Mutex // guards the fields below; taken alone or after controller.mu
	gen    uint32     // generation: bumped by preemptions, clears and unregistrations
	rtype  nvmeof.ReservationType
	holder [16]byte // host ID of the holder, for the types with one holder
	regs   map[[16]byte]registration
	// ptpl: Persist Through Power Loss is on; every change is saved to
	// store (ptpl.go) before the command completes.
	ptpl  bool
	store ReservationStore
	// ptplCleared: the last Register turned PTPL off; the stored state
	// is deleted.
	ptplCleared bool
}

// registration is a host's registration.
type registration struct {
	key    uint64
	cntlid uint16 // the controller that registered, for Report
}

// holdsLocked reports whether host holds the reservation.
func (rs *reservation) holdsLocked(host [16]byte) bool {
	if rs.rtype == nvmeof.ReservationNone {
		return false
	}
	if rs.rtype.AllRegistrants() {
		_, ok := rs.regs[host]
		return ok
	}
	return rs.holder == host
}

// ioAllowed reports whether host may run a command that writes (write)
// or reads the namespace under its reservation (NVMe Base 2.x, Figure
// "Command Behavior in the Presence of a Reservation"). It takes no lock
// and allocates nothing while no reservation is held.
func (rs *reservation) ioAllowed(host [16]byte, write bool) bool {
	if !rs.active.Load() {
		return true
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	t := rs.rtype
	if t == nvmeof.ReservationNone || rs.holdsLocked(host) {
		return true
	}
	if _, registered := rs.regs[host]; registered && t.RegistrantsAccess() {
		return true
	}
	return !write && !t.ExclusiveAccess()
}

// checkReservation refuses an I/O command with Reservation Conflict when
// the namespace's reservation does not let the host run it.
func checkReservation(r *request, write bool) nvmeof.Status {
	if r.ns.res.ioAllowed(r.q.ctrl.hostID, write) {
		return nvmeof.StatusSuccess
	}
	return nvmeof.StatusReservationConflict.WithDNR()
}

// setLocked sets the reservation and its fast-path flag.
func (rs *reservation) setLocked(t nvmeof.ReservationType, holder [16]byte) {
	rs.rtype, rs.holder = t, holder
	rs.active.Store(t != nvmeof.ReservationNone)
}

func prepareReservation(r *request) nvmeof.Status {
	if _, st := namespaceOf(r); !st.Success() {
		return st
	}
	switch r.cmd.Opcode {
	case nvmeof.IOReservationRegister, nvmeof.IOReservationAcquire:
		r.dir, r.dataLen = nvmeof.HostToController, nvmeof.ReservationKeysSize
	case nvmeof.IOReservationRelease:
		r.dir, r.dataLen = nvmeof.HostToController, nvmeof.ReservationReleaseDataSize
	case nvmeof.IOReservationReport:
		if !r.cmd.ReportEDS() {
			// A fabrics host has a 128-bit host identifier: only the
			// extended structure can report it.
			return r.fail(nvmeof.StatusHostIDInconsistentFormat.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
		n := (uint64(r.cmd.CDW10) + 1) * 4
		if n > uint64(r.q.maxTransfer()) {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		r.dir, r.dataLen = nvmeof.ControllerToHost, int(n)
	}
	return nvmeof.StatusSuccess
}

// resNotice is a reservation notice for the controllers of one host.
type resNotice struct {
	host [16]byte
	typ  uint8
}

func executeReservation(r *request) nvmeof.Status {
	var keys nvmeof.ReservationKeys
	if r.dir == nvmeof.HostToController {
		if err := keys.UnmarshalBinary(r.data[:r.dataLen]); err != nil {
			return nvmeof.StatusInternalError
		}
	}
	var notices []resNotice
	st := applyReservation(r, keys, &notices)
	if st.Success() {
		rs := &r.ns.res
		rs.mu.Lock()
		off := rs.ptplCleared
		rs.ptplCleared = false
		err := rs.persistLocked(r.ns, off)
		rs.mu.Unlock()
		if err != nil {
			r.q.t.log.Error("saving reservations failed", "subnqn", r.ns.sub.nqn, "nsid", r.ns.nsid, "err", err)
			return nvmeof.StatusInternalError
		}
	}
	if len(notices) > 0 {
		r.q.ctrl.sub.reservationNotices(r.ns.nsid, notices)
	}
	return st
}

// othersLocked appends a notice of type typ for every registrant but the
// hosts in but.
func (rs *reservation) othersLocked(out *[]resNotice, typ uint8, but ...[16]byte) {
	for h := range rs.regs {
		if !slices.Contains(but, h) {
			*out = append(*out, resNotice{host: h, typ: typ})
		}
	}
}

func applyReservation(r *request, keys nvmeof.ReservationKeys, notices *[]resNotice) (st nvmeof.Status) {
	rs, ctrl := &r.ns.res, r.q.ctrl
	host := ctrl.hostID
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.regs == nil {
		rs.regs = map[[16]byte]registration{}
	}
	reg, registered := rs.regs[host]
	// keyOK: the host is registered and CRKEY is its key, or IEKEY says
	// not to look (RESCAP bit 7).
	keyOK := registered && (r.cmd.IEKEY() || keys.Current == reg.key)
	c := &r.cmd
	switch c.Opcode {
	case nvmeof.IOReservationRegister:
		switch c.CPTPL() {
		case nvmeof.CPTPLNoChange, nvmeof.CPTPLClear:
		case nvmeof.CPTPLSet:
			if rs.store == nil {
				// PTPL needs a store: RESCAP does not claim it then.
				return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
			}
		default: // 01b is reserved
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		// CPTPL takes effect when the command succeeds.
		defer func() {
			if st.Success() {
				switch c.CPTPL() {
				case nvmeof.CPTPLClear:
					rs.ptplCleared = rs.ptpl
					rs.ptpl = false
				case nvmeof.CPTPLSet:
					rs.ptpl = true
				}
			}
		}()
		switch c.ReservationAction() {
		case nvmeof.ReservationRegister:
			if registered {
				if reg.key == keys.Other {
					return nvmeof.StatusSuccess
				}
				return nvmeof.StatusReservationConflict.WithDNR()
			}
			rs.regs[host] = registration{key: keys.Other, cntlid: ctrl.cntlid}
		case nvmeof.ReservationUnregister:
			if !keyOK {
				return nvmeof.StatusReservationConflict.WithDNR()
			}
			holder := rs.holdsLocked(host)
			delete(rs.regs, host)
			rs.gen++
			if holder && (!rs.rtype.AllRegistrants() || len(rs.regs) == 0) {
				if rs.rtype.RegistrantsAccess() {
					rs.othersLocked(notices, nvmeof.ResNoticeResReleased)
				}
				rs.setLocked(nvmeof.ReservationNone, [16]byte{})
			}
		case nvmeof.ReservationReplace:
			if !registered && !c.IEKEY() {
				return nvmeof.StatusReservationConflict.WithDNR()
			}
			if registered && !keyOK {
				return nvmeof.StatusReservationConflict.WithDNR()
			}
			rs.regs[host] = registration{key: keys.Other, cntlid: ctrl.cntlid}
		default:
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		return nvmeof.StatusSuccess
	case nvmeof.IOReservationAcquire:
		t := c.ReservationType()
		if c.ReservationAction() > nvmeof.ReservationPreemptAndAbort || !t.Valid() {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		if !keyOK {
			return nvmeof.StatusReservationConflict.WithDNR()
		}
		if c.ReservationAction() == nvmeof.ReservationAcquire {
			switch {
			case rs.rtype == nvmeof.ReservationNone:
				rs.setLocked(t, host)
			case rs.holdsLocked(host) && rs.rtype == t:
			default:
				return nvmeof.StatusReservationConflict.WithDNR()
			}
			return nvmeof.StatusSuccess
		}
		return rs.preemptLocked(host, t, keys.Other, notices)
	case nvmeof.IOReservationRelease:
		if c.ReservationAction() > nvmeof.ReservationClear {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		if !keyOK {
			return nvmeof.StatusReservationConflict.WithDNR()
		}
		if c.ReservationAction() == nvmeof.ReservationClear {
			rs.othersLocked(notices, nvmeof.ResNoticeRegPreempted, host)
			clear(rs.regs)
			rs.gen++
			rs.setLocked(nvmeof.ReservationNone, [16]byte{})
			return nvmeof.StatusSuccess
		}
		if !rs.holdsLocked(host) {
			return nvmeof.StatusSuccess // nothing to release: no effect
		}
		if c.ReservationType() != rs.rtype {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		if rs.rtype.RegistrantsAccess() {
			rs.othersLocked(notices, nvmeof.ResNoticeResReleased, host)
		}
		rs.setLocked(nvmeof.ReservationNone, [16]byte{})
		return nvmeof.StatusSuccess
	case nvmeof.IOReservationReport:
		st := nvmeof.ReservationStatus{GEN: rs.gen, RTYPE: rs.rtype, PTPLS: rs.ptpl}
		hosts := make([][16]byte, 0, len(rs.regs))
		for h := range rs.regs {
			hosts = append(hosts, h)
		}
		sort.Slice(hosts, func(i, j int) bool { return string(hosts[i][:]) < string(hosts[j][:]) })
		for _, h := range hosts {
			g := rs.regs[h]
			st.Registrants = append(st.Registrants, nvmeof.Registrant{CNTLID: g.cntlid, Holds: rs.holdsLocked(h), RKey: g.key, HostID: h})
		}
		buf := r.data[:r.dataLen]
		clear(buf)
		if _, err := st.MarshalTo(buf); err != nil {
			return nvmeof.StatusInternalError
		}
		return nvmeof.StatusSuccess
	}
	return nvmeof.StatusInvalidOpcode.WithDNR()
}

// preemptLocked is Acquire with Preempt (and Abort): registrations with
// key prkey (other than the host's own) are removed; if the reservation
// was held by one of them, or by all registrants and prkey is 0, the
// host now holds a reservation of type t.
func (rs *reservation) preemptLocked(host [16]byte, t nvmeof.ReservationType, prkey uint64, notices *[]resNotice) nvmeof.Status {
	if rs.rtype.AllRegistrants() && prkey == 0 {
		for h := range rs.regs {
			if h != host {
				delete(rs.regs, h)
				*notices = append(*notices, resNotice{host: h, typ: nvmeof.ResNoticeRegPreempted})
			}
		}
		rs.gen++
		rs.setLocked(t, host)
		return nvmeof.StatusSuccess
	}
	holderPreempted := false
	removed := false
	for h, g := range rs.regs {
		if g.key != prkey || h == host {
			continue
		}
		if rs.holdsLocked(h) && !rs.rtype.AllRegistrants() {
			holderPreempted = true
		}
		delete(rs.regs, h)
		*notices = append(*notices, resNotice{host: h, typ: nvmeof.ResNoticeRegPreempted})
		removed = true
	}
	self := rs.holder == host && rs.regs[host].key == prkey
	switch {
	case holderPreempted || (self && !rs.rtype.AllRegistrants() && rs.rtype != nvmeof.ReservationNone):
		// The holder was preempted (or preempts itself): the host holds
		// the reservation now, of the type it asked for.
		if holderPreempted {
			rs.othersLocked(notices, nvmeof.ResNoticeResPreempted, host)
		}
		rs.setLocked(t, host)
	case !removed:
		return nvmeof.StatusReservationConflict.WithDNR()
	}
	rs.gen++
	return nvmeof.StatusSuccess
}

// maxResNotices is the most reservation notices a controller keeps
// unread; later ones are dropped (the log page count still counts them).
const maxResNotices = 255

// reservationNotices hands each notice to the controllers of its host.
func (s *Subsystem) reservationNotices(nsid uint32, notices []resNotice) {
	s.mu.Lock()
	ctrls := s.controllerListLocked()
	s.mu.Unlock()
	for _, c := range ctrls {
		for _, n := range notices {
			if c.hostID == n.host {
				c.reservationNotice(nsid, n.typ)
			}
		}
	}
}

// reservationNotice logs a notice of type typ about namespace nsid,
// unless the host masked that type (Set Features 82h), and raises the
// event.
func (c *controller) reservationNotice(nsid uint32, typ uint8) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || c.feat.resMask[nsid]&(1<<typ) != 0 {
		return
	}
	c.resCount++
	if len(c.resNotices) < maxResNotices {
		c.resNotices = append(c.resNotices, nvmeof.ReservationNotice{Count: c.resCount, Type: typ, NSID: nsid})
	}
	c.resEventPending = true
	c.deliverEventsLocked()
}

// reservationNoticePage fills page with the oldest notice and removes it
// (an empty page when there is none). Read with RAE clear, it unmasks
// the event, which comes again while notices remain.
func (c *controller) reservationNoticePage(page []byte, rae bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n nvmeof.ReservationNotice
	if len(c.resNotices) > 0 {
		n = c.resNotices[0]
		c.resNotices = c.resNotices[1:]
		n.Available = uint8(min(len(c.resNotices), 255))
	}
	n.MarshalTo(page)
	if !rae {
		c.resEventMasked = false
		c.resEventPending = len(c.resNotices) > 0
		c.deliverEventsLocked()
	}
}
