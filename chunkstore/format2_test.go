package chunkstore

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSummaryLayout(t *testing.T) {
	runs := []sumRun{{Owner: 5, LBA: 0x0102, N: 3}, {Owner: 6, LBA: 9, N: 61}}
	b := make([]byte, summarySize(len(runs)))
	require.Equal(t, 48, encodeSummary(b, runs))
	want := unhex(t, `
		02000000         // two runs
		0500000000000000 // owner 5
		0201000000000000 // from logical sector 0x102
		03000000         // 3 sectors: stripe sectors 0-2
		0600000000000000 // owner 6
		0900000000000000 // from logical sector 9
		3d000000         // 61 sectors: stripe sectors 3-63
	`)
	require.Equal(t, want, b[:len(want)])
	got, err := decodeSummary(b, nil)
	require.NoError(t, err)
	assert.Equal(t, runs, got)
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x10
		_, err := decodeSummary(bad, nil)
		assert.True(t, IsCorruption(err), "byte %d", i)
	}
	// The room a header region leaves: a 64 KiB unit's header is 132
	// bytes, so 197 runs fit beside it, more than the 64 sectors of a
	// 4+2 stripe can need.
	assert.Equal(t, 197, maxSummaryRuns(64<<10))
	// A 1 MiB unit's header is 1092 bytes: 149 runs fit; a stripe that
	// would need more is sealed early.
	assert.Equal(t, 149, maxSummaryRuns(1<<20))
}

func TestSlotRecordLayout(t *testing.T) {
	r := slotRecord{Key: stripeKey{Owner: 0, Index: 7}, Ext: extent{Slot: 7, Gen: 0x10, Missing: 1 << 2, ShardLen: 8192}, Sectors: 8}
	b := r.encode()
	want := unhex(t, `
		0000000000000000 // header key owner: the log
		0700000000000000 // header key index: the slot
		0700000000000000 // slot 7
		1000000000000000 // generation
		0400000000000000 // missing: device 2
		00200000         // shard length 8192 (a short stripe)
		08000000         // 8 data sectors
	`)
	require.Equal(t, want, b[:len(want)])
	got, err := decodeSlotRecord(b)
	require.NoError(t, err)
	assert.Equal(t, r, got)
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x01
		_, err := decodeSlotRecord(bad)
		assert.True(t, IsCorruption(err), "byte %d", i)
	}
}

func TestPageLayout(t *testing.T) {
	runs := []pageRun{{off: 0, n: 2, sec: 10, slot: 3}, {off: 5, n: 59, sec: 0, slot: 0x0908}}
	b := encodePage(runs)
	want := unhex(t, `
		0200             // two runs
		00 02 0a00       // page sectors 0-1: stripe sectors 10-11
		0300000000000000 // of slot 3
		05 3b 0000       // page sectors 5-63: stripe sectors 0-58
		0809000000000000 // of slot 0x908
	`)
	require.Equal(t, want, b[:len(want)])
	got, err := decodePage(b)
	require.NoError(t, err)
	assert.Equal(t, runs, got)
	// Runs out of order, overlapping or past the page are corrupt.
	for _, bad := range [][]pageRun{
		{{off: 5, n: 1}, {off: 0, n: 1}},
		{{off: 0, n: 3}, {off: 2, n: 1}},
		{{off: 60, n: 5}},
		{{off: 1, n: 0}},
	} {
		_, err := decodePage(encodePage(bad))
		assert.True(t, IsCorruption(err), "%v", bad)
	}
}

func TestChunkRecordV2AndResvLayout(t *testing.T) {
	cr := chunkRecord{Owner: 4, Length: 70000}
	b := cr.encodeV2()
	require.Equal(t, unhex(t, `
		0400000000000000 // owner 4
		7011010000000000 // 70000 bytes
	`), b[:16])
	got, err := decodeChunkRecordV2(b)
	require.NoError(t, err)
	assert.Equal(t, cr, got)

	rv := encodeResv([]uint64{3, 1 << 33})
	require.Equal(t, unhex(t, `
		02000000         // two slots, in the order the log takes them
		0300000000000000 // slot 3
		0000000002000000 // slot 2^33
	`), rv[:20])
	slots, err := decodeResv(rv)
	require.NoError(t, err)
	assert.Equal(t, []uint64{3, 1 << 33}, slots)
}

func TestPageUpdate(t *testing.T) {
	m := newOwnerMap()
	var scratch []pageRun
	gone := map[uint64]int{}
	g := func(slot uint64, n int) { gone[slot] += n }
	m.update(60, 10, true, 1, 0, &scratch, g) // crosses a page boundary
	assert.Equal(t, []pageRun{{off: 60, n: 4, sec: 0, slot: 1}}, m.pages[0])
	assert.Equal(t, []pageRun{{off: 0, n: 6, sec: 4, slot: 1}}, m.pages[1])
	m.update(62, 1, true, 2, 7, &scratch, g) // splits a run
	assert.Equal(t, []pageRun{{off: 60, n: 2, sec: 0, slot: 1}, {off: 62, n: 1, sec: 7, slot: 2}, {off: 63, n: 1, sec: 3, slot: 1}}, m.pages[0])
	assert.Equal(t, map[uint64]int{1: 1}, gone)
	m.update(62, 1, true, 1, 2, &scratch, g) // puts it back: the runs merge
	assert.Equal(t, []pageRun{{off: 60, n: 4, sec: 0, slot: 1}}, m.pages[0])
	assert.Equal(t, map[uint64]int{1: 1, 2: 1}, gone)
	l, n, ok := m.find(61, 100)
	assert.True(t, ok)
	assert.Equal(t, loc{slot: 1, sec: 1}, l)
	assert.Equal(t, 3, n, "a find stops at the page's end")
	m.update(0, 128, false, 0, 0, &scratch, g)
	assert.Empty(t, m.pages)
	assert.Zero(t, m.mapped)
	assert.Equal(t, map[uint64]int{1: 11, 2: 1}, gone)
}

func FuzzSummary(f *testing.F) {
	b := make([]byte, summarySize(2))
	encodeSummary(b, []sumRun{{Owner: 1, LBA: 2, N: 3}, {Owner: 2, LBA: 0, N: 1}})
	f.Add(b)
	f.Add(make([]byte, 8))
	f.Fuzz(func(t *testing.T, b []byte) {
		runs, err := decodeSummary(b, nil)
		if err != nil {
			return
		}
		out := make([]byte, summarySize(len(runs)))
		encodeSummary(out, runs)
		require.Equal(t, b[:len(out)], out)
	})
}

func FuzzSlotRecord(f *testing.F) {
	f.Add((&slotRecord{Key: stripeKey{0, 1}, Ext: extent{Slot: 1, Gen: 2, ShardLen: 4096}, Sectors: 4}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeSlotRecord(b)
		if err != nil {
			return
		}
		require.Equal(t, b, r.encode())
	})
}

func FuzzPage(f *testing.F) {
	f.Add(encodePage([]pageRun{{off: 0, n: 64, sec: 0, slot: 9}}))
	f.Add(encodePage([]pageRun{{off: 1, n: 1, sec: 3, slot: 1}, {off: 9, n: 2, sec: 0, slot: 2}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		runs, err := decodePage(b)
		if err != nil {
			return
		}
		require.Equal(t, b, encodePage(runs))
	})
}

func FuzzChunkRecordV2(f *testing.F) {
	f.Add((&chunkRecord{Owner: 1, Length: 10}).encodeV2())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeChunkRecordV2(b)
		if err != nil {
			return
		}
		require.Equal(t, b, r.encodeV2())
	})
}

func FuzzResv(f *testing.F) {
	f.Add(encodeResv([]uint64{1, 2, 3}))
	f.Add(encodeResv(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		slots, err := decodeResv(b)
		if err != nil {
			return
		}
		require.Equal(t, b, encodeResv(slots))
	})
}
