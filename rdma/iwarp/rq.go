package iwarp

import (
	"sync"

	"github.com/capsule-storage/capsule/rdma"
)

// rwr is one receive queue slot.
type rwr struct {
	id    uint64
	sgl   []rdma.SGE // cap MaxSGE, reused
	total uint64
}

// recvQueue holds posted Recvs. The receiver goroutine fills the head
// slot and pops it on completion; PostRecv appends at the tail. Slot
// contents are written under mu by PostRecv and then read by the receiver
// without the lock: no one writes a slot in [head, tail).
type recvQueue struct {
	mu      sync.Mutex // guards head, tail, flushed and slot writes
	slots   []rwr
	head    uint64
	tail    uint64
	flushed bool
	avail   chan struct{} // one token: a Recv was posted (wakes an RNR wait)
}

func (r *recvQueue) init(depth, maxSGE int) {
	r.slots = make([]rwr, depth)
	for i := range r.slots {
		r.slots[i].sgl = make([]rdma.SGE, 0, maxSGE)
	}
	r.avail = make(chan struct{}, 1)
}

func (r *recvQueue) slot(seq uint64) *rwr { return &r.slots[seq%uint64(len(r.slots))] }

// PostRecv implements rdma.QP. SGEs are checked when a message lands: a
// bad lkey or a region without LocalWrite completes the Recv with
// LocProtErr.
func (q *qp) PostRecv(wrs []rdma.RecvWR) error {
	if q.closed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	r := &q.rq
	r.mu.Lock()
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGL) > q.cfg.MaxSGE {
			r.mu.Unlock()
			return &rdma.PostError{Index: i, Err: rdma.ErrTooManySGE}
		}
		if r.flushed {
			q.pushRecvWC(rdma.WC{ID: wr.ID, Status: rdma.WRFlushErr, Opcode: rdma.WCRecv, QPNum: q.num})
			continue
		}
		if r.tail-r.head == uint64(len(r.slots)) {
			r.mu.Unlock()
			return &rdma.PostError{Index: i, Err: rdma.ErrQueueFull}
		}
		s := r.slot(r.tail)
		s.id = wr.ID
		s.sgl = append(s.sgl[:0], wr.SGL...)
		s.total = 0
		for _, g := range wr.SGL {
			s.total += uint64(g.Length)
		}
		r.tail++
	}
	r.mu.Unlock()
	select {
	case r.avail <- struct{}{}:
	default:
	}
	return nil
}

// flushRecvLocked completes every posted Recv with WRFlushErr. rq.mu is
// held.
func (q *qp) flushRecvLocked() {
	r := &q.rq
	r.flushed = true
	select {
	case r.avail <- struct{}{}: // end an RNR wait
	default:
	}
	for ; r.head != r.tail; r.head++ {
		q.pushRecvWC(rdma.WC{ID: r.slot(r.head).id, Status: rdma.WRFlushErr, Opcode: rdma.WCRecv, QPNum: q.num})
	}
}

// headRecv returns the Recv the receiver fills next, or nil when the
// queue is empty or was flushed. Only the receiver advances head outside
// a flush, so the slot stays put until it completes it.
func (q *qp) headRecv() *rwr {
	r := &q.rq
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flushed || r.head == r.tail {
		return nil
	}
	return r.slot(r.head)
}

// completeRecv pops the head Recv with wc. It returns false if the queue
// was flushed meanwhile (the flush completed it).
func (q *qp) completeRecv(wc rdma.WC) bool {
	r := &q.rq
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flushed || r.head == r.tail {
		return false
	}
	wc.ID = r.slot(r.head).id
	wc.QPNum = q.num
	r.head++
	q.pushRecvWC(wc)
	return true
}

func (q *qp) pushRecvWC(wc rdma.WC) {
	if !q.rcq.Push(wc) {
		q.cqOverrun()
	}
}
