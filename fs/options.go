package fs

import (
	"log/slog"
	"time"
)

// DefaultReconnectTimeout is how long operations wait for a lost target
// before they fail with EIO.
const DefaultReconnectTimeout = 30 * time.Second

// Option configures Dial. Options write only into the client's own copy
// of the settings.
type Option func(*config)

type config struct {
	subNQN           string
	hostNQN          string
	nsid             uint32
	reconnectTimeout time.Duration
	queues           int
	logger           *slog.Logger
}

// WithSubsystem names the NVM subsystem that holds the file namespace.
// Without it Dial reads the discovery log and takes the first subsystem.
func WithSubsystem(nqn string) Option { return func(c *config) { c.subNQN = nqn } }

// WithHostNQN sets the host NQN the client connects with. The default is
// the machine's, as nvmeof/host works it out (host.SystemIdentity):
// /etc/nvme/hostnqn, or one derived from /etc/machine-id.
func WithHostNQN(nqn string) Option { return func(c *config) { c.hostNQN = nqn } }

// WithNamespace names the file namespace's NSID. Without it Dial asks
// every active namespace for STATFS and takes the first that answers.
func WithNamespace(nsid uint32) Option { return func(c *config) { c.nsid = nsid } }

// WithReconnectTimeout bounds how long an operation waits for a lost
// target: the host library reconnects meanwhile, and an operation still
// waiting when the timeout passes fails with EIO. Default
// DefaultReconnectTimeout.
func WithReconnectTimeout(d time.Duration) Option {
	return func(c *config) { c.reconnectTimeout = d }
}

// WithQueues sets the number of I/O queues (default: the host library's).
func WithQueues(n int) Option { return func(c *config) { c.queues = n } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }
