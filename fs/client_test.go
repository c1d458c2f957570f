package fs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/fs/internal/fstest"
	"github.com/capsule-storage/capsule/fs/server"
)

// forEachTransport runs f against a fresh target on each provider.
func forEachTransport(t *testing.T, opt server.Options, f func(t *testing.T, tt *fstest.Target, c *capfs.Client)) {
	for _, url := range fstest.URLs() {
		t.Run(fstest.Scheme(url), func(t *testing.T) {
			tt := fstest.Start(t, url, opt)
			f(t, tt, dial(t, tt))
		})
	}
}

func dial(t testing.TB, tt *fstest.Target, opts ...capfs.Option) *capfs.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := capfs.Dial(ctx, tt.Addr, append([]capfs.Option{capfs.WithSubsystem(fstest.NQN), capfs.WithQueues(2), capfs.WithLogger(fstest.Logger(t))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func requireErrno(t testing.TB, want syscall.Errno, err error, msg ...any) {
	t.Helper()
	var got syscall.Errno
	require.True(t, errors.As(err, &got), "want %v, got %v %v", want, err, msg)
	require.Equal(t, want, got, msg...)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var uid, gid = uint32(1000), uint32(1000)

func TestInodeOperations(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c *capfs.Client) {
		ctx := context.Background()
		root, err := c.GetAttr(ctx, capfs.RootIno)
		require.NoError(t, err)
		require.Equal(t, uint32(syscall.S_IFDIR|0o755), root.Mode)
		require.Equal(t, uint32(2), root.Nlink)

		d, err := c.Mkdir(ctx, capfs.RootIno, "dir", 0o750, uid, gid)
		require.NoError(t, err)
		require.Equal(t, uint32(syscall.S_IFDIR|0o750), d.Mode)
		require.Equal(t, uid, d.Uid)
		root, _ = c.GetAttr(ctx, capfs.RootIno)
		require.Equal(t, uint32(3), root.Nlink, "a subdirectory's '..' links the parent")

		a, h, err := c.Create(ctx, d.Ino, "f", 0o640, uid, gid, syscall.O_RDWR|syscall.O_EXCL)
		require.NoError(t, err)
		require.Equal(t, uint32(syscall.S_IFREG|0o640), a.Mode)
		_, _, err = c.Create(ctx, d.Ino, "f", 0o640, uid, gid, syscall.O_RDWR|syscall.O_EXCL)
		requireErrno(t, syscall.EEXIST, err)

		n, err := c.Write(ctx, a.Ino, h, []byte("hello, world"), 0)
		require.NoError(t, err)
		require.Equal(t, 12, n)
		buf := make([]byte, 100)
		n, err = c.Read(ctx, a.Ino, h, buf, 7)
		require.NoError(t, err)
		require.Equal(t, "world", string(buf[:n]))

		l, err := c.Lookup(ctx, d.Ino, "f")
		require.NoError(t, err)
		require.Equal(t, a.Ino, l.Ino)
		require.Equal(t, uint64(12), l.Size)
		dot, err := c.Lookup(ctx, d.Ino, ".")
		require.NoError(t, err)
		require.Equal(t, d.Ino, dot.Ino)
		dotdot, err := c.Lookup(ctx, d.Ino, "..")
		require.NoError(t, err)
		require.Equal(t, capfs.RootIno, dotdot.Ino)
		_, err = c.Lookup(ctx, d.Ino, "nothing")
		requireErrno(t, syscall.ENOENT, err)
		_, err = c.Lookup(ctx, a.Ino, "x")
		requireErrno(t, syscall.ENOTDIR, err)

		// Symlink, hard link.
		sl, err := c.Symlink(ctx, d.Ino, "link", "f", uid, gid)
		require.NoError(t, err)
		require.Equal(t, uint32(syscall.S_IFLNK), sl.Mode&syscall.S_IFMT)
		target, err := c.Readlink(ctx, sl.Ino)
		require.NoError(t, err)
		require.Equal(t, "f", target)
		_, err = c.Readlink(ctx, a.Ino)
		requireErrno(t, syscall.EINVAL, err)
		hl, err := c.Link(ctx, a.Ino, capfs.RootIno, "hard")
		require.NoError(t, err)
		require.Equal(t, uint32(2), hl.Nlink)
		_, err = c.Link(ctx, d.Ino, capfs.RootIno, "dirlink")
		requireErrno(t, syscall.EPERM, err)

		// Attributes.
		mode, size := uint32(0o600), uint64(5)
		mt := time.Unix(1_000_000, 123)
		a2, err := c.SetAttr(ctx, a.Ino, capfs.SetAttr{Mode: &mode, Size: &size, Mtime: &mt})
		require.NoError(t, err)
		require.Equal(t, uint32(syscall.S_IFREG|0o600), a2.Mode)
		require.Equal(t, uint64(5), a2.Size)
		require.True(t, mt.Equal(a2.Mtime))
		n, err = c.Read(ctx, a.Ino, h, buf, 0)
		require.NoError(t, err)
		require.Equal(t, "hello", string(buf[:n]))

		// Xattrs.
		require.NoError(t, c.SetXattr(ctx, a.Ino, "user.k", []byte("v1"), 0))
		requireErrno(t, syscall.EEXIST, c.SetXattr(ctx, a.Ino, "user.k", []byte("v2"), capfs.XattrCreate))
		requireErrno(t, syscall.ENODATA, c.SetXattr(ctx, a.Ino, "user.none", []byte("v2"), capfs.XattrReplace))
		v, err := c.GetXattr(ctx, a.Ino, "user.k")
		require.NoError(t, err)
		require.Equal(t, "v1", string(v))
		require.NoError(t, c.SetXattr(ctx, a.Ino, "user.j", nil, 0))
		names, err := c.ListXattr(ctx, a.Ino)
		require.NoError(t, err)
		require.Equal(t, []string{"user.j", "user.k"}, names)
		require.NoError(t, c.RemoveXattr(ctx, a.Ino, "user.k"))
		_, err = c.GetXattr(ctx, a.Ino, "user.k")
		requireErrno(t, syscall.ENODATA, err)
		requireErrno(t, syscall.ENODATA, c.RemoveXattr(ctx, a.Ino, "user.k"))

		// Directory listing.
		var got []string
		require.NoError(t, c.ReadDir(ctx, d.Ino, 0, true, func(e capfs.DirEntry) bool {
			got = append(got, e.Name)
			if e.Name == "f" {
				assert.Equal(t, uint64(5), e.Attr.Size)
			}
			return true
		}))
		require.Equal(t, []string{".", "..", "f", "link"}, got)

		// Removal.
		requireErrno(t, syscall.ENOTEMPTY, c.Rmdir(ctx, capfs.RootIno, "dir"))
		requireErrno(t, syscall.EISDIR, c.Unlink(ctx, capfs.RootIno, "dir"))
		requireErrno(t, syscall.ENOTDIR, c.Rmdir(ctx, d.Ino, "f"))
		require.NoError(t, c.Unlink(ctx, d.Ino, "f"))
		require.NoError(t, c.Unlink(ctx, d.Ino, "link"))
		// Still open and still linked as /hard.
		n, err = c.Read(ctx, hl.Ino, h, buf, 0)
		require.NoError(t, err)
		require.Equal(t, "hello", string(buf[:n]))
		require.NoError(t, c.Release(ctx, a.Ino, h))
		require.NoError(t, c.Rmdir(ctx, capfs.RootIno, "dir"))
		_, err = c.GetAttr(ctx, d.Ino)
		requireErrno(t, syscall.ENOENT, err)

		st, err := c.StatFS(ctx)
		require.NoError(t, err)
		require.Equal(t, uint32(255), st.NameLen)
		require.Equal(t, uint32(4096), st.Bsize)
		require.Greater(t, st.Files, st.Ffree-1)
	})
}

func TestReadWriteLarge(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c *capfs.Client) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(1, 2))
		a, h, err := c.Create(ctx, capfs.RootIno, "big", 0o644, uid, gid, syscall.O_RDWR)
		require.NoError(t, err)
		// Grows from inline to chunks, with unaligned writes across blocks.
		model := []byte{}
		write := func(off int, p []byte) {
			n, err := c.Write(ctx, a.Ino, h, p, int64(off))
			require.NoError(t, err)
			require.Equal(t, len(p), n)
			if end := off + len(p); end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], p)
		}
		write(0, randBytes(r, 100))
		write(3000, randBytes(r, 3000))
		write(700_000, randBytes(r, 3<<20+17))
		write(5, randBytes(r, 300_000))
		got := make([]byte, len(model)+100)
		n, err := c.Read(ctx, a.Ino, h, got, 0)
		require.NoError(t, err)
		require.Equal(t, len(model), n, "short only at the end")
		require.True(t, bytes.Equal(model, got[:n]))

		// Shrink, then grow: the cut bytes read as zeros.
		size := uint64(400_001)
		_, err = c.SetAttr(ctx, a.Ino, capfs.SetAttr{Size: &size})
		require.NoError(t, err)
		size = 2 << 20
		at, err := c.SetAttr(ctx, a.Ino, capfs.SetAttr{Size: &size})
		require.NoError(t, err)
		require.Equal(t, size, at.Size)
		model = append(model[:400_001], make([]byte, 2<<20-400_001)...)
		got = make([]byte, 2<<20)
		n, err = c.Read(ctx, a.Ino, h, got, 0)
		require.NoError(t, err)
		require.Equal(t, 2<<20, n)
		require.True(t, bytes.Equal(model, got))

		// Beyond 4 GiB: sparse, and only the written block takes space.
		far := int64(5 << 30)
		p := randBytes(r, 70_000)
		_, err = c.Write(ctx, a.Ino, h, p, far)
		require.NoError(t, err)
		at, err = c.GetAttr(ctx, a.Ino)
		require.NoError(t, err)
		require.Equal(t, uint64(far)+70_000, at.Size)
		require.Less(t, at.Blocks*512, uint64(64<<20), "a sparse file")
		got = make([]byte, 80_000)
		n, err = c.Read(ctx, a.Ino, h, got, far-10_000)
		require.NoError(t, err)
		require.Equal(t, 80_000, n)
		require.Equal(t, make([]byte, 10_000), got[:10_000])
		require.Equal(t, p, got[10_000:])

		// O_APPEND.
		_, err = c.WriteAppend(ctx, a.Ino, h, []byte("tail"))
		require.NoError(t, err)
		n, err = c.Read(ctx, a.Ino, h, got[:10], far+70_000)
		require.NoError(t, err)
		require.Equal(t, "tail", string(got[:n]))

		// Punch a hole.
		require.NoError(t, c.Fallocate(ctx, a.Ino, h, 3 /* PUNCH_HOLE|KEEP_SIZE */, far+10, 100))
		n, err = c.Read(ctx, a.Ino, h, got[:200], far)
		require.NoError(t, err)
		require.Equal(t, 200, n)
		require.Equal(t, p[:10], got[:10])
		require.Equal(t, make([]byte, 100), got[10:110])
		require.Equal(t, p[110:200], got[110:200])
		require.NoError(t, c.Fsync(ctx, a.Ino, h, false))
		require.NoError(t, c.Release(ctx, a.Ino, h))
	})
}

func TestReadDirPaging(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c *capfs.Client) {
		ctx := context.Background()
		d, err := c.Mkdir(ctx, capfs.RootIno, "many", 0o755, uid, gid)
		require.NoError(t, err)
		const n = 3000
		want := []string{".", ".."}
		for i := range n {
			name := strings.Repeat("x", i%200) + "-" + string(rune('a'+i%26)) + "-" + time.Duration(i).String()
			_, err := c.Mknod(ctx, d.Ino, name, syscall.S_IFREG|0o644, 0, uid, gid)
			require.NoError(t, err)
			want = append(want, name)
		}
		var got []string
		var cookies []uint64
		require.NoError(t, c.ReadDir(ctx, d.Ino, 0, false, func(e capfs.DirEntry) bool {
			got = append(got, e.Name)
			cookies = append(cookies, e.Cookie)
			return true
		}))
		require.Equal(t, want, got, "in creation order, complete")
		require.True(t, slices.IsSorted(cookies))
		// Resume in the middle.
		var rest []string
		require.NoError(t, c.ReadDir(ctx, d.Ino, cookies[1000], true, func(e capfs.DirEntry) bool {
			rest = append(rest, e.Name)
			return len(rest) < 10
		}))
		require.Equal(t, want[1001:1011], rest)
	})
}

func TestSpecialFilesAndAllocation(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c *capfs.Client) {
		ctx := context.Background()
		p, err := c.Mknod(ctx, capfs.RootIno, "pipe", syscall.S_IFIFO|0o600, 0, uid, gid)
		require.NoError(t, err)
		require.Equal(t, uint32(syscall.S_IFIFO|0o600), p.Mode)
		dev, err := c.Mknod(ctx, capfs.RootIno, "dev", syscall.S_IFBLK|0o600, 0x801, uid, gid)
		if os.Geteuid() == 0 {
			require.NoError(t, err, "root makes device nodes")
			require.Equal(t, uint32(syscall.S_IFBLK|0o600), dev.Mode)
			require.Equal(t, uint32(0x801), dev.Rdev)
		} else {
			requireErrno(t, syscall.EPERM, err, "only root makes device nodes")
		}
		r, err := c.Mknod(ctx, capfs.RootIno, "reg", syscall.S_IFREG|0o600, 0, uid, gid)
		require.NoError(t, err)

		// Allocate grows the file, KEEP_SIZE does not; both read as zeros.
		require.NoError(t, c.Fallocate(ctx, r.Ino, 0, 0, 0, 100_000))
		a, err := c.GetAttr(ctx, r.Ino)
		require.NoError(t, err)
		require.Equal(t, uint64(100_000), a.Size)
		require.NoError(t, c.Fallocate(ctx, r.Ino, 0, 1 /* KEEP_SIZE */, 0, 1<<20))
		a, _ = c.GetAttr(ctx, r.Ino)
		require.Equal(t, uint64(100_000), a.Size)
		buf := make([]byte, 100_000)
		n, err := c.Read(ctx, r.Ino, 0, buf, 0)
		require.NoError(t, err)
		require.Equal(t, 100_000, n)
		require.Equal(t, make([]byte, 100_000), buf)
		requireErrno(t, syscall.EOPNOTSUPP, c.Fallocate(ctx, r.Ino, 0, 2 /* PUNCH_HOLE without KEEP_SIZE */, 0, 10))
		requireErrno(t, syscall.EINVAL, c.Fallocate(ctx, r.Ino, 0, 0, -1, 10))
	})
}

// TestConcurrentWriters writes different files from several goroutines
// at once, through one client, in pieces that cross blocks.
func TestConcurrentWriters(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c *capfs.Client) {
		f := c.FS()
		const writers = 6
		want := make([][]byte, writers)
		errs := make(chan error, writers)
		for i := range writers {
			want[i] = randBytes(rand.New(rand.NewPCG(uint64(i), 9)), 700_000+i*1000)
			go func() {
				fl, err := f.Create(fmt.Sprintf("w%d", i))
				if err == nil {
					for off := 0; off < len(want[i]) && err == nil; off += 50_001 {
						_, err = fl.Write(want[i][off:min(off+50_001, len(want[i]))])
					}
					if cerr := fl.Close(); err == nil {
						err = cerr
					}
				}
				errs <- err
			}()
		}
		for range writers {
			require.NoError(t, <-errs)
		}
		for i := range writers {
			got, err := f.ReadFile(fmt.Sprintf("w%d", i))
			require.NoError(t, err)
			require.True(t, bytes.Equal(want[i], got), "file %d", i)
		}
	})
}

// TestCredentials: operations run for the process, or for the caller a
// context names (WithCred); the target checks each. The first command
// with a credential the target does not hold registers it on the way
// (ENOKEY, CRED, again), also after the target restarts.
func TestCredentials(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c *capfs.Client) {
		ctx := context.Background()
		f, h, err := c.Create(ctx, capfs.RootIno, "private", 0o600, uid, gid, os.O_CREATE|os.O_RDWR)
		require.NoError(t, err)
		require.NoError(t, c.Release(ctx, f.Ino, h))
		d, err := c.Mkdir(ctx, capfs.RootIno, "open", 0o777, uid, gid)
		require.NoError(t, err)
		if os.Geteuid() != 0 {
			return // the rest acts as other users, which takes root
		}
		mode := uint32(0o777)
		_, err = c.SetAttr(ctx, d.Ino, capfs.SetAttr{Mode: &mode})
		require.NoError(t, err)
		bob := capfs.WithCred(ctx, capfs.Cred{Uid: 2001, Gid: 2001, Groups: []uint32{5, 5, 3}})
		_, err = c.Open(bob, f.Ino, os.O_RDONLY)
		requireErrno(t, syscall.EACCES, err, "bob may not read root's 0600 file")
		requireErrno(t, syscall.EACCES, c.Access(bob, f.Ino, 4))
		require.NoError(t, c.Access(ctx, f.Ino, 4), "root may")
		a, err := c.Mkdir(bob, d.Ino, "bobs", 0o755, 0, 0)
		require.NoError(t, err)
		assert.Equal(t, [2]uint32{2001, 2001}, [2]uint32{a.Uid, a.Gid}, "owned by the caller, not by the uid and gid passed")

		tt.Stop()
		tt.Restart(t, server.Options{})
		_, err = c.Mkdir(bob, d.Ino, "again", 0o755, 0, 0)
		require.NoError(t, err, "the restarted target learns the credential again")
		_, err = c.Mkdir(bob, capfs.RootIno, "nope", 0o755, 0, 0)
		requireErrno(t, syscall.EACCES, err)
	})
}
