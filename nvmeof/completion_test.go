package nvmeof

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lbaOutOfRangeBytes completes command 0005h with LBA Out of Range and
// DNR, phase tag set (NVMe Base 2.x 4.2.1 and 4.2.3).
var lbaOutOfRangeBytes = annotated(`
	00 00 00 00  # 03:00  DW0
	00 00 00 00  # 07:04  DW1
	1f 00        # 09:08  SQHD 31
	01 00        # 11:10  SQID 1
	05 00        # 13:12  CID 5
	01 81        # 15:14  P=1, SC 80h (bits 8:1), SCT 0h (11:9), CRD 00b, M 0, DNR 1 (bit 15)
`)

func TestCompletionDecode(t *testing.T) {
	var c Completion
	require.NoError(t, c.UnmarshalBinary(lbaOutOfRangeBytes))
	assert.Equal(t, Completion{SQHD: 31, SQID: 1, CID: 5, Phase: true, Status: StatusLBAOutOfRange.WithDNR()}, c)
	assert.ErrorIs(t, c.Err(), StatusLBAOutOfRange)

	out, err := c.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, lbaOutOfRangeBytes, out)
}

// TestCompletionPropertyGet checks an 8-byte Property Get response: the
// value of CAP spans DW0 and DW1 (NVMe Base 2.x 6.5).
func TestCompletionPropertyGet(t *testing.T) {
	b := annotated(`
		7f 00 01 0f  # 03:00  VALUE[31:0]: MQES 7Fh, CQR 1, TO 0Fh
		20 00 00 00  # 07:04  VALUE[63:32]: CSS bit 37 (NVM command set)
		00 00        # 09:08  SQHD
		00 00        # 11:10  reserved
		2a 00        # 13:12  CID 42
		00 00        # 15:14  success, phase 0 (reserved on fabrics)
	`)
	var c Completion
	require.NoError(t, c.UnmarshalBinary(b))
	assert.NoError(t, c.Err())
	cap := CAP(c.Value64())
	assert.Equal(t, uint16(0x7f), cap.MQES())
	assert.True(t, cap.CQR())
	assert.Equal(t, uint8(15), cap.TO())
	assert.Equal(t, CAPCSSNVM, cap.CSS())

	var d Completion
	d.CID = 42
	d.SetValue64(uint64(cap))
	out := make([]byte, CompletionSize)
	_, err := d.MarshalTo(out)
	require.NoError(t, err)
	assert.Equal(t, b, out)
}

func TestCompletionSizes(t *testing.T) {
	var c Completion
	assert.ErrorIs(t, c.UnmarshalBinary(make([]byte, 15)), ErrLength)
	assert.ErrorIs(t, c.UnmarshalBinary(make([]byte, 17)), ErrLength)
	_, err := c.MarshalTo(make([]byte, 15))
	assert.ErrorIs(t, err, ErrShortBuffer)
	b, err := c.AppendBinary([]byte{1})
	require.NoError(t, err)
	assert.Len(t, b, 17)
}

// TestCompletionStatusHighBit checks that a Status value with bit 15 set
// (not representable on the wire) does not spill into the phase tag.
func TestCompletionStatusHighBit(t *testing.T) {
	c := Completion{Status: 0x8000 | StatusInvalidField}
	b, err := c.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, []byte{0x04, 0x00}, b[CompletionOffsetStatus:])
}

func TestCompletionCodecDoesNotAllocate(t *testing.T) {
	var c Completion
	buf := make([]byte, CompletionSize)
	allocs := testing.AllocsPerRun(100, func() {
		_ = c.UnmarshalBinary(lbaOutOfRangeBytes)
		_, _ = c.MarshalTo(buf)
	})
	assert.Zero(t, allocs)
}

func BenchmarkCompletionRoundTrip(b *testing.B) {
	var c Completion
	buf := make([]byte, CompletionSize)
	b.SetBytes(CompletionSize)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.UnmarshalBinary(lbaOutOfRangeBytes)
		_, _ = c.MarshalTo(buf)
	}
}
