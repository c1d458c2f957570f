package iwarp

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/internal/soft"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

// qp is a reliable-connected queue pair over one TCP connection.
//
// Goroutines: after connection setup two goroutines run per QP. The
// receiver (rx.go) reads FPDUs, places Writes and Read Responses, fills
// Recvs and queues inbound Read Requests; it never writes except for a
// Terminate when it fails. The responder (tx goroutine, below) answers
// Read Requests and resumes a send queue that waited for Reads (Fence,
// ORD). Posting threads transmit their own WRs (see kickSend).
//
// Lock order: mu, then sq.mu, then rq.mu, then a CQ's lock. tx.mu and
// irq.mu are taken with none of the others held.
type qp struct {
	pd   *pd
	prov *Provider
	num  uint32
	cfg  rdma.QPConfig
	scq  *soft.CQ
	rcq  *soft.CQ

	state  atomic.Uint32 // rdma.QPState; changes under mu
	closed atomic.Bool   // Close was called

	mu        sync.Mutex // guards err, conn, lingering, local, remote
	err       error
	conn      *net.TCPConn
	lingering bool // a Terminate went out: the receiver drains before it closes
	local     string
	remote    string
	done      chan struct{} // closed on entering StateError

	crc bool // negotiated; written before the goroutines start

	sq   sendQueue
	rq   recvQueue
	irq  readRespQueue
	tx   txPath
	rx   rxState       // owned by the receiver goroutine
	wake chan struct{} // one token: the responder has work

	respEntry irqEntry  // responder-owned: the request being answered
	respSegs  [1][]byte // responder-owned gather list of a Read Response
	respCur   cursor    // responder-owned
	wg        sync.WaitGroup
}

var _ rdma.QP = (*qp)(nil)

func newQP(d *pd, cfg rdma.QPConfig) (*qp, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SRQ != nil {
		return nil, rdma.ErrNotSupported
	}
	scq, err := softCQ(cfg.SendCQ)
	if err != nil {
		return nil, err
	}
	rcq, err := softCQ(cfg.RecvCQ)
	if err != nil {
		return nil, err
	}
	q := &qp{
		pd: d, prov: d.prov, num: qpNums.Add(1), cfg: cfg, scq: scq, rcq: rcq,
		done: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	q.sq.init(cfg.MaxSendWR, cfg.MaxSGE, cfg.MaxInline)
	q.rq.init(cfg.MaxRecvWR, cfg.MaxSGE)
	q.irq.init(ReadDepth)
	q.tx.init(cfg.MaxSGE)
	q.rx.init()
	q.state.Store(uint32(rdma.StateInit))
	return q, nil
}

func (q *qp) Num() uint32           { return q.num }
func (q *qp) State() rdma.QPState   { return rdma.QPState(q.state.Load()) }
func (q *qp) Done() <-chan struct{} { return q.done }

func (q *qp) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

func (q *qp) LocalAddr() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.local
}

func (q *qp) RemoteAddr() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.remote
}

// start binds the connection and moves the QP to RTS. The caller has
// finished the MPA exchange on conn.
func (q *qp) start(conn *net.TCPConn, crc bool) error {
	q.mu.Lock()
	if q.closed.Load() || q.State() != rdma.StateRTR {
		q.mu.Unlock()
		return rdma.ErrInvalidState
	}
	q.conn = conn
	if n := q.prov.cfg.socketBuffer; n > 0 {
		// Best effort: a refused size leaves the kernel's.
		_ = conn.SetReadBuffer(n)
		_ = conn.SetWriteBuffer(n)
	}
	q.local, q.remote = conn.LocalAddr().String(), conn.RemoteAddr().String()
	q.crc = crc
	q.tx.conn, q.tx.crc = conn, crc
	q.rx.rd.conn = conn
	q.rx.rd.buf = make([]byte, rxBufSize)
	q.state.Store(uint32(rdma.StateRTS))
	q.wg.Add(2)
	q.mu.Unlock()
	go q.receiver()
	go q.responder()
	return nil
}

// toRTR claims the QP for connection setup (Init → RTR).
func (q *qp) toRTR() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() || q.State() != rdma.StateInit {
		return fmt.Errorf("%w: QP is %v", rdma.ErrInvalidState, q.State())
	}
	q.state.Store(uint32(rdma.StateRTR))
	return nil
}

// backToInit undoes toRTR after a failed or refused connection attempt.
func (q *qp) backToInit() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.State() == rdma.StateRTR {
		q.state.Store(uint32(rdma.StateInit))
	}
}

// termMsg is a Terminate to send when failing: the cause and copies of the
// offending headers.
type termMsg struct {
	cause   wire.TermCause
	segLen  uint16
	ddpLen  int
	ddp     [wire.UntaggedHeaderLen]byte
	rdmaLen int
	rdma    [wire.ReadRequestLen]byte
}

// fail moves the QP to StateError with status st (QP.Err), closes Done,
// sends t if it is not nil, ends the connection and flushes both queues.
// Only the first call has an effect.
func (q *qp) fail(st rdma.WCStatus, t *termMsg) {
	q.mu.Lock()
	if q.State() == rdma.StateError {
		q.mu.Unlock()
		return
	}
	q.state.Store(uint32(rdma.StateError))
	q.err = st
	// Done closes before the flush: a consumer woken by a flushed
	// completion then already sees the QP in Error.
	close(q.done)
	conn := q.conn
	q.lingering = t != nil && conn != nil
	linger := q.lingering
	q.mu.Unlock()

	if linger {
		// A writer stuck on a peer that does not read gives up at the
		// deadline, so the Terminate gets its turn or fails too.
		_ = conn.SetWriteDeadline(time.Now().Add(q.prov.cfg.linger))
		q.tx.mu.Lock()
		q.sendTerminateLocked(t)
		q.tx.mu.Unlock()
		_ = conn.CloseWrite()
		// The receiver keeps reading until the peer closes (it will, on
		// the Terminate) or the deadline passes, so that closing with
		// unread data does not reset the connection under the Terminate.
		_ = conn.SetReadDeadline(time.Now().Add(q.prov.cfg.linger))
	} else if conn != nil {
		_ = conn.Close()
	}

	q.sq.mu.Lock()
	q.flushSendLocked(st)
	q.sq.mu.Unlock()
	q.rq.mu.Lock()
	q.flushRecvLocked()
	q.rq.mu.Unlock()
}

// sendTerminateLocked writes a Terminate FPDU (QN 2). The caller holds
// tx.mu.
func (q *qp) sendTerminateLocked(t *termMsg) {
	tm := wire.Terminate{Cause: t.cause}
	if t.ddpLen > 0 {
		tm.SegLenValid = true
		tm.SegLen = t.segLen
		tm.DDPHeader = t.ddp[:t.ddpLen]
	}
	if t.rdmaLen > 0 {
		tm.RDMAHeader = t.rdma[:t.rdmaLen]
	}
	var body [wire.TerminateMaxLen]byte
	n, err := tm.MarshalTo(body[:])
	if err != nil {
		return
	}
	h := wire.Header{Last: true, Opcode: wire.OpTerminate, QN: wire.QNTerminate, MSN: 1}
	var c cursor
	q.tx.fpdu(&h, body[:n], &c, 0)
	q.tx.flush()
}

// SetError implements rdma.QP.
func (q *qp) SetError() { q.fail(rdma.WRFlushErr, nil) }

// Close implements rdma.QP: it errors the QP, closes the connection and
// waits for the QP's goroutines.
func (q *qp) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.fail(rdma.WRFlushErr, nil)
	q.wg.Wait()
	return nil
}

// kick wakes the responder goroutine.
func (q *qp) kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// responder answers inbound Read Requests in order and resumes the send
// queue when Reads it waited for have completed.
func (q *qp) responder() {
	defer q.wg.Done()
	for {
		select {
		case <-q.wake:
		case <-q.done:
			return
		}
		for {
			// Take the request off the queue before answering it: once
			// the answer is out the peer may reuse its place at once.
			e, ok := q.irq.peek()
			if !ok {
				break
			}
			q.respEntry = *e
			q.irq.pop()
			e = &q.respEntry
			if e.bad {
				q.fail(statusOf(e.term.cause), &e.term)
				return
			}
			if !q.readResponse(e) {
				return
			}
		}
		q.kickSend()
	}
}

// statusOf maps a Terminate cause to the WCStatus both ends report.
func statusOf(c wire.TermCause) rdma.WCStatus {
	switch c.Layer {
	case wire.LayerRDMAP:
		switch c.EType {
		case wire.ETypeRDMAPRemoteProtection:
			if c.Code == wire.CodeSTagNotInvalidated {
				return rdma.RemInvReqErr
			}
			return rdma.RemAccessErr
		case wire.ETypeRDMAPRemoteOperation:
			if c.Code == wire.CodeInvalidRDMAPVersion || c.Code == wire.CodeUnexpectedOpcode {
				return rdma.RemInvReqErr
			}
		}
		return rdma.RemOpErr
	case wire.LayerDDP:
		switch c.EType {
		case wire.ETypeDDPTagged:
			if c.Code == wire.CodeDDPTaggedVersion {
				return rdma.RemInvReqErr
			}
			return rdma.RemAccessErr
		case wire.ETypeDDPUntagged:
			if c.Code == wire.CodeDDPNoBuffer {
				return rdma.RNRRetryExcErr
			}
			return rdma.RemInvReqErr
		}
		return rdma.RemOpErr
	}
	return rdma.RemOpErr
}
