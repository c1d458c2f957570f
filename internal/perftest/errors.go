package perftest

import "errors"

var (
	// ErrBadParams: an operation, size or queue depth out of range.
	ErrBadParams = errors.New("perftest: bad parameters")
	// ErrBadWire: private data that is not a perftest Hello or Reply.
	ErrBadWire = errors.New("perftest: malformed private data")
	// ErrRegionTooSmall: the server's region cannot hold size*qd bytes.
	ErrRegionTooSmall = errors.New("perftest: server region too small")
)
