package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Multipath is one NVM subsystem reached through several addresses (the
// listeners of the subsystem: its paths), each a Controller of its own,
// with namespaces whose I/O goes where ANA says it is best served and
// moves when a path becomes Inaccessible or goes away. It is safe for
// concurrent use.
//
// The paths are Controllers dialed with the same options (the same host
// NQN and ID, so reservations see one host), with Asynchronous Events on
// (ANA Change notices; WithAsyncEvents' function, if given, still sees
// every event of every path) and with their requests failing fast: a
// request that meets a lost path or an ANA status is sent again on
// another path, not parked behind a reconnect. Each path still
// reconnects on its own, and a path that could not be dialed at first is
// dialed again with the reconnect backoff until Close.
type Multipath struct {
	subNQN string
	cfg    config // the options, for timeouts and backoff
	opts   []Option
	log    *slog.Logger
	paths  []*path // one per URL given, in that order; fixed

	ctx    context.Context // canceled by Close: ends dial attempts
	cancel context.CancelFunc
	kick   chan struct{} // wakes the loop (capacity 1)

	// mu guards the fields below. It is never held while submitting to a
	// path or calling a Controller.
	mu         sync.Mutex
	namespaces map[uint32]*MultipathNamespace
	waitHead   *Request // requests waiting for a usable path, oldest first
	waitTail   *Request
	closed     bool

	wg sync.WaitGroup // the loop and the dialers
}

// path is one address of a Multipath.
type path struct {
	url string
	c   atomic.Pointer[Controller] // nil until dialed
	// staleUntil is the ANA log page read (Controller.anaReads) the
	// path waits for before it is used again: a command got an ANA
	// status through it, so what the host knows of it is out of date.
	staleUntil atomic.Uint64
	dialErr    atomic.Pointer[error] // the last failed dial, nil once dialed
	dialing    atomic.Bool           // redial runs
}

// usable reports whether requests may go to the path now, and returns
// its controller.
func (p *path) usable() (*Controller, bool) {
	c := p.c.Load()
	if c == nil || c.live.Load() == nil || c.anaReads.Load() < p.staleUntil.Load() {
		return nil, false
	}
	return c, true
}

// PathInfo describes one path of a Multipath.
type PathInfo struct {
	// URL is the address, as given to DialMultipath.
	URL string
	// Controller is the path's controller, nil until it is dialed.
	Controller *Controller
	// State is the controller's state (StateConnecting until dialed).
	State State
	// Err is why the last dial failed, while it has not succeeded.
	Err error
}

// multipathLoopPeriod is how often waiting requests look for a path when
// nothing tells the loop that one changed.
const multipathLoopPeriod = 50 * time.Millisecond

// DialMultipath connects to one NVM subsystem through every address in
// urls (each as Dial connects: the same options for all). Without
// WithSubsystem it takes the first NVM subsystem of the discovery log of
// the first address that answers. It returns once every address has been
// tried, and fails only if none could be connected; the others are
// dialed again in the background (PathInfo.Err says why they are not up
// yet). Close it.
func DialMultipath(ctx context.Context, urls []string, opts ...Option) (*Multipath, error) {
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: no address for a multipath", ErrInvalidOption)
	}
	for i, u := range urls {
		if slices.Contains(urls[:i], u) {
			return nil, fmt.Errorf("%w: address %s given twice", ErrInvalidOption, u)
		}
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	sub := cfg.subNQN
	if sub == "" {
		var errs []error
		for _, u := range urls {
			c, err := Dial(ctx, u, opts...)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			sub = c.SubsystemNQN()
			c.Close()
			break
		}
		if sub == "" {
			return nil, fmt.Errorf("nvmeof/host: finding a subsystem at %v: %w", urls, errors.Join(errs...))
		}
	}
	m := &Multipath{subNQN: sub, cfg: cfg, log: cfg.logger.With("subnqn", sub),
		kick: make(chan struct{}, 1), namespaces: map[uint32]*MultipathNamespace{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.opts = append(slices.Clone(opts), WithSubsystem(sub), m.pathOption())
	for _, u := range urls {
		m.paths = append(m.paths, &path{url: u})
	}
	var wg sync.WaitGroup
	for _, p := range m.paths {
		wg.Go(func() {
			c, err := Dial(ctx, p.url, m.opts...)
			if err != nil {
				p.dialErr.Store(&err)
				return
			}
			p.c.Store(c)
		})
	}
	wg.Wait()
	var errs []error
	up := 0
	for _, p := range m.paths {
		if p.c.Load() != nil {
			up++
		} else {
			errs = append(errs, fmt.Errorf("%s: %w", p.url, *p.dialErr.Load()))
		}
	}
	if up == 0 {
		m.cancel()
		return nil, fmt.Errorf("nvmeof/host: no path to %s: %w", sub, errors.Join(errs...))
	}
	for _, p := range m.paths {
		if p.c.Load() == nil {
			m.log.Warn("nvmeof/host: path not connected; dialing again in the background", "url", p.url, "err", *p.dialErr.Load())
			p.dialing.Store(true)
			m.wg.Go(func() { m.redial(p) })
		}
	}
	m.wg.Go(m.loop)
	return m, nil
}

// pathOption is what DialMultipath adds to the options of every path.
func (m *Multipath) pathOption() Option {
	return func(c *config) {
		user := c.onEvent
		c.onEvent = func(ev AsyncEvent) {
			if user != nil {
				user(ev)
			}
		}
		c.pathChanged = m.kickLoop
	}
}

// redial dials a path that was not up at DialMultipath, or whose
// controller gave up reconnecting, with the reconnect backoff, until it
// connects or Close.
func (m *Multipath) redial(p *path) {
	defer p.dialing.Store(false)
	delay := m.cfg.reconnectFirst
	for {
		t := time.NewTimer(delay)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.connectTimeout)
		c, err := Dial(ctx, p.url, m.opts...)
		cancel()
		if err == nil {
			m.mu.Lock()
			closed := m.closed
			if !closed {
				p.c.Store(c)
				p.dialErr.Store(nil)
			}
			m.mu.Unlock()
			if closed {
				c.Close()
				return
			}
			m.log.Info("nvmeof/host: path connected", "url", p.url)
			m.kickLoop()
			return
		}
		p.dialErr.Store(&err)
		delay = min(2*delay, m.cfg.reconnectMax)
	}
}

// SubsystemNQN names the subsystem.
func (m *Multipath) SubsystemNQN() string { return m.subNQN }

// Paths describes the paths, in the order of DialMultipath's urls.
func (m *Multipath) Paths() []PathInfo {
	out := make([]PathInfo, len(m.paths))
	for i, p := range m.paths {
		out[i] = PathInfo{URL: p.url, State: StateConnecting}
		if c := p.c.Load(); c != nil {
			out[i].Controller, out[i].State = c, c.State()
		} else if e := p.dialErr.Load(); e != nil {
			out[i].Err = *e
		}
	}
	return out
}

// kickLoop wakes the loop without blocking.
func (m *Multipath) kickLoop() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Namespace returns namespace nsid of the subsystem, identifying it on
// the paths that are up (Identify Namespace); paths that come up later
// are identified then. A path whose namespace differs from the first
// path's (size, block size, NGUID) is not used for it.
func (m *Multipath) Namespace(nsid uint32) (*MultipathNamespace, error) {
	m.mu.Lock()
	mn := m.namespaces[nsid]
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if mn != nil {
		return mn, nil
	}
	var first error
	mn = &MultipathNamespace{m: m, nsid: nsid, onPath: make([]atomic.Pointer[Namespace], len(m.paths)),
		mismatch: make([]atomic.Bool, len(m.paths))}
	mn.doneFn = mn.done
	for i, p := range m.paths {
		c := p.c.Load()
		if c == nil || c.live.Load() == nil {
			continue
		}
		ns, err := c.Namespace(nsid)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if mn.ref == nil {
			mn.ref = ns
		} else if !sameNamespace(mn.ref, ns) {
			m.log.Warn("nvmeof/host: a path's namespace differs from the first path's; not used", "url", p.url, "nsid", nsid)
			mn.mismatch[i].Store(true)
			continue
		}
		mn.onPath[i].Store(ns)
	}
	if mn.ref == nil {
		if first == nil {
			first = fmt.Errorf("%w: no path is up", ErrNoPath)
		}
		return nil, first
	}
	m.mu.Lock()
	if old := m.namespaces[nsid]; old != nil {
		mn = old
	} else {
		m.namespaces[nsid] = mn
	}
	m.mu.Unlock()
	return mn, nil
}

// sameNamespace reports whether two paths' handles name one namespace.
func sameNamespace(a, b *Namespace) bool {
	return a.size == b.size && a.bs == b.bs && a.id.NGUID == b.id.NGUID
}

// Close closes every path (Controller.Close: requests in flight drain
// for up to 5 seconds) and fails what waits for a path with ErrClosed. Do
// not call it from a Done callback.
func (m *Multipath) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	waiting := m.takeWaitingLocked()
	m.mu.Unlock()
	m.cancel()
	m.kickLoop()
	m.wg.Wait()
	for _, r := range waiting {
		r.Err, r.N = ErrClosed, 0
		r.mp.finish(r)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(m.paths))
	for i, p := range m.paths {
		if c := p.c.Load(); c != nil {
			wg.Go(func() { errs[i] = c.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// wait puts r on the list of requests waiting for a usable path; the
// loop sends it once there is one. It returns false, and leaves r alone,
// when the Multipath is closed.
func (m *Multipath) wait(r *Request) bool {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false
	}
	if r.mpSince.IsZero() {
		r.mpSince = time.Now()
	}
	r.mpNext = nil
	if m.waitTail == nil {
		m.waitHead = r
	} else {
		m.waitTail.mpNext = r
	}
	m.waitTail = r
	m.mu.Unlock()
	m.kickLoop()
	return true
}

func (m *Multipath) takeWaitingLocked() []*Request {
	var rs []*Request
	for r := m.waitHead; r != nil; {
		next := r.mpNext
		r.mpNext = nil
		rs = append(rs, r)
		r = next
	}
	m.waitHead, m.waitTail = nil, nil
	return rs
}

// loop identifies namespaces on paths that came up, and sends the
// requests that wait for a path when one is usable, failing those that
// waited past the controller-loss timeout.
func (m *Multipath) loop() {
	t := time.NewTimer(multipathLoopPeriod)
	defer t.Stop()
	var nss []*MultipathNamespace // reused: the loop allocates nothing when all is well
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.kick:
		case <-t.C:
		}
		m.reviveDead()
		nss = m.identifyPaths(nss[:0])
		m.mu.Lock()
		waiting := m.takeWaitingLocked()
		m.mu.Unlock()
		for _, r := range waiting {
			mn := r.mp
			r.mpTries = 0
			if taken, err := mn.issue(r); taken {
				continue
			} else if err != nil {
				r.Err, r.N = err, 0
				mn.finish(r)
				continue
			}
			if r.mpFailFast || time.Since(r.mpSince) > m.cfg.ctrlLoss || m.allDead() {
				r.Err, r.N = mn.noPathError(r.mpErr), 0
				mn.finish(r)
				continue
			}
			if !m.wait(r) {
				r.Err, r.N = ErrClosed, 0
				mn.finish(r)
			}
		}
		t.Reset(multipathLoopPeriod)
	}
}

// reviveDead dials again the paths whose controller gave up reconnecting
// (the controller-loss timeout passed, or the controller refused the
// host): a path stays part of the Multipath until Close.
func (m *Multipath) reviveDead() {
	for i, p := range m.paths {
		c := p.c.Load()
		if c == nil || c.State() != StateDead || !p.dialing.CompareAndSwap(false, true) {
			continue
		}
		m.mu.Lock()
		closed := m.closed
		if !closed {
			p.c.Store(nil)
			for _, mn := range m.namespaces {
				mn.onPath[i].Store(nil)
			}
		}
		m.mu.Unlock()
		if closed {
			p.dialing.Store(false)
			return
		}
		_, err := c.liveAssociation() // why it is dead
		p.dialErr.Store(&err)
		m.log.Warn("nvmeof/host: path gave up; dialing it again", "url", p.url, "err", err)
		m.wg.Go(func() {
			c.Close()
			m.redial(p)
		})
	}
}

// identifyPaths identifies each namespace in use on the paths that are
// up and have not identified it yet. It returns nss, the namespaces,
// for the next call to reuse.
func (m *Multipath) identifyPaths(nss []*MultipathNamespace) []*MultipathNamespace {
	m.mu.Lock()
	for _, mn := range m.namespaces {
		nss = append(nss, mn)
	}
	m.mu.Unlock()
	for _, mn := range nss {
		for i, p := range m.paths {
			if mn.onPath[i].Load() != nil || mn.mismatch[i].Load() {
				continue
			}
			c, ok := p.usable()
			if !ok {
				continue
			}
			ns, err := c.Namespace(mn.nsid)
			switch {
			case err != nil:
				m.log.Debug("nvmeof/host: identifying a namespace on a path", "url", p.url, "nsid", mn.nsid, "err", err)
			case !sameNamespace(mn.ref, ns):
				m.log.Warn("nvmeof/host: a path's namespace differs from the first path's; not used", "url", p.url, "nsid", mn.nsid)
				mn.mismatch[i].Store(true)
			default:
				mn.onPath[i].Store(ns)
			}
		}
	}
	return nss
}

// allDead reports whether no path can come back: every one dialed has
// given up (StateDead or closed) and none is still being dialed.
func (m *Multipath) allDead() bool {
	for _, p := range m.paths {
		c := p.c.Load()
		if c == nil {
			return false // still dialed
		}
		if s := c.State(); s == StateLive || s == StateConnecting {
			return false
		}
	}
	return true
}

// noPathError is the error of a request that found no usable path: what
// each path is, and the last path's refusal if one refused it.
func (mn *MultipathNamespace) noPathError(last error) error {
	var b strings.Builder
	for i, p := range mn.m.paths {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.url)
		b.WriteString(": ")
		c := p.c.Load()
		switch {
		case c == nil:
			b.WriteString("not connected")
		case c.live.Load() == nil:
			b.WriteString(c.State().String())
		case mn.mismatch[i].Load():
			b.WriteString("another namespace")
		default:
			st, _ := c.ANAState(mn.nsid)
			b.WriteString(st.String())
		}
	}
	if last == nil {
		return fmt.Errorf("%w (%s)", ErrNoPath, b.String())
	}
	return fmt.Errorf("%w (%s); the last path said: %w", ErrNoPath, b.String(), last)
}

// MultipathNamespace is a namespace of a Multipath: a block device with
// the contract of Namespace (ReadAt, WriteAt, Flush, WriteZeroes,
// Discard, Submit), whose requests run on one path at a time. Its
// methods are safe for concurrent use.
//
// A request goes to a path whose controller is live and reports the
// namespace's ANA group Optimized, or else Non-Optimized (the path in
// use is kept while it stays Optimized). When a path answers it with a
// Path Related Status (ANA Inaccessible, Persistent Loss, Transition),
// the path is not used until its ANA log page has been read again, and
// the request is sent again on another path; so is a request that was
// in flight when its path's connection was lost. With no usable path a
// request waits (without FailFast) for one, for up to the
// controller-loss timeout, then fails with ErrNoPath. The commands are
// idempotent, as for a reconnect (see the package documentation): a
// request may run on a path that failed it and on another one.
type MultipathNamespace struct {
	m      *Multipath
	nsid   uint32
	ref    *Namespace // the first path's handle: size, block size, checks
	doneFn func(*Request)
	// onPath holds each path's handle, by path index, once identified;
	// mismatch marks paths whose namespace is another one.
	onPath   []atomic.Pointer[Namespace]
	mismatch []atomic.Bool
	current  atomic.Int32 // the path in use while it stays Optimized
}

// NSID is the namespace ID.
func (mn *MultipathNamespace) NSID() uint32 { return mn.nsid }

// Size is the namespace's size in bytes.
func (mn *MultipathNamespace) Size() int64 { return mn.ref.size }

// BlockSize is the logical block size in bytes.
func (mn *MultipathNamespace) BlockSize() int { return mn.ref.bs }

// Identify returns the Identify Namespace data of the first path.
func (mn *MultipathNamespace) Identify() nvmeof.IdentifyNamespace { return mn.ref.id }

// CurrentPath returns the URL of the path requests go to now, and false
// when no path is usable.
func (mn *MultipathNamespace) CurrentPath() (string, bool) {
	i, _ := mn.pick()
	if i < 0 {
		return "", false
	}
	return mn.m.paths[i].url, true
}

// pick returns the best usable path and its handle, or -1: Optimized
// before Non-Optimized, the path in use first among equals.
func (mn *MultipathNamespace) pick() (int, *Namespace) {
	best, rank := -1, 0
	var bestNS *Namespace
	n := len(mn.m.paths)
	cur := int(mn.current.Load())
	for k := range n {
		i := (cur + k) % n
		ns := mn.onPath[i].Load()
		if ns == nil {
			continue
		}
		c, ok := mn.m.paths[i].usable()
		if !ok {
			continue
		}
		r := 0
		switch st, _ := c.ANAState(mn.nsid); st {
		case nvmeof.ANAOptimized:
			r = 2
		case nvmeof.ANANonOptimized:
			r = 1
		}
		if r > rank {
			best, rank, bestNS = i, r, ns
			if r == 2 {
				break
			}
		}
	}
	if best >= 0 && best != cur {
		mn.current.Store(int32(best))
	}
	return best, bestNS
}

// pathOf returns the index of the path whose controller is c, or -1.
func (mn *MultipathNamespace) pathOf(c *Controller) int {
	for i, p := range mn.m.paths {
		if p.c.Load() == c {
			return i
		}
	}
	return -1
}

// Submit starts r as Namespace.Submit does, on the best path. It returns
// an error, and does not call r.Done, when r is invalid, still in
// flight, or the Multipath is closed; otherwise r.Done is called (or
// r.Wait returns) once r has completed on some path or found none.
// Submit does not allocate once r has been used with this namespace.
func (mn *MultipathNamespace) Submit(r *Request) error {
	if r.state.Load() != reqIdle || !r.mpBusy.CompareAndSwap(false, true) {
		return ErrRequestBusy
	}
	if _, _, err := mn.ref.check(r); err != nil {
		r.mpBusy.Store(false)
		return err
	}
	if r.Done == nil && r.wake == nil {
		r.wake = make(chan struct{}, 1)
	}
	r.mp, r.mpDone, r.mpFailFast = mn, r.Done, r.FailFast
	r.mpTries, r.mpSince, r.mpErr = 0, time.Time{}, nil
	r.Done, r.FailFast = mn.doneFn, true
	mn.m.mu.Lock()
	closed := mn.m.closed
	mn.m.mu.Unlock()
	if closed {
		mn.restore(r)
		return ErrClosed
	}
	if taken, err := mn.issue(r); taken {
		return nil
	} else if err != nil {
		mn.restore(r)
		return err
	}
	if !mn.m.wait(r) {
		mn.restore(r)
		return ErrClosed
	}
	return nil
}

// maxTriesPerRound bounds how often a request is sent to a path before
// it waits for the loop: paths that keep failing it are not retried in a
// tight loop.
func (mn *MultipathNamespace) maxTriesPerRound() int { return 2 * len(mn.m.paths) }

// issue sends r to the best usable path, and to the next one while
// paths refuse it. It reports whether a path took r; when none did, err
// is a refusal that is not a path's (the namespace changed on the path,
// say), or nil when no path was usable (mpErr then holds the last
// path's refusal).
func (mn *MultipathNamespace) issue(r *Request) (taken bool, err error) {
	for r.mpTries < mn.maxTriesPerRound() {
		_, ns := mn.pick()
		if ns == nil {
			return false, nil
		}
		r.mpTries++
		err := ns.Submit(r)
		if err == nil {
			return true, nil
		}
		if !pathError(err) {
			return false, err
		}
		r.mpErr = err
	}
	return false, nil
}

// pathError reports whether a Submit refusal or a request's error is
// the path's, so that another path may serve the request.
func pathError(err error) bool {
	if errors.Is(err, ErrControllerLost) {
		return true
	}
	var ce *CommandError
	return errors.As(err, &ce) && isANAError(ce.Status)
}

// done is the Done of r on a path: a path's failure sends it to another
// path (or to wait for one); anything else completes it.
func (mn *MultipathNamespace) done(r *Request) {
	if err := r.Err; err != nil && pathError(err) {
		mn.m.mu.Lock()
		closed := mn.m.closed
		mn.m.mu.Unlock()
		if !closed {
			var ce *CommandError
			if c := r.ctrl; c != nil && errors.As(err, &ce) && isANAError(ce.Status) {
				// Not this path until its ANA log page is read again.
				if i := mn.pathOf(c); i >= 0 {
					mn.m.paths[i].staleUntil.Store(c.anaReads.Load() + 1)
				}
				c.refreshANA()
			}
			r.mpErr = err
			taken, ierr := mn.issue(r)
			switch {
			case taken:
				return
			case ierr != nil:
				r.Err, r.N = ierr, 0
			case mn.m.wait(r):
				return
			default:
				r.Err, r.N = ErrClosed, 0
			}
		}
	}
	mn.finish(r)
}

// restore gives r back its caller's Done and FailFast.
func (mn *MultipathNamespace) restore(r *Request) {
	r.Done, r.FailFast = r.mpDone, r.mpFailFast
	r.mp, r.mpDone, r.mpErr = nil, nil, nil
	r.mpBusy.Store(false)
}

// finish completes r for its caller.
func (mn *MultipathNamespace) finish(r *Request) {
	mn.restore(r)
	r.state.Store(reqIdle)
	if r.Done != nil {
		r.Done(r)
		return
	}
	r.wake <- struct{}{}
}

// run submits a pooled request and waits for it.
func (mn *MultipathNamespace) run(op Op, off int64, buf []byte, length int64) (int, error) {
	r := syncRequests.Get().(*Request)
	r.Op, r.Offset, r.Buf, r.Length, r.N, r.Done, r.FailFast = op, off, buf, length, 0, nil, false
	err := mn.Submit(r)
	if err == nil {
		err = r.Wait()
	}
	n := r.N
	r.Buf, r.Err, r.ns, r.ctrl = nil, nil, nil, nil
	syncRequests.Put(r)
	return n, err
}

// ReadAt reads len(p) bytes at off (see Namespace for the contract).
func (mn *MultipathNamespace) ReadAt(p []byte, off int64) (int, error) {
	return readAt(mn, mn.ref.size, p, off)
}

// WriteAt writes p at off (see Namespace for the contract).
func (mn *MultipathNamespace) WriteAt(p []byte, off int64) (int, error) { return writeAt(mn, p, off) }

// Flush makes the writes completed so far durable, through one path: a
// write completed through one controller of the subsystem is in the
// subsystem, whichever controller flushes.
func (mn *MultipathNamespace) Flush() error {
	_, err := mn.run(OpFlush, 0, nil, 0)
	return err
}

// WriteZeroes zeroes length bytes at off (see Namespace.WriteZeroes).
func (mn *MultipathNamespace) WriteZeroes(off, length int64) error {
	return ranged(mn, OpWriteZeroes, off, length)
}

var (
	_ io.ReaderAt = (*MultipathNamespace)(nil)
	_ io.WriterAt = (*MultipathNamespace)(nil)
)

// Discard deallocates length bytes at off (see Namespace.Discard).
func (mn *MultipathNamespace) Discard(off, length int64) error {
	return ranged(mn, OpDiscard, off, length)
}
