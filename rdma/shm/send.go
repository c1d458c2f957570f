package shm

import (
	"fmt"

	"github.com/capsule-storage/capsule/rdma"
)

// sendSlot is one posted send WR until it is retired.
type sendSlot struct {
	id       uint64
	op       rdma.Opcode
	wcOp     rdma.WCOpcode
	signaled bool
	done     bool
	status   rdma.WCStatus
	byteLen  uint32

	// A message (Send variants, WriteImm) completes when the peer acks it.
	msg    bool
	typ    entryType
	flags  uint8 // entSolicited
	msn    uint32
	imm    uint32
	inv    uint32
	total  uint32 // payload bytes (0 for WriteImm)
	sent   uint32 // payload bytes already in the ring
	begun  bool   // the first fragment is in the ring
	inline bool   // payload is data, not sgl
	sgl    []rdma.SGE
	data   []byte
}

// sendQueue is the ring of posted send WRs, indexed by absolute sequence
// numbers: slots[seq % len(slots)].
type sendQueue struct {
	slots []sendSlot
	head  uint64 // oldest not retired
	tail  uint64 // next to post
	push  uint64 // first message not wholly in the peer's ring
	ackAt uint64 // where the ack scan resumes

	msn       uint32 // last message number assigned
	pushedMSN uint32 // last message wholly in the ring
	ackedMSN  uint32 // last message the peer acked
	rtail     uint64 // producer index of the peer's ring

	retryExcGiven bool // the RetryExcErr of a lost connection went to a WR
}

func (s *sendQueue) init(n, maxSGE, maxInline int) {
	s.slots = make([]sendSlot, n)
	sges := make([]rdma.SGE, n*maxSGE)
	data := make([]byte, n*maxInline)
	for i := range s.slots {
		s.slots[i].sgl = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		s.slots[i].data = data[i*maxInline : i*maxInline : (i+1)*maxInline]
	}
}

func (s *sendQueue) at(seq uint64) *sendSlot { return &s.slots[seq%uint64(len(s.slots))] }

// msnAfter reports whether message number a comes after b.
func msnAfter(a, b uint32) bool { return int32(a-b) > 0 }

func nextMSN(m uint32) uint32 {
	m++
	if m == 0 {
		m = 1
	}
	return m
}

var wcOps = [...]rdma.WCOpcode{
	rdma.OpSend: rdma.WCSend, rdma.OpSendImm: rdma.WCSend, rdma.OpSendInv: rdma.WCSend,
	rdma.OpWrite: rdma.WCWrite, rdma.OpWriteImm: rdma.WCWrite, rdma.OpRead: rdma.WCRead,
}

// checkSendWR validates a WR before it takes a slot.
func (q *qp) checkSendWR(wr *rdma.SendWR) (total uint64, err error) {
	if int(wr.Op) >= len(wcOps) {
		return 0, fmt.Errorf("%w: opcode %v", rdma.ErrInvalidArgument, wr.Op)
	}
	if len(wr.SGL) > q.cfg.MaxSGE {
		return 0, rdma.ErrTooManySGE
	}
	for _, s := range wr.SGL {
		total += uint64(s.Length)
	}
	if total > 1<<31 {
		return 0, fmt.Errorf("%w: WR of %d bytes", rdma.ErrInvalidArgument, total)
	}
	if wr.Flags&rdma.Inline != 0 {
		if wr.Op == rdma.OpRead {
			return 0, fmt.Errorf("%w: Inline Read", rdma.ErrInvalidArgument)
		}
		if total > uint64(q.cfg.MaxInline) {
			return 0, rdma.ErrInlineTooLarge
		}
	}
	return total, nil
}

// PostSend posts wrs in order. Writes and Reads are executed here, by the
// posting goroutine; Sends are copied into the peer's ring here when it
// has room, else by the RX goroutine once it has.
func (q *qp) PostSend(wrs []rdma.SendWR) error {
	q.sqMu.Lock()
	defer q.sqMu.Unlock()
	if q.closed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	if st := q.State(); st == rdma.StateInit || st == rdma.StateRTR {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	var perr error
	for i := range wrs {
		wr := &wrs[i]
		total, err := q.checkSendWR(wr)
		if err != nil {
			perr = &rdma.PostError{Index: i, Err: err}
			break
		}
		if q.sq.tail-q.sq.head == uint64(len(q.sq.slots)) {
			q.processAcksLocked()
			q.retireLocked()
			if q.sq.tail-q.sq.head == uint64(len(q.sq.slots)) {
				perr = &rdma.PostError{Index: i, Err: rdma.ErrQueueFull}
				break
			}
		}
		s := q.sq.at(q.sq.tail)
		q.sq.tail++
		*s = sendSlot{
			id: wr.ID, op: wr.Op, wcOp: wcOps[wr.Op], byteLen: uint32(total),
			signaled: wr.Flags&rdma.Signaled != 0 || q.cfg.SignalAll,
			sgl:      s.sgl[:0], data: s.data[:0],
		}
		if q.State() == rdma.StateError {
			s.done, s.status = true, rdma.WRFlushErr
			q.retireLocked()
			continue
		}
		switch wr.Op {
		case rdma.OpWrite, rdma.OpRead:
			s.done = true
			s.status = q.rdmaAccess(wr, total)
			if s.status != rdma.Success {
				q.failWR(s.status)
			}
			continue
		case rdma.OpWriteImm:
			if st := q.rdmaAccess(wr, total); st != rdma.Success {
				s.done, s.status = true, st
				q.failWR(st)
				continue
			}
			s.typ, s.imm, s.total = entWriteImm, wr.Imm, 0
		case rdma.OpSend:
			s.typ, s.total = entSend, uint32(total)
		case rdma.OpSendImm:
			s.typ, s.imm, s.total = entSendImm, wr.Imm, uint32(total)
		case rdma.OpSendInv:
			s.typ, s.inv, s.total = entSendInv, wr.InvRKey, uint32(total)
		}
		s.msg = true
		q.sq.msn = nextMSN(q.sq.msn)
		s.msn = q.sq.msn
		if wr.Flags&rdma.Solicited != 0 {
			s.flags = entSolicited
		}
		if wr.Flags&rdma.Inline != 0 && wr.Op != rdma.OpWriteImm {
			s.inline = true
			for _, g := range wr.SGL {
				s.data = append(s.data, rawBytes(g.Addr, int(g.Length))...)
			}
		} else if wr.Op != rdma.OpWriteImm {
			s.sgl = append(s.sgl, wr.SGL...)
		}
	}
	q.pumpLocked()
	q.retireLocked()
	raceRelease()
	return perr
}

// failWR moves the QP to Error after a WR of its own failed with st.
func (q *qp) failWR(st rdma.WCStatus) {
	remote := rdma.WRFlushErr
	if st == rdma.RemAccessErr {
		remote = rdma.RemAccessErr
	}
	q.fail(st, 0, remote, 0)
}

// rdmaAccess performs a Write (the Write part of a WriteImm) or a Read:
// one copy between the local SGL and the peer's region, made here. It
// returns the WR's status.
func (q *qp) rdmaAccess(wr *rdma.SendWR, total uint64) rdma.WCStatus {
	if total == 0 {
		return rdma.Success // zero-length: no key is checked, as in InfiniBand
	}
	read := wr.Op == rdma.OpRead
	inline := wr.Flags&rdma.Inline != 0
	want := rdma.AccessRemoteWrite
	var local rdma.Access
	if read {
		want, local = rdma.AccessRemoteRead, rdma.AccessLocalWrite
	}
	held := q.held[:0]
	defer func() {
		for _, r := range held {
			r.Release()
		}
		clear(held)
	}()
	var bufs [16][]byte
	var locals [][]byte
	if len(wr.SGL) <= len(bufs) {
		locals = bufs[:0]
	} else {
		locals = make([][]byte, 0, len(wr.SGL))
	}
	for _, g := range wr.SGL {
		if g.Length == 0 {
			continue
		}
		if inline {
			locals = append(locals, rawBytes(g.Addr, int(g.Length)))
			continue
		}
		r, b, ok := q.pd.keys.Acquire(g.LKey, g.Addr, uint64(g.Length), local)
		if !ok {
			return rdma.LocProtErr
		}
		held = append(held, r)
		locals = append(locals, b)
	}
	rm, st := q.remoteAcquire(wr.RKey, wr.RemoteAddr, total, want)
	if st != rdma.Success {
		q.remoteRelease(false)
		return st
	}
	off := 0
	for _, b := range locals {
		if read {
			off += copy(b, rm[off:])
		} else {
			off += copy(rm[off:], b)
		}
	}
	q.remoteRelease(true)
	return rdma.Success
}

// remoteAcquire announces key in this side's hazard word, checks the
// peer's key-table entry and returns the n bytes at addr of the peer's
// region, fetching its memfd on first use. On Success the view's read
// lock is held; remoteRelease(true) ends the access. sqMu is held.
func (q *qp) remoteAcquire(key uint32, addr, n uint64, want rdma.Access) ([]byte, rdma.WCStatus) {
	q.me.hazard.Store(key)
	if q.peer.term.Load() != 0 {
		q.peerFailed()
		return nil, rdma.WRFlushErr
	}
	v := q.view
	idx := key >> 8
	if idx == 0 || idx >= v.cap {
		return nil, rdma.RemAccessErr
	}
	e := keyTableEntry(v.kt, idx).load()
	if e.State != key || e.check() != nil || e.Serial == 0 || !e.allows(addr, n, want) {
		return nil, rdma.RemAccessErr
	}
	for try := 0; ; try++ {
		v.mu.RLock()
		if r := v.regions[idx]; r != nil && r.serial == e.Serial {
			off := addr - e.Base
			if off+n > uint64(len(r.mem)) {
				v.mu.RUnlock()
				return nil, rdma.RemAccessErr
			}
			return r.mem[off : off+n : off+n], rdma.Success
		}
		v.mu.RUnlock()
		if try > 0 {
			return nil, rdma.RemAccessErr
		}
		if st := q.fetch(key, e); st != rdma.Success {
			return nil, st
		}
	}
}

func (q *qp) remoteRelease(locked bool) {
	if locked {
		q.view.mu.RUnlock()
	}
	q.me.hazard.Store(0)
}

// processAcksLocked completes the messages the peer has acked.
func (q *qp) processAcksLocked() {
	if !q.connected.Load() {
		return
	}
	a := q.peer.ack.Load()
	sq := &q.sq
	if a == sq.ackedMSN {
		return
	}
	if !msnAfter(a, sq.ackedMSN) || msnAfter(a, sq.pushedMSN) {
		q.fail(rdma.RemInvReqErr, 0, rdma.RemInvReqErr, 0)
		return
	}
	sq.ackedMSN = a
	q.lastAck.Store(a)
	if sq.ackAt < sq.head {
		sq.ackAt = sq.head
	}
	for ; sq.ackAt < sq.tail; sq.ackAt++ {
		s := sq.at(sq.ackAt)
		if !s.msg || s.done {
			continue
		}
		if msnAfter(s.msn, a) {
			break
		}
		s.done, s.status = true, rdma.Success
	}
}

// retireLocked pushes the completions of done WRs, oldest first, and
// frees their slots. In StateError it first flushes every WR not done.
func (q *qp) retireLocked() {
	sq := &q.sq
	if q.State() == rdma.StateError {
		q.processAcksLocked()
		q.errMu.Lock()
		st, msn := q.err, q.errMSN
		q.errMu.Unlock()
		for i := sq.head; i < sq.tail; i++ {
			s := sq.at(i)
			if s.done {
				continue
			}
			s.done, s.status = true, rdma.WRFlushErr
			switch {
			case msn != 0 && s.msg && s.msn == msn:
				s.status = st
			case st == rdma.RetryExcErr && !sq.retryExcGiven:
				s.status, sq.retryExcGiven = st, true
			}
		}
		sq.push = sq.tail
	}
	for sq.head < sq.tail {
		s := sq.at(sq.head)
		if !s.done {
			break
		}
		if s.signaled || s.status != rdma.Success {
			raceAcquire()
			if !q.scq.Push(rdma.WC{ID: s.id, Status: s.status, Opcode: s.wcOp, QPNum: q.num, ByteLen: s.byteLen}) {
				q.fail(rdma.GeneralErr, 0, rdma.WRFlushErr, 0)
			}
		}
		s.sgl, s.data = s.sgl[:0], s.data[:0]
		sq.head++
	}
}

// Fragment sizes: a message longer than maxFrag, or one that does not fit
// before the end of the ring, travels in fragments of at most maxFrag
// bytes and, where the ring's end cuts one short, at least minFrag.
func (q *qp) maxFrag() uint32 { return uint32(len(q.peer.ring) / 4) }
func (q *qp) minFrag() uint32 { return uint32(len(q.peer.ring) / 64) }

// pumpLocked copies queued messages into the peer's ring while it has
// room, and rings the peer's doorbell if it published anything.
func (q *qp) pumpLocked() {
	sq := &q.sq
	if !q.connected.Load() || q.State() != rdma.StateRTS {
		return
	}
	start := sq.rtail
	for sq.push < sq.tail {
		s := sq.at(sq.push)
		if !s.msg || s.done {
			sq.push++
			continue
		}
		if !q.pushMsg(s) {
			break
		}
		if q.State() != rdma.StateRTS {
			break
		}
		sq.pushedMSN = s.msn
		sq.push++
	}
	if sq.rtail != start {
		// The peer wakes for the message and sees the acks published
		// before it: they need no ring of their own (rx.go).
		q.ringPeer()
	}
}

// pushMsg copies what fits of message s into the peer's ring. It reports
// whether all of it is in; if not, it has asked the peer to ring this
// side's doorbell when it frees room.
func (q *qp) pushMsg(s *sendSlot) bool {
	sq := &q.sq
	rng := q.peer.ring
	rlen := uint64(len(rng))
	for {
		head := q.peer.head.Load()
		free := rlen - (sq.rtail - head)
		if free > rlen {
			q.fail(rdma.RemInvReqErr, 0, rdma.RemInvReqErr, 0) // the consumer index is impossible
			return true
		}
		pos := sq.rtail & q.ringMask
		contig := rlen - pos
		rem := s.total - s.sent
		var n uint32
		switch {
		case rem <= q.maxFrag() && entrySize(rem) <= contig:
			n = rem
		case contig >= entHdrLen+uint64(q.minFrag()):
			n = uint32(min(uint64(rem), uint64(q.maxFrag()), contig-entHdrLen))
			n &^= entHdrLen - 1
		default:
			// Pad to the end of the ring.
			if contig > free {
				if !q.waitRoom(contig) {
					return false
				}
				continue
			}
			putEntry(rng[pos:], entry{Type: entPad, Len: uint32(contig - entHdrLen)})
			sq.rtail += contig
			q.peer.tail.Store(sq.rtail)
			continue
		}
		size := entrySize(n)
		if size > free {
			if !q.waitRoom(size) {
				return false
			}
			continue
		}
		if n > 0 && !q.gather(rng[pos+entHdrLen:pos+entHdrLen+uint64(n)], s, s.sent) {
			s.done, s.status = true, rdma.LocProtErr
			q.failWR(rdma.LocProtErr)
			return true
		}
		flags := s.flags
		if !s.begun {
			flags |= entFirst
			s.begun = true
		}
		s.sent += n
		if s.sent == s.total {
			flags |= entLast
		}
		total := s.total
		if s.typ == entWriteImm {
			total = s.byteLen // reported to the peer as WC.ByteLen
		}
		putEntry(rng[pos:], entry{Type: s.typ, Flags: flags, Len: n, MSN: s.msn, Imm: s.imm, Inv: s.inv, Total: total})
		sq.rtail += size
		raceRelease() // before the peer can see the entry and acquire
		q.peer.tail.Store(sq.rtail)
		if flags&entLast != 0 {
			q.sendWait.Store(false)
			return true
		}
	}
}

// waitRoom asks the peer to ring when it consumes, then checks again that
// size bytes are still not free. It reports whether they now are.
func (q *qp) waitRoom(size uint64) bool {
	q.sendWait.Store(true)
	q.peer.spaceWait.Store(1)
	free := uint64(len(q.peer.ring)) - (q.sq.rtail - q.peer.head.Load())
	return free >= size && free <= uint64(len(q.peer.ring))
}

// gather copies the message bytes [off, off+len(dst)) of s into dst.
func (q *qp) gather(dst []byte, s *sendSlot, off uint32) bool {
	if s.inline {
		copy(dst, s.data[off:])
		return true
	}
	for _, g := range s.sgl {
		if len(dst) == 0 {
			break
		}
		if off >= g.Length {
			off -= g.Length
			continue
		}
		n := min(g.Length-off, uint32(len(dst)))
		r, b, ok := q.pd.keys.Acquire(g.LKey, g.Addr+uint64(off), uint64(n), 0)
		if !ok {
			return false
		}
		copy(dst, b)
		r.Release()
		dst = dst[n:]
		off = 0
	}
	return true
}
