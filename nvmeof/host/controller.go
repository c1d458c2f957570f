package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
)

// State is where a Controller is in its life.
type State uint8

// Controller states.
const (
	// StateConnecting: the connection was lost and the host is
	// reconnecting; requests wait.
	StateConnecting State = iota
	// StateLive: connected; requests run.
	StateLive
	// StateDead: the host gave up reconnecting; requests fail with
	// ErrControllerLost.
	StateDead
	// StateClosing: Close is draining; new requests fail with ErrClosed.
	StateClosing
	// StateClosed: Close has returned.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateLive:
		return "live"
	case StateDead:
		return "dead"
	case StateClosing:
		return "closing"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Stats counts what happened to a controller's connection.
type Stats struct {
	// Losses is how many times the connection was lost (a queue failed,
	// a keep-alive or command went unanswered).
	Losses uint64
	// Reconnects is how many times the host got it back.
	Reconnects uint64
	// Resubmitted counts requests sent again after a reconnect.
	Resubmitted uint64
	// FailedOnLoss counts requests that failed because of a loss.
	FailedOnLoss uint64
	// KeepAlives counts Keep Alive commands the controller answered.
	KeepAlives uint64
	// LastLoss is why the connection was last lost (nil if never).
	LastLoss error
}

// drainTimeout bounds how long Close waits for requests in flight.
const drainTimeout = 5 * time.Second

// Controller is a connection to one NVMe-oF controller: an admin queue and
// its I/O queues. It is safe for concurrent use.
type Controller struct {
	url       string
	host      string // the address the provider connects to
	subNQN    string
	discovery bool
	cfg       config
	log       *slog.Logger
	// tcp: the NVMe/TCP binding (tcp://HOST:PORT); otherwise RDMA
	// through pd.
	tcp bool
	pd  rdma.PD
	// bufs is the caller's registered I/O memory (buffers.go).
	bufs ioBuffers

	// ctx is canceled when Close starts; reconnect attempts use it.
	ctx    context.Context
	cancel context.CancelFunc

	// live is the association requests run on, nil unless StateLive.
	live     atomic.Pointer[association]
	rr       atomic.Uint32 // round-robin queue choice
	tick     atomic.Uint32 // seconds since Dial, for command timeouts
	inflight atomic.Int64  // requests accepted and not finished

	resubmitted  atomic.Uint64
	failedOnLoss atomic.Uint64
	keepAlives   atomic.Uint64

	// anaReads counts the ANA log pages read (ana.go); anaRefreshing is
	// set while a background read runs.
	anaReads      atomic.Uint64
	anaRefreshing atomic.Bool

	// Keep-alive state, the timer goroutine's (kaBusy is also cleared by
	// the callback).
	kaReq   *Request
	kaBusy  atomic.Bool
	kaSent  time.Time
	kaAssoc *association

	// mu guards the fields below. It is never held while taking a
	// queue's mu or calling the provider (see queue.mu).
	mu         sync.Mutex
	state      State
	assoc      *association // the live association, nil otherwise
	lossAt     time.Time
	deadErr    error
	parkHead   *Request
	parkTail   *Request
	namespaces map[uint32]*Namespace
	losses     uint64
	reconnects atomic.Uint64 // written under mu; Reconnects reads it without
	lastLoss   error
	closing    chan struct{} // closed when Close starts
	recovered  chan struct{} // closed when the running recovery returns
	timerDone  chan struct{} // closed when the timer goroutine returns
	closed     chan struct{} // closed when Close has finished

	// background counts associations being closed after a loss without
	// reconnecting; Close waits for them before it closes the PD.
	background sync.WaitGroup
	// events counts the event loops (events.go); Close waits for them
	// after it has closed the association they wait on.
	events sync.WaitGroup
}

// association is one connection to the controller: the admin queue, the
// I/O queues and what the controller said about itself. A reconnect makes
// a new one.
type association struct {
	admin       *queue
	io          []*queue
	cntlid      uint16
	cap         nvmeof.CAP
	vs          nvmeof.Version
	id          nvmeof.IdentifyController
	maxTransfer int  // bytes per command
	icd         int  // in-capsule data bytes per command
	events      bool // Asynchronous Event Configuration was set: run eventLoop
	// anaSize is the size of the ANA log page the host reads, 0 when the
	// controller does not report ANA; ana is the page last read.
	anaSize int
	ana     atomic.Pointer[anaTable]
}

// close tears down every queue; requests in flight go to the controller.
func (a *association) close() {
	var wg sync.WaitGroup
	for _, q := range a.io {
		wg.Go(q.close)
	}
	wg.Wait()
	if a.admin != nil {
		a.admin.close()
	}
}

// Dial connects to an NVM subsystem at url ("iwarp://127.0.0.1:4420",
// "shm://capsule"): the admin queue, the property handshake, Identify
// Controller and its checks, Number of Queues, then the I/O queues.
// Without WithSubsystem it reads the discovery log at url first and takes
// the first NVM subsystem listed. The returned Controller keeps itself
// alive (keep-alive) and reconnects after a loss; Close it.
func Dial(ctx context.Context, url string, opts ...Option) (*Controller, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	sub := cfg.subNQN
	if sub == "" {
		entries, err := Discover(ctx, url, opts...)
		if err != nil {
			return nil, fmt.Errorf("nvmeof/host: finding a subsystem at %s: %w", url, err)
		}
		for _, e := range entries {
			if e.SUBTYPE == nvmeof.SubsystemNVMe {
				sub = e.SUBNQN
				break
			}
		}
		if sub == "" {
			return nil, fmt.Errorf("%w at %s", ErrNoSubsystem, url)
		}
	}
	c, err := newController(url, cfg, sub, false)
	if err != nil {
		return nil, err
	}
	a, err := c.connect(ctx)
	if err != nil {
		c.closePD()
		c.cancel()
		return nil, err
	}
	c.kaReq = &Request{Op: opRaw, raw: &rawCommand{}, Done: c.keepAliveDone}
	c.kaReq.raw.sqe.Opcode = nvmeof.AdminKeepAlive
	c.timerDone = make(chan struct{})
	// The queues' goroutines already run: publish under mu, which
	// queueFailed reads the state under.
	c.mu.Lock()
	c.assoc = a
	c.state = StateLive
	c.live.Store(a)
	c.mu.Unlock()
	go c.timerLoop()
	c.startEvents(a)
	// A queue that failed before the association was live found no live
	// association to declare lost; declare it now (c.fail does nothing
	// if a queue's own report got there first).
	for _, q := range append([]*queue{a.admin}, a.io...) {
		q.mu.Lock()
		stopped, cause := q.stopped, q.cause
		q.mu.Unlock()
		if stopped {
			c.fail(a, cause)
			break
		}
	}
	c.log.Debug("nvmeof/host: connected", "cntlid", a.cntlid, "queues", len(a.io), "depth", a.io[0].inFlight)
	return c, nil
}

func newController(url string, cfg config, subNQN string, discovery bool) (*Controller, error) {
	var (
		host string
		pd   rdma.PD
		tcp  bool
	)
	if hp, ok := tcpHostPort(url); ok {
		host, tcp = hp, true
	} else {
		var err error
		if _, host, err = rdma.ParseURL(url); err != nil {
			return nil, err
		}
		if pd, err = rdma.OpenPD(url); err != nil {
			return nil, err
		}
	}
	c := &Controller{
		url: url, host: host, subNQN: subNQN, discovery: discovery, tcp: tcp,
		cfg: cfg, log: cfg.logger.With("url", url, "subnqn", subNQN), pd: pd,
		namespaces: map[uint32]*Namespace{},
		closing:    make(chan struct{}),
		closed:     make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// connect makes a new association: admin queue, Connect, properties,
// Identify Controller and its checks, and for an I/O controller Number of
// Queues and the I/O queues.
func (c *Controller) connect(ctx context.Context) (a *association, err error) {
	a = &association{}
	defer func() {
		if err != nil {
			a.close()
			a = nil
		}
	}()
	aqc := queueConfig{qid: 0, entries: adminQueueEntries}
	if c.tcp {
		// NVMe/TCP admin queues take 8 KiB of in-capsule data.
		aqc.icd, aqc.area = tcpAdminCapsuleData, tcpAdminCapsuleData
	}
	if a.admin, err = newQueue(c, a, aqc); err != nil {
		return a, err
	}
	if err = a.admin.connect(ctx, c.host, 0); err != nil {
		return a, err
	}
	var kato uint32
	if !c.discovery {
		kato = uint32(c.cfg.kato / time.Millisecond)
	}
	if a.cntlid, err = a.admin.fabricsConnect(ctx, c.subNQN, nvmeof.CNTLIDDynamic, kato); err != nil {
		return a, err
	}
	v, err := a.admin.propertyGet(ctx, nvmeof.PropertyCAP)
	if err != nil {
		return a, err
	}
	a.cap = nvmeof.CAP(v)
	if v, err = a.admin.propertyGet(ctx, nvmeof.PropertyVS); err != nil {
		return a, err
	}
	a.vs = nvmeof.Version(v)
	if err = a.admin.enable(ctx, a.cap); err != nil {
		return a, err
	}
	buf := make([]byte, nvmeof.IdentifyDataSize)
	if err = a.admin.identify(ctx, nvmeof.CNSController, 0, buf); err != nil {
		return a, err
	}
	if err = a.id.UnmarshalBinary(buf); err != nil {
		return a, fmt.Errorf("%w: Identify Controller: %w", ErrIncompatibleController, err)
	}
	if err = checkController(&a.id, a.cntlid, c.discovery, !c.tcp); err != nil {
		return a, err
	}
	if a.id.SUBNQN != "" && a.id.SUBNQN != c.subNQN {
		return a, &ControllerCheckError{Field: "SUBNQN", Problem: fmt.Sprintf("%q, but the host connected to %q", a.id.SUBNQN, c.subNQN)}
	}
	page := 1 << pageShift(a.cap)
	a.maxTransfer = c.cfg.maxTransfer
	if a.id.MDTS != 0 && a.id.MDTS < 24 {
		a.maxTransfer = min(a.maxTransfer, page<<a.id.MDTS)
	}
	a.maxTransfer = max(a.maxTransfer&^(page-1), page)
	if c.discovery {
		return a, nil
	}
	if a.anaSize = anaLogSize(&a.id); a.anaSize > 0 {
		// Before any I/O, as Linux reads it: which paths serve which
		// namespaces.
		if _, err = c.readANA(ctx, a); err != nil {
			return a, err
		}
	} else if a.id.CMIC&nvmeof.CMICANA != 0 {
		c.log.Warn("nvmeof/host: the controller's ANA log page would be too large; ANA ignored",
			"nanagrpid", a.id.NANAGRPID, "mnan", a.id.MNAN)
	}

	nq, err := nvmeof.NewNumberOfQueues(c.cfg.queues, c.cfg.queues)
	if err != nil {
		return a, err
	}
	dw0, err := a.admin.setFeatures(ctx, nvmeof.FeatureNumberOfQueues, uint32(nq))
	if err != nil {
		return a, err
	}
	if c.cfg.onEvent != nil {
		want := nvmeof.AECNamespaceAttribute
		if a.anaSize > 0 {
			want |= nvmeof.AECANAChange
		}
		aec := nvmeof.AsyncEventConfig(a.id.OAES) & want
		if aec&nvmeof.AECNamespaceAttribute == 0 {
			c.log.Warn("nvmeof/host: the controller sends no Namespace Attribute Changed events (OAES)")
		}
		if aec != 0 {
			if _, err := a.admin.setFeatures(ctx, nvmeof.FeatureAsyncEventConfig, uint32(aec)); err != nil {
				return a, err
			}
			a.events = true
		}
	}
	got := nvmeof.NumberOfQueues(dw0)
	n := min(got.SubmissionQueues(), got.CompletionQueues(), c.cfg.queues)
	entries := min(c.cfg.depth+1, int(a.id.MAXCMD), int(a.cap.MQES())+1, maxQueueEntries)
	if entries < 2 {
		return a, &ControllerCheckError{Field: "MAXCMD", Problem: fmt.Sprintf("MAXCMD %d and MQES %d leave no room for a command in flight", a.id.MAXCMD, a.cap.MQES())}
	}
	if c.cfg.inCapsule && a.id.SGLS&nvmeof.SGLSOffsetAddress != 0 && a.id.IOCCSZ > 4 {
		a.icd = min(int(a.id.IOCCSZ)*16-nvmeof.CommandSize, maxInCapsuleData, a.maxTransfer)
	}
	qc := queueConfig{
		entries: entries,
		icd:     a.icd,
		area:    min(max(a.icd, minArea), a.maxTransfer),
		bufSize: a.maxTransfer,
		buffers: c.cfg.buffers,
	}
	if qc.bufSize <= qc.area {
		qc.buffers = 0
	}
	for i := 1; i <= n; i++ {
		qc.qid = uint16(i)
		q, err := newQueue(c, a, qc)
		if err != nil {
			return a, err
		}
		a.io = append(a.io, q)
		if err = q.connect(ctx, c.host, a.cntlid); err != nil {
			return a, err
		}
		if _, err = q.fabricsConnect(ctx, c.subNQN, a.cntlid, 0); err != nil {
			return a, a.ioConnectFailed(ctx, err)
		}
	}
	return a, nil
}

// ioConnectFailed looks at an I/O queue's failed Connect. A refusal with
// DNR names the controller the admin queue has just created; if that
// controller is gone (its admin queue no longer answers Property Get
// CSTS, or reports a fatal status), the refusal says only that the
// association died during its setup, as when the admin queue is cut
// before the I/O queues connect and the controller refuses the CNTLID
// it has just torn down: a *setupLostError, which a reconnect counts as
// one failed attempt. Otherwise the refusal stands.
func (a *association) ioConnectFailed(ctx context.Context, err error) error {
	var ce *ConnectError
	if !errors.As(err, &ce) || !ce.Status.DNR() {
		return err
	}
	v, perr := a.admin.propertyGet(ctx, nvmeof.PropertyCSTS)
	if perr == nil && !nvmeof.CSTS(v).CFS() {
		return err
	}
	if perr == nil {
		perr = errors.New("CSTS.CFS set")
	}
	return &setupLostError{refused: err, lost: perr}
}

// setupLostError is an association that was lost while the host set it
// up: a refusal the controller gave, and what showed that the
// controller behind it was gone.
type setupLostError struct {
	refused, lost error
}

func (e *setupLostError) Error() string {
	return fmt.Sprintf("nvmeof/host: controller lost during its setup: %v; then the admin queue: %v", e.refused, e.lost)
}

// Unwrap returns the refusal and the loss.
func (e *setupLostError) Unwrap() []error { return []error{e.refused, e.lost} }

// stableRefusal reports whether a failed connect is one that trying
// again cannot change: a Connect refused with DNR (the host not allowed,
// the subsystem unknown, a parameter refused) by a controller that still
// exists. An I/O queue's refusal by a controller that died during the
// setup (*setupLostError) is not one, nor is any other failure.
func stableRefusal(err error) bool {
	var lost *setupLostError
	if errors.As(err, &lost) {
		return false
	}
	var ce *ConnectError
	return errors.As(err, &ce) && ce.Status.DNR()
}

// State returns the controller's state.
func (c *Controller) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Stats returns what has happened to the connection so far.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Losses:       c.losses,
		Reconnects:   c.reconnects.Load(),
		Resubmitted:  c.resubmitted.Load(),
		FailedOnLoss: c.failedOnLoss.Load(),
		KeepAlives:   c.keepAlives.Load(),
		LastLoss:     c.lastLoss,
	}
}

// Reconnects is Stats().Reconnects without the controller's lock, for
// callers that check on every command whether the association changed.
func (c *Controller) Reconnects() uint64 { return c.reconnects.Load() }

// Info describes the live association.
type Info struct {
	// CNTLID is the controller ID Connect returned.
	CNTLID uint16
	// Identify is the Identify Controller data.
	Identify nvmeof.IdentifyController
	// CAP and VS are the controller's properties.
	CAP nvmeof.CAP
	VS  nvmeof.Version
	// Queues and QueueDepth are the I/O queues granted and the commands
	// each keeps in flight at most.
	Queues, QueueDepth int
	// MaxTransfer is the largest data transfer of one command, in bytes;
	// InCapsule the most write data sent in the command capsule.
	MaxTransfer, InCapsule int
}

// Info returns what the controller said about itself when the host last
// connected. It fails while the controller is not live.
func (c *Controller) Info() (Info, error) {
	a, err := c.liveAssociation()
	if err != nil {
		return Info{}, err
	}
	i := Info{CNTLID: a.cntlid, Identify: a.id, CAP: a.cap, VS: a.vs, Queues: len(a.io),
		MaxTransfer: a.maxTransfer, InCapsule: a.icd}
	if len(a.io) > 0 {
		i.QueueDepth = a.io[0].inFlight
	}
	return i, nil
}

// SubsystemNQN names the subsystem the controller belongs to.
func (c *Controller) SubsystemNQN() string { return c.subNQN }

// HostNQN is the host NQN the controller was connected with.
func (c *Controller) HostNQN() string { return c.cfg.hostNQN }

// liveAssociation returns the live association or why there is none.
func (c *Controller) liveAssociation() (*association, error) {
	if a := c.live.Load(); a != nil {
		return a, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case StateLive:
		return c.assoc, nil
	case StateDead:
		return nil, c.deadErr
	case StateClosing, StateClosed:
		return nil, ErrClosed
	}
	return nil, fmt.Errorf("nvmeof/host: controller reconnecting: %w", lostError(c.lastLoss))
}

// start runs an accepted request (validated, reset, marked busy).
func (c *Controller) start(r *Request) error {
	for {
		if a := c.live.Load(); a != nil {
			c.inflight.Add(1)
			a.io[r.queue%len(a.io)].submit(r)
			return nil
		}
		c.mu.Lock()
		switch c.state {
		case StateLive:
			c.mu.Unlock()
			continue
		case StateConnecting:
			if r.FailFast {
				// It does not wait for the reconnect (a Multipath sends
				// it on another path).
				err := fmt.Errorf("nvmeof/host: controller reconnecting: %w", lostError(c.lastLoss))
				c.mu.Unlock()
				return err
			}
			c.inflight.Add(1)
			c.parkLocked(r)
			c.mu.Unlock()
			return nil
		case StateDead:
			err := c.deadErr
			c.mu.Unlock()
			return err
		default:
			c.mu.Unlock()
			return ErrClosed
		}
	}
}

// park takes a request that a stopped queue refused. While the controller
// is live on another association it goes there; while a reconnect is
// pending (or about to start: the refusing queue is failing) it waits.
func (c *Controller) park(r *Request, from *queue) {
	c.mu.Lock()
	switch c.state {
	case StateLive:
		if a := c.assoc; a != from.assoc {
			c.mu.Unlock()
			a.io[r.queue%len(a.io)].submit(r)
			return
		}
		c.parkLocked(r)
	case StateConnecting:
		if !r.FailFast {
			c.parkLocked(r)
			break
		}
		fallthrough
	default:
		err := c.lossErrorLocked(c.lastLoss)
		c.mu.Unlock()
		c.failedOnLoss.Add(1)
		// Never call Done on the goroutine of a Submit that may be
		// on the stack.
		go func() {
			r.failRest(err)
			r.finish()
		}()
		return
	}
	c.mu.Unlock()
}

func (c *Controller) parkLocked(r *Request) {
	r.queued = true
	r.next = nil
	if c.parkTail == nil {
		c.parkHead = r
	} else {
		c.parkTail.next = r
	}
	c.parkTail = r
}

// takeParkedLocked empties the parked list.
func (c *Controller) takeParkedLocked() []*Request {
	var rs []*Request
	for r := c.parkHead; r != nil; {
		next := r.next
		r.next, r.queued = nil, false
		rs = append(rs, r)
		r = next
	}
	c.parkHead, c.parkTail = nil, nil
	return rs
}

// lossErrorLocked is the error requests fail with in the current state.
func (c *Controller) lossErrorLocked(cause error) error {
	switch c.state {
	case StateDead:
		return c.deadErr
	case StateClosing, StateClosed:
		return ErrClosed
	}
	return lostError(cause)
}

// queueFailed receives the requests of a queue whose connection failed.
// A loss of the live association starts a reconnect; requests wait for it
// unless they may not be resubmitted.
func (c *Controller) queueFailed(q *queue, cause error, lost []*Request) {
	var failed []*Request
	c.mu.Lock()
	if c.state == StateLive && q.assoc == c.assoc {
		c.lostLocked(cause)
	}
	for _, r := range lost {
		r.queued = false
		wasInflight := r.inflight
		if r.inflight {
			r.inflight = false
			r.retries++
		}
		var err error
		switch {
		case c.state != StateConnecting:
			err = c.lossErrorLocked(cause)
		case r.FailFast:
			err = lostError(cause)
		case wasInflight && r.pt != nil && !r.pt.Idempotent:
			err = lostError(fmt.Errorf("a command that is not idempotent was in flight, and may have run: %w", cause))
		case r.retries > c.cfg.maxRetries:
			err = lostError(fmt.Errorf("in flight during %d losses, the last: %w", r.retries, cause))
		case r.ns != nil && r.ns.changed.Load():
			err = ErrNamespaceChanged
		}
		if err == nil {
			c.parkLocked(r)
			continue
		}
		r.failRest(err)
		if r.complete() {
			failed = append(failed, r)
		}
	}
	c.mu.Unlock()
	c.failedOnLoss.Add(uint64(len(failed)))
	for _, r := range failed {
		r.finish()
	}
}

// fail declares the live association a lost unless it was replaced.
func (c *Controller) fail(a *association, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == StateLive && c.assoc == a {
		c.lostLocked(cause)
	}
}

// lostLocked handles the loss of the live association: requests stop
// going to it and a reconnect starts (or, without reconnecting, the
// controller is dead).
func (c *Controller) lostLocked(cause error) {
	old := c.assoc
	c.assoc = nil
	c.live.Store(nil)
	c.losses++
	c.lastLoss = cause
	c.lossAt = time.Now()
	if c.cfg.ctrlLoss <= 0 {
		c.log.Warn("nvmeof/host: controller lost; reconnecting is off", "err", cause)
		c.state = StateDead
		c.deadErr = lostError(cause)
		c.background.Go(old.close)
		// A stopping queue may have handed requests back before the
		// loss was declared: nothing will resubmit them.
		c.failLater(c.takeParkedLocked(), c.deadErr)
		c.pathChanged()
		return
	}
	c.log.Warn("nvmeof/host: controller lost; reconnecting", "err", cause, "ctrl_loss_tmo", c.cfg.ctrlLoss)
	c.state = StateConnecting
	done := make(chan struct{})
	c.recovered = done
	go c.recover(old, cause, done)
	// Requests that a stopping queue handed back before the loss was
	// declared wait for the reconnect, but those that asked to fail fast.
	var keep, fast []*Request
	for _, r := range c.takeParkedLocked() {
		if r.FailFast {
			fast = append(fast, r)
		} else {
			keep = append(keep, r)
		}
	}
	for _, r := range keep {
		c.parkLocked(r)
	}
	c.failLater(fast, lostError(cause))
	c.pathChanged()
}

// failLater fails rs with err on a goroutine of its own: the caller holds
// c.mu, and a Submit may be on its stack.
func (c *Controller) failLater(rs []*Request, err error) {
	if len(rs) == 0 {
		return
	}
	c.failedOnLoss.Add(uint64(len(rs)))
	go func() {
		for _, r := range rs {
			r.failRest(err)
			r.finish()
		}
	}()
}

// recover closes the lost association (its requests are parked) and
// reconnects with backoff until it succeeds, the controller-loss timeout
// passes, the controller refuses the host for good (stableRefusal), or
// Close is called. Any other failed attempt, including an association
// lost before its setup completed, is followed by another.
func (c *Controller) recover(old *association, cause error, done chan struct{}) {
	defer close(done)
	old.close()
	c.mu.Lock()
	deadline := c.lossAt.Add(c.cfg.ctrlLoss)
	c.mu.Unlock()
	delay := c.cfg.reconnectFirst
	lastErr := cause
	for attempt := 1; ; attempt++ {
		wait := min(delay, time.Until(deadline))
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-c.closing:
				t.Stop()
				return
			case <-t.C:
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			c.die(fmt.Errorf("no reconnect within %v (lost: %w; last attempt: %w)", c.cfg.ctrlLoss, cause, lastErr))
			return
		}
		ctx, cancel := context.WithTimeout(c.ctx, min(c.cfg.connectTimeout, left))
		a, err := c.connect(ctx)
		if err == nil {
			if err = c.revalidate(ctx, a); err != nil {
				a.close()
			}
		}
		cancel()
		if err == nil {
			if !c.goLive(a) {
				a.close()
			}
			return
		}
		select {
		case <-c.closing:
			return
		default:
		}
		lastErr = err
		c.log.Warn("nvmeof/host: reconnect failed", "attempt", attempt, "err", err)
		if stableRefusal(err) {
			c.die(fmt.Errorf("the controller refused the host (lost: %w): %w", cause, err))
			return
		}
		delay = min(2*delay, c.cfg.reconnectMax)
	}
}

// revalidate checks that the namespaces in use look the same on the new
// association; those that do not are marked changed.
func (c *Controller) revalidate(ctx context.Context, a *association) error {
	c.mu.Lock()
	nss := make([]*Namespace, 0, len(c.namespaces))
	for _, ns := range c.namespaces {
		nss = append(nss, ns)
	}
	c.mu.Unlock()
	buf := make([]byte, nvmeof.IdentifyDataSize)
	for _, ns := range nss {
		if ns.changed.Load() {
			continue
		}
		if err := a.admin.identify(ctx, nvmeof.CNSNamespace, ns.nsid, buf); err != nil {
			return err
		}
		var id nvmeof.IdentifyNamespace
		err := id.UnmarshalBinary(buf)
		bs, bserr := id.BlockSize()
		if err != nil || bserr != nil || id.NSZE != ns.id.NSZE || int(bs) != ns.bs {
			c.log.Warn("nvmeof/host: namespace changed across a reconnect; failing its requests", "nsid", ns.nsid)
			ns.changed.Store(true)
		}
	}
	return nil
}

// goLive installs a reconnected association and resubmits the parked
// requests. It returns false if Close came first.
func (c *Controller) goLive(a *association) bool {
	c.mu.Lock()
	if c.state != StateConnecting {
		c.mu.Unlock()
		return false
	}
	c.assoc = a
	c.state = StateLive
	c.reconnects.Add(1)
	c.live.Store(a)
	parked := c.takeParkedLocked()
	c.mu.Unlock()
	c.startEvents(a)
	c.pathChanged()
	c.log.Info("nvmeof/host: reconnected", "cntlid", a.cntlid, "resubmitting", len(parked))
	for _, r := range parked {
		if r.ns != nil && r.ns.changed.Load() {
			c.failedOnLoss.Add(1)
			r.failRest(ErrNamespaceChanged)
			r.finish()
			continue
		}
		if r.retries > 0 || len(r.retry) > 0 {
			c.resubmitted.Add(1)
		}
		a.io[r.queue%len(a.io)].submit(r)
	}
	return true
}

// die gives up on the controller: what waits fails with ErrControllerLost.
func (c *Controller) die(cause error) {
	c.mu.Lock()
	if c.state != StateConnecting {
		c.mu.Unlock()
		return
	}
	c.state = StateDead
	c.deadErr = lostError(cause)
	parked := c.takeParkedLocked()
	err := c.deadErr
	c.mu.Unlock()
	c.log.Error("nvmeof/host: giving up on the controller", "err", cause)
	c.pathChanged()
	c.failedOnLoss.Add(uint64(len(parked)))
	for _, r := range parked {
		r.failRest(err)
		r.finish()
	}
}

// requestDone accounts for a finished request.
func (c *Controller) requestDone() { c.inflight.Add(-1) }

// timerLoop sends keep-alives and checks command timeouts.
func (c *Controller) timerLoop() {
	defer close(c.timerDone)
	sec := time.NewTicker(time.Second)
	defer sec.Stop()
	var ka <-chan time.Time
	if c.cfg.kato > 0 {
		t := time.NewTicker(max(c.cfg.kato/2, time.Millisecond))
		defer t.Stop()
		ka = t.C
	}
	for {
		select {
		case <-c.closing:
			return
		case <-sec.C:
			c.tick.Add(1)
			c.checkTimeouts()
		case <-ka:
			c.keepAlive()
		}
	}
}

// keepAlive sends a Keep Alive command, or declares the controller lost
// if the previous one has gone unanswered for three times the keep-alive
// timeout. A controller with traffic-based keep-alive may take up to two
// timeouts to notice silence and end the association; past three, the
// connection is dead even if it does not say so.
func (c *Controller) keepAlive() {
	a := c.live.Load()
	if a == nil {
		return
	}
	if c.kaBusy.Load() {
		if c.kaAssoc == a && time.Since(c.kaSent) > 3*c.cfg.kato {
			c.fail(a, fmt.Errorf("%w (sent %v ago, KATO %v)", ErrKeepAliveTimeout, time.Since(c.kaSent).Round(time.Millisecond), c.cfg.kato))
		}
		return
	}
	r := c.kaReq
	r.reset(0, 1)
	r.state.Store(reqBusy)
	c.kaBusy.Store(true)
	c.kaSent = time.Now()
	c.kaAssoc = a
	a.admin.submit(r)
}

// keepAliveDone is the Keep Alive command's completion.
func (c *Controller) keepAliveDone(r *Request) {
	a, err := c.kaAssoc, r.Err
	c.kaBusy.Store(false) // the timer goroutine may reuse r from here on
	if err == nil {
		c.keepAlives.Add(1)
		return
	}
	c.fail(a, fmt.Errorf("nvmeof/host: Keep Alive failed: %w", err))
}

// checkTimeouts declares the controller lost when an I/O command has gone
// unanswered for the I/O timeout.
func (c *Controller) checkTimeouts() {
	a := c.live.Load()
	if a == nil {
		return
	}
	now := c.tick.Load()
	limit := uint32(c.cfg.ioTimeout / time.Second)
	for _, q := range a.io {
		q.mu.Lock()
		expired := -1
		for i := range q.slots {
			if s := &q.slots[i]; s.busy && now-s.tick > limit {
				expired = i
				break
			}
		}
		q.mu.Unlock()
		if expired >= 0 {
			c.fail(a, fmt.Errorf("%w: queue %d slot %d after %v", ErrCommandTimeout, q.qid, expired, c.cfg.ioTimeout))
			return
		}
	}
}

// Close drains the requests in flight (for up to 5 seconds), shuts the
// controller down (CC.SHN), and disconnects. Requests still waiting fail
// with ErrClosed. Close waits for a reconnect in progress to stop, and
// for the queue goroutines: do not call it from a Done callback.
func (c *Controller) Close() error {
	c.mu.Lock()
	if c.state == StateClosing || c.state == StateClosed {
		c.mu.Unlock()
		<-c.closed
		return nil
	}
	prev := c.state
	a := c.assoc
	c.state = StateClosing
	c.live.Store(nil)
	rec := c.recovered
	close(c.closing)
	c.cancel()
	c.mu.Unlock()

	if rec != nil {
		<-rec
	}
	c.background.Wait()
	if c.timerDone != nil {
		<-c.timerDone
	}
	if prev == StateLive && a != nil {
		deadline := time.Now().Add(drainTimeout)
		for c.inflight.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		if err := a.admin.shutdown(ctx, drainTimeout); err != nil {
			c.log.Debug("nvmeof/host: shutdown notification", "err", err)
		}
		cancel()
	}
	if a != nil {
		a.close()
	}
	c.events.Wait()
	c.mu.Lock()
	parked := c.takeParkedLocked()
	c.mu.Unlock()
	for _, r := range parked {
		r.failRest(ErrClosed)
		r.finish()
	}
	c.freeBuffers()
	err := c.closePD()
	c.mu.Lock()
	c.state = StateClosed
	c.mu.Unlock()
	close(c.closed)
	return err
}

// closePD closes the RDMA protection domain, if the transport has one.
func (c *Controller) closePD() error {
	if c.pd == nil {
		return nil
	}
	return c.pd.Close()
}

// tcpHostPort returns HOST:PORT of a tcp://HOST:PORT URL. fault+tcp://
// is the same for the host: tests name so a target listener whose
// connections they cut (internal/netfault).
func tcpHostPort(url string) (string, bool) {
	rest, ok := strings.CutPrefix(url, "tcp://")
	if !ok {
		rest, ok = strings.CutPrefix(url, "fault+tcp://")
	}
	return rest, ok
}
