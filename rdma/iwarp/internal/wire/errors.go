package wire

import (
	"errors"
	"fmt"
)

// Errors of the MPA start-up phase (RFC 5044 section 7).
var (
	// ErrShort: the buffer is shorter than the format needs.
	ErrShort = errors.New("wire: buffer too short")
	// ErrMPAKey: the first 16 bytes are neither "MPA ID Req Frame" nor
	// "MPA ID Rep Frame", or not the one expected.
	ErrMPAKey = errors.New("wire: bad MPA frame key")
	// ErrMPARevision: the MPA Rev field is not 1.
	ErrMPARevision = errors.New("wire: unsupported MPA revision")
	// ErrPrivateTooLong: PD_Length exceeds 512 bytes.
	ErrPrivateTooLong = errors.New("wire: MPA private data longer than 512 bytes")
	// ErrBadLength: a length field contradicts the bytes present.
	ErrBadLength = errors.New("wire: inconsistent length")
)

// Errors of FPDU framing (RFC 5044 section 4).
var (
	// ErrCRC: the FPDU's CRC32C does not match its contents.
	ErrCRC = errors.New("wire: MPA CRC mismatch")
	// ErrULPDUTooShort: ULPDU_Length is smaller than the smallest DDP header.
	ErrULPDUTooShort = errors.New("wire: ULPDU shorter than a DDP header")
)

// Layer is the Terminate Layer field (RFC 5040 section 4.8).
type Layer uint8

const (
	LayerRDMAP Layer = 0
	LayerDDP   Layer = 1
	LayerLLP   Layer = 2
)

// Error types per layer (RFC 5040 section 7, RFC 5041 section 7, RFC 5044
// section 8).
const (
	// RDMAP layer.
	ETypeRDMAPLocalCatastrophic uint8 = 0
	ETypeRDMAPRemoteProtection  uint8 = 1
	ETypeRDMAPRemoteOperation   uint8 = 2
	// DDP layer.
	ETypeDDPLocalCatastrophic uint8 = 0
	ETypeDDPTagged            uint8 = 1
	ETypeDDPUntagged          uint8 = 2
	// LLP (MPA) layer.
	ETypeMPA uint8 = 0
)

// Error codes (RFC 5040 section 7, RFC 5041 section 7, RFC 5044 section 8).
const (
	// RDMAP remote protection errors.
	CodeInvalidSTag        uint8 = 0x00
	CodeBaseBounds         uint8 = 0x01
	CodeAccessRights       uint8 = 0x02
	CodeSTagNotAssociated  uint8 = 0x03
	CodeTOWrap             uint8 = 0x04
	CodeSTagNotInvalidated uint8 = 0x09
	// RDMAP remote operation errors.
	CodeInvalidRDMAPVersion uint8 = 0x05
	CodeUnexpectedOpcode    uint8 = 0x06
	CodeCatastrophicStream  uint8 = 0x07
	CodeCatastrophicGlobal  uint8 = 0x08
	CodeUnspecified         uint8 = 0xff

	// DDP tagged buffer errors.
	CodeDDPTaggedInvalidSTag   uint8 = 0x00
	CodeDDPTaggedBaseBounds    uint8 = 0x01
	CodeDDPTaggedNotAssociated uint8 = 0x02
	CodeDDPTaggedTOWrap        uint8 = 0x03
	CodeDDPTaggedVersion       uint8 = 0x04
	// DDP untagged buffer errors.
	CodeDDPInvalidQN       uint8 = 0x01
	CodeDDPNoBuffer        uint8 = 0x02
	CodeDDPMSNRange        uint8 = 0x03
	CodeDDPInvalidMO       uint8 = 0x04
	CodeDDPTooLong         uint8 = 0x05
	CodeDDPUntaggedVersion uint8 = 0x06

	// MPA (LLP) errors.
	CodeMPAConnLost     uint8 = 0x01
	CodeMPACRC          uint8 = 0x02
	CodeMPALength       uint8 = 0x03
	CodeMPAInvalidFrame uint8 = 0x04
)

// TermCause is what a Terminate reports: layer, error type and code.
type TermCause struct {
	Layer Layer
	EType uint8
	Code  uint8
}

func (c TermCause) String() string {
	return fmt.Sprintf("layer %d type %d code %#02x", c.Layer, c.EType, c.Code)
}

// HeaderError is a decoding failure that the receiver must answer with a
// Terminate carrying Cause.
type HeaderError struct {
	Cause TermCause
	Msg   string
}

func (e *HeaderError) Error() string { return "wire: " + e.Msg + " (" + e.Cause.String() + ")" }
