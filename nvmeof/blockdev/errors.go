package blockdev

import "errors"

// Errors of every Device.
var (
	// ErrOutOfRange: an offset or length is negative, or the range runs
	// past Size. Nothing was read or written.
	ErrOutOfRange = errors.New("blockdev: range outside the device")
	// ErrNotSupported: the device cannot do this (Discard on a file
	// system without hole punching). Callers fall back as doc.go says.
	ErrNotSupported = errors.New("blockdev: not supported by this device")
	// ErrClosed: the device was closed.
	ErrClosed = errors.New("blockdev: device closed")
)

// Errors of constructors.
var (
	// ErrInvalidSize: the size asked for is zero, negative, or larger than
	// the block device or the address space allows.
	ErrInvalidSize = errors.New("blockdev: invalid device size")
	// ErrNotDevice: the path is neither a regular file nor a block device.
	ErrNotDevice = errors.New("blockdev: not a regular file or block device")
)
