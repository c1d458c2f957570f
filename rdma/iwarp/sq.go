package iwarp

import (
	"math"
	"sync"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

// swr is one send queue slot: a copy of the WR and its progress.
type swr struct {
	wr        rdma.SendWR // SGL points at sgl
	sgl       []rdma.SGE  // cap MaxSGE, reused
	inline    []byte      // cap MaxInline, reused; Inline data copied at post
	src       [][]byte    // resolved gather list, reused
	total     uint64
	signaled  bool
	readsLeft int  // Read Requests whose responses are still to be placed
	done      bool // finished: may complete once every earlier WR has
	status    rdma.WCStatus
}

// orqEntry is one outstanding Read Request: where its response goes.
type orqEntry struct {
	seq      uint64 // send queue position of the Read WR
	sinkKey  uint32
	sinkAddr uint64
	size     uint32
	placed   uint32
}

// sendQueue holds posted send WRs from post to completion. Positions are
// sequence numbers: [head, next) were handed to the wire (or are being),
// [next, tail) wait to be transmitted.
type sendQueue struct {
	mu       sync.Mutex // guards everything below but the drainer-owned fields
	slots    []swr
	head     uint64 // oldest not yet completed
	next     uint64 // next to transmit
	tail     uint64 // next free
	draining bool   // a goroutine is transmitting (see kickSend)
	flushed  bool   // the QP is in error: every WR completes at once
	orq      []orqEntry
	orqHead  uint64
	orqTail  uint64

	// Drainer-owned: only the goroutine that set draining touches these;
	// the handoff under mu orders successive drainers.
	msnSend uint32
	msnRead uint32
	cur     cursor
}

func (s *sendQueue) init(depth, maxSGE, maxInline int) {
	s.slots = make([]swr, depth)
	for i := range s.slots {
		s.slots[i].sgl = make([]rdma.SGE, 0, maxSGE)
		s.slots[i].inline = make([]byte, 0, maxInline)
		s.slots[i].src = make([][]byte, 0, maxSGE+1)
	}
	s.orq = make([]orqEntry, ReadDepth)
	s.msnSend, s.msnRead = 1, 1
}

func (s *sendQueue) slot(seq uint64) *swr { return &s.slots[seq%uint64(len(s.slots))] }

func (s *sendQueue) orqLen() int { return int(s.orqTail - s.orqHead) }

var wcOpOf = [...]rdma.WCOpcode{
	rdma.OpSend: rdma.WCSend, rdma.OpSendImm: rdma.WCSend, rdma.OpSendInv: rdma.WCSend,
	rdma.OpWrite: rdma.WCWrite, rdma.OpWriteImm: rdma.WCWrite, rdma.OpRead: rdma.WCRead,
}

// PostSend implements rdma.QP. The calling goroutine transmits the batch
// itself unless another one is already transmitting (then that one takes
// these WRs too), so PostSend can block while TCP accepts the data.
func (q *qp) PostSend(wrs []rdma.SendWR) error {
	if q.closed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	st := q.State()
	if st != rdma.StateRTS && st != rdma.StateError {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	s := &q.sq
	s.mu.Lock()
	for i := range wrs {
		wr := &wrs[i]
		if err := q.checkSendWR(wr); err != nil {
			s.mu.Unlock()
			q.kickSend()
			return &rdma.PostError{Index: i, Err: err}
		}
		if s.flushed {
			q.pushSendWC(wr.ID, rdma.WRFlushErr, wcOpOf[wr.Op])
			continue
		}
		if s.tail-s.head == uint64(len(s.slots)) {
			s.mu.Unlock()
			q.kickSend()
			return &rdma.PostError{Index: i, Err: rdma.ErrQueueFull}
		}
		w := s.slot(s.tail)
		w.wr = *wr
		w.sgl = append(w.sgl[:0], wr.SGL...)
		w.wr.SGL = w.sgl
		w.inline = w.inline[:0]
		w.total = 0
		for _, g := range wr.SGL {
			w.total += uint64(g.Length)
		}
		if wr.Flags&rdma.Inline != 0 {
			for _, g := range wr.SGL {
				w.inline = append(w.inline, q.inlineBytes(g)...)
			}
		}
		w.signaled = q.cfg.SignalAll || wr.Flags&rdma.Signaled != 0
		w.readsLeft, w.done, w.status = 0, false, rdma.Success
		s.tail++
	}
	s.mu.Unlock()
	q.kickSend()
	return nil
}

func (q *qp) checkSendWR(wr *rdma.SendWR) error {
	if int(wr.Op) >= len(wcOpOf) {
		return rdma.ErrInvalidArgument
	}
	if len(wr.SGL) > q.cfg.MaxSGE || (wr.Op == rdma.OpRead && len(wr.SGL) > ReadDepth) {
		return rdma.ErrTooManySGE // a Read takes one Read Request per SGE
	}
	var total uint64
	for _, g := range wr.SGL {
		total += uint64(g.Length)
	}
	if total > math.MaxUint32 {
		return rdma.ErrInvalidArgument
	}
	if wr.Flags&rdma.Inline != 0 {
		if wr.Op == rdma.OpRead {
			return rdma.ErrInvalidArgument
		}
		if total > uint64(q.cfg.MaxInline) {
			return rdma.ErrInlineTooLarge
		}
	}
	return nil
}

// inlineBytes returns the bytes an Inline SGE names: through its lkey when
// that resolves, else straight from the address (Inline needs no lkey).
func (q *qp) inlineBytes(g rdma.SGE) []byte {
	if r, b, ok := q.pd.keys.Acquire(g.LKey, g.Addr, uint64(g.Length), 0); ok {
		r.Release()
		return b
	}
	if g.Length == 0 {
		return nil
	}
	addr := uintptr(g.Addr)
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), g.Length)
}

// localBytes resolves a local SGE for a gather or (want LocalWrite) a
// scatter. The access is checked, not held: the memory is Go memory that
// stays valid, and Deregister only has to stop remote access.
func (q *qp) localBytes(g rdma.SGE, want rdma.Access) ([]byte, bool) {
	r, b, ok := q.pd.keys.Acquire(g.LKey, g.Addr, uint64(g.Length), want)
	if !ok {
		return nil, false
	}
	r.Release()
	return b, true
}

// groupBytes ends a group of WRs the drainer transmits together once
// their payloads reach it: small WRs share a writev, and a large one
// completes as soon as it is written instead of waiting for the WRs
// behind it.
const groupBytes = 64 << 10

// kickSend transmits queued WRs in order until the queue is empty or the
// next WR must wait for Reads (Fence, or ORD exhausted). Only one
// goroutine drains at a time; others return at once and their WRs are
// taken by the drainer. The drainer takes the WRs posted so far (up to
// groupBytes of payload) into one batch, one writev when they fit,
// completes them once it is written, and looks again: WRs posted
// meanwhile form the next batch.
func (q *qp) kickSend() {
	s := &q.sq
	s.mu.Lock()
	if s.draining || s.flushed || q.State() != rdma.StateRTS {
		s.mu.Unlock()
		return
	}
	s.draining = true
	var failed rdma.WCStatus
	for !s.flushed {
		from := s.next
		var bytes uint64
		for s.next != s.tail && bytes < groupBytes {
			w := s.slot(s.next)
			if w.wr.Flags&rdma.Fence != 0 && s.orqLen() > 0 {
				break // the receiver kicks the responder when the Reads complete
			}
			if w.wr.Op == rdma.OpRead {
				need := max(1, len(w.sgl))
				if ReadDepth-s.orqLen() < need {
					break
				}
				seq := s.next
				if len(w.sgl) == 0 {
					s.orq[s.orqTail%ReadDepth] = orqEntry{seq: seq}
					s.orqTail++
				}
				for _, g := range w.sgl {
					s.orq[s.orqTail%ReadDepth] = orqEntry{seq: seq, sinkKey: g.LKey, sinkAddr: g.Addr, size: g.Length}
					s.orqTail++
				}
				w.readsLeft = need
			} else {
				bytes += w.total
			}
			s.next++
		}
		to := s.next
		if from == to {
			break
		}
		s.mu.Unlock()
		end, st := q.transmitBatch(from, to)
		s.mu.Lock()
		if s.flushed {
			break
		}
		if st == rdma.Success {
			end = to
		}
		for seq := from; seq != end; seq++ {
			if w := s.slot(seq); w.wr.Op != rdma.OpRead {
				w.done = true
			}
		}
		q.retireLocked()
		if st != rdma.Success {
			failed = st
			break
		}
	}
	s.draining = false
	s.mu.Unlock()
	switch failed {
	case rdma.Success:
	case rdma.LocProtErr:
		q.fail(rdma.LocProtErr, &termMsg{cause: wire.TermCause{Layer: wire.LayerRDMAP,
			EType: wire.ETypeRDMAPLocalCatastrophic, Code: wire.CodeUnspecified}})
	default:
		q.fail(failed, nil)
	}
}

// transmitBatch puts the WRs [from, to) on the wire, writing them out
// together. On LocProtErr it returns the failing WR's position: the WRs
// before it went out. On RetryExcErr none counts as written.
func (q *qp) transmitBatch(from, to uint64) (uint64, rdma.WCStatus) {
	s := &q.sq
	t := &q.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	st := rdma.Success
	seq := from
	for ; seq != to; seq++ {
		if st = q.transmitLocked(s.slot(seq)); st != rdma.Success {
			break
		}
	}
	t.flush()
	if t.err != nil {
		return from, rdma.RetryExcErr
	}
	return seq, st
}

// retireLocked completes finished WRs in posting order. sq.mu is held.
func (q *qp) retireLocked() {
	s := &q.sq
	for s.head != s.next {
		w := s.slot(s.head)
		if !w.done {
			return
		}
		if w.signaled || w.status != rdma.Success {
			q.pushSendWC(w.wr.ID, w.status, wcOpOf[w.wr.Op])
		}
		s.head++
	}
}

// flushSendLocked completes every WR still queued: the oldest, if it was
// on the wire, with st (the error that moved the QP to Error), the rest
// with WRFlushErr.
func (q *qp) flushSendLocked(st rdma.WCStatus) {
	s := &q.sq
	s.flushed = true
	if s.head == s.next {
		st = rdma.WRFlushErr
	}
	for ; s.head != s.tail; s.head++ {
		w := s.slot(s.head)
		q.pushSendWC(w.wr.ID, st, wcOpOf[w.wr.Op])
		st = rdma.WRFlushErr
	}
	s.next = s.tail
	s.orqHead = s.orqTail
}

func (q *qp) pushSendWC(id uint64, st rdma.WCStatus, op rdma.WCOpcode) {
	if !q.scq.Push(rdma.WC{ID: id, Status: st, Opcode: op, QPNum: q.num}) {
		q.cqOverrun()
	}
}

// cqOverrun errors the QP when its CQ overflowed; it runs apart because
// the caller holds queue locks.
func (q *qp) cqOverrun() {
	if q.State() != rdma.StateError {
		go q.fail(rdma.GeneralErr, nil)
	}
}

// transmitLocked queues the FPDUs of one WR on the batch. It returns
// LocProtErr for a bad local SGE (nothing of the WR queued). The caller
// holds tx.mu and writes the batch out.
func (q *qp) transmitLocked(w *swr) rdma.WCStatus {
	s := &q.sq
	src := w.src[:0]
	switch {
	case w.wr.Op == rdma.OpRead:
		for _, g := range w.sgl {
			if _, ok := q.localBytes(g, rdma.AccessLocalWrite); !ok {
				return rdma.LocProtErr
			}
		}
	case w.wr.Flags&rdma.Inline != 0:
		src = append(src, w.inline)
	default:
		for _, g := range w.sgl {
			b, ok := q.localBytes(g, 0)
			if !ok {
				return rdma.LocProtErr
			}
			src = append(src, b)
		}
	}
	w.src = src
	s.cur.reset(src)
	total := int(w.total)
	seg := q.prov.cfg.maxSegment

	switch w.wr.Op {
	case rdma.OpSend, rdma.OpSendInv, rdma.OpSendImm:
		op := wire.OpSend
		var inv uint32
		if w.wr.Op == rdma.OpSendInv {
			op, inv = wire.OpSendInv, w.wr.InvRKey
		}
		if w.wr.Flags&rdma.Solicited != 0 {
			op += wire.OpSendSE - wire.OpSend
		}
		if w.wr.Op == rdma.OpSendImm {
			q.immLocked(w.wr.Imm, wire.ImmKindSend, false)
		}
		msn := s.msnSend
		s.msnSend++
		for off := 0; ; {
			n := min(seg, total-off)
			h := wire.Header{Last: off+n == total, Opcode: op, RsvdULP: inv, QN: wire.QNSend, MSN: msn, MO: uint32(off)}
			q.segmentLocked(&h, nil, n)
			if off += n; off == total {
				break
			}
		}
	case rdma.OpWrite, rdma.OpWriteImm:
		for off := 0; ; {
			n := min(seg, total-off)
			h := wire.Header{Tagged: true, Last: off+n == total, Opcode: wire.OpWrite, STag: w.wr.RKey, TO: w.wr.RemoteAddr + uint64(off)}
			q.segmentLocked(&h, nil, n)
			if off += n; off == total {
				break
			}
		}
		if w.wr.Op == rdma.OpWriteImm {
			q.immLocked(w.wr.Imm, wire.ImmKindWrite, w.wr.Flags&rdma.Solicited != 0)
		}
	case rdma.OpRead:
		var body [wire.ReadRequestLen]byte
		src := w.wr.RemoteAddr
		rr := wire.ReadRequest{SrcSTag: w.wr.RKey}
		for i := 0; i < max(1, len(w.sgl)); i++ {
			rr.SinkSTag, rr.SinkTO, rr.Size = 0, 0, 0
			if len(w.sgl) > 0 {
				g := w.sgl[i]
				rr.SinkSTag, rr.SinkTO, rr.Size = g.LKey, g.Addr, g.Length
			}
			rr.SrcTO = src
			src += uint64(rr.Size)
			rr.MarshalTo(body[:])
			h := wire.Header{Last: true, Opcode: wire.OpReadRequest, QN: wire.QNReadRequest, MSN: s.msnRead}
			s.msnRead++
			q.segmentLocked(&h, body[:], 0)
		}
	}
	return rdma.Success
}

// segmentLocked queues one FPDU of n bytes from the drainer's cursor and
// lets other writers in whenever a batch has gone out.
func (q *qp) segmentLocked(h *wire.Header, body []byte, n int) {
	q.tx.fpdu(h, body, &q.sq.cur, n)
	if q.tx.nf == 0 {
		q.tx.mu.Unlock()
		q.tx.mu.Lock()
	}
}

// immLocked queues an RFC 7306 Immediate Data message on queue 0.
func (q *qp) immLocked(v, kind uint32, se bool) {
	var body [wire.ImmDataLen]byte
	d := wire.ImmData{Value: v, Kind: kind}
	d.MarshalTo(body[:])
	op := wire.OpImmediateData
	if se {
		op = wire.OpImmediateDataSE
	}
	h := wire.Header{Last: true, Opcode: op, QN: wire.QNSend, MSN: q.sq.msnSend}
	q.sq.msnSend++
	var c cursor
	c.reset(nil)
	// The 8 bytes are the message payload: pass them as the body so they
	// come from scratch, not from the gather list.
	q.tx.fpdu(&h, body[:], &c, 0)
}

// irqEntry is an inbound Read Request waiting for its response, or (bad)
// one that failed validation and must be answered with a Terminate once
// the responses before it are out.
type irqEntry struct {
	rr   wire.ReadRequest
	bad  bool
	term termMsg
}

// readRespQueue is the inbound Read Request queue (IRD ReadDepth). The
// receiver appends; the responder serves from the head.
type readRespQueue struct {
	mu         sync.Mutex // guards head and tail; entries in [head, tail) belong to the responder
	ring       []irqEntry
	head, tail uint64
}

func (r *readRespQueue) init(n int) { r.ring = make([]irqEntry, n) }

// slotForPush returns the entry to fill, or nil when the queue is full.
func (r *readRespQueue) slotForPush() *irqEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tail-r.head == uint64(len(r.ring)) {
		return nil
	}
	return &r.ring[r.tail%uint64(len(r.ring))]
}

func (r *readRespQueue) commit() {
	r.mu.Lock()
	r.tail++
	r.mu.Unlock()
}

func (r *readRespQueue) peek() (*irqEntry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.head == r.tail {
		return nil, false
	}
	return &r.ring[r.head%uint64(len(r.ring))], true
}

func (r *readRespQueue) pop() {
	r.mu.Lock()
	r.head++
	r.mu.Unlock()
}

// readResponse sends the response to e, a batch of segments at a time,
// holding the source region only while a batch is written. It returns
// false when the QP failed.
func (q *qp) readResponse(e *irqEntry) bool {
	size := uint64(e.rr.Size)
	seg := uint64(q.prov.cfg.maxSegment)
	segs, c := &q.respSegs, &q.respCur
	for off := uint64(0); ; {
		n := min(size-off, seg*fpduBatch)
		r, b, ok := q.pd.keys.Acquire(e.rr.SrcSTag, e.rr.SrcTO+off, n, rdma.AccessRemoteRead)
		if !ok {
			// Deregistered after the request was checked.
			e.term.cause = wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteProtection, Code: wire.CodeInvalidSTag}
			q.fail(rdma.RemAccessErr, &e.term)
			return false
		}
		segs[0] = b
		c.reset(segs[:])
		q.tx.mu.Lock()
		for k := uint64(0); ; {
			m := min(seg, n-k)
			h := wire.Header{Tagged: true, Last: off+k+m == size, Opcode: wire.OpReadResponse,
				STag: e.rr.SinkSTag, TO: e.rr.SinkTO + off + k}
			q.tx.fpdu(&h, nil, c, int(m))
			if k += m; k == n {
				break
			}
		}
		q.tx.flush()
		err := q.tx.err
		q.tx.mu.Unlock()
		r.Release()
		segs[0] = nil
		if err != nil {
			q.fail(rdma.RetryExcErr, nil)
			return false
		}
		if off += n; off == size {
			return true
		}
	}
}
