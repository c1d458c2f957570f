package blockdev

import (
	"errors"
	"io"
)

// Device is a fixed-size array of bytes a namespace sits on. See the
// package documentation for the contracts and the optional interfaces.
type Device interface {
	io.ReaderAt
	io.WriterAt
	// Sync makes every write that completed before the call durable.
	Sync() error
	// Size is the device size in bytes. It does not change.
	Size() int64
}

// WriteZeroer is a Device that can zero a range without being sent the
// zeros. After WriteZeroes returns, the range reads as zeros.
type WriteZeroer interface {
	WriteZeroes(off, n int64) error
}

// Discarder is a Device that can forget a range. After Discard returns,
// the range reads as zeros. It returns ErrNotSupported when the device
// cannot forget ranges; nothing has changed then.
type Discarder interface {
	Discard(off, n int64) error
}

// FUAWriter is a Device that can make one write durable by itself (Force
// Unit Access): when WriteAtFUA returns, p is on stable storage.
type FUAWriter interface {
	WriteAtFUA(p []byte, off int64) (int, error)
}

// NonBlocking is a Device whose reads and writes are served from memory
// and never wait for I/O, so they may run on a latency-critical goroutine.
type NonBlocking interface {
	NonBlocking() bool
}

// IsNonBlocking reports whether dev says it never blocks.
func IsNonBlocking(dev Device) bool {
	nb, ok := dev.(NonBlocking)
	return ok && nb.NonBlocking()
}

// Zero makes [off, off+n) of dev read as zeros: WriteZeroes if dev has
// it, otherwise writes of zeros.
func Zero(dev Device, off, n int64) error {
	if err := checkRange(dev.Size(), off, n); err != nil {
		return err
	}
	if wz, ok := dev.(WriteZeroer); ok {
		return wz.WriteZeroes(off, n)
	}
	return writeZeros(dev, off, n)
}

// Deallocate discards [off, off+n) of dev if it can, and otherwise zeros
// it, so the range reads as zeros afterwards either way.
func Deallocate(dev Device, off, n int64) error {
	if err := checkRange(dev.Size(), off, n); err != nil {
		return err
	}
	if d, ok := dev.(Discarder); ok {
		err := d.Discard(off, n)
		if !errors.Is(err, ErrNotSupported) {
			return err
		}
	}
	return Zero(dev, off, n)
}

// WriteFUA writes p at off and makes it durable before it returns:
// WriteAtFUA if dev has it, otherwise WriteAt followed by Sync.
func WriteFUA(dev Device, p []byte, off int64) (int, error) {
	if f, ok := dev.(FUAWriter); ok {
		return f.WriteAtFUA(p, off)
	}
	n, err := dev.WriteAt(p, off)
	if err != nil {
		return n, err
	}
	return n, dev.Sync()
}

// zeroBlock is the source of zeros for devices written with WriteAt.
var zeroBlock [256 << 10]byte

// writeZeros writes n zeros at off with WriteAt.
func writeZeros(dev io.WriterAt, off, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeroBlock)))
		if _, err := dev.WriteAt(zeroBlock[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// checkRange checks that [off, off+n) lies in a device of size bytes.
func checkRange(size, off, n int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return ErrOutOfRange
	}
	return nil
}

// readRange clips a read of n bytes at off to a device of size bytes: it
// returns how many bytes to read and io.EOF when the read is short.
func readRange(size, off int64, n int) (int, error) {
	if off < 0 {
		return 0, ErrOutOfRange
	}
	if off >= size {
		if n == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	if int64(n) > size-off {
		return int(size - off), io.EOF
	}
	return n, nil
}
