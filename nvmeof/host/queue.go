package host

import (
	"context"
	"errors"
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
	// maxInline is the largest capsule sent with an inline Send.
	maxInline = 256
	// maxInCapsuleData caps the in-capsule data of one command, whatever
	// the controller offers.
	maxInCapsuleData = 16 << 10
	// minArea is the smallest data area of an I/O command slot.
	minArea = 4096

	// Work request IDs: receives carry wrRecv and their index; Sends
	// carry the command's CID, and wrQuiet when they were signaled only to
	// retire send-queue entries.
	wrRecv  uint64 = 1 << 63
	wrQuiet uint64 = 1 << 62
)

// nullSGL is SGL1 of a command without data, in the form Linux hosts
// send: a Keyed SGL Data Block with address, length and key zero.
var nullSGL, _ = nvmeof.KeyedSGL{}.Descriptor()

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

// queue is one NVMe queue over one RDMA reliable connection: a QP and its
// CQ, the response Recvs, the command slots with their capsules, the large
// buffers, and the goroutine that reaps completions.
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

	qp     rdma.QP
	cq     rdma.CQ
	respMR rdma.MR // entries × 16-byte responses
	slotMR rdma.MR // slots × (SQE + area)
	bufMR  rdma.MR // buffers × bufSize; nil without buffers

	recvs  []rdma.RecvWR
	slots  []slot
	stride int
	// inFlight is the most commands in flight: the slots, cut to the
	// controller's receive queue size.
	inFlight int

	signalEvery uint32
	sends       atomic.Uint32 // inline Sends posted, for periodic signaling

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
	// completions: issue then leaves its Send in batch, and the goroutine
	// posts the batch with one PostSend (one writev on iwarp) at its end.
	// batchOn mirrors it for a lock-free check.
	batching bool
	batch    []rdma.SendWR
	batchOn  atomic.Bool

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

	capsule []byte // SQE and data area, in slotMR
	capOff  int    // offset of capsule in slotMR
	wr      [1]rdma.SendWR
	sge     [1]rdma.SGE
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
	maxSend := 2*depth + 2
	q.signalEvery = uint32(max(1, depth/2))
	if q.cq, err = c.pd.CreateCQ(qc.entries + maxSend + 16); err != nil {
		return nil, err
	}
	q.qp, err = c.pd.CreateQP(rdma.QPConfig{
		SendCQ: q.cq, RecvCQ: q.cq,
		MaxSendWR: maxSend, MaxRecvWR: qc.entries, MaxSGE: 1, MaxInline: maxInline,
	})
	if err != nil {
		return nil, err
	}
	if q.respMR, err = c.pd.Alloc(qc.entries*nvmeof.CompletionSize, rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	slotAccess := rdma.AccessLocalWrite
	if qc.area > 0 {
		slotAccess = rdma.AccessAll
	}
	if q.slotMR, err = c.pd.Alloc(depth*q.stride, slotAccess); err != nil {
		return nil, err
	}
	if qc.buffers > 0 {
		if q.bufMR, err = c.pd.Alloc(qc.buffers*qc.bufSize, rdma.AccessAll); err != nil {
			return nil, err
		}
		q.freeBufs = make([]uint16, 0, qc.buffers)
		for i := qc.buffers - 1; i >= 0; i-- {
			q.freeBufs = append(q.freeBufs, uint16(i))
		}
	}
	q.recvs = make([]rdma.RecvWR, qc.entries)
	sges := make([]rdma.SGE, qc.entries)
	for i := range q.recvs {
		sges[i] = rdma.SGEOf(q.respMR, i*nvmeof.CompletionSize, nvmeof.CompletionSize)
		q.recvs[i] = rdma.RecvWR{ID: wrRecv | uint64(i), SGL: sges[i : i+1]}
	}
	q.slots = make([]slot, depth)
	mem := q.slotMR.Bytes()
	for i := range q.slots {
		s := &q.slots[i]
		s.idx = uint16(i)
		s.buf = -1
		s.capOff = i * q.stride
		s.capsule = mem[s.capOff : s.capOff+q.stride : s.capOff+q.stride]
		s.sge[0] = rdma.SGEOf(q.slotMR, s.capOff, nvmeof.CommandSize)
		s.wr[0] = rdma.SendWR{Op: rdma.OpSend, SGL: s.sge[:]}
	}
	q.batch = make([]rdma.SendWR, 0, depth)
	q.freeSlots = make([]uint16, 0, depth)
	for i := depth - 1; i >= 0; i-- {
		q.freeSlots = append(q.freeSlots, uint16(i))
	}
	if err = q.qp.PostRecv(q.recvs); err != nil {
		return nil, err
	}
	return q, nil
}

// connect establishes the RDMA connection with the NVMe RDMA_CM private
// data and starts the queue goroutine. cntlid is the controller of an
// I/O queue (0 for the admin queue, where the field is reserved).
func (q *queue) connect(ctx context.Context, host string, cntlid uint16) error {
	req := nvmeof.RDMACMRequest{
		QID:     q.qid,
		HRQSize: uint16(q.cfg.entries),
		HSQSize: uint16(q.cfg.entries - 1),
		CNTLID:  cntlid,
	}
	var priv [nvmeof.RDMACMRequestSize]byte
	if _, err := req.MarshalTo(priv[:]); err != nil {
		return err
	}
	reply, err := q.qp.Connect(ctx, host, priv[:])
	if err != nil {
		var rej *rdma.RejectError
		if errors.As(err, &rej) && len(rej.Private) > 0 {
			var j nvmeof.RDMACMReject
			if jerr := j.UnmarshalBinary(rej.Private); jerr == nil {
				return fmt.Errorf("nvmeof/host: queue %d: controller rejected the connection: %w: %w", q.qid, j.Status, err)
			}
		}
		return fmt.Errorf("nvmeof/host: queue %d: connect to %s: %w", q.qid, host, err)
	}
	var acc nvmeof.RDMACMAccept
	if err := acc.UnmarshalBinary(reply); err != nil {
		return fmt.Errorf("%w: queue %d: accept private data: %w", ErrProtocol, q.qid, err)
	}
	if acc.CRQSize == 0 {
		return fmt.Errorf("%w: queue %d: controller receive queue size 0", ErrProtocol, q.qid)
	}
	// Never have more commands in flight than the controller has
	// receives posted for.
	if n := int(acc.CRQSize); n < len(q.freeSlots) {
		q.freeSlots = q.freeSlots[len(q.freeSlots)-n:]
	}
	q.inFlight = len(q.freeSlots)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	go q.run()
	return nil
}

// run reaps completions until the queue is closed.
func (q *queue) run() {
	defer close(q.exited)
	wcs := make([]rdma.WC, 64)
	posting := make([]rdma.SendWR, 0, cap(q.batch))
	for {
		n, err := q.cq.Wait(q.ctx, wcs)
		if err != nil {
			if q.ctx.Err() != nil {
				return
			}
			q.fail(fmt.Errorf("nvmeof/host: queue %d: completion queue: %w", q.qid, err))
			<-q.ctx.Done()
			return
		}
		q.mu.Lock()
		q.batching = true
		q.batchOn.Store(true)
		q.mu.Unlock()
		for i := range wcs[:n] {
			q.handle(&wcs[i])
		}
		q.mu.Lock()
		q.batching = false
		q.batchOn.Store(false)
		posting = append(posting[:0], q.batch...)
		q.batch = q.batch[:0]
		q.mu.Unlock()
		if len(posting) > 0 && !q.failed {
			q.post(posting)
		}
	}
}

// post posts Sends of command capsules; a failure drops the queue.
func (q *queue) post(wrs []rdma.SendWR) {
	if err := q.qp.PostSend(wrs); err != nil {
		q.log.Warn("nvmeof/host: posting commands failed; dropping the queue", "err", err)
		q.qp.SetError()
	}
}

// handle processes one work completion.
func (q *queue) handle(wc *rdma.WC) {
	if wc.Status != rdma.Success {
		if !q.failed {
			err := wc.Status.Err()
			if qerr := q.qp.Err(); qerr != nil && !errors.Is(qerr, rdma.WRFlushErr) {
				err = qerr
			}
			q.fail(fmt.Errorf("nvmeof/host: queue %d: %v: %w", q.qid, wc.Opcode, err))
		}
		return
	}
	if q.failed {
		return
	}
	switch {
	case wc.ID&wrRecv != 0:
		q.response(int(wc.ID&^wrRecv), wc)
	case wc.ID&wrQuiet != 0:
		// An inline Send signaled only to retire send-queue entries.
	default:
		cid := uint16(wc.ID)
		idx := int(cid & cidIndexMask)
		if idx >= len(q.slots) {
			q.fail(fmt.Errorf("%w: queue %d: send completion for slot %d", ErrProtocol, q.qid, idx))
			return
		}
		s := &q.slots[idx]
		if s.live.Load() != uint32(cid)+1 || !s.waitSend {
			q.fail(fmt.Errorf("%w: queue %d: send completion for CID %#04x, not outstanding", ErrProtocol, q.qid, cid))
			return
		}
		s.waitSend = false
		if s.gotResp {
			q.complete(s)
		}
	}
}

// response handles the response capsule in receive buffer i.
func (q *queue) response(i int, wc *rdma.WC) {
	if i >= len(q.recvs) {
		q.fail(fmt.Errorf("%w: queue %d: receive %d", ErrProtocol, q.qid, i))
		return
	}
	if wc.ByteLen < nvmeof.CompletionSize {
		q.fail(fmt.Errorf("%w: queue %d: response capsule of %d bytes", ErrProtocol, q.qid, wc.ByteLen))
		return
	}
	var cqe nvmeof.Completion
	off := i * nvmeof.CompletionSize
	if err := cqe.UnmarshalBinary(q.respMR.Bytes()[off : off+nvmeof.CompletionSize]); err != nil {
		q.fail(fmt.Errorf("%w: queue %d: %w", ErrProtocol, q.qid, err))
		return
	}
	if err := q.qp.PostRecv(q.recvs[i : i+1]); err != nil {
		q.fail(fmt.Errorf("nvmeof/host: queue %d: repost receive: %w", q.qid, err))
		return
	}
	idx := int(cqe.CID & cidIndexMask)
	if idx >= len(q.slots) || q.slots[idx].live.Load() != uint32(cqe.CID)+1 || q.slots[idx].gotResp {
		q.fail(fmt.Errorf("%w: queue %d: response for CID %#04x, which is not outstanding", ErrProtocol, q.qid, cqe.CID))
		return
	}
	s := &q.slots[idx]
	if wc.Flags&rdma.WCWithInv != 0 {
		raw := s.req.raw
		if raw == nil || raw.mr == nil || raw.mr.RKey() != wc.InvRKey {
			q.fail(fmt.Errorf("%w: queue %d: response to CID %#04x invalidated rkey %#x, which the command did not offer",
				ErrProtocol, q.qid, cqe.CID, wc.InvRKey))
			return
		}
	}
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
		if r.Op == OpRead {
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
		buf := -1
		if (r.Op == OpRead || r.Op == OpWrite) && n > int64(q.cfg.area) || r.Op == opPassthru && q.passthruNeedsBuffer(r) {
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
		return q.bufMR.Bytes()[o : o+q.cfg.bufSize]
	}
	return s.capsule[nvmeof.CommandSize:]
}

// keyed returns the keyed SGL for n bytes of a slot's data memory.
func (q *queue) keyed(s *slot, n int64) nvmeof.SGLDescriptor {
	k := nvmeof.KeyedSGL{Length: uint32(n)}
	if s.buf >= 0 {
		k.Address = q.bufMR.Addr() + uint64(s.buf*q.cfg.bufSize)
		k.Key = q.bufMR.RKey()
	} else {
		k.Address = q.slotMR.Addr() + uint64(s.capOff+nvmeof.CommandSize)
		k.Key = q.slotMR.RKey()
	}
	d, _ := k.Descriptor() // lengths are below 2^24 by construction
	return d
}

// issue builds the command of a reserved slot and posts its capsule.
func (q *queue) issue(s *slot) {
	defer q.issuing.Done()
	r := s.req
	var cmd nvmeof.Command
	capLen := nvmeof.CommandSize
	cmd.DPTR = nullSGL
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
			copy(q.data(s)[:s.n], r.Buf[s.off-r.Offset:])
			if s.buf < 0 && s.n <= int64(q.cfg.icd) {
				cmd.DPTR = nvmeof.InCapsuleSGL{Length: uint32(s.n)}.Descriptor()
				capLen += int(s.n)
				break
			}
		}
		cmd.DPTR = q.keyed(s, s.n)
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
			cmd.DPTR = q.keyed(s, nvmeof.DSMRangeSize)
		}
	case opPassthru:
		capLen = q.issuePassthru(s, &cmd)
	case opRaw:
		raw := r.raw
		cmd = raw.sqe
		switch {
		case raw.mr != nil:
			d, _ := nvmeof.KeyedSGL{Address: raw.mr.Addr(), Length: uint32(len(raw.data)), Key: raw.mr.RKey(), Invalidate: true}.Descriptor()
			cmd.DPTR = d
		case raw.inCapsule:
			copy(s.capsule[nvmeof.CommandSize:], raw.data)
			cmd.DPTR = nvmeof.InCapsuleSGL{Length: uint32(len(raw.data))}.Descriptor()
			capLen += len(raw.data)
		default:
			cmd.DPTR = nullSGL
		}
	}
	cmd.CID = s.cid()
	cmd.SetPSDT(nvmeof.PSDTSGLBuffer)
	cmd.MarshalTo(s.capsule)
	wr := &s.wr[0]
	s.sge[0].Length = uint32(capLen)
	if capLen <= maxInline {
		wr.Flags = rdma.Inline
		wr.ID = wrQuiet | uint64(s.idx)
		if q.sends.Add(1)%q.signalEvery == 0 {
			wr.Flags |= rdma.Signaled
		}
		s.waitSend = false
	} else {
		wr.Flags = rdma.Signaled
		wr.ID = uint64(s.cid())
		s.waitSend = true
	}
	s.gotResp = false
	s.live.Store(uint32(s.cid()) + 1)
	if q.batchOn.Load() {
		q.mu.Lock()
		if q.batching {
			q.batch = append(q.batch, *wr)
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
	q.post(s.wr[:])
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
	q.qp.SetError()
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
// fits) or through a memory region registered for this command alone and
// offered with a keyed SGL that asks for invalidation. If ctx ends first,
// the queue is dropped (the command could not be taken back otherwise)
// and exec returns once the command has failed.
func (q *queue) exec(ctx context.Context, sqe nvmeof.Command, data []byte, dir nvmeof.DataDirection, inCapsuleOK bool) (nvmeof.Completion, error) {
	raw := &rawCommand{sqe: sqe, data: data, dir: dir}
	if len(data) > 0 {
		if dir == nvmeof.HostToController && inCapsuleOK && len(data) <= q.cfg.icd && len(data) <= q.stride-nvmeof.CommandSize {
			raw.inCapsule = true
		} else {
			access := rdma.AccessRemoteRead
			if dir == nvmeof.ControllerToHost {
				access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite
			}
			mr, err := q.ctrl.pd.Alloc(len(data), access)
			if err != nil {
				return nvmeof.Completion{}, err
			}
			if dir == nvmeof.HostToController {
				copy(mr.Bytes(), data)
			}
			raw.mr = mr
		}
	}
	r := &Request{Op: opRaw, raw: raw, ctrl: q.ctrl}
	r.reset(0, 1)
	r.state.Store(reqBusy)
	q.submit(r)
	select {
	case <-r.wake:
	case <-ctx.Done():
		q.qp.SetError()
		<-r.wake
		if r.err != nil {
			r.err = fmt.Errorf("%w (%w)", ctx.Err(), r.err)
		}
	}
	if raw.mr != nil {
		if dir == nvmeof.ControllerToHost && r.err == nil {
			copy(data, raw.mr.Bytes())
		}
		raw.mr.Deregister()
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
	q.qp.SetError()
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

// release frees the QP, CQ and memory regions.
func (q *queue) release() {
	if q.qp != nil {
		q.qp.Close()
		q.qp = nil
	}
	for _, mr := range []rdma.MR{q.respMR, q.slotMR, q.bufMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	q.respMR, q.slotMR, q.bufMR = nil, nil, nil
	if q.cq != nil {
		q.cq.Close()
		q.cq = nil
	}
}
