package chunkstore

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// writeLoad has writers fill disjoint regions of a volume with random
// data, each keeping its own model, until stop is closed.
type writeLoad struct {
	v      *Volume
	region int64
	models [][]byte
	wg     sync.WaitGroup
	errs   chan error
}

func startWriteLoad(v *Volume, writers int, stop <-chan struct{}) *writeLoad {
	wl := &writeLoad{v: v, region: v.Size() / int64(writers), errs: make(chan error, writers)}
	for w := range writers {
		model := make([]byte, wl.region)
		wl.models = append(wl.models, model)
		wl.wg.Add(1)
		go func() {
			defer wl.wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			base := int64(w) * wl.region
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				off := r.Int64N(wl.region)
				n := 1 + r.Int64N(min(wl.region-off, 64<<10))
				p := randBytes(r, int(n))
				if _, err := v.WriteAt(p, base+off); err != nil {
					wl.errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				copy(model[off:], p)
				if i%16 == 15 {
					if err := v.Sync(); err != nil {
						wl.errs <- fmt.Errorf("writer %d sync: %w", w, err)
						return
					}
				}
			}
		}()
	}
	return wl
}

func (wl *writeLoad) wait(t *testing.T) {
	t.Helper()
	wl.wg.Wait()
	close(wl.errs)
	for err := range wl.errs {
		require.NoError(t, err)
	}
}

func (wl *writeLoad) verify(t *testing.T, v *Volume) {
	t.Helper()
	got := make([]byte, wl.region)
	for w, model := range wl.models {
		_, err := v.ReadAt(got, int64(w)*wl.region)
		require.NoError(t, err)
		require.True(t, bytes.Equal(model, got), "region %d differs", w)
	}
}

// waitOps lets a write load run for a while, measured in vfs operations
// rather than time. It gives up if the load stops making operations.
func waitOps(t *testing.T, td *testDevices, n int64) {
	t.Helper()
	start := td.clock.Ops()
	for idle := 0; td.clock.Ops()-start < n; idle++ {
		require.Less(t, idle, 100000, "the write load stopped")
		time.Sleep(50 * time.Microsecond)
	}
}

func TestDeviceLossDuringWrites(t *testing.T) {
	g := DefaultGeometry
	for lose := 1; lose <= g.Parity; lose++ {
		t.Run(fmt.Sprintf("lose%d", lose), func(t *testing.T) {
			td := newTestDevices(t, g.Devices())
			opts := testOpts(g, 4096)
			s := mustCreate(t, td, opts...)
			v, err := s.CreateVolume("vol", 2<<20)
			require.NoError(t, err)
			stop := make(chan struct{})
			wl := startWriteLoad(v, 2, stop)
			lost := rand.New(rand.NewPCG(uint64(lose), 1)).Perm(g.Devices())[:lose]
			for _, pos := range lost {
				waitOps(t, td, 400)
				td.mem[pos].Vanish()
			}
			waitOps(t, td, 1000)
			close(stop)
			wl.wait(t)
			require.NoError(t, s.Sync())
			wl.verify(t, v)

			st := s.Stats()
			assert.NotZero(t, st.DegradedWrites, "stripes written without the lost devices")
			info := s.Info()
			assert.True(t, info.Degraded)
			for _, pos := range lost {
				assert.Equal(t, DeviceFailed, info.Devices[pos].State)
				assert.ErrorIs(t, info.Devices[pos].Err, vfs.ErrVanished)
			}
			require.NoError(t, s.Close())

			// The lost devices stay lost: the store opens degraded and
			// every byte is there.
			s = mustOpen(t, td, opts...)
			info = s.Info()
			for _, pos := range lost {
				assert.Equal(t, DeviceMissing, info.Devices[pos].State)
				assert.ErrorIs(t, info.Devices[pos].Err, ErrDeviceMissing)
			}
			v, err = s.OpenVolume("vol")
			require.NoError(t, err)
			wl.verify(t, v)
			require.NoError(t, s.Close())
		})
	}
}

func TestTooManyDevicesLost(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096)
	s := mustCreate(t, td, opts...)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	want := randBytes(rand.New(rand.NewPCG(5, 5)), 1<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())

	for pos := range g.Parity + 1 {
		td.mem[pos].Vanish()
	}
	// Reads either return the right bytes (stripes that still have K
	// shards on the survivors) or fail with an unavailable error.
	got := make([]byte, 64<<10)
	failures := 0
	for off := int64(0); off < 1<<20; off += int64(len(got)) {
		_, err := v.ReadAt(got, off)
		if err != nil {
			require.True(t, IsUnavailable(err), "read error %v", err)
			failures++
			continue
		}
		require.True(t, bytes.Equal(want[off:off+int64(len(got))], got), "wrong bytes at %d", off)
	}
	assert.NotZero(t, failures)
	assert.NotZero(t, s.Stats().ReadFailures)

	// A write goes to the log's memory; the Sync that must write it out
	// fails, and takes the devices out, so that later writes fail at once.
	_, err = v.WriteAt(got, 0)
	if err == nil {
		err = s.Sync()
	}
	require.Error(t, err)
	assert.True(t, IsUnavailable(err), "write error %v", err)
	_, err = v.WriteAt(got, 0)
	assert.True(t, IsUnavailable(err), "write error %v", err)
	err = s.Sync()
	assert.True(t, IsUnavailable(err), "sync error %v", err)
	_ = s.Close()

	_, err = Open(td.fs(), opts...)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrTooManyFailures)
	var de *DevicesError
	require.ErrorAs(t, err, &de)
	assert.Len(t, de.Devices, g.Parity+1)
}

// corruptShards flips a byte in the header or payload of up to M shards
// of random stripes and returns the damaged (slot, device) pairs.
func corruptShards(t *testing.T, r *rand.Rand, s *Store, td *testDevices, stripes int) map[uint64]uint64 {
	t.Helper()
	var exts []extent
	for _, ref := range s.stripeRefs() {
		ext, ok, unlock := s.lockStripe(ref)
		unlock()
		require.True(t, ok)
		exts = append(exts, ext)
	}
	damaged := map[uint64]uint64{} // slot → device mask
	for _, i := range r.Perm(len(exts))[:min(stripes, len(exts))] {
		ext := exts[i]
		for range 1 + r.IntN(s.geo.Parity) {
			shard := r.IntN(s.n)
			if ext.Zero&(1<<shard) != 0 {
				continue // zero padding: nothing on disk to damage
			}
			pos := s.devOf(ext.Slot, shard)
			var off int64
			if r.IntN(4) == 0 {
				off = int64(r.IntN(shardHeaderSize(ext.ShardLen)))
			} else {
				off = shardHeaderRegion + int64(r.IntN(ext.ShardLen))
			}
			off += s.slotOffset(ext.Slot)
			f, err := td.mem[pos].OpenFile(shardFile, os.O_RDWR)
			require.NoError(t, err)
			b := []byte{0}
			require.NoError(t, vfs.ReadFull(f, b, off))
			b[0] ^= byte(1 + r.IntN(255))
			_, err = f.WriteAt(b, off)
			require.NoError(t, err)
			require.NoError(t, f.Sync())
			require.NoError(t, f.Close())
			damaged[ext.Slot] |= 1 << pos
		}
	}
	return damaged
}

func TestSilentCorruption(t *testing.T) {
	for seed := range seeds(8, 80) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 11))
			g := DefaultGeometry
			td := newTestDevices(t, g.Devices())
			s := mustCreate(t, td, testOpts(g, 8192)...)
			size := int64(g.Data * 8192 * 32)
			v, err := s.CreateVolume("vol", size)
			require.NoError(t, err)
			want := randBytes(r, int(size))
			_, err = v.WriteAt(want, 0)
			require.NoError(t, err)
			chunk := NewChunkID()
			chunkData := randBytes(r, 100000)
			require.NoError(t, s.PutChunk(chunk, chunkData, 0))
			require.NoError(t, s.Sync())

			damaged := corruptShards(t, r, s, td, 12)
			shards := 0
			for _, m := range damaged {
				shards += bits.OnesCount64(m)
			}

			// Reads are right, and say what they met.
			got := make([]byte, size)
			_, err = v.ReadAt(got, 0)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got))
			gotChunk, err := s.GetChunk(chunk)
			require.NoError(t, err)
			require.True(t, bytes.Equal(chunkData, gotChunk))
			st := s.Stats()
			assert.NotZero(t, st.Reconstructions)
			assert.NotZero(t, st.ShardChecksum+st.ShardHeader)
			assert.NotZero(t, st.RepairQueue)

			// Scrub finds every damaged stripe and repairs it.
			rep, err := s.Scrub(context.Background(), ScrubOptions{})
			require.NoError(t, err)
			assert.EqualValues(t, len(damaged), rep.Damaged, "problems: %+v", rep.Problems)
			assert.EqualValues(t, len(damaged), rep.Repaired)
			assert.EqualValues(t, shards, rep.ShardsRepaired)
			assert.Zero(t, rep.Unrecoverable)
			for _, p := range rep.Problems {
				slotMask := uint64(0)
				for _, d := range p.Devices {
					slotMask |= 1 << d
				}
				assert.NotZero(t, slotMask)
			}
			requireClean(t, s)

			// The repairs are durable.
			require.NoError(t, s.Close())
			td.crash()
			s = mustOpen(t, td)
			requireClean(t, s)
			require.NoError(t, s.Close())
		})
	}
}

func TestRepairQueue(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	s := mustCreate(t, td, testOpts(g, 4096)...)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	want := randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	damaged := corruptShards(t, rand.New(rand.NewPCG(2, 2)), s, td, 5)

	got := make([]byte, 1<<20)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	// Reads queue only what they touched: the data shards. Damage confined
	// to parity waits for a scrub.
	queued := s.Stats().RepairQueue
	require.NotZero(t, queued)
	rep, err := s.RepairQueued(context.Background(), ScrubOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, queued, rep.Checked)
	assert.EqualValues(t, queued, rep.Repaired)
	assert.Zero(t, s.Stats().RepairQueue)
	rep, err = s.Scrub(context.Background(), ScrubOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, len(damaged)-queued, rep.Repaired)
	requireClean(t, s)
	require.NoError(t, s.Close())
}

// shardBytes reads the header and payload of a shard from a device.
func shardBytes(t *testing.T, s *Store, fsys vfs.FS, ext extent) []byte {
	t.Helper()
	f, err := fsys.OpenFile(shardFile, os.O_RDONLY)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, shardHeaderRegion+ext.ShardLen)
	require.NoError(t, vfs.ReadFull(f, b, s.slotOffset(ext.Slot)))
	return b
}

func TestRebuildByteForByte(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096)
	s := mustCreate(t, td, opts...)
	r := rand.New(rand.NewPCG(8, 8))
	v, err := s.CreateVolume("vol", 3<<20)
	require.NoError(t, err)
	want := randBytes(r, 3<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, s.PutChunk(NewChunkID(), randBytes(r, 1+r.IntN(70000)), 0))
	}
	require.NoError(t, s.Close())

	// Keep the old disk's bytes to compare with, then put in a new one.
	const lost = 2
	old := td.mem[lost]
	td.replace(lost)
	s = mustOpen(t, td, opts...)
	require.Equal(t, DeviceMissing, s.Info().Devices[lost].State)
	require.ErrorIs(t, s.Info().Devices[lost].Err, ErrDeviceEmpty)

	// Cancel half way, then resume.
	ctx, cancel := context.WithCancel(context.Background())
	var seen []Progress
	rep1, err := s.Rebuild(ctx, lost, RebuildOptions{Window: 2, Progress: func(p Progress) {
		seen = append(seen, p)
		if p.Done >= p.Stripes/2 {
			cancel()
		}
	}})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, DeviceRebuilding, s.Info().Devices[lost].State)
	require.NoError(t, s.Close())
	s = mustOpen(t, td, opts...)
	require.Equal(t, DeviceRebuilding, s.Info().Devices[lost].State)
	rep2, err := s.Rebuild(context.Background(), lost, RebuildOptions{Progress: func(p Progress) { seen = append(seen, p) }})
	require.NoError(t, err)
	assert.Equal(t, rep1.Stripes, rep2.Stripes)
	// Each stripe rebuilt once, but for the short stripes whose shard on
	// the device is zero padding (never written, so skipped).
	withShard := 0
	for _, ref := range s.stripeRefs() {
		ext, _, unlock := s.lockStripe(ref)
		unlock()
		if ext.Zero&(1<<s.shardOf(ext.Slot, lost)) == 0 {
			withShard++
		}
	}
	assert.EqualValues(t, withShard, rep1.Rebuilt+rep2.Rebuilt, "each stripe with a shard there rebuilt once")
	assert.Zero(t, rep2.Unrecoverable)
	last := seen[len(seen)-1]
	assert.Equal(t, last.Stripes, last.Done)

	// Every shard on the new device equals the old device's, byte for
	// byte, except the identity of the slot being reused is the same: the
	// rebuild reproduces header and payload exactly.
	require.Equal(t, DeviceHealthy, s.Info().Devices[lost].State)
	for _, ref := range s.stripeRefs() {
		ext, _, unlock := s.lockStripe(ref)
		unlock()
		assert.Zero(t, ext.Missing)
		if ext.Zero&(1<<s.shardOf(ext.Slot, lost)) != 0 {
			continue
		}
		oldB := shardBytes(t, s, oldCrashView(old), ext)
		newB := shardBytes(t, s, td.mem[lost], ext)
		hn := shardHeaderSize(ext.ShardLen)
		require.Equal(t, oldB[:hn], newB[:hn], "header of slot %d", ext.Slot)
		require.Equal(t, oldB[shardHeaderRegion:], newB[shardHeaderRegion:], "payload of slot %d", ext.Slot)
	}
	requireClean(t, s)
	require.NoError(t, s.Close())

	// The old disk, put back, is not silently used.
	td.mem[lost] = oldCrashView(old)
	td.inj[lost] = vfs.NewInjectFS(td.mem[lost])
	_, err = Open(td.fs(), opts...)
	require.ErrorIs(t, err, ErrForeignDevice)
}

// oldCrashView returns a readable copy of a vanished device's durable
// state (what the disk holds).
func oldCrashView(m *vfs.MemFS) *vfs.MemFS { return m.Crash() }

func TestReadsTouchOnlyNeededShards(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	s := mustCreate(t, td, testOpts(g, 8192)...)
	v, err := s.CreateVolume("vol", int64(g.Data*8192))
	require.NoError(t, err)
	_, err = v.WriteAt(randBytes(rand.New(rand.NewPCG(1, 1)), g.Data*8192), 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	ext, _, unlock := s.lockStripe(s.stripeRefs()[0])
	unlock()
	for _, f := range td.inj {
		f.ResetCounts()
	}
	// 4 KiB in the middle of data shard 1.
	_, err = v.ReadAt(make([]byte, 4096), 8192+4096)
	require.NoError(t, err)
	for pos, f := range td.inj {
		if pos == s.devOf(ext.Slot, 1) {
			assert.EqualValues(t, 2, f.Count(vfs.OpRead), "header and one sector")
		} else {
			assert.Zero(t, f.Count(vfs.OpRead), "device %d", pos)
		}
	}
	require.NoError(t, s.Close())
}

func TestTransientDeviceFailureHealsByScrub(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096)
	s := mustCreate(t, td, opts...)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(4, 4))
	want := randBytes(r, 1<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())

	// Device 1 starts failing writes: the store carries on without it.
	remove := td.inj[1].Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpWrite}, Err: syscall.EIO})
	update := randBytes(r, 256<<10)
	_, err = v.WriteAt(update, 128<<10)
	require.NoError(t, err)
	copy(want[128<<10:], update)
	require.NoError(t, s.Sync())
	assert.Equal(t, DeviceFailed, s.Info().Devices[1].State)
	degraded := s.Stats().DegradedWrites
	assert.NotZero(t, degraded)
	require.NoError(t, s.Close())

	// The device is back after a restart, with stale shards and a stale
	// metadata replica; the stripes written without it are marked.
	remove()
	s = mustOpen(t, td, opts...)
	assert.Equal(t, DeviceHealthy, s.Info().Devices[1].State)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, 1<<20)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	rep, err := s.Scrub(context.Background(), ScrubOptions{})
	require.NoError(t, err)
	assert.Positive(t, rep.Repaired)
	assert.Zero(t, rep.Unrecoverable)
	requireClean(t, s)
	require.NoError(t, s.Close())
	s = mustOpen(t, td, opts...)
	for _, ref := range s.stripeRefs() {
		ext, _, unlock := s.lockStripe(ref)
		unlock()
		assert.Zero(t, ext.Missing, "repairs cleared the marks durably")
	}
	require.NoError(t, s.Close())
}

func TestNoSpace(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096)
	s := mustCreate(t, td, opts...)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(6, 6))
	want := randBytes(r, 1<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())

	// Device 3 fills up in the middle of a write (a torn shard write).
	// Writes go to the log's memory, so the error is the Sync's; the
	// stripes that could not be written stay in memory and keep serving
	// reads.
	remove := td.inj[3].Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpWrite}, Path: shardFile, After: 1, Err: syscall.ENOSPC, Torn: true})
	p := randBytes(r, 512<<10)
	_, err = v.WriteAt(p, 0)
	require.NoError(t, err)
	copy(want, p)
	_, err = v.WriteAt([]byte("cached"), 777)
	require.NoError(t, err)
	copy(want[777:], "cached")
	err = s.Sync()
	require.Error(t, err)
	assert.True(t, IsNoSpace(err), "%v", err)
	assert.ErrorIs(t, err, ErrNoSpace)
	assert.Equal(t, DeviceHealthy, s.Info().Devices[3].State, "a full device is not a failed one")
	err = s.Sync()
	assert.True(t, IsNoSpace(err), "a retried Sync fails alike: %v", err)

	// Stored data is intact, before and after space returns.
	got := make([]byte, 1<<20)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	remove()
	require.NoError(t, s.Sync())
	requireClean(t, s)
	require.NoError(t, s.Close())
	td.crash()
	s = mustOpen(t, td, opts...)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	require.NoError(t, s.Close())
}

// TestNoSpaceCompacts: a stripe write that meets ENOSPC starts an idle
// pass at once, busy or not (WithIdleCompaction's wait does not apply),
// whose checkpoint punches free slots (not through InjectFS, which cannot);
// writes that need no flush go on meanwhile, and once space returns the
// data is intact.
func TestNoSpaceCompacts(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096, WithIdleCompaction(0.1, time.Hour))
	s := mustCreate(t, td, opts...)
	defer func() { _ = s.Close() }()
	const size = 2 << 20
	v, err := s.CreateVolume("vol", size)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(9, 9))
	want := randBytes(r, size)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	// Dead space for the pass to reclaim: scattered overwrites.
	for range size / SectorSize {
		off := r.IntN(size/SectorSize) * SectorSize
		p := randBytes(r, SectorSize)
		_, err := v.WriteAt(p, int64(off))
		require.NoError(t, err)
		copy(want[off:], p)
	}
	require.NoError(t, s.Sync())
	before := s.Stats()

	remove := td.inj[2].Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpWrite}, Path: shardFile, Err: syscall.ENOSPC})
	p := randBytes(r, SectorSize)
	_, err = v.WriteAtFlags(p, 0, FUA)
	require.True(t, IsNoSpace(err), "%v", err)
	copy(want, p)
	require.Eventually(t, func() bool { return s.Stats().IdleBytes > before.IdleBytes }, 10*time.Second, 5*time.Millisecond,
		"the pass started without the hour of idle time")
	q := randBytes(r, 64<<10)
	_, err = v.WriteAt(q, 1<<20)
	require.NoError(t, err, "a buffered write during the shortage")
	copy(want[1<<20:], q)
	remove()
	require.NoError(t, s.Sync())
	got := make([]byte, size)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	requireClean(t, s)
}

// TestTooManyDevicesLostShortFUA: a one-sector FUA write after M+1
// devices vanished writes a short stripe whose zero shards may sit on
// vanished devices; the flush still probes every device, so the write
// fails, and so does a Sync after it.
func TestTooManyDevicesLostShortFUA(t *testing.T) {
	g := DefaultGeometry
	td := newTestDevices(t, g.Devices())
	s := mustCreate(t, td, testOpts(g, 4096)...)
	v, err := s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	_, err = v.WriteAtFlags(make([]byte, 64<<10), 0, FUA)
	require.NoError(t, err)
	for pos := range g.Parity + 1 {
		td.mem[pos].Vanish()
	}
	_, err = v.WriteAtFlags(make([]byte, SectorSize), 32*SectorSize, FUA)
	require.Error(t, err)
	assert.True(t, IsUnavailable(err), "write error %v", err)
	assert.Error(t, s.Sync())
}
