package nvmeof

// NVM command set I/O opcodes (NVM Command Set Specification 1.0, 3).
const (
	IOFlush             Opcode = 0x00
	IOWrite             Opcode = 0x01
	IORead              Opcode = 0x02
	IOWriteZeroes       Opcode = 0x08
	IODatasetManagement Opcode = 0x09
)

// NSIDAll is the broadcast namespace ID (all namespaces; Flush, features,
// log pages).
const NSIDAll uint32 = 0xffffffff

// Bit positions in CDW12 of Read, Write and Write Zeroes.
const (
	cdw12NLBWidth = 16 // NLB, bits 15:0
	cdw12DEACBit  = 25 // Write Zeroes: Deallocate
	cdw12FUABit   = 30 // Force Unit Access
	cdw12LRBit    = 31 // Limited Retry
	maxNLBBlocks  = 1 << cdw12NLBWidth
)

// SLBA returns the Starting LBA of a Read, Write or Write Zeroes command
// (CDW11:CDW10).
func (c *Command) SLBA() uint64 { return uint64(c.CDW11)<<32 | uint64(c.CDW10) }

// SetSLBA sets the Starting LBA.
func (c *Command) SetSLBA(lba uint64) {
	c.CDW10 = uint32(lba)
	c.CDW11 = uint32(lba >> 32)
}

// NLB returns the Number of Logical Blocks field (CDW12 bits 15:0) as it
// is on the wire: 0's based, so 0 means one block. See Blocks.
func (c *Command) NLB() uint16 { return uint16(c.CDW12) }

// SetNLB sets the 0's based Number of Logical Blocks field.
func (c *Command) SetNLB(nlb uint16) { c.CDW12 = setBits(c.CDW12, 0, cdw12NLBWidth, uint32(nlb)) }

// Blocks returns the number of logical blocks the command covers: NLB+1,
// from 1 to 65536.
func (c *Command) Blocks() uint32 { return uint32(c.NLB()) + 1 }

// SetBlocks sets NLB to cover n logical blocks, 1 <= n <= 65536.
func (c *Command) SetBlocks(n uint32) error {
	if n == 0 || n > maxNLBBlocks {
		return &FieldError{Structure: "NVM command", Field: "NLB", Offset: CommandOffsetCDW12, Err: ErrFieldValue}
	}
	c.SetNLB(uint16(n - 1))
	return nil
}

// FUA reports Force Unit Access (CDW12 bit 30).
func (c *Command) FUA() bool { return bit(c.CDW12, cdw12FUABit) }

// SetFUA sets Force Unit Access.
func (c *Command) SetFUA(on bool) { c.CDW12 = setBit(c.CDW12, cdw12FUABit, on) }

// LimitedRetry reports Limited Retry (CDW12 bit 31).
func (c *Command) LimitedRetry() bool { return bit(c.CDW12, cdw12LRBit) }

// DEAC reports Deallocate (CDW12 bit 25) of a Write Zeroes command: the
// host allows the blocks to be deallocated rather than written.
func (c *Command) DEAC() bool { return bit(c.CDW12, cdw12DEACBit) }

// SetDEAC sets Deallocate.
func (c *Command) SetDEAC(on bool) { c.CDW12 = setBit(c.CDW12, cdw12DEACBit, on) }

// DSMAttributes is CDW11 of a Dataset Management command.
type DSMAttributes uint32

// Dataset Management attributes.
const (
	DSMIntegralRead  DSMAttributes = 1 << 0 // IDR
	DSMIntegralWrite DSMAttributes = 1 << 1 // IDW
	DSMDeallocate    DSMAttributes = 1 << 2 // AD: deallocate the ranges
)

// MaxDSMRanges is the most ranges a Dataset Management command carries.
const MaxDSMRanges = 256

// DSMRanges returns the number of ranges of a Dataset Management command:
// NR (CDW10 bits 7:0) plus one.
func (c *Command) DSMRanges() int { return int(bits(c.CDW10, 0, 8)) + 1 }

// SetDSMRanges sets NR for n ranges, 1 <= n <= 256.
func (c *Command) SetDSMRanges(n int) error {
	if n < 1 || n > MaxDSMRanges {
		return &FieldError{Structure: "Dataset Management command", Field: "NR", Offset: CommandOffsetCDW10, Err: ErrFieldValue}
	}
	c.CDW10 = setBits(c.CDW10, 0, 8, uint32(n-1))
	return nil
}

// DSMAttributes returns the attributes (CDW11) of a Dataset Management command.
func (c *Command) DSMAttributes() DSMAttributes { return DSMAttributes(c.CDW11) }

// DSMRangeSize is the size of a Dataset Management range.
const DSMRangeSize = 16

// Byte offsets inside a Dataset Management range (NVM Command Set
// Specification 1.0, Figure "Dataset Management – Range Definition").
const (
	DSMRangeOffsetContextAttributes = 0 // 4 bytes
	DSMRangeOffsetLength            = 4 // length in logical blocks, 4 bytes
	DSMRangeOffsetSLBA              = 8 // starting LBA, 8 bytes
)

// DSMRange is one range of a Dataset Management command's data.
type DSMRange struct {
	ContextAttributes uint32
	// Length is the number of logical blocks (1's based; 0 is an empty range).
	Length uint32
	SLBA   uint64
}

// MarshalDSMRanges writes ranges into b and returns the bytes written. It
// does not allocate.
func MarshalDSMRanges(b []byte, ranges []DSMRange) (int, error) {
	if len(ranges) == 0 || len(ranges) > MaxDSMRanges {
		return 0, &FieldError{Structure: "Dataset Management ranges", Field: "NR", Err: ErrInvalidList}
	}
	n := len(ranges) * DSMRangeSize
	if err := needAtLeast("Dataset Management ranges", b, n); err != nil {
		return 0, err
	}
	for i, r := range ranges {
		e := b[i*DSMRangeSize:]
		le.PutUint32(e[DSMRangeOffsetContextAttributes:], r.ContextAttributes)
		le.PutUint32(e[DSMRangeOffsetLength:], r.Length)
		le.PutUint64(e[DSMRangeOffsetSLBA:], r.SLBA)
	}
	return n, nil
}

// AppendDSMRanges decodes the nr ranges (as DSMRanges counts them) of a
// Dataset Management command's data from b and appends them to dst. b
// must hold at least nr*16 bytes; bytes after them are ignored, since a
// data SGL may be longer than the data. With a dst of capacity 256 it
// does not allocate.
func AppendDSMRanges(dst []DSMRange, b []byte, nr int) ([]DSMRange, error) {
	const name = "Dataset Management ranges"
	if nr < 1 || nr > MaxDSMRanges {
		return dst, &FieldError{Structure: name, Field: "NR", Err: ErrInvalidList}
	}
	if err := needAtLeast(name, b, nr*DSMRangeSize); err != nil {
		return dst, err
	}
	for i := range nr {
		e := b[i*DSMRangeSize:]
		dst = append(dst, DSMRange{
			ContextAttributes: le.Uint32(e[DSMRangeOffsetContextAttributes:]),
			Length:            le.Uint32(e[DSMRangeOffsetLength:]),
			SLBA:              le.Uint64(e[DSMRangeOffsetSLBA:]),
		})
	}
	return dst, nil
}
