package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

// Connection management: the MPA start-up exchange (RFC 5044 section 7)
// carries the CM private data. The active side sends an MPA Request with
// its private data; the passive side answers with a Reply carrying the
// accept's private data, or a Reply with R set carrying the reject's.

// deadlineFrom is the earlier of ctx's deadline and now+d.
func deadlineFrom(ctx context.Context, d time.Duration) time.Time {
	t := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(t) {
		return dl
	}
	return t
}

// writeMPA sends one MPA frame in one write.
func writeMPA(conn io.Writer, f *wire.MPAFrame) error {
	var b [wire.MPAHeaderLen + wire.MPAMaxPrivate]byte
	n, err := f.MarshalTo(b[:])
	if err != nil {
		return fmt.Errorf("%w: %v", rdma.ErrInvalidArgument, err)
	}
	_, err = conn.Write(b[:n])
	return err
}

// readMPA reads exactly one MPA frame: the 20-byte header, then
// PD_Length bytes of private data (at most 512, checked before reading),
// into a fresh slice the caller owns. It never reads past the frame, so
// FPDUs that follow stay in the stream.
func readMPA(conn io.Reader) (wire.MPAFrame, error) {
	var hb [wire.MPAHeaderLen]byte
	var f wire.MPAFrame
	if _, err := io.ReadFull(conn, hb[:]); err != nil {
		return f, err
	}
	h, err := wire.UnmarshalMPAHeader(hb[:])
	if err != nil {
		return f, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	f.MPAHeader = h
	if h.PDLength > 0 {
		f.Private = make([]byte, h.PDLength)
		if _, err := io.ReadFull(conn, f.Private); err != nil {
			return f, err
		}
	}
	return f, nil
}

// Connect implements rdma.QP.
func (q *qp) Connect(ctx context.Context, host string, private []byte) ([]byte, error) {
	if len(private) > wire.MPAMaxPrivate {
		return nil, fmt.Errorf("%w: %d bytes of private data", rdma.ErrInvalidArgument, len(private))
	}
	if err := q.toRTR(); err != nil {
		return nil, err
	}
	reply, err := q.connect(ctx, host, private)
	if err != nil {
		q.backToInit()
		return nil, err
	}
	return reply, nil
}

func (q *qp) connect(ctx context.Context, host string, private []byte) ([]byte, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %v", rdma.ErrConnRefused, err)
		}
		return nil, err
	}
	conn := c.(*net.TCPConn)
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	_ = conn.SetDeadline(deadlineFrom(ctx, q.prov.cfg.handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := wire.MPAFrame{MPAHeader: wire.MPAHeader{CRC: q.prov.cfg.crc, Rev: wire.MPARevision}, Private: private}
	if err := writeMPA(conn, &req); err != nil {
		return nil, q.ctxErr(ctx, err)
	}
	rep, err := readMPA(conn)
	if err != nil {
		return nil, q.ctxErr(ctx, err)
	}
	if !rep.Reply {
		return nil, fmt.Errorf("%w: got a Request, want a Reply", ErrHandshake)
	}
	if rep.Reject {
		return nil, &rdma.RejectError{Private: rep.Private}
	}
	if rep.Markers {
		return nil, ErrMarkersUnsupported
	}
	if !stop() {
		return nil, ctx.Err()
	}
	_ = conn.SetDeadline(time.Time{})
	if err := q.start(conn, req.CRC || rep.CRC); err != nil {
		return nil, err
	}
	ok = true
	return rep.Private, nil
}

func (q *qp) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, ErrHandshake) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrHandshake, err)
}

// listener accepts TCP connections and reads their MPA Requests in the
// background, so a slow or silent client cannot hold up others.
type listener struct {
	prov *Provider
	ln   *net.TCPListener
	reqs chan *connReq
	done chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex // guards pending, shaking and closed
	pending map[*connReq]struct{}
	shaking map[*net.TCPConn]struct{} // connections whose Request is being read
	closed  bool
}

var _ rdma.Listener = (*listener)(nil)

func listen(ctx context.Context, p *Provider, host string) (*listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	l := &listener{prov: p, ln: ln.(*net.TCPListener), reqs: make(chan *connReq),
		done: make(chan struct{}), pending: map[*connReq]struct{}{}, shaking: map[*net.TCPConn]struct{}{}}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and friends: back off
			continue
		}
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// handshake reads the MPA Request of one connection and hands it to
// Accept. Malformed requests, and requests for markers, are dropped.
func (l *listener) handshake(conn *net.TCPConn) {
	defer l.wg.Done()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		conn.Close()
		return
	}
	l.shaking[conn] = struct{}{}
	l.mu.Unlock()
	_ = conn.SetDeadline(time.Now().Add(l.prov.cfg.handshakeTimeout))
	f, err := readMPA(conn)
	l.mu.Lock()
	delete(l.shaking, conn)
	l.mu.Unlock()
	if err != nil || f.Reply {
		conn.Close()
		return
	}
	// The Reply waits for the application's Accept or Reject.
	_ = conn.SetDeadline(time.Time{})
	if f.Markers {
		rej := wire.MPAFrame{MPAHeader: wire.MPAHeader{Reply: true, Reject: true, Rev: wire.MPARevision}}
		_ = writeMPA(conn, &rej)
		conn.Close()
		return
	}
	r := &connReq{l: l, conn: conn, req: f}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		conn.Close()
		return
	}
	l.pending[r] = struct{}{}
	l.mu.Unlock()
	select {
	case l.reqs <- r:
	case <-l.done:
		r.drop()
	}
}

// Accept implements rdma.Listener.
func (l *listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, rdma.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Addr implements rdma.Listener.
func (l *listener) Addr() string { return Scheme + "://" + l.ln.Addr().String() }

// Close implements rdma.Listener: unanswered requests are dropped.
// Connections already accepted are not affected.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	pend := l.pending
	l.pending = map[*connReq]struct{}{}
	for c := range l.shaking {
		// Unblock the read; the handshake goroutine closes it.
		_ = c.SetDeadline(time.Unix(1, 0))
	}
	l.mu.Unlock()
	err := l.ln.Close()
	for r := range pend {
		r.drop()
	}
	l.wg.Wait()
	return err
}

// connReq is one connection waiting for Accept or Reject.
type connReq struct {
	l    *listener
	conn *net.TCPConn
	req  wire.MPAFrame

	mu       sync.Mutex // guards answered
	answered bool
}

var _ rdma.ConnRequest = (*connReq)(nil)

func (r *connReq) PrivateData() []byte { return r.req.Private }
func (r *connReq) RemoteAddr() string  { return r.conn.RemoteAddr().String() }

// claim marks the request answered; false if it already was.
func (r *connReq) claim() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return false
	}
	r.answered = true
	r.l.mu.Lock()
	delete(r.l.pending, r)
	r.l.mu.Unlock()
	return true
}

func (r *connReq) drop() {
	if r.claim() {
		r.conn.Close()
	}
}

// Accept implements rdma.ConnRequest.
func (r *connReq) Accept(rq rdma.QP, private []byte) error {
	q, ok := rq.(*qp)
	if !ok {
		return rdma.ErrWrongProvider
	}
	if len(private) > wire.MPAMaxPrivate {
		return fmt.Errorf("%w: %d bytes of private data", rdma.ErrInvalidArgument, len(private))
	}
	if err := q.toRTR(); err != nil {
		return err
	}
	if !r.claim() {
		q.backToInit()
		return ErrAnswered
	}
	crc := r.req.CRC || r.l.prov.cfg.crc
	rep := wire.MPAFrame{MPAHeader: wire.MPAHeader{Reply: true, CRC: crc, Rev: wire.MPARevision}, Private: private}
	err := writeMPA(r.conn, &rep)
	if err == nil {
		_ = r.conn.SetDeadline(time.Time{})
		err = q.start(r.conn, crc)
	}
	if err != nil {
		r.conn.Close()
		q.backToInit()
		return err
	}
	return nil
}

// Reject implements rdma.ConnRequest.
func (r *connReq) Reject(private []byte) error {
	if len(private) > wire.MPAMaxPrivate {
		return fmt.Errorf("%w: %d bytes of private data", rdma.ErrInvalidArgument, len(private))
	}
	if !r.claim() {
		return ErrAnswered
	}
	defer r.conn.Close()
	rep := wire.MPAFrame{MPAHeader: wire.MPAHeader{Reply: true, Reject: true, CRC: r.req.CRC, Rev: wire.MPARevision}, Private: private}
	return writeMPA(r.conn, &rep)
}
