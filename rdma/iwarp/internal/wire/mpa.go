package wire

import "encoding/binary"

// MPA Request and Reply frames (RFC 5044 section 7.1):
//
//	0                   1                   2                   3
//	0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Key (16 bytes: "MPA ID Req Frame" or "MPA ID Rep Frame")    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|M|C|R|   Res   |     Rev       |          PD_Length            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Private Data (PD_Length bytes, at most 512)        |
const (
	MPAKeyLen       = 16
	MPAHeaderLen    = 20
	MPAMaxPrivate   = 512
	MPARevision     = 1
	mpaOffKey       = 0
	mpaOffFlags     = 16
	mpaOffRev       = 17
	mpaOffPDLength  = 18
	mpaFlagMarkers  = 0x80
	mpaFlagCRC      = 0x40
	mpaFlagReject   = 0x20
	mpaFlagReserved = 0x1f
)

var (
	mpaKeyReq = [MPAKeyLen]byte{'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e'}
	mpaKeyRep = [MPAKeyLen]byte{'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'p', ' ', 'F', 'r', 'a', 'm', 'e'}
)

// MPAHeader is the fixed 20-byte part of an MPA Request or Reply.
type MPAHeader struct {
	Reply    bool   // key "MPA ID Rep Frame" (else Request)
	Markers  bool   // M: the sender wants markers in the FPDUs it receives
	CRC      bool   // C: the sender wants CRC
	Reject   bool   // R: Reply only, the connection is refused
	Rev      uint8  // Rev, 1 for RFC 5044
	PDLength uint16 // PD_Length, at most MPAMaxPrivate
}

// UnmarshalMPAHeader decodes the first MPAHeaderLen bytes of b. Reserved
// bits are ignored as RFC 5044 asks. It checks the key, Rev and
// PD_Length but not that the private data is present.
func UnmarshalMPAHeader(b []byte) (MPAHeader, error) {
	var h MPAHeader
	if len(b) < MPAHeaderLen {
		return h, ErrShort
	}
	switch [MPAKeyLen]byte(b[mpaOffKey : mpaOffKey+MPAKeyLen]) {
	case mpaKeyReq:
	case mpaKeyRep:
		h.Reply = true
	default:
		return h, ErrMPAKey
	}
	f := b[mpaOffFlags]
	h.Markers = f&mpaFlagMarkers != 0
	h.CRC = f&mpaFlagCRC != 0
	h.Reject = f&mpaFlagReject != 0
	h.Rev = b[mpaOffRev]
	h.PDLength = binary.BigEndian.Uint16(b[mpaOffPDLength:])
	if h.Rev != MPARevision {
		return h, ErrMPARevision
	}
	if h.PDLength > MPAMaxPrivate {
		return h, ErrPrivateTooLong
	}
	if h.Reject && !h.Reply {
		return h, ErrMPAKey
	}
	return h, nil
}

// MarshalTo writes the 20-byte header into b and returns MPAHeaderLen.
func (h *MPAHeader) MarshalTo(b []byte) (int, error) {
	if len(b) < MPAHeaderLen {
		return 0, ErrShort
	}
	if h.PDLength > MPAMaxPrivate {
		return 0, ErrPrivateTooLong
	}
	if h.Reply {
		copy(b[mpaOffKey:], mpaKeyRep[:])
	} else {
		copy(b[mpaOffKey:], mpaKeyReq[:])
	}
	var f byte
	if h.Markers {
		f |= mpaFlagMarkers
	}
	if h.CRC {
		f |= mpaFlagCRC
	}
	if h.Reject {
		f |= mpaFlagReject
	}
	b[mpaOffFlags] = f
	b[mpaOffRev] = h.Rev
	binary.BigEndian.PutUint16(b[mpaOffPDLength:], h.PDLength)
	return MPAHeaderLen, nil
}

// MPAFrame is a whole Request or Reply: header and private data.
type MPAFrame struct {
	MPAHeader
	// Private aliases the decoded buffer; copy it to keep it.
	Private []byte
}

// Len is the encoded size.
func (f *MPAFrame) Len() int { return MPAHeaderLen + len(f.Private) }

// MarshalTo writes the frame into b, setting PDLength from Private.
func (f *MPAFrame) MarshalTo(b []byte) (int, error) {
	if len(f.Private) > MPAMaxPrivate {
		return 0, ErrPrivateTooLong
	}
	if len(b) < f.Len() {
		return 0, ErrShort
	}
	f.PDLength = uint16(len(f.Private))
	if _, err := f.MPAHeader.MarshalTo(b); err != nil {
		return 0, err
	}
	copy(b[MPAHeaderLen:], f.Private)
	return f.Len(), nil
}

// Unmarshal decodes a whole frame; b must hold exactly header and
// private data.
func (f *MPAFrame) Unmarshal(b []byte) error {
	h, err := UnmarshalMPAHeader(b)
	if err != nil {
		return err
	}
	if len(b) != MPAHeaderLen+int(h.PDLength) {
		return ErrBadLength
	}
	f.MPAHeader = h
	f.Private = b[MPAHeaderLen:len(b):len(b)]
	return nil
}
