package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// CommandSize is the size of a submission queue entry: the command part of
// every command capsule.
const CommandSize = 64

// Byte offsets of the fields of a submission queue entry (NVMe Base 2.x,
// 4.1.1 "Common Command Format" and 4.1.2 "Fabrics Command Common SQE").
const (
	CommandOffsetOpcode = 0  // OPC, CDW0 bits 7:0
	CommandOffsetFlags  = 1  // FUSE bits 1:0, PSDT bits 7:6 of this byte
	CommandOffsetCID    = 2  // CID, CDW0 bits 31:16
	CommandOffsetNSID   = 4  // NSID
	CommandOffsetFCTYPE = 4  // FCTYPE of a Fabrics command (opcode 7Fh)
	CommandOffsetCDW2   = 8  // Command Dword 2
	CommandOffsetCDW3   = 12 // Command Dword 3
	CommandOffsetMPTR   = 16 // Metadata Pointer
	CommandOffsetDPTR   = 24 // Data Pointer: SGL Descriptor 1 on fabrics
	CommandOffsetCDW10  = 40
	CommandOffsetCDW11  = 44
	CommandOffsetCDW12  = 48
	CommandOffsetCDW13  = 52
	CommandOffsetCDW14  = 56
	CommandOffsetCDW15  = 60
)

// Opcode is a command opcode. Admin and I/O opcodes share values (02h is
// Get Log Page on the admin queue and Read on an I/O queue), so the queue
// says which set a command belongs to; OpFabrics is the same on both.
type Opcode uint8

// DataDirection is the data transfer direction that bits 1:0 of an opcode
// (or of a Fabrics command type) encode.
type DataDirection uint8

// Data transfer directions.
const (
	NoData           DataDirection = 0 // 00b: no data transfer
	HostToController DataDirection = 1 // 01b: the host sends data (a write)
	ControllerToHost DataDirection = 2 // 10b: the controller sends data (a read)
	Bidirectional    DataDirection = 3 // 11b
)

// Direction returns the data transfer direction encoded in the opcode.
func (o Opcode) Direction() DataDirection { return DataDirection(o & 3) }

// Fuse is the FUSE field (bits 1:0 of CDW0).
type Fuse uint8

// Fused operation values.
const (
	FuseNormal Fuse = 0 // not fused
	FuseFirst  Fuse = 1 // first command of a fused operation
	FuseSecond Fuse = 2 // second command of a fused operation
)

// PSDT is the PRP or SGL for Data Transfer field (bits 7:6 of CDW0).
type PSDT uint8

// PSDT values. NVMe over Fabrics uses SGLs only.
const (
	PSDTPRP        PSDT = 0 // PRPs (memory transports); no data for Fabrics commands
	PSDTSGLBuffer  PSDT = 1 // SGL; MPTR is the address of a contiguous metadata buffer
	PSDTSGLSegment PSDT = 2 // SGL; MPTR is the address of an SGL segment
)

const (
	fuseMask  = 0x03
	psdtMask  = 0xc0
	psdtShift = 6
)

// Command is a 64-byte submission queue entry. Every byte of the entry has
// a field here, so decoding and encoding round-trip exactly: reserved bits
// are kept, not cleared. The command-specific dwords (CDW10..CDW15, and
// NSID for Fabrics commands, whose byte 4 is FCTYPE) are read and written
// through the accessor methods of the command sets (nvm.go, admin.go,
// fabrics.go).
//
// Command is a value type with no pointers: copying, encoding and decoding
// it do not allocate.
type Command struct {
	Opcode Opcode
	// Flags is byte 1: FUSE in bits 1:0 and PSDT in bits 7:6; bits 5:2 are
	// reserved. Read and write it with Fuse/SetFuse and PSDT/SetPSDT.
	Flags uint8
	CID   uint16
	// NSID is the namespace identifier. For a Fabrics command its low
	// byte is FCTYPE (see FabricsType) and the rest is reserved.
	NSID uint32
	CDW2 uint32
	CDW3 uint32
	MPTR uint64
	// DPTR is the data pointer; NVMe over Fabrics puts SGL Descriptor 1 here.
	DPTR  SGLDescriptor
	CDW10 uint32
	CDW11 uint32
	CDW12 uint32
	CDW13 uint32
	CDW14 uint32
	CDW15 uint32
}

// Fuse returns the FUSE field.
func (c *Command) Fuse() Fuse { return Fuse(c.Flags & fuseMask) }

// SetFuse sets the FUSE field.
func (c *Command) SetFuse(f Fuse) { c.Flags = c.Flags&^fuseMask | uint8(f)&fuseMask }

// PSDT returns the PSDT field.
func (c *Command) PSDT() PSDT { return PSDT(c.Flags&psdtMask) >> psdtShift }

// SetPSDT sets the PSDT field.
func (c *Command) SetPSDT(p PSDT) { c.Flags = c.Flags&^psdtMask | uint8(p)<<psdtShift&psdtMask }

// IsFabrics reports whether the command is a Fabrics command (opcode 7Fh).
func (c *Command) IsFabrics() bool { return c.Opcode == OpFabrics }

// Direction returns the command's data transfer direction: from FCTYPE
// for a Fabrics command, from the opcode otherwise.
func (c *Command) Direction() DataDirection {
	if c.IsFabrics() {
		return DataDirection(c.FabricsType() & 3)
	}
	return c.Opcode.Direction()
}

// MarshalTo writes the 64-byte entry into b, which must hold at least
// CommandSize bytes, and returns CommandSize. It does not allocate.
func (c *Command) MarshalTo(b []byte) (int, error) {
	if len(b) < CommandSize {
		return 0, sizeError("command", len(b), CommandSize, ErrShortBuffer)
	}
	b = b[:CommandSize]
	b[CommandOffsetOpcode] = byte(c.Opcode)
	b[CommandOffsetFlags] = c.Flags
	le.PutUint16(b[CommandOffsetCID:], c.CID)
	le.PutUint32(b[CommandOffsetNSID:], c.NSID)
	le.PutUint32(b[CommandOffsetCDW2:], c.CDW2)
	le.PutUint32(b[CommandOffsetCDW3:], c.CDW3)
	le.PutUint64(b[CommandOffsetMPTR:], c.MPTR)
	copy(b[CommandOffsetDPTR:CommandOffsetCDW10], c.DPTR[:])
	le.PutUint32(b[CommandOffsetCDW10:], c.CDW10)
	le.PutUint32(b[CommandOffsetCDW11:], c.CDW11)
	le.PutUint32(b[CommandOffsetCDW12:], c.CDW12)
	le.PutUint32(b[CommandOffsetCDW13:], c.CDW13)
	le.PutUint32(b[CommandOffsetCDW14:], c.CDW14)
	le.PutUint32(b[CommandOffsetCDW15:], c.CDW15)
	return CommandSize, nil
}

// AppendBinary appends the 64-byte entry to b.
func (c *Command) AppendBinary(b []byte) ([]byte, error) {
	n := len(b)
	b = append(b, make([]byte, CommandSize)...)
	_, err := c.MarshalTo(b[n:])
	return b, err
}

// MarshalBinary returns the 64-byte entry.
func (c *Command) MarshalBinary() ([]byte, error) {
	return c.AppendBinary(make([]byte, 0, CommandSize))
}

// UnmarshalBinary decodes a submission queue entry from exactly 64 bytes.
// Any 64 bytes decode: what the fields mean is checked by the accessors and
// parsers of each command. It does not allocate.
func (c *Command) UnmarshalBinary(b []byte) error {
	if err := needExactly("command", b, CommandSize); err != nil {
		return err
	}
	c.decode((*[CommandSize]byte)(b))
	return nil
}

func (c *Command) decode(b *[CommandSize]byte) {
	c.Opcode = Opcode(b[CommandOffsetOpcode])
	c.Flags = b[CommandOffsetFlags]
	c.CID = le.Uint16(b[CommandOffsetCID:])
	c.NSID = le.Uint32(b[CommandOffsetNSID:])
	c.CDW2 = le.Uint32(b[CommandOffsetCDW2:])
	c.CDW3 = le.Uint32(b[CommandOffsetCDW3:])
	c.MPTR = le.Uint64(b[CommandOffsetMPTR:])
	copy(c.DPTR[:], b[CommandOffsetDPTR:CommandOffsetCDW10])
	c.CDW10 = le.Uint32(b[CommandOffsetCDW10:])
	c.CDW11 = le.Uint32(b[CommandOffsetCDW11:])
	c.CDW12 = le.Uint32(b[CommandOffsetCDW12:])
	c.CDW13 = le.Uint32(b[CommandOffsetCDW13:])
	c.CDW14 = le.Uint32(b[CommandOffsetCDW14:])
	c.CDW15 = le.Uint32(b[CommandOffsetCDW15:])
}

// ParseCapsule splits a command capsule (as an RDMA Send or an NVMe/TCP
// CapsuleCmd PDU delivers it) into its submission queue entry and what
// follows it: SGL descriptors and in-capsule data. The returned slice
// aliases b. It does not allocate.
func ParseCapsule(b []byte) (Command, []byte, error) {
	var c Command
	if len(b) < CommandSize {
		return c, nil, sizeError("command capsule", len(b), CommandSize, ErrShortBuffer)
	}
	c.decode((*[CommandSize]byte)(b[:CommandSize]))
	return c, b[CommandSize:], nil
}

// String describes the command for logs.
func (c *Command) String() string {
	if c.IsFabrics() {
		return fmt.Sprintf("fabrics %v cid=%d", c.FabricsType(), c.CID)
	}
	return fmt.Sprintf("opcode %02Xh cid=%d nsid=%d", uint8(c.Opcode), c.CID, c.NSID)
}

// le is the byte order of every NVMe structure.
var le = binary.LittleEndian

// bits returns the width-bit field of v that starts at bit shift.
func bits(v uint32, shift, width uint) uint32 { return v >> shift & (1<<width - 1) }

// setBits returns v with the width-bit field at shift replaced by f; bits
// of f above width are dropped.
func setBits(v uint32, shift, width uint, f uint32) uint32 {
	m := uint32(1<<width-1) << shift
	return v&^m | f<<shift&m
}

// bit reports whether bit n of v is set.
func bit(v uint32, n uint) bool { return v>>n&1 != 0 }

// setBit returns v with bit n set to on.
func setBit(v uint32, n uint, on bool) uint32 {
	if on {
		return v | 1<<n
	}
	return v &^ (1 << n)
}
