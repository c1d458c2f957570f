package iwarp

import "errors"

// Errors of connection setup. Errors of posting and of completions are the
// rdma package's sentinels and WCStatus values.
var (
	// ErrMarkersUnsupported: the peer asked for MPA markers, which this
	// provider does not implement (RFC 5044 section 5). The connection is
	// refused.
	ErrMarkersUnsupported = errors.New("iwarp: peer requires MPA markers")
	// ErrHandshake: the MPA Request/Reply exchange failed: a malformed
	// frame, a Request where a Reply was expected, or a timeout.
	ErrHandshake = errors.New("iwarp: MPA handshake failed")
	// ErrAnswered: Accept or Reject was already called on the ConnRequest.
	ErrAnswered = errors.New("iwarp: connection request already answered")
)
