package admin

import "errors"

// Errors of the socket.
var (
	// ErrSocketInUse: ListenUnix found a live socket (another serve on
	// the same path) or a file that is not a socket.
	ErrSocketInUse = errors.New("admin: socket in use")
	// ErrSocketPath: the socket's path is too long for a Unix socket.
	ErrSocketPath = errors.New("admin: socket path too long")
	// ErrServerClosed: Serve after Close.
	ErrServerClosed = errors.New("admin: server closed")
)
