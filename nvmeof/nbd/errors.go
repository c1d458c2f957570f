package nbd

import (
	"errors"
	"fmt"
)

// Errors of decoding bytes from the wire.
var (
	// ErrBadMagic: a request or option does not start with its magic
	// number. The stream is out of step and the connection is dropped.
	ErrBadMagic = errors.New("nbd: bad magic")
	// ErrLength: a message or a length inside it does not fit the bytes
	// given.
	ErrLength = errors.New("nbd: bad length")
	// ErrShortBuffer: an encoder was given too small a buffer.
	ErrShortBuffer = errors.New("nbd: buffer too short")
)

// Errors of the handshake.
var (
	// ErrClientFlags: the client set flags the server did not offer.
	ErrClientFlags = errors.New("nbd: unknown client flags")
	// ErrAborted: the client ended the handshake (NBD_OPT_ABORT, or an
	// NBD_OPT_EXPORT_NAME for an export that does not exist).
	ErrAborted = errors.New("nbd: handshake ended without an export")
	// ErrOptionTooLarge: an option's data is larger than the server reads.
	ErrOptionTooLarge = errors.New("nbd: option data too large")
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("nbd: server closed")

// Errno is an NBD error value, the error field of a reply. A Device
// fails a request with an error that wraps one (errors.As finds it);
// any other error is reported as EIO.
type Errno uint32

// Error values (doc/proto.md, "Error values").
const (
	EPERM     Errno = 1
	EIO       Errno = 5
	ENOMEM    Errno = 12
	EINVAL    Errno = 22
	ENOSPC    Errno = 28
	EOVERFLOW Errno = 75
	ENOTSUP   Errno = 95
	ESHUTDOWN Errno = 108
)

func (e Errno) Error() string {
	switch e {
	case EPERM:
		return "nbd: operation not permitted (EPERM)"
	case EIO:
		return "nbd: input/output error (EIO)"
	case ENOMEM:
		return "nbd: cannot allocate memory (ENOMEM)"
	case EINVAL:
		return "nbd: invalid argument (EINVAL)"
	case ENOSPC:
		return "nbd: no space left on device (ENOSPC)"
	case EOVERFLOW:
		return "nbd: value too large (EOVERFLOW)"
	case ENOTSUP:
		return "nbd: operation not supported (ENOTSUP)"
	case ESHUTDOWN:
		return "nbd: server shutting down (ESHUTDOWN)"
	}
	return fmt.Sprintf("nbd: error %d", uint32(e))
}

// errnoOf maps a Device's error to the reply's error value.
func errnoOf(err error) Errno {
	if err == nil {
		return 0
	}
	var e Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return EIO
}
