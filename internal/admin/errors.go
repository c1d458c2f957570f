package admin

import "errors"

// Errors of the socket.
var (
	// ErrSocketInUse: ListenUnix found a live socket (another serve on
	// the same path) or a file that is not a socket.
	ErrSocketInUse = errors.New("admin: socket in use")
	// ErrServerClosed: Serve after Close.
	ErrServerClosed = errors.New("admin: server closed")
)
