package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Target is an NVMe-oF target: subsystems with their namespaces, the
// discovery subsystem, and the listeners hosts connect through. Its
// methods are safe for concurrent use.
type Target struct {
	cfg     config
	log     *slog.Logger
	started time.Time

	// ctx ends every queue at once: it is cancelled by Shutdown when the
	// drain is over or its context expires.
	ctx    context.Context
	cancel context.CancelFunc

	discovery *Subsystem
	genctr    atomic.Uint64 // GENCTR of the discovery log
	starting  atomic.Bool   // WithStarting, until Ready

	// mu guards the fields below. Lock order: Target.mu, Subsystem.mu,
	// Controller.mu.
	mu         sync.Mutex
	subsystems map[string]*Subsystem
	order      []*Subsystem // NVM subsystems in the order they were added
	listeners  []listener
	nextPortID uint16                     // PORTID of the next listener; never reused
	remote     []nvmeof.DiscoveryLogEntry // SetRemoteEntries'; replaced whole
	queues     map[*queue]struct{}        // live queues, connected or not
	closed     bool

	// wg counts the goroutines the target started: accept loops, queue
	// goroutines and their workers, shutdown flushes.
	wg sync.WaitGroup
}

// listener is a transport binding's listening endpoint.
type listener interface {
	// url is the address hosts use, with the real port.
	url() string
	// entry is the discovery log entry of the listener with the transport
	// fields (TRTYPE, ADRFAM, TRADDR, TRSVCID, TSAS) filled in.
	entry() nvmeof.DiscoveryLogEntry
	// close stops accepting connections; connections already up stay.
	close() error
}

// New returns a target with no subsystems and no listeners.
func New(opts ...Option) (*Target, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Target{
		cfg:        cfg,
		log:        cfg.logger,
		started:    time.Now(),
		subsystems: make(map[string]*Subsystem),
		queues:     make(map[*queue]struct{}),
	}
	t.starting.Store(cfg.starting)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	disc, err := newSubsystem(t, SubsystemConfig{NQN: nvmeof.DiscoveryNQN, AllowAnyHost: true}, true)
	if err != nil {
		return nil, err
	}
	t.discovery = disc
	t.genctr.Store(1)
	return t, nil
}

// AddSubsystem adds an NVM subsystem.
func (t *Target) AddSubsystem(cfg SubsystemConfig) (*Subsystem, error) {
	s, err := newSubsystem(t, cfg, false)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	if _, ok := t.subsystems[cfg.NQN]; ok {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrSubsystemExists, cfg.NQN)
	}
	t.subsystems[cfg.NQN] = s
	t.order = append(t.order, s)
	t.mu.Unlock()
	t.discoveryChanged()
	t.log.Info("subsystem added", "subnqn", s.nqn, "allow_any_host", cfg.AllowAnyHost, "hosts", len(s.hosts))
	return s, nil
}

// Subsystem returns the NVM subsystem with the NQN, or nil.
func (t *Target) Subsystem(nqn string) *Subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.subsystems[nqn]
}

// Subsystems returns the NVM subsystems in the order they were added.
func (t *Target) Subsystems() []*Subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.order)
}

// DiscoverySubsystem returns the discovery subsystem,
// nqn.2014-08.org.nvmexpress.discovery.
func (t *Target) DiscoverySubsystem() *Subsystem { return t.discovery }

// lookupSubsystem finds a subsystem by NQN, the discovery one included.
func (t *Target) lookupSubsystem(nqn string) *Subsystem {
	if nqn == nvmeof.DiscoveryNQN {
		return t.discovery
	}
	return t.Subsystem(nqn)
}

// Listen starts accepting hosts at url and returns the address it
// listens on (with the real port when url asked for port 0). Every
// subsystem is reachable through every listener. tcp://HOST:PORT serves
// NVMe/TCP (4420 is the usual I/O port, 8009 the discovery port;
// WithListenerWrapper wraps these listeners). The other
// schemes are those of package rdma (iwarp://, shm://, rdma://; fault+… where a test links rdma/fault);
// the program must link the providers in (import rdma/providers).
func (t *Target) Listen(ctx context.Context, url string) (string, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return "", ErrClosed
	}
	for _, l := range t.listeners {
		if l.url() == url {
			t.mu.Unlock()
			return "", fmt.Errorf("%w: %s", ErrListenerExists, url)
		}
	}
	t.nextPortID++
	portID := t.nextPortID
	t.mu.Unlock()

	var l listener
	var err error
	if strings.HasPrefix(url, "tcp://") {
		l, err = listenTCP(ctx, t, url, portID)
	} else {
		l, err = listenRDMA(ctx, t, url, portID)
	}
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		l.close()
		return "", ErrClosed
	}
	t.listeners = append(t.listeners, l)
	t.mu.Unlock()
	t.discoveryChanged()
	t.log.Info("listening", "url", l.url())
	return l.url(), nil
}

// Ready ends the starting state of a target made WithStarting: from now
// on a Connect to a subsystem the target does not have is refused for
// good (Connect Invalid Parameters, DNR).
func (t *Target) Ready() { t.starting.Store(false) }

// StopListening closes the listener whose address (as Listen returned
// it) is url: it accepts no more connections, and the discovery log no
// longer lists it (discovery controllers that asked are told with a
// Discovery Log Page Change event). Connections made through it stay.
func (t *Target) StopListening(url string) error {
	t.mu.Lock()
	i := slices.IndexFunc(t.listeners, func(l listener) bool { return l.url() == url })
	if i < 0 {
		t.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNoListener, url)
	}
	l := t.listeners[i]
	t.listeners = slices.Delete(t.listeners, i, i+1)
	t.mu.Unlock()
	err := l.close()
	t.discoveryChanged()
	t.log.Info("stopped listening", "url", url)
	if err != nil {
		return fmt.Errorf("target: closing listener %s: %w", url, err)
	}
	return nil
}

// RemoveSubsystem removes an NVM subsystem: hosts can no longer connect
// to it, its controllers are disconnected, the discovery log drops it
// (discovery controllers that asked are told), and its namespaces are
// synced and returned in NSID order; the caller owns their devices again.
// Commands already running finish on them, as with RemoveNamespace.
func (t *Target) RemoveSubsystem(nqn string) ([]*Namespace, error) {
	t.mu.Lock()
	s := t.subsystems[nqn]
	if s == nil {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrNoSubsystem, nqn)
	}
	delete(t.subsystems, nqn)
	t.order = slices.DeleteFunc(t.order, func(x *Subsystem) bool { return x == s })
	t.mu.Unlock()
	s.mu.Lock()
	s.removed = true
	ctrls := s.controllerListLocked()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.destroy("subsystem removed")
	}
	t.discoveryChanged()
	ns := s.Namespaces()
	var errs []error
	for _, n := range ns {
		if err := n.dev.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("target: sync of %s namespace %d: %w", nqn, n.nsid, err))
		}
	}
	t.log.Info("subsystem removed", "subnqn", nqn, "controllers", len(ctrls), "namespaces", len(ns))
	return ns, errors.Join(errs...)
}

// Listeners returns the addresses the target listens on.
func (t *Target) Listeners() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, len(t.listeners))
	for i, l := range t.listeners {
		out[i] = l.url()
	}
	return out
}

// Controllers returns how many controllers (discovery ones included) are
// live now.
func (t *Target) Controllers() int {
	n := t.discovery.Controllers()
	for _, s := range t.Subsystems() {
		n += s.Controllers()
	}
	return n
}

// registerQueue adds a queue a binding created; it fails once the target
// is shutting down.
func (t *Target) registerQueue(q *queue) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.queues[q] = struct{}{}
	return nil
}

func (t *Target) forgetQueue(q *queue) {
	t.mu.Lock()
	delete(t.queues, q)
	t.mu.Unlock()
}

// Shutdown stops the target: listeners stop accepting, every queue stops
// taking commands and delivers the responses of those in flight (held
// Asynchronous Event Requests are answered with Command Aborted due to SQ
// Deletion), the connections are closed, every namespace is synced and
// its device closed. When ctx ends first, queues still draining are cut
// off. It returns the first error met; later calls return ErrClosed.
func (t *Target) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	t.closed = true
	listeners := slices.Clone(t.listeners)
	queues := make([]*queue, 0, len(t.queues))
	for q := range t.queues {
		queues = append(queues, q)
	}
	subs := append([]*Subsystem{t.discovery}, t.order...)
	t.mu.Unlock()

	var errs []error
	for _, l := range listeners {
		if err := l.close(); err != nil {
			errs = append(errs, fmt.Errorf("target: closing listener %s: %w", l.url(), err))
		}
	}
	for _, s := range subs {
		s.mu.Lock()
		ctrls := s.controllerListLocked()
		s.mu.Unlock()
		for _, c := range ctrls {
			c.abortAERs()
		}
	}
	for _, q := range queues {
		q.tr.drain()
	}
	drained := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-ctx.Done():
		t.log.Warn("shutdown: drain cut short; closing the remaining connections", "err", ctx.Err())
		t.cancel()
		<-drained
	}
	t.cancel()
	for _, s := range subs {
		if err := s.flush(); err != nil {
			errs = append(errs, err)
		}
		if err := s.closeDevices(); err != nil {
			errs = append(errs, err)
		}
	}
	t.log.Info("target stopped")
	return errors.Join(errs...)
}

// Close is Shutdown bounded by the drain timeout (WithDrainTimeout).
func (t *Target) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.drainTimeout)
	defer cancel()
	return t.Shutdown(ctx)
}

// logDeviceError logs a namespace device failing a command. It is the
// only logging on the I/O path, and only for errors.
func (t *Target) logDeviceError(r *request, err error) {
	t.log.Error("namespace device error", "nsid", r.cmd.NSID, "opcode", fmt.Sprintf("%02Xh", uint8(r.cmd.Opcode)),
		"slba", r.cmd.SLBA(), "err", err)
}
