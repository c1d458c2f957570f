package rdma

import "fmt"

// WCStatus is the outcome of a work request, as ibv_wc_status. It is an
// error value: every status but Success can be wrapped and found with
// errors.Is / errors.As.
type WCStatus uint8

const (
	Success WCStatus = iota
	// LocLenErr: a receive was too small for the incoming message, or an
	// inline WR exceeded MaxInline.
	LocLenErr
	// LocQPOpErr: the WR is not valid for the QP (state, opcode, SGE count).
	LocQPOpErr
	// LocProtErr: a local SGE names an unknown lkey, lies outside its
	// region, or the region lacks LocalWrite for a Recv or Read sink.
	LocProtErr
	// WRFlushErr: the QP went to Error before this WR ran.
	WRFlushErr
	// RemAccessErr: the peer refused an rkey: unknown, invalidated, out of
	// bounds, or without the access the operation needs. Nothing was read
	// or written at the peer.
	RemAccessErr
	// RemInvReqErr: the peer found the request invalid (bad opcode, too
	// long, or an invalidate of an unknown rkey).
	RemInvReqErr
	// RemOpErr: the peer could not complete the operation.
	RemOpErr
	// RetryExcErr: the transport failed: the connection was lost.
	RetryExcErr
	// RNRRetryExcErr: the peer had no Recv posted and the bounded wait
	// (QPConfig.RNRRetry, RNRTimeout) ran out.
	RNRRetryExcErr
	// GeneralErr: anything else.
	GeneralErr
)

var statusNames = [...]string{
	"success", "local length error", "local QP operation error",
	"local protection error", "WR flushed", "remote access error",
	"remote invalid request", "remote operation error",
	"transport retry exceeded", "receiver not ready retry exceeded",
	"general error",
}

func (s WCStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// Error makes a status usable as an error.
func (s WCStatus) Error() string { return "rdma: " + s.String() }

// Err returns nil for Success and the status itself otherwise.
func (s WCStatus) Err() error {
	if s == Success {
		return nil
	}
	return s
}
