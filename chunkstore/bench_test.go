package chunkstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/reedsolomon"
	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// Benchmarks run on the OS file system, in tmpfs (/dev/shm) when the
// machine has it, so they measure the store's own cost, as the baselines
// in shared/PERFORMANCE.md do. CHUNKSTORE_BENCH_DIR picks another place.
//
//	go test -run '^$' -bench . -benchtime 2s ./chunkstore
//
// Ratios to read (R7): SeqWrite/4+2 over SeqWrite/1+0 (the same path on
// plain storage); SeqRead/degraded over SeqRead/healthy; Encode/store
// beside Encode/reedsolomon (the library called directly) and
// Encode/memcpy.

func benchDir(b *testing.B) string {
	base := os.Getenv("CHUNKSTORE_BENCH_DIR")
	if base == "" {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm"
		}
	}
	if base == "" {
		return b.TempDir()
	}
	d, err := os.MkdirTemp(base, "chunkstore-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func benchStore(b *testing.B, g Geometry, unit int, opts ...Option) (*Store, []string) {
	b.Helper()
	dirs := DeviceDirs(benchDir(b), g)
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	s, err := CreateDirs(dirs, append([]Option{WithGeometry(g), WithStripeUnit(unit)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s, dirs
}

const benchIO = 1 << 20

// benchVolume creates the volume "bench" of size bytes on s and fills it
// with p, over and over.
func benchVolume(b *testing.B, s *Store, size int64, p []byte) *Volume {
	b.Helper()
	v, err := s.CreateVolume("bench", size)
	if err != nil {
		b.Fatal(err)
	}
	for off := int64(0); off < size; off += int64(len(p)) {
		if _, err := v.WriteAt(p, off); err != nil {
			b.Fatal(err)
		}
	}
	return v
}

// BenchmarkSeqWrite writes 1 MiB at a time through a volume, syncing
// each time it wraps around (every 256 MiB).
func BenchmarkSeqWrite(b *testing.B) {
	for _, g := range []Geometry{{4, 2}, {1, 0}} {
		b.Run(g.String(), func(b *testing.B) { benchSeqWrite(b, g, DefaultStripeUnit) })
	}
}

func benchSeqWrite(b *testing.B, g Geometry, unit int) {
	s, _ := benchStore(b, g, unit)
	const size = 256 << 20
	v, err := s.CreateVolume("bench", size)
	if err != nil {
		b.Fatal(err)
	}
	p := randBytes(rand.New(rand.NewPCG(1, 1)), benchIO)
	b.SetBytes(benchIO)
	b.ReportAllocs()
	b.ResetTimer()
	off := int64(0)
	for b.Loop() {
		if _, err := v.WriteAt(p, off); err != nil {
			b.Fatal(err)
		}
		off += benchIO
		if off == size {
			off = 0
			if err := v.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := v.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSeqWriteQD8 overwrites a full 1 GiB 4+2 volume 1 MiB at a
// time from eight goroutines, as fio's 1 MiB writes at QD8 do through a
// target, without syncs: the log's sustained rate, checkpoints included.
func BenchmarkSeqWriteQD8(b *testing.B) { benchSeqWriteQD8(b) }

// BenchmarkSeqWriteQD8Cached is BenchmarkSeqWriteQD8 with a write cache
// larger than the volume (WithWriteCache): the final Sync destages it.
func BenchmarkSeqWriteQD8Cached(b *testing.B) { benchSeqWriteQD8(b, WithWriteCache(2<<30)) }

func benchSeqWriteQD8(b *testing.B, opts ...Option) {
	s, _ := benchStore(b, DefaultGeometry, DefaultStripeUnit, opts...)
	const size = 1 << 30
	p := randBytes(rand.New(rand.NewPCG(1, 1)), benchIO)
	v := benchVolume(b, s, size, p)
	if err := v.Sync(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchIO)
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if _, err := v.WriteAt(p, i*benchIO%size); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := v.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSeqRead reads 1 MiB at a time from a full 4+2 volume, with
// every device healthy and with one device gone.
func BenchmarkSeqRead(b *testing.B) {
	g := DefaultGeometry
	for _, mode := range []string{"healthy", "degraded"} {
		b.Run(mode, func(b *testing.B) {
			s, dirs := benchStore(b, g, DefaultStripeUnit)
			const size = 128 << 20
			benchVolume(b, s, size, randBytes(rand.New(rand.NewPCG(2, 2)), benchIO))
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			if mode == "degraded" {
				if err := os.RemoveAll(dirs[1]); err != nil {
					b.Fatal(err)
				}
			}
			s, err := OpenDirs(dirs)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			v, err := s.OpenVolume("bench")
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, benchIO)
			b.SetBytes(benchIO)
			b.ReportAllocs()
			b.ResetTimer()
			off := int64(0)
			for b.Loop() {
				if _, err := v.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				off = (off + benchIO) % size
			}
		})
	}
}

// BenchmarkRandRead reads 4 KiB at random offsets of a full 4+2 volume
// that was written sequentially (a run per map page) or then overwritten
// by 4 KiB writes at random (a run per sector, scattered over slots): the
// store's cost per small read, page cache under it (R7′: no slower than
// the v1 engine).
func BenchmarkRandRead(b *testing.B) {
	for _, layout := range []string{"sequential", "random"} {
		b.Run(layout, func(b *testing.B) {
			s, _ := benchStore(b, DefaultGeometry, DefaultStripeUnit)
			const size = 128 << 20
			r := rand.New(rand.NewPCG(3, 3))
			p := randBytes(r, benchIO)
			v := benchVolume(b, s, size, p)
			if layout == "random" {
				for range size / 4096 {
					if _, err := v.WriteAt(p[:4096], r.Int64N(size/4096)*4096); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := s.Sync(); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 4096)
			b.SetBytes(4096)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := v.ReadAt(buf, r.Int64N(size/4096)*4096); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRandWriteQD8 writes 4 KiB at random over a full 1 GiB 4+2
// volume from eight goroutines, and syncs at the end: without a write
// cache, with one of 64 MiB (a sixteenth of the volume, so it is short of
// room all the time and destages under pressure), and with one larger
// than the volume.
func BenchmarkRandWriteQD8(b *testing.B) {
	for _, c := range []struct {
		name  string
		bytes int64
	}{{"cache=none", 0}, {"cache=64MiB", 64 << 20}, {"cache=2GiB", 2 << 30}} {
		b.Run(c.name, func(b *testing.B) {
			s, _ := benchStore(b, DefaultGeometry, DefaultStripeUnit, WithWriteCache(c.bytes))
			const size = 1 << 30
			p := randBytes(rand.New(rand.NewPCG(4, 4)), benchIO)
			v := benchVolume(b, s, size, p)
			if err := v.Sync(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(4096)
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), 5))
					for next.Add(1) <= int64(b.N) {
						if _, err := v.WriteAt(p[:4096], r.Int64N(size/4096)*4096); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if err := v.Sync(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkEncode compares the store's encoding of one full stripe (4+2,
// 64 KiB units: parity plus the CRC32C of every sector of every shard)
// with reedsolomon's encoder called directly, its pure-Go fallback, and a
// memory copy of the same bytes.
func BenchmarkEncode(b *testing.B) {
	g, unit := DefaultGeometry, DefaultStripeUnit
	data := randBytes(rand.New(rand.NewPCG(3, 3)), g.Data*unit)
	shards := make([][]byte, g.Devices())
	for i := range shards {
		if i < g.Data {
			shards[i] = data[i*unit : (i+1)*unit]
		} else {
			shards[i] = make([]byte, unit)
		}
	}
	run := func(name string, fn func()) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				fn()
			}
		})
	}
	c, err := newCodec(g)
	if err != nil {
		b.Fatal(err)
	}
	run("store", func() {
		if err := c.encode(shards); err != nil {
			b.Fatal(err)
		}
		for _, sh := range shards {
			for j := 0; j < len(sh); j += SectorSize {
				_ = checksum(sh[j : j+SectorSize])
			}
		}
	})
	rs, err := reedsolomon.New(g.Data, g.Parity)
	if err != nil {
		b.Fatal(err)
	}
	run("reedsolomon", func() {
		if err := rs.Encode(shards); err != nil {
			b.Fatal(err)
		}
	})
	pure, err := reedsolomon.New(g.Data, g.Parity, pureGoOptions...)
	if err != nil {
		b.Fatal(err)
	}
	run("reedsolomon-purego", func() {
		if err := pure.Encode(shards); err != nil {
			b.Fatal(err)
		}
	})
	dst := make([]byte, len(data))
	run("memcpy", func() { copy(dst, data) })
}

// BenchmarkStripeUnit is the measurement behind DefaultStripeUnit: 4+2
// sequential 1 MiB writes, and 4 KiB random reads and writes (each write
// synced, as a random-write workload with FUA would be), per unit.
func BenchmarkStripeUnit(b *testing.B) {
	for _, unit := range []int{16 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20} {
		name := fmt.Sprintf("%dK", unit>>10)
		b.Run(name+"/seqwrite", func(b *testing.B) { benchSeqWrite(b, DefaultGeometry, unit) })
		b.Run(name+"/randread4k", func(b *testing.B) { benchRandom(b, unit, false) })
		b.Run(name+"/randwrite4k", func(b *testing.B) { benchRandom(b, unit, true) })
	}
}

func benchRandom(b *testing.B, unit int, write bool) {
	s, _ := benchStore(b, DefaultGeometry, unit)
	const size = 64 << 20
	p := randBytes(rand.New(rand.NewPCG(4, 4)), benchIO)
	v := benchVolume(b, s, size, p)
	if err := v.Sync(); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	buf := make([]byte, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		off := r.Int64N(size/4096) * 4096
		if write {
			if _, err := v.WriteAtFlags(buf, off, FUA); err != nil {
				b.Fatal(err)
			}
		} else if _, err := v.ReadAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlainFile is the floor under SeqWrite/1+0: 1 MiB pwrites to
// one file on the same file system.
func BenchmarkPlainFile(b *testing.B) {
	dir := benchDir(b)
	f, err := vfs.NewOS(dir).OpenFile("plain", os.O_RDWR|os.O_CREATE)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	p := randBytes(rand.New(rand.NewPCG(1, 1)), benchIO)
	const size = 256 << 20
	b.SetBytes(benchIO)
	b.ReportAllocs()
	off := int64(0)
	for b.Loop() {
		if _, err := f.WriteAt(p, off); err != nil {
			b.Fatal(err)
		}
		off += benchIO
		if off == size {
			off = 0
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkFUA measures 4 KiB FUA writes at random offsets of a 4+2
// volume beside its baseline, a 4 KiB pwrite and fdatasync of a plain
// file, both on a real disk (CHUNKSTORE_FUA_DIR, /var/tmp by default:
// tmpfs makes fsync free). It reports the median latency of each (R7′: the
// store's at most 1.5 × the plain file's). Writers, when more than one,
// run at once: their FUA writes share flushes (group commit).
func BenchmarkFUA(b *testing.B) {
	dir := os.Getenv("CHUNKSTORE_FUA_DIR")
	if dir == "" {
		dir = "/var/tmp"
	}
	for _, writers := range []int{1, 8} {
		b.Run(fmt.Sprintf("store/writers=%d", writers), func(b *testing.B) {
			base, err := os.MkdirTemp(dir, "chunkstore-fua-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = os.RemoveAll(base) })
			s, err := CreateDirs(DeviceDirs(base, DefaultGeometry))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			const size = 256 << 20
			v, err := s.CreateVolume("fua", size)
			if err != nil {
				b.Fatal(err)
			}
			// Written twice, as fio lays out its file and a workload
			// overwrites it: the log then reuses the freed slots, which
			// the shard files have blocks for.
			fill := make([]byte, 1<<20)
			for range 2 {
				for off := int64(0); off < size; off += int64(len(fill)) {
					if _, err := v.WriteAt(fill, off); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			for range 2 {
				if err := s.commit(); err != nil {
					b.Fatal(err)
				}
			}
			st0 := s.Stats()
			benchLatency(b, writers, func(r *rand.Rand, buf []byte) error {
				_, err := v.WriteAtFlags(buf, r.Int64N(size/4096)*4096, FUA)
				return err
			})
			// How the flushes went: shard-file fdatasyncs per write, and
			// writes whose devices shared one disk flush.
			st := s.Stats()
			b.ReportMetric(float64(st.DeviceSyncs-st0.DeviceSyncs)/float64(b.N), "syncs/op")
			b.ReportMetric(float64(st.SharedFlushes-st0.SharedFlushes)/float64(b.N), "shared/op")
		})
	}
	b.Run("plainfile", func(b *testing.B) {
		f, err := os.CreateTemp(dir, "chunkstore-fua-plain-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close(); _ = os.Remove(f.Name()) })
		const size = 256 << 20
		// Allocated, as fio lays out its file before a run.
		fill := make([]byte, 1<<20)
		for off := int64(0); off < size; off += int64(len(fill)) {
			if _, err := f.WriteAt(fill, off); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		benchLatency(b, 1, func(r *rand.Rand, buf []byte) error {
			if _, err := f.WriteAt(buf, r.Int64N(size/4096)*4096); err != nil {
				return err
			}
			return unix.Fdatasync(int(f.Fd()))
		})
	})
}

// benchLatency runs op b.N times over writers goroutines and reports the
// median and 99th percentile latency of one op.
func benchLatency(b *testing.B, writers int, op func(*rand.Rand, []byte) error) {
	per := make([][]time.Duration, writers)
	b.SetBytes(4096)
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	n := b.N
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			buf := randBytes(r, 4096)
			for i := w; i < n; i += writers {
				t0 := time.Now()
				if err := op(r, buf); err != nil {
					b.Error(err)
					return
				}
				per[w] = append(per[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	// The process's CPU per operation: the caller's and every goroutine
	// it wakes (flushes, the committer, the cleaner).
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
	var all []time.Duration
	for _, p := range per {
		all = append(all, p...)
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds()), "p99-ns")
}

// processCPU returns the user and system time the process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
