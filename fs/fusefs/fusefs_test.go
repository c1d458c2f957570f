package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/internal/prereq"
)

// mountMem mounts a fresh in-memory file service and unmounts it when
// the test ends.
func mountMem(t testing.TB, o Options) (string, *memClient) {
	t.Helper()
	prereq.FUSE(t)
	m := newMemClient()
	dir := t.TempDir()
	server, err := Mount(context.Background(), m, dir, o)
	require.NoError(t, err)
	t.Cleanup(func() {
		m.setFail(0)
		require.NoError(t, server.Unmount())
	})
	watchMount(t, dir)
	return dir, m
}

var cached = Options{AttrTimeout: time.Second, EntryTimeout: time.Second}

// TestPosix runs every case of go-fuse's POSIX suite on its own mount.
func TestPosix(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, wb := range []bool{false, true} {
		o := cached
		o.WritebackCache = wb
		for _, name := range names {
			t.Run(fmt.Sprintf("%s/writeback=%v", name, wb), func(t *testing.T) {
				mnt, _ := mountMem(t, o)
				posixtest.All[name](t, mnt)
			})
		}
	}
}

func TestStableInodeNumbers(t *testing.T) {
	mnt, m := mountMem(t, cached)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644))
	a, err := m.Lookup(context.Background(), RootIno, "f")
	require.NoError(t, err)
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(mnt, "f"), &st))
	assert.Equal(t, uint64(a.Ino), st.Ino, "stat shows the target's inode number")
	require.NoError(t, syscall.Stat(mnt, &st))
	assert.Equal(t, uint64(RootIno), st.Ino)
}

// TestErrnoPassThrough: whatever errno the client returns is what the
// system call gets.
func TestErrnoPassThrough(t *testing.T) {
	mnt, m := mountMem(t, Options{})
	f := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EIO, syscall.EACCES, syscall.EPERM, syscall.EXDEV} {
		m.setFail(e)
		_, err := os.Stat(f)
		assert.ErrorIs(t, err, e, "stat")
		err = os.Mkdir(filepath.Join(mnt, "d"), 0o755)
		assert.ErrorIs(t, err, e, "mkdir")
		m.setFail(0)
	}
	fd, err := os.OpenFile(f, os.O_WRONLY, 0)
	require.NoError(t, err)
	m.setFail(syscall.ENOSPC)
	_, err = fd.Write([]byte("more"))
	assert.ErrorIs(t, err, syscall.ENOSPC, "write")
	m.setFail(0)
	require.NoError(t, fd.Close())
}

func TestNames(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	long := strings.Repeat("n", 255)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, long), nil, 0o644), "255 bytes is a legal name")
	for _, op := range []func(string) error{
		func(p string) error { return os.WriteFile(p, nil, 0o644) },
		func(p string) error { return os.Mkdir(p, 0o755) },
		func(p string) error { return os.Symlink("x", p) },
		func(p string) error { return os.Link(filepath.Join(mnt, long), p) },
		func(p string) error { return os.Rename(filepath.Join(mnt, long), p) },
		func(p string) error { _, err := os.Stat(p); return err },
	} {
		assert.ErrorIs(t, op(filepath.Join(mnt, long+"n")), syscall.ENAMETOOLONG)
	}
	assert.ErrorIs(t, os.Mkdir(filepath.Join(mnt, "."), 0o755), syscall.EEXIST)
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "d"), 0o755))
	assert.ErrorIs(t, syscall.Rmdir(filepath.Join(mnt, "d")+"/."), syscall.EINVAL)
}

func TestErrnos(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	p := func(s string) string { return filepath.Join(mnt, s) }
	require.NoError(t, os.Mkdir(p("d"), 0o755))
	require.NoError(t, os.WriteFile(p("d/f"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(p("f"), []byte("x"), 0o644))
	assert.ErrorIs(t, syscall.Rmdir(p("d")), syscall.ENOTEMPTY)
	assert.ErrorIs(t, syscall.Rmdir(p("f")), syscall.ENOTDIR)
	assert.ErrorIs(t, syscall.Unlink(p("d")), syscall.EISDIR)
	assert.ErrorIs(t, syscall.Mkdir(p("f"), 0o755), syscall.EEXIST)
	assert.ErrorIs(t, syscall.Rename(p("d"), p("d/sub")), syscall.EINVAL)
	assert.ErrorIs(t, syscall.Rename(p("f"), p("d")), syscall.EISDIR)
	assert.ErrorIs(t, syscall.Rename(p("d"), p("f")), syscall.ENOTDIR)
	_, err := os.Stat(p("nothing"))
	assert.ErrorIs(t, err, syscall.ENOENT)
	_, err = os.Stat(p("f/x"))
	assert.ErrorIs(t, err, syscall.ENOTDIR)
	assert.ErrorIs(t, syscall.Link(p("d"), p("dl")), syscall.EPERM)
}

func TestRenameFlags(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	a, b := filepath.Join(mnt, "a"), filepath.Join(mnt, "b")
	require.NoError(t, os.WriteFile(a, []byte("A"), 0o644))
	require.NoError(t, os.WriteFile(b, []byte("B"), 0o644))
	assert.ErrorIs(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE), syscall.EEXIST)
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE))
	got, err := os.ReadFile(a)
	require.NoError(t, err)
	assert.Equal(t, "B", string(got))
	got, err = os.ReadFile(b)
	require.NoError(t, err)
	assert.Equal(t, "A", string(got))
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, filepath.Join(mnt, "c"), unix.RENAME_NOREPLACE))
	assert.NoFileExists(t, a)
	assert.ErrorIs(t, unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, a, unix.RENAME_EXCHANGE), syscall.ENOENT)
}

func TestUnlinkOpenFile(t *testing.T) {
	mnt, m := mountMem(t, cached)
	f := filepath.Join(mnt, "f")
	fd, err := os.Create(f)
	require.NoError(t, err)
	require.NoError(t, os.Remove(f))
	_, err = fd.WriteAt([]byte("still here"), 0)
	require.NoError(t, err)
	got := make([]byte, 10)
	_, err = fd.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, "still here", string(got))
	fi, err := fd.Stat()
	require.NoError(t, err)
	assert.EqualValues(t, 0, fi.Sys().(*syscall.Stat_t).Nlink)
	m.mu.Lock()
	inodes := len(m.inodes)
	m.mu.Unlock()
	require.NoError(t, fd.Close())
	require.Eventually(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.inodes) == inodes-1
	}, 10*time.Second, 10*time.Millisecond, "the release frees the unlinked inode")
}

func TestMknodFifo(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	require.NoError(t, syscall.Mkfifo(filepath.Join(mnt, "fifo"), 0o600))
	fi, err := os.Lstat(filepath.Join(mnt, "fifo"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeNamedPipe, fi.Mode().Type())
	assert.ErrorIs(t, syscall.Mknod(filepath.Join(mnt, "dev"), syscall.S_IFCHR|0o600, 0x0101), syscall.EPERM)
}

func TestSparseBeyond4GiB(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	f, err := os.Create(filepath.Join(mnt, "sparse"))
	require.NoError(t, err)
	defer f.Close()
	const off = 5<<30 + 12345
	_, err = f.WriteAt([]byte("far"), off)
	require.NoError(t, err)
	fi, err := f.Stat()
	require.NoError(t, err)
	assert.EqualValues(t, off+3, fi.Size())
	got := make([]byte, 8)
	_, err = f.ReadAt(got, off-5)
	require.NoError(t, err)
	assert.Equal(t, []byte{0, 0, 0, 0, 0, 'f', 'a', 'r'}, got)
	_, err = f.ReadAt(got, 1<<30)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 8), got, "a hole reads as zeros")
	require.NoError(t, f.Truncate(4<<30+1))
	fi, err = f.Stat()
	require.NoError(t, err)
	assert.EqualValues(t, 4<<30+1, fi.Size())
}

// TestLargeDirectory lists a directory of many pages completely, with
// readdir and with readdirplus (ls -l style).
func TestLargeDirectory(t *testing.T) {
	mnt, m := mountMem(t, cached)
	const n = 3 * dirPage / 2 * 3
	ctx := context.Background()
	dir, err := m.Mkdir(ctx, RootIno, "big", 0o755, 0, 0)
	require.NoError(t, err)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("entry-%06d", i)
		_, err := m.Mknod(ctx, dir.Ino, want[i], syscall.S_IFREG|0o644, 0, 0, 0)
		require.NoError(t, err)
	}
	entries, err := os.ReadDir(filepath.Join(mnt, "big"))
	require.NoError(t, err)
	got := make([]string, 0, n)
	for _, e := range entries {
		got = append(got, e.Name())
		if len(got) < 50 {
			info, err := e.Info()
			require.NoError(t, err)
			assert.True(t, info.Mode().IsRegular())
		}
	}
	assert.Equal(t, want, got)

	d, err := os.Open(filepath.Join(mnt, "big"))
	require.NoError(t, err)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	require.NoError(t, err)
	slices.Sort(names)
	assert.Equal(t, want, names, "a second listing of the same directory")
}

// TestSeekdir resumes a listing at an offset telldir gave.
func TestSeekdir(t *testing.T) {
	mnt, m := mountMem(t, Options{})
	ctx := context.Background()
	for i := range 2000 {
		_, err := m.Mknod(ctx, RootIno, fmt.Sprintf("f%04d", i), syscall.S_IFREG|0o644, 0, 0, 0)
		require.NoError(t, err)
	}
	fd, err := syscall.Open(mnt, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	all := readDirents(t, fd)
	require.Len(t, all, 2002)
	for _, i := range []int{1, 700, 1500, 2001} {
		_, err := unix.Seek(fd, int64(all[i-1].off), 0)
		require.NoError(t, err)
		rest := readDirents(t, fd)
		require.NotEmpty(t, rest, "offset of entry %d", i)
		assert.Equal(t, all[i].name, rest[0].name, "resuming after entry %d", i-1)
		assert.Len(t, rest, len(all)-i)
	}
}

type dirent struct {
	name string
	off  uint64
}

func readDirents(t *testing.T, fd int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		require.NoError(t, err)
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(b[16]) | int(b[17])<<8
			off := uint64(0)
			for i := 7; i >= 0; i-- {
				off = off<<8 | uint64(b[8+i])
			}
			name := b[19:reclen]
			name = name[:bytes.IndexByte(name, 0)]
			out = append(out, dirent{name: string(name), off: off})
			b = b[reclen:]
		}
	}
}

// TestCloseToOpen changes a file behind the mount's back, as another
// client would, and checks that the next open sees it, while an open of
// an unchanged file reads from the kernel's cache.
func TestCloseToOpen(t *testing.T) {
	for _, wb := range []bool{false, true} {
		t.Run(fmt.Sprintf("writeback=%v", wb), func(t *testing.T) {
			testCloseToOpen(t, Options{AttrTimeout: time.Hour, EntryTimeout: time.Hour, WritebackCache: wb})
		})
	}
}

func testCloseToOpen(t *testing.T, o Options) {
	mnt, m := mountMem(t, o)
	f := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(f, []byte("first version"), 0o644))
	got, err := os.ReadFile(f)
	require.NoError(t, err)
	require.Equal(t, "first version", string(got))

	reads := m.count("Read")
	got, err = os.ReadFile(f)
	require.NoError(t, err)
	require.Equal(t, "first version", string(got))
	assert.Equal(t, reads, m.count("Read"), "an unchanged file is read from the page cache")

	// Another client rewrites it, longer.
	ctx := context.Background()
	a, err := m.Lookup(ctx, RootIno, "f")
	require.NoError(t, err)
	h, err := m.Open(ctx, a.Ino, syscall.O_RDWR)
	require.NoError(t, err)
	_, err = m.Write(ctx, a.Ino, h, []byte("second version, longer"), 0)
	require.NoError(t, err)
	require.NoError(t, m.Release(ctx, a.Ino, h))

	got, err = os.ReadFile(f)
	require.NoError(t, err)
	assert.Equal(t, "second version, longer", string(got), "the next open sees the change in spite of hour-long caches")

	// Another client replaces it by rename: the cached name points at a
	// removed inode, and the kernel looks the name up again.
	tmp, h2, err := m.Create(ctx, RootIno, "f.tmp", 0o644, 0, 0, syscall.O_EXCL)
	require.NoError(t, err)
	_, err = m.Write(ctx, tmp.Ino, h2, []byte("third"), 0)
	require.NoError(t, err)
	require.NoError(t, m.Release(ctx, tmp.Ino, h2))
	require.NoError(t, m.Rename(ctx, RootIno, "f.tmp", RootIno, "f", 0))
	got, err = os.ReadFile(f)
	require.NoError(t, err)
	assert.Equal(t, "third", string(got))
}

// TestReadWriteLarge moves data in requests of up to MaxWrite.
func TestReadWriteLarge(t *testing.T) {
	for _, splice := range []bool{false, true} {
		t.Run(fmt.Sprintf("splice=%v", splice), func(t *testing.T) {
			mnt, _ := mountMem(t, Options{Splice: splice})
			want := make([]byte, 9<<20+17)
			for i := range want {
				want[i] = byte(i * 7 / 13)
			}
			f := filepath.Join(mnt, "big")
			require.NoError(t, os.WriteFile(f, want, 0o644))
			got, err := os.ReadFile(f)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want, got))
			fd, err := os.OpenFile(f, os.O_RDONLY|syscall.O_DIRECT, 0)
			require.NoError(t, err)
			defer fd.Close()
			buf := make([]byte, 2<<20+4096)
			n, err := fd.ReadAt(buf[4096:4096+2<<20], 1<<20)
			require.NoError(t, err)
			assert.Equal(t, 2<<20, n)
			assert.True(t, bytes.Equal(want[1<<20:3<<20], buf[4096:4096+2<<20]))
		})
	}
}

func TestStatfs(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(mnt, &st))
	assert.EqualValues(t, 1<<20, st.Blocks)
	assert.EqualValues(t, 4096, st.Bsize)
	assert.EqualValues(t, 255, st.Namelen)
}

func TestXattrErrnos(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	f := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	_, err := unix.Getxattr(f, "user.none", nil)
	assert.ErrorIs(t, err, syscall.ENODATA)
	require.NoError(t, unix.Setxattr(f, "user.a", []byte("value"), unix.XATTR_CREATE))
	assert.ErrorIs(t, unix.Setxattr(f, "user.a", []byte("v"), unix.XATTR_CREATE), syscall.EEXIST)
	assert.ErrorIs(t, unix.Setxattr(f, "user.b", []byte("v"), unix.XATTR_REPLACE), syscall.ENODATA)
	small := make([]byte, 2)
	_, err = unix.Getxattr(f, "user.a", small)
	assert.ErrorIs(t, err, syscall.ERANGE)
	assert.ErrorIs(t, unix.Removexattr(f, "user.b"), syscall.ENODATA)
}

// capValue is a security.capability value (VFS_CAP_REVISION_2,
// effective, CAP_NET_BIND_SERVICE permitted).
var capValue = []byte{1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// TestCapabilityCache: the kernel's killpriv checks (a GETXATTR of
// security.capability before the first write after it refreshed a
// file's attributes, and before every chown) cost a file made here
// with O_EXCL no round trip, and cost any file one per AttrTimeout.
// This mount's setcap and removal are seen at once, another client's
// setcap within AttrTimeout.
func TestCapabilityCache(t *testing.T) {
	prereq.Root(t, "chown and setcap")
	ctx := context.Background()
	mnt, m := mountMem(t, writeback)
	p := filepath.Join(mnt, "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = f.Write([]byte("data"))
	require.NoError(t, err)
	require.NoError(t, f.Chown(0, 0))
	require.NoError(t, f.Close())
	require.NoError(t, os.Chown(p, 0, 0))
	assert.Zero(t, m.count("GetXattr"), "a new file has no capabilities")

	require.NoError(t, unix.Setxattr(p, capsXattr, capValue, 0))
	n, err := unix.Getxattr(p, capsXattr, nil)
	require.NoError(t, err, "this mount's setcap is seen at once")
	assert.Equal(t, len(capValue), n)
	require.NoError(t, unix.Removexattr(p, capsXattr))
	for range 2 {
		_, err = unix.Getxattr(p, capsXattr, nil)
		assert.ErrorIs(t, err, syscall.ENODATA, "this mount's removal is seen at once")
	}
	calls := m.count("GetXattr")
	require.NoError(t, os.Chown(p, 0, 0))
	assert.Equal(t, calls, m.count("GetXattr"), "an answer of none is kept")

	o := cached
	o.AttrTimeout = 200 * time.Millisecond
	mnt, m = mountMem(t, o)
	p = filepath.Join(mnt, "g")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	a, err := m.Lookup(ctx, RootIno, "g")
	require.NoError(t, err)
	_, err = unix.Getxattr(p, capsXattr, nil)
	require.ErrorIs(t, err, syscall.ENODATA)
	require.NoError(t, m.SetXattr(ctx, a.Ino, capsXattr, capValue, 0)) // another client
	require.Eventually(t, func() bool {
		n, err := unix.Getxattr(p, capsXattr, nil)
		return err == nil && n == len(capValue)
	}, 10*time.Second, 10*time.Millisecond, "another client's setcap is seen within AttrTimeout")
}

// TestStaleEntry: a file another client removed while the kernel caches
// its name is gone, not an error about staleness.
func TestStaleEntry(t *testing.T) {
	mnt, m := mountMem(t, Options{AttrTimeout: 0, EntryTimeout: time.Hour})
	f := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
	_, err := os.Stat(f)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m.count("Release") == 1 }, 10*time.Second, time.Millisecond,
		"the kernel releases the file after close")
	require.NoError(t, m.Unlink(context.Background(), RootIno, "f"))
	_, err = os.Stat(f)
	assert.ErrorIs(t, err, syscall.ENOENT)
	_, err = os.ReadFile(f)
	assert.ErrorIs(t, err, syscall.ENOENT)
}

func TestFallocate(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	f, err := os.Create(filepath.Join(mnt, "f"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Fallocate(int(f.Fd()), 0, 0, 1<<20))
	fi, err := f.Stat()
	require.NoError(t, err)
	assert.EqualValues(t, 1<<20, fi.Size())
	_, err = f.WriteAt(bytes.Repeat([]byte{9}, 8192), 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 100, 200))
	got := make([]byte, 400)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	want := bytes.Repeat([]byte{9}, 400)
	clear(want[100:300])
	assert.Equal(t, want, got)
	assert.ErrorIs(t, syscall.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096), syscall.EOPNOTSUPP)
}

// TestLocks: byte-range locks of two opens conflict, a blocked F_SETLKW
// goes through when the holder closes its file, and flock excludes too.
func TestLocks(t *testing.T) {
	mnt, _ := mountMem(t, Options{})
	p := filepath.Join(mnt, "locked")
	require.NoError(t, os.WriteFile(p, make([]byte, 100), 0o644))
	f1, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	f2, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f2.Close()

	wr := func(start, n int64) *unix.Flock_t {
		return &unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: start, Len: n}
	}
	require.NoError(t, unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, wr(10, 10)))
	assert.ErrorIs(t, unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, wr(15, 1)), syscall.EAGAIN)
	require.NoError(t, unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, wr(20, 5)), "no overlap")
	q := wr(0, 0)
	require.NoError(t, unix.FcntlFlock(f2.Fd(), unix.F_OFD_GETLK, q))
	assert.EqualValues(t, unix.F_WRLCK, q.Type)
	assert.EqualValues(t, 10, q.Start)
	assert.EqualValues(t, 10, q.Len)

	got := make(chan error, 1)
	go func() { got <- unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLKW, wr(0, 0)) }()
	select {
	case err := <-got:
		t.Fatalf("F_SETLKW went through while another open holds the lock: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, f1.Close())
	select {
	case err := <-got:
		require.NoError(t, err, "the lock, once the holder closed its file")
	case <-time.After(10 * time.Second):
		t.Fatal("F_SETLKW still blocked after the holder closed its file")
	}

	f3, err := os.Open(p)
	require.NoError(t, err)
	defer f3.Close()
	require.NoError(t, unix.Flock(int(f3.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	f4, err := os.Open(p)
	require.NoError(t, err)
	defer f4.Close()
	assert.ErrorIs(t, unix.Flock(int(f4.Fd()), unix.LOCK_SH|unix.LOCK_NB), syscall.EWOULDBLOCK)
	require.NoError(t, unix.Flock(int(f3.Fd()), unix.LOCK_UN))
	require.NoError(t, unix.Flock(int(f4.Fd()), unix.LOCK_SH|unix.LOCK_NB))
}

// TestReadAhead: a read-ahead window beyond FUSE's 128 KiB lands on the
// mount's backing device.
func TestReadAhead(t *testing.T) {
	prereq.Root(t, "setting the read-ahead in sysfs")
	mnt, _ := mountMem(t, Options{MaxReadAhead: 2 << 20})
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(mnt, &st))
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
	require.NoError(t, err)
	assert.Equal(t, "2048", strings.TrimSpace(string(b)))
}

// TestBlocks: st_blocks is the target's count, so holes take no space.
func TestBlocks(t *testing.T) {
	mnt, m := mountMem(t, Options{})
	f := filepath.Join(mnt, "sparse")
	fd, err := os.Create(f)
	require.NoError(t, err)
	_, err = fd.WriteAt([]byte("x"), 1<<30)
	require.NoError(t, err)
	require.NoError(t, fd.Close())
	a, err := m.Lookup(context.Background(), RootIno, "sparse")
	require.NoError(t, err)
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(f, &st))
	assert.Equal(t, int64(a.Blocks), st.Blocks)
	assert.EqualValues(t, memPage/512, st.Blocks)
}

// TestCallerGroups: the mount reads a caller's supplementary groups from
// /proc, as this process's own show.
func TestCallerGroups(t *testing.T) {
	gs, err := syscall.Getgroups()
	require.NoError(t, err)
	var want []uint32
	for _, g := range gs {
		want = append(want, uint32(g))
	}
	got := readGroupsInto(uint32(os.Getpid()), nil)
	assert.ElementsMatch(t, want, got)
	assert.Nil(t, readGroupsInto(0, nil), "no process")
	k := groupsKey{pid: uint32(os.Getpid()), uid: uint32(os.Getuid()), gid: uint32(os.Getgid())}
	var cache groupsCache
	c := cache.lookup(k)
	assert.Equal(t, capfs.NewCredential(capfs.Cred{Uid: k.uid, Gid: k.gid, Groups: want}), c.cred)
	assert.Same(t, c, cache.lookup(k), "kept for groupsTTL")
	assert.Equal(t, capfs.NewCredential(capfs.Cred{}), cache.lookup(groupsKey{}).cred, "a request without a pid has no groups")

	// After groupsTTL the groups are read again; the same groups keep
	// the same caller, so its context is not made again.
	cache.m[k] = groupsEntry{c: c, read: time.Now().Add(-2 * groupsTTL)}
	assert.Same(t, c, cache.lookup(k), "read again, unchanged")
	changed := newPreparedCred(k, []uint32{12345})
	cache.m[k] = groupsEntry{c: changed, read: time.Now().Add(-2 * groupsTTL)}
	assert.Equal(t, c.cred, cache.lookup(k).cred, "read again, changed back")

	// Only a line that ends counts; a long one is read whole.
	for _, c := range []struct {
		status string
		want   []uint32
		ok     bool
	}{
		{"Name:\tx\nGroups:\t4 24 27 \nNgid:\t0\n", []uint32{4, 24, 27}, true},
		{"Name:\tx\nGroups:\t\nNgid:\t0\n", nil, true},
		{"Name:\tx\nGroups:\t4 24", nil, false},
		{"Name:\tx\n", nil, false},
		{"Name:\tx\nGroups:\t4 99999999999 5\n", []uint32{4, 5}, true},
	} {
		line, ok := groupsLine([]byte(c.status))
		assert.Equal(t, c.ok, ok, c.status)
		if ok {
			assert.Equal(t, c.want, parseGroups(line, nil), c.status)
		}
	}
}

// TestOpContextAllocatesNothing: finding a known caller's credential and
// context costs a request no allocation.
func TestOpContextAllocatesNothing(t *testing.T) {
	k := groupsKey{pid: uint32(os.Getpid()), uid: 1000, gid: 1000}
	c := callerGroups.lookup(k)
	require.NotNil(t, c.ctx)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if callerGroups.lookup(k) != c {
			t.Fatal("a new caller")
		}
	}))
}

// TestEntryTimeoutGuard: on a mount that serves other users and leaves
// access to the target, names in a directory not everyone may search are
// not cached (the kernel would walk through them unchecked); elsewhere
// they get the mount's entry timeout.
func TestEntryTimeoutGuard(t *testing.T) {
	for _, c := range []struct {
		guarded bool
		mode    uint32
		want    time.Duration
	}{
		{true, syscall.S_IFDIR | 0o755, time.Second},
		{true, syscall.S_IFDIR | 0o1777, time.Second},
		{true, syscall.S_IFDIR | 0o750, 0},
		{true, syscall.S_IFDIR | 0o700, 0},
		{true, syscall.S_IFDIR | 0o745, 0},
		{false, syscall.S_IFDIR | 0o700, time.Second},
	} {
		n := &node{fsys: &fileSystem{entryTimeout: time.Second, guardedEntries: c.guarded}}
		n.mode.Store(c.mode)
		assert.Equal(t, c.want, n.entryTimeoutIn(), "guarded %v, mode %#o", c.guarded, c.mode)
	}
}

// TestFsyncdir: fsync of a directory reaches the target as an FSYNC of
// that directory (the target's sync point for its entries).
func TestFsyncdir(t *testing.T) {
	mnt, m := mountMem(t, cached)
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "d", "f"), []byte("x"), 0o644))
	d, err := os.Open(filepath.Join(mnt, "d"))
	require.NoError(t, err)
	defer d.Close()
	syncs := m.count("Fsync")
	require.NoError(t, d.Sync())
	assert.Equal(t, syncs+1, m.count("Fsync"))
}

// TestCopyFileRange: copy_file_range(2) through the mount is one
// COPYRANGE of the client, with or without the writeback cache (whose
// dirty pages of the source the kernel writes back first), and reads
// back right in the same mount.
func TestCopyFileRange(t *testing.T) {
	for _, wb := range []bool{false, true} {
		t.Run(fmt.Sprintf("writeback=%v", wb), func(t *testing.T) {
			o := cached
			o.WritebackCache = wb
			mnt, m := mountMem(t, o)
			data := make([]byte, 200<<10)
			for i := range data {
				data[i] = byte(i*13 + 5)
			}
			src, dst := filepath.Join(mnt, "src"), filepath.Join(mnt, "dst")
			require.NoError(t, os.WriteFile(src, data, 0o644))
			require.NoError(t, os.WriteFile(dst, []byte("0123456789"), 0o644))
			in, err := os.Open(src)
			require.NoError(t, err)
			defer in.Close()
			out, err := os.OpenFile(dst, os.O_RDWR, 0)
			require.NoError(t, err)
			defer out.Close()
			copies := m.count("CopyFileRange")
			offIn, offOut := int64(1000), int64(5)
			n, err := unix.CopyFileRange(int(in.Fd()), &offIn, int(out.Fd()), &offOut, 150<<10, 0)
			require.NoError(t, err)
			require.Equal(t, 150<<10, n)
			assert.Equal(t, copies+1, m.count("CopyFileRange"), "one copy in the client")
			want := append([]byte("01234"), data[1000:1000+150<<10]...)
			got := make([]byte, len(want)+1)
			k, err := out.ReadAt(got, 0)
			require.ErrorIs(t, err, io.EOF)
			require.Equal(t, want, got[:k])
		})
	}
}
