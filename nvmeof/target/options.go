package target

import (
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Defaults of the options below.
const (
	DefaultMaxQueueEntries      = 128
	DefaultMaxIOQueues          = 16
	DefaultMaxTransfer          = 256 << 10 // NVMe/TCP
	DefaultRDMAMaxTransfer      = 1 << 20   // the RDMA binding: shm, iwarp, rdma
	DefaultInCapsuleDataSize    = 8192
	DefaultLargeBuffersPerQueue = 16
	DefaultIOWorkersPerQueue    = 4
	DefaultDrainTimeout         = 10 * time.Second
	DefaultModelNumber          = "capsule"
	DefaultFirmwareRevision     = "0.1"
)

// Fixed limits of this controller.
const (
	// AdminQueueEntries is the largest admin queue (ASQSZ in the discovery
	// log): the 32 entries Linux hosts use.
	AdminQueueEntries = 32
	// maxQueueEntriesLimit bounds WithMaxQueueEntries.
	maxQueueEntriesLimit = 4096
	// pageSize is CAP.MPSMIN: MDTS counts in these units.
	pageSize = 4096
	// maxTransferLimit keeps a transfer within one Keyed SGL Data Block
	// (24-bit length) and MDTS within a byte.
	maxTransferLimit = 8 << 20
	// DiscoveryKATO is the keep-alive timeout a discovery controller
	// gets when its Connect asks for none, so that a host that goes away
	// does not leave it behind.
	DiscoveryKATO = 120 * time.Second
)

// config is what the options set. New copies the defaults and applies
// the options to its own copy.
type config struct {
	logger               *slog.Logger
	maxQueueEntries      int
	maxIOQueues          int
	maxTransfer          int // NVMe/TCP
	rdmaMaxTransfer      int
	inCapsuleDataSize    int
	largeBuffersPerQueue int
	ioWorkersPerQueue    int
	drainTimeout         time.Duration
	modelNumber          string
	firmwareRevision     string
	tcpMaxH2CData        int // 0: MaxTransfer
	wrapListener         ListenerWrapper
	starting             bool
}

func defaultConfig() config {
	return config{
		logger:               slog.Default(),
		maxQueueEntries:      DefaultMaxQueueEntries,
		maxIOQueues:          DefaultMaxIOQueues,
		maxTransfer:          DefaultMaxTransfer,
		rdmaMaxTransfer:      DefaultRDMAMaxTransfer,
		inCapsuleDataSize:    DefaultInCapsuleDataSize,
		largeBuffersPerQueue: DefaultLargeBuffersPerQueue,
		ioWorkersPerQueue:    DefaultIOWorkersPerQueue,
		drainTimeout:         DefaultDrainTimeout,
		modelNumber:          DefaultModelNumber,
		firmwareRevision:     DefaultFirmwareRevision,
	}
}

// Option configures a Target.
type Option func(*config)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithStarting makes the target start in its starting state, for a
// daemon that opens its listeners before it has created every
// subsystem, so that an address in use fails before anything else is
// created: until Ready, a Connect to a subsystem the target does not
// have is refused with Connect Controller Busy, which hosts retry,
// rather than Connect Invalid Parameters with DNR, which ends a host's
// reconnecting (the subsystem it had may be about to come back).
func WithStarting() Option { return func(c *config) { c.starting = true } }

// WithMaxQueueEntries sets the most entries an I/O queue may have: CAP.MQES
// + 1 and MAXCMD (default 128, from 2 to 4096). Each queue posts twice
// its entries in receive buffers of (64 + in-capsule data) bytes.
func WithMaxQueueEntries(n int) Option { return func(c *config) { c.maxQueueEntries = n } }

// WithMaxIOQueues sets the most I/O queues a controller grants in Number of
// Queues (default 16, from 1 to 65534).
func WithMaxIOQueues(n int) Option { return func(c *config) { c.maxIOQueues = n } }

// WithMaxTransfer sets the largest data transfer of one command, MDTS, on
// every binding (a power of two from 8 KiB to 8 MiB). By default it is
// 1 MiB on the RDMA binding, as Linux's nvmet-rdma has it: each queue's
// large buffers are that size and limited in number
// (WithLargeBuffersPerQueue). NVMe/TCP has 256 KiB, since each of its
// slots keeps a buffer that grows to MDTS on first use.
func WithMaxTransfer(bytes int) Option {
	return func(c *config) { c.maxTransfer, c.rdmaMaxTransfer = bytes, bytes }
}

// WithInCapsuleDataSize sets the in-capsule data a command capsule may
// carry after its 64-byte SQE (default 8 KiB; a multiple of 16 from 1 KiB,
// which a Connect's data needs, to 64 KiB). IOCCSZ is (64 + this) / 16.
func WithInCapsuleDataSize(bytes int) Option {
	return func(c *config) { c.inCapsuleDataSize = bytes }
}

// WithLargeBuffersPerQueue sets how many registered buffers of MaxTransfer
// bytes a queue may hold for transfers larger than a capsule buffer
// (default 16). They are allocated on first use; a command that finds
// none free waits for one.
func WithLargeBuffersPerQueue(n int) Option {
	return func(c *config) { c.largeBuffersPerQueue = n }
}

// WithIOWorkersPerQueue sets how many goroutines of a queue run I/O on
// namespaces whose devices may block (default 4; from 1 to 256). I/O on
// blockdev.NonBlocking devices runs on the queue's own goroutine.
func WithIOWorkersPerQueue(n int) Option { return func(c *config) { c.ioWorkersPerQueue = n } }

// WithDrainTimeout bounds how long Close waits for in-flight commands
// (default 10 s).
func WithDrainTimeout(d time.Duration) Option { return func(c *config) { c.drainTimeout = d } }

// WithTCPMaxH2CData sets MAXH2CDATA, the most data an NVMe/TCP host may
// put in one H2CData PDU (default: MaxTransfer, so that one PDU carries
// any R2T, as hosts that do not split an R2T need; a multiple of 4 from
// 4096).
func WithTCPMaxH2CData(bytes int) Option { return func(c *config) { c.tcpMaxH2CData = bytes } }

// ListenerWrapper wraps a listener the target has just opened: url is
// the address hosts reach it at (tcp://HOST:PORT, with the real port).
// The target accepts connections from what it returns, and closes that
// (which must close ln) when it stops listening. An error ends the
// Listen, and the target closes ln.
type ListenerWrapper func(url string, ln net.Listener) (net.Listener, error)

// WithListenerWrapper passes every NVMe/TCP listener the target opens
// through wrap (default: none), the way pebble takes a vfs.FS: the
// seam where tests put a listener whose connections they cut or stall
// (internal/netfault.Wrapper), with no test code in the target.
// Connections a wrapped listener accepts may wrap a *net.TCPConn if they
// have an Unwrap() net.Conn method, which the target uses to set
// TCP_NODELAY.
func WithListenerWrapper(wrap ListenerWrapper) Option {
	return func(c *config) { c.wrapListener = wrap }
}

// WithModelNumber sets MN of Identify Controller (default "capsule"; up
// to 40 printable ASCII characters).
func WithModelNumber(mn string) Option { return func(c *config) { c.modelNumber = mn } }

// WithFirmwareRevision sets FR of Identify Controller and the firmware
// slot log (default "0.1"; up to 8 printable ASCII characters).
func WithFirmwareRevision(fr string) Option { return func(c *config) { c.firmwareRevision = fr } }

// validate checks every option.
func (c *config) validate() error {
	bad := func(name string, v any, want string) error {
		return fmt.Errorf("%w: %s %v: want %s", ErrInvalidOption, name, v, want)
	}
	switch {
	case c.logger == nil:
		return bad("logger", nil, "a logger")
	case c.maxQueueEntries < 2 || c.maxQueueEntries > maxQueueEntriesLimit:
		return bad("max queue entries", c.maxQueueEntries, "2..4096")
	case c.maxIOQueues < 1 || c.maxIOQueues > 0xfffe:
		return bad("max I/O queues", c.maxIOQueues, "1..65534")
	case c.maxTransfer < 8192 || c.maxTransfer > maxTransferLimit || bits.OnesCount(uint(c.maxTransfer)) != 1:
		return bad("max transfer", c.maxTransfer, "a power of two from 8 KiB to 8 MiB")
	case c.inCapsuleDataSize < nvmeof.ConnectDataSize || c.inCapsuleDataSize > 64<<10 || c.inCapsuleDataSize%16 != 0:
		return bad("in-capsule data size", c.inCapsuleDataSize, "a multiple of 16 from 1024 to 65536")
	case c.largeBuffersPerQueue < 1:
		return bad("large buffers per queue", c.largeBuffersPerQueue, "at least 1")
	case c.ioWorkersPerQueue < 1 || c.ioWorkersPerQueue > 256:
		return bad("I/O workers per queue", c.ioWorkersPerQueue, "1..256")
	case c.tcpMaxH2CData != 0 && (c.tcpMaxH2CData < nvmeof.TCPMinMAXH2CDATA || c.tcpMaxH2CData%4 != 0):
		return bad("NVMe/TCP MAXH2CDATA", c.tcpMaxH2CData, "a multiple of 4 from 4096")
	case c.drainTimeout < 0:
		return bad("drain timeout", c.drainTimeout, "zero or more")
	case !printable(c.modelNumber, nvmeof.ModelNumberSize) || c.modelNumber == "":
		return bad("model number", c.modelNumber, "1 to 40 printable ASCII characters")
	case !printable(c.firmwareRevision, nvmeof.FirmwareRevisionSize) || c.firmwareRevision == "":
		return bad("firmware revision", c.firmwareRevision, "1 to 8 printable ASCII characters")
	}
	return nil
}

// transferLimit is the largest data transfer of one command on a binding
// of type tt.
func (c *config) transferLimit(tt nvmeof.TransportType) int {
	if tt == nvmeof.TransportTCP {
		return c.maxTransfer
	}
	return c.rdmaMaxTransfer
}

// mdts is the MDTS field of a transfer limit: log2 of it in pages.
func mdts(limit int) uint8 { return uint8(bits.TrailingZeros(uint(limit / pageSize))) }

// capsuleSize is the largest command capsule: SQE plus in-capsule data.
func (c *config) capsuleSize() int { return nvmeof.CommandSize + c.inCapsuleDataSize }

func printable(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
