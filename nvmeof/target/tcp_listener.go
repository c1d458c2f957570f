package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/capsule-storage/capsule/nvmeof"
)

// The NVMe/TCP binding (NVMe/TCP Transport Specification 1.0): one TCP
// connection per NVMe queue, opened with ICReq/ICResp; commands in
// CapsuleCmd PDUs, host data in the capsule or in H2CData PDUs the target
// asks for with R2T, controller data in C2HData PDUs, responses in
// CapsuleResp PDUs. tcp_listener.go accepts connections; tcp_queue.go runs
// a queue.

// tcpListener accepts NVMe/TCP connections at one address.
type tcpListener struct {
	t    *Target
	ln   net.Listener
	addr string
	disc nvmeof.DiscoveryLogEntry
	log  *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

var _ listener = (*tcpListener)(nil)

// listenTCP starts a TCP listener at url, tcp://HOST:PORT, passes it
// through the target's ListenerWrapper if it has one, and starts its
// accept loop.
func listenTCP(ctx context.Context, t *Target, url string, portID uint16) (*tcpListener, error) {
	_, hostPort, _ := strings.Cut(url, "://")
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", hostPort)
	if err != nil {
		return nil, fmt.Errorf("target: listen on %s: %w", url, err)
	}
	addr := "tcp://" + ln.Addr().String()
	disc, err := discoveryEntry(addr, portID)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if wrap := t.cfg.wrapListener; wrap != nil {
		wl, err := wrap(addr, ln)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("target: listen on %s: wrapping the listener: %w", url, err)
		}
		ln = wl
	}
	l := &tcpListener{t: t, ln: ln, addr: addr, disc: disc, log: t.log.With("listener", addr)}
	t.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *tcpListener) url() string                     { return l.addr }
func (l *tcpListener) entry() nvmeof.DiscoveryLogEntry { return l.disc }

// close stops accepting; connections already up stay.
func (l *tcpListener) close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.ln.Close()
	})
	return l.closeErr
}

func (l *tcpListener) acceptLoop() {
	defer l.t.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && l.t.ctx.Err() == nil {
				l.log.Error("accept failed; listener stopped", "err", err)
			}
			l.close()
			return
		}
		if tc, ok := tcpConnOf(c); ok {
			tc.SetNoDelay(true)
		}
		q := newTCPQueue(l, c)
		if err := l.t.registerQueue(&q.core); err != nil {
			c.Close()
			continue
		}
		l.t.wg.Add(1)
		go q.run()
	}
}

// tcpConnOf finds the *net.TCPConn under c (a ListenerWrapper's
// connections may wrap it).
func tcpConnOf(c net.Conn) (*net.TCPConn, bool) {
	for {
		switch x := c.(type) {
		case *net.TCPConn:
			return x, true
		case interface{ Unwrap() net.Conn }:
			c = x.Unwrap()
		default:
			return nil, false
		}
	}
}
