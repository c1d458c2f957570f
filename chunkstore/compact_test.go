package chunkstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// allocatedShards sums what the shard files of td's devices have blocks
// for (MemFS's allocation model: pages a Sync made durable).
func allocatedShards(t *testing.T, td *testDevices) int64 {
	t.Helper()
	var total int64
	for _, m := range td.mem {
		f, err := m.OpenFile(shardFile, os.O_RDONLY)
		require.NoError(t, err)
		require.NoError(t, f.(vfs.SharedFlush).Allocated(func(_, n int64) { total += n }))
		require.NoError(t, f.Close())
	}
	return total
}

// TestIdleCompaction: random overwrites leave the slots in use at up to
// (1 + 2f) × the live data; once the writes stop, the idle pass compacts
// to the idle target, and its checkpoint punches the free slots, so that
// the shard files hold little more than the live stripes. The data reads
// back, and the store verifies and reopens.
func TestIdleCompaction(t *testing.T) {
	const unit = 4096
	g := Geometry{Data: 4, Parity: 2}
	td := newTestDevices(t, g.Devices())
	td.direct = true
	opts := testOpts(g, unit, WithIdleCompaction(0.1, 20*time.Millisecond))
	s := mustCreate(t, td, opts...)
	defer func() { _ = s.Close() }()
	const size = 4 << 20 // 256 full stripes
	v, err := s.CreateVolume("vol", size)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(3, 3))
	want := randBytes(r, size)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	for range 3 * size / SectorSize {
		off := r.IntN(size/SectorSize) * SectorSize
		p := randBytes(r, SectorSize)
		_, err := v.WriteAt(p, int64(off))
		require.NoError(t, err)
		copy(want[off:], p)
	}
	require.NoError(t, s.Sync())
	before := s.Stats()
	require.Eventually(t, func() bool { return s.Stats().Compactions > before.Compactions }, 20*time.Second, 5*time.Millisecond)
	st := s.Stats()
	t.Logf("before: live %d dead %d slots %d; after: live %d dead %d slots %d, idle moved %d, punched %d",
		before.LiveBytes, before.DeadBytes, before.SlotsUsed, st.LiveBytes, st.DeadBytes, st.SlotsUsed, st.IdleBytes, st.SlotsPunched)
	require.Positive(t, st.IdleBytes, "the idle pass moved data")
	stripe := int64(g.Data * unit)
	require.LessOrEqual(t, float64(st.LiveBytes+st.DeadBytes), 1.1*float64(st.LiveBytes)+float64(cleanSlack*stripe)+float64(stripe),
		"the slots in use hold at most the idle target")
	// The shard files have blocks for the slots in use, the few the
	// trimming checkpoint reserved, the stock of free slots it keeps for
	// flushes (trimKeep), and the stripes written since (the idle pass's
	// last ones, sealed by the checkpoint).
	alloc := allocatedShards(t, td)
	limit := (st.SlotsUsed + resvHeadMin + trimPrepare + trimKeep) * s.slotSize * int64(g.Devices())
	require.LessOrEqual(t, alloc, limit, "allocated %d bytes for %d slots in use", alloc, st.SlotsUsed)
	require.Positive(t, st.SlotsPunched)

	got := make([]byte, size)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the volume reads back as written")
	requireClean(t, s)
	// A FUA load after the trim: the slots the trim left allocated, then
	// those checkpoints find with blocks, let most FUA writes share one
	// flush of the disk instead of a sync per shard.
	st0 := s.Stats()
	const fuas = 300
	for range fuas {
		off := r.IntN(size/SectorSize) * SectorSize
		p := randBytes(r, SectorSize)
		_, err := v.WriteAtFlags(p, int64(off), FUA)
		require.NoError(t, err)
		copy(want[off:], p)
	}
	st1 := s.Stats()
	t.Logf("%d FUA writes after the trim: %d shared flushes, %d shard syncs", fuas, st1.SharedFlushes-st0.SharedFlushes, st1.DeviceSyncs-st0.DeviceSyncs)
	assert.Greater(t, st1.SharedFlushes-st0.SharedFlushes, int64(fuas/2), "most FUA writes share a flush")
	// Writes after the idle time land in punched slots and are durable.
	p := randBytes(r, 1<<20)
	_, err = v.WriteAtFlags(p, 1<<20, FUA)
	require.NoError(t, err)
	copy(want[1<<20:], p)
	require.NoError(t, s.Close())
	td.crash()
	s = mustOpen(t, td, opts...)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the volume reads back after a reopen")
	requireClean(t, s)
}

func TestIdleCompactionOptionChecked(t *testing.T) {
	_, err := buildOptions([]Option{WithIdleCompaction(0.01, time.Second)})
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = buildOptions([]Option{WithIdleCompaction(0.1, -time.Second)})
	require.ErrorIs(t, err, ErrInvalidOption)
}

// TestShortStripeZeroPadding: a lone FUA sector on 4+2 is a short stripe
// of one data shard and two parity shards; the three zero-padding data
// shards are not written. It reads back, survives the loss of any two
// devices, scrubs clean, and is found by the roll-forward after a crash.
func TestShortStripeZeroPadding(t *testing.T) {
	g := DefaultGeometry
	for lose := range g.Devices() {
		t.Run(fmt.Sprint(lose), func(t *testing.T) {
			td := newTestDevices(t, g.Devices())
			s := mustCreate(t, td, testOpts(g, 4096)...)
			v, err := s.CreateVolume("vol", 1<<20)
			require.NoError(t, err)
			require.NoError(t, s.Sync())
			writes := func() int64 {
				var n int64
				for _, d := range s.Info().Devices {
					n += d.Writes
				}
				return n
			}
			w0 := writes()
			p := randBytes(rand.New(rand.NewPCG(uint64(lose), 1)), SectorSize)
			_, err = v.WriteAtFlags(p, 8*SectorSize, FUA)
			require.NoError(t, err)
			assert.EqualValues(t, 1+g.Parity, writes()-w0, "one data shard and the parity written")
			requireClean(t, s)

			// Crash: the roll-forward finds the stripe by its three
			// shards; then two devices go, one of them lose.
			_ = s.Close()
			td.crash()
			s = mustOpen(t, td, testOpts(g, 4096)...)
			defer func() { _ = s.Close() }()
			v, err = s.OpenVolume("vol")
			require.NoError(t, err)
			got := make([]byte, SectorSize)
			_, err = v.ReadAt(got, 8*SectorSize)
			require.NoError(t, err)
			require.Equal(t, p, got, "after the roll-forward")
			requireClean(t, s)
			td.mem[lose].Vanish()
			td.mem[(lose+3)%g.Devices()].Vanish()
			_, err = v.ReadAt(got, 8*SectorSize)
			require.NoError(t, err)
			require.Equal(t, p, got, "with devices %d and %d gone", lose, (lose+3)%g.Devices())
		})
	}
}
