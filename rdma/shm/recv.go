package shm

import (
	"fmt"
	"sync"

	"github.com/capsule-storage/capsule/rdma"
)

// recvSlot is one posted receive WR.
type recvSlot struct {
	id  uint64
	sgl []rdma.SGE
}

// recvQueue is a ring of posted receive WRs, used by a QP's RQ and by an
// SRQ.
type recvQueue struct {
	slots    []recvSlot
	head     int
	n        int
	finished bool // the RX goroutine has flushed and exited: flush at post
}

func (r *recvQueue) init(n, maxSGE int) {
	r.slots = make([]recvSlot, n)
	sges := make([]rdma.SGE, n*maxSGE)
	for i := range r.slots {
		r.slots[i].sgl = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
}

func (r *recvQueue) full() bool { return r.n == len(r.slots) }

func (r *recvQueue) put(wr *rdma.RecvWR) {
	s := &r.slots[(r.head+r.n)%len(r.slots)]
	s.id = wr.ID
	s.sgl = append(s.sgl[:0], wr.SGL...)
	r.n++
}

// pop moves the oldest WR into dst, reusing dst's SGL storage.
func (r *recvQueue) pop(dst *recvSlot) bool {
	if r.n == 0 {
		return false
	}
	s := &r.slots[r.head]
	dst.id = s.id
	dst.sgl = append(dst.sgl[:0], s.sgl...)
	r.head = (r.head + 1) % len(r.slots)
	r.n--
	return true
}

func checkRecvWR(wr *rdma.RecvWR, maxSGE int) error {
	if len(wr.SGL) > maxSGE {
		return rdma.ErrTooManySGE
	}
	return nil
}

// PostRecv posts receive WRs. In StateError they complete with WRFlushErr.
func (q *qp) PostRecv(wrs []rdma.RecvWR) error {
	if q.srq != nil {
		return &rdma.PostError{Index: 0, Err: fmt.Errorf("%w: the QP receives from an SRQ", rdma.ErrInvalidArgument)}
	}
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.closed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	var perr error
	for i := range wrs {
		wr := &wrs[i]
		if err := checkRecvWR(wr, q.cfg.MaxSGE); err != nil {
			perr = &rdma.PostError{Index: i, Err: err}
			break
		}
		if q.rq.finished {
			q.rcq.Push(rdma.WC{ID: wr.ID, Status: rdma.WRFlushErr, Opcode: rdma.WCRecv, QPNum: q.num})
			continue
		}
		if q.rq.full() {
			perr = &rdma.PostError{Index: i, Err: rdma.ErrQueueFull}
			break
		}
		q.rq.put(wr)
	}
	if q.rnrWait.Load() || q.State() == rdma.StateError {
		q.wake()
	}
	raceRelease()
	return perr
}

// flushRQLocked completes every posted receive with WRFlushErr.
func (q *qp) flushRQLocked() {
	var s recvSlot
	for q.rq.n > 0 {
		q.rq.pop(&s)
		q.rcq.Push(rdma.WC{ID: s.id, Status: rdma.WRFlushErr, Opcode: rdma.WCRecv, QPNum: q.num})
	}
}

// popRecv takes the next receive for an incoming message into q.rx.recv.
func (q *qp) popRecv() bool {
	if q.srq != nil {
		return q.srq.pop(&q.rx.recv)
	}
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	return q.rq.pop(&q.rx.recv)
}

// srq is a shared receive queue.
type srq struct {
	pd     *pd
	maxSGE int

	// mu guards rq, qps and closed. Lock order: srq.mu, then nothing.
	mu     sync.Mutex
	rq     recvQueue
	qps    map[*qp]struct{}
	closed bool
}

var _ rdma.SRQ = (*srq)(nil)

func newSRQ(p *pd, depth, maxSGE int) *srq {
	s := &srq{pd: p, maxSGE: maxSGE, qps: map[*qp]struct{}{}}
	s.rq.init(depth, maxSGE)
	return s
}

func (s *srq) attach(q *qp) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return rdma.ErrClosed
	}
	s.qps[q] = struct{}{}
	return nil
}

func (s *srq) detach(q *qp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.qps, q)
}

func (s *srq) pop(dst *recvSlot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rq.pop(dst)
}

// PostRecv posts receives any attached QP may consume, and wakes the QPs
// that wait for one.
func (s *srq) PostRecv(wrs []rdma.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	var perr error
	for i := range wrs {
		if err := checkRecvWR(&wrs[i], s.maxSGE); err != nil {
			perr = &rdma.PostError{Index: i, Err: err}
			break
		}
		if s.rq.full() {
			perr = &rdma.PostError{Index: i, Err: rdma.ErrQueueFull}
			break
		}
		s.rq.put(&wrs[i])
	}
	for q := range s.qps {
		if q.rnrWait.Load() {
			q.wake()
		}
	}
	raceRelease()
	return perr
}

// Close releases the SRQ; its QPs must be closed first. Receives still
// posted are dropped without completions.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return rdma.ErrClosed
	}
	if len(s.qps) > 0 {
		return fmt.Errorf("%w: shm: SRQ still used by %d QPs", rdma.ErrInvalidArgument, len(s.qps))
	}
	s.closed = true
	return nil
}
