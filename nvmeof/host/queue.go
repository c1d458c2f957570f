package host

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
)

const (
	// adminQueueEntries is the admin queue's size, as Linux hosts use.
	adminQueueEntries = 32
	// maxQueueEntries bounds a queue: the CID keeps the slot index in its
	// low 12 bits and a generation in the top 4.
	maxQueueEntries = 1 << cidIndexBits
	cidIndexBits    = 12
	cidIndexMask    = 1<<cidIndexBits - 1
	cidGenMask      = 0xf
	// maxInCapsuleData caps the in-capsule data of one command, whatever
	// the controller offers.
	maxInCapsuleData = 16 << 10
	// minArea is the smallest data area of an I/O command slot.
	minArea = 4096
)

// queueConfig sizes one queue.
type queueConfig struct {
	qid uint16
	// entries is the submission queue size (SQSIZE+1) and the number of
	// response Recvs posted (HRQSIZE); entries-1 commands are in flight at
	// most.
	entries int
	// icd is the in-capsule data a command may carry, 0 for none.
	icd int
	// area is the data area of each command slot, after its SQE.
	area int
	// bufSize and buffers describe the large registered buffers.
	bufSize int
	buffers int
}

// queue is one NVMe queue over one connection of a transport binding
// (queueTransport: rdma_queue.go, tcp_queue.go): the command slots with
// their capsules, the large buffers, and the goroutine that receives
// responses.
//
// Commands are issued by whichever goroutine finds a slot free: Submit's
// caller, or the queue goroutine after a completion frees one. The queue
// goroutine alone reads completions, copies read data out, and calls Done.
type queue struct {
	ctrl  *Controller
	assoc *association
	cfg   queueConfig
	qid   uint16
	log   *slog.Logger

	tr queueTransport
	// slotMem holds the slots' capsules (SQE and data area), stride
	// bytes each; bufMem the large buffers, bufSize bytes each (nil
	// without buffers). The transport provides them (registered memory
	// on RDMA).
	slotMem []byte
	bufMem  []byte

	slots  []slot
	stride int
	// inFlight is the most commands in flight: the slots, cut to the
	// controller's receive queue size.
	inFlight int

	ctx      context.Context
	cancel   context.CancelFunc
	exited   chan struct{} // closed when the queue goroutine returns
	failedCh chan struct{} // closed once fail has collected the commands
	// issuing counts commands reserved and not yet posted; fail waits for
	// them before it collects the slots.
	issuing sync.WaitGroup

	// mu guards the free lists, the pending list, stopped and cause, the
	// slots' busy, req, off, n, buf and tick fields, and the fields of
	// every Request on the pending list or with a command in flight here.
	// It is never held while calling into the Controller or the rdma
	// provider (lock order: Controller.mu and queue.mu are never nested).
	mu        sync.Mutex
	freeSlots []uint16
	freeBufs  []uint16
	pendHead  *Request
	pendTail  *Request
	stopped   bool
	cause     error
	// holding is set when the controller refused a command because it is
	// going away: nothing more is issued here, and what waits is
	// collected by fail when the reconnect closes the queue.
	holding bool
	// batching is set while the queue goroutine handles a batch of
	// completions: the transport may then hold the capsules issued and
	// send them together at the batch's end (RDMA: one PostSend, one
	// writev on iwarp). batchOn mirrors it for a lock-free check.
	batching bool
	batchOn  atomic.Bool
	// held counts the submitters inside Namespace.SubmitBatch on this
	// queue: while it is above zero, capsules are held as in a batch and
	// sent together when the last of them, or the queue goroutine's
	// batch, ends (batchOn is set while either holds).
	held int

	// failed is the queue goroutine's own flag (or close's, once the
	// goroutine has exited).
	failed    bool
	closeOnce sync.Once
}

// slot is a command slot: one CID, its capsule, and its data area.
type slot struct {
	idx uint16
	gen uint16

	// Guarded by queue.mu.
	busy bool
	req  *Request
	off  int64
	n    int64
	buf  int // large buffer index, or -1
	tick uint32

	// live is the CID+1 of the command posted from the slot, 0 when none
	// is; set by the issuer before PostSend, cleared by the queue
	// goroutine.
	live atomic.Uint32
	// Set by the issuer before PostSend, then the queue goroutine's.
	waitSend bool
	gotResp  bool
	cqe      nvmeof.Completion

	capsule []byte // SQE and data area, in slotMem
	capOff  int    // offset of capsule in slotMem
	// xfer is the memory the command's data moves through, set by the
	// transport's dataSGL when the data is not in the capsule (TCP: the
	// target of C2HData and the source of H2CData).
	xfer []byte
	// inPlace: xfer is the read request's own buffer, which the data
	// reaches without a copy (a transport that reads in place, or
	// direct memory).
	inPlace bool
	// direct is the part of the request's Buf a read or write chunk
	// moves straight from or into (or a passthrough command's Data),
	// when it lies in memory of Controller.AllocBuffer (nil otherwise);
	// dmr is that memory's
	// registration (nil on TCP) and doff direct's offset in it. Set with
	// the reservation, under queue.mu.
	direct []byte
	dmr    rdma.MR
	doff   int
	// icData is in-capsule data sent from direct rather than from the
	// slot's area: the transport sends the SQE and then icData.
	icData []byte
}

func (s *slot) cid() uint16 { return s.idx | s.gen<<cidIndexBits }

// newQueue allocates a queue's resources; connect brings it up.
func newQueue(c *Controller, a *association, qc queueConfig) (q *queue, err error) {
	if qc.entries < 2 || qc.entries > maxQueueEntries {
		return nil, fmt.Errorf("nvmeof/host: queue %d: %d entries", qc.qid, qc.entries)
	}
	depth := qc.entries - 1
	q = &queue{
		ctrl: c, assoc: a, cfg: qc, qid: qc.qid,
		log:      c.log.With("qid", qc.qid),
		exited:   make(chan struct{}),
		failedCh: make(chan struct{}),
		stride:   nvmeof.CommandSize + qc.area,
	}
	defer func() {
		if err != nil {
			q.release()
		}
	}()
	if c.tcp {
		q.tr = newTCPTransport(q)
	} else if q.tr, err = newRDMATransport(q, c.pd); err != nil {
		return nil, err
	}
	if qc.buffers > 0 {
		q.freeBufs = make([]uint16, 0, qc.buffers)
		for i := qc.buffers - 1; i >= 0; i-- {
			q.freeBufs = append(q.freeBufs, uint16(i))
		}
	}
	q.slots = make([]slot, depth)
	for i := range q.slots {
		s := &q.slots[i]
		s.idx = uint16(i)
		s.buf = -1
		s.capOff = i * q.stride
		s.capsule = q.slotMem[s.capOff : s.capOff+q.stride : s.capOff+q.stride]
	}
	q.freeSlots = make([]uint16, 0, depth)
	for i := depth - 1; i >= 0; i-- {
		q.freeSlots = append(q.freeSlots, uint16(i))
	}
	if err = q.tr.init(); err != nil {
		return nil, err
	}
	return q, nil
}

// connect opens the queue's connection through the transport (RDMA:
// the connection manager with the NVMe private data; TCP: ICReq/ICResp)
// and starts the queue goroutine. cntlid is the controller of an I/O
// queue (0 for the admin queue).
func (q *queue) connect(ctx context.Context, host string, cntlid uint16) error {
	// crq is the most commands the controller takes at once on this
	// connection (RDMA: CRQSIZE), 0 for no limit beyond the queue's.
	crq, err := q.tr.connect(ctx, host, cntlid)
	if err != nil {
		return err
	}
	// Never have more commands in flight than the controller has
	// receives posted for.
	if crq > 0 && crq < len(q.freeSlots) {
		q.freeSlots = q.freeSlots[len(q.freeSlots)-crq:]
	}
	q.inFlight = len(q.freeSlots)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(q.exited)
		q.tr.run()
	}()
	return nil
}

// startBatch and endBatch bracket the handling of a batch of received
// completions on the queue goroutine: commands issued in between may be
// held by the transport and sent together (flush) at the end.
func (q *queue) startBatch() {
	q.mu.Lock()
	q.batching = true
	q.batchOn.Store(true)
	q.mu.Unlock()
}

func (q *queue) endBatch() {
	q.mu.Lock()
	q.batching = false
	q.batchOn.Store(q.held > 0)
	q.mu.Unlock()
	if !q.failed {
		q.tr.flush()
	}
}

// holdSends and sendHeld bracket a submitter's batch (SubmitBatch): the
// capsules of the commands issued in between are sent together at the
// end, unless the queue goroutine's own batch sends them first.
func (q *queue) holdSends() {
	q.mu.Lock()
	q.held++
	q.batchOn.Store(true)
	q.mu.Unlock()
}

func (q *queue) sendHeld() {
	q.mu.Lock()
	q.held--
	on := q.batching || q.held > 0
	q.batchOn.Store(on)
	stopped := q.stopped
	q.mu.Unlock()
	if !on && !stopped {
		q.tr.flush()
	}
}

// holdingSends tells whether capsules issued now are held for a batch's
// end. q.mu is held.
func (q *queue) holdingSends() bool { return q.batching || q.held > 0 }

// responseSlot returns the slot of an outstanding command whose response
// has not arrived, or fails the queue (a protocol violation) and returns
// nil. On the queue goroutine.
func (q *queue) responseSlot(cid uint16) *slot {
	idx := int(cid & cidIndexMask)
	if idx >= len(q.slots) || q.slots[idx].live.Load() != uint32(cid)+1 || q.slots[idx].gotResp {
		q.fail(fmt.Errorf("%w: queue %d: response for CID %#04x, which is not outstanding", ErrProtocol, q.qid, cid))
		return nil
	}
	return &q.slots[idx]
}

// gotResponse records the response of slot s and completes the command
// unless the transport still waits for its capsule to be sent.
func (q *queue) gotResponse(s *slot, cqe nvmeof.Completion) {
	s.cqe = cqe
	s.gotResp = true
	if !s.waitSend {
		q.complete(s)
	}
}

// complete retires a slot whose response (and Send, if signaled) is in.
func (q *queue) complete(s *slot) {
	r := s.req
	st := s.cqe.Status
	if !st.Success() && r.raw == nil && refusedByDyingController(st) {
		q.hold(s, st)
		return
	}
	var err error
	if st.Success() {
		if r.Op == OpRead && !s.inPlace {
			copyOut(r, s.off, q.data(s)[:s.n])
		}
	} else {
		err = q.commandError(s, st)
	}
	if r.raw != nil {
		r.raw.cqe = s.cqe
	}
	if r.pt != nil {
		q.completePassthru(s)
	}
	s.live.Store(0)
	q.mu.Lock()
	s.busy = false
	s.req = nil
	q.freeSlots = append(q.freeSlots, s.idx)
	if s.buf >= 0 {
		q.freeBufs = append(q.freeBufs, uint16(s.buf))
		s.buf = -1
	}
	r.outstanding--
	if err != nil {
		r.noteError(s.off, err)
	}
	done := r.complete()
	next := q.reserveLocked()
	q.mu.Unlock()
	q.issueFrom(next)
	if done {
		r.finish()
	}
}

// refusedByDyingController reports a status with which a controller
// refuses, without running it, a command that reaches it while it is
// being torn down (after another queue of the association was lost, or a
// keep-alive timeout): Command Sequence Error (the controller is no
// longer ready) and Command Aborted due to SQ Deletion.
func refusedByDyingController(st nvmeof.Status) bool {
	return st.Code() == nvmeof.StatusCommandSequenceError || st.Code() == nvmeof.StatusAbortedSQDeletion
}

// hold keeps the chunk of a command the controller refused because it is
// going away: the chunk waits to be issued again after a reconnect, the
// queue issues nothing more, and the controller is declared lost.
func (q *queue) hold(s *slot, st nvmeof.Status) {
	r := s.req
	s.live.Store(0)
	q.mu.Lock()
	s.busy = false
	s.req = nil
	q.freeSlots = append(q.freeSlots, s.idx)
	if s.buf >= 0 {
		q.freeBufs = append(q.freeBufs, uint16(s.buf))
		s.buf = -1
	}
	q.holding = true
	r.outstanding--
	r.retry = append(r.retry, chunk{s.off, s.n})
	r.inflight = true
	if !r.queued {
		r.queued = true
		if q.pendTail == nil {
			q.pendHead = r
		} else {
			q.pendTail.next = r
		}
		q.pendTail = r
	}
	q.mu.Unlock()
	q.ctrl.fail(q.assoc, fmt.Errorf("nvmeof/host: queue %d: the controller refused a command without running it (%v): it is going away", q.qid, st))
}

// commandError describes a failed command from its capsule.
func (q *queue) commandError(s *slot, st nvmeof.Status) error {
	var cmd nvmeof.Command
	cmd.UnmarshalBinary(s.capsule[:nvmeof.CommandSize])
	e := &CommandError{QID: q.qid, Opcode: cmd.Opcode, NSID: cmd.NSID, Status: st}
	switch cmd.Opcode {
	case nvmeof.IORead, nvmeof.IOWrite, nvmeof.IOWriteZeroes:
		if q.qid != 0 {
			e.SLBA, e.Blocks = cmd.SLBA(), cmd.Blocks()
		}
	}
	return e
}

// submit queues r, whose fields are set and which is marked busy, and
// issues as many of its commands as slots and buffers allow.
func (q *queue) submit(r *Request) {
	q.mu.Lock()
	if q.stopped {
		cause := q.cause
		q.mu.Unlock()
		if r.raw != nil {
			r.failRest(lostError(cause))
			r.finish()
			return
		}
		q.ctrl.park(r, q)
		return
	}
	r.queued = true
	if q.pendTail == nil {
		q.pendHead = r
	} else {
		q.pendTail.next = r
	}
	q.pendTail = r
	s := q.reserveLocked()
	q.mu.Unlock()
	q.issueFrom(s)
}

// issueFrom issues s and then whatever else can be reserved.
func (q *queue) issueFrom(s *slot) {
	for s != nil {
		q.issue(s)
		q.mu.Lock()
		s = q.reserveLocked()
		q.mu.Unlock()
	}
}

// popLocked removes the head of the pending list.
func (q *queue) popLocked() {
	r := q.pendHead
	q.pendHead = r.next
	if q.pendHead == nil {
		q.pendTail = nil
	}
	r.next = nil
	r.queued = false
}

// reserveLocked takes a slot (and a large buffer when the command needs
// one) for the next command of the request at the head of the pending
// list. Requests are served in order: one waiting for a buffer holds back
// those behind it.
func (q *queue) reserveLocked() *slot {
	for q.pendHead != nil && !q.stopped && !q.holding {
		r := q.pendHead
		if !r.hasMore() {
			q.popLocked()
			continue
		}
		if len(q.freeSlots) == 0 {
			return nil
		}
		off, n := q.nextChunk(r)
		// direct: the command's data, when it may move without a copy
		// and lies in the caller's registered memory.
		var direct []byte
		switch r.Op {
		case OpRead, OpWrite:
			if lo := off - r.Offset; lo >= 0 && lo+n <= int64(len(r.Buf)) {
				direct = r.Buf[lo : lo+n : lo+n]
			}
		case opPassthru:
			direct = q.passthruDirect(r)
		}
		dmr, doff, ok := q.ctrl.registered(direct)
		if !ok {
			direct = nil
		}
		buf := -1
		if (r.Op == OpRead || r.Op == OpWrite) && direct == nil && n > int64(q.cfg.area) || r.Op == opPassthru && direct == nil && q.passthruNeedsBuffer(r) {
			if len(q.freeBufs) == 0 {
				return nil
			}
			buf = int(q.freeBufs[len(q.freeBufs)-1])
			q.freeBufs = q.freeBufs[:len(q.freeBufs)-1]
		}
		s := &q.slots[q.freeSlots[len(q.freeSlots)-1]]
		q.freeSlots = q.freeSlots[:len(q.freeSlots)-1]
		s.busy = true
		s.req = r
		s.off, s.n, s.buf = off, n, buf
		s.direct, s.dmr, s.doff = direct, dmr, doff
		s.tick = q.ctrl.tick.Load()
		s.gen = (s.gen + 1) & cidGenMask
		if len(r.retry) > 0 {
			r.retry[0].off += n
			r.retry[0].n -= n
			if r.retry[0].n == 0 {
				copy(r.retry, r.retry[1:])
				r.retry = r.retry[:len(r.retry)-1]
			}
		} else {
			r.cursor += n
		}
		r.outstanding++
		if !r.hasMore() {
			q.popLocked()
		}
		q.issuing.Add(1)
		return s
	}
	return nil
}

// nextChunk returns the range of r's next command: a retry first, then
// from the cursor, cut to what one command carries.
func (q *queue) nextChunk(r *Request) (off, n int64) {
	var limit int64 = 1
	if ns := r.ns; ns != nil {
		switch r.Op {
		case OpRead, OpWrite:
			limit = int64(q.cfg.area)
			if q.cfg.buffers > 0 {
				limit = int64(q.cfg.bufSize)
			}
			limit = limit >> ns.shift << ns.shift
		case OpWriteZeroes:
			limit = min(int64(q.assoc.maxTransfer)>>ns.shift, 1<<16) << ns.shift
		case OpDiscard:
			limit = int64(1<<32-1) << ns.shift
		}
	}
	if len(r.retry) > 0 {
		return r.retry[0].off, min(r.retry[0].n, limit)
	}
	return r.cursor, min(r.end-r.cursor, limit)
}

// data returns the memory a slot's command moves its data through.
func (q *queue) data(s *slot) []byte {
	if s.buf >= 0 {
		o := s.buf * q.cfg.bufSize
		return q.bufMem[o : o+q.cfg.bufSize]
	}
	return s.capsule[nvmeof.CommandSize:]
}

// dataSGL returns SGL1 for n bytes of a slot's data memory from off (in
// its large buffer, or in its area): a keyed SGL on RDMA, a Transport SGL
// Data Block on TCP.
func (q *queue) dataSGL(s *slot, off int, n int64) nvmeof.SGLDescriptor {
	s.xfer = q.data(s)[off : off+int(n)]
	return q.tr.dataSGL(s, off, n)
}

// issue builds the command of a reserved slot and posts its capsule.
func (q *queue) issue(s *slot) {
	defer q.issuing.Done()
	r := s.req
	s.xfer, s.inPlace, s.icData = nil, false, nil
	var cmd nvmeof.Command
	capLen := nvmeof.CommandSize
	cmd.DPTR = q.tr.nullSGL()
	switch r.Op {
	case OpRead, OpWrite:
		ns := r.ns
		cmd.Opcode = nvmeof.IORead
		if r.Op == OpWrite {
			cmd.Opcode = nvmeof.IOWrite
		}
		cmd.NSID = ns.nsid
		cmd.SetSLBA(uint64(s.off) >> ns.shift)
		cmd.SetBlocks(uint32(s.n >> ns.shift))
		cmd.SetFUA(r.FUA)
		if r.Op == OpWrite {
			if s.direct == nil {
				copy(q.data(s)[:s.n], r.Buf[s.off-r.Offset:])
			}
			if s.buf < 0 && s.n <= int64(q.cfg.icd) {
				cmd.DPTR = nvmeof.InCapsuleSGL{Length: uint32(s.n)}.Descriptor()
				capLen += int(s.n)
				s.icData = s.direct
				break
			}
		}
		if s.direct != nil {
			// The caller's registered memory: no copy either way.
			s.xfer, s.inPlace = s.direct, r.Op == OpRead
			cmd.DPTR = q.tr.directSGL(s)
			break
		}
		cmd.DPTR = q.dataSGL(s, 0, s.n)
		if r.Op == OpRead && q.tr.readsInPlace() {
			// The chunk lies in the caller's buffer (an unaligned read's
			// first and last chunks may not): the data goes straight
			// there.
			if lo := s.off - r.Offset; lo >= 0 && lo+s.n <= int64(len(r.Buf)) {
				s.xfer, s.inPlace = r.Buf[lo:lo+s.n], true
			}
		}
	case OpFlush:
		cmd.Opcode = nvmeof.IOFlush
		cmd.NSID = r.ns.nsid
	case OpWriteZeroes:
		ns := r.ns
		cmd.Opcode = nvmeof.IOWriteZeroes
		cmd.NSID = ns.nsid
		cmd.SetSLBA(uint64(s.off) >> ns.shift)
		cmd.SetBlocks(uint32(s.n >> ns.shift))
		cmd.SetFUA(r.FUA)
	case OpDiscard:
		ns := r.ns
		cmd.Opcode = nvmeof.IODatasetManagement
		cmd.NSID = ns.nsid
		cmd.SetDSMRanges(1)
		cmd.CDW11 = uint32(nvmeof.DSMDeallocate)
		rng := [1]nvmeof.DSMRange{{Length: uint32(s.n >> ns.shift), SLBA: uint64(s.off) >> ns.shift}}
		nvmeof.MarshalDSMRanges(q.data(s), rng[:])
		if q.cfg.icd >= nvmeof.DSMRangeSize {
			cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.DSMRangeSize}.Descriptor()
			capLen += nvmeof.DSMRangeSize
		} else {
			cmd.DPTR = q.dataSGL(s, 0, nvmeof.DSMRangeSize)
		}
	case opPassthru:
		capLen = q.issuePassthru(s, &cmd)
	case opRaw:
		raw := r.raw
		cmd = raw.sqe
		switch {
		case raw.inCapsule:
			copy(s.capsule[nvmeof.CommandSize:], raw.data)
			cmd.DPTR = nvmeof.InCapsuleSGL{Length: uint32(len(raw.data))}.Descriptor()
			capLen += len(raw.data)
		case len(raw.data) > 0:
			cmd.DPTR = q.tr.rawSGL(s, raw)
		default:
			cmd.DPTR = q.tr.nullSGL()
		}
	}
	cmd.CID = s.cid()
	cmd.SetPSDT(nvmeof.PSDTSGLBuffer)
	cmd.MarshalTo(s.capsule)
	s.gotResp = false
	q.tr.send(s, capLen)
}

// copyOut copies the part of a read command's data that the request
// asked for into its buffer.
func copyOut(r *Request, off int64, data []byte) {
	lo := max(off, r.Offset)
	hi := min(off+int64(len(data)), r.Offset+int64(len(r.Buf)))
	if lo < hi {
		copy(r.Buf[lo-r.Offset:hi-r.Offset], data[lo-off:hi-off])
	}
}

// fail stops the queue after its connection failed: the QP goes to
// StateError, commands in flight and pending are collected, admin commands
// fail, and I/O requests go to the controller to wait for a reconnect (or
// to fail). It runs on the queue goroutine, or on close once that has
// exited.
func (q *queue) fail(cause error) {
	if q.failed {
		return
	}
	q.failed = true
	q.tr.setError()
	q.mu.Lock()
	q.stopped = true
	q.cause = cause
	q.mu.Unlock()
	// No command is reserved any more; wait for those being posted.
	q.issuing.Wait()

	var lost, raws []*Request
	q.mu.Lock()
	for r := q.pendHead; r != nil; {
		next := r.next
		r.next = nil
		if r.raw != nil {
			r.queued = false
			raws = append(raws, r)
		} else {
			lost = append(lost, r)
		}
		r = next
	}
	q.pendHead, q.pendTail = nil, nil
	for i := range q.slots {
		s := &q.slots[i]
		if !s.busy {
			continue
		}
		r := s.req
		s.busy, s.req = false, nil
		s.live.Store(0)
		if s.buf >= 0 {
			q.freeBufs = append(q.freeBufs, uint16(s.buf))
			s.buf = -1
		}
		q.freeSlots = append(q.freeSlots, s.idx)
		r.outstanding--
		if r.raw != nil {
			if !r.queued {
				r.queued = true
				raws = append(raws, r)
			}
			continue
		}
		r.retry = append(r.retry, chunk{s.off, s.n})
		r.inflight = true
		if !r.queued {
			r.queued = true
			lost = append(lost, r)
		}
	}
	q.mu.Unlock()
	close(q.failedCh)
	q.log.Debug("nvmeof/host: queue failed", "cause", cause, "requests", len(lost))
	err := lostError(cause)
	for _, r := range raws {
		r.queued = false
		r.noteError(0, err)
		r.failRest(err)
		r.finish()
	}
	q.ctrl.queueFailed(q, cause, lost)
}

// exec runs one admin or Fabrics command on the queue and waits for it.
// Data moves in the capsule (host to controller, when allowed and it
// fits) or as the transport moves a command's own data (RDMA: a memory
// region registered for this command alone and offered with a keyed SGL
// that asks for invalidation; TCP: straight from and into data). If ctx ends first,
// the queue is dropped (the command could not be taken back otherwise)
// and exec returns once the command has failed.
func (q *queue) exec(ctx context.Context, sqe nvmeof.Command, data []byte, dir nvmeof.DataDirection, inCapsuleOK bool) (nvmeof.Completion, error) {
	raw := &rawCommand{sqe: sqe, data: data, dir: dir}
	if len(data) > 0 {
		if dir == nvmeof.HostToController && inCapsuleOK && len(data) <= q.cfg.icd && len(data) <= q.stride-nvmeof.CommandSize {
			raw.inCapsule = true
		} else if err := q.tr.rawStart(raw); err != nil {
			return nvmeof.Completion{}, err
		}
	}
	r := &Request{Op: opRaw, raw: raw, ctrl: q.ctrl}
	r.reset(0, 1)
	r.state.Store(reqBusy)
	q.submit(r)
	select {
	case <-r.wake:
	case <-ctx.Done():
		q.tr.setError()
		<-r.wake
		if r.err != nil {
			r.err = fmt.Errorf("%w (%w)", ctx.Err(), r.err)
		}
	}
	if !raw.inCapsule && len(data) > 0 {
		q.tr.rawEnd(raw, r.err == nil)
	}
	return raw.cqe, r.err
}

// close tears the queue down: the connection is dropped, what was in
// flight is collected (see fail), the goroutine stops and the resources
// are released. Safe to call more than once.
func (q *queue) close() {
	q.closeOnce.Do(q.teardown)
}

func (q *queue) teardown() {
	if q.cancel == nil { // never connected
		q.release()
		return
	}
	q.tr.setError()
	select {
	case <-q.failedCh:
	case <-time.After(2 * time.Second):
		// The provider did not flush; collect without the goroutine.
	}
	q.cancel()
	<-q.exited
	q.fail(fmt.Errorf("nvmeof/host: queue %d: %w", q.qid, ErrClosed))
	q.release()
}

// release frees the transport's resources.
func (q *queue) release() {
	if q.tr != nil {
		q.tr.release()
	}
}
