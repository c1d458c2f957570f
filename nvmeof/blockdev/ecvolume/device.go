package ecvolume

import (
	"errors"
	"fmt"
	"io"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// Device is a block device on an erasure-coded volume. See the package
// documentation for what each method maps to.
type Device struct {
	v *chunkstore.Volume
}

var (
	_ blockdev.Device      = (*Device)(nil)
	_ blockdev.WriteZeroer = (*Device)(nil)
	_ blockdev.Discarder   = (*Device)(nil)
	_ blockdev.FUAWriter   = (*Device)(nil)
)

// New returns the block device of v.
func New(v *chunkstore.Volume) *Device { return &Device{v: v} }

// OpenOrCreate returns the block device of the store's volume name,
// creating the volume (thin, durable on return) if the store has none of
// that name. An existing volume of another size is ErrSizeMismatch.
func OpenOrCreate(s *chunkstore.Store, name string, size int64) (*Device, error) {
	v, err := s.OpenVolume(name)
	if errors.Is(err, chunkstore.ErrNotFound) {
		v, err = s.CreateVolume(name, size)
	}
	if err != nil {
		return nil, err
	}
	if v.Size() != size {
		return nil, fmt.Errorf("%w: volume %q is %d bytes, not %d: a volume's size is fixed when it is created; give its size, or another name for a new volume",
			ErrSizeMismatch, name, v.Size(), size)
	}
	return New(v), nil
}

// Volume returns the volume the device is on.
func (d *Device) Volume() *chunkstore.Volume { return d.v }

// ReadAt reads len(p) bytes at off (io.ReaderAt). Never-written ranges
// read as zeros; a range the store cannot reconstruct fails with an
// Unrecovered Read Error, never with wrong bytes.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.v.ReadAt(p, off)
	return n, d.wrap("read", off, int64(len(p)), err)
}

// WriteAt writes p at off (io.WriterAt), durable after the next Sync.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	n, err := d.v.WriteAt(p, off)
	return n, d.wrap("write", off, int64(len(p)), err)
}

// WriteAtFUA writes p at off and makes it durable before it returns.
func (d *Device) WriteAtFUA(p []byte, off int64) (int, error) {
	n, err := d.v.WriteAtFlags(p, off, chunkstore.FUA)
	return n, d.wrap("write (FUA)", off, int64(len(p)), err)
}

// WriteZeroes makes [off, off+n) read as zeros.
func (d *Device) WriteZeroes(off, n int64) error {
	return d.wrap("write zeroes", off, n, d.v.WriteZeroes(off, n, 0))
}

// Discard unmaps [off, off+n): it reads as zeros afterwards.
func (d *Device) Discard(off, n int64) error {
	return d.wrap("discard", off, n, d.v.Discard(off, n))
}

// Sync makes every write that returned before it durable (the store's
// Sync: every volume of the store).
func (d *Device) Sync() error {
	return d.wrap("flush", 0, 0, d.v.Sync())
}

// Size returns the volume's size in bytes.
func (d *Device) Size() int64 { return d.v.Size() }

// wrap turns a store error into an *Error; nil and io.EOF pass unchanged,
// as io.ReaderAt's callers compare with io.EOF.
func (d *Device) wrap(op string, off, n int64, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	e := &Error{Op: op, Volume: d.v.Name(), Off: off, N: n, Err: err}
	e.Status, e.class = statusOf(err, op == "read")
	return e
}

// statusOf maps a store error to the NVMe status of the command that met
// it, and to the blockdev error of the same meaning, if any.
func statusOf(err error, reads bool) (nvmeof.Status, error) {
	media := nvmeof.StatusWriteFault
	if reads {
		media = nvmeof.StatusUnrecoveredReadError
	}
	switch {
	case errors.Is(err, chunkstore.ErrOutOfRange):
		return nvmeof.StatusLBAOutOfRange.WithDNR(), blockdev.ErrOutOfRange
	case errors.Is(err, chunkstore.ErrClosed):
		return nvmeof.StatusNamespaceNotReady, blockdev.ErrClosed
	case chunkstore.IsNoSpace(err):
		return nvmeof.StatusCapacityExceeded.WithDNR(), nil
	case chunkstore.IsUnavailable(err), chunkstore.IsCorruption(err):
		return media.WithDNR(), nil
	}
	return media, nil
}
