package nvmeof

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readCommandBytes is a Read of 8 blocks at LBA 1_00000010h with FUA, its
// data described by a Keyed SGL with remote invalidate, as an RDMA host
// sends it (NVMe Base 2.x Figure 91 and 92; NVM Command Set Read).
var readCommandBytes = annotated(`
	02                      # 00     OPC: Read (02h)
	40                      # 01     FUSE 00b (normal), PSDT 01b (SGL)
	05 00                   # 03:02  CID 0005h
	01 00 00 00             # 07:04  NSID 1
	00 00 00 00             # 11:08  CDW2
	00 00 00 00             # 15:12  CDW3
	00 00 00 00 00 00 00 00 # 23:16  MPTR
	00 50 34 12 00 7f 00 00 # 31:24  SGL1 address 00007F0012345000h
	00 10 00                # 34:32  SGL1 length 001000h (4096)
	78 56 34 12             # 38:35  SGL1 key 12345678h
	4f                      # 39     SGL1 identifier: Keyed Data Block (4h), Invalidate Key (Fh)
	10 00 00 00             # 43:40  CDW10 SLBA[31:0]
	01 00 00 00             # 47:44  CDW11 SLBA[63:32]
	07 00 00 40             # 51:48  CDW12 NLB 7 (8 blocks, 0's based), FUA (bit 30)
	00 00 00 00             # 55:52  CDW13 DSM
	00 00 00 00             # 59:56  CDW14
	00 00 00 00             # 63:60  CDW15
`)

func TestCommandDecodeRead(t *testing.T) {
	require.Len(t, readCommandBytes, CommandSize)
	var c Command
	require.NoError(t, c.UnmarshalBinary(readCommandBytes))

	assert.Equal(t, IORead, c.Opcode)
	assert.Equal(t, FuseNormal, c.Fuse())
	assert.Equal(t, PSDTSGLBuffer, c.PSDT())
	assert.Equal(t, uint16(5), c.CID)
	assert.Equal(t, uint32(1), c.NSID)
	assert.Equal(t, uint64(0x1_0000_0010), c.SLBA())
	assert.Equal(t, uint16(7), c.NLB())
	assert.Equal(t, uint32(8), c.Blocks())
	assert.True(t, c.FUA())
	assert.False(t, c.LimitedRetry())
	assert.False(t, c.IsFabrics())
	assert.Equal(t, ControllerToHost, c.Direction())

	k, ok := c.DPTR.Keyed()
	require.True(t, ok)
	assert.Equal(t, KeyedSGL{Address: 0x7f0012345000, Length: 4096, Key: 0x12345678, Invalidate: true}, k)

	out := make([]byte, CommandSize)
	n, err := c.MarshalTo(out)
	require.NoError(t, err)
	assert.Equal(t, CommandSize, n)
	assert.Equal(t, readCommandBytes, out)
}

func TestCommandEncodeRead(t *testing.T) {
	d, err := KeyedSGL{Address: 0x7f0012345000, Length: 4096, Key: 0x12345678, Invalidate: true}.Descriptor()
	require.NoError(t, err)
	c := Command{Opcode: IORead, CID: 5, NSID: 1, DPTR: d}
	c.SetPSDT(PSDTSGLBuffer)
	c.SetSLBA(0x1_0000_0010)
	require.NoError(t, c.SetBlocks(8))
	c.SetFUA(true)
	b, err := c.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, readCommandBytes, b)

	b, err = c.AppendBinary([]byte{0xee})
	require.NoError(t, err)
	assert.Equal(t, append([]byte{0xee}, readCommandBytes...), b)
}

// TestCommandKeepsReservedBits checks that every byte of an entry survives
// a decode and encode, reserved ones included.
func TestCommandKeepsReservedBits(t *testing.T) {
	b := make([]byte, CommandSize)
	for i := range b {
		b[i] = byte(0xa5 ^ i)
	}
	var c Command
	require.NoError(t, c.UnmarshalBinary(b))
	out, err := c.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)
}

func TestCommandFlags(t *testing.T) {
	c := Command{Flags: 0x3c} // reserved bits 5:2 set
	c.SetFuse(FuseSecond)
	c.SetPSDT(PSDTSGLSegment)
	assert.Equal(t, uint8(0xbe), c.Flags)
	assert.Equal(t, FuseSecond, c.Fuse())
	assert.Equal(t, PSDTSGLSegment, c.PSDT())
}

func TestCommandSizes(t *testing.T) {
	var c Command
	assert.ErrorIs(t, c.UnmarshalBinary(readCommandBytes[:63]), ErrLength)
	assert.ErrorIs(t, c.UnmarshalBinary(append(readCommandBytes, 0)), ErrLength)
	_, err := c.MarshalTo(make([]byte, 63))
	assert.ErrorIs(t, err, ErrShortBuffer)
}

func TestParseCapsule(t *testing.T) {
	capsule := append(append([]byte{}, readCommandBytes...), 0xde, 0xad)
	c, rest, err := ParseCapsule(capsule)
	require.NoError(t, err)
	assert.Equal(t, IORead, c.Opcode)
	assert.Equal(t, []byte{0xde, 0xad}, rest)
	rest[0] = 0 // aliases the capsule
	assert.Equal(t, byte(0), capsule[CommandSize])

	_, rest, err = ParseCapsule(readCommandBytes)
	require.NoError(t, err)
	assert.Empty(t, rest)

	_, _, err = ParseCapsule(readCommandBytes[:10])
	assert.ErrorIs(t, err, ErrShortBuffer)
}

func TestCommandSetBlocks(t *testing.T) {
	var c Command
	require.NoError(t, c.SetBlocks(65536))
	assert.Equal(t, uint16(0xffff), c.NLB())
	assert.ErrorIs(t, c.SetBlocks(0), ErrFieldValue)
	assert.ErrorIs(t, c.SetBlocks(65537), ErrFieldValue)
	c.SetFUA(true)
	c.SetNLB(3)
	assert.True(t, c.FUA(), "SetNLB keeps the other bits of CDW12")
	c.SetFUA(false)
	assert.Equal(t, uint32(3), c.CDW12)
}

func TestOpcodeDirection(t *testing.T) {
	assert.Equal(t, NoData, IOFlush.Direction())
	assert.Equal(t, HostToController, IOWrite.Direction())
	assert.Equal(t, ControllerToHost, IORead.Direction())
	assert.Equal(t, NoData, IOWriteZeroes.Direction())
	assert.Equal(t, HostToController, IODatasetManagement.Direction())
	assert.Equal(t, ControllerToHost, AdminIdentify.Direction())
	assert.Equal(t, HostToController, AdminSetFeatures.Direction())
	assert.Equal(t, Bidirectional, OpFabrics.Direction())

	var c Command
	c.SetFabricsType(FabricsConnect)
	assert.Equal(t, HostToController, c.Direction(), "Fabrics commands take the direction from FCTYPE")
	c.SetFabricsType(FabricsPropertyGet)
	assert.Equal(t, NoData, c.Direction())
}

func TestCommandCodecDoesNotAllocate(t *testing.T) {
	var c Command
	buf := make([]byte, CommandSize)
	allocs := testing.AllocsPerRun(100, func() {
		_ = c.UnmarshalBinary(readCommandBytes)
		_, _ = c.MarshalTo(buf)
		_, _, _ = ParseCapsule(readCommandBytes)
		_, _ = SGLPolicy{Keyed: true}.Decode(c.DPTR)
	})
	assert.Zero(t, allocs)
}

func BenchmarkCommandUnmarshal(b *testing.B) {
	var c Command
	b.SetBytes(CommandSize)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.UnmarshalBinary(readCommandBytes)
	}
}

func BenchmarkCommandMarshal(b *testing.B) {
	var c Command
	_ = c.UnmarshalBinary(readCommandBytes)
	buf := make([]byte, CommandSize)
	b.SetBytes(CommandSize)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = c.MarshalTo(buf)
	}
}

// BenchmarkCopy64 is the baseline for the command benchmarks: a plain
// copy of 64 bytes.
func BenchmarkCopy64(b *testing.B) {
	buf := make([]byte, CommandSize)
	b.SetBytes(CommandSize)
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, readCommandBytes)
	}
}
