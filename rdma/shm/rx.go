package shm

import (
	"runtime"
	"time"

	"github.com/capsule-storage/capsule/rdma"
)

// rxState is the RX goroutine's view of the ring it consumes.
type rxState struct {
	head   uint64   // consumer index
	stream rxStream // message order checks
	have   bool     // recv holds the Recv of the message in progress
	recv   recvSlot
	room   uint64 // bytes recv's SGL can take
	off    uint32 // bytes of the message placed so far

	rnrDeadline time.Time // zero unless waiting for a Recv
	ackDue      time.Time // zero unless an ack waits for its ring (ackDelay)
}

// Adaptive polling: after its last piece of work the RX goroutine polls
// up to rxSpins more times, yielding the processor to other goroutines
// every rxYieldEvery polls, before it sleeps on its doorbell.
//
// How long to poll depends on where the peer is. In the same process
// runtime.Gosched hands the processor to the goroutines that produce the
// next message, so a long budget keeps a QD1 round trip free of futex
// sleeps (host BenchmarkR4 over shm: 6 us p50 with 2000 polls, 18 us with
// 100). Across processes Gosched gives nothing to the peer process: every
// poll takes a CPU from it, and at QD1 each side burned its whole budget
// (about 100 us of CPU) per request before sleeping anyway. With the
// short budget a 4 KiB file read between two processes on 2 busy cores
// went from 2.5k-2.8k to 11k-13k per second, and the CPU per read from
// about 120 us (target) + 69 us (client) to 30 us + 20 us.
const (
	rxSpinsSameProcess  = 2000
	rxSpinsOtherProcess = 100
	rxYieldEvery        = 16
	rxBatch             = 64 // ring entries handled before the head is published
)

// ackDelay is how long an ack may wait for a message to carry it before
// the RX goroutine rings the peer for it alone.
//
// An ack completes Sends at the peer; nothing else waits for it (a peer
// short of ring room asks for its own ring, spaceWait, and PostSend reads
// acks when its queue is full). A request is nearly always answered, and
// the answer's ring carries the ack of the request, so ringing for the
// ack at once woke the peer twice per round trip: once for the ack of
// its request and once for the answer. Each futex wake-up costs the peer
// a context switch. So an ack is published at once but rung for only
// when the RX goroutine is about to sleep, the peer sleeps too, no
// message of this side has rung it since, and ackDelay has passed.
const ackDelay = time.Millisecond

// rxLoop is the QP's provider goroutine. It delivers the peer's messages
// into Recvs, completes acked Sends, pushes queued Sends when the peer's
// ring has room, and flushes everything once the QP is in Error.
func (q *qp) rxLoop() {
	defer close(q.rxDone)
	spins := 0
	for {
		if q.State() == rdma.StateError {
			q.rxFinish()
			return
		}
		worked, deadline := q.rxStep()
		if worked {
			spins = 0
			continue
		}
		if spins < q.rxSpins {
			spins++
			if spins%rxYieldEvery == 0 {
				runtime.Gosched()
			}
			continue
		}
		q.me.doorbell.Store(1)
		if q.kick.Swap(0) != 0 || q.rxReady() {
			q.me.doorbell.Store(0)
			continue
		}
		d := time.Duration(-1)
		if !deadline.IsZero() {
			if d = time.Until(deadline); d <= 0 {
				q.me.doorbell.Store(0)
				continue
			}
		}
		if ad, ok := q.ackWait(); ok && (d < 0 || ad < d) {
			d = ad
		}
		sleep(q.me.doorbell, d)
		q.me.doorbell.Store(0)
		spins = 0
	}
}

// rxReady reports whether rxStep has something to do.
func (q *qp) rxReady() bool {
	if q.peer.term.Load() != 0 || q.State() == rdma.StateError {
		return true
	}
	if q.peer.ack.Load() != q.lastAck.Load() {
		return true
	}
	if q.sendWait.Load() && q.peer.spaceWait.Load() == 0 {
		return true
	}
	if q.me.tail.Load() != q.rx.head && q.rx.rnrDeadline.IsZero() {
		return true
	}
	return false
}

// rxStep does one round of work. It reports whether it did anything and,
// when a message waits for a Recv, until when it may wait.
func (q *qp) rxStep() (worked bool, deadline time.Time) {
	if q.peer.term.Load() != 0 {
		q.peerFailed()
		return true, time.Time{}
	}
	if q.peer.ack.Load() != q.lastAck.Load() || (q.sendWait.Load() && q.peer.spaceWait.Load() == 0) {
		q.sqMu.Lock()
		q.processAcksLocked()
		q.pumpLocked()
		q.retireLocked()
		q.sqMu.Unlock()
		raceRelease() // pumpLocked may have read Send SGEs
		worked = true
	}
	w, dl := q.rxRing()
	return worked || w, dl
}

// rxRing delivers the messages waiting in this side's ring.
func (q *qp) rxRing() (worked bool, deadline time.Time) {
	rx := &q.rx
	tail := q.me.tail.Load()
	head := rx.head
	for i := 0; i < rxBatch && q.State() == rdma.StateRTS; i++ {
		e, poff, size, ok, err := ringEntry(q.me.ring, head, tail)
		if err != nil {
			q.fail(rdma.RemInvReqErr, 0, rdma.RemInvReqErr, 0)
			break
		}
		if !ok {
			break
		}
		if e.Type == entPad {
			head += size
			continue
		}
		if e.Flags&entFirst != 0 && !rx.have {
			if !q.takeRecv(e) {
				deadline = rx.rnrDeadline
				break
			}
		}
		first, last, err := rx.stream.accept(e)
		if err != nil || !rx.have {
			q.fail(rdma.RemInvReqErr, 0, rdma.RemInvReqErr, 0)
			break
		}
		if first {
			rx.off = 0
			if e.Type != entWriteImm && uint64(e.Total) > rx.room {
				q.completeRecv(e, rdma.LocLenErr)
				q.fail(rdma.LocLenErr, 0, rdma.RemInvReqErr, e.MSN)
				break
			}
		}
		if e.Len > 0 && !q.scatter(q.me.ring[poff:poff+int(e.Len)]) {
			q.completeRecv(e, rdma.LocProtErr)
			q.fail(rdma.LocProtErr, 0, rdma.RemOpErr, e.MSN)
			break
		}
		rx.off += e.Len
		head += size
		if !last {
			continue
		}
		if e.Type == entSendInv && !q.pd.invalidate(e.Inv) {
			q.completeRecv(e, rdma.RemInvReqErr)
			q.fail(rdma.RemInvReqErr, 0, rdma.RemInvReqErr, e.MSN)
			break
		}
		// The ack goes out before the completion: an answer the
		// application sends rings the peer, which then sees the ack too
		// (ackWait rings for it only when no message does).
		q.me.ack.Store(e.MSN)
		if !q.completeRecv(e, rdma.Success) {
			break
		}
	}
	if head != rx.head {
		rx.head = head
		q.me.head.Store(head)
		worked = true
	}
	wakePeer := false
	if worked && q.me.spaceWait.Load() == 1 && q.me.spaceWait.Swap(0) == 1 {
		wakePeer = true
	}
	if wakePeer {
		q.ringPeer()
	}
	return worked, deadline
}

// ackWait runs before the RX goroutine sleeps. If the peer may not have
// seen this side's latest ack, it rings the peer once ackDelay has passed
// and otherwise reports how long the sleep may last (ok) before it must
// look again.
func (q *qp) ackWait() (d time.Duration, ok bool) {
	rx := &q.rx
	a := q.me.ack.Load()
	if a == q.ackRung.Load() {
		rx.ackDue = time.Time{}
		return 0, false
	}
	if q.peer.doorbell.Load() == 0 {
		// Awake: the peer looks at the ack word after it says it sleeps
		// (rxLoop), and this load came after the ack's store.
		q.ackRung.Store(a)
		rx.ackDue = time.Time{}
		return 0, false
	}
	now := time.Now()
	if rx.ackDue.IsZero() {
		rx.ackDue = now.Add(ackDelay)
	}
	if d = rx.ackDue.Sub(now); d > 0 {
		return d, true
	}
	q.ringPeer()
	rx.ackDue = time.Time{}
	return 0, false
}

// ringPeer rings the peer's doorbell. The peer then sees every ack
// published before the ring, so it is noted as rung for (ackWait).
func (q *qp) ringPeer() {
	a := q.me.ack.Load()
	ring(q.peer.doorbell)
	q.ackRung.Store(a)
}

// takeRecv finds a Recv for the message e begins. Without one it starts
// or continues the receiver-not-ready wait, and fails the QP with
// RNRRetryExcErr when the wait is spent.
func (q *qp) takeRecv(e entry) bool {
	rx := &q.rx
	if !q.popRecv() {
		now := time.Now()
		if rx.rnrDeadline.IsZero() {
			rx.rnrDeadline = now.Add(q.rnrBudget)
			q.rnrWait.Store(true)
			if q.popRecv() {
				goto got
			}
			return false
		}
		if now.Before(rx.rnrDeadline) {
			return false
		}
		q.fail(rdma.RNRRetryExcErr, 0, rdma.RNRRetryExcErr, e.MSN)
		return false
	}
got:
	if !rx.rnrDeadline.IsZero() {
		rx.rnrDeadline = time.Time{}
		q.rnrWait.Store(false)
	}
	rx.have = true
	rx.room = 0
	for _, g := range rx.recv.sgl {
		rx.room += uint64(g.Length)
	}
	return true
}

// scatter places b at offset rx.off of the Recv's SGL.
func (q *qp) scatter(b []byte) bool {
	off := q.rx.off
	for _, g := range q.rx.recv.sgl {
		if len(b) == 0 {
			break
		}
		if off >= g.Length {
			off -= g.Length
			continue
		}
		n := min(g.Length-off, uint32(len(b)))
		r, dst, ok := q.pd.keys.Acquire(g.LKey, g.Addr+uint64(off), uint64(n), rdma.AccessLocalWrite)
		if !ok {
			return false
		}
		copy(dst, b[:n])
		r.Release()
		b = b[n:]
		off = 0
	}
	return len(b) == 0
}

// completeRecv pushes the completion of the Recv of message e.
func (q *qp) completeRecv(e entry, st rdma.WCStatus) bool {
	rx := &q.rx
	wc := rdma.WC{ID: rx.recv.id, Status: st, Opcode: rdma.WCRecv, QPNum: q.num}
	if st == rdma.Success {
		wc.ByteLen = e.Total
		switch e.Type {
		case entSendImm:
			wc.Flags, wc.Imm = rdma.WCWithImm, e.Imm
		case entWriteImm:
			wc.Opcode, wc.Flags, wc.Imm = rdma.WCRecvWriteImm, rdma.WCWithImm, e.Imm
		case entSendInv:
			wc.Flags, wc.InvRKey = rdma.WCWithInv, e.Inv
		}
	}
	rx.have = false
	raceAcquire()
	if !q.rcq.Push(wc) {
		q.fail(rdma.GeneralErr, 0, rdma.WRFlushErr, 0)
		return false
	}
	return true
}

// rxFinish runs once the QP is in Error: it flushes the send queue, the
// Recv in progress and the receive queue, then lets PostRecv flush by
// itself.
func (q *qp) rxFinish() {
	q.rnrWait.Store(false)
	q.sqMu.Lock()
	q.retireLocked()
	q.sqMu.Unlock()
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.rx.have {
		q.rx.have = false
		q.rcq.Push(rdma.WC{ID: q.rx.recv.id, Status: rdma.WRFlushErr, Opcode: rdma.WCRecv, QPNum: q.num})
	}
	if q.srq == nil {
		q.flushRQLocked()
	}
	q.rq.finished = true
}
