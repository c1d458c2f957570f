package shm

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/internal/soft"
)

var qpNums atomic.Uint32

// qp is a reliable-connected queue pair.
type qp struct {
	pd   *pd
	num  uint32
	cfg  rdma.QPConfig
	scq  *soft.CQ
	rcq  *soft.CQ
	srq  *srq
	maxR int // SGEs per Recv: cfg.MaxSGE, or the SRQ's

	state  atomic.Uint32 // rdma.QPState
	closed atomic.Bool   // Close has begun
	done   chan struct{} // closed on entering StateError

	// errMu guards err, errMSN and the choice of the first failure.
	errMu sync.Mutex
	// termMu orders fail's writes to the shared block (the term word and
	// the doorbells) before Close's unmap: Close clears connected under
	// it. A leaf lock: nothing else is taken while it is held.
	termMu sync.Mutex
	err    rdma.WCStatus // why the QP entered StateError; 0 before
	errMSN uint32        // the local message err is about, 0 if none

	// Set once by attach, before the state becomes RTS; read-only after
	// until Close unmaps the block (under blkMu).
	side      int // 0 dialer, 1 acceptor
	blk       []byte
	me, peer  endpoint
	ringMask  uint64
	conn      *net.UnixConn
	view      *remoteView
	rnrBudget time.Duration
	rxSpins   int // polls before the RX goroutine sleeps (rx.go)
	local     string
	remote    string
	rxDone    chan struct{} // closed when the RX goroutine has flushed and exited
	ctlDone   chan struct{} // closed when the control goroutine has exited
	fetchCh   chan fetchReply

	// blkMu guards the mapping of blk against Close: readers are other
	// goroutines of the PD that look at the peer's hazard word.
	blkMu     sync.RWMutex
	connected atomic.Bool // attach done; blk, me, peer valid until unmapped
	gone      atomic.Bool // the control socket reached EOF: the peer process is gone
	kick      atomic.Uint32
	rnrWait   atomic.Bool   // the RX goroutine waits for a Recv
	lastAck   atomic.Uint32 // copy of sq.ackedMSN for the RX goroutine's idle check
	sendWait  atomic.Bool   // a message waits for room in the peer's ring
	ackRung   atomic.Uint32 // an ack of this side's that the peer has been woken for, or was awake to see (rx.go)

	// sqMu guards sq, the producer side of the peer's ring and fetchSeq.
	// It is held for the whole of a WR's execution, copies included, which
	// is what orders the WRs of the QP.
	sqMu     sync.Mutex
	sq       sendQueue
	fetchSeq uint32
	held     []*soft.Region // scratch: local regions acquired by one WR

	// ctlMu serializes writes to the control socket.
	ctlMu  sync.Mutex
	ctlBuf [ctlMaxLen]byte

	// rqMu guards rq.
	rqMu sync.Mutex
	rq   recvQueue

	rx rxState // owned by the RX goroutine
}

var _ rdma.QP = (*qp)(nil)

func (p *pd) CreateQP(cfg rdma.QPConfig) (rdma.QP, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	scq, ok1 := cfg.SendCQ.(*cq)
	rcq, ok2 := cfg.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: CQ is not an shm CQ", rdma.ErrWrongProvider)
	}
	q := &qp{
		pd: p, num: qpNums.Add(1), cfg: cfg, scq: scq.CQ, rcq: rcq.CQ, maxR: cfg.MaxSGE,
		done: make(chan struct{}), rxDone: make(chan struct{}), ctlDone: make(chan struct{}),
		fetchCh: make(chan fetchReply, 1),
	}
	if cfg.SRQ != nil {
		s, ok := cfg.SRQ.(*srq)
		if !ok {
			return nil, fmt.Errorf("%w: SRQ is not an shm SRQ", rdma.ErrWrongProvider)
		}
		if err := s.attach(q); err != nil {
			return nil, err
		}
		q.srq, q.maxR = s, s.maxSGE
	}
	q.sq.init(cfg.MaxSendWR, cfg.MaxSGE, cfg.MaxInline)
	if q.srq == nil {
		q.rq.init(cfg.MaxRecvWR, cfg.MaxSGE)
	}
	q.rx.recv.sgl = make([]rdma.SGE, 0, q.maxR)
	q.held = make([]*soft.Region, 0, cfg.MaxSGE)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		if q.srq != nil {
			q.srq.detach(q)
		}
		return nil, rdma.ErrClosed
	}
	p.qps[q] = struct{}{}
	p.mu.Unlock()
	return q, nil
}

func (q *qp) Num() uint32         { return q.num }
func (q *qp) State() rdma.QPState { return rdma.QPState(q.state.Load()) }
func (q *qp) Done() <-chan struct{} {
	return q.done
}
func (q *qp) LocalAddr() string  { return q.local }
func (q *qp) RemoteAddr() string { return q.remote }

func (q *qp) Err() error {
	q.errMu.Lock()
	defer q.errMu.Unlock()
	return q.err.Err()
}

// fail moves the QP to StateError with local as Err(). localMSN names the
// local message (send WR) that local is the status of, if any. The peer
// is told remote (about its message remoteMSN, if any) through the term
// word of this side's endpoint. Only the first call has an effect. fail
// takes no locks but errMu and then termMu, so it may be called with
// sqMu, rqMu or blkMu held.
func (q *qp) fail(local rdma.WCStatus, localMSN uint32, remote rdma.WCStatus, remoteMSN uint32) {
	q.errMu.Lock()
	if q.err != rdma.Success {
		q.errMu.Unlock()
		return
	}
	q.err, q.errMSN = local, localMSN
	q.state.Store(uint32(rdma.StateError))
	q.errMu.Unlock()
	close(q.done)
	// A concurrent Close may be about to unmap the block: the first
	// failure need not be Close's own (SetError from another goroutine).
	q.termMu.Lock()
	defer q.termMu.Unlock()
	if q.connected.Load() {
		q.me.termMSN.Store(remoteMSN)
		q.me.term.Store(uint32(remote))
		ring(q.peer.doorbell)
		q.wake()
	}
}

// wake makes the RX goroutine look at its work again.
func (q *qp) wake() {
	if !q.connected.Load() {
		return
	}
	q.kick.Store(1)
	ring(q.me.doorbell)
}

// peerStatus is the status the peer's term word asks this side to take.
func (q *qp) peerStatus() (rdma.WCStatus, uint32) {
	t := q.peer.term.Load()
	if t == 0 {
		return rdma.Success, 0
	}
	msn := q.peer.termMSN.Load()
	if t > uint32(rdma.GeneralErr) {
		return rdma.RemInvReqErr, 0
	}
	return rdma.WCStatus(t), msn
}

// peerFailed moves the QP to Error because the peer said so.
func (q *qp) peerFailed() {
	st, msn := q.peerStatus()
	if st == rdma.Success {
		return
	}
	q.fail(st, msn, rdma.WRFlushErr, 0)
}

// peerLost moves the QP to Error because the control socket ended: with
// the peer's term status if it left one, else RetryExcErr.
func (q *qp) peerLost() {
	if st, _ := q.peerStatus(); st != rdma.Success {
		q.peerFailed()
		return
	}
	q.fail(rdma.RetryExcErr, 0, rdma.RetryExcErr, 0)
}

func (q *qp) SetError() {
	q.fail(rdma.WRFlushErr, 0, rdma.WRFlushErr, 0)
	if !q.connected.Load() {
		q.flushRecvsUnconnected()
	}
}

// flushRecvsUnconnected flushes the RQ of a QP that has no RX goroutine.
func (q *qp) flushRecvsUnconnected() {
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.connected.Load() {
		return // the RX goroutine flushes
	}
	q.rq.finished = true
	q.flushRQLocked()
}

// Close moves the QP to Error, waits until the peer has no access to this
// PD in progress through it, ends the connection, waits for the provider
// goroutines to flush every outstanding WR, and unmaps the peer's memory.
func (q *qp) Close() error {
	if !q.closed.CompareAndSwap(false, true) {
		return rdma.ErrClosed
	}
	q.fail(rdma.WRFlushErr, 0, rdma.WRFlushErr, 0)
	// attach checks closed under rqMu: either it has connected the QP
	// and started its goroutines, or it never will.
	q.rqMu.Lock()
	connected := q.connected.Load()
	if !connected {
		q.rq.finished = true
		q.flushRQLocked()
	}
	q.rqMu.Unlock()
	if connected {
		q.waitPeerHazard(0)
		q.conn.Close()
		<-q.ctlDone
		<-q.rxDone
	}
	// Wait out posts in progress: they may touch the block.
	q.sqMu.Lock()
	q.retireLocked()
	q.sqMu.Unlock()
	q.rqMu.Lock()
	q.rqMu.Unlock()
	p := q.pd
	p.mu.Lock()
	delete(p.qps, q)
	p.mu.Unlock()
	if q.srq != nil {
		q.srq.detach(q)
	}
	if connected {
		p.releaseView(q.view)
		q.termMu.Lock()
		q.connected.Store(false)
		q.termMu.Unlock()
		q.blkMu.Lock()
		unmap(q.blk)
		q.blk = nil
		q.blkMu.Unlock()
	}
	return nil
}

// waitPeerHazard waits until the peer does not hold key (any key if 0) in
// its hazard word, the peer is gone, or hazardWaitLimit passes; then the
// connection is declared lost.
func (q *qp) waitPeerHazard(key uint32) {
	q.blkMu.RLock()
	defer q.blkMu.RUnlock()
	if !q.connected.Load() {
		return
	}
	clear := func() bool {
		h := q.peer.hazard.Load()
		return h == 0 || (key != 0 && h != key) || q.gone.Load()
	}
	if !waitSpin(clear, hazardWaitLimit) {
		q.fail(rdma.RetryExcErr, 0, rdma.RetryExcErr, 0)
	}
}

// Connect is the active side of connection setup.
func (q *qp) Connect(ctx context.Context, host string, private []byte) ([]byte, error) {
	if err := checkName(host); err != nil {
		return nil, err
	}
	if len(private) > rdma.MaxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data", rdma.ErrInvalidArgument, len(private))
	}
	if q.closed.Load() || !q.state.CompareAndSwap(uint32(rdma.StateInit), uint32(rdma.StateRTR)) {
		return nil, rdma.ErrInvalidState
	}
	reply, err := q.connect(ctx, host, private)
	if err != nil {
		q.state.CompareAndSwap(uint32(rdma.StateRTR), uint32(rdma.StateInit))
		return nil, err
	}
	return reply, nil
}

func (q *qp) connect(ctx context.Context, host string, private []byte) ([]byte, error) {
	ringSize := uint32(defaultRingSize)
	blkFd, blk, err := newMemfd("capsule-shm-qp", blockSize(ringSize))
	if err != nil {
		return nil, err
	}
	putBlockHeader(blk, ringSize)
	ok := false
	defer func() {
		if !ok {
			unmap(blk)
		}
	}()
	defer unix.Close(blkFd) // the peer gets its own copy with the request
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", socketName(host))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: shm://%s: %v", rdma.ErrConnRefused, host, err)
	}
	conn := c.(*net.UnixConn)
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, has := ctx.Deadline(); has {
		conn.SetDeadline(dl)
	}
	req := ctlMsg{
		Type: ctlConnReq, PDID: q.pd.id, QPNum: q.num, PID: uint32(os.Getpid()), RingSize: ringSize,
		RNRRetry: uint32(q.cfg.RNRRetry), RNRTimeout: q.cfg.RNRTimeout, Private: private,
	}
	err = writeCtl(conn, &req, q.pd.ktFd, blkFd)
	if err != nil {
		return nil, q.ctxErr(ctx, fmt.Errorf("%w: shm://%s: %v", rdma.ErrConnRefused, host, err))
	}
	var buf [ctlMaxLen]byte
	m, fds, err := readCtl(conn, buf[:])
	if err != nil {
		return nil, q.ctxErr(ctx, fmt.Errorf("%w: shm://%s: %v", rdma.ErrConnRefused, host, err))
	}
	switch {
	case m.Type == ctlReject && len(fds) == 0:
		return nil, &rdma.RejectError{Private: append([]byte(nil), m.Private...)}
	case m.Type != ctlAccept || len(fds) != 1:
		closeFds(fds)
		return nil, fmt.Errorf("%w: shm: answer of type %d with %d fds to a connection request", ErrBadMessage, m.Type, len(fds))
	}
	conn.SetDeadline(time.Time{})
	if !stop() {
		unix.Close(fds[0])
		return nil, ctx.Err()
	}
	q.local = fmt.Sprintf("shm://pid%d.qp%d", os.Getpid(), q.num)
	q.remote = "shm://" + host
	if err := q.attach(0, blk, ringSize, conn, fds[0], m); err != nil {
		return nil, err
	}
	ok = true
	return append([]byte(nil), m.Private...), nil
}

func (q *qp) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// attach binds the QP to a connection: it maps the peer's key table and
// starts the RX and control goroutines. It takes ownership of ktFd; blk
// and conn belong to the QP once it returns nil.
func (q *qp) attach(side int, blk []byte, ringSize uint32, conn *net.UnixConn, ktFd int, hello ctlMsg) error {
	v, err := q.pd.acquireView(hello.PDID, ktFd)
	if err != nil {
		return err
	}
	q.side, q.blk, q.conn, q.view = side, blk, conn, v
	q.me = blockEndpoint(blk, side, ringSize)
	q.peer = blockEndpoint(blk, 1-side, ringSize)
	q.ringMask = uint64(ringSize) - 1
	own := time.Duration(q.cfg.RNRRetry+1) * q.cfg.RNRTimeout
	theirs := time.Duration(hello.RNRRetry+1) * hello.RNRTimeout
	if hello.RNRRetry > 1<<16 || hello.RNRTimeout > time.Hour {
		theirs = 0
	}
	q.rnrBudget = max(own, theirs)
	q.rxSpins = rxSpinsOtherProcess
	if int(hello.PID) == os.Getpid() {
		q.rxSpins = rxSpinsSameProcess
	}
	q.rqMu.Lock()
	if q.closed.Load() {
		q.rqMu.Unlock()
		q.pd.releaseView(v)
		return rdma.ErrClosed
	}
	q.connected.Store(true)
	q.rqMu.Unlock()
	if !q.state.CompareAndSwap(uint32(rdma.StateRTR), uint32(rdma.StateRTS)) {
		// SetError came during the handshake: tell the peer now; the RX
		// goroutine flushes.
		q.me.term.Store(uint32(rdma.WRFlushErr))
	}
	go q.ctlLoop()
	go q.rxLoop()
	return nil
}

// sendCtl writes one control message with an optional fd.
func (q *qp) sendCtl(m *ctlMsg, fd int) error {
	q.ctlMu.Lock()
	defer q.ctlMu.Unlock()
	n, err := m.marshalInto(q.ctlBuf[:])
	if err != nil {
		return err
	}
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	_, _, err = q.conn.WriteMsgUnix(q.ctlBuf[:n], oob, nil)
	return err
}

type fetchReply struct {
	m  ctlMsg
	fd int
}

// ctlLoop reads the control socket until it ends: it serves the peer's
// fetch requests and hands fetch replies to the waiting WR.
func (q *qp) ctlLoop() {
	defer close(q.ctlDone)
	var buf [ctlMaxLen]byte
	for {
		m, fds, err := readCtl(q.conn, buf[:])
		if err != nil {
			q.gone.Store(true)
			q.peerLost()
			return
		}
		switch {
		case m.Type == ctlFetchReq && len(fds) == 0:
			if q.pd.serveFetch(q, m) != nil {
				q.gone.Store(true)
				q.peerLost()
				return
			}
		case m.Type == ctlFetchReply && len(fds) == int(1-m.Status):
			fd := -1
			if len(fds) == 1 {
				fd = fds[0]
			}
			select {
			case q.fetchCh <- fetchReply{m, fd}:
			default:
				closeFds(fds)
			}
		default:
			closeFds(fds)
			q.fail(rdma.RemInvReqErr, 0, rdma.RemInvReqErr, 0)
		}
	}
}

// fetchTimeout bounds a region fetch from a live peer.
const fetchTimeout = 5 * time.Second

// fetch maps the peer's region of key, whose key-table entry is e. sqMu
// is held.
func (q *qp) fetch(key uint32, e keyEntry) rdma.WCStatus {
	q.fetchSeq++
	seq := q.fetchSeq
	if err := q.sendCtl(&ctlMsg{Type: ctlFetchReq, Seq: seq, Key: key, Serial: e.Serial}, -1); err != nil {
		return rdma.RetryExcErr
	}
	t := time.NewTimer(fetchTimeout)
	defer t.Stop()
	for {
		select {
		case r := <-q.fetchCh:
			if r.m.Seq != seq {
				if r.fd >= 0 {
					unix.Close(r.fd)
				}
				continue
			}
			if r.m.Status != 0 || r.m.Serial != e.Serial {
				if r.fd >= 0 {
					unix.Close(r.fd)
				}
				return rdma.RemAccessErr
			}
			mem, err := mapFd(r.fd, int(min(e.Length, 1<<46)), true)
			unix.Close(r.fd)
			if err != nil {
				return rdma.RemAccessErr
			}
			q.view.insert(key>>8, &remoteRegion{serial: e.Serial, mem: mem})
			return rdma.Success
		case <-q.ctlDone:
			return rdma.RetryExcErr
		case <-t.C:
			return rdma.RetryExcErr
		}
	}
}
