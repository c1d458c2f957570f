//go:build rdma && cgo

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

// maxPrivateData is what rdma_conn_param carries (a uint8 length). The
// transport may allow less: 56 bytes in an InfiniBand REQ, 196 in a REP,
// 148 in a REJ.
const maxPrivateData = 255

// Bits of the wr_id the device sees. The rest is a sequence number of the
// QP's send or receive ring, or a slot of an SRQ.
const (
	wrRecv uint64 = 1 << 63 // a receive WR
	wrSRQ  uint64 = 1 << 62 // a receive WR of an SRQ (with wrRecv)
)

// Connection timeouts handed to the connection manager.
const (
	defaultConnectTimeout = 5 * time.Second
	minCMTimeout          = 100 * time.Millisecond
	// acceptTimeout bounds Accept's wait for ESTABLISHED, a guard should the
	// connection manager report neither success nor failure.
	acceptTimeout = 60 * time.Second
)

// ringEntry is one outstanding WR of a send or receive queue.
type ringEntry struct {
	user  uint64        // the caller's WR ID
	op    rdma.WCOpcode // the completion's opcode, which devices omit on error
	drain bool          // a marker posted by Close, never returned to the caller
}

// wrRing tracks the outstanding WRs of one queue in posting order. The
// device's wr_id is the sequence number; a completion retires every entry
// up to it, so unsignaled sends retire with the next signaled one, as the
// verbs ordering rules imply. One entry beyond limit is kept for Close's
// drain marker.
type wrRing struct {
	mu    sync.Mutex // guards the fields below and the queue's C chain; held across a post
	ents  []ringEntry
	head  uint64 // oldest outstanding sequence number
	tail  uint64 // next sequence number
	limit int    // outstanding WRs the caller may post
}

func newRing(limit int) wrRing { return wrRing{ents: make([]ringEntry, limit+1), limit: limit} }

// retire completes seq and everything posted before it.
func (r *wrRing) retire(seq uint64) (user uint64, op rdma.WCOpcode, drain, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq < r.head || seq >= r.tail {
		return 0, 0, false, false
	}
	e := r.ents[seq%uint64(len(r.ents))]
	r.head = seq + 1
	return e.user, e.op, e.drain, true
}

// chain is the C scratch of one queue, viewed from Go.
type chain struct {
	c    *C.struct_cap_chain
	swr  []C.struct_cap_swr
	rwr  []C.struct_cap_rwr
	sge  []C.struct_ibv_sge
	nsge int // SGEs per WR
}

func newChain(maxWR, maxSGE int, send bool) (*chain, error) {
	s := C.int(0)
	if send {
		s = 1
	}
	c := C.cap_chain_new(C.int(maxWR), C.int(maxSGE), s)
	if c == nil {
		return nil, fmt.Errorf("verbs: out of memory for a %d-WR chain", maxWR)
	}
	ch := &chain{c: c, nsge: int(c.max_sge)}
	ch.sge = unsafe.Slice(c.sge, maxWR*ch.nsge)
	if send {
		ch.swr = unsafe.Slice(c.swr, maxWR)
	} else {
		ch.rwr = unsafe.Slice(c.rwr, maxWR)
	}
	return ch, nil
}

func (ch *chain) free() { C.cap_chain_free(ch.c) }

// qp is an RC QP. It is created with rdma_create_qp on its own id (home),
// bound to the PD's local address, so librdmacm moves it to INIT. The
// active side connects home itself; the passive side binds the QP to the
// connection request's id (conn) with its QP number and moves it to RTR
// and RTS with that id's attributes (cap_accept).
type qp struct {
	pd   *pd
	dev  *device
	d    *cmDispatcher
	qp   *C.struct_ibv_qp
	num  uint32
	home *C.struct_rdma_cm_id
	scq  *cq
	rcq  *cq
	srq  *srq
	cfg  rdma.QPConfig

	sq    wrRing
	rq    wrRing
	sendC *chain // guarded by sq.mu
	recvC *chain // guarded by rq.mu; nil with an SRQ

	st        atomic.Uint32 // rdma.QPState
	closed    atomic.Bool
	drainLeft atomic.Int32
	cmEvents  chan cmEvent // connection setup events for Connect and accept
	done      chan struct{}

	mu         sync.Mutex // guards conn, connecting, connected, err, failed
	conn       *C.struct_rdma_cm_id
	connecting bool
	connected  bool
	failed     bool
	err        error

	// life guards the C objects' lifetime: held by destroy, and by every
	// C call on the QP or its ids outside the posting paths. Order:
	// life, then sq.mu, then rq.mu.
	life      sync.Mutex
	destroyed bool // guarded by life, sq.mu and rq.mu (any one to read)
}

var _ rdma.QP = (*qp)(nil)

func newQP(p *pd, cfg rdma.QPConfig) (*qp, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	scq, ok1 := cfg.SendCQ.(*cq)
	rcq, ok2 := cfg.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: QPConfig CQ of another provider", rdma.ErrWrongProvider)
	}
	if scq.dev != p.dev || rcq.dev != p.dev {
		return nil, fmt.Errorf("%w: CQ of another device", rdma.ErrWrongProvider)
	}
	var s *srq
	var csrq *C.struct_ibv_srq
	if cfg.SRQ != nil {
		var ok bool
		if s, ok = cfg.SRQ.(*srq); !ok || s.pd != p {
			return nil, fmt.Errorf("%w: SRQ of another provider or PD", rdma.ErrWrongProvider)
		}
		csrq = s.srq
	}
	id, err := p.d.newID()
	if err != nil {
		return nil, err
	}
	sa := newSockaddr(p.local, 0)
	defer sa.free()
	if r := C.cap_bind(id, sa.ss); r != 0 {
		C.cap_destroy_id(id)
		return nil, callErr("rdma_bind_addr", r)
	}
	sig := C.int(0)
	if cfg.SignalAll {
		sig = 1
	}
	// One extra WR each way for Close's drain markers.
	if r := C.cap_create_qp(id, p.pd, scq.cq, rcq.cq, csrq, C.int(cfg.MaxSendWR+1),
		C.int(cfg.MaxRecvWR+1), C.int(cfg.MaxSGE), C.int(cfg.MaxInline), sig); r != 0 {
		C.cap_destroy_id(id)
		return nil, callErr("rdma_create_qp", r)
	}
	q := &qp{
		pd: p, dev: p.dev, d: p.d, home: id, conn: nil, scq: scq, rcq: rcq, srq: s, cfg: cfg,
		qp: C.cap_id_qp(id), sq: newRing(cfg.MaxSendWR), rq: newRing(cfg.MaxRecvWR),
		cmEvents: make(chan cmEvent, 8), done: make(chan struct{}),
	}
	q.num = uint32(C.cap_qp_num(q.qp))
	if q.sendC, err = newChain(cfg.MaxSendWR+1, cfg.MaxSGE, true); err == nil && s == nil {
		q.recvC, err = newChain(cfg.MaxRecvWR+1, cfg.MaxSGE, false)
	}
	if err != nil {
		if q.sendC != nil {
			q.sendC.free()
		}
		C.rdma_destroy_qp(id)
		C.cap_destroy_id(id)
		return nil, err
	}
	q.st.Store(uint32(rdma.StateInit))
	p.d.register(id, q)
	p.dev.addQP(q)
	p.mu.Lock()
	p.qps[q] = struct{}{}
	p.mu.Unlock()
	return q, nil
}

func (q *qp) Num() uint32           { return q.num }
func (q *qp) State() rdma.QPState   { return rdma.QPState(q.st.Load()) }
func (q *qp) Done() <-chan struct{} { return q.done }

func (q *qp) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

func (q *qp) LocalAddr() string {
	q.life.Lock()
	defer q.life.Unlock()
	if q.destroyed {
		return ""
	}
	return addrString(q.connID(), false)
}

func (q *qp) RemoteAddr() string {
	q.life.Lock()
	defer q.life.Unlock()
	if q.destroyed {
		return ""
	}
	return addrString(q.connID(), true)
}

// connID is the id that carries the connection: the request's on the
// passive side, home otherwise.
func (q *qp) connID() *C.struct_rdma_cm_id {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn != nil {
		return q.conn
	}
	return q.home
}

// checkSend validates one send WR against the QP's limits.
func (q *qp) checkSend(w *rdma.SendWR) error {
	if _, _, ok := wrOpcode(w.Op); !ok {
		return fmt.Errorf("%w: opcode %v", rdma.ErrInvalidArgument, w.Op)
	}
	if len(w.SGL) > q.cfg.MaxSGE {
		return rdma.ErrTooManySGE
	}
	if w.Flags&rdma.Inline != 0 {
		if w.Op == rdma.OpRead {
			return fmt.Errorf("%w: inline Read", rdma.ErrInvalidArgument)
		}
		n := 0
		for _, s := range w.SGL {
			n += int(s.Length)
		}
		if n > q.cfg.MaxInline {
			return rdma.ErrInlineTooLarge
		}
	}
	return nil
}

// PostSend validates each WR, copies a run of valid ones into the send
// chain and posts the run with one cgo call.
func (q *qp) PostSend(wrs []rdma.SendWR) error {
	if len(wrs) == 0 {
		return nil
	}
	if st := q.State(); q.closed.Load() || st == rdma.StateInit || st == rdma.StateRTR {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	r := &q.sq
	r.mu.Lock()
	defer r.mu.Unlock()
	if q.destroyed {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	// The valid prefix fits the chain: it never exceeds the ring's limit.
	n := 0
	var bad error
	for n < len(wrs) {
		if bad = q.checkSend(&wrs[n]); bad != nil {
			break
		}
		if int(r.tail-r.head)+n >= r.limit {
			bad = rdma.ErrQueueFull
			break
		}
		_, wcop, _ := wrOpcode(wrs[n].Op)
		seq := r.tail + uint64(n)
		r.ents[seq%uint64(len(r.ents))] = ringEntry{user: wrs[n].ID, op: wcop}
		n++
	}
	if n > 0 {
		q.sendC.fillSend(wrs[:n], r.tail)
		var badIdx C.int
		if rc := C.cap_post_send(q.qp, q.sendC.c, C.int(n), &badIdx); rc != 0 {
			r.tail += uint64(badIdx)
			return &rdma.PostError{Index: int(badIdx), Err: postErr("ibv_post_send", rc)}
		}
		r.tail += uint64(n)
	}
	if bad != nil {
		return &rdma.PostError{Index: n, Err: bad}
	}
	return nil
}

// PostRecv posts receive WRs with one cgo call. A QP that takes its
// receives from an SRQ refuses them.
func (q *qp) PostRecv(wrs []rdma.RecvWR) error {
	if len(wrs) == 0 {
		return nil
	}
	if q.srq != nil {
		return &rdma.PostError{Index: 0, Err: fmt.Errorf("%w: the QP receives from an SRQ", rdma.ErrInvalidArgument)}
	}
	if q.closed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	r := &q.rq
	r.mu.Lock()
	defer r.mu.Unlock()
	if q.destroyed {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	n, bad := fillRecv(q.recvC, wrs, q.cfg.MaxSGE, func(k int, user uint64) (uint64, error) {
		if int(r.tail-r.head)+k >= r.limit {
			return 0, rdma.ErrQueueFull
		}
		seq := r.tail + uint64(k)
		r.ents[seq%uint64(len(r.ents))] = ringEntry{user: user, op: rdma.WCRecv}
		return seq | wrRecv, nil
	})
	if n > 0 {
		var badIdx C.int
		if rc := C.cap_post_recv(q.qp, q.recvC.c, C.int(n), &badIdx); rc != 0 {
			r.tail += uint64(badIdx)
			return &rdma.PostError{Index: int(badIdx), Err: postErr("ibv_post_recv", rc)}
		}
		r.tail += uint64(n)
	}
	if bad != nil {
		return &rdma.PostError{Index: n, Err: bad}
	}
	return nil
}

// fillRecv copies receive WRs into ch until one is invalid or slot refuses
// it; it returns how many were copied and why it stopped. Batches longer
// than the chain stop with ErrQueueFull, as the queue is no longer.
func fillRecv(ch *chain, wrs []rdma.RecvWR, maxSGE int, slot func(k int, user uint64) (uint64, error)) (int, error) {
	nsge := 0
	for k := range wrs {
		w := &wrs[k]
		if len(w.SGL) > maxSGE {
			return k, rdma.ErrTooManySGE
		}
		if k >= len(ch.rwr) {
			return k, rdma.ErrQueueFull
		}
		id, err := slot(k, w.ID)
		if err != nil {
			return k, err
		}
		ch.rwr[k] = C.struct_cap_rwr{wr_id: C.uint64_t(id), num_sge: C.uint32_t(len(w.SGL))}
		for _, g := range w.SGL {
			ch.sge[nsge] = C.struct_ibv_sge{addr: C.uint64_t(g.Addr), length: C.uint32_t(g.Length), lkey: C.uint32_t(g.LKey)}
			nsge++
		}
	}
	return len(wrs), nil
}

// cmTimeout turns ctx's deadline into a connection manager timeout.
func cmTimeout(ctx context.Context) C.int {
	t := defaultConnectTimeout
	if dl, ok := ctx.Deadline(); ok {
		t = time.Until(dl)
	}
	t = max(t, minCMTimeout)
	return C.int(t / time.Millisecond)
}

// waitCM waits for the next connection setup event.
func (q *qp) waitCM(ctx context.Context) (cmEvent, error) {
	select {
	case ev := <-q.cmEvents:
		return ev, nil
	case <-q.done:
		return cmEvent{}, fmt.Errorf("%w: %w", rdma.ErrInvalidState, q.Err())
	case <-ctx.Done():
		q.fail(rdma.WRFlushErr)
		return cmEvent{}, ctx.Err()
	}
}

// Connect resolves host, its route, and connects the home id.
func (q *qp) Connect(ctx context.Context, host string, private []byte) ([]byte, error) {
	if len(private) > maxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data (at most %d)", rdma.ErrInvalidArgument, len(private), maxPrivateData)
	}
	a, port, err := resolveHost(host, false)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	if q.connecting || q.failed || q.closed.Load() || q.State() != rdma.StateInit {
		q.mu.Unlock()
		return nil, fmt.Errorf("%w: Connect in state %v", rdma.ErrInvalidState, q.State())
	}
	q.connecting = true
	q.mu.Unlock()

	dst := newSockaddr(a, port)
	defer dst.free()
	step := func(op string, call func() C.int, want uint32) (cmEvent, error) {
		q.life.Lock()
		rc := C.int(0)
		if q.destroyed {
			rc = C.EBADF
		} else {
			rc = call()
		}
		q.life.Unlock()
		if rc != 0 {
			q.fail(rdma.WRFlushErr)
			return cmEvent{}, callErr(op, rc)
		}
		ev, err := q.waitCM(ctx)
		if err != nil {
			return ev, err
		}
		if ev.typ != want {
			return ev, errUnexpected
		}
		return ev, nil
	}
	timeout := cmTimeout(ctx)
	ev, err := step("rdma_resolve_addr", func() C.int { return C.cap_resolve_addr(q.home, dst.ss, timeout) }, C.RDMA_CM_EVENT_ADDR_RESOLVED)
	if err == nil {
		ev, err = step("rdma_resolve_route", func() C.int { return C.cap_resolve_route(q.home, timeout) }, C.RDMA_CM_EVENT_ROUTE_RESOLVED)
	}
	if err == nil {
		q.toRTR()
		ev, err = step("rdma_connect", func() C.int {
			var p unsafe.Pointer
			if len(private) > 0 {
				p = unsafe.Pointer(unsafe.SliceData(private))
			}
			return C.cap_connect(q.home, p, C.int(len(private)), C.int(rnrRetryCount(q.cfg.RNRRetry)))
		}, C.RDMA_CM_EVENT_ESTABLISHED)
	}
	if err == errUnexpected {
		q.fail(rdma.WRFlushErr)
		switch ev.typ {
		case C.RDMA_CM_EVENT_REJECTED:
			return nil, rejectErr(ev, q.dev.ib)
		case C.RDMA_CM_EVENT_ADDR_ERROR, C.RDMA_CM_EVENT_ROUTE_ERROR:
			return nil, fmt.Errorf("%w: %s: %w", ErrNoRoute, host, cmStatusErr(ev))
		default:
			return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, host, cmStatusErr(ev))
		}
	}
	if err != nil {
		return nil, err
	}
	if !q.established() {
		return nil, fmt.Errorf("%w: %w", rdma.ErrInvalidState, q.Err())
	}
	return ev.private, nil
}

// errUnexpected marks a setup step answered by an event other than the
// one it waits for; Connect and accept turn the event into the error.
var errUnexpected = fmt.Errorf("verbs: unexpected connection manager event")

// toRTR marks the connection under way unless the QP failed meanwhile.
func (q *qp) toRTR() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.failed {
		q.st.Store(uint32(rdma.StateRTR))
	}
}

// established moves the QP to RTS unless it failed meanwhile.
func (q *qp) established() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failed {
		return false
	}
	q.connected = true
	q.st.Store(uint32(rdma.StateRTS))
	return true
}

// accept answers r with q, on the passive side.
func (q *qp) accept(r *connReq, private []byte) error {
	q.mu.Lock()
	if q.connecting || q.failed || q.closed.Load() || q.State() != rdma.StateInit {
		q.mu.Unlock()
		r.refuse(nil)
		return fmt.Errorf("%w: Accept with a QP in state %v", rdma.ErrInvalidState, q.State())
	}
	q.connecting = true
	q.conn = r.id
	q.mu.Unlock()
	// From here on the QP owns the request's id and sees its events.
	q.d.register(r.id, q)

	var p unsafe.Pointer
	if len(private) > 0 {
		p = unsafe.Pointer(unsafe.SliceData(private))
	}
	q.life.Lock()
	rc := C.int(C.EBADF)
	if !q.destroyed {
		q.toRTR()
		rc = C.cap_accept(r.id, q.qp, p, C.int(len(private)), C.int(r.respRes), C.int(r.initDep),
			C.int(rnrRetryCount(q.cfg.RNRRetry)), C.int(rnrTimerCode(q.cfg.RNRTimeout)))
	}
	if rc != 0 && !q.destroyed {
		C.cap_reject(r.id, nil, 0) // do not leave the peer waiting for an answer
	}
	q.life.Unlock()
	if rc != 0 {
		q.fail(rdma.WRFlushErr)
		return callErr("rdma_accept", rc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), acceptTimeout)
	defer cancel()
	ev, err := q.waitCM(ctx)
	if err != nil {
		return err
	}
	if ev.typ != C.RDMA_CM_EVENT_ESTABLISHED {
		q.fail(rdma.RetryExcErr)
		return fmt.Errorf("%w: %w", ErrUnreachable, cmStatusErr(ev))
	}
	if !q.established() {
		return fmt.Errorf("%w: %w", rdma.ErrInvalidState, q.Err())
	}
	return nil
}

// handleCM takes the events of the QP's ids.
func (q *qp) handleCM(ev cmEvent) {
	switch ev.typ {
	case C.RDMA_CM_EVENT_DISCONNECTED:
		// The peer ended the connection (Close or SetError).
		q.fail(rdma.WRFlushErr)
	case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
		q.fail(rdma.RetryExcErr)
	case C.RDMA_CM_EVENT_TIMEWAIT_EXIT, C.RDMA_CM_EVENT_ADDR_CHANGE:
	default:
		if q.State() == rdma.StateRTS {
			// An error event after establishment: the connection is lost.
			if ev.typ == C.RDMA_CM_EVENT_CONNECT_ERROR || ev.typ == C.RDMA_CM_EVENT_UNREACHABLE {
				q.fail(rdma.RetryExcErr)
			}
			return
		}
		select {
		case q.cmEvents <- ev:
		default:
		}
	}
}

// notifyEstablished passes IBV_EVENT_COMM_EST to the connection manager.
func (q *qp) notifyEstablished() {
	q.life.Lock()
	defer q.life.Unlock()
	if !q.destroyed {
		C.cap_notify_established(q.connID())
	}
}

// fail moves the QP to StateError for reason, once: the connection is
// disconnected (so the peer sees it end), then the QP is moved to ERR, so
// the device flushes every outstanding WR.
func (q *qp) fail(reason rdma.WCStatus) {
	q.mu.Lock()
	if q.failed {
		q.mu.Unlock()
		return
	}
	q.failed = true
	q.err = reason
	q.st.Store(uint32(rdma.StateError))
	conn := q.conn
	if conn == nil {
		conn = q.home
	}
	wasConnecting := q.connecting
	q.mu.Unlock()

	q.life.Lock()
	if !q.destroyed {
		if wasConnecting {
			// First: on iWARP librdmacm moves an attached QP to SQD here,
			// which fails once the QP is in ERR.
			C.cap_disconnect(conn)
		}
		C.cap_qp_to_error(q.qp)
	}
	q.life.Unlock()
	close(q.done)
}

func (q *qp) SetError() { q.fail(rdma.WRFlushErr) }

// Close moves the QP to Error and posts a drain marker on each of its
// queues. The QP is destroyed when the CQ consumer has polled both
// markers, which complete after every WR posted before them; CQ.Close and
// PD.Close destroy it if nobody polls.
func (q *qp) Close() error {
	if !q.closed.CompareAndSwap(false, true) {
		return nil
	}
	q.fail(rdma.WRFlushErr)
	want := int32(1)
	if q.srq == nil {
		want = 2
	}
	q.drainLeft.Store(want)
	if !q.postDrain(&q.sq, true) {
		q.drained()
	}
	if q.srq == nil && !q.postDrain(&q.rq, false) {
		q.drained()
	}
	return nil
}

// postDrain posts a marker WR on one queue of the (errored) QP.
func (q *qp) postDrain(r *wrRing, send bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q.destroyed || int(r.tail-r.head) >= len(r.ents) {
		return false
	}
	seq := r.tail
	r.ents[seq%uint64(len(r.ents))] = ringEntry{drain: true}
	var bad C.int
	var rc C.int
	if send {
		q.sendC.swr[0] = C.struct_cap_swr{wr_id: C.uint64_t(seq), opcode: C.IBV_WR_SEND, flags: C.IBV_SEND_SIGNALED}
		rc = C.cap_post_send(q.qp, q.sendC.c, 1, &bad)
	} else {
		q.recvC.rwr[0] = C.struct_cap_rwr{wr_id: C.uint64_t(seq | wrRecv)}
		rc = C.cap_post_recv(q.qp, q.recvC.c, 1, &bad)
	}
	if rc != 0 {
		return false
	}
	r.tail++
	return true
}

// drained counts one consumed drain marker; the last destroys the QP.
func (q *qp) drained() {
	if q.drainLeft.Add(-1) == 0 {
		q.destroy()
	}
}

// destroy frees the QP, its ids and chains, once.
func (q *qp) destroy() {
	q.life.Lock()
	defer q.life.Unlock()
	if q.destroyed {
		return
	}
	q.sq.mu.Lock()
	q.rq.mu.Lock()
	q.destroyed = true
	q.rq.mu.Unlock()
	q.sq.mu.Unlock()

	q.mu.Lock()
	conn := q.conn
	q.mu.Unlock()
	q.d.unregister(q.home)
	if conn != nil {
		q.d.unregister(conn)
	}
	q.dev.removeQP(q)
	C.rdma_destroy_qp(q.home)
	if conn != nil {
		C.cap_destroy_id(conn)
	}
	C.cap_destroy_id(q.home)
	q.sendC.free()
	if q.recvC != nil {
		q.recvC.free()
	}
	q.pd.forgetQP(q)
}
