package wire

import (
	"encoding/binary"
	"strconv"
)

// DDP segment headers (RFC 5041 section 4) with the RDMAP control field
// (RFC 5040 section 4.2) in the DDP RsvdULP bits.
//
// Tagged buffer model, 14 bytes:
//
//	0                   1                   2                   3
//	0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Resrv | DV| RV|R| Opcode  |              STag             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     STag (cont.)              |      Tagged Offset (64 bits)  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           TO (cont.)          |
//
// Untagged buffer model, 18 bytes: control, RDMAP control, a 32-bit
// RsvdULP word (the Invalidate STag of Send with Invalidate), QN, MSN, MO.
const (
	TaggedHeaderLen   = 14
	UntaggedHeaderLen = 18

	OffDDPCtrl   = 0
	OffRDMAPCtrl = 1
	// tagged
	OffSTag = 2
	OffTO   = 6
	// untagged
	OffRsvdULP = 2
	OffQN      = 6
	OffMSN     = 10
	OffMO      = 14

	DDPVersion   = 1
	RDMAPVersion = 1

	ddpFlagTagged = 0x80
	ddpFlagLast   = 0x40
	ddpMaskDV     = 0x03
	rdmapShiftRV  = 6
	rdmapMaskOp   = 0x0f
)

// Untagged queue numbers (RFC 5040 section 5.1; RFC 7306 keeps Immediate
// Data on queue 0).
const (
	QNSend        = 0
	QNReadRequest = 1
	QNTerminate   = 2
	numQueues     = 3
)

// Opcode is the RDMAP message opcode.
type Opcode uint8

// RDMAP opcodes (RFC 5040 section 4.3, RFC 7306 section 5.1).
const (
	OpWrite           Opcode = 0x0
	OpReadRequest     Opcode = 0x1
	OpReadResponse    Opcode = 0x2
	OpSend            Opcode = 0x3
	OpSendInv         Opcode = 0x4
	OpSendSE          Opcode = 0x5
	OpSendSEInv       Opcode = 0x6
	OpTerminate       Opcode = 0x7
	OpImmediateData   Opcode = 0x8 // RFC 7306
	OpImmediateDataSE Opcode = 0x9 // RFC 7306
	OpAtomicRequest   Opcode = 0xa // RFC 7306, not implemented
	OpAtomicResponse  Opcode = 0xb // RFC 7306, not implemented
)

var opNames = [...]string{"Write", "ReadRequest", "ReadResponse", "Send", "SendInv", "SendSE", "SendSEInv",
	"Terminate", "ImmediateData", "ImmediateDataSE", "AtomicRequest", "AtomicResponse"}

func (o Opcode) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// Tagged reports whether the opcode travels in the tagged buffer model.
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// QN is the untagged queue an untagged opcode uses, or -1.
func (o Opcode) QN() int {
	switch o {
	case OpSend, OpSendInv, OpSendSE, OpSendSEInv, OpImmediateData, OpImmediateDataSE:
		return QNSend
	case OpReadRequest:
		return QNReadRequest
	case OpTerminate:
		return QNTerminate
	}
	return -1
}

// Supported reports whether the provider implements the opcode.
func (o Opcode) Supported() bool { return o <= OpImmediateDataSE }

// Header is a DDP segment header with its RDMAP control field.
type Header struct {
	Tagged bool
	Last   bool
	Opcode Opcode

	// Tagged buffer model.
	STag uint32
	TO   uint64

	// Untagged buffer model.
	RsvdULP uint32 // Invalidate STag for Send with Invalidate, else 0
	QN      uint32
	MSN     uint32
	MO      uint32
}

// Len is the encoded header length.
func (h *Header) Len() int {
	if h.Tagged {
		return TaggedHeaderLen
	}
	return UntaggedHeaderLen
}

// MarshalTo writes the header into b and returns its length.
func (h *Header) MarshalTo(b []byte) int {
	n := h.Len()
	_ = b[n-1]
	c := byte(DDPVersion)
	if h.Tagged {
		c |= ddpFlagTagged
	}
	if h.Last {
		c |= ddpFlagLast
	}
	b[OffDDPCtrl] = c
	b[OffRDMAPCtrl] = RDMAPVersion<<rdmapShiftRV | byte(h.Opcode)&rdmapMaskOp
	if h.Tagged {
		binary.BigEndian.PutUint32(b[OffSTag:], h.STag)
		binary.BigEndian.PutUint64(b[OffTO:], h.TO)
		return n
	}
	binary.BigEndian.PutUint32(b[OffRsvdULP:], h.RsvdULP)
	binary.BigEndian.PutUint32(b[OffQN:], h.QN)
	binary.BigEndian.PutUint32(b[OffMSN:], h.MSN)
	binary.BigEndian.PutUint32(b[OffMO:], h.MO)
	return n
}

// HeaderLenOf returns the header length the control byte b0 announces.
func HeaderLenOf(b0 byte) int {
	if b0&ddpFlagTagged != 0 {
		return TaggedHeaderLen
	}
	return UntaggedHeaderLen
}

// Unmarshal decodes the header at the start of b and returns its length.
// Failures a peer must hear about are *HeaderError with the Terminate
// cause: DDP version, RDMAP version, unknown opcode, an opcode in the wrong
// buffer model, an invalid queue number. Reserved bits are ignored.
func (h *Header) Unmarshal(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, ErrShort
	}
	c, r := b[OffDDPCtrl], b[OffRDMAPCtrl]
	h.Tagged = c&ddpFlagTagged != 0
	h.Last = c&ddpFlagLast != 0
	n := h.Len()
	if len(b) < n {
		return 0, ErrShort
	}
	if c&ddpMaskDV != DDPVersion {
		code, et := CodeDDPUntaggedVersion, ETypeDDPUntagged
		if h.Tagged {
			code, et = CodeDDPTaggedVersion, ETypeDDPTagged
		}
		return 0, &HeaderError{TermCause{LayerDDP, et, code}, "bad DDP version"}
	}
	if r>>rdmapShiftRV != RDMAPVersion {
		return 0, &HeaderError{TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, CodeInvalidRDMAPVersion}, "bad RDMAP version"}
	}
	h.Opcode = Opcode(r & rdmapMaskOp)
	if !h.Opcode.Supported() || h.Opcode.Tagged() != h.Tagged {
		return 0, &HeaderError{TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, CodeUnexpectedOpcode}, "unexpected opcode " + h.Opcode.String()}
	}
	if h.Tagged {
		h.STag = binary.BigEndian.Uint32(b[OffSTag:])
		h.TO = binary.BigEndian.Uint64(b[OffTO:])
		h.RsvdULP, h.QN, h.MSN, h.MO = 0, 0, 0, 0
		return n, nil
	}
	h.STag, h.TO = 0, 0
	h.RsvdULP = binary.BigEndian.Uint32(b[OffRsvdULP:])
	h.QN = binary.BigEndian.Uint32(b[OffQN:])
	h.MSN = binary.BigEndian.Uint32(b[OffMSN:])
	h.MO = binary.BigEndian.Uint32(b[OffMO:])
	if h.QN >= numQueues || int(h.QN) != h.Opcode.QN() {
		return 0, &HeaderError{TermCause{LayerDDP, ETypeDDPUntagged, CodeDDPInvalidQN}, "invalid queue number"}
	}
	return n, nil
}
