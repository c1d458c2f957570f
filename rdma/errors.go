package rdma

import (
	"errors"
	"fmt"
)

// Errors returned when setting things up.
var (
	// ErrNotSupported: the provider cannot do this (for example Register of
	// Go memory with remote access on shm, or any call to the verbs
	// provider in a binary built without the rdma tag).
	ErrNotSupported = errors.New("rdma: not supported by this provider")
	// ErrUnknownScheme: no provider is registered for the URL's scheme.
	// Import rdma/providers to register every provider in the binary.
	ErrUnknownScheme = errors.New("rdma: unknown provider scheme")
	// ErrInvalidArgument: a size, flag or address is not valid.
	ErrInvalidArgument = errors.New("rdma: invalid argument")
	// ErrWrongProvider: an object of one provider was passed to another.
	ErrWrongProvider = errors.New("rdma: object belongs to another provider")
)

// Errors returned when posting work requests. PostSend and PostRecv wrap
// them in a *PostError that says which WR of the batch failed.
var (
	// ErrInvalidState: the QP is not in a state that accepts the WR
	// (PostSend before RTS, or anything after Close).
	ErrInvalidState = errors.New("rdma: invalid QP state")
	// ErrQueueFull: posting would exceed MaxSendWR or MaxRecvWR outstanding WRs.
	ErrQueueFull = errors.New("rdma: work queue full")
	// ErrTooManySGE: a WR has more SGEs than MaxSGE.
	ErrTooManySGE = errors.New("rdma: too many SGEs")
	// ErrInlineTooLarge: an Inline WR carries more than MaxInline bytes.
	ErrInlineTooLarge = errors.New("rdma: inline data too large")
)

// Errors returned by connection management and by completion queues.
var (
	// ErrClosed: the object was closed.
	ErrClosed = errors.New("rdma: closed")
	// ErrCQOverrun: more completions arrived than the CQ's depth; the CQ is
	// in error and so are the QPs that use it.
	ErrCQOverrun = errors.New("rdma: completion queue overrun")
	// ErrConnRefused: the peer refused the connection with no private data
	// (nothing listening). A reject with private data is a *RejectError.
	ErrConnRefused = errors.New("rdma: connection refused")
)

// PostError reports which WR of a batch could not be posted, as the bad_wr
// out-parameter of ibv_post_send. WRs before Index were posted.
type PostError struct {
	Index int
	Err   error
}

func (e *PostError) Error() string {
	return fmt.Sprintf("rdma: post of WR %d: %v", e.Index, e.Err)
}

func (e *PostError) Unwrap() error { return e.Err }

// RejectError is a connection request refused by the listener with
// Reject. Private holds the reject's private data, where NVMe-oF puts its
// reject status.
type RejectError struct {
	Private []byte
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("rdma: connection rejected (%d bytes of private data)", len(e.Private))
}

// Is makes errors.Is(err, ErrConnRefused) true for a reject too.
func (e *RejectError) Is(target error) bool { return target == ErrConnRefused }
