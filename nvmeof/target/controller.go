package target

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Controller limits reported in Identify Controller.
const (
	// errorLogEntries is ELPE+1: the error log keeps the newest 64 errors.
	errorLogEntries = 64
	// asyncEventLimit is AERL+1: Asynchronous Event Requests held at once.
	asyncEventLimit = 4
	// abortLimit is ACL+1.
	abortLimit = 4
	// keepAliveGranularity is KAS: the keep-alive timer counts in these.
	keepAliveGranularity = 100 * time.Millisecond
	keepAliveSupport     = 10 // KAS in 100 ms units: checks at 1 s granularity or better
	// ctrattTBKAS is CTRATT bit 6, Traffic Based Keep Alive Support: any
	// command, not just Keep Alive, restarts the keep-alive timer.
	ctrattTBKAS uint32 = 1 << 6
	// oaesNamespaceAttribute and oaesDiscoveryLogChange are the OAES bits
	// for the events this controller sends.
	oaesNamespaceAttribute = uint32(nvmeof.AECNamespaceAttribute)
	oaesDiscoveryLogChange = uint32(nvmeof.AECDiscoveryLogPageChange)
	// specVersion is VS and VER: NVMe 2.0, as SPDK's nvmf_tgt reports
	// (Linux nvmet reports 2.1). This controller has what 2.0 asks of a
	// fabrics I/O controller of the NVM command set: I/O command set
	// selection (CAP.CSS bit 6, CC.CSS 6), the I/O command set specific
	// and independent Identify structures (CNS 05h, 06h, 08h, 1Ch), CSI
	// in the namespace identification descriptors, and the mandatory
	// features.
	specVersion = nvmeof.Version2_0
	// timeoutUnits is CAP.TO: how long a host waits for CSTS.RDY, in
	// 500 ms units.
	timeoutUnits = 15
)

// controller is one association between a host and a subsystem: the
// admin queue and the I/O queues created under it, the property
// registers, the features and the events. The discovery subsystem's
// controllers are controllers too, with the discovery command set.
type controller struct {
	t         *Target
	sub       *Subsystem
	cntlid    uint16
	hostNQN   string
	hostID    [16]byte
	discovery bool
	log       *slog.Logger
	// ana is the ANA state of the listener the admin queue came
	// through (nil on discovery controllers); read without a lock.
	ana *anaPort

	// Read on every command without a lock.
	traffic atomic.Bool // a command arrived since the last keep-alive check
	ready   atomic.Bool // CC.EN=1, CSTS.RDY=1, no shutdown: commands may run
	wce     atomic.Bool // Volatile Write Cache Enable

	// mu guards the fields below. Lock order: Subsystem.mu, then
	// Controller.mu, then errMu. Responding to a held Asynchronous Event
	// Request happens under mu, so that a queue being torn down (which
	// takes mu in destroy or removeIOQueue) never sees a response in flight
	// on memory it is about to free.
	mu            sync.Mutex
	dead          bool
	cc            nvmeof.CC
	csts          nvmeof.CSTS
	shutdownSeq   int // counts shutdown notifications, to match a flush to its request
	admin         *queue
	io            []*queue // by QID; io[0] unused
	ioCount       int
	adminEntries  int // SQSIZE+1 of the admin queue's Connect, once it is attached
	queuesGranted int // I/O queues granted by Number of Queues
	kato          time.Duration
	kaTimer       *time.Timer
	aec           nvmeof.AsyncEventConfig
	feat          featureValues
	aers          []*request // held Asynchronous Event Requests, oldest first
	// An event is pending until an AER reports it, then masked until the
	// host reads its log page with RAE cleared.
	nsEventPending, nsEventMasked     bool
	discEventPending, discEventMasked bool
	changed                           []uint32 // changed NSIDs, ascending, at most 1024
	changedOverflow                   bool
	// Reservation notices (log page 80h), oldest first, at most
	// maxResNotices; resCount counts every notice made (LPC).
	resNotices                      []nvmeof.ReservationNotice
	resCount                        uint64
	resEventPending, resEventMasked bool
	anaEventPending, anaEventMasked bool

	errMu    sync.Mutex // guards errLog and errCount; taken alone or after mu
	errLog   [errorLogEntries]nvmeof.ErrorLogEntry
	errCount uint64
}

// newController makes a controller for a host's admin queue and gives it
// a CNTLID. It returns nil when the subsystem has no free CNTLID.
func newController(t *Target, sub *Subsystem, q *queue, data *nvmeof.ConnectData, kato time.Duration) *controller {
	c := &controller{
		t:             t,
		sub:           sub,
		hostNQN:       data.HostNQN,
		hostID:        data.HostID,
		discovery:     sub.discovery,
		ana:           sub.anaPortFor(q.listener),
		admin:         q,
		io:            make([]*queue, t.cfg.maxIOQueues+1),
		queuesGranted: t.cfg.maxIOQueues,
	}
	if !sub.allocCNTLID(c) {
		return nil
	}
	c.log = t.log.With("subnqn", sub.nqn, "cntlid", c.cntlid, "hostnqn", c.hostNQN)
	c.wce.Store(true)
	c.traffic.Store(true)
	c.feat.tempOver = defaultTempOver
	if kato == 0 && c.discovery {
		kato = DiscoveryKATO
	}
	c.mu.Lock()
	c.setKeepAliveLocked(kato)
	c.mu.Unlock()
	return c
}

// capabilities is the CAP property.
func (c *controller) capabilities() nvmeof.CAP {
	var cp nvmeof.CAP
	return cp.WithMQES(uint16(c.t.cfg.maxQueueEntries - 1)).
		WithCQR(true).
		WithTO(timeoutUnits).
		WithCSS(nvmeof.CAPCSSNVM | nvmeof.CAPCSSIOCommandSets).
		WithMPSMIN(0).
		WithMPSMAX(0)
}

// property returns the value of the property at offset, read with size.
//
// A 4-byte read of either half of CAP is answered with that half, as
// SPDK's nvmf_tgt answers it (Linux nvmet refuses it); every other
// size mismatch is refused.
func (c *controller) property(offset uint32, size nvmeof.PropertySize) (uint64, nvmeof.Status) {
	if size == nvmeof.PropertySize4 && (offset == nvmeof.PropertyCAP || offset == nvmeof.PropertyCAP+4) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return uint64(c.capabilities()) >> (8 * (offset - nvmeof.PropertyCAP)) & 0xffffffff, nvmeof.StatusSuccess
	}
	want, ok := nvmeof.PropertySizeAt(offset)
	if !ok || offset == nvmeof.PropertyNSSR {
		return 0, nvmeof.StatusInvalidField.WithDNR()
	}
	if want != size {
		return 0, nvmeof.StatusInvalidField.WithDNR()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch offset {
	case nvmeof.PropertyCAP:
		return uint64(c.capabilities()), nvmeof.StatusSuccess
	case nvmeof.PropertyVS:
		return uint64(specVersion), nvmeof.StatusSuccess
	case nvmeof.PropertyCC:
		return uint64(c.cc), nvmeof.StatusSuccess
	case nvmeof.PropertyCSTS:
		return uint64(c.csts), nvmeof.StatusSuccess
	}
	return 0, nvmeof.StatusInvalidField.WithDNR()
}

// setCC writes the CC property and runs the enable, reset and shutdown
// handshakes it starts.
func (c *controller) setCC(v nvmeof.CC) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	old := c.cc
	c.cc = v
	if v.SHN() != nvmeof.ShutdownNone && old.SHN() == nvmeof.ShutdownNone {
		c.startShutdownLocked()
	}
	if v.SHN() == nvmeof.ShutdownNone && old.SHN() != nvmeof.ShutdownNone {
		c.csts = c.csts.WithSHST(nvmeof.ShutdownStatusNormal)
	}
	switch {
	case v.EN() && !old.EN():
		if c.configValid(v) {
			c.csts = c.csts.WithRDY(true)
			c.log.Debug("controller enabled")
		} else {
			c.csts = c.csts.WithCFS(true)
			c.log.Warn("controller configuration refused: controller fatal status set", "cc", v.String())
		}
	case !v.EN() && old.EN():
		c.resetLocked()
	}
	c.ready.Store(c.cc.EN() && c.csts.RDY() && !c.csts.CFS() && c.cc.SHN() == nvmeof.ShutdownNone)
}

// configValid checks the CC fields an enable must get right: 64-byte SQ
// and 16-byte CQ entries, 4 KiB pages, round robin arbitration, and the
// NVM command set or all supported I/O command sets (CAP.CSS bit 6: CSS
// 6, what hosts that follow nvme-cli write, on discovery controllers
// too), or, on a discovery controller, admin only. Reserved CC bits are
// ignored.
func (c *controller) configValid(v nvmeof.CC) bool {
	entries := v.IOSQES() == 6 && v.IOCQES() == 4
	css := v.CSS() == nvmeof.CCCSSNVM || v.CSS() == nvmeof.CCCSSAllIO
	if c.discovery {
		entries = entries || (v.IOSQES() == 0 && v.IOCQES() == 0)
		css = css || v.CSS() == nvmeof.CCCSSAdminOnly
	}
	return entries && css && v.MPS() == 0 && v.AMS() == 0
}

// resetLocked is the controller reset CC.EN 1 to 0 starts: I/O queues
// are deleted and CSTS is cleared. The admin queue and the association
// stay.
func (c *controller) resetLocked() {
	for qid, q := range c.io {
		if q != nil {
			q.tr.disconnect()
			c.io[qid] = nil
		}
	}
	c.ioCount = 0
	c.csts = 0
	c.log.Debug("controller reset")
}

// startShutdownLocked begins the shutdown handshake: CSTS.SHST says
// "occurring" until every namespace is flushed, then "complete".
func (c *controller) startShutdownLocked() {
	c.csts = c.csts.WithSHST(nvmeof.ShutdownStatusOccurring)
	c.shutdownSeq++
	seq := c.shutdownSeq
	c.t.wg.Add(1)
	go func() {
		defer c.t.wg.Done()
		err := c.sub.flush()
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.log.Error("flush for shutdown failed", "err", err)
		}
		if c.shutdownSeq == seq && c.cc.SHN() != nvmeof.ShutdownNone {
			c.csts = c.csts.WithSHST(nvmeof.ShutdownStatusComplete)
			c.log.Debug("controller shut down")
		}
	}()
}

// removeIOQueue detaches an I/O queue whose connection ended.
func (c *controller) removeIOQueue(q *queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int(q.qid) < len(c.io) && c.io[q.qid] == q {
		c.io[q.qid] = nil
		c.ioCount--
	}
}

// destroy ends the association: the controller leaves its subsystem
// (its CNTLID is free again), every queue is disconnected, held requests
// are dropped with their connections. Safe to call more than once.
func (c *controller) destroy(reason string) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.ready.Store(false)
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	queues := []*queue{c.admin}
	for qid, q := range c.io {
		if q != nil {
			queues = append(queues, q)
			c.io[qid] = nil
		}
	}
	c.aers = nil
	c.mu.Unlock()
	c.sub.removeController(c)
	for _, q := range queues {
		q.tr.disconnect()
	}
	c.log.Info("controller destroyed", "reason", reason)
}

// --- keep-alive ---

// setKeepAliveLocked sets KATO and restarts the timer (none for 0).
func (c *controller) setKeepAliveLocked(kato time.Duration) {
	if c.kaTimer != nil {
		c.kaTimer.Stop()
		c.kaTimer = nil
	}
	c.kato = kato
	if kato > 0 && !c.dead {
		c.traffic.Store(true)
		c.kaTimer = time.AfterFunc(kato, c.keepAliveCheck)
	}
}

// keepAliveCheck runs once per KATO: a controller that received no
// command in the period is destroyed.
func (c *controller) keepAliveCheck() {
	if c.traffic.Swap(false) {
		c.mu.Lock()
		if !c.dead && c.kaTimer != nil {
			c.kaTimer.Reset(c.kato)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	kato, dead := c.kato, c.dead
	c.mu.Unlock()
	if !dead {
		c.sub.countKeepAliveExpiry(c.hostNQN)
	}
	c.destroy(fmt.Sprintf("keep-alive timeout: no command for %v", kato))
}

// --- asynchronous events ---

// holdAER keeps an Asynchronous Event Request until an event completes it.
func (c *controller) holdAER(r *request) nvmeof.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.aers) >= asyncEventLimit {
		return nvmeof.StatusAsyncEventRequestLimitExceeded.WithDNR()
	}
	if c.dead {
		return nvmeof.StatusAbortedSQDeletion
	}
	c.aers = append(c.aers, r)
	// A pending event completes r at once; r is held either way, and the
	// response goes out from here.
	c.deliverEventsLocked()
	return statusHeld
}

// takeHeldAER removes and returns the Asynchronous Event Request held
// with command ID cid, or nil. A host that submits a new command with the
// CID of an AER it has stopped waiting for (SPDK's host does this after
// dropping its AERs locally) has abandoned that AER: the new command is
// run, as SPDK's nvmf_tgt runs it, and the old one is never answered.
func (c *controller) takeHeldAER(cid uint16) *request {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.aers {
		if r.cmd.CID == cid {
			c.aers = append(c.aers[:i], c.aers[i+1:]...)
			return r
		}
	}
	return nil
}

// deliverEventsLocked completes held AERs with pending, unmasked events.
func (c *controller) deliverEventsLocked() {
	for len(c.aers) > 0 && !c.dead {
		var ev nvmeof.AsyncEvent
		switch {
		case c.nsEventPending && !c.nsEventMasked:
			c.nsEventPending, c.nsEventMasked = false, true
			ev = nvmeof.AsyncEvent{Type: nvmeof.AsyncEventNotice, Info: nvmeof.NoticeNamespaceAttributeChanged,
				LogPage: nvmeof.LogChangedNamespaceList}
		case c.anaEventPending && !c.anaEventMasked:
			c.anaEventPending, c.anaEventMasked = false, true
			ev = nvmeof.AsyncEvent{Type: nvmeof.AsyncEventNotice, Info: nvmeof.NoticeANAChange, LogPage: nvmeof.LogANA}
		case c.resEventPending && !c.resEventMasked:
			c.resEventPending, c.resEventMasked = false, true
			ev = nvmeof.AsyncEvent{Type: nvmeof.AsyncEventIOCommandSpecific, Info: nvmeof.AsyncEventInfoReservationLog,
				LogPage: nvmeof.LogReservationNotification}
		case c.discEventPending && !c.discEventMasked:
			c.discEventPending, c.discEventMasked = false, true
			ev = nvmeof.AsyncEvent{Type: nvmeof.AsyncEventNotice, Info: nvmeof.NoticeDiscoveryLogPageChange,
				LogPage: nvmeof.LogDiscovery}
		default:
			return
		}
		r := c.aers[0]
		c.aers = c.aers[1:]
		r.rsp.DW0 = ev.DW0()
		r.rsp.Status = nvmeof.StatusSuccess
		c.log.Debug("asynchronous event", "event", ev.String())
		r.q.tr.respond(r)
	}
}

// namespaceChanged records a namespace added, removed or changed, and
// raises a Namespace Attribute Changed event if the host asked for them.
func (c *controller) namespaceChanged(nsid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || c.discovery {
		return
	}
	if !c.changedOverflow {
		if i, found := slices.BinarySearch(c.changed, nsid); !found {
			if len(c.changed) == nvmeof.NamespaceListEntries {
				c.changedOverflow = true
				c.changed = nil
			} else {
				c.changed = slices.Insert(c.changed, i, nsid)
			}
		}
	}
	if c.aec&nvmeof.AECNamespaceAttribute != 0 {
		c.nsEventPending = true
		c.deliverEventsLocked()
	}
}

// discoveryLogChanged raises a Discovery Log Page Change event if the
// host asked for them.
func (c *controller) discoveryLogChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || !c.discovery || c.aec&nvmeof.AECDiscoveryLogPageChange == 0 {
		return
	}
	c.discEventPending = true
	c.deliverEventsLocked()
}

// abortAERs completes every held AER with Command Aborted due to SQ
// Deletion: the queue is going away (drain).
func (c *controller) abortAERs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log.Debug("aborting held AERs", "n", len(c.aers))
	for _, r := range c.aers {
		r.rsp.Status = nvmeof.StatusAbortedSQDeletion
		r.q.tr.respond(r)
	}
	c.aers = nil
}

// --- logs ---

// logError records a failed command in the error log.
func (c *controller) logError(q *queue, r *request) {
	e := nvmeof.ErrorLogEntry{
		SQID:    q.qid,
		CID:     r.cmd.CID,
		Status:  r.rsp.Status,
		NSID:    r.cmd.NSID,
		TRTYPE:  q.transportType(),
		Opcode:  r.cmd.Opcode,
		Version: 1,
	}
	if r.cmd.IsFabrics() {
		e.NSID = 0
	}
	if r.errLoc >= 0 && r.errLoc < nvmeof.CommandSize {
		e.PEL = nvmeof.NewParameterErrorLocation(uint8(r.errLoc), 0)
	}
	if r.ns != nil {
		e.LBA = r.cmd.SLBA()
	}
	c.errMu.Lock()
	c.errCount++
	e.ErrorCount = c.errCount
	c.errLog[c.errCount%errorLogEntries] = e
	c.errMu.Unlock()
}

// errorLogPage renders the error log, newest entry first.
func (c *controller) errorLogPage(page []byte) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	clear(page)
	for i := range errorLogEntries {
		n := c.errCount - uint64(i)
		if n == 0 || c.errCount < uint64(i) {
			break
		}
		e := c.errLog[n%errorLogEntries]
		e.MarshalTo(page[i*nvmeof.ErrorLogEntrySize:])
	}
}

// changedNamespacePage renders the Changed Attached Namespace List and
// clears it; with rae false it also unmasks the event.
func (c *controller) changedNamespacePage(page []byte, rae bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changedOverflow {
		nvmeof.MarshalChangedNamespaceList(page, make([]uint32, nvmeof.NamespaceListEntries+1))
	} else {
		nvmeof.MarshalChangedNamespaceList(page, c.changed)
	}
	c.changed, c.changedOverflow = nil, false
	if !rae {
		c.nsEventMasked = false
		c.deliverEventsLocked()
	}
}

// discoveryPageRead unmasks the discovery log change event (RAE clear).
func (c *controller) discoveryPageRead(rae bool) {
	if rae {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.discEventMasked = false
	c.deliverEventsLocked()
}
