package nvmeof

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteZeroes decodes a Write Zeroes of 256 blocks with Deallocate
// (NVM Command Set, Write Zeroes command).
func TestWriteZeroes(t *testing.T) {
	b := annotated(`
		08                      # 00     OPC: Write Zeroes (08h)
		40                      # 01     PSDT 01b
		11 00                   # 03:02  CID 17
		02 00 00 00             # 07:04  NSID 2
		00 00 00 00 00 00 00 00 # 15:08  CDW2, CDW3
		00 00 00 00 00 00 00 00 # 23:16  MPTR
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 39:24 DPTR (no data)
		00 00 10 00             # 43:40  CDW10 SLBA[31:0] = 100000h
		00 00 00 00             # 47:44  CDW11 SLBA[63:32]
		ff 00 00 02             # 51:48  CDW12 NLB FFh (256 blocks), DEAC (bit 25)
		00 00 00 00 00 00 00 00 00 00 00 00  # 63:52 CDW13..CDW15
	`)
	var c Command
	require.NoError(t, c.UnmarshalBinary(b))
	assert.Equal(t, IOWriteZeroes, c.Opcode)
	assert.Equal(t, uint64(0x100000), c.SLBA())
	assert.Equal(t, uint32(256), c.Blocks())
	assert.True(t, c.DEAC())
	assert.False(t, c.FUA())

	var e Command
	e.Opcode, e.CID, e.NSID = IOWriteZeroes, 17, 2
	e.SetPSDT(PSDTSGLBuffer)
	e.SetSLBA(0x100000)
	require.NoError(t, e.SetBlocks(256))
	e.SetDEAC(true)
	assert.Equal(t, c, e)
	e.SetDEAC(false)
	assert.Equal(t, uint32(0xff), e.CDW12)
}

// TestDatasetManagement decodes a Dataset Management command asking to
// deallocate 2 ranges, and its 32 bytes of range data (NVM Command Set,
// Dataset Management command and range definition).
func TestDatasetManagement(t *testing.T) {
	cmd := annotated(`
		09                      # 00     OPC: Dataset Management (09h)
		40                      # 01     PSDT 01b
		01 00                   # 03:02  CID 1
		01 00 00 00             # 07:04  NSID 1
		00 00 00 00 00 00 00 00 # 15:08  CDW2, CDW3
		00 00 00 00 00 00 00 00 # 23:16  MPTR
		00 00 00 00 00 00 00 00 20 00 00 00 00 00 00 01  # 39:24 SGL1: in-capsule, 32 bytes
		01 00 00 00             # 43:40  CDW10 NR 1 (2 ranges, 0's based)
		04 00 00 00             # 47:44  CDW11 attributes: AD (bit 2)
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 # 63:48 CDW12..CDW15
	`)
	var c Command
	require.NoError(t, c.UnmarshalBinary(cmd))
	assert.Equal(t, IODatasetManagement, c.Opcode)
	assert.Equal(t, 2, c.DSMRanges())
	assert.Equal(t, DSMDeallocate, c.DSMAttributes())
	assert.Equal(t, HostToController, c.Direction())
	ic, ok := c.DPTR.InCapsule()
	require.True(t, ok)
	assert.Equal(t, uint32(32), ic.Length)

	data := annotated(`
		00 00 00 00              # 03:00  range 0 context attributes
		00 01 00 00              # 07:04  range 0 length 256 blocks
		00 10 00 00 00 00 00 00  # 15:08  range 0 starting LBA 1000h
		00 00 00 00              # 19:16  range 1 context attributes
		08 00 00 00              # 23:20  range 1 length 8 blocks
		00 00 00 00 01 00 00 00  # 31:24  range 1 starting LBA 1_00000000h
		ee ee ee ee              # trailing bytes of a longer SGL: ignored
	`)
	ranges, err := AppendDSMRanges(nil, data, c.DSMRanges())
	require.NoError(t, err)
	want := []DSMRange{{Length: 256, SLBA: 0x1000}, {Length: 8, SLBA: 0x1_0000_0000}}
	assert.Equal(t, want, ranges)

	out := make([]byte, 32)
	n, err := MarshalDSMRanges(out, want)
	require.NoError(t, err)
	assert.Equal(t, 32, n)
	assert.Equal(t, data[:32], out)

	var e Command
	require.NoError(t, e.SetDSMRanges(2))
	assert.Equal(t, uint32(1), e.CDW10)
	require.NoError(t, e.SetDSMRanges(256))
	assert.Equal(t, 256, e.DSMRanges())
	assert.ErrorIs(t, e.SetDSMRanges(0), ErrFieldValue)
	assert.ErrorIs(t, e.SetDSMRanges(257), ErrFieldValue)
}

func TestDSMRangeLimits(t *testing.T) {
	_, err := AppendDSMRanges(nil, make([]byte, 16), 2)
	assert.ErrorIs(t, err, ErrShortBuffer, "NR beyond the data")
	_, err = AppendDSMRanges(nil, make([]byte, 16*257), 257)
	assert.ErrorIs(t, err, ErrInvalidList)
	_, err = AppendDSMRanges(nil, nil, 0)
	assert.ErrorIs(t, err, ErrInvalidList)
	_, err = MarshalDSMRanges(make([]byte, 16), make([]DSMRange, 2))
	assert.ErrorIs(t, err, ErrShortBuffer)
	_, err = MarshalDSMRanges(make([]byte, 16*257), make([]DSMRange, 257))
	assert.ErrorIs(t, err, ErrInvalidList)

	// 256 ranges into a buffer with room: no allocation.
	buf := make([]byte, 16*MaxDSMRanges)
	dst := make([]DSMRange, 0, MaxDSMRanges)
	allocs := testing.AllocsPerRun(20, func() {
		dst, _ = AppendDSMRanges(dst[:0], buf, MaxDSMRanges)
	})
	assert.Zero(t, allocs)
	assert.Len(t, dst, MaxDSMRanges)
}

func TestFlushAllNamespaces(t *testing.T) {
	c := Command{Opcode: IOFlush, CID: 3, NSID: NSIDAll}
	b, err := c.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, annotated(`00 00 03 00 ff ff ff ff # OPC Flush, CID 3, NSID FFFFFFFFh`), b[:8])
	assert.Equal(t, NoData, c.Direction())
}
