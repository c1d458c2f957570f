package rdma

import (
	"fmt"
	"time"
)

// Access is the set of rights a memory region grants, as ibv_access_flags.
type Access uint32

const (
	// AccessLocalWrite lets the local side write the region: a Recv or the
	// sink of an RDMA Read lands in it. Remote write needs it as well.
	AccessLocalWrite Access = 1 << iota
	// AccessRemoteRead lets a peer RDMA Read from the region with its rkey.
	AccessRemoteRead
	// AccessRemoteWrite lets a peer RDMA Write into the region with its rkey.
	AccessRemoteWrite
)

// AccessAll grants every right: local write, remote read and remote write.
const AccessAll = AccessLocalWrite | AccessRemoteRead | AccessRemoteWrite

func (a Access) String() string {
	s := ""
	for _, f := range []struct {
		bit  Access
		name string
	}{{AccessLocalWrite, "LocalWrite"}, {AccessRemoteRead, "RemoteRead"}, {AccessRemoteWrite, "RemoteWrite"}} {
		if a&f.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += f.name
		}
	}
	if s == "" {
		return "None"
	}
	return s
}

// Opcode is the operation of a send work request, as ibv_wr_opcode.
type Opcode uint8

const (
	// OpSend consumes one Recv at the peer and fills it with the SGL's bytes.
	OpSend Opcode = iota
	// OpSendImm is OpSend that also delivers SendWR.Imm to the peer's Recv
	// completion.
	OpSendImm
	// OpSendInv is OpSend that also invalidates SendWR.InvRKey at the peer
	// before the peer sees the Recv completion.
	OpSendInv
	// OpWrite copies the local SGL into the peer's region (RemoteAddr, RKey)
	// without the peer's involvement.
	OpWrite
	// OpWriteImm is OpWrite followed by a Recv completion at the peer that
	// carries SendWR.Imm. It consumes one Recv at the peer.
	OpWriteImm
	// OpRead copies the peer's region (RemoteAddr, RKey) into the local SGL
	// without the peer's involvement.
	OpRead
)

var opcodeNames = [...]string{"Send", "SendImm", "SendInv", "Write", "WriteImm", "Read"}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// SendFlags modify a send work request, as ibv_send_flags.
type SendFlags uint8

const (
	// Signaled asks for a completion of this WR on the send CQ. Unsignaled
	// WRs complete silently when they succeed; a later signaled completion
	// implies that every earlier WR on the QP has completed. Errors are
	// always reported. QPConfig.SignalAll makes every WR signaled.
	Signaled SendFlags = 1 << iota
	// Inline copies the SGL's bytes at post time: the local buffers need no
	// lkey and may be reused as soon as PostSend returns. The total must not
	// exceed QPConfig.MaxInline. Valid for Send and Write variants.
	Inline
	// Fence makes this WR wait until every earlier RDMA Read on the QP has
	// completed.
	Fence
	// Solicited asks the peer to raise a solicited event (iWARP Send with SE).
	Solicited
)

// SGE is one scatter/gather element: Length bytes at virtual address Addr in
// the local region whose lkey is LKey, as ibv_sge. MR.SGE builds one.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send-queue work request, as ibv_send_wr. A batch of them is
// posted with one QP.PostSend call, the Go form of a WR chain. The provider
// copies what it needs: the slice and its SGLs may be reused after PostSend
// returns; the memory the SGEs point at may not, until the WR completes
// (unless Inline).
type SendWR struct {
	ID         uint64    // returned in the completion
	Op         Opcode    // the operation
	Flags      SendFlags // Signaled, Inline, Fence, Solicited
	SGL        []SGE     // local memory: gathered for Send/Write, scattered for Read
	Imm        uint32    // immediate data for OpSendImm and OpWriteImm
	InvRKey    uint32    // the peer's rkey to invalidate, for OpSendInv
	RemoteAddr uint64    // peer virtual address, for Write/Read variants
	RKey       uint32    // peer rkey, for Write/Read variants
}

// RecvWR is a receive-queue work request, as ibv_recv_wr: one incoming Send
// (or Write with Immediate) is scattered into its SGL.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCOpcode says which operation a completion belongs to, as ibv_wc_opcode.
type WCOpcode uint8

const (
	WCSend WCOpcode = iota
	WCWrite
	WCRead
	WCRecv
	// WCRecvWriteImm is the peer's OpWriteImm arriving: the Recv's buffer is
	// untouched and WC.Imm carries the immediate data.
	WCRecvWriteImm
)

var wcOpcodeNames = [...]string{"Send", "Write", "Read", "Recv", "RecvWriteImm"}

func (o WCOpcode) String() string {
	if int(o) < len(wcOpcodeNames) {
		return wcOpcodeNames[o]
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags qualify a receive completion.
type WCFlags uint8

const (
	// WCWithImm: WC.Imm holds immediate data.
	WCWithImm WCFlags = 1 << iota
	// WCWithInv: the peer invalidated the local rkey WC.InvRKey.
	WCWithInv
)

// WC is a work completion, as ibv_wc.
type WC struct {
	ID      uint64   // the WR's ID
	Status  WCStatus // Success or why not
	Opcode  WCOpcode
	Flags   WCFlags
	QPNum   uint32 // the QP the WR was posted on, for CQs shared by QPs
	ByteLen uint32 // bytes received, for receive completions
	Imm     uint32 // immediate data, with WCWithImm
	InvRKey uint32 // invalidated rkey, with WCWithInv
}

// QPState is a queue pair's state, as ibv_qp_state. Connection management
// moves a QP Init → RTR → RTS; any error moves it to Error.
type QPState uint8

const (
	// StateInit: created, not connected. PostRecv is allowed; PostSend is not.
	StateInit QPState = iota
	// StateRTR: ready to receive; the connection is being established.
	StateRTR
	// StateRTS: ready to send; connected.
	StateRTS
	// StateError: every outstanding and later WR completes with
	// WRFlushErr. The state is final; create a new QP to reconnect.
	StateError
)

var stateNames = [...]string{"Init", "RTR", "RTS", "Error"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QPConfig sizes a queue pair, as ibv_qp_init_attr. Zero fields take the
// defaults listed with each.
type QPConfig struct {
	SendCQ CQ // completions of send WRs (required)
	RecvCQ CQ // completions of receive WRs (required unless SRQ is set and shares SendCQ; defaults to SendCQ)
	SRQ    SRQ

	MaxSendWR int // outstanding send WRs; default 128
	MaxRecvWR int // outstanding receive WRs; default 128
	MaxSGE    int // SGEs per WR; default 4
	MaxInline int // bytes of inline data per WR; default 256

	// SignalAll makes every send WR signaled (sq_sig_all).
	SignalAll bool

	// RNRRetry and RNRTimeout bound how long an incoming Send or Write
	// with Immediate waits for a Recv to be posted: RNRRetry+1 waits of
	// RNRTimeout each. When they are spent, the receiver errors the
	// connection and the sender's WR completes with RNRRetryExcErr.
	// Defaults: 7 and 10ms.
	RNRRetry   int
	RNRTimeout time.Duration
}

// Defaults for QPConfig.
const (
	DefaultMaxSendWR  = 128
	DefaultMaxRecvWR  = 128
	DefaultMaxSGE     = 4
	DefaultMaxInline  = 256
	DefaultRNRRetry   = 7
	DefaultRNRTimeout = 10 * time.Millisecond
)

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c QPConfig) WithDefaults() QPConfig {
	if c.RecvCQ == nil {
		c.RecvCQ = c.SendCQ
	}
	if c.MaxSendWR == 0 {
		c.MaxSendWR = DefaultMaxSendWR
	}
	if c.MaxRecvWR == 0 {
		c.MaxRecvWR = DefaultMaxRecvWR
	}
	if c.MaxSGE == 0 {
		c.MaxSGE = DefaultMaxSGE
	}
	if c.MaxInline == 0 {
		c.MaxInline = DefaultMaxInline
	}
	if c.RNRRetry == 0 {
		c.RNRRetry = DefaultRNRRetry
	}
	if c.RNRTimeout == 0 {
		c.RNRTimeout = DefaultRNRTimeout
	}
	return c
}

// Validate reports whether c (after WithDefaults) is usable.
func (c QPConfig) Validate() error {
	switch {
	case c.SendCQ == nil:
		return fmt.Errorf("%w: QPConfig.SendCQ is nil", ErrInvalidArgument)
	case c.MaxSendWR < 0 || c.MaxRecvWR < 0 || c.MaxSGE < 0 || c.MaxInline < 0:
		return fmt.Errorf("%w: negative QPConfig size", ErrInvalidArgument)
	case c.RNRRetry < 0 || c.RNRTimeout < 0:
		return fmt.Errorf("%w: negative RNR setting", ErrInvalidArgument)
	}
	return nil
}
