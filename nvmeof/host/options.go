package host

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Defaults of the options.
const (
	// DefaultQueueDepth is the number of commands each I/O queue keeps in
	// flight, before clamping to what the controller allows.
	DefaultQueueDepth = 128
	// DefaultKeepAlive is the keep-alive timeout (KATO) asked for in the
	// admin Connect, as Linux hosts ask for.
	DefaultKeepAlive = 5 * time.Second
	// DefaultCtrlLossTimeout is how long the host tries to get a lost
	// controller back before it fails what waits for it.
	DefaultCtrlLossTimeout = 60 * time.Second
	// DefaultReconnectDelay and DefaultMaxReconnectDelay bound the
	// backoff between reconnect attempts: the first waits the former,
	// each next one twice as long, up to the latter.
	DefaultReconnectDelay    = 100 * time.Millisecond
	DefaultMaxReconnectDelay = 5 * time.Second
	// DefaultIOTimeout is how long an I/O command may stay unanswered
	// before the host declares the controller lost.
	DefaultIOTimeout = 30 * time.Second
	// DefaultConnectTimeout bounds one connection attempt during
	// reconnects (Dial and Discover use their context).
	DefaultConnectTimeout = 10 * time.Second
	// DefaultMaxTransfer is the largest data transfer of one command,
	// before clamping to the controller's MDTS.
	DefaultMaxTransfer = 128 << 10
	// DefaultBuffers is the number of large registered buffers per I/O
	// queue, for commands whose data does not fit a command slot's own
	// area.
	DefaultBuffers = 16
	// DefaultMaxRetries is how many controller losses a request may be
	// in flight for and still be resubmitted.
	DefaultMaxRetries = 5
)

// Option configures Dial and Discover. Options write only into the
// host's own copy of the settings; values passed in are copied.
type Option func(*config)

type config struct {
	subNQN         string
	hostNQN        string
	hostID         [16]byte
	hostIDSet      bool
	queues         int
	depth          int
	kato           time.Duration
	ctrlLoss       time.Duration
	reconnectFirst time.Duration
	reconnectMax   time.Duration
	ioTimeout      time.Duration
	connectTimeout time.Duration
	maxTransfer    int
	buffers        int
	maxRetries     int
	inCapsule      bool
	tcpDigest      nvmeof.TCPDigestTypes
	logger         *slog.Logger
	onEvent        func(AsyncEvent)
	// pathChanged, set by DialMultipath, is called (without blocking)
	// when the controller's ANA states or its state may have changed.
	pathChanged func()
	errs        []error
}

// WithSubsystem names the NVM subsystem to connect to. Without it Dial
// reads the discovery log at the same address and takes the first NVM
// subsystem listed.
func WithSubsystem(nqn string) Option {
	return func(c *config) {
		if err := nvmeof.ValidateNQN(nqn); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: subsystem NQN: %w", ErrInvalidOption, err))
		}
		c.subNQN = nqn
	}
}

// WithHostNQN sets the host NQN the Connect commands carry. The default
// is the machine's (SystemIdentity): the NQN in /etc/nvme/hostnqn, or
// one derived from /etc/machine-id, the same for every process.
func WithHostNQN(nqn string) Option {
	return func(c *config) {
		if err := nvmeof.ValidateNQN(nqn); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: host NQN: %w", ErrInvalidOption, err))
		}
		c.hostNQN = nqn
	}
}

// WithHostID sets the 128-bit host identifier (HOSTID). The default is
// the machine's (SystemIdentity): /etc/nvme/hostid, the UUID of a
// UUID-form host NQN, or one derived from /etc/machine-id.
func WithHostID(id [16]byte) Option {
	return func(c *config) { c.hostID, c.hostIDSet = id, true }
}

// WithQueues asks for n I/O queues (default runtime.NumCPU()). The
// controller may grant fewer (Set Features, Number of Queues).
func WithQueues(n int) Option {
	return func(c *config) {
		if n < 1 || n > 65534 {
			c.errs = append(c.errs, fmt.Errorf("%w: %d I/O queues", ErrInvalidOption, n))
		}
		c.queues = n
	}
}

// WithQueueDepth sets how many commands each I/O queue keeps in flight
// (default 128, at most 4095). It is clamped to what the controller
// allows: MAXCMD, CAP.MQES and the receive queue it offers.
func WithQueueDepth(n int) Option {
	return func(c *config) {
		if n < 1 || n > maxQueueEntries-1 {
			c.errs = append(c.errs, fmt.Errorf("%w: queue depth %d", ErrInvalidOption, n))
		}
		c.depth = n
	}
}

// WithKeepAlive sets the keep-alive timeout asked for in the admin
// Connect (default 5s, millisecond resolution). The host sends a Keep
// Alive command every half of it, and declares the controller lost when
// one goes unanswered for three times the timeout; 0 disables keep-alive.
func WithKeepAlive(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d/time.Millisecond > 1<<32-1 {
			c.errs = append(c.errs, fmt.Errorf("%w: keep-alive %v", ErrInvalidOption, d))
		}
		c.kato = d
	}
}

// WithCtrlLossTimeout sets how long the host keeps trying to reconnect
// to a lost controller (default 60s). Requests wait for the reconnect
// that long at most; then they fail with ErrControllerLost. 0 turns
// reconnecting off: a loss fails everything in flight at once.
func WithCtrlLossTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: controller-loss timeout %v", ErrInvalidOption, d))
		}
		c.ctrlLoss = d
	}
}

// WithReconnectDelay sets the backoff between reconnect attempts: the
// first waits first, each next one twice the one before, up to max
// (defaults 100ms and 5s).
func WithReconnectDelay(first, max time.Duration) Option {
	return func(c *config) {
		if first <= 0 || max < first {
			c.errs = append(c.errs, fmt.Errorf("%w: reconnect delay %v..%v", ErrInvalidOption, first, max))
		}
		c.reconnectFirst, c.reconnectMax = first, max
	}
}

// WithIOTimeout sets how long an I/O command may go unanswered before the
// host declares the controller lost and reconnects (default 30s, checked
// once a second).
func WithIOTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < time.Second {
			c.errs = append(c.errs, fmt.Errorf("%w: I/O timeout %v (at least 1s)", ErrInvalidOption, d))
		}
		c.ioTimeout = d
	}
}

// WithConnectTimeout bounds each connection attempt while reconnecting
// (default 10s).
func WithConnectTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: connect timeout %v", ErrInvalidOption, d))
		}
		c.connectTimeout = d
	}
}

// WithMaxTransfer sets the largest data transfer of one command (default
// 128 KiB, at least 4 KiB); the controller's MDTS lowers it. Larger
// requests are split into several commands. It is also the size of each
// large registered buffer.
func WithMaxTransfer(bytes int) Option {
	return func(c *config) {
		if bytes < 4096 || bytes > nvmeof.MaxKeyedSGLLength {
			c.errs = append(c.errs, fmt.Errorf("%w: max transfer %d", ErrInvalidOption, bytes))
		}
		c.maxTransfer = bytes
	}
}

// WithBuffers sets the number of large registered buffers per I/O queue
// (default 16). Commands whose data does not fit a command slot's own
// area (the in-capsule size, at least 4 KiB) each hold one while in
// flight; with 0, every command is cut to fit a slot's area.
func WithBuffers(n int) Option {
	return func(c *config) {
		if n < 0 || n > 1<<16 {
			c.errs = append(c.errs, fmt.Errorf("%w: %d buffers", ErrInvalidOption, n))
		}
		c.buffers = n
	}
}

// WithMaxRetries sets how many controller losses a request may be in
// flight for and still be resubmitted (default 5).
func WithMaxRetries(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: %d retries", ErrInvalidOption, n))
		}
		c.maxRetries = n
	}
}

// WithInCapsuleData turns the use of in-capsule data for small writes on
// or off (default on, when the controller advertises it).
func WithInCapsuleData(on bool) Option {
	return func(c *config) { c.inCapsule = on }
}

// WithTCPDigests asks an NVMe/TCP controller for CRC32C header and data
// digests on every PDU (default: neither, as Linux hosts default). The
// controller may enable fewer; the host then does without. No effect on
// RDMA.
func WithTCPDigests(header, data bool) Option {
	return func(c *config) {
		c.tcpDigest = 0
		if header {
			c.tcpDigest |= nvmeof.TCPHeaderDigest
		}
		if data {
			c.tcpDigest |= nvmeof.TCPDataDigest
		}
	}
}

// WithAsyncEvents asks the controller for Namespace Attribute Changed
// events and calls fn with each, on a goroutine of the Controller's,
// one at a time (events.go). Without it no Asynchronous Event Request is
// sent, and namespace changes are noticed at a reconnect only.
func WithAsyncEvents(fn func(AsyncEvent)) Option {
	return func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil event handler", ErrInvalidOption))
			return
		}
		c.onEvent = fn
	}
}

// WithLogger sets where the host logs connection losses, reconnects and
// refused controllers (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil logger", ErrInvalidOption))
			return
		}
		c.logger = l
	}
}

// newConfig applies opts over the defaults.
func newConfig(opts []Option) (config, error) {
	c := config{
		queues:         runtime.NumCPU(),
		depth:          DefaultQueueDepth,
		kato:           DefaultKeepAlive,
		ctrlLoss:       DefaultCtrlLossTimeout,
		reconnectFirst: DefaultReconnectDelay,
		reconnectMax:   DefaultMaxReconnectDelay,
		ioTimeout:      DefaultIOTimeout,
		connectTimeout: DefaultConnectTimeout,
		maxTransfer:    DefaultMaxTransfer,
		buffers:        DefaultBuffers,
		maxRetries:     DefaultMaxRetries,
		inCapsule:      true,
		logger:         slog.Default(),
	}
	for _, o := range opts {
		o(&c)
	}
	if len(c.errs) > 0 {
		return c, c.errs[0]
	}
	if !c.hostIDSet || c.hostNQN == "" {
		id, err := SystemIdentity()
		if err != nil {
			return c, fmt.Errorf("%w: the machine's host identity: %w (fix the file, or set WithHostNQN and WithHostID)", ErrInvalidOption, err)
		}
		if id.Source == "random" {
			c.logger.Warn("nvmeof/host: no " + HostNQNFile + " and no " + MachineIDFile + ": this process presents a random host NQN")
		}
		if !c.hostIDSet {
			c.hostID = id.ID
		}
		if c.hostNQN == "" {
			c.hostNQN = id.NQN
		}
	}
	if c.queues > 65534 {
		c.queues = 65534
	}
	return c, nil
}
