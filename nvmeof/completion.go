package nvmeof

import "fmt"

// CompletionSize is the size of a completion queue entry: the whole of a
// response capsule on RDMA and TCP (NVMe over Fabrics carries no data in
// response capsules).
const CompletionSize = 16

// Byte offsets of the fields of a completion queue entry (NVMe Base 2.x,
// 4.2.1 "Common Completion Queue Entry" and 4.2.2 "Fabrics Command Common
// CQE").
const (
	CompletionOffsetDW0    = 0  // command specific
	CompletionOffsetDW1    = 4  // command specific
	CompletionOffsetSQHD   = 8  // SQ Head Pointer
	CompletionOffsetSQID   = 10 // SQ Identifier (reserved on fabrics)
	CompletionOffsetCID    = 12 // Command Identifier
	CompletionOffsetStatus = 14 // phase tag in bit 0, Status in bits 15:1
)

// SQHDFlowControlDisabled is the SQHD a controller returns in the response
// to a Connect command that asked to disable SQ flow control, when it
// agrees to.
const SQHDFlowControlDisabled = 0xffff

// Completion is a 16-byte completion queue entry. Every byte of the entry
// has a field here, so decoding and encoding round-trip exactly. Fabrics
// responses leave the phase tag reserved; it is kept for memory-based
// queues and for byte-exact copies.
//
// Completion is a value type: encoding and decoding it do not allocate.
type Completion struct {
	DW0  uint32
	DW1  uint32
	SQHD uint16
	SQID uint16
	CID  uint16
	// Phase is the phase tag, bit 0 of the status halfword.
	Phase bool
	// Status is bits 15:1 of the status halfword. Only its low 15 bits go
	// on the wire.
	Status Status
}

// MarshalTo writes the 16-byte entry into b, which must hold at least
// CompletionSize bytes, and returns CompletionSize. It does not allocate.
func (c *Completion) MarshalTo(b []byte) (int, error) {
	if len(b) < CompletionSize {
		return 0, sizeError("completion", len(b), CompletionSize, ErrShortBuffer)
	}
	b = b[:CompletionSize]
	le.PutUint32(b[CompletionOffsetDW0:], c.DW0)
	le.PutUint32(b[CompletionOffsetDW1:], c.DW1)
	le.PutUint16(b[CompletionOffsetSQHD:], c.SQHD)
	le.PutUint16(b[CompletionOffsetSQID:], c.SQID)
	le.PutUint16(b[CompletionOffsetCID:], c.CID)
	sts := uint16(c.Status&statusMask) << 1
	if c.Phase {
		sts |= 1
	}
	le.PutUint16(b[CompletionOffsetStatus:], sts)
	return CompletionSize, nil
}

// AppendBinary appends the 16-byte entry to b.
func (c *Completion) AppendBinary(b []byte) ([]byte, error) {
	n := len(b)
	b = append(b, make([]byte, CompletionSize)...)
	_, err := c.MarshalTo(b[n:])
	return b, err
}

// MarshalBinary returns the 16-byte entry.
func (c *Completion) MarshalBinary() ([]byte, error) {
	return c.AppendBinary(make([]byte, 0, CompletionSize))
}

// UnmarshalBinary decodes a completion queue entry from exactly 16 bytes.
// It does not allocate.
func (c *Completion) UnmarshalBinary(b []byte) error {
	if err := needExactly("completion", b, CompletionSize); err != nil {
		return err
	}
	c.DW0 = le.Uint32(b[CompletionOffsetDW0:])
	c.DW1 = le.Uint32(b[CompletionOffsetDW1:])
	c.SQHD = le.Uint16(b[CompletionOffsetSQHD:])
	c.SQID = le.Uint16(b[CompletionOffsetSQID:])
	c.CID = le.Uint16(b[CompletionOffsetCID:])
	sts := le.Uint16(b[CompletionOffsetStatus:])
	c.Phase = sts&1 != 0
	c.Status = Status(sts >> 1)
	return nil
}

// Value64 returns DW1:DW0 as one 64-bit value, as a Property Get response
// carries an 8-byte property.
func (c *Completion) Value64() uint64 { return uint64(c.DW1)<<32 | uint64(c.DW0) }

// SetValue64 stores v in DW0 (low half) and DW1 (high half).
func (c *Completion) SetValue64(v uint64) {
	c.DW0 = uint32(v)
	c.DW1 = uint32(v >> 32)
}

// Err returns nil if the command succeeded and its Status otherwise.
func (c *Completion) Err() error { return c.Status.Err() }

// String describes the completion for logs.
func (c *Completion) String() string {
	return fmt.Sprintf("cid=%d sqhd=%d dw0=%#x: %s", c.CID, c.SQHD, c.DW0, c.Status.String())
}
