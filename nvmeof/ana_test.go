package nvmeof

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// anaLogBytes is an ANA log page (LID 0Ch) of a controller that reports
// two groups: group 1 (namespaces 1 and 3) optimized, group 2
// (namespace 2) inaccessible.
var anaLogBytes = annotated(`
	07 00 00 00 00 00 00 00  # 07:00  Change Count 7
	02 00                    # 09:08  Number of ANA Group Descriptors 2
	00 00 00 00 00 00        # 15:10  reserved
	# descriptor 0, at byte 16
	01 00 00 00              # 03:00  ANA Group ID 1
	02 00 00 00              # 07:04  Number of NSID Values 2
	05 00 00 00 00 00 00 00  # 15:08  Change Count 5
	01                       # 16     ANA State: optimized
	00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 31:17 reserved
	01 00 00 00              # 35:32  NSID 1
	03 00 00 00              # 39:36  NSID 3
	# descriptor 1, at byte 56
	02 00 00 00              # 03:00  ANA Group ID 2
	01 00 00 00              # 07:04  Number of NSID Values 1
	07 00 00 00 00 00 00 00  # 15:08  Change Count 7
	03                       # 16     ANA State: inaccessible
	00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 31:17 reserved
	02 00 00 00              # 35:32  NSID 2
`)

func anaLogValue() ANALog {
	return ANALog{ChangeCount: 7, Groups: []ANAGroupDescriptor{
		{ANAGRPID: 1, ChangeCount: 5, State: ANAOptimized, NSIDs: []uint32{1, 3}},
		{ANAGRPID: 2, ChangeCount: 7, State: ANAInaccessible, NSIDs: []uint32{2}},
	}}
}

func TestANALog(t *testing.T) {
	var l ANALog
	require.NoError(t, l.UnmarshalBinary(anaLogBytes))
	want := anaLogValue()
	assert.Equal(t, want, l)
	assert.Equal(t, len(anaLogBytes), want.Size())
	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, anaLogBytes, out)

	// A host reads the page into a buffer as large as the page can be:
	// UnmarshalPrefix takes the page from its start, UnmarshalBinary
	// refuses the padding.
	padded := append(append([]byte(nil), anaLogBytes...), make([]byte, 100)...)
	var p ANALog
	n, err := p.UnmarshalPrefix(padded)
	require.NoError(t, err)
	assert.Equal(t, len(anaLogBytes), n)
	assert.Equal(t, want, p)
	assert.ErrorIs(t, p.UnmarshalBinary(padded), ErrLength)
	assert.Equal(t, ANALog{}, p, "a refused page leaves nothing behind")

	// Reserved bits of the state byte are dropped.
	b := append([]byte(nil), anaLogBytes...)
	b[16+ANADescOffsetState] = 0xf1
	require.NoError(t, l.UnmarshalBinary(b))
	assert.Equal(t, ANAOptimized, l.Groups[0].State)

	// Returned with RGO: descriptors without NSIDs.
	rgo := annotated(`
		09 00 00 00 00 00 00 00  02 00 000000000000  # header: Change Count 9, 2 descriptors
		01 00 00 00  00 00 00 00  09 00 00 00 00 00 00 00  0f  000000000000000000000000000000  # group 1, change
		02 00 00 00  00 00 00 00  01 00 00 00 00 00 00 00  04  000000000000000000000000000000  # group 2, persistent loss
	`)
	require.NoError(t, l.UnmarshalBinary(rgo))
	assert.Equal(t, ANALog{ChangeCount: 9, Groups: []ANAGroupDescriptor{
		{ANAGRPID: 1, ChangeCount: 9, State: ANAChange},
		{ANAGRPID: 2, ChangeCount: 1, State: ANAPersistentLoss},
	}}, l)

	// An empty page is its header.
	require.NoError(t, l.UnmarshalBinary(make([]byte, ANALogHeaderSize)))
	assert.Equal(t, ANALog{}, l)
}

func TestANALogRefused(t *testing.T) {
	field := func(t *testing.T, err error, name string, off int, sentinel error) {
		t.Helper()
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		assert.Equal(t, name, fe.Field)
		assert.Equal(t, off, fe.Offset)
		assert.ErrorIs(t, err, sentinel)
	}
	var l ANALog
	assert.ErrorIs(t, l.UnmarshalBinary(anaLogBytes[:15]), ErrShortBuffer)

	b := append([]byte(nil), anaLogBytes...)
	b[ANALogOffsetNUMDESC] = 3 // a third descriptor that is not there
	_, err := l.UnmarshalPrefix(b)
	field(t, err, "NUMDESC", ANALogOffsetNUMDESC, ErrShortBuffer)

	b = append([]byte(nil), anaLogBytes...)
	b[ANALogOffsetNUMDESC] = 0xff // more descriptors than bytes, refused before allocating
	b[ANALogOffsetNUMDESC+1] = 0xff
	_, err = l.UnmarshalPrefix(b)
	field(t, err, "NUMDESC", ANALogOffsetNUMDESC, ErrShortBuffer)

	b = append([]byte(nil), anaLogBytes...)
	b[56+ANADescOffsetNNSID] = 2 // group 2 claims an NSID past the end
	_, err = l.UnmarshalPrefix(b)
	field(t, err, "NNSID", 56+ANADescOffsetNNSID, ErrShortBuffer)

	b = append([]byte(nil), anaLogBytes...)
	b[16+ANADescOffsetNNSID+3] = 0xff // 4 billion NSIDs
	_, err = l.UnmarshalPrefix(b)
	field(t, err, "NNSID", 16+ANADescOffsetNNSID, ErrShortBuffer)

	b = append([]byte(nil), anaLogBytes...)
	b[16+ANADescOffsetANAGRPID] = 0 // group 0
	_, err = l.UnmarshalPrefix(b)
	field(t, err, "ANAGRPID", 16+ANADescOffsetANAGRPID, ErrFieldValue)

	for _, st := range []byte{0x00, 0x05, 0x0e} {
		b = append([]byte(nil), anaLogBytes...)
		b[56+ANADescOffsetState] = st
		_, err = l.UnmarshalPrefix(b)
		field(t, err, "ANA State", 56+ANADescOffsetState, ErrFieldValue)
	}

	// The encoder refuses what the decoder would.
	bad := anaLogValue()
	bad.Groups[1].State = 0
	_, err = bad.MarshalBinary()
	assert.ErrorIs(t, err, ErrFieldValue)
	bad = anaLogValue()
	bad.Groups[0].ANAGRPID = 0
	_, err = bad.MarshalBinary()
	assert.ErrorIs(t, err, ErrFieldValue)
	good := anaLogValue()
	_, err = good.MarshalTo(make([]byte, good.Size()-1))
	assert.ErrorIs(t, err, ErrShortBuffer)
}

func TestANAState(t *testing.T) {
	for _, tc := range []struct {
		s      ANAState
		usable bool
		status Status
		name   string
	}{
		{ANAOptimized, true, StatusSuccess, "optimized"},
		{ANANonOptimized, true, StatusSuccess, "non-optimized"},
		{ANAInaccessible, false, StatusANAInaccessible, "inaccessible"},
		{ANAPersistentLoss, false, StatusANAPersistentLoss, "persistent loss"},
		{ANAChange, false, StatusANATransition, "change"},
	} {
		assert.True(t, tc.s.Valid(), tc.name)
		assert.Equal(t, tc.usable, tc.s.Usable(), tc.name)
		assert.Equal(t, tc.status, tc.s.Status(), tc.name)
		assert.Equal(t, tc.name, tc.s.String())
		assert.False(t, tc.status.DNR(), "a path error is retried elsewhere: no DNR")
	}
	assert.False(t, ANAState(0).Valid())
	assert.False(t, ANAState(5).Valid())

	// Path Related Status, SCT 3h.
	for sc, s := range map[uint8]Status{0x00: StatusInternalPathError, 0x01: StatusANAPersistentLoss,
		0x02: StatusANAInaccessible, 0x03: StatusANATransition} {
		assert.Equal(t, SCTPathRelated, s.SCT())
		assert.Equal(t, sc, s.SC())
		assert.Equal(t, NewStatus(SCTPathRelated, sc), s)
	}
	assert.Equal(t, "asymmetric access inaccessible (SCT 3h SC 02h)", StatusANAInaccessible.String())

	// Get Log Page with RGO, and the page size a host reads.
	var c Command
	require.NoError(t, c.SetGetLogPage(LogANA, 0, 4096))
	assert.False(t, c.ANAReturnGroupsOnly())
	c.CDW10 |= uint32(LSPANAReturnGroupsOnly) << 8
	assert.True(t, c.ANAReturnGroupsOnly())
	assert.Equal(t, LogPageID(0x0c), c.LID())
	assert.Equal(t, uint64(16+1024*32+1024*4), MaxANALogSize(1024, 1024))
}
