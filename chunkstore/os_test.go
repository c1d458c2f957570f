package chunkstore

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// TestOSDeviceDirectoryDeleted runs on real directories: one device
// directory is deleted under a running store, which keeps serving correct
// data; then bytes of shard files are flipped, and scrub repairs them.
func TestOSDeviceDirectoryDeleted(t *testing.T) {
	g := DefaultGeometry
	dirs := DeviceDirs(hostDir(t), g)
	s, err := CreateDirs(dirs, WithGeometry(g), WithStripeUnit(4096))
	require.NoError(t, err)
	v, err := s.CreateVolume("vol", 2<<20)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(10, 10))
	want := randBytes(r, 2<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())

	require.NoError(t, os.RemoveAll(dirs[4]))
	update := randBytes(r, 512<<10)
	_, err = v.WriteAt(update, 256<<10)
	require.NoError(t, err)
	copy(want[256<<10:], update)
	require.NoError(t, s.Sync(), "the commit notices the device is gone and carries on")
	assert.Equal(t, DeviceFailed, s.Info().Devices[4].State)
	got := make([]byte, 2<<20)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	require.NoError(t, s.Close())

	// Flip bytes in two other devices' shard files.
	for _, d := range []int{0, 3} {
		f, err := os.OpenFile(filepath.Join(dirs[d], shardFile), os.O_RDWR, 0)
		require.NoError(t, err)
		st, err := f.Stat()
		require.NoError(t, err)
		for range 5 {
			off := r.Int64N(st.Size())
			b := []byte{0}
			_, err := f.ReadAt(b, off)
			require.NoError(t, err)
			b[0] ^= 0x5a
			_, err = f.WriteAt(b, off)
			require.NoError(t, err)
		}
		require.NoError(t, f.Close())
	}

	s, err = OpenDirs(dirs)
	require.NoError(t, err)
	assert.Equal(t, DeviceMissing, s.Info().Devices[4].State)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	clear(got)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	rep, err := s.Scrub(context.Background(), ScrubOptions{})
	require.NoError(t, err)
	assert.Zero(t, rep.Unrecoverable)
	// Every stripe lacks device 4 (degraded); flips that hit live shard
	// bytes were rewritten on devices 0 and 3.
	assert.Equal(t, rep.Checked, rep.Damaged)

	// A new directory in place of the deleted one is rebuilt.
	require.NoError(t, os.MkdirAll(dirs[4], 0o755))
	_, err = s.Rebuild(context.Background(), 4, RebuildOptions{})
	require.NoError(t, err)
	requireClean(t, s)
	require.NoError(t, s.Close())
	s, err = OpenDirs(dirs)
	require.NoError(t, err)
	assert.False(t, s.Info().Degraded)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	require.Zero(t, s.Stats().Reconstructions)
	require.NoError(t, s.Close())
}

// TestOSDeviceGoneAtFlush: a FUA write's flush (not a checkpoint) finds
// device directories removed since the last flush, though it looks up by
// path only the devices whose directory the watcher saw change.
func TestOSDeviceGoneAtFlush(t *testing.T) {
	g := DefaultGeometry
	dirs := DeviceDirs(hostDir(t), g)
	s, err := CreateDirs(dirs, WithGeometry(g), WithStripeUnit(4096))
	require.NoError(t, err)
	defer s.Close()
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	_, err = v.WriteAtFlags(make([]byte, 64<<10), 0, FUA)
	require.NoError(t, err)
	for range 3 { // quiet flushes, which look nothing up
		_, err = v.WriteAtFlags(make([]byte, SectorSize), 16*SectorSize, FUA)
		require.NoError(t, err)
	}

	require.NoError(t, os.RemoveAll(dirs[1]))
	_, err = v.WriteAtFlags(make([]byte, SectorSize), 32*SectorSize, FUA)
	require.NoError(t, err, "one device gone of 4+2")
	assert.Equal(t, DeviceFailed, s.Info().Devices[1].State)

	for _, pos := range []int{2, 3} {
		require.NoError(t, os.RemoveAll(dirs[pos]))
	}
	_, err = v.WriteAtFlags(make([]byte, SectorSize), 33*SectorSize, FUA)
	require.Error(t, err)
	assert.True(t, IsUnavailable(err), "write error %v", err)
}

func TestScrubRateLimitAndCancel(t *testing.T) {
	td := newTestDevices(t, 3)
	s := mustCreate(t, td, testOpts(Geometry{2, 1}, 4096)...)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	_, err = v.WriteAt(randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20), 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	ctx, cancel := context.WithCancel(context.Background())
	rep, err := s.Scrub(ctx, ScrubOptions{BytesPerSecond: 1, Progress: func(Progress) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	assert.EqualValues(t, 1, rep.Checked, "a limited scrub stops when cancelled")
	require.NoError(t, s.Close())
}

func TestDiscardFreesSpace(t *testing.T) {
	td := newTestDevices(t, 3)
	s := mustCreate(t, td, testOpts(Geometry{2, 1}, 4096)...)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	_, err = v.WriteAt(bytes.Repeat([]byte{1}, 1<<20), 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	assert.EqualValues(t, (1<<20)/(2*4096), s.Info().SlotsInUse)
	require.NoError(t, v.Discard(0, 1<<20))
	require.NoError(t, s.Sync())
	assert.Zero(t, s.Info().SlotsInUse)
	assert.Zero(t, v.Info().Allocated)
	got := make([]byte, 1<<20)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(make([]byte, 1<<20), got))
	require.NoError(t, s.Close())
}

func TestDegradedAndCorrupt(t *testing.T) {
	// One device gone and a corrupt shard elsewhere: M = 2 covers both.
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	s := mustCreate(t, td, testOpts(g, 4096)...)
	v, err := s.CreateVolume("vol", 512<<10)
	require.NoError(t, err)
	want := randBytes(rand.New(rand.NewPCG(3, 3)), 512<<10)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	id := NewChunkID()
	chunk := randBytes(rand.New(rand.NewPCG(4, 4)), 70000)
	require.NoError(t, s.PutChunk(id, chunk, FUA))
	require.NoError(t, s.Sync())
	// One flipped payload byte in one shard of every stripe, never on
	// device 5, which then vanishes.
	r := rand.New(rand.NewPCG(5, 5))
	for _, ref := range s.stripeRefs() {
		ext, _, unlock := s.lockStripe(ref)
		unlock()
		shard := r.IntN(s.n)
		for s.devOf(ext.Slot, shard) == 5 || ext.Zero&(1<<shard) != 0 {
			shard = r.IntN(s.n)
		}
		f, err := td.mem[s.devOf(ext.Slot, shard)].OpenFile(shardFile, os.O_RDWR)
		require.NoError(t, err)
		off := s.slotOffset(ext.Slot) + shardHeaderRegion + int64(r.IntN(ext.ShardLen))
		b := []byte{0}
		require.NoError(t, vfs.ReadFull(f, b, off))
		b[0] ^= 0xff
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	td.mem[5].Vanish()
	got := make([]byte, 512<<10)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	gotChunk, err := s.GetChunk(id)
	require.NoError(t, err)
	require.True(t, bytes.Equal(chunk, gotChunk))
	assert.NotZero(t, s.Stats().ShardChecksum)
	rep, err := s.Scrub(context.Background(), ScrubOptions{})
	require.NoError(t, err)
	assert.Equal(t, rep.Checked, rep.Damaged)
	assert.Zero(t, rep.Unrecoverable)
	assert.Positive(t, rep.ShardsRepaired)
	// The corrupt shards are repaired; device 5's stay missing.
	rep, err = s.Scrub(context.Background(), ScrubOptions{NoRepair: true})
	require.NoError(t, err)
	assert.Equal(t, rep.Checked, rep.Damaged)
	require.NotEmpty(t, rep.Problems)
	for _, p := range rep.Problems {
		assert.Equal(t, []int{5}, p.Devices)
	}
	require.NoError(t, s.Close())
}
