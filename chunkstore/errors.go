package chunkstore

import (
	"errors"
	"fmt"
	"syscall"
)

// Errors of configuration, returned by ParseGeometry, Create and Open.
var (
	// ErrInvalidGeometry: K+M is malformed or out of range.
	ErrInvalidGeometry = errors.New("chunkstore: invalid geometry")
	// ErrInvalidOption: an option is out of range (stripe unit, cache).
	ErrInvalidOption = errors.New("chunkstore: invalid option")
	// ErrGeometryMismatch: Open was given a geometry or stripe unit other
	// than the one the store was created with.
	ErrGeometryMismatch = errors.New("chunkstore: geometry differs from the store's")
	// ErrGoldenMismatch: the erasure coder no longer produces the parity
	// this store was written with (a changed library or matrix option).
	// Opening would reconstruct wrong bytes, so the store refuses.
	ErrGoldenMismatch = errors.New("chunkstore: erasure code self-test failed")
	// ErrStoreExists: Create found a device that already belongs to a store
	// or is not empty.
	ErrStoreExists = errors.New("chunkstore: device is not empty")
	// ErrNoStore: Open found no store on the devices.
	ErrNoStore = errors.New("chunkstore: no store on these devices")
	// ErrFormatV1: the device holds a store of format version 1 (before
	// the log-structured write path). This build does not read it until
	// Migrate (bin/target migrate) has converted it.
	ErrFormatV1 = errors.New("chunkstore: the store is format v1: convert it with `bin/target migrate --data DIR`")
)

// Errors about devices. Open and Rebuild wrap them in a *DeviceError that
// names the device; several are gathered in a *DevicesError.
var (
	// ErrDeviceMissing: the directory, its identity record or its files
	// are gone, or the device vanished while in use.
	ErrDeviceMissing = errors.New("chunkstore: device missing")
	// ErrDeviceEmpty: the directory exists but holds no identity record: a
	// replaced disk, ready for Rebuild.
	ErrDeviceEmpty = errors.New("chunkstore: device is empty")
	// ErrDeviceSwapped: the device belongs to this store but to another
	// position (the device list is out of order).
	ErrDeviceSwapped = errors.New("chunkstore: device is in the wrong position")
	// ErrForeignDevice: the device belongs to another store, or was
	// replaced in this one and is no longer part of it.
	ErrForeignDevice = errors.New("chunkstore: device belongs to another store")
	// ErrDeviceFailed: the device failed an I/O and is out of use until
	// the store is reopened or the device rebuilt.
	ErrDeviceFailed = errors.New("chunkstore: device failed")
	// ErrDeviceBusy: another process has the device open.
	ErrDeviceBusy = errors.New("chunkstore: device in use by another process")
	// ErrTooManyFailures: more than M devices (or shards of one stripe) are
	// unavailable. Nothing is returned rather than wrong data; the target
	// maps this to an NVMe media error.
	ErrTooManyFailures = errors.New("chunkstore: too many devices unavailable")
)

// Errors of data operations.
var (
	// ErrCorrupt marks corruption: a record or shard whose checksum,
	// length or identity does not verify. Test with IsCorruption.
	ErrCorrupt = errors.New("chunkstore: corrupt")
	// ErrNoSpace: a device is full. The write failed and stored data is
	// intact. Test with IsNoSpace.
	ErrNoSpace = errors.New("chunkstore: no space left on device")
	// ErrNotFound: no volume or chunk of that name or ID.
	ErrNotFound = errors.New("chunkstore: not found")
	// ErrExists: a volume of that name exists.
	ErrExists = errors.New("chunkstore: already exists")
	// ErrOutOfRange: an access beyond a volume's size, or a negative offset.
	ErrOutOfRange = errors.New("chunkstore: out of range")
	// ErrInvalidArgument: a bad name, size or position.
	ErrInvalidArgument = errors.New("chunkstore: invalid argument")
	// ErrClosed: the store is closed, or the volume deleted.
	ErrClosed = errors.New("chunkstore: closed")
)

// DeviceError says which device an error is about.
type DeviceError struct {
	Pos    int    // position in the device list
	Device string // the device's vfs.FS String (its directory)
	Err    error
}

func (e *DeviceError) Error() string {
	return fmt.Sprintf("chunkstore: device %d (%s): %v", e.Pos, e.Device, e.Err)
}

func (e *DeviceError) Unwrap() error { return e.Err }

// DevicesError gathers the device errors of Open: every device that could
// not be used, so an operator sees all of them at once.
type DevicesError struct {
	Err     error // ErrTooManyFailures, or the first device's class
	Devices []*DeviceError
}

func (e *DevicesError) Error() string {
	s := e.Err.Error()
	for _, d := range e.Devices {
		s += "; " + d.Error()
	}
	return s
}

// Unwrap returns the class and every device error, so errors.Is finds
// ErrTooManyFailures, ErrDeviceSwapped and the rest.
func (e *DevicesError) Unwrap() []error {
	errs := []error{e.Err}
	for _, d := range e.Devices {
		errs = append(errs, d)
	}
	return errs
}

// StripeError says which stripe a read or repair failed on.
type StripeError struct {
	Owner uint64 // volume or chunk owner ID
	Index uint64 // stripe index within the owner
	Err   error
}

func (e *StripeError) Error() string {
	return fmt.Sprintf("chunkstore: stripe %d/%d: %v", e.Owner, e.Index, e.Err)
}

func (e *StripeError) Unwrap() error { return e.Err }

// corruptf returns an error of the corruption class.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// IsCorruption reports whether err is of the corruption class: bytes that
// were read but did not verify.
func IsCorruption(err error) bool { return errors.Is(err, ErrCorrupt) }

// IsNoSpace reports whether err means a device is full.
func IsNoSpace(err error) bool {
	return errors.Is(err, ErrNoSpace) || errors.Is(err, syscall.ENOSPC)
}

// IsUnavailable reports whether err means the data cannot be served now
// because too many devices or shards are unavailable (NVMe: media error).
func IsUnavailable(err error) bool { return errors.Is(err, ErrTooManyFailures) }

// IsDeviceProblem reports whether err is about a device that cannot be used
// as given (missing, empty, swapped, foreign, failed, busy).
func IsDeviceProblem(err error) bool {
	for _, e := range []error{ErrDeviceMissing, ErrDeviceEmpty, ErrDeviceSwapped, ErrForeignDevice, ErrDeviceFailed, ErrDeviceBusy} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
