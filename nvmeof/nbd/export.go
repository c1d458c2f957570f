package nbd

import (
	"fmt"
	"math/bits"
)

// Defaults of an Export.
const (
	// DefaultMaxPayload is the largest read or write accepted (2^25, the
	// size the protocol says every server should take).
	DefaultMaxPayload = 32 << 20
	// DefaultPreferredBlock is the preferred block size advertised.
	DefaultPreferredBlock = 4096
)

// Export is one block device the server offers.
type Export struct {
	// Name is what clients ask for; the empty name also selects the
	// first export of a Server (the default export).
	Name string
	// Description is shown by NBD_OPT_LIST and NBD_INFO_DESCRIPTION.
	Description string
	// Size is the export's size in bytes, a multiple of MinBlock.
	Size int64
	// MinBlock is the minimum block size (a power of two, 1 to 65536;
	// 0 means 1): offsets and lengths of data commands must be multiples
	// of it, or the request fails with EINVAL.
	MinBlock uint32
	// PreferredBlock is advertised as the preferred block size (0 means
	// DefaultPreferredBlock, raised to MinBlock and 512).
	PreferredBlock uint32
	// MaxPayload bounds reads and writes (0 means DefaultMaxPayload).
	MaxPayload uint32
	// Trim, WriteZeroes and MultiConn are advertised as the device
	// supports them: NBD_CMD_TRIM, NBD_CMD_WRITE_ZEROES, and flushes
	// and FUA visible across connections (a device shared by all of
	// them, with one cache).
	Trim, WriteZeroes, MultiConn bool
	// Open returns the Device one connection uses; conn numbers the
	// server's connections from 0.
	Open func(conn int) (Device, error)
}

// Device is an export opened by one connection. Submit starts an op and
// returns; the device calls op.Complete exactly once when the op is
// done, from any goroutine (also from within Submit). Submit is called
// from one goroutine at a time; many ops are in flight at once.
type Device interface {
	Submit(op *Op)
	// Close is called once no op of the connection is in flight.
	Close() error
}

// Op is one request handed to a Device. The server owns it and reuses it
// once it has completed: the device must not touch it after Complete.
type Op struct {
	// Cmd is CmdRead, CmdWrite, CmdFlush, CmdTrim or CmdWriteZeroes.
	Cmd Command
	// FUA asks that a write, trim or write-zeroes be durable before it
	// completes.
	FUA bool
	// NoHole asks write-zeroes to allocate the blocks.
	NoHole bool
	// Offset and Length are the byte range (zero for Flush); both are
	// checked against the export before the op is submitted.
	Offset, Length int64
	// Buf is the data: filled by a read, written by a write; len(Buf) ==
	// Length. Nil for the other commands.
	Buf []byte
	// Slot numbers the op within its connection, 0 to Server.Slots-1,
	// and stays the same over its reuses: a device keeps its own state
	// per op in an array indexed by Slot.
	Slot int

	c      *conn
	cookie uint64
	err    error
	bufp   *[]byte // pooled backing store of Buf
	flags  uint16
}

// Complete reports the op's outcome: nil, or an error wrapping an Errno
// (any other error is sent as EIO). The reply is sent after it.
func (op *Op) Complete(err error) {
	op.err = err
	op.c.done <- op
}

// validate checks e and fills in its defaults.
func (e *Export) validate() error {
	if e.MinBlock == 0 {
		e.MinBlock = 1
	}
	if e.MinBlock > 65536 || bits.OnesCount32(e.MinBlock) != 1 {
		return fmt.Errorf("nbd: export %q: minimum block size %d is not a power of two up to 65536", e.Name, e.MinBlock)
	}
	if e.PreferredBlock == 0 {
		e.PreferredBlock = max(DefaultPreferredBlock, e.MinBlock)
	}
	if e.PreferredBlock < max(e.MinBlock, 512) || bits.OnesCount32(e.PreferredBlock) != 1 {
		return fmt.Errorf("nbd: export %q: preferred block size %d", e.Name, e.PreferredBlock)
	}
	if e.MaxPayload == 0 {
		e.MaxPayload = DefaultMaxPayload
	}
	if e.MaxPayload < e.PreferredBlock {
		return fmt.Errorf("nbd: export %q: maximum payload %d below the preferred block size", e.Name, e.MaxPayload)
	}
	if e.Size < 0 || e.Size%int64(e.MinBlock) != 0 {
		return fmt.Errorf("nbd: export %q: size %d is not a multiple of the block size %d", e.Name, e.Size, e.MinBlock)
	}
	if len(e.Name) > MaxNameLength || len(e.Description) > MaxNameLength {
		return fmt.Errorf("nbd: export %q: name or description longer than %d bytes", e.Name, MaxNameLength)
	}
	if e.Open == nil {
		return fmt.Errorf("nbd: export %q: no Open", e.Name)
	}
	return nil
}

// transmissionFlags are the flags sent for e on a connection.
func (e *Export) transmissionFlags(structured bool) uint16 {
	f := FlagHasFlags | FlagSendFlush | FlagSendFUA
	if e.Trim {
		f |= FlagSendTrim
	}
	if e.WriteZeroes {
		f |= FlagSendWriteZeroes
	}
	if e.MultiConn {
		f |= FlagCanMultiConn
	}
	if structured {
		f |= FlagSendDF // every read is answered with one content chunk
	}
	return f
}
