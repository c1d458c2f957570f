// Package netfault wraps a net.Listener so that tests can cut every
// connection it accepted, the TCP counterpart of the cut in rdma/fault.
// A cut closes both ends' sockets at once, as a lost network path or a
// reset would: the peer sees EOF or a reset, whatever was in flight is
// lost. A stall makes the listener's side stop receiving (its reads wait,
// the bytes stay in the socket) until Resume, as a peer that went silent
// would look; TCP's own flow control does the rest.
//
//	ln, _ := netfault.Listen("tcp", "127.0.0.1:0")
//	netfault.Register("fault+tcp://"+ln.Addr().String(), ln.Injector())
//	...
//	netfault.For("fault+tcp://127.0.0.1:4420").Cut()
//
// A target's listeners are wrapped through its option, so that the
// target itself imports nothing of this package:
//
//	t, _ := target.New(target.WithListenerWrapper(netfault.Wrapper))
//	addr, _ := t.Listen(ctx, "tcp://127.0.0.1:0")
//	netfault.For(addr).Cut() // or For("fault+" + addr), as the tests name it
//
// fault+tcp:// is the tests' name for such a listener: the host library
// dials it as tcp://.
//
// Every method is safe for concurrent use.
//
// Libraries: the standard library only.
package netfault

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// Injector cuts the connections of one listener.
type Injector struct {
	mu    sync.Mutex // guards conns and resume
	conns map[net.Conn]struct{}
	cuts  atomic.Int64
	// resume is closed when a stall ends; nil when not stalled.
	resume chan struct{}
}

// Stall makes reads on the accepted connections (and those accepted
// later) wait until Resume.
func (i *Injector) Stall() {
	i.mu.Lock()
	if i.resume == nil {
		i.resume = make(chan struct{})
	}
	i.mu.Unlock()
}

// Resume ends a stall.
func (i *Injector) Resume() {
	i.mu.Lock()
	if i.resume != nil {
		close(i.resume)
		i.resume = nil
	}
	i.mu.Unlock()
}

func (i *Injector) stalled() chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.resume
}

// Cut closes every connection accepted so far that is still open.
func (i *Injector) Cut() {
	i.mu.Lock()
	conns := make([]net.Conn, 0, len(i.conns))
	for c := range i.conns {
		conns = append(conns, c)
	}
	clear(i.conns)
	i.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	i.cuts.Add(1)
}

// Cuts returns how many times Cut ran.
func (i *Injector) Cuts() int { return int(i.cuts.Load()) }

// Listener is a net.Listener whose connections an Injector can cut.
type Listener struct {
	net.Listener
	inj *Injector
	url string // registered by Wrapper; "" otherwise
}

// Listen listens as net.Listen does.
func Listen(network, addr string) (*Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return Wrap(ln), nil
}

// Wrap makes ln a Listener whose connections an Injector can cut.
func Wrap(ln net.Listener) *Listener {
	return &Listener{Listener: ln, inj: &Injector{conns: map[net.Conn]struct{}{}}}
}

// Wrapper wraps ln and registers its injector under url until it is
// closed: a target.ListenerWrapper (target.WithListenerWrapper).
func Wrapper(url string, ln net.Listener) (net.Listener, error) {
	l := Wrap(ln)
	l.url = url
	Register(url, l.inj)
	return l, nil
}

// Close closes the listener; one Wrapper made forgets its URL.
func (l *Listener) Close() error {
	if l.url != "" {
		Unregister(l.url)
	}
	return l.Listener.Close()
}

// Injector returns the listener's injector.
func (l *Listener) Injector() *Injector { return l.inj }

// Accept accepts a connection and tracks it for Cut.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, inj: l.inj, closed: make(chan struct{})}
	l.inj.mu.Lock()
	l.inj.conns[tc] = struct{}{}
	l.inj.mu.Unlock()
	return tc, nil
}

// conn forgets itself when closed, and waits in Read during a stall. It
// keeps the *net.TCPConn methods the code above uses through Unwrap.
type conn struct {
	net.Conn
	inj       *Injector
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *conn) Read(b []byte) (int, error) {
	if ch := c.inj.stalled(); ch != nil {
		select {
		case <-ch:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	return c.Conn.Read(b)
}

func (c *conn) Close() error {
	c.inj.mu.Lock()
	delete(c.inj.conns, c)
	c.inj.mu.Unlock()
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// Unwrap returns the underlying connection.
func (c *conn) Unwrap() net.Conn { return c.Conn }

var (
	regMu    sync.Mutex // guards registry
	registry = map[string]*Injector{}
)

// Register makes inj findable by url.
func Register(url string, inj *Injector) {
	regMu.Lock()
	registry[url] = inj
	regMu.Unlock()
}

// Unregister forgets url.
func Unregister(url string) {
	regMu.Lock()
	delete(registry, url)
	regMu.Unlock()
}

// For returns the injector registered for url, or nil. A fault+tcp://
// URL finds what is registered under it, or else under its tcp:// form.
func For(url string) *Injector {
	regMu.Lock()
	defer regMu.Unlock()
	if inj := registry[url]; inj != nil {
		return inj
	}
	if rest, ok := strings.CutPrefix(url, "fault+tcp://"); ok {
		return registry["tcp://"+rest]
	}
	return nil
}
