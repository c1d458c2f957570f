package server

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// BenchmarkServerRead is the server's share of a 4 KiB read: the whole
// of ExecuteVendor (credential, inode, permission, data) on in-memory
// chunkstore devices, so no device time and no transport. It reports
// the process's CPU per read (cpu-ns/op, getrusage: every goroutine the
// read wakes counts) beside a same-run baseline, a 4 KiB memcpy
// (memcpy).
//
//   - chunked: a 4 MiB file in chunks, random 4 KiB offsets.
//   - inline: a file of InlineMax bytes, kept in the database.
//   - user: as chunked, by a caller that is not root and reads through
//     the grant of its open handle (the file is 0200 and its own).
//   - getattr: GETATTR of the same file.
//
// Each runs with the inode cache (cache/...) and without it (nocache/...:
// CacheBytes -1, every operation reads its inode in a bbolt
// transaction), the same-run baseline of the cache.
func BenchmarkServerRead(b *testing.B) {
	for _, c := range []struct {
		name  string
		bytes int64
	}{{"cache", 0}, {"nocache", -1}} {
		b.Run(c.name, func(b *testing.B) { benchServerRead(b, Options{CacheBytes: c.bytes}) })
	}
	b.Run("memcpy", func(b *testing.B) {
		src, dst := make([]byte, 4096), make([]byte, 4096)
		b.SetBytes(4096)
		b.ReportAllocs()
		cpu0 := processCPU()
		n := 0
		for b.Loop() {
			copy(dst, src)
			n++
		}
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
	})
}

func benchServerRead(b *testing.B, opt Options) {
	s := newServer(b, opt)
	const size = 4 << 20
	f, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, 0)
	require.NoError(b, err)
	_, err = s.write(rootCred, f.Ino, 0, make([]byte, size), false)
	require.NoError(b, err)
	small, sh, err := s.create(rootCred, root, []byte("small"), 0o644, 0, 0, 0)
	require.NoError(b, err)
	_, err = s.write(rootCred, small.Ino, 0, make([]byte, DefaultInlineMax), false)
	require.NoError(b, err)

	// A user's file, made write-only (0200) after the user opened it for
	// reading: its reads pass by the handle's grant, the slower check.
	pc := proto.Cred{UID: 1000, GID: 1000, Groups: []uint32{4, 24, 27}}
	require.NoError(b, s.registerCred(pc.ID(), credRecord(&pc)))
	user, _ := s.creds.get(pc.ID())
	uf, uh, err := s.create(rootCred, root, []byte("u"), 0o644, 1000, 1000, 0)
	require.NoError(b, err)
	_, err = s.write(user, uf.Ino, 0, make([]byte, size), false)
	require.NoError(b, err)
	_, err = s.setAttr(user, uf.Ino, &proto.SetAttr{Valid: proto.SetMode, Mode: 0o200})
	require.NoError(b, err)
	rh := s.allocHandle()
	s.registerHandle(rh, uf.Ino, user, mayRead)

	data := make([]byte, 4096)
	run := func(b *testing.B, op nvmeof.Opcode, credID, ino uint64, span int64) {
		cmd := &nvmeof.Command{Opcode: op, MPTR: credID}
		cmd.CDW10, cmd.CDW11 = uint32(ino), uint32(ino>>32)
		if op == proto.OpRead {
			cmd.CDW14 = 4096
			b.SetBytes(4096)
		}
		benchVendor(b, s, &target.VendorCommand{Cmd: cmd, Data: data}, func(off int64) int64 {
			if span > 0 {
				off = (off + 4096*37) % span
			}
			return off
		})
	}
	b.Run("chunked", func(b *testing.B) { run(b, proto.OpRead, proto.RootCredID, f.Ino, size) })
	b.Run("inline", func(b *testing.B) { run(b, proto.OpRead, proto.RootCredID, small.Ino, 0) })
	b.Run("user", func(b *testing.B) { run(b, proto.OpRead, pc.ID(), uf.Ino, size) })
	b.Run("getattr", func(b *testing.B) { run(b, proto.OpGetAttr, pc.ID(), uf.Ino, 0) })
	require.NoError(b, s.release(f.Ino, h))
	require.NoError(b, s.release(small.Ino, sh))
	require.NoError(b, s.release(uf.Ino, uh))
	require.NoError(b, s.release(uf.Ino, rh))
}

// credRecord encodes c as CRED's data.
func credRecord(c *proto.Cred) []byte {
	b := make([]byte, c.Size())
	c.MarshalTo(b)
	return b
}

// processCPU returns the user and system time the process has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkOpenNamespace is Open of a namespace of 20 000 empty files
// (three records each: inode, entry and cookie) on in-memory devices: the load of the records into the working
// database and the orphan sweep. It reports records loaded per second.
func BenchmarkOpenNamespace(b *testing.B) {
	const files = 20_000
	d := newDevices(b)
	st, s := d.open(testOptions())
	for i := range files {
		_, err := s.mknod(rootCred, root, []byte(fmt.Sprintf("file-%06d", i)), sIFREG|0o644, 0, 0, 0)
		require.NoError(b, err)
	}
	require.NoError(b, s.Close())
	require.NoError(b, st.Close())
	n := 0
	for b.Loop() {
		st, s := d.open(testOptions())
		b.StopTimer()
		require.Equal(b, int64(files+1), s.Stats().Inodes)
		require.NoError(b, s.Close())
		require.NoError(b, st.Close())
		b.StartTimer()
		n++
	}
	b.ReportMetric(float64(3*files*n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkServerReadLarge is the server's share of a 1 MiB sequential
// read of a file on OS device directories (chunkstore.DefaultGeometry,
// the default block size) whose shards are all in the page cache, the
// case of R6′'s 1 MiB reads: ExecuteVendor alone, no transport. The
// directories are under CAPSULE_BENCH_DIR, or the test's temporary
// directory. It reports the read rate and the process's CPU per read.
func BenchmarkServerReadLarge(b *testing.B) {
	base := os.Getenv("CAPSULE_BENCH_DIR")
	if base == "" {
		base = b.TempDir()
	} else {
		var err error
		base, err = os.MkdirTemp(base, "server-bench-")
		require.NoError(b, err)
		b.Cleanup(func() { os.RemoveAll(base) })
	}
	st, err := chunkstore.CreateDirs(chunkstore.DeviceDirs(base, chunkstore.DefaultGeometry))
	require.NoError(b, err)
	defer st.Close()
	s, err := Open(st, Options{})
	require.NoError(b, err)
	defer s.Close()
	const size, bs = 64 << 20, 1 << 20
	f, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, 0)
	require.NoError(b, err)
	defer s.release(f.Ino, h)
	for off := int64(0); off < size; off += bs {
		_, err = s.write(rootCred, f.Ino, off, make([]byte, bs), false)
		require.NoError(b, err)
	}
	require.NoError(b, st.Sync())
	cmd := &nvmeof.Command{Opcode: proto.OpRead, MPTR: proto.RootCredID, CDW14: bs}
	cmd.CDW10, cmd.CDW11 = uint32(f.Ino), uint32(f.Ino>>32)
	b.SetBytes(bs)
	benchVendor(b, s, &target.VendorCommand{Cmd: cmd, Data: make([]byte, bs)}, func(off int64) int64 { return (off + bs) % size })
}

// benchVendor runs vc through ExecuteVendor b.N times, the offset in
// CDW12-13 from 0 and then from next, and reports the process's CPU per
// command.
func benchVendor(b *testing.B, s *Server, vc *target.VendorCommand, next func(off int64) int64) {
	cmd := vc.Cmd
	b.ReportAllocs()
	off := int64(0)
	cpu0 := processCPU()
	n := 0
	for b.Loop() {
		cmd.CDW12, cmd.CDW13 = uint32(off), uint32(off>>32)
		if s.ExecuteVendor(vc) != nvmeof.StatusSuccess || vc.DW0 != 0 {
			b.Fatalf("%s: errno %d", proto.OpName(cmd.Opcode), vc.DW0)
		}
		off = next(off)
		n++
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
}
