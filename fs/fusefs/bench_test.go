package fusefs

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/fs/internal/fstest"
)

// BenchmarkMountRead reads 4 KiB at random offsets of a 16 MiB file
// through the mount with O_DIRECT (every read a FUSE READ, QD1), and
// stats it (every stat a FUSE GETATTR: AttrTimeout 0), on a mount of the
// in-memory client (mem: the mount's own cost and the kernel's, the
// same-run baseline) and of a target in this process over shm (the
// target's, the client's and the transport's on top). cpu-ns/op is the
// process's CPU per request (getrusage: the reading thread's system
// time, the mount's goroutines and, for shm, the target's).
func BenchmarkMountRead(b *testing.B) {
	const size = 16 << 20
	o := Options{EntryTimeout: time.Second}
	mems, _ := mountMem(b, o)
	shm, _ := mountTarget(b, fstest.URLs()[1], o) // shm://
	for _, mnt := range []struct{ name, dir string }{{"mem", mems}, {"shm", shm}} {
		p := filepath.Join(mnt.dir, "bench")
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		require.NoError(b, os.WriteFile(p, data, 0o644))
		b.Run(mnt.name+"/read-4KiB", func(b *testing.B) {
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECT, 0)
			require.NoError(b, err)
			defer unix.Close(fd)
			buf := alignedBuffer(4096)
			r := rand.New(rand.NewPCG(1, 1))
			b.SetBytes(4096)
			perRequest(b, func() error {
				_, err := unix.Pread(fd, buf, r.Int64N(size/4096)*4096)
				return err
			})
		})
		b.Run(mnt.name+"/stat", func(b *testing.B) {
			var st unix.Stat_t
			perRequest(b, func() error { return unix.Stat(p, &st) })
		})
	}
}

// perRequest runs op b.N times and reports the process's CPU per call.
func perRequest(b *testing.B, op func() error) {
	b.ReportAllocs()
	n := 0
	cpu0 := processCPU()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
}

// alignedBuffer returns n bytes aligned for O_DIRECT.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptr(unsafePointer(b))%4096)
	return b[off%4096 : off%4096+n]
}

// processCPU returns the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
