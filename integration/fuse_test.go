package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	capfs "github.com/capsule-storage/capsule/fs"
)

// The FUSE tests run `target serve` and `mount` as processes and drive
// the mount from this process with system calls and standard tools.

// TestFUSEPosix runs every case of go-fuse's POSIX suite against a real
// mount of a real target, each case in a directory of its own, over
// shm:// and iwarp://.
func TestFUSEPosix(t *testing.T) {
	_, shm, iwarp := startFileTarget(t, t.TempDir())
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, tr := range []struct{ name, url string }{{"shm", shm}, {"iwarp", iwarp}} {
		t.Run(tr.name, func(t *testing.T) {
			m := mountFUSE(t, tr.url)
			for _, name := range names {
				t.Run(name, func(t *testing.T) {
					dir := m.path(tr.name + "-" + name)
					require.NoError(t, os.Mkdir(dir, 0o755))
					posixtest.All[name](t, dir)
				})
			}
		})
	}
}

// TestFUSELifecycle: the mount goes away cleanly on SIGINT, on SIGTERM
// (every test's cleanup) and on `fusermount3 -u`, and the process exits
// with status 0 each time.
func TestFUSELifecycle(t *testing.T) {
	_, shm, _ := startFileTarget(t, t.TempDir())

	m := mountFUSE(t, shm)
	require.NoError(t, os.WriteFile(m.path("f"), []byte("x"), 0o644))
	require.NoError(t, m.cmd.Process.Signal(os.Interrupt))
	waitExit(t, m)
	assert.False(t, isMounted(t, m.dir))

	m = mountFUSE(t, shm)
	got, err := os.ReadFile(m.path("f"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(got), "a remount sees the file")
	out, err := exec.Command("fusermount3", "-u", m.dir).CombinedOutput()
	require.NoError(t, err, "fusermount3 -u:\n%s", out)
	waitExit(t, m)
	assert.False(t, isMounted(t, m.dir))
}

func waitExit(t *testing.T, m *fuseMount) {
	t.Helper()
	select {
	case <-m.exited:
		require.NoError(t, m.waitErr, "mount exit; stderr:\n%s", m.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("mount still running 30s after it was told to unmount; stderr:\n%s", m.stderr)
	}
}

// TestFUSEPosixCases covers what the issue lists beside go-fuse's suite.
func TestFUSEPosixCases(t *testing.T) {
	_, shm, _ := startFileTarget(t, t.TempDir())
	m := mountFUSE(t, shm)

	t.Run("RenameOverExisting", func(t *testing.T) {
		a, b := m.path("rename-a"), m.path("rename-b")
		require.NoError(t, os.WriteFile(a, []byte("new"), 0o644))
		require.NoError(t, os.WriteFile(b, []byte("old contents"), 0o644))
		fd, err := os.Open(b)
		require.NoError(t, err)
		defer fd.Close()
		require.NoError(t, os.Rename(a, b))
		got, err := os.ReadFile(b)
		require.NoError(t, err)
		assert.Equal(t, "new", string(got))
		assert.NoFileExists(t, a)
		old := make([]byte, 12)
		_, err = fd.ReadAt(old, 0)
		require.NoError(t, err)
		assert.Equal(t, "old contents", string(old), "an open descriptor of the replaced file still reads it")
	})

	t.Run("UnlinkOpenFile", func(t *testing.T) {
		p := m.path("unlinked")
		fd, err := os.Create(p)
		require.NoError(t, err)
		_, err = fd.Write([]byte("before"))
		require.NoError(t, err)
		require.NoError(t, os.Remove(p))
		assert.NoFileExists(t, p)
		_, err = fd.Write([]byte(" and after"))
		require.NoError(t, err)
		got := make([]byte, 16)
		n, err := fd.ReadAt(got, 0)
		require.Equal(t, 16, n, "%v", err)
		assert.Equal(t, "before and after", string(got))
		require.NoError(t, fd.Close())
	})

	t.Run("OAppend", func(t *testing.T) {
		p := m.path("append")
		require.NoError(t, os.WriteFile(p, []byte("one\n"), 0o644))
		for _, s := range []string{"two\n", "three\n"} {
			fd, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = fd.Seek(0, 0)
			require.NoError(t, err)
			_, err = fd.Write([]byte(s))
			require.NoError(t, err)
			require.NoError(t, fd.Close())
		}
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, "one\ntwo\nthree\n", string(got))
	})

	t.Run("TruncateAndFtruncate", func(t *testing.T) {
		p := m.path("trunc")
		data := bytes.Repeat([]byte("0123456789"), 1000)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		require.NoError(t, os.Truncate(p, 5000)) // shrink
		requireContent(t, p, data[:5000])
		require.NoError(t, os.Truncate(p, 20000)) // extend
		requireContent(t, p, append(append([]byte(nil), data[:5000]...), make([]byte, 15000)...))
		fd, err := os.OpenFile(p, os.O_RDWR, 0)
		require.NoError(t, err)
		require.NoError(t, fd.Truncate(10)) // ftruncate shrink
		_, err = fd.WriteAt([]byte("x"), 15)
		require.NoError(t, err)
		require.NoError(t, fd.Truncate(1<<20)) // ftruncate extend
		require.NoError(t, fd.Close())
		want := make([]byte, 1<<20)
		copy(want, data[:10])
		want[15] = 'x'
		requireContent(t, p, want)
	})

	t.Run("SparseBeyond4GiB", func(t *testing.T) {
		p := m.path("sparse")
		fd, err := os.Create(p)
		require.NoError(t, err)
		offs := []int64{0, 1 << 20, 4<<30 - 5, 4<<30 + 64, 6<<30 + 4097} // the one below 4 GiB straddles it
		for _, off := range offs {
			_, err := fd.WriteAt([]byte(fmt.Sprintf("@%d", off)), off)
			require.NoError(t, err)
		}
		require.NoError(t, fd.Close())
		fi, err := os.Stat(p)
		require.NoError(t, err)
		last := offs[len(offs)-1]
		assert.Equal(t, last+int64(len(fmt.Sprintf("@%d", last))), fi.Size())
		st := fi.Sys().(*syscall.Stat_t)
		assert.Less(t, st.Blocks*512, int64(1<<30), "the holes take no space")
		fd, err = os.Open(p)
		require.NoError(t, err)
		defer fd.Close()
		for _, off := range offs {
			want := fmt.Sprintf("@%d", off)
			got := make([]byte, len(want))
			_, err := fd.ReadAt(got, off)
			require.NoError(t, err)
			assert.Equal(t, want, string(got), "at %d", off)
		}
		hole := make([]byte, 64<<10)
		_, err = fd.ReadAt(hole, 5<<30)
		require.NoError(t, err)
		assert.Equal(t, make([]byte, 64<<10), hole, "a hole past 4 GiB reads as zeros")
	})

	t.Run("MmapShared", func(t *testing.T) {
		p := m.path("mmap")
		const size = 3 << 16
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i % 251)
		}
		require.NoError(t, os.WriteFile(p, data, 0o644))
		fd, err := os.OpenFile(p, os.O_RDWR, 0)
		require.NoError(t, err)
		defer fd.Close()
		mem, err := unix.Mmap(int(fd.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(data, mem), "mmap reads the file")
		copy(mem[70000:], "written through the mapping")
		copy(data[70000:], "written through the mapping")
		require.NoError(t, unix.Msync(mem, unix.MS_SYNC))
		require.NoError(t, unix.Munmap(mem))
		require.NoError(t, fd.Close())
		requireContent(t, p, data)
	})

	t.Run("HardLinksAndSymlinks", func(t *testing.T) {
		p, l, s := m.path("orig"), m.path("hardlink"), m.path("symlink")
		require.NoError(t, os.WriteFile(p, []byte("shared"), 0o644))
		require.NoError(t, os.Link(p, l))
		require.NoError(t, os.Symlink("orig", s))
		fp, err := os.Stat(p)
		require.NoError(t, err)
		fl, err := os.Stat(l)
		require.NoError(t, err)
		assert.True(t, os.SameFile(fp, fl))
		assert.EqualValues(t, 2, fl.Sys().(*syscall.Stat_t).Nlink)
		target, err := os.Readlink(s)
		require.NoError(t, err)
		assert.Equal(t, "orig", target)
		require.NoError(t, os.WriteFile(s, []byte("through the symlink"), 0o644))
		requireContent(t, l, []byte("through the symlink"))
		require.NoError(t, os.Remove(p))
		requireContent(t, l, []byte("through the symlink"))
		fl, err = os.Stat(l)
		require.NoError(t, err)
		assert.EqualValues(t, 1, fl.Sys().(*syscall.Stat_t).Nlink)
		_, err = os.Stat(s)
		assert.ErrorIs(t, err, fs.ErrNotExist, "a dangling symlink")
		ls, err := os.Lstat(s)
		require.NoError(t, err)
		assert.Equal(t, fs.ModeSymlink, ls.Mode().Type())
	})

	t.Run("BadNames", func(t *testing.T) {
		// What the kernel never passes on ('/' splits the path, NUL ends
		// it) goes to the target through the Go client.
		c := dialFiles(t, shm)
		ctx := context.Background()
		for _, name := range []string{"a/b", "nul\x00byte", "/", "x\x00"} {
			_, _, err := c.Create(ctx, capfs.RootIno, name, 0o644, 0, 0, os.O_RDWR)
			assert.ErrorIs(t, err, syscall.EINVAL, "create %q", name)
			_, err = c.Mkdir(ctx, capfs.RootIno, name, 0o755, 0, 0)
			assert.ErrorIs(t, err, syscall.EINVAL, "mkdir %q", name)
		}
		_, err := c.Mkdir(ctx, capfs.RootIno, strings.Repeat("y", 256), 0o755, 0, 0)
		assert.ErrorIs(t, err, syscall.ENAMETOOLONG)

		long := strings.Repeat("x", 256)
		assert.ErrorIs(t, os.WriteFile(m.path(long), nil, 0o644), syscall.ENAMETOOLONG)
		assert.ErrorIs(t, os.Mkdir(m.path(long), 0o755), syscall.ENAMETOOLONG)
		_, err = os.Stat(m.path(long))
		assert.ErrorIs(t, err, syscall.ENAMETOOLONG)
		require.NoError(t, os.WriteFile(m.path(long[:255]), []byte("ok"), 0o644), "255 bytes is allowed")
		requireContent(t, m.path(long[:255]), []byte("ok"))
		require.NoError(t, os.Mkdir(m.path("dots"), 0o755))
		assert.ErrorIs(t, syscall.Rmdir(m.path("dots")+"/."), syscall.EINVAL)
		assert.ErrorIs(t, syscall.Rmdir(m.path("dots")+"/.."), syscall.ENOTEMPTY)
		assert.ErrorIs(t, syscall.Mkdir(m.path("dots")+"/..", 0o755), syscall.EEXIST)
	})

	t.Run("Errnos", func(t *testing.T) {
		require.NoError(t, os.MkdirAll(m.path("errdir", "sub"), 0o755))
		require.NoError(t, os.WriteFile(m.path("errfile"), nil, 0o644))
		assert.ErrorIs(t, syscall.Rmdir(m.path("errdir")), syscall.ENOTEMPTY)
		assert.ErrorIs(t, syscall.Rmdir(m.path("errfile")), syscall.ENOTDIR)
		assert.ErrorIs(t, syscall.Unlink(m.path("errdir")), syscall.EISDIR)
		assert.ErrorIs(t, syscall.Mkdir(m.path("errfile"), 0o755), syscall.EEXIST)
		assert.ErrorIs(t, syscall.Link(m.path("errdir"), m.path("dirlink")), syscall.EPERM)
		assert.ErrorIs(t, syscall.Rename(m.path("errfile"), m.path("errdir")), syscall.EISDIR)
		_, err := os.Stat(m.path("errfile", "x"))
		assert.ErrorIs(t, err, syscall.ENOTDIR)
		_, err = os.Stat(m.path("absent"))
		assert.ErrorIs(t, err, syscall.ENOENT)
		assert.ErrorIs(t, os.Link(m.path("errfile"), "/tmp/capsule-exdev-link"), syscall.EXDEV)
		require.NoError(t, os.Chmod(m.path("errdir"), 0o500))
		nobody := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "touch", m.path("errdir", "nope"))
		if out, err := nobody.CombinedOutput(); assert.Error(t, err) {
			assert.Contains(t, string(out), "Permission denied", "EACCES for another user")
		}
	})
}

func requireContent(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, len(want), len(got), "size of %s", path)
	require.True(t, bytes.Equal(want, got), "content of %s", path)
}

// TestFUSELargeDirectory lists a directory of 100 000 entries completely,
// with getdents (names) and with readdirplus (names and types). The
// entries are made with mknod from 8 threads; every one is a metadata
// transaction on the target, which the race detector slows sevenfold,
// so this test runs binaries built without it, on data in tmpfs.
func TestFUSELargeDirectory(t *testing.T) {
	const n = 100_000
	bin := plainBinaries(t)
	data, err := os.MkdirTemp("/dev/shm", "capsule-fuse-bigdir-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(data) })
	shm := "shm://fuse-bigdir-" + time.Now().Format("150405.000000")
	startCommand(t, "target", "capsule target ready", []string{filepath.Join(bin, "target"), "serve", "--listen", shm, "--data", data, "--scrub-rate", "0"})
	m := mountFUSEFrom(t, filepath.Join(bin, "mount"), shm)
	dir := m.path("big")
	require.NoError(t, os.Mkdir(dir, 0o755))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if err := syscall.Mknod(filepath.Join(dir, fmt.Sprintf("e%06d", i)), syscall.S_IFREG|0o644, 0); err != nil {
					errs <- fmt.Errorf("entry %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	d, err := os.Open(dir)
	require.NoError(t, err)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	require.NoError(t, err)
	require.Len(t, names, n)
	sort.Strings(names)
	for i, name := range names {
		require.Equal(t, fmt.Sprintf("e%06d", i), name)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, n)
	for _, e := range entries {
		require.True(t, e.Type().IsRegular(), e.Name())
	}
}

// TestFUSEConcurrentWriters writes different files from many goroutines
// at once and checks every byte.
func TestFUSEConcurrentWriters(t *testing.T) {
	_, shm, _ := startFileTarget(t, t.TempDir())
	m := mountFUSE(t, shm)
	const writers, size = 8, 6<<20 + 333
	var wg sync.WaitGroup
	want := make([][]byte, writers)
	for w := range writers {
		want[w] = make([]byte, size)
		r := rand.New(rand.NewPCG(uint64(w), 9))
		for i := range want[w] {
			want[w][i] = byte(r.Uint32())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fd, err := os.Create(m.path(fmt.Sprintf("w%d", w)))
			if !assert.NoError(t, err) {
				return
			}
			defer fd.Close()
			for off := 0; off < size; {
				n := min(size-off, 1+(off*7919+w*131)%(300<<10))
				_, err := fd.WriteAt(want[w][off:off+n], int64(off))
				if !assert.NoError(t, err) {
					return
				}
				off += n
			}
		}()
	}
	wg.Wait()
	for w := range writers {
		requireContent(t, m.path(fmt.Sprintf("w%d", w)), want[w])
	}
}

// TestFUSETwoMounts: two mounts of one target (over shm and iwarp) see
// each other's changes after close and open, with default caching.
func TestFUSETwoMounts(t *testing.T) {
	_, shm, iwarp := startFileTarget(t, t.TempDir())
	a := mountFUSE(t, shm)
	b := mountFUSE(t, iwarp)

	require.NoError(t, os.WriteFile(a.path("shared"), []byte("version 1"), 0o644))
	requireContent(t, b.path("shared"), []byte("version 1"))

	// b rewrites it in place, longer; a has it cached and sees the change
	// at its next open.
	require.NoError(t, os.WriteFile(b.path("shared"), []byte("version 2, longer"), 0o644))
	requireContent(t, a.path("shared"), []byte("version 2, longer"))

	// a replaces it by rename, as editors and rsync do.
	require.NoError(t, os.WriteFile(a.path(".shared.tmp"), []byte("version 3"), 0o644))
	require.NoError(t, os.Rename(a.path(".shared.tmp"), a.path("shared")))
	requireContent(t, b.path("shared"), []byte("version 3"))

	// Directories: created, listed and removed across mounts.
	require.NoError(t, os.MkdirAll(b.path("d1", "d2"), 0o755))
	require.NoError(t, os.WriteFile(b.path("d1", "d2", "f"), []byte("deep"), 0o644))
	requireContent(t, a.path("d1", "d2", "f"), []byte("deep"))
	entries, err := os.ReadDir(a.path("d1"))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.NoError(t, os.RemoveAll(a.path("d1")))
	_, err = os.Stat(b.path("d1", "d2", "f"))
	assert.True(t, errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE), "%v", err)
	require.Eventually(t, func() bool {
		_, err := os.Stat(b.path("d1"))
		return errors.Is(err, fs.ErrNotExist)
	}, 10*time.Second, 50*time.Millisecond, "the removal shows once the entry cache expires")

	// Large data, byte for byte both ways.
	big := make([]byte, 24<<20+5)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	require.NoError(t, os.WriteFile(a.path("big"), big, 0o644))
	requireContent(t, b.path("big"), big)
	copy(big[3<<20:], "patched through b")
	fd, err := os.OpenFile(b.path("big"), os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fd.WriteAt([]byte("patched through b"), 3<<20)
	require.NoError(t, err)
	require.NoError(t, fd.Close())
	requireContent(t, a.path("big"), big)

	// And through the Go file client, byte for byte.
	c := dialFiles(t, shm)
	got, err := c.FS().ReadFile("big")
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, got), "the Go client reads what the mounts wrote")
}

// dialFiles connects the Go file client to a target's file namespace.
func dialFiles(t *testing.T, url string) *capfs.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := capfs.Dial(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFUSECopyTools copies a tree in with cp, dd and rsync and compares
// every file by sha256, then copies it back out and compares again. It
// moves some 200 MB through the erasure-coded store, so it runs the
// binaries built without the race detector.
func TestFUSECopyTools(t *testing.T) {
	bin := plainBinaries(t)
	shm := "shm://fuse-copy-" + time.Now().Format("150405.000000")
	startCommand(t, "target", "capsule target ready", []string{filepath.Join(bin, "target"), "serve", "--listen", shm, "--data", t.TempDir(), "--scrub-rate", "0"})
	m := mountFUSEFrom(t, filepath.Join(bin, "mount"), shm)
	src := t.TempDir()
	r := rand.New(rand.NewPCG(3, 3))
	sizes := map[string]int{"empty": 0, "small": 1, "page": 4096, "odd": 12345, "mib": 1 << 20,
		"big": 9<<20 + 3, "sub/one": 777, "sub/deeper/two": 300 << 10}
	want := map[string]string{}
	for name, size := range sizes {
		p := filepath.Join(src, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		require.NoError(t, os.WriteFile(p, b, 0o644))
		want[name] = fileSHA256(t, p)
	}
	check := func(root string) {
		t.Helper()
		for name, sum := range want {
			assert.Equal(t, sum, fileSHA256(t, filepath.Join(root, name)), "%s under %s", name, root)
		}
	}

	runCommand(t, "cp", "-a", src, m.path("cp"))
	check(m.path("cp"))

	require.NoError(t, os.Mkdir(m.path("dd"), 0o755))
	for _, bs := range []string{"4k", "1M", "3000"} {
		runCommand(t, "dd", "if="+filepath.Join(src, "big"), "of="+m.path("dd", "big-"+bs), "bs="+bs, "status=none")
		assert.Equal(t, want["big"], fileSHA256(t, m.path("dd", "big-"+bs)), "dd bs=%s", bs)
	}
	runCommand(t, "dd", "if="+filepath.Join(src, "big"), "of="+m.path("dd", "direct"), "bs=1M", "oflag=direct", "status=none")
	runCommand(t, "dd", "if="+m.path("dd", "direct"), "of="+filepath.Join(t.TempDir(), "x"), "bs=1M", "iflag=direct", "status=none")
	assert.Equal(t, want["big"], fileSHA256(t, m.path("dd", "direct")))

	// rsync: a full copy, then a change in the source that rsync's delta
	// transfer rewrites through a temporary file and a rename.
	runCommand(t, "rsync", "-a", src+"/", m.path("rsync")+"/")
	check(m.path("rsync"))
	f, err := os.OpenFile(filepath.Join(src, "big"), os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("changed in the middle"), 5<<20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	// rsync's quick check compares mtimes in whole seconds: a change in
	// the second of the copy above would look unchanged to it, and it
	// would rightly copy nothing (this once made the test fail on a fast
	// mount, with the mount holding the old file).
	st, err := os.Stat(filepath.Join(src, "big"))
	require.NoError(t, err)
	later := st.ModTime().Add(2 * time.Second)
	require.NoError(t, os.Chtimes(filepath.Join(src, "big"), later, later))
	want["big"] = fileSHA256(t, filepath.Join(src, "big"))
	runCommand(t, "rsync", "-a", "--no-whole-file", src+"/", m.path("rsync")+"/")
	check(m.path("rsync"))
	runCommand(t, "rsync", "-a", "--inplace", "--no-whole-file", src+"/", m.path("cp")+"/")
	check(m.path("cp"))

	out := t.TempDir()
	runCommand(t, "rsync", "-a", m.path("rsync")+"/", out+"/")
	check(out)
}

// TestFUSETargetLoss: while the target is down, operations fail with EIO
// once the reconnect timeout has passed (they do not hang), and after
// the target is back the same mount works again.
func TestFUSETargetLoss(t *testing.T) {
	data := t.TempDir()
	d, shm, _ := startFileTarget(t, data)
	m := mountFUSE(t, shm, "--reconnect-timeout", "2s", "--attr-timeout", "0", "--entry-timeout", "0")
	require.NoError(t, os.WriteFile(m.path("kept"), []byte("durable"), 0o644))
	fd, err := os.Open(m.path("kept"))
	require.NoError(t, err)
	defer fd.Close()
	d.stop(t)

	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(m.path("kept"))
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, syscall.EIO, "stat with the target down")
	case <-time.After(60 * time.Second):
		t.Fatal("stat hangs with the target down")
	}
	buf := make([]byte, 7)
	_, err = fd.ReadAt(buf, 0)
	assert.ErrorIs(t, err, syscall.EIO, "read with the target down")

	startDaemonAt(t, shm, data)
	require.Eventually(t, func() bool {
		got, err := os.ReadFile(m.path("kept"))
		return err == nil && string(got) == "durable"
	}, 60*time.Second, 200*time.Millisecond, "the mount reconnects to the restarted target")
}

// startDaemonAt restarts a file target on the same shm:// name and data.
func startDaemonAt(t *testing.T, shm, data string) *daemon {
	t.Helper()
	return startDaemon(t, "capsule target ready", "serve", "--listen", shm, "--data", data, "--scrub-rate", "0")
}

// TestFUSEFallocate: fallocate's zero range, with and without keeping
// the size, and hole punching through the mount; collapse and insert
// ranges, which the kernel's FUSE refuses before they reach a mount
// (EOPNOTSUPP), through the Go file client against the same target; the
// bytes checked through the mount after each.
func TestFUSEFallocate(t *testing.T) {
	_, shm, _ := startFileTarget(t, t.TempDir())
	m := mountFUSE(t, shm)
	p := m.path("f")
	r := rand.New(rand.NewPCG(5, 5))
	want := make([]byte, 300<<10)
	for i := range want {
		want[i] = byte(r.Uint32() | 1)
	}
	require.NoError(t, os.WriteFile(p, want, 0o644))
	check := func(what string) {
		t.Helper()
		got, err := os.ReadFile(p)
		require.NoError(t, err, what)
		require.Equal(t, len(want), len(got), "%s: size", what)
		require.True(t, bytes.Equal(want, got), "%s: bytes", what)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE, 5000, 70000))
	clear(want[5000:75000])
	require.NoError(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 290<<10, 100<<10))
	clear(want[290<<10:])
	require.NoError(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE, 295<<10, 20<<10))
	want = append(want, make([]byte, 15<<10)...)
	require.NoError(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 100<<10, 3000))
	clear(want[100<<10 : 100<<10+3000])
	require.ErrorIs(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096), syscall.EOPNOTSUPP, "the kernel's FUSE")
	require.NoError(t, f.Close())
	check("zero and punch through the mount")

	c := dialFiles(t, shm)
	ctx := context.Background()
	a, err := c.Lookup(ctx, capfs.RootIno, "f")
	require.NoError(t, err)
	h, err := c.Open(ctx, a.Ino, os.O_RDWR)
	require.NoError(t, err)
	require.NoError(t, c.Fallocate(ctx, a.Ino, h, unix.FALLOC_FL_COLLAPSE_RANGE, 8192, 64<<10))
	want = append(want[:8192], want[8192+64<<10:]...)
	require.NoError(t, c.Fallocate(ctx, a.Ino, h, unix.FALLOC_FL_INSERT_RANGE, 4096, 12288))
	want = append(want[:4096], append(make([]byte, 12288), want[4096:]...)...)
	require.ErrorIs(t, c.Fallocate(ctx, a.Ino, h, unix.FALLOC_FL_COLLAPSE_RANGE, 100, 4096), syscall.EINVAL, "unaligned")
	require.NoError(t, c.Release(ctx, a.Ino, h))
	check("collapse and insert through the client")
}

// TestFUSECopyFileRange: copy_file_range(2) through the mount, which the
// target does itself (COPYRANGE), across chunks and into the middle of a
// file, and the same through the Go client; every byte read back.
func TestFUSECopyFileRange(t *testing.T) {
	_, shm, _ := startFileTarget(t, t.TempDir())
	m := mountFUSE(t, shm)
	r := rand.New(rand.NewPCG(9, 9))
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	require.NoError(t, os.WriteFile(m.path("src"), data, 0o644))
	require.NoError(t, os.WriteFile(m.path("dst"), []byte("head"), 0o644))
	in, err := os.Open(m.path("src"))
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(m.path("dst"), os.O_RDWR, 0)
	require.NoError(t, err)
	offIn, offOut := int64(12345), int64(2)
	var copied int
	for copied < 2<<20 {
		n, err := unix.CopyFileRange(int(in.Fd()), &offIn, int(out.Fd()), &offOut, 2<<20-copied, 0)
		require.NoError(t, err)
		require.Positive(t, n)
		copied += n
	}
	require.NoError(t, out.Close())
	want := append([]byte("he"), data[12345:12345+2<<20]...)
	requireContent(t, m.path("dst"), want)

	c := dialFiles(t, shm)
	ctx := context.Background()
	s, err := c.Lookup(ctx, capfs.RootIno, "src")
	require.NoError(t, err)
	d, err := c.Lookup(ctx, capfs.RootIno, "dst")
	require.NoError(t, err)
	n, err := c.CopyFileRange(ctx, s.Ino, 3<<20, d.Ino, 100, 1000)
	require.NoError(t, err)
	require.Equal(t, int64(17), n, "the source ends 17 bytes in")
	copy(want[100:], data[3<<20:])
	requireContent(t, m.path("dst"), want)
}

// TestFUSEMmapWriteback: writes through a shared mapping of a file on
// the mount (the kernel's writeback cache holds them as dirty pages)
// reach the target by msync and munmap, and another mount sees them at
// its next open.
func TestFUSEMmapWriteback(t *testing.T) {
	_, shm, iwarp := startFileTarget(t, t.TempDir())
	a := mountFUSE(t, shm)
	b := mountFUSE(t, iwarp)
	want := make([]byte, 1<<20+123)
	for i := range want {
		want[i] = byte(i*5 + 3)
	}
	require.NoError(t, os.WriteFile(a.path("m"), want, 0o644))
	requireContent(t, b.path("m"), want)
	f, err := os.OpenFile(a.path("m"), os.O_RDWR, 0)
	require.NoError(t, err)
	mm, err := unix.Mmap(int(f.Fd()), 0, len(want), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	for _, at := range []int{0, 4095, 300000, len(want) - 7} {
		copy(mm[at:], "mapped!")
		copy(want[at:], "mapped!")
	}
	require.NoError(t, unix.Msync(mm, unix.MS_SYNC))
	requireContent(t, b.path("m"), want)
	copy(mm[777:], "after msync")
	copy(want[777:], "after msync")
	require.NoError(t, unix.Munmap(mm))
	require.NoError(t, f.Close())
	requireContent(t, b.path("m"), want)
	requireContent(t, a.path("m"), want)
}
