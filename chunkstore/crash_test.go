package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// The crash tests run a random workload on in-memory devices that crash
// together at a random operation, reopen the store from what survived,
// and check the promise of Sync and FUA: every block reads either its
// content as of the last completed Sync (or FUA write to it) or a value
// written after that; and every stripe verifies.

const crashBlock = 512 // the model's block: the NVMe LBA size

// pageBlocks is the crash model's blocks per 4 KiB page.
const pageBlocks = SectorSize / crashBlock

// blockModel tracks, per block, what a read after a crash may return.
type blockModel struct {
	durable []uint32   // version as of the last completed Sync / FUA
	since   [][]uint32 // versions written since (any may have survived)
	latest  []uint32   // last version written
	next    uint32
}

func newBlockModel(blocks int) *blockModel {
	return &blockModel{durable: make([]uint32, blocks), since: make([][]uint32, blocks), latest: make([]uint32, blocks), next: 1}
}

// content is the bytes of block b at version v (0 is zeros).
func blockContent(v uint32, b int) []byte {
	out := make([]byte, crashBlock)
	if v == 0 {
		return out
	}
	r := rand.New(rand.NewPCG(uint64(v), uint64(b)))
	for i := 0; i < crashBlock; i += 8 {
		x := r.Uint64()
		for j := range 8 {
			out[i+j] = byte(x >> (8 * j))
		}
	}
	return out
}

func (m *blockModel) write(first, count int, v uint32) {
	for b := first; b < first+count; b++ {
		m.since[b] = append(m.since[b], v)
		m.latest[b] = v
	}
}

func (m *blockModel) fua(first, count int, v uint32) {
	for b := first; b < first+count; b++ {
		m.durable[b] = v
		m.since[b] = nil
		m.latest[b] = v
	}
}

func (m *blockModel) synced() {
	for b := range m.durable {
		m.durable[b] = m.latest[b]
		m.since[b] = nil
	}
}

// check reads every block and returns the first that holds an impossible
// value.
func (m *blockModel) check(t *testing.T, v *Volume) {
	t.Helper()
	buf := make([]byte, len(m.durable)*crashBlock)
	_, err := v.ReadAt(buf, 0)
	require.NoError(t, err)
	for b := range m.durable {
		got := buf[b*crashBlock : (b+1)*crashBlock]
		ok := bytes.Equal(got, blockContent(m.durable[b], b))
		for _, ver := range m.since[b] {
			ok = ok || bytes.Equal(got, blockContent(ver, b))
		}
		require.True(t, ok, "block %d holds neither its durable version %d nor one of %v", b, m.durable[b], m.since[b])
		// Collapse the model to what survived.
		for _, ver := range append([]uint32{m.durable[b]}, m.since[b]...) {
			if bytes.Equal(got, blockContent(ver, b)) {
				m.durable[b], m.latest[b] = ver, ver
				break
			}
		}
		m.since[b] = nil
	}
}

// chunkModel tracks, per chunk ID, the versions a read after a crash may
// return (version 0: no chunk).
type chunkModel struct {
	ids     []ChunkID
	durable map[ChunkID]uint32
	since   map[ChunkID][]uint32
	latest  map[ChunkID]uint32
}

func newChunkModel() *chunkModel {
	c := &chunkModel{durable: map[ChunkID]uint32{}, since: map[ChunkID][]uint32{}, latest: map[ChunkID]uint32{}}
	for i := range 3 {
		c.ids = append(c.ids, ChunkID{byte(i + 1)})
	}
	return c
}

// chunkContent is version v of a chunk: up to about three stripes.
func chunkContent(v uint32, stripe int) []byte {
	if v == 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(uint64(v), 77))
	return randBytes(r, 1+r.IntN(3*stripe))
}

func (c *chunkModel) synced() {
	for id, v := range c.latest {
		c.durable[id] = v
		c.since[id] = nil
	}
}

func (c *chunkModel) check(t *testing.T, s *Store) {
	t.Helper()
	for _, id := range c.ids {
		got, err := s.GetChunk(id)
		if err != nil {
			require.ErrorIs(t, err, ErrNotFound)
		}
		ok := false
		for _, v := range append([]uint32{c.durable[id]}, c.since[id]...) {
			if (v == 0 && err != nil) || (v != 0 && err == nil && bytes.Equal(got, chunkContent(v, s.stripeBytes()))) {
				ok = true
				c.durable[id], c.latest[id] = v, v
				break
			}
		}
		require.True(t, ok, "chunk %x is neither version %d nor one of %v: read %d bytes, err %v", id[0], c.durable[id], c.since[id], len(got), err)
		c.since[id] = nil
	}
}

// crashWorkload does random writes, FUA writes, discards, chunk puts and
// deletes, and syncs until it has done ops operations or the devices
// crash.
func crashWorkload(r *rand.Rand, v *Volume, m *blockModel, cm *chunkModel, ops int) error {
	blocks := len(m.durable)
	s := v.s
	for range ops {
		first := r.IntN(blocks)
		count := 1 + r.IntN(min(blocks-first, 40))
		if v.wc != nil && r.IntN(2) == 0 && blocks >= pageBlocks {
			// Whole 4 KiB pages, for the write cache.
			first = min(first/pageBlocks, blocks/pageBlocks-1) * pageBlocks
			count = min((count+pageBlocks-1)/pageBlocks*pageBlocks, blocks/pageBlocks*pageBlocks-first)
		}
		if r.IntN(6) == 0 {
			id := cm.ids[r.IntN(len(cm.ids))]
			ver := m.next
			m.next++
			var flags WriteFlags
			if r.IntN(3) == 0 {
				flags = FUA
			}
			var err error
			if r.IntN(4) == 0 {
				ver = 0
				err = s.DeleteChunk(id, flags)
				if errors.Is(err, ErrNotFound) {
					continue
				}
			} else {
				err = s.PutChunk(id, chunkContent(ver, s.stripeBytes()), flags)
			}
			cm.since[id] = append(cm.since[id], ver)
			cm.latest[id] = ver
			if err != nil {
				return err
			}
			if flags == FUA {
				cm.durable[id], cm.since[id] = ver, nil
			}
			continue
		}
		switch op := r.IntN(20); {
		case op < 13:
			ver := m.next
			m.next++
			p := make([]byte, 0, count*crashBlock)
			for b := first; b < first+count; b++ {
				p = append(p, blockContent(ver, b)...)
			}
			var flags WriteFlags
			if op == 0 {
				flags = FUA
			}
			_, err := v.WriteAtFlags(p, int64(first)*crashBlock, flags)
			if err != nil {
				m.write(first, count, ver)
				return err
			}
			if flags == FUA {
				m.fua(first, count, ver)
			} else {
				m.write(first, count, ver)
			}
		case op < 16:
			err := v.Discard(int64(first)*crashBlock, int64(count)*crashBlock)
			m.write(first, count, 0)
			if err != nil {
				return err
			}
		default:
			if err := v.Sync(); err != nil {
				return err
			}
			m.synced()
			cm.synced()
		}
	}
	return nil
}

func TestCrashConsistency(t *testing.T) {
	crashCompactions.Store(0)
	n := seeds(100, 1000)
	for seed := range n {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCrash(t, uint64(seed)) })
	}
	if n >= 20 {
		require.Positive(t, crashCompactions.Load(), "some seeds made idle passes")
		require.Positive(t, crashCached.Load(), "some seeds cached writes")
	}
	t.Logf("%d idle passes, %d bytes cached", crashCompactions.Load(), crashCached.Load())
}

// crashCompactions counts the idle passes the crash test's stores made,
// and crashCached the bytes their write caches took before the crash.
var crashCompactions, crashCached atomic.Int64

func runCrash(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0xc0ffee))
	geos := []Geometry{{4, 2}, {2, 1}, {4, 2}, {1, 0}, {3, 2}}
	g := geos[seed%uint64(len(geos))]
	unit := 4096 * (1 + r.IntN(2))
	// Background checkpoints (and writers checkpointing for themselves)
	// land between the workload's operations at times of their own; with
	// little over-provisioning the cleaner moves data all the time, so
	// crashes land inside its moves too.
	autoCommit := []int{0, 2, 16}[r.IntN(3)]
	overprov := []float64{0.05, 0.3, DefaultOverProvision}[r.IntN(3)]
	// Half the seeds run on the in-memory devices themselves, whose
	// shard files share cache flushes and punch holes; and idle passes
	// (compaction and trimming checkpoints) start whenever the workload
	// pauses for a millisecond.
	td := newTestDevices(t, g.Devices())
	td.direct = seed%2 == 1
	idle := []time.Duration{0, time.Millisecond, 5 * time.Millisecond}[r.IntN(3)]
	opts := testOpts(g, unit, WithAutoCommit(autoCommit), WithOverProvision(overprov), WithIdleCompaction(0.1, idle))
	if seed%3 == 2 {
		// A third keep their metadata in the devices' own files
		// (meta.log), where the crash reaches it too; bbolt's host
		// files survive a simulated crash whole.
		opts = append(opts, WithMetaLog())
	}
	if seed%4 == 3 {
		// A quarter put a write cache before the volumes (crashWorkload
		// then makes half its writes whole pages, which the cache takes),
		// destaging after a few milliseconds as well as at Syncs.
		opts = append(opts, WithWriteCache(1<<20), withWriteCacheExpire(time.Duration(r.IntN(4))*time.Millisecond))
	}
	s := mustCreate(t, td, opts...)
	blocks := (g.Data*unit*12 + 3*crashBlock) / crashBlock
	v, err := s.CreateVolume("vol", int64(blocks*crashBlock))
	require.NoError(t, err)
	fv, err := s.CreateVolume("fua", int64(fuaBlocks*crashBlock))
	require.NoError(t, err)
	m := newBlockModel(blocks)
	fm := newBlockModel(fuaBlocks)
	cm := newChunkModel()

	// Some durable history first, then a crash somewhere in more work,
	// while two writers make FUA writes to the other volume at once, so
	// that crashes also land inside group commits.
	require.NoError(t, crashWorkload(r, v, m, cm, 15))
	require.NoError(t, v.Sync())
	m.synced()
	cm.synced()
	td.clock.CrashAfter(r.Int64N(700))
	fuaDone := startFUAWriters(seed, fv, fm)
	err = crashWorkload(r, v, m, cm, 60)
	if err == nil {
		td.clock.Crash()
	} else {
		require.True(t, errors.Is(err, vfs.ErrCrashed) || errors.Is(err, ErrTooManyFailures), "workload failed for another reason: %v", err)
	}
	for _, err := range fuaDone() {
		require.True(t, err == nil || errors.Is(err, vfs.ErrCrashed) || errors.Is(err, ErrTooManyFailures), "FUA writer failed for another reason: %v", err)
	}
	st := s.Stats()
	crashCompactions.Add(st.Compactions)
	crashCached.Add(st.WriteCacheBytes + st.WriteCacheDestaged)
	_ = s.Close()
	td.crash()

	s = mustOpen(t, td, opts...)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	m.check(t, v)
	fv, err = s.OpenVolume("fua")
	require.NoError(t, err)
	fm.check(t, fv)
	cm.check(t, s)
	requireClean(t, s)

	// The recovered store keeps working: more writes, a clean close,
	// and the data is all there.
	require.NoError(t, crashWorkload(r, v, m, cm, 15))
	crashCompactions.Add(s.Stats().Compactions)
	require.NoError(t, s.Close())
	m.synced()
	cm.synced()
	s = mustOpen(t, td, opts...)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	m.check(t, v)
	cm.check(t, s)
	requireClean(t, s)
	require.NoError(t, s.Close())
}

// fuaBlocks is the size of the crash test's FUA volume, in blocks: half
// for each of its two writers.
const fuaBlocks = 256

// startFUAWriters starts two goroutines that write the volume with FUA
// (each its own half, so that each keeps its own blocks of the model),
// until the devices crash or each has made 40 writes. The returned
// function waits for them and returns their errors.
func startFUAWriters(seed uint64, v *Volume, m *blockModel) func() []error {
	errs := make([]error, 2)
	done := make(chan struct{}, 2)
	for w := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			half := fuaBlocks / 2
			for i := range 40 {
				first := w*half + r.IntN(half-8)
				count := 1 + r.IntN(8)
				ver := uint32(w+1)<<24 | uint32(i+1)
				p := make([]byte, 0, count*crashBlock)
				for b := first; b < first+count; b++ {
					p = append(p, blockContent(ver, b)...)
				}
				if _, err := v.WriteAtFlags(p, int64(first)*crashBlock, FUA); err != nil {
					m.write(first, count, ver) // it may have reached the disk
					errs[w] = err
					return
				}
				m.fua(first, count, ver)
			}
		}()
	}
	return func() []error {
		<-done
		<-done
		return errs
	}
}

// TestCrashDuringRebuild crashes a rebuild at a random point: after the
// reopen the rebuild resumes and completes, and the data verifies byte
// for byte.
func TestCrashDuringRebuild(t *testing.T) {
	for seed := range seeds(16, 160) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 7))
			g := Geometry{4, 2}
			td := newTestDevices(t, g.Devices())
			opts := testOpts(g, 4096)
			s := mustCreate(t, td, opts...)
			size := int64(g.Data * 4096 * 40)
			v, err := s.CreateVolume("vol", size)
			require.NoError(t, err)
			want := randBytes(r, int(size))
			_, err = v.WriteAt(want, 0)
			require.NoError(t, err)
			require.NoError(t, s.Close())

			lost := r.IntN(g.Devices())
			td.replace(lost)
			s = mustOpen(t, td, opts...)
			require.Equal(t, DeviceMissing, s.Info().Devices[lost].State)
			td.clock.CrashAfter(r.Int64N(2500))
			_, err = s.Rebuild(context.Background(), lost, RebuildOptions{})
			if err == nil {
				td.clock.Crash()
			}
			_ = s.Close()
			td.crash()

			s = mustOpen(t, td, opts...)
			if st := s.Info().Devices[lost].State; st != DeviceHealthy {
				_, err = s.Rebuild(context.Background(), lost, RebuildOptions{})
				require.NoError(t, err)
			}
			require.Equal(t, DeviceHealthy, s.Info().Devices[lost].State)
			requireClean(t, s)
			v, err = s.OpenVolume("vol")
			require.NoError(t, err)
			got := make([]byte, size)
			_, err = v.ReadAt(got, 0)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got))
			require.Zero(t, s.Stats().Reconstructions, "every read is served by the rebuilt devices")
			require.NoError(t, s.Close())
		})
	}
}
