package shm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/rdma"
)

// socketName is the abstract Unix socket of a listener name.
func socketName(name string) string { return "@capsule-shm/" + name }

// checkName validates a listener name: the host part of shm://name.
func checkName(name string) error {
	if name == "" || len(name) > 90 || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%w: %q", ErrBadName, name)
	}
	return nil
}

// maxFds is the most descriptors a control message carries.
const maxFds = 2

// writeCtl sends m with fds attached.
func writeCtl(c *net.UnixConn, m *ctlMsg, fds ...int) error {
	var buf [ctlMaxLen]byte
	n, err := m.marshalInto(buf[:])
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(buf[:n], oob, nil)
	return err
}

// readCtl reads one control message and the fds that came with it. A
// message that does not decode is an error; its fds are closed.
func readCtl(c *net.UnixConn, buf []byte) (ctlMsg, []int, error) {
	oob := make([]byte, unix.CmsgSpace(4*maxFds))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return ctlMsg{}, nil, err
	}
	if n == 0 && oobn == 0 {
		return ctlMsg{}, nil, errors.New("shm: control socket closed")
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, cm := range cmsgs {
				if f, err := unix.ParseUnixRights(&cm); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeFds(fds)
		return ctlMsg{}, nil, fmt.Errorf("%w: truncated", ErrBadMessage)
	}
	m, err := decodeCtlMsg(buf[:n])
	if err != nil {
		closeFds(fds)
		return ctlMsg{}, nil, err
	}
	return m, fds, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// listener accepts connection requests on an abstract SOCK_SEQPACKET
// Unix socket.
type listener struct {
	name string
	ln   *net.UnixListener
	reqs chan *connReq
	done chan struct{}
	wg   sync.WaitGroup // the accept goroutine and handshakes in progress

	// mu guards pending: connections whose request is still being read,
	// closed by Close so that it need not wait for slow dialers.
	mu      sync.Mutex
	pending map[*net.UnixConn]struct{}

	closeOnce sync.Once
}

var _ rdma.Listener = (*listener)(nil)

func listen(_ context.Context, name string) (*listener, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socketName(name), Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen on shm://%s: %w", name, err)
	}
	l := &listener{name: name, ln: ln, reqs: make(chan *connReq), done: make(chan struct{}), pending: map[*net.UnixConn]struct{}{}}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// handshakeTimeout bounds how long a dialer may take to send its request.
const handshakeTimeout = 10 * time.Second

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.ln.AcceptUnix()
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
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// handshake reads one connection request and hands it to Accept.
func (l *listener) handshake(c *net.UnixConn) {
	defer l.wg.Done()
	l.mu.Lock()
	select {
	case <-l.done:
		l.mu.Unlock()
		c.Close()
		return
	default:
	}
	l.pending[c] = struct{}{}
	l.mu.Unlock()
	c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var buf [ctlMaxLen]byte
	m, fds, err := readCtl(c, buf[:])
	l.mu.Lock()
	delete(l.pending, c)
	l.mu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	if m.Type != ctlConnReq || len(fds) != 2 {
		closeFds(fds)
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	blk, err := mapFd(fds[1], blkHdrLen, true)
	unix.Close(fds[1])
	if err == nil {
		if err = checkBlock(blk, m.RingSize); err != nil {
			unmap(blk)
		}
	}
	if err != nil {
		unix.Close(fds[0])
		c.Close()
		return
	}
	r := &connReq{l: l, conn: c, blk: blk, ktFd: fds[0], hello: m}
	r.hello.Private = append([]byte(nil), m.Private...)
	select {
	case l.reqs <- r:
	case <-l.done:
		r.drop()
	}
}

// Accept waits for the next connection request.
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

func (l *listener) Addr() string { return Scheme + "://" + l.name }

// Close stops listening; Accept calls in progress return ErrClosed and
// requests not yet accepted are dropped (their dialers see a refusal).
func (l *listener) Close() error {
	err := rdma.ErrClosed
	l.closeOnce.Do(func() {
		l.mu.Lock()
		close(l.done)
		for c := range l.pending {
			c.Close()
		}
		l.mu.Unlock()
		err = l.ln.Close()
		l.wg.Wait()
	})
	return err
}

// connReq is a connection request waiting for Accept or Reject.
type connReq struct {
	l     *listener
	conn  *net.UnixConn
	blk   []byte
	ktFd  int
	hello ctlMsg

	mu       sync.Mutex // guards answered
	answered bool
}

var _ rdma.ConnRequest = (*connReq)(nil)

func (r *connReq) PrivateData() []byte { return r.hello.Private }
func (r *connReq) RemoteAddr() string {
	return fmt.Sprintf("shm://pid%d.qp%d", r.hello.PID, r.hello.QPNum)
}

func (r *connReq) answer() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return false
	}
	r.answered = true
	return true
}

func (r *connReq) drop() {
	unmap(r.blk)
	unix.Close(r.ktFd)
	r.conn.Close()
}

// Accept binds q to the connection and answers the dialer.
func (r *connReq) Accept(qpi rdma.QP, private []byte) error {
	q, ok := qpi.(*qp)
	if !ok {
		return rdma.ErrWrongProvider
	}
	if len(private) > rdma.MaxPrivateData {
		return fmt.Errorf("%w: %d bytes of private data", rdma.ErrInvalidArgument, len(private))
	}
	if q.closed.Load() || !q.state.CompareAndSwap(uint32(rdma.StateInit), uint32(rdma.StateRTR)) {
		return rdma.ErrInvalidState
	}
	if !r.answer() {
		q.state.CompareAndSwap(uint32(rdma.StateRTR), uint32(rdma.StateInit))
		return rdma.ErrInvalidState
	}
	q.local = r.l.Addr()
	q.remote = r.RemoteAddr()
	if err := q.attach(1, r.blk, r.hello.RingSize, r.conn, r.ktFd, r.hello); err != nil {
		unmap(r.blk)
		r.conn.Close()
		q.state.CompareAndSwap(uint32(rdma.StateRTR), uint32(rdma.StateInit))
		return err
	}
	m := ctlMsg{
		Type: ctlAccept, PDID: q.pd.id, QPNum: q.num, PID: uint32(os.Getpid()),
		RNRRetry: uint32(q.cfg.RNRRetry), RNRTimeout: q.cfg.RNRTimeout, Private: private,
	}
	q.ctlMu.Lock()
	err := writeCtl(r.conn, &m, q.pd.ktFd)
	q.ctlMu.Unlock()
	if err != nil {
		q.fail(rdma.RetryExcErr, 0, rdma.RetryExcErr, 0)
		return fmt.Errorf("shm: answering %s: %w", r.RemoteAddr(), err)
	}
	return nil
}

// Reject refuses the connection with private data.
func (r *connReq) Reject(private []byte) error {
	if len(private) > rdma.MaxPrivateData {
		return fmt.Errorf("%w: %d bytes of private data", rdma.ErrInvalidArgument, len(private))
	}
	if !r.answer() {
		return rdma.ErrInvalidState
	}
	defer r.drop()
	return writeCtl(r.conn, &ctlMsg{Type: ctlReject, Private: private})
}
