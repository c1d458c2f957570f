//go:build rdma && cgo

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/capsule-storage/capsule/rdma"
)

// wcStatus maps ibv_wc_status to rdma.WCStatus. Statuses with no
// counterpart take the nearest one: a local access error at the responder
// is a protection error, a remote abort an operation error, a response
// timeout a transport failure.
func wcStatus(s uint32) rdma.WCStatus {
	switch s {
	case C.IBV_WC_SUCCESS:
		return rdma.Success
	case C.IBV_WC_LOC_LEN_ERR:
		return rdma.LocLenErr
	case C.IBV_WC_LOC_QP_OP_ERR, C.IBV_WC_LOC_EEC_OP_ERR:
		return rdma.LocQPOpErr
	case C.IBV_WC_LOC_PROT_ERR, C.IBV_WC_LOC_ACCESS_ERR, C.IBV_WC_LOC_RDD_VIOL_ERR:
		return rdma.LocProtErr
	case C.IBV_WC_WR_FLUSH_ERR:
		return rdma.WRFlushErr
	case C.IBV_WC_REM_ACCESS_ERR:
		return rdma.RemAccessErr
	case C.IBV_WC_REM_INV_REQ_ERR, C.IBV_WC_REM_INV_RD_REQ_ERR:
		return rdma.RemInvReqErr
	case C.IBV_WC_REM_OP_ERR, C.IBV_WC_REM_ABORT_ERR:
		return rdma.RemOpErr
	case C.IBV_WC_RETRY_EXC_ERR, C.IBV_WC_RESP_TIMEOUT_ERR:
		return rdma.RetryExcErr
	case C.IBV_WC_RNR_RETRY_EXC_ERR:
		return rdma.RNRRetryExcErr
	}
	return rdma.GeneralErr
}

// wcOpcode maps the ibv_wc_opcode of a successful completion. ok is false
// for opcodes this API never produces (atomics, binds, TSO).
func wcOpcode(o uint32) (rdma.WCOpcode, bool) {
	switch o {
	case C.IBV_WC_SEND:
		return rdma.WCSend, true
	case C.IBV_WC_RDMA_WRITE:
		return rdma.WCWrite, true
	case C.IBV_WC_RDMA_READ:
		return rdma.WCRead, true
	case C.IBV_WC_RECV:
		return rdma.WCRecv, true
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		return rdma.WCRecvWriteImm, true
	}
	return 0, false
}

// wcFlags maps ibv_wc_flags.
func wcFlags(f uint32) rdma.WCFlags {
	var out rdma.WCFlags
	if f&C.IBV_WC_WITH_IMM != 0 {
		out |= rdma.WCWithImm
	}
	if f&C.IBV_WC_WITH_INV != 0 {
		out |= rdma.WCWithInv
	}
	return out
}

// wrOpcode maps an rdma.Opcode to ibv_wr_opcode and the WCOpcode its
// completion carries.
func wrOpcode(op rdma.Opcode) (uint32, rdma.WCOpcode, bool) {
	switch op {
	case rdma.OpSend:
		return C.IBV_WR_SEND, rdma.WCSend, true
	case rdma.OpSendImm:
		return C.IBV_WR_SEND_WITH_IMM, rdma.WCSend, true
	case rdma.OpSendInv:
		return C.IBV_WR_SEND_WITH_INV, rdma.WCSend, true
	case rdma.OpWrite:
		return C.IBV_WR_RDMA_WRITE, rdma.WCWrite, true
	case rdma.OpWriteImm:
		return C.IBV_WR_RDMA_WRITE_WITH_IMM, rdma.WCWrite, true
	case rdma.OpRead:
		return C.IBV_WR_RDMA_READ, rdma.WCRead, true
	}
	return 0, 0, false
}

// sendFlags maps rdma.SendFlags to ibv_send_flags.
func sendFlags(f rdma.SendFlags) uint32 {
	var out uint32
	if f&rdma.Signaled != 0 {
		out |= C.IBV_SEND_SIGNALED
	}
	if f&rdma.Inline != 0 {
		out |= C.IBV_SEND_INLINE
	}
	if f&rdma.Fence != 0 {
		out |= C.IBV_SEND_FENCE
	}
	if f&rdma.Solicited != 0 {
		out |= C.IBV_SEND_SOLICITED
	}
	return out
}

// accessFlags maps rdma.Access to ibv_access_flags.
func accessFlags(a rdma.Access) C.int {
	var out C.int
	if a&rdma.AccessLocalWrite != 0 {
		out |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&rdma.AccessRemoteRead != 0 {
		out |= C.IBV_ACCESS_REMOTE_READ
	}
	if a&rdma.AccessRemoteWrite != 0 {
		out |= C.IBV_ACCESS_REMOTE_WRITE
	}
	return out
}

// rnrTimerMs is the InfiniBand encoding of the minimum RNR NAK timer
// (IBA 9.7.5.2.8): rnrTimerMs[i] is the wait, in milliseconds, of code i.
var rnrTimerMs = [32]float64{
	655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12,
	0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
	2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72,
	40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
}

// rnrTimerCode returns the smallest encoded timer at least d (code 0,
// the longest, for anything above 491.52ms).
func rnrTimerCode(d time.Duration) uint8 {
	ms := float64(d) / float64(time.Millisecond)
	for code := 1; code < 32; code++ {
		if rnrTimerMs[code] >= ms {
			return uint8(code)
		}
	}
	return 0
}

// rnrRetryCount bounds RNRRetry to 6: the 3-bit field's 7 means retry
// forever on InfiniBand, which the API's bounded wait rules out.
func rnrRetryCount(n int) int {
	if n > 6 {
		return 6
	}
	return n
}

// callErr wraps a positive errno returned by a C helper.
func callErr(op string, r C.int) error {
	return &CallError{Op: op, Errno: syscall.Errno(r)}
}

// errnoErr wraps the errno of a two-value cgo call, or EIO when the call
// failed without one.
func errnoErr(op string, err error) error {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return &CallError{Op: op, Errno: e}
	}
	return &CallError{Op: op, Errno: syscall.EIO}
}

// postErr maps the errno of ibv_post_send/recv: ENOMEM is a full queue.
func postErr(op string, r C.int) error {
	if syscall.Errno(r) == syscall.ENOMEM {
		return rdma.ErrQueueFull
	}
	if syscall.Errno(r) == syscall.EINVAL {
		return fmt.Errorf("%w: %w", rdma.ErrInvalidArgument, callErr(op, r))
	}
	return callErr(op, r)
}
