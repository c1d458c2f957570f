package ecvolume

import (
	"errors"
	"fmt"

	"github.com/capsule-storage/capsule/nvmeof"
)

// ErrSizeMismatch: OpenOrCreate found the volume with another size than
// the one asked for. Nothing was changed.
var ErrSizeMismatch = errors.New("ecvolume: volume exists with another size")

// Error is an operation of the volume that failed. It wraps the store's
// error, the NVMe status the namespace answers with, and, where one has
// the same meaning, the blockdev error (ErrOutOfRange, ErrClosed), so that
// errors.Is and errors.As find all three.
type Error struct {
	Op     string        // "read", "write", "write (FUA)", "write zeroes", "discard" or "flush"
	Volume string        // the volume's name
	Off, N int64         // the byte range; zero for a flush
	Status nvmeof.Status // what the namespace answers
	Err    error         // the store's error

	class error // blockdev.ErrOutOfRange, blockdev.ErrClosed, or nil
}

func (e *Error) Error() string {
	if e.Op == "flush" {
		return fmt.Sprintf("ecvolume: %s of volume %q: %v (NVMe %s)", e.Op, e.Volume, e.Err, e.Status.String())
	}
	return fmt.Sprintf("ecvolume: %s of volume %q at %d, %d bytes: %v (NVMe %s)", e.Op, e.Volume, e.Off, e.N, e.Err, e.Status.String())
}

// Unwrap returns the store's error, the status and the blockdev class.
func (e *Error) Unwrap() []error {
	if e.class != nil {
		return []error{e.Err, e.Status, e.class}
	}
	return []error{e.Err, e.Status}
}
