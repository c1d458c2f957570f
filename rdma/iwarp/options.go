package iwarp

import (
	"fmt"
	"time"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

// Defaults of the provider options.
const (
	// DefaultMaxSegment is the payload of one DDP segment: the largest
	// multiple of 8 that fits an untagged header in a 16-bit ULPDU_Length,
	// so that a 1 MiB message takes 17 FPDUs.
	DefaultMaxSegment = 65512
	// DefaultHandshakeTimeout bounds the MPA exchange when the caller's
	// context has no deadline, and how long a listener waits for a Request.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultTerminateLinger is how long a QP that sent a Terminate keeps
	// reading (and discarding) so the Terminate is not lost to a reset.
	DefaultTerminateLinger = 2 * time.Second
	// ReadDepth is both the outbound (ORD) and inbound (IRD) RDMA Read
	// Request depth of every QP. MPA revision 1 cannot negotiate it, so
	// both ends use the same constant. A Read WR with n SGEs takes n.
	ReadDepth = 128
	// DefaultSocketBuffer is the SO_SNDBUF and SO_RCVBUF each connection
	// asks for (the kernel caps it at net.core.wmem_max and rmem_max).
	// With the kernel's autotuned sizes the receiver, which reads one
	// FPDU per system call, keeps the sender waiting for buffer space
	// more often; on loopback 4 MiB cut the CPU per MiB of 1 MiB Writes
	// by about 6 % and of Reads by about 12 %. A plain TCP stream gains
	// nothing from it (measured the same way), so the same-run baseline
	// of PERFORMANCE.md R2 keeps the kernel's defaults.
	DefaultSocketBuffer = 4 << 20
)

type config struct {
	crc              bool
	maxSegment       int
	handshakeTimeout time.Duration
	linger           time.Duration
	socketBuffer     int
}

func defaultConfig() config {
	return config{
		crc:              true,
		maxSegment:       DefaultMaxSegment,
		handshakeTimeout: DefaultHandshakeTimeout,
		linger:           DefaultTerminateLinger,
		socketBuffer:     DefaultSocketBuffer,
	}
}

// Option configures a Provider made by New.
type Option func(*config) error

// WithCRC turns the MPA CRC32C on (the default) or off. CRC is used on a
// connection when either end asks for it (RFC 5044 section 7.1).
func WithCRC(on bool) Option {
	return func(c *config) error { c.crc = on; return nil }
}

// WithMaxSegment sets the payload bytes per DDP segment (1 to
// DefaultMaxSegment). Smaller segments interleave Read Responses more
// finely with long Writes at some cost in throughput.
func WithMaxSegment(n int) Option {
	return func(c *config) error {
		if n < 1 || n > wire.MaxULPDU-wire.UntaggedHeaderLen {
			return fmt.Errorf("%w: max segment %d", rdma.ErrInvalidArgument, n)
		}
		c.maxSegment = n
		return nil
	}
}

// WithSocketBuffer sets the SO_SNDBUF and SO_RCVBUF of each connection
// (default DefaultSocketBuffer); 0 leaves the kernel's autotuning alone.
func WithSocketBuffer(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: socket buffer %d", rdma.ErrInvalidArgument, n)
		}
		c.socketBuffer = n
		return nil
	}
}

// WithHandshakeTimeout bounds the MPA exchange.
func WithHandshakeTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: handshake timeout %v", rdma.ErrInvalidArgument, d)
		}
		c.handshakeTimeout = d
		return nil
	}
}
