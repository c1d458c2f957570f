package fs_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/fs/internal/fstest"
	"github.com/capsule-storage/capsule/fs/server"
)

// BenchmarkRead reads 4 KiB (random offsets, one at a time: QD1) and
// 1 MiB (sequential) through the client from a 64 MiB file, over each
// provider, beside a same-run baseline: copying the bytes in memory.
func BenchmarkRead(b *testing.B) {
	const fileSize = 64 << 20
	for _, url := range fstest.URLs() {
		tt := fstest.Start(b, url, server.Options{})
		c := dial(b, tt)
		ctx := context.Background()
		a, h, err := c.Create(ctx, capfs.RootIno, "bench", 0o644, uid, gid, syscall.O_RDWR)
		require.NoError(b, err)
		chunk := make([]byte, 1<<20)
		for i := range chunk {
			chunk[i] = byte(i * 7)
		}
		for off := 0; off < fileSize; off += len(chunk) {
			_, err := c.Write(ctx, a.Ino, h, chunk, int64(off))
			require.NoError(b, err)
		}
		for _, size := range []int{4 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", fstest.Scheme(url), size>>10), func(b *testing.B) {
				buf := make([]byte, size)
				r := rand.New(rand.NewPCG(1, 1))
				b.SetBytes(int64(size))
				b.ReportAllocs()
				off := int64(0)
				lat := make([]time.Duration, 0, 1<<16)
				for b.Loop() {
					t := time.Now()
					if size < 1<<20 {
						off = r.Int64N(fileSize/int64(size)) * int64(size)
					} else {
						off = (off + int64(size)) % fileSize
					}
					n, err := c.Read(ctx, a.Ino, h, buf, off)
					if err != nil || n != size {
						b.Fatalf("read %d at %d: %d, %v", size, off, n, err)
					}
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(t))
					}
				}
				reportLatency(b, lat)
			})
		}
		require.NoError(b, c.Release(ctx, a.Ino, h))
	}
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("memcpy/%dKiB", size>>10), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkMetadata creates, stats and unlinks files through the client
// over shm: one round trip each, and for create and unlink one bbolt
// commit (an fsync of the metadata file: on a disk it dominates).
func BenchmarkMetadata(b *testing.B) {
	url := fstest.URLs()[1]
	tt := fstest.Start(b, url, server.Options{})
	c := dial(b, tt)
	ctx := context.Background()
	b.Run("create", func(b *testing.B) {
		i := 0
		for b.Loop() {
			_, err := c.Mknod(ctx, capfs.RootIno, fmt.Sprintf("c%d", i), syscall.S_IFREG|0o644, 0, uid, gid)
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("stat", func(b *testing.B) {
		if _, err := c.Mknod(ctx, capfs.RootIno, "s", syscall.S_IFREG|0o644, 0, uid, gid); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.Lookup(ctx, capfs.RootIno, "s"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unlink", func(b *testing.B) {
		i := 0
		for b.Loop() {
			name := fmt.Sprintf("u%d", i)
			b.StopTimer()
			if _, err := c.Mknod(ctx, capfs.RootIno, name, syscall.S_IFREG|0o644, 0, uid, gid); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := c.Unlink(ctx, capfs.RootIno, name); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkWrite writes 1 MiB sequentially through the client over shm
// (each write one command, MDTS being 1 MiB on the RDMA binding: four
// blocks of the default 256 KiB and one metadata commit).
func BenchmarkWrite(b *testing.B) {
	tt := fstest.Start(b, fstest.URLs()[1], server.Options{})
	c := dial(b, tt)
	ctx := context.Background()
	a, h, err := c.Create(ctx, capfs.RootIno, "bench", 0o644, uid, gid, syscall.O_RDWR)
	require.NoError(b, err)
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	off := int64(0)
	for b.Loop() {
		if _, err := c.Write(ctx, a.Ino, h, buf, off); err != nil {
			b.Fatal(err)
		}
		off = (off + int64(len(buf))) % (256 << 20)
	}
	require.NoError(b, c.Release(ctx, a.Ino, h))
}

// reportLatency reports the median and 99th percentile of the measured
// operations: the mean ns/op hides a tail of scheduler and wake-up delays.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
