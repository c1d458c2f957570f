package vfs

import "errors"

// Errors of the file system seam. Errors from the host (ENOENT, ENOSPC,
// EIO) pass through unchanged, wrapped in *os.PathError as the os package
// does, so errors.Is(err, syscall.ENOSPC) and errors.Is(err, fs.ErrNotExist)
// work on every implementation.
var (
	// ErrInvalidName: an absolute name, an empty one, or one that leaves
	// the root.
	ErrInvalidName = errors.New("vfs: invalid name")
	// ErrNotSupported: the implementation cannot do this (HostPath on an
	// in-memory FS without a host directory).
	ErrNotSupported = errors.New("vfs: not supported")
	// ErrWouldBlock: a NowaitReader would have had to wait for the
	// device.
	ErrWouldBlock = errors.New("vfs: the read would wait for the device")
)

// Errors of the simulated file systems.
var (
	// ErrCrashed: the in-memory FS has crashed (its CrashClock ran out, or
	// Crash was called). Every later operation on it and its open files
	// fails with this error; Crash returns the FS as it is after reboot.
	ErrCrashed = errors.New("vfs: simulated crash")
	// ErrVanished: the device was removed (MemFS.Vanish). Every later
	// operation fails, as a pulled disk does.
	ErrVanished = errors.New("vfs: device vanished")
	// ErrInjected is the default error of an Injection rule.
	ErrInjected = errors.New("vfs: injected error")
	// ErrClosed: the file was closed.
	ErrClosed = errors.New("vfs: file already closed")
)
