package wire

import "encoding/binary"

// RDMA Read Request header (RFC 5040 section 4.4), after the untagged DDP
// header on queue 1:
//
//	+---------------------------------------------------------------+
//	|                        Data Sink STag                         |
//	|                 Data Sink Tagged Offset (64 bits)             |
//	|                  RDMA Read Message Size                       |
//	|                       Data Source STag                        |
//	|                Data Source Tagged Offset (64 bits)            |
//	+---------------------------------------------------------------+
const (
	ReadRequestLen = 28
	OffSinkSTag    = 0
	OffSinkTO      = 4
	OffReadSize    = 12
	OffSrcSTag     = 16
	OffSrcTO       = 20
)

// ReadRequest is the RDMAP Read Request header.
type ReadRequest struct {
	SinkSTag uint32
	SinkTO   uint64
	Size     uint32
	SrcSTag  uint32
	SrcTO    uint64
}

// MarshalTo writes the 28-byte header into b.
func (r *ReadRequest) MarshalTo(b []byte) int {
	_ = b[ReadRequestLen-1]
	binary.BigEndian.PutUint32(b[OffSinkSTag:], r.SinkSTag)
	binary.BigEndian.PutUint64(b[OffSinkTO:], r.SinkTO)
	binary.BigEndian.PutUint32(b[OffReadSize:], r.Size)
	binary.BigEndian.PutUint32(b[OffSrcSTag:], r.SrcSTag)
	binary.BigEndian.PutUint64(b[OffSrcTO:], r.SrcTO)
	return ReadRequestLen
}

// Unmarshal decodes a Read Request header; b must hold exactly one.
func (r *ReadRequest) Unmarshal(b []byte) error {
	if len(b) != ReadRequestLen {
		return ErrBadLength
	}
	r.SinkSTag = binary.BigEndian.Uint32(b[OffSinkSTag:])
	r.SinkTO = binary.BigEndian.Uint64(b[OffSinkTO:])
	r.Size = binary.BigEndian.Uint32(b[OffReadSize:])
	r.SrcSTag = binary.BigEndian.Uint32(b[OffSrcSTag:])
	r.SrcTO = binary.BigEndian.Uint64(b[OffSrcTO:])
	return nil
}

// Terminate header (RFC 5040 section 4.8), after the untagged DDP header
// on queue 2:
//
//	0                   1                   2                   3
//	0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Layer | EType |  Error Code   |M|D|R|         Reserved        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  DDP Segment Length (if D)    |  Terminated DDP Header (if D) |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  (14 tagged or 18 untagged)   |
//	|              Terminated RDMA Header (if R, 28 bytes)          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// M says the DDP Segment Length is valid; D that the offending DDP header
// is copied; R that the offending Read Request header is copied.
const (
	TermCtrlLen     = 4
	OffTermLayer    = 0 // Layer in the high nibble, EType in the low
	OffTermCode     = 1
	OffTermHdrct    = 2
	OffTermSegLen   = 4
	OffTermDDPHdr   = 6
	termFlagM       = 0x80
	termFlagD       = 0x40
	termFlagR       = 0x20
	TerminateMaxLen = TermCtrlLen + 2 + UntaggedHeaderLen + ReadRequestLen
)

// Terminate is an RDMAP Terminate message body.
type Terminate struct {
	Cause TermCause
	// SegLenValid (M): SegLen is the offending segment's DDP length.
	SegLenValid bool
	SegLen      uint16
	// DDPHeader (D): the offending segment's DDP header, 14 or 18 bytes,
	// empty when absent.
	DDPHeader []byte
	// RDMAHeader (R): the offending Read Request header, 28 bytes, or empty.
	RDMAHeader []byte
}

// Len is the encoded size.
func (t *Terminate) Len() int {
	n := TermCtrlLen
	if len(t.DDPHeader) > 0 {
		n += 2 + len(t.DDPHeader)
	}
	return n + len(t.RDMAHeader)
}

// MarshalTo writes the Terminate body into b and returns its length. It
// fails with ErrBadLength if a copied header has the wrong size.
func (t *Terminate) MarshalTo(b []byte) (int, error) {
	if d := len(t.DDPHeader); d != 0 && d != HeaderLenOf(t.DDPHeader[0]) {
		return 0, ErrBadLength
	}
	if r := len(t.RDMAHeader); r != 0 && r != ReadRequestLen {
		return 0, ErrBadLength
	}
	if t.Cause.Layer > 0xf || t.Cause.EType > 0xf {
		return 0, ErrBadLength
	}
	n := t.Len()
	if len(b) < n {
		return 0, ErrShort
	}
	b[OffTermLayer] = byte(t.Cause.Layer)<<4 | t.Cause.EType
	b[OffTermCode] = t.Cause.Code
	var f byte
	if len(t.DDPHeader) > 0 {
		f |= termFlagD
		if t.SegLenValid {
			f |= termFlagM
		}
	}
	if len(t.RDMAHeader) > 0 {
		f |= termFlagR
	}
	b[OffTermHdrct] = f
	b[OffTermHdrct+1] = 0
	off := TermCtrlLen
	if len(t.DDPHeader) > 0 {
		var sl uint16
		if t.SegLenValid {
			sl = t.SegLen
		}
		binary.BigEndian.PutUint16(b[off:], sl)
		off += 2
		off += copy(b[off:], t.DDPHeader)
	}
	off += copy(b[off:], t.RDMAHeader)
	return off, nil
}

// Unmarshal decodes a Terminate body; b must hold exactly one. The header
// slices alias b.
func (t *Terminate) Unmarshal(b []byte) error {
	if len(b) < TermCtrlLen {
		return ErrShort
	}
	t.Cause = TermCause{Layer(b[OffTermLayer] >> 4), b[OffTermLayer] & 0xf, b[OffTermCode]}
	f := b[OffTermHdrct]
	t.SegLenValid = f&termFlagM != 0
	t.SegLen = 0
	t.DDPHeader, t.RDMAHeader = nil, nil
	off := TermCtrlLen
	if f&termFlagD != 0 {
		if len(b) < off+3 {
			return ErrShort
		}
		sl := binary.BigEndian.Uint16(b[off:])
		if t.SegLenValid {
			t.SegLen = sl
		}
		off += 2
		hl := HeaderLenOf(b[off])
		if len(b) < off+hl {
			return ErrShort
		}
		t.DDPHeader = b[off : off+hl : off+hl]
		off += hl
	} else if t.SegLenValid {
		return ErrBadLength
	}
	if f&termFlagR != 0 {
		if len(b) < off+ReadRequestLen {
			return ErrShort
		}
		t.RDMAHeader = b[off : off+ReadRequestLen : off+ReadRequestLen]
		off += ReadRequestLen
	}
	if off != len(b) {
		return ErrBadLength
	}
	return nil
}

// Immediate Data (RFC 7306 section 5.4): an untagged message on queue 0
// whose payload is exactly 8 bytes. RFC 7306 leaves the 8 bytes to the
// ULP; the provider's verbs layer uses them as:
//
//	+---------------------------------------------------------------+
//	|                 Immediate value (WR Imm, 32 bits)             |
//	+---------------------------------------------------------------+
//	|                    Kind (ImmKindWrite or ImmKindSend)         |
//	+---------------------------------------------------------------+
const (
	ImmDataLen  = 8
	OffImmValue = 0
	OffImmKind  = 4
)

// Kinds of Immediate Data messages.
const (
	// ImmKindWrite: the immediate of an RDMA Write with Immediate; it
	// consumes a receive and completes it with the value.
	ImmKindWrite uint32 = 0
	// ImmKindSend: the immediate of the Send that follows at once on
	// queue 0; that Send's receive completion carries the value.
	ImmKindSend uint32 = 1
)

// ImmData is the 8-byte Immediate Data payload.
type ImmData struct {
	Value uint32
	Kind  uint32
}

// MarshalTo writes the payload into b.
func (d *ImmData) MarshalTo(b []byte) int {
	_ = b[ImmDataLen-1]
	binary.BigEndian.PutUint32(b[OffImmValue:], d.Value)
	binary.BigEndian.PutUint32(b[OffImmKind:], d.Kind)
	return ImmDataLen
}

// Unmarshal decodes the payload; b must be exactly 8 bytes and Kind known.
func (d *ImmData) Unmarshal(b []byte) error {
	if len(b) != ImmDataLen {
		return ErrBadLength
	}
	d.Value = binary.BigEndian.Uint32(b[OffImmValue:])
	d.Kind = binary.BigEndian.Uint32(b[OffImmKind:])
	if d.Kind > ImmKindSend {
		return ErrBadLength
	}
	return nil
}
