//go:build rdma && cgo

package verbs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// post appends entries as PostSend does, without a device.
func (r *wrRing) post(ents ...ringEntry) {
	for _, e := range ents {
		r.ents[r.tail%uint64(len(r.ents))] = e
		r.tail++
	}
}

func TestRingRetiresUnsignaledWithTheNextCompletion(t *testing.T) {
	r := newRing(4)
	r.post(ringEntry{user: 10, op: rdma.WCWrite}, ringEntry{user: 11, op: rdma.WCWrite}, ringEntry{user: 12, op: rdma.WCSend})
	// Only WR 2 was signaled: its completion retires 0 and 1 too.
	user, op, drain, ok := r.retire(2)
	require.True(t, ok)
	assert.Equal(t, uint64(12), user)
	assert.Equal(t, rdma.WCSend, op)
	assert.False(t, drain)
	assert.Equal(t, uint64(3), r.head)
	_, _, _, ok = r.retire(0)
	assert.False(t, ok, "already retired")
	_, _, _, ok = r.retire(7)
	assert.False(t, ok, "never posted")
}

func TestRingWrapsAndKeepsTheDrainMarker(t *testing.T) {
	r := newRing(2) // 3 entries: 2 for the caller, 1 for the drain marker
	for seq := uint64(0); seq < 10; seq++ {
		r.post(ringEntry{user: 100 + seq, op: rdma.WCRead})
		user, op, _, ok := r.retire(seq)
		require.True(t, ok)
		assert.Equal(t, 100+seq, user)
		assert.Equal(t, rdma.WCRead, op)
	}
	r.post(ringEntry{user: 1}, ringEntry{user: 2}, ringEntry{drain: true})
	// A flush completes each WR in order: the marker comes last.
	for seq, want := range []uint64{1, 2} {
		user, _, drain, ok := r.retire(10 + uint64(seq))
		require.True(t, ok)
		assert.Equal(t, want, user)
		assert.False(t, drain)
	}
	_, _, drain, ok := r.retire(12)
	assert.True(t, ok)
	assert.True(t, drain)
}
