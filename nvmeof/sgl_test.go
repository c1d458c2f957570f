package nvmeof

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func descriptor(s string) SGLDescriptor {
	var d SGLDescriptor
	b := annotated(s)
	if len(b) != SGLDescriptorSize {
		panic(fmt.Sprintf("descriptor of %d bytes", len(b)))
	}
	copy(d[:], b)
	return d
}

// SGL descriptors as NVMe over Fabrics hosts send them (NVMe Base 2.x
// Figures 118 to 122; NVMe/TCP and NVMe/RDMA transport specifications).
var (
	keyedSGL = descriptor(`
		00 10 00 00 00 10 00 00  # 07:00  address 00001000_00001000h
		00 00 02                 # 10:08  length 020000h (128 KiB)
		ef be ad de              # 14:11  key DEADBEEFh
		40                       # 15     Keyed SGL Data Block (4h), Address (0h)
	`)
	keyedInvalidateSGL = descriptor(`
		00 20 00 00 00 00 00 00  # 07:00  address 2000h
		00 02 00                 # 10:08  length 512
		01 00 00 00              # 14:11  key 1
		4f                       # 15     Keyed SGL Data Block (4h), Invalidate Key (Fh)
	`)
	inCapsuleSGL = descriptor(`
		00 00 00 00 00 00 00 00  # 07:00  offset 0 into the in-capsule data
		00 10 00 00              # 11:08  length 4096
		00 00 00                 # 14:12  reserved
		01                       # 15     SGL Data Block (0h), Offset (1h)
	`)
	transportSGL = descriptor(`
		00 00 00 00 00 00 00 00  # 07:00  reserved
		00 00 01 00              # 11:08  length 10000h (64 KiB)
		00 00 00                 # 14:12  reserved
		5a                       # 15     Transport SGL Data Block (5h), Transport specific (Ah)
	`)
	lastSegmentSGL = descriptor(`
		00 00 00 00 00 00 00 00  # 07:00  offset 0 into the capsule
		20 00 00 00              # 11:08  length 32: two descriptors
		00 00 00                 # 14:12  reserved
		31                       # 15     SGL Last Segment (3h), Offset (1h)
	`)
	segmentSGL = descriptor(`
		00 30 00 00 00 00 00 00  # 07:00  address 3000h
		10 00 00 00              # 11:08  length 16
		00 00 00                 # 14:12  reserved
		20                       # 15     SGL Segment (2h), Address (0h)
	`)
	dataBlockSGL = descriptor(`
		00 40 00 00 00 00 00 00  # 07:00  address 4000h
		00 10 00 00              # 11:08  length 4096
		00 00 00                 # 14:12  reserved
		00                       # 15     SGL Data Block (0h), Address (0h)
	`)
	bitBucketSGL = descriptor(`
		00 00 00 00 00 00 00 00  # 07:00  reserved
		00 02 00 00              # 11:08  length 512
		00 00 00                 # 14:12  reserved
		10                       # 15     SGL Bit Bucket (1h)
	`)
	nullSGL = SGLDescriptor{}
)

func TestSGLViews(t *testing.T) {
	k, ok := keyedSGL.Keyed()
	require.True(t, ok)
	assert.Equal(t, KeyedSGL{Address: 0x00001000_00001000, Length: 0x20000, Key: 0xdeadbeef}, k)
	d, err := k.Descriptor()
	require.NoError(t, err)
	assert.Equal(t, keyedSGL, d)

	k, ok = keyedInvalidateSGL.Keyed()
	require.True(t, ok)
	assert.True(t, k.Invalidate)
	d, err = k.Descriptor()
	require.NoError(t, err)
	assert.Equal(t, keyedInvalidateSGL, d)

	ic, ok := inCapsuleSGL.InCapsule()
	require.True(t, ok)
	assert.Equal(t, InCapsuleSGL{Offset: 0, Length: 4096}, ic)
	assert.Equal(t, inCapsuleSGL, ic.Descriptor())

	tr, ok := transportSGL.Transport()
	require.True(t, ok)
	assert.Equal(t, TransportSGL{Length: 0x10000}, tr)
	assert.Equal(t, transportSGL, tr.Descriptor())

	seg, ok := lastSegmentSGL.Segment()
	require.True(t, ok)
	assert.Equal(t, SegmentSGL{Last: true, Offset: true, Address: 0, Length: 32}, seg)
	assert.Equal(t, lastSegmentSGL, seg.Descriptor())

	seg, ok = segmentSGL.Segment()
	require.True(t, ok)
	assert.Equal(t, SegmentSGL{Address: 0x3000, Length: 16}, seg)
	assert.Equal(t, segmentSGL, seg.Descriptor())

	// Views refuse the other kinds.
	_, ok = inCapsuleSGL.Keyed()
	assert.False(t, ok)
	_, ok = keyedSGL.InCapsule()
	assert.False(t, ok)
	_, ok = keyedSGL.Transport()
	assert.False(t, ok)
	_, ok = keyedSGL.Segment()
	assert.False(t, ok)

	assert.Equal(t, SGLTypeKeyedDataBlock, keyedInvalidateSGL.Type())
	assert.Equal(t, SGLSubtypeInvalidateKey, keyedInvalidateSGL.Subtype())
	assert.Equal(t, SGLTransportDataBlock, NewSGLIdentifier(SGLTypeTransportDataBlock, SGLSubtypeTransport))
}

func TestKeyedSGLLengthLimit(t *testing.T) {
	_, err := KeyedSGL{Length: MaxKeyedSGLLength}.Descriptor()
	require.NoError(t, err)
	_, err = KeyedSGL{Length: MaxKeyedSGLLength + 1}.Descriptor()
	assert.ErrorIs(t, err, ErrFieldValue)
}

func TestSGLKinds(t *testing.T) {
	for _, tc := range []struct {
		d    SGLDescriptor
		kind SGLKind
	}{
		{keyedSGL, SGLKindKeyed},
		{keyedInvalidateSGL, SGLKindKeyed},
		{inCapsuleSGL, SGLKindInCapsule},
		{transportSGL, SGLKindTransport},
		{lastSegmentSGL, SGLKindLastSegment},
		{segmentSGL, SGLKindSegment},
		{dataBlockSGL, SGLKindDataBlock},
		{bitBucketSGL, SGLKindBitBucket},
		{nullSGL, SGLKindNull},
		{descriptor("00000000 00000000 00000000 000000 41"), SGLKindOther},     // keyed, offset subtype
		{descriptor("00000000 00000000 00000000 000000 50"), SGLKindOther},     // transport, address subtype
		{descriptor("00000000 00000000 00000000 000000 60"), SGLKindOther},     // reserved type
		{descriptor("00000000 00000000 00000000 000000 f0"), SGLKindOther},     // vendor specific
		{descriptor("00000000 00000000 00000000 000001 00"), SGLKindDataBlock}, // reserved byte set: not NULL
	} {
		assert.Equal(t, tc.kind, tc.d.Kind(), "identifier %02Xh", tc.d[15])
		assert.NotEmpty(t, tc.kind.String())
	}
}

// TestSGLPolicyDecode checks the status a controller answers each
// descriptor with (NVMe Base 2.x 4.3.2 Figure 113 and 3.3.2.1.3.1).
func TestSGLPolicyDecode(t *testing.T) {
	rdma := SGLPolicy{Keyed: true, InCapsuleSize: 8192}
	tcp := SGLPolicy{Transport: true, InCapsuleSize: 8192}
	multi := SGLPolicy{Keyed: true, InCapsuleSize: 64, MaxDataBlocks: 4}
	inCap := func(off uint64, n uint32) SGLDescriptor { return InCapsuleSGL{Offset: off, Length: n}.Descriptor() }
	lastSeg := func(off uint64, n uint32) SGLDescriptor {
		return SegmentSGL{Last: true, Offset: true, Address: off, Length: n}.Descriptor()
	}
	for _, tc := range []struct {
		name string
		p    SGLPolicy
		d    SGLDescriptor
		kind SGLKind
		want Status
	}{
		{"keyed on RDMA", rdma, keyedSGL, SGLKindKeyed, StatusSuccess},
		{"keyed invalidate on RDMA", rdma, keyedInvalidateSGL, SGLKindKeyed, StatusSuccess},
		{"keyed on TCP", tcp, keyedSGL, SGLKindKeyed, StatusSGLDescriptorTypeInvalid},
		{"keyed wrapping past 2^64", rdma, mustKeyed(KeyedSGL{Address: ^uint64(0) - 10, Length: 11}), SGLKindKeyed, StatusDataSGLLengthInvalid},
		{"keyed ending at 2^64-1", rdma, mustKeyed(KeyedSGL{Address: ^uint64(0) - 10, Length: 10}), SGLKindKeyed, StatusSuccess},
		{"transport on TCP", tcp, transportSGL, SGLKindTransport, StatusSuccess},
		{"transport on RDMA", rdma, transportSGL, SGLKindTransport, StatusSGLDescriptorTypeInvalid},
		{"in-capsule within", rdma, inCapsuleSGL, SGLKindInCapsule, StatusSuccess},
		{"in-capsule exactly to the end", rdma, inCap(4096, 4096), SGLKindInCapsule, StatusSuccess},
		{"in-capsule offset at the end", rdma, inCap(8192, 1), SGLKindInCapsule, StatusSGLOffsetInvalid},
		{"in-capsule offset far beyond", rdma, inCap(^uint64(0), 1), SGLKindInCapsule, StatusSGLOffsetInvalid},
		{"in-capsule running past the end", rdma, inCap(4096, 4097), SGLKindInCapsule, StatusDataSGLLengthInvalid},
		{"in-capsule without data", SGLPolicy{Keyed: true}, inCapsuleSGL, SGLKindInCapsule, StatusSGLOffsetInvalid},
		{"in-capsule of length 0", SGLPolicy{}, inCap(100, 0), SGLKindInCapsule, StatusSuccess},
		{"null descriptor", SGLPolicy{}, nullSGL, SGLKindNull, StatusSuccess},
		{"data block address", rdma, dataBlockSGL, SGLKindDataBlock, StatusSGLDescriptorTypeInvalid},
		{"bit bucket", rdma, bitBucketSGL, SGLKindBitBucket, StatusSGLDescriptorTypeInvalid},
		{"segment", multi, segmentSGL, SGLKindSegment, StatusSGLDescriptorTypeInvalid},
		{"last segment, MSDBD 1", rdma, lastSegmentSGL, SGLKindLastSegment, StatusSGLDescriptorTypeInvalid},
		{"last segment in capsule", multi, lastSegmentSGL, SGLKindLastSegment, StatusSuccess},
		{"last segment by address", multi, SegmentSGL{Last: true, Address: 0x1000, Length: 32}.Descriptor(), SGLKindLastSegment, StatusSGLDescriptorTypeInvalid},
		{"last segment of length 0", multi, lastSeg(0, 0), SGLKindLastSegment, StatusInvalidSGLSegmentDescriptor},
		{"last segment of length 17", multi, lastSeg(0, 17), SGLKindLastSegment, StatusInvalidSGLSegmentDescriptor},
		{"last segment of 5 descriptors", multi, lastSeg(0, 80), SGLKindLastSegment, StatusInvalidNumberOfSGLDescriptors},
		{"last segment beyond the capsule", multi, lastSeg(48, 32), SGLKindLastSegment, StatusInvalidNumberOfSGLDescriptors},
		{"reserved type", rdma, descriptor("00000000 00000000 00000000 000000 60"), SGLKindOther, StatusSGLDescriptorTypeInvalid},
		{"keyed with offset subtype", rdma, descriptor("00000000 00000000 00000000 000000 41"), SGLKindOther, StatusSGLDescriptorTypeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp, st := tc.p.Decode(tc.d)
			assert.Equal(t, tc.kind, dp.Kind)
			assert.Equal(t, tc.want, st, "got %v", st)
		})
	}
}

func TestDataPointerLength(t *testing.T) {
	p := SGLPolicy{Keyed: true, Transport: true, InCapsuleSize: 8192, MaxDataBlocks: 2}
	for d, n := range map[SGLDescriptor]uint32{
		keyedSGL:       0x20000,
		inCapsuleSGL:   4096,
		transportSGL:   0x10000,
		lastSegmentSGL: 32,
		nullSGL:        0,
	} {
		dp, st := p.Decode(d)
		require.Equal(t, StatusSuccess, st)
		assert.Equal(t, n, dp.Length(), "%v", dp.Kind)
	}
}

func mustKeyed(k KeyedSGL) SGLDescriptor {
	d, err := k.Descriptor()
	if err != nil {
		panic(err)
	}
	return d
}

func ExampleSGLPolicy_Decode() {
	// A target on RDMA that received a 64-byte SQE and 4 KiB of data.
	policy := SGLPolicy{Keyed: true, InCapsuleSize: 4096}
	for _, d := range []SGLDescriptor{
		InCapsuleSGL{Offset: 0, Length: 4096}.Descriptor(),
		InCapsuleSGL{Offset: 0, Length: 8192}.Descriptor(),
		TransportSGL{Length: 512}.Descriptor(),
	} {
		dp, st := policy.Decode(d)
		fmt.Printf("%v: %s\n", dp.Kind, st.String())
	}
	// Output:
	// in-capsule data block: successful completion (SCT 0h SC 00h)
	// in-capsule data block: data SGL length invalid (SCT 0h SC 0Fh)
	// transport data block: SGL descriptor type invalid (SCT 0h SC 11h)
}
