package server

import (
	"encoding/binary"

	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// hostDir returns a directory for the chunkstore's bbolt files: tmpfs when there is one
// (bbolt fsyncs every commit), else the test's temp dir.
func hostDir(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "capfs-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// devices are in-memory chunkstore devices that crash together.
type devices struct {
	t     testing.TB
	clock *vfs.CrashClock
	mem   []*vfs.MemFS
	opts  []chunkstore.Option
}

var testGeometry = chunkstore.Geometry{Data: 2, Parity: 1}

func newDevices(t testing.TB) *devices {
	d := &devices{t: t, clock: vfs.NewCrashClock()}
	for i := range testGeometry.Devices() {
		d.mem = append(d.mem, vfs.NewMem(vfs.WithCrashClock(d.clock), vfs.WithHostDir(hostDir(t)), vfs.WithName("mem"+string(rune('0'+i)))))
	}
	return d
}

func (d *devices) fs() []vfs.FS {
	out := make([]vfs.FS, len(d.mem))
	for i, m := range d.mem {
		out[i] = m
	}
	return out
}

// crash is a power loss of every device: only synced data survives.
func (d *devices) crash() {
	d.clock.Crash()
	d.clock = vfs.NewCrashClock()
	for i, m := range d.mem {
		d.mem[i] = m.Crash(vfs.WithCrashClock(d.clock))
	}
}

var storeOpts = []chunkstore.Option{chunkstore.WithGeometry(testGeometry), chunkstore.WithStripeUnit(4096)}

// testOptions: small blocks and inline limit, so that small tests cross
// every boundary.
func testOptions() Options {
	return Options{BlockSize: 8192, InlineMax: 512, Capacity: 1 << 30, FSID: 7}
}

// open opens the store and the server on d.
func (d *devices) open(opt Options) (*chunkstore.Store, *Server) {
	d.t.Helper()
	st, err := chunkstore.OpenOrCreate(d.fs(), append(append([]chunkstore.Option(nil), storeOpts...), d.opts...)...)
	require.NoError(d.t, err)
	s, err := Open(st, opt)
	require.NoError(d.t, err)
	return st, s
}

// newServer is a server on fresh in-memory devices, closed at the end of
// the test.
func newServer(t testing.TB, opt Options) *Server {
	d := newDevices(t)
	st, s := d.open(opt)
	t.Cleanup(func() {
		s.Close()
		st.Close()
	})
	return s
}

func requireErrno(t testing.TB, want syscall.Errno, err error, msg ...any) {
	t.Helper()
	var got syscall.Errno
	require.True(t, errors.As(err, &got), "want %v, got %v %v", want, err, msg)
	require.Equal(t, want, got, msg...)
}

// fixedClock is a clock tests can read back.
func fixedClock() func() time.Time {
	t0 := time.Unix(1_700_000_000, 0)
	return func() time.Time { return t0 }
}

// checkInvariants checks what every recovery promises: each chunk of this
// file system belongs to a regular file with chunked data and lies inside
// it, each file's chunk count matches its chunks, every file reads whole,
// and the space in use is what the chunks and inline data take.
func checkInvariants(t testing.TB, s *Server) {
	t.Helper()
	counts := map[uint64]uint64{}
	for _, ci := range s.store.Chunks() {
		ino, b, ok := s.parseChunkID(ci.ID)
		require.True(t, ok, "a chunk of another file system: %v", ci.ID)
		n, err := s.viewInode(ino)
		require.NoError(t, err, "chunk of inode %d, which does not exist", ino)
		require.True(t, n.isReg() && !n.inline(), "chunk of inode %d, which has no chunked data", ino)
		require.Less(t, b*s.bs, int64(n.Size), "chunk %d past the end of inode %d", b, ino)
		counts[ino]++
	}
	var used int64
	inodes := int64(0)
	var regular []uint64
	require.NoError(t, s.db.View(func(tx *bboltTx) error {
		return tx.Bucket(bucketInodes).ForEach(func(k, v []byte) error {
			var n inode
			require.NoError(t, n.unmarshal(v))
			ino := beUint64(k)
			inodes++
			if n.isReg() && n.inline() {
				used += int64(n.Size)
			} else {
				used += int64(counts[ino]) * s.bs
				require.Equal(t, counts[ino], n.Chunks, "inode %d chunk count", ino)
			}
			if n.isReg() {
				regular = append(regular, ino)
			}
			return nil
		})
	}))
	checkCache(t, s)
	require.Equal(t, used, s.used.Load(), "space in use")
	require.Equal(t, inodes, s.inodes.Load(), "inode count")
	for _, ino := range regular {
		n, err := s.viewInode(ino)
		require.NoError(t, err)
		buf := make([]byte, min(n.Size, 1<<20))
		for off := int64(0); off < int64(n.Size); off += int64(len(buf)) {
			_, err := s.read(rootCred, ino, off, buf)
			require.NoError(t, err, "inode %d reads", ino)
		}
	}
}

// listAll lists a directory through READDIR pages of bufSize bytes.
func listAll(t testing.TB, s *Server, dir uint64, bufSize int, plus bool) (names []string, pages int) {
	t.Helper()
	buf := make([]byte, bufSize)
	cookie := uint64(0)
	for {
		n, err := s.readDir(rootCred, dir, cookie, buf, plus)
		require.NoError(t, err)
		pages++
		count := 0
		eof, err := proto.ParseDirents(buf[:n], plus, func(e *proto.Dirent) error {
			names = append(names, string(e.Name))
			cookie = e.Cookie
			count++
			return nil
		})
		require.NoError(t, err)
		if eof {
			return names, pages
		}
		require.NotZero(t, count)
	}
}

type bboltTx = memTx

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// checkCache checks that every inode the cache holds is the database's
// record, with an inline file's data.
func checkCache(t testing.TB, s *Server) {
	t.Helper()
	s.icache.each(func(ino uint64, e *icacheEntry) {
		n, err := s.viewInode(ino)
		require.NoError(t, err, "cached inode %d is not in the database", ino)
		require.Equal(t, *n, e.n, "cached inode %d", ino)
		if n.isReg() && n.inline() {
			require.NoError(t, s.db.View(func(tx *bboltTx) error {
				require.Equal(t, tx.Bucket(bucketData).Get(inoKey(ino)), e.data, "cached data of inode %d", ino)
				return nil
			}))
		} else {
			require.Nil(t, e.data, "cached inode %d has data", ino)
		}
	})
}

// vendorCommand is what the target core hands ExecuteVendor for cmd: in
// as the data or the payload its direction takes, and outLen bytes for
// data to the host. It returns the lengths PrepareVendor is asked about.
func vendorCommand(cmd *nvmeof.Command, in []byte, outLen int) (vc *target.VendorCommand, dataLen, payloadLen int) {
	vc = &target.VendorCommand{Cmd: cmd}
	switch cmd.Opcode.Direction() {
	case nvmeof.HostToController:
		vc.Data, dataLen = in, len(in)
	case nvmeof.ControllerToHost:
		vc.Data, dataLen = make([]byte, outLen), outLen
	case nvmeof.Bidirectional:
		vc.Payload, payloadLen = in, len(in)
		vc.Data, dataLen = make([]byte, outLen), outLen
	}
	return vc, dataLen, payloadLen
}
