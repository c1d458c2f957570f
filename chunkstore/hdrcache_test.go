package chunkstore

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// TestHeaderCacheEntries: an entry answers only for the stripe it was
// recorded for (generation, key, shard length), and the cache keeps no
// more than hdrCacheEntries.
func TestHeaderCacheEntries(t *testing.T) {
	var c hdrCache
	key := stripeKey{Owner: logOwner, Index: 9}
	ext := extent{Slot: 5, Gen: 3, ShardLen: 16384}
	h := shardHeader{Owner: key.Owner, Index: key.Index, Slot: 5, Gen: 3, Length: 16384, CRCs: []uint32{1, 2, 3, 4}}
	c.put(&h, 2)
	crcs := make([]uint32, 4)
	require.True(t, c.get(key, ext, 2, crcs))
	assert.Equal(t, h.CRCs, crcs)
	assert.False(t, c.get(key, ext, 1, crcs), "another shard")
	newer := ext
	newer.Gen++
	assert.False(t, c.get(key, newer, 2, crcs), "the slot written again")
	assert.False(t, c.get(stripeKey{Owner: logOwner, Index: 10}, ext, 2, crcs), "another stripe")
	shorter := ext
	shorter.ShardLen = 8192
	assert.False(t, c.get(key, shorter, 2, crcs), "another length")
	assert.False(t, c.get(key, ext, 2, make([]uint32, 2)), "no room for the CRCs")

	for slot := range uint64(3 * hdrCacheEntries) {
		h.Slot = slot
		c.put(&h, 0)
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	assert.LessOrEqual(t, n, hdrCacheEntries)
	assert.Greater(t, n, hdrCacheEntries/2, "the shards are used evenly")
}

// TestHeaderCacheReads: a second read of part of a shard reads only its
// sectors; its sectors are still checked (a flipped byte is found and the
// stripe reconstructed); and a header damaged after it was cached, whose
// sectors are intact, reads right and is found by scrub.
func TestHeaderCacheReads(t *testing.T) {
	g := DefaultGeometry
	const unit = 64 << 10
	td := newTestDevices(t, g.Devices())
	s := mustCreate(t, td, testOpts(g, unit)...)
	size := int64(4 * g.Data * unit)
	v, err := s.CreateVolume("vol", size)
	require.NoError(t, err)
	want := randBytes(rand.New(rand.NewPCG(3, 3)), int(size))
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	reads := func() int64 {
		var n int64
		for _, f := range td.inj {
			n += f.Count(vfs.OpRead)
		}
		return n
	}
	read := func(off int64) int64 {
		t.Helper()
		before := reads()
		got := make([]byte, 4096)
		_, err := v.ReadAt(got, off)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want[off:off+4096], got), "offset %d", off)
		return reads() - before
	}
	assert.EqualValues(t, 2, read(8192), "the header, then the sector")
	assert.EqualValues(t, 1, read(16384), "the sector alone")
	assert.EqualValues(t, 1, read(8192))

	// The stripe holding the volume's first K units: the log's first,
	// the lowest sequence number.
	var first stripeRef
	for _, ref := range s.stripeRefs() {
		if ref.key.Owner == logOwner && (first.gen == 0 || ref.key.Index < first.key.Index) {
			first = ref
		}
	}
	ext, ok, unlock := s.lockStripe(first)
	unlock()
	require.True(t, ok)
	require.Equal(t, unit, ext.ShardLen)
	flip := func(shard int, off int64) {
		t.Helper()
		f, err := td.mem[s.devOf(ext.Slot, shard)].OpenFile(shardFile, os.O_RDWR)
		require.NoError(t, err)
		defer f.Close()
		b := []byte{0}
		off += s.slotOffset(ext.Slot)
		require.NoError(t, vfs.ReadFull(f, b, off))
		b[0] ^= 0x5a
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
	}
	// Every data shard's header is cached now: read a sector of each.
	for i := range g.Data {
		got := make([]byte, 4096)
		_, err := v.ReadAt(got, int64(i*unit+4096))
		require.NoError(t, err)
	}
	before := s.Stats()
	flip(1, shardHeaderRegion+unit/2)
	got := make([]byte, unit)
	_, err = v.ReadAt(got, unit)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want[unit:2*unit], got), "reconstructed")
	after := s.Stats()
	assert.Equal(t, before.ShardChecksum+1, after.ShardChecksum, "the flipped sector fails its cached CRC")

	flip(2, 8) // a header byte: the cached copy still checks the sectors
	_, err = v.ReadAt(got[:4096], 2*unit+8192)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want[2*unit+8192:2*unit+12288], got[:4096]))
	rep, err := s.Scrub(context.Background(), ScrubOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 1, rep.Damaged, "the two damaged shards are of one stripe: %+v", rep.Problems)
	assert.EqualValues(t, 2, rep.ShardsRepaired)
	requireClean(t, s)
	require.NoError(t, s.Close())
}
