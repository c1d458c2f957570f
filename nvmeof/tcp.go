package nvmeof

import (
	"fmt"

	"github.com/capsule-storage/capsule/internal/crc32c"
)

// The NVMe/TCP Transport Specification 1.0 (revision 1.0d, and the same
// PDUs in the NVMe 2.x TCP transport specification): the PDU common
// header, the PDU types, their headers, the header and data digests, and
// the rules a receiver checks a PDU header against (TCPReceiver.Check).

// TCPPDUType is the PDU-Type of the common header.
type TCPPDUType uint8

// PDU types. H2C PDUs go from host to controller, C2H the other way.
const (
	TCPPDUICReq       TCPPDUType = 0x00
	TCPPDUICResp      TCPPDUType = 0x01
	TCPPDUH2CTermReq  TCPPDUType = 0x02
	TCPPDUC2HTermReq  TCPPDUType = 0x03
	TCPPDUCapsuleCmd  TCPPDUType = 0x04
	TCPPDUCapsuleResp TCPPDUType = 0x05
	TCPPDUH2CData     TCPPDUType = 0x06
	TCPPDUC2HData     TCPPDUType = 0x07
	TCPPDUR2T         TCPPDUType = 0x09
)

func (t TCPPDUType) String() string {
	switch t {
	case TCPPDUICReq:
		return "ICReq"
	case TCPPDUICResp:
		return "ICResp"
	case TCPPDUH2CTermReq:
		return "H2CTermReq"
	case TCPPDUC2HTermReq:
		return "C2HTermReq"
	case TCPPDUCapsuleCmd:
		return "CapsuleCmd"
	case TCPPDUCapsuleResp:
		return "CapsuleResp"
	case TCPPDUH2CData:
		return "H2CData"
	case TCPPDUC2HData:
		return "C2HData"
	case TCPPDUR2T:
		return "R2T"
	}
	return fmt.Sprintf("PDU type %#02x", uint8(t))
}

// TCPFlags is the FLAGS byte of the common header.
type TCPFlags uint8

// PDU flags. HDGSTF and DDGSTF say a header or data digest is present;
// LAST_PDU marks the last data PDU of a transfer (H2CData, C2HData);
// SUCCESS on the last C2HData says the command completed successfully and
// no CapsuleResp follows.
const (
	TCPFlagHDGSTF  TCPFlags = 1 << 0
	TCPFlagDDGSTF  TCPFlags = 1 << 1
	TCPFlagLastPDU TCPFlags = 1 << 2
	TCPFlagSuccess TCPFlags = 1 << 3
)

// Sizes of the PDU headers (HLEN) and of a digest.
const (
	TCPCommonHeaderSize      = 8
	TCPDigestSize            = 4
	TCPICReqSize             = 128 // ICReq and ICResp: HLEN = PLEN = 128
	TCPICRespSize            = 128
	TCPTermReqHeaderSize     = 24
	TCPCapsuleCmdHeaderSize  = TCPCommonHeaderSize + CommandSize    // 72
	TCPCapsuleRespHeaderSize = TCPCommonHeaderSize + CompletionSize // 24
	TCPDataHeaderSize        = 24                                   // H2CData, C2HData and R2T
	// TCPTermReqMaxData is the most error data a TermReq carries: the
	// header of the PDU in error, cut to 128 bytes (PLEN at most 152).
	TCPTermReqMaxData = 128
	// TCPMaxPDA is the largest HPDA or CPDA: 0's based dwords.
	TCPMaxPDA = 31
	// TCPMinMAXH2CDATA is the smallest MAXH2CDATA a controller may offer.
	TCPMinMAXH2CDATA = 4096
)

// Byte offsets of the common header.
const (
	TCPOffsetPDUType = 0
	TCPOffsetFLAGS   = 1
	TCPOffsetHLEN    = 2
	TCPOffsetPDO     = 3
	TCPOffsetPLEN    = 4 // 4 bytes
)

// Byte offsets of the ICReq and ICResp PDUs.
const (
	TCPICOffsetPFV            = 8  // 2 bytes, PDU Format Version
	TCPICReqOffsetHPDA        = 10 // Host PDU Data Alignment
	TCPICRespOffsetCPDA       = 10 // Controller PDU Data Alignment
	TCPICOffsetDGST           = 11 // digest types enabled
	TCPICReqOffsetMAXR2T      = 12 // 4 bytes, 0's based
	TCPICRespOffsetMAXH2CDATA = 12 // 4 bytes
)

// Byte offsets of the H2CTermReq and C2HTermReq PDUs.
const (
	TCPTermOffsetFES  = 8  // 2 bytes, Fatal Error Status
	TCPTermOffsetFEI  = 10 // 4 bytes, Fatal Error Information
	TCPTermOffsetData = 24 // the header of the PDU in error
)

// Byte offsets of the H2CData, C2HData and R2T PDUs.
const (
	TCPDataOffsetCCCID = 8  // 2 bytes, Command Capsule CID
	TCPDataOffsetTTAG  = 10 // 2 bytes, Transfer Tag (H2CData, R2T; reserved in C2HData)
	TCPDataOffsetDATAO = 12 // 4 bytes, Data Offset (R2TO in an R2T)
	TCPDataOffsetDATAL = 16 // 4 bytes, Data Length (R2TL in an R2T)
)

// TSASOffsetTCPSECTYPE is the offset of SECTYPE in the TSAS of a TCP
// discovery log entry (TCPSecType* values); the other TSAS bytes of a TCP
// entry without TLS are zero.
const TSASOffsetTCPSECTYPE = 0

// TCPDigestTypes is the DGST byte of ICReq and ICResp.
type TCPDigestTypes uint8

// Digest types: header digest (HDGST_ENABLE) and data digest (DDGST_ENABLE).
const (
	TCPHeaderDigest TCPDigestTypes = 1 << 0
	TCPDataDigest   TCPDigestTypes = 1 << 1
)

// TCPFES is the Fatal Error Status of a TermReq.
type TCPFES uint16

// Fatal error status values.
const (
	TCPFESInvalidHeaderField   TCPFES = 0x01 // FEI: byte offset of the field
	TCPFESPDUSequenceError     TCPFES = 0x02
	TCPFESHeaderDigestError    TCPFES = 0x03
	TCPFESDataOutOfRange       TCPFES = 0x04 // data outside what the command or R2T allows
	TCPFESDataLimitExceeded    TCPFES = 0x05 // R2T Limit Exceeded in 1.0: more than MAXH2CDATA
	TCPFESUnsupportedParameter TCPFES = 0x06 // FEI: byte offset of the parameter
)

func (f TCPFES) String() string {
	switch f {
	case TCPFESInvalidHeaderField:
		return "Invalid PDU Header Field"
	case TCPFESPDUSequenceError:
		return "PDU Sequence Error"
	case TCPFESHeaderDigestError:
		return "Header Digest Error"
	case TCPFESDataOutOfRange:
		return "Data Transfer Out of Range"
	case TCPFESDataLimitExceeded:
		return "Data Transfer Limit Exceeded"
	case TCPFESUnsupportedParameter:
		return "Unsupported Parameter"
	}
	return fmt.Sprintf("FES %#04x", uint16(f))
}

// TCPFatalError is a fatal transport error found in a received PDU: the
// receiver answers it with a TermReq carrying FES and FEI (and the header
// of the PDU in error) and closes the connection.
type TCPFatalError struct {
	FES TCPFES
	// FEI is the byte offset of the field in error for Invalid PDU Header
	// Field and Unsupported Parameter, else 0.
	FEI uint32
	// Why says what was wrong, for logs.
	Why string
}

func (e *TCPFatalError) Error() string {
	return fmt.Sprintf("nvmeof: NVMe/TCP fatal error: %v (FEI %d): %s", e.FES, e.FEI, e.Why)
}

// Is matches another *TCPFatalError with the same FES, so errors.Is(err,
// &TCPFatalError{FES: TCPFESHeaderDigestError}) finds one in a chain.
func (e *TCPFatalError) Is(target error) bool {
	t, ok := target.(*TCPFatalError)
	return ok && t.FES == e.FES
}

func fatal(fes TCPFES, fei int, why string) *TCPFatalError {
	return &TCPFatalError{FES: fes, FEI: uint32(fei), Why: why}
}

// TCPDigest returns the CRC32C of b, the value of a header or data
// digest (sent little-endian). It does not allocate.
func TCPDigest(b []byte) uint32 { return crc32c.Checksum(b) }

// TCPDigestUpdate continues a CRC32C over data in several pieces:
// TCPDigestUpdate(TCPDigest(a), b) == TCPDigest(a+b).
func TCPDigestUpdate(crc uint32, b []byte) uint32 { return crc32c.Update(crc, b) }

// PutTCPDigest writes the digest of data into b[0:4].
func PutTCPDigest(b []byte, data []byte) { le.PutUint32(b, TCPDigest(data)) }

// TCPDigestMatches reports whether b[0:4] holds the digest crc.
func TCPDigestMatches(b []byte, crc uint32) bool { return le.Uint32(b) == crc }

// TCPHeader is the 8-byte common header of every PDU.
type TCPHeader struct {
	Type  TCPPDUType
	Flags TCPFlags
	// HLEN is the length of the PDU header, common header included,
	// without the header digest.
	HLEN uint8
	// PDO is the offset of the data from the start of the PDU, 0 when
	// the PDU carries no data.
	PDO uint8
	// PLEN is the length of the whole PDU: header, digests, padding, data.
	PLEN uint32
}

// ParseTCPHeader decodes the common header from the first 8 bytes of b.
func ParseTCPHeader(b []byte) (TCPHeader, error) {
	if len(b) < TCPCommonHeaderSize {
		return TCPHeader{}, fmt.Errorf("%w: NVMe/TCP common header of %d bytes", ErrShortBuffer, len(b))
	}
	return TCPHeader{
		Type:  TCPPDUType(b[TCPOffsetPDUType]),
		Flags: TCPFlags(b[TCPOffsetFLAGS]),
		HLEN:  b[TCPOffsetHLEN],
		PDO:   b[TCPOffsetPDO],
		PLEN:  le.Uint32(b[TCPOffsetPLEN:]),
	}, nil
}

// MarshalTo writes the common header into b[0:8].
func (h TCPHeader) MarshalTo(b []byte) (int, error) {
	if len(b) < TCPCommonHeaderSize {
		return 0, fmt.Errorf("%w: NVMe/TCP common header into %d bytes", ErrShortBuffer, len(b))
	}
	b[TCPOffsetPDUType] = byte(h.Type)
	b[TCPOffsetFLAGS] = byte(h.Flags)
	b[TCPOffsetHLEN] = h.HLEN
	b[TCPOffsetPDO] = h.PDO
	le.PutUint32(b[TCPOffsetPLEN:], h.PLEN)
	return TCPCommonHeaderSize, nil
}

// tcpHLEN is the header length each PDU type has, 0 for unknown types.
func tcpHLEN(t TCPPDUType) int {
	switch t {
	case TCPPDUICReq, TCPPDUICResp:
		return TCPICReqSize
	case TCPPDUH2CTermReq, TCPPDUC2HTermReq:
		return TCPTermReqHeaderSize
	case TCPPDUCapsuleCmd:
		return TCPCapsuleCmdHeaderSize
	case TCPPDUCapsuleResp:
		return TCPCapsuleRespHeaderSize
	case TCPPDUH2CData, TCPPDUC2HData, TCPPDUR2T:
		return TCPDataHeaderSize
	}
	return 0
}

// TCPHeaderLength returns HLEN for a PDU type (0 for an unknown type).
func TCPHeaderLength(t TCPPDUType) int { return tcpHLEN(t) }

// TCPFromHost reports whether hosts send PDUs of type t (H2C types).
func TCPFromHost(t TCPPDUType) bool {
	switch t {
	case TCPPDUICReq, TCPPDUH2CTermReq, TCPPDUCapsuleCmd, TCPPDUH2CData:
		return true
	}
	return false
}

// TCPFromController reports whether controllers send PDUs of type t.
func TCPFromController(t TCPPDUType) bool {
	switch t {
	case TCPPDUICResp, TCPPDUC2HTermReq, TCPPDUCapsuleResp, TCPPDUC2HData, TCPPDUR2T:
		return true
	}
	return false
}

// tcpAllowedFlags are the flags each type may carry.
func tcpAllowedFlags(t TCPPDUType) TCPFlags {
	switch t {
	case TCPPDUCapsuleCmd:
		return TCPFlagHDGSTF | TCPFlagDDGSTF
	case TCPPDUCapsuleResp, TCPPDUR2T:
		return TCPFlagHDGSTF
	case TCPPDUH2CData:
		return TCPFlagHDGSTF | TCPFlagDDGSTF | TCPFlagLastPDU
	case TCPPDUC2HData:
		return TCPFlagHDGSTF | TCPFlagDDGSTF | TCPFlagLastPDU | TCPFlagSuccess
	}
	return 0 // ICReq, ICResp and TermReqs carry no digests
}

// TCPDataOffset returns the data offset for a header of hlen bytes (its
// digest included) when the receiver asked for PDU data alignment pda
// (HPDA or CPDA, 0's based dwords): the smallest multiple of (pda+1)*4
// at or above hlen; with pda 0 the data follows the header at once.
func TCPDataOffset(hlen, pda int) int {
	if pda == 0 {
		return hlen
	}
	a := tcpAlignment(pda)
	return (hlen + a - 1) / a * a
}

// tcpAlignment is the data alignment in bytes for a PDA of pda.
func tcpAlignment(pda int) int { return (pda + 1) * 4 }

// TCPReceiver is what the receiving end of a connection has negotiated,
// against which Check validates each PDU's common header before anything
// else of the PDU is read.
type TCPReceiver struct {
	// Controller is true on the controller side: it receives H2C PDUs.
	Controller bool
	// Initialized: the ICReq/ICResp exchange is done. Before it the only
	// PDU accepted is ICReq (controller) or ICResp (host), and a TermReq.
	Initialized bool
	// HeaderDigest and DataDigest are the digests negotiated.
	HeaderDigest, DataDigest bool
	// PDA is the data alignment this receiver asked for: CPDA on the
	// controller side, HPDA on the host side.
	PDA int
	// MaxCapsuleData bounds the in-capsule data of a CapsuleCmd,
	// MaxH2CData the data of an H2CData PDU (MAXH2CDATA), MaxC2HData the
	// data of a C2HData PDU.
	MaxCapsuleData, MaxH2CData, MaxC2HData int
}

// TCPLayout says where the parts of a PDU lie, from its common header.
type TCPLayout struct {
	// Header is HLEN plus the header digest, if any: the bytes to read
	// before the data.
	Header int
	// Pad is the padding between the header (and its digest) and PDO.
	Pad int
	// Data is the number of data bytes (0 for PDUs without data; for a
	// TermReq, the error data).
	Data int
	// DataDigest: a data digest follows the data.
	DataDigest bool
}

// Check validates a received common header and returns where the PDU's
// parts are. A violation is a *TCPFatalError with the FES and FEI of the
// TermReq to answer it with:
//
//   - a PDU type the peer does not send, or an unknown one: Invalid PDU
//     Header Field at PDU-Type (0);
//   - anything but ICReq (ICResp) before the connection is initialized,
//     or a second ICReq (ICResp): PDU Sequence Error;
//   - an HLEN other than the type's: Invalid PDU Header Field at HLEN (2);
//   - HDGSTF clear with a header digest negotiated, DDGSTF clear on a
//     PDU with data and a data digest negotiated, SUCCESS without
//     LAST_PDU (on a C2HData): at FLAGS (1);
//   - on a PDU with data, a PDO before the end of the header (and its
//     digest) or not on the PDA alignment: at PDO (3);
//   - a PLEN other than the type's fixed length, data where the type has
//     none, a data PDU without data, or more in-capsule data or C2HData
//     than the limit: at PLEN (4);
//   - an H2CData carrying more than MAXH2CDATA: Data Transfer Limit
//     Exceeded (FEI 0).
//
// What the specification reserves is ignored, as Linux nvmet and SPDK
// ignore it: flags a type does not define, a digest flag for a digest
// not negotiated, DDGSTF on a PDU without data, and PDO on a PDU without
// data (ICReq, TermReq, a CapsuleCmd without in-capsule data, R2T,
// CapsuleResp). A PDO beyond the smallest aligned one is padding the
// sender chose, and is skipped.
//
// Check does not allocate unless it refuses.
func (r *TCPReceiver) Check(h TCPHeader) (TCPLayout, *TCPFatalError) {
	var l TCPLayout
	fromPeer := TCPFromController(h.Type)
	if r.Controller {
		fromPeer = TCPFromHost(h.Type)
	}
	if !fromPeer {
		return l, fatal(TCPFESInvalidHeaderField, TCPOffsetPDUType, fmt.Sprintf("%v not sent to this side", h.Type))
	}
	term := h.Type == TCPPDUH2CTermReq || h.Type == TCPPDUC2HTermReq
	ic := h.Type == TCPPDUICReq || h.Type == TCPPDUICResp
	if !term && ic == r.Initialized {
		if ic {
			return l, fatal(TCPFESPDUSequenceError, 0, fmt.Sprintf("a second %v", h.Type))
		}
		return l, fatal(TCPFESPDUSequenceError, 0, fmt.Sprintf("%v before connection initialization", h.Type))
	}
	hlen := tcpHLEN(h.Type)
	if int(h.HLEN) != hlen {
		return l, fatal(TCPFESInvalidHeaderField, TCPOffsetHLEN, fmt.Sprintf("HLEN %d of a %v", h.HLEN, h.Type))
	}
	if term || ic {
		minLen, maxLen := hlen, hlen
		if term {
			maxLen = hlen + TCPTermReqMaxData
		}
		if h.PLEN < uint32(minLen) || h.PLEN > uint32(maxLen) {
			return l, fatal(TCPFESInvalidHeaderField, TCPOffsetPLEN, fmt.Sprintf("PLEN %d of a %v", h.PLEN, h.Type))
		}
		l.Header = hlen
		l.Data = int(h.PLEN) - hlen
		return l, nil
	}
	// Flags a type does not define are reserved: ignored. A digest flag
	// set without the digest being negotiated is ignored too (the PDU is
	// framed by what was negotiated, as Linux nvmet and SPDK frame it);
	// one missing where the digest was negotiated is refused, as nvmet
	// refuses it.
	flags := h.Flags & tcpAllowedFlags(h.Type)
	if r.HeaderDigest && flags&TCPFlagHDGSTF == 0 {
		return l, fatal(TCPFESInvalidHeaderField, TCPOffsetFLAGS, "HDGSTF clear, header digest negotiated")
	}
	if !r.Controller && flags&TCPFlagSuccess != 0 && flags&TCPFlagLastPDU == 0 {
		return l, fatal(TCPFESInvalidHeaderField, TCPOffsetFLAGS, "SUCCESS without LAST_PDU")
	}
	l.Header = hlen
	if r.HeaderDigest {
		l.Header += TCPDigestSize
	}
	var limit int
	switch h.Type {
	case TCPPDUCapsuleCmd:
		limit = r.MaxCapsuleData
	case TCPPDUH2CData:
		limit = r.MaxH2CData
	case TCPPDUC2HData:
		limit = r.MaxC2HData
	default: // CapsuleResp, R2T: no data, PDO reserved
		if h.PLEN != uint32(l.Header) {
			return l, fatal(TCPFESInvalidHeaderField, TCPOffsetPLEN, fmt.Sprintf("PLEN %d of a %v of %d bytes", h.PLEN, h.Type, l.Header))
		}
		return l, nil
	}
	if h.PLEN == uint32(l.Header) && h.Type == TCPPDUCapsuleCmd {
		// A command without in-capsule data: PDO is reserved, and so is
		// DDGSTF.
		return l, nil
	}
	// The data starts at PDO: at or after the header (and its digest),
	// on the alignment the receiver asked for. A PDO beyond the smallest
	// one is padding the sender chose, which SPDK accepts too.
	pdo := int(h.PDO)
	if pdo < l.Header || (r.PDA != 0 && pdo%tcpAlignment(r.PDA) != 0) {
		return l, fatal(TCPFESInvalidHeaderField, TCPOffsetPDO, fmt.Sprintf("PDO %d of a %v, want %d", h.PDO, h.Type, TCPDataOffset(l.Header, r.PDA)))
	}
	if r.DataDigest && flags&TCPFlagDDGSTF == 0 {
		return l, fatal(TCPFESInvalidHeaderField, TCPOffsetFLAGS, "DDGSTF clear on a PDU with data, data digest negotiated")
	}
	l.Pad = pdo - l.Header
	l.DataDigest = r.DataDigest
	tail := 0
	if r.DataDigest {
		tail = TCPDigestSize
	}
	if h.PLEN <= uint32(pdo+tail) {
		return l, fatal(TCPFESInvalidHeaderField, TCPOffsetPLEN, fmt.Sprintf("PLEN %d of a %v leaves no data", h.PLEN, h.Type))
	}
	n := h.PLEN - uint32(pdo+tail)
	if n > uint32(limit) && h.Type == TCPPDUH2CData {
		return l, fatal(TCPFESDataLimitExceeded, 0, fmt.Sprintf("H2CData of %d bytes, MAXH2CDATA %d", n, limit))
	}
	if n > uint32(limit) {
		return l, fatal(TCPFESInvalidHeaderField, TCPOffsetPLEN, fmt.Sprintf("PLEN %d: %d bytes of data in a %v, at most %d", h.PLEN, n, h.Type, limit))
	}
	l.Data = int(n)
	return l, nil
}

// TCPICReq is the Initialize Connection Request PDU, the first PDU a host
// sends on a connection.
type TCPICReq struct {
	// PFV is the PDU format version; 0 is the only one defined.
	PFV uint16
	// HPDA is the data alignment the host asks for in C2H PDUs: (HPDA+1)
	// dwords, 0..31.
	HPDA uint8
	// Digest is the digests the host asks to enable.
	Digest TCPDigestTypes
	// MAXR2T is the most outstanding R2Ts per command, 0's based.
	MAXR2T uint32
}

// MarshalTo writes the 128-byte ICReq, common header included, with the
// reserved bytes cleared.
func (p *TCPICReq) MarshalTo(b []byte) (int, error) {
	if len(b) < TCPICReqSize {
		return 0, fmt.Errorf("%w: ICReq into %d bytes", ErrShortBuffer, len(b))
	}
	clear(b[:TCPICReqSize])
	TCPHeader{Type: TCPPDUICReq, HLEN: TCPICReqSize, PLEN: TCPICReqSize}.MarshalTo(b)
	le.PutUint16(b[TCPICOffsetPFV:], p.PFV)
	b[TCPICReqOffsetHPDA] = p.HPDA
	b[TCPICOffsetDGST] = byte(p.Digest)
	le.PutUint32(b[TCPICReqOffsetMAXR2T:], p.MAXR2T)
	return TCPICReqSize, nil
}

// MarshalBinary encodes the ICReq.
func (p *TCPICReq) MarshalBinary() ([]byte, error) {
	b := make([]byte, TCPICReqSize)
	_, err := p.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes an ICReq from exactly 128 bytes, common header
// included. A PDU that is not a well-formed ICReq is a *TCPFatalError
// (Invalid PDU Header Field); the parameters a controller may not support
// (PFV, HPDA) are checked by Check.
func (p *TCPICReq) UnmarshalBinary(b []byte) error {
	if err := checkICHeader(b, TCPPDUICReq); err != nil {
		return err
	}
	*p = TCPICReq{
		PFV:    le.Uint16(b[TCPICOffsetPFV:]),
		HPDA:   b[TCPICReqOffsetHPDA],
		Digest: TCPDigestTypes(b[TCPICOffsetDGST]),
		MAXR2T: le.Uint32(b[TCPICReqOffsetMAXR2T:]),
	}
	return nil
}

// Check returns the Unsupported Parameter error a controller answers an
// ICReq with when its PFV is not 0 or its HPDA above 31. Reserved DGST
// bits are ignored (Linux nvmet and SPDK look at the two defined ones
// only).
func (p *TCPICReq) Check() *TCPFatalError {
	switch {
	case p.PFV != 0:
		return fatal(TCPFESUnsupportedParameter, TCPICOffsetPFV, fmt.Sprintf("PFV %d", p.PFV))
	case p.HPDA > TCPMaxPDA:
		return fatal(TCPFESUnsupportedParameter, TCPICReqOffsetHPDA, fmt.Sprintf("HPDA %d", p.HPDA))
	}
	return nil
}

// TCPICResp is the Initialize Connection Response PDU.
type TCPICResp struct {
	PFV uint16
	// CPDA is the data alignment the controller asks for in H2C PDUs.
	CPDA uint8
	// Digest is the digests enabled on the connection.
	Digest TCPDigestTypes
	// MAXH2CDATA is the most data an H2CData PDU may carry: a multiple of
	// 4, at least 4096.
	MAXH2CDATA uint32
}

// MarshalTo writes the 128-byte ICResp, common header included.
func (p *TCPICResp) MarshalTo(b []byte) (int, error) {
	if len(b) < TCPICRespSize {
		return 0, fmt.Errorf("%w: ICResp into %d bytes", ErrShortBuffer, len(b))
	}
	clear(b[:TCPICRespSize])
	TCPHeader{Type: TCPPDUICResp, HLEN: TCPICRespSize, PLEN: TCPICRespSize}.MarshalTo(b)
	le.PutUint16(b[TCPICOffsetPFV:], p.PFV)
	b[TCPICRespOffsetCPDA] = p.CPDA
	b[TCPICOffsetDGST] = byte(p.Digest)
	le.PutUint32(b[TCPICRespOffsetMAXH2CDATA:], p.MAXH2CDATA)
	return TCPICRespSize, nil
}

// MarshalBinary encodes the ICResp.
func (p *TCPICResp) MarshalBinary() ([]byte, error) {
	b := make([]byte, TCPICRespSize)
	_, err := p.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes an ICResp from exactly 128 bytes and checks it
// as a Linux host does: PFV 0, CPDA at most 31, no reserved DGST bits,
// MAXH2CDATA a multiple of 4 and at least 4096. A violation is a
// *TCPFatalError (Invalid PDU Header Field, or Unsupported Parameter).
func (p *TCPICResp) UnmarshalBinary(b []byte) error {
	if err := checkICHeader(b, TCPPDUICResp); err != nil {
		return err
	}
	x := TCPICResp{
		PFV:        le.Uint16(b[TCPICOffsetPFV:]),
		CPDA:       b[TCPICRespOffsetCPDA],
		Digest:     TCPDigestTypes(b[TCPICOffsetDGST]),
		MAXH2CDATA: le.Uint32(b[TCPICRespOffsetMAXH2CDATA:]),
	}
	switch {
	case x.PFV != 0:
		return fatal(TCPFESUnsupportedParameter, TCPICOffsetPFV, fmt.Sprintf("PFV %d", x.PFV))
	case x.CPDA > TCPMaxPDA:
		return fatal(TCPFESInvalidHeaderField, TCPICRespOffsetCPDA, fmt.Sprintf("CPDA %d", x.CPDA))
	case x.Digest&^(TCPHeaderDigest|TCPDataDigest) != 0:
		return fatal(TCPFESInvalidHeaderField, TCPICOffsetDGST, fmt.Sprintf("DGST %#02x", uint8(x.Digest)))
	case x.MAXH2CDATA < TCPMinMAXH2CDATA || x.MAXH2CDATA%4 != 0:
		return fatal(TCPFESInvalidHeaderField, TCPICRespOffsetMAXH2CDATA, fmt.Sprintf("MAXH2CDATA %d", x.MAXH2CDATA))
	}
	*p = x
	return nil
}

func checkICHeader(b []byte, t TCPPDUType) error {
	if len(b) != TCPICReqSize {
		return fmt.Errorf("%w: %v of %d bytes, want %d", ErrLength, t, len(b), TCPICReqSize)
	}
	h, _ := ParseTCPHeader(b)
	switch {
	case h.Type != t:
		return fatal(TCPFESInvalidHeaderField, TCPOffsetPDUType, fmt.Sprintf("%v, want %v", h.Type, t))
	case h.HLEN != TCPICReqSize:
		return fatal(TCPFESInvalidHeaderField, TCPOffsetHLEN, fmt.Sprintf("HLEN %d of a %v", h.HLEN, t))
	case h.PLEN != TCPICReqSize:
		return fatal(TCPFESInvalidHeaderField, TCPOffsetPLEN, fmt.Sprintf("PLEN %d of a %v", h.PLEN, t))
	}
	return nil
}

// TCPTermReq is an H2CTermReq or C2HTermReq: a fatal error report, after
// which the sender closes the connection.
type TCPTermReq struct {
	Type TCPPDUType // TCPPDUH2CTermReq or TCPPDUC2HTermReq
	FES  TCPFES
	FEI  uint32
	// Data is the header of the PDU in error, at most 128 bytes. After
	// UnmarshalBinary it aliases the input.
	Data []byte
}

// Size is the PDU's length, PLEN.
func (p *TCPTermReq) Size() int { return TCPTermReqHeaderSize + min(len(p.Data), TCPTermReqMaxData) }

// MarshalTo writes the TermReq; Data beyond 128 bytes is cut.
func (p *TCPTermReq) MarshalTo(b []byte) (int, error) {
	n := p.Size()
	if len(b) < n {
		return 0, fmt.Errorf("%w: %v into %d bytes", ErrShortBuffer, p.Type, len(b))
	}
	if p.Type != TCPPDUH2CTermReq && p.Type != TCPPDUC2HTermReq {
		return 0, fmt.Errorf("%w: TermReq of type %v", ErrFieldValue, p.Type)
	}
	clear(b[:TCPTermReqHeaderSize])
	TCPHeader{Type: p.Type, HLEN: TCPTermReqHeaderSize, PLEN: uint32(n)}.MarshalTo(b)
	le.PutUint16(b[TCPTermOffsetFES:], uint16(p.FES))
	le.PutUint32(b[TCPTermOffsetFEI:], p.FEI)
	copy(b[TCPTermOffsetData:n], p.Data)
	return n, nil
}

// MarshalBinary encodes the TermReq.
func (p *TCPTermReq) MarshalBinary() ([]byte, error) {
	b := make([]byte, p.Size())
	_, err := p.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes a whole TermReq PDU: PLEN must be len(b),
// between 24 and 152.
func (p *TCPTermReq) UnmarshalBinary(b []byte) error {
	h, err := ParseTCPHeader(b)
	if err != nil {
		return err
	}
	switch {
	case h.Type != TCPPDUH2CTermReq && h.Type != TCPPDUC2HTermReq:
		return fatal(TCPFESInvalidHeaderField, TCPOffsetPDUType, fmt.Sprintf("%v is not a TermReq", h.Type))
	case h.HLEN != TCPTermReqHeaderSize:
		return fatal(TCPFESInvalidHeaderField, TCPOffsetHLEN, "TermReq header fields")
	case int(h.PLEN) != len(b) || len(b) < TCPTermReqHeaderSize || len(b) > TCPTermReqHeaderSize+TCPTermReqMaxData:
		return fmt.Errorf("%w: TermReq of %d bytes with PLEN %d", ErrLength, len(b), h.PLEN)
	}
	*p = TCPTermReq{
		Type: h.Type,
		FES:  TCPFES(le.Uint16(b[TCPTermOffsetFES:])),
		FEI:  le.Uint32(b[TCPTermOffsetFEI:]),
		Data: b[TCPTermOffsetData:],
	}
	return nil
}

// TCPDataPDU is the header of an H2CData, C2HData or R2T PDU (the three
// share a layout; for an R2T, DATAO is R2TO and DATAL is R2TL, and a
// C2HData has no TTAG).
type TCPDataPDU struct {
	Type  TCPPDUType
	Flags TCPFlags
	CCCID uint16
	TTAG  uint16
	DATAO uint32
	DATAL uint32
}

// MarshalTo writes the 24-byte header with the common header's HLEN 24,
// the given PDO and PLEN. Flags must include HDGSTF and DDGSTF as the
// digests present say. It does not allocate.
func (p *TCPDataPDU) MarshalTo(b []byte, pdo uint8, plen uint32) (int, error) {
	if len(b) < TCPDataHeaderSize {
		return 0, fmt.Errorf("%w: %v into %d bytes", ErrShortBuffer, p.Type, len(b))
	}
	TCPHeader{Type: p.Type, Flags: p.Flags, HLEN: TCPDataHeaderSize, PDO: pdo, PLEN: plen}.MarshalTo(b)
	le.PutUint16(b[TCPDataOffsetCCCID:], p.CCCID)
	le.PutUint16(b[TCPDataOffsetTTAG:], p.TTAG)
	le.PutUint32(b[TCPDataOffsetDATAO:], p.DATAO)
	le.PutUint32(b[TCPDataOffsetDATAL:], p.DATAL)
	clear(b[TCPDataOffsetDATAL+4 : TCPDataHeaderSize])
	return TCPDataHeaderSize, nil
}

// ParseTCPDataPDU decodes the 24-byte header of an H2CData, C2HData or
// R2T PDU whose common header Check accepted. Reserved bytes are not
// checked (a sender may leave them nonzero), except that the receiver
// will compare DATAL with the data the PDU carries.
func ParseTCPDataPDU(b []byte) (TCPDataPDU, error) {
	if len(b) < TCPDataHeaderSize {
		return TCPDataPDU{}, fmt.Errorf("%w: data PDU header of %d bytes", ErrShortBuffer, len(b))
	}
	return TCPDataPDU{
		Type:  TCPPDUType(b[TCPOffsetPDUType]),
		Flags: TCPFlags(b[TCPOffsetFLAGS]),
		CCCID: le.Uint16(b[TCPDataOffsetCCCID:]),
		TTAG:  le.Uint16(b[TCPDataOffsetTTAG:]),
		DATAO: le.Uint32(b[TCPDataOffsetDATAO:]),
		DATAL: le.Uint32(b[TCPDataOffsetDATAL:]),
	}, nil
}

// PutTCPCapsuleHeader writes the common header of a CapsuleCmd (HLEN 72)
// or CapsuleResp (HLEN 24) into b; the SQE or CQE follows at offset 8.
func PutTCPCapsuleHeader(b []byte, t TCPPDUType, flags TCPFlags, pdo uint8, plen uint32) {
	TCPHeader{Type: t, Flags: flags, HLEN: uint8(tcpHLEN(t)), PDO: pdo, PLEN: plen}.MarshalTo(b)
}
