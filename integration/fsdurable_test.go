package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/prereq"
)

// treeEntry is what a tree holds at one path: type and mode, the file's
// bytes, a symlink's target, and one user xattr.
type treeEntry struct {
	mode  fs.FileMode
	data  []byte
	link  string
	xattr string
}

// makeTree writes a tree of directories, inline and chunked files,
// symlinks, a hard link and xattrs under root.
func makeTree(t *testing.T, root string, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0x1d))
	for d := range 4 {
		dir := filepath.Join(root, fmt.Sprintf("d%d", d), "sub")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for i, size := range []int{0, 100, 4096, 8 << 10, 300 << 10, 3<<20 + 17} {
			p := make([]byte, size)
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			name := filepath.Join(dir, fmt.Sprintf("f%d", i))
			require.NoError(t, os.WriteFile(name, p, 0o600+fs.FileMode(i)<<3))
			require.NoError(t, unix.Setxattr(name, "user.k", []byte(fmt.Sprint("v", d, i)), 0))
		}
		require.NoError(t, os.Symlink("sub/f1", filepath.Join(root, fmt.Sprintf("d%d", d), "ln")))
		require.NoError(t, os.Chmod(filepath.Join(root, fmt.Sprintf("d%d", d)), 0o750+fs.FileMode(d)))
	}
	require.NoError(t, os.Link(filepath.Join(root, "d0", "sub", "f4"), filepath.Join(root, "hard")))
}

// readTree returns every entry under root by its relative path.
func readTree(t *testing.T, root string) map[string]treeEntry {
	t.Helper()
	out := map[string]treeEntry{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := treeEntry{mode: fi.Mode()}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			e.link, err = os.Readlink(p)
		case fi.Mode().IsRegular():
			if e.data, err = os.ReadFile(p); err != nil {
				return err
			}
			buf := make([]byte, 64)
			n, xerr := unix.Getxattr(p, "user.k", buf)
			if xerr == nil {
				e.xattr = string(buf[:n])
			}
		}
		out[rel] = e
		return err
	}))
	return out
}

func requireSameTree(t *testing.T, want, got map[string]treeEntry, what string) {
	t.Helper()
	require.Equal(t, len(want), len(got), "%s: entries", what)
	for p, w := range want {
		g, ok := got[p]
		require.True(t, ok, "%s: %s is missing", what, p)
		require.Equal(t, w.mode, g.mode, "%s: mode of %s", what, p)
		require.Equal(t, w.link, g.link, "%s: %s", what, p)
		require.Equal(t, w.xattr, g.xattr, "%s: xattr of %s", what, p)
		require.True(t, bytes.Equal(w.data, g.data), "%s: %s reads back byte-exact (%d bytes, got %d)", what, p, len(w.data), len(g.data))
	}
}

// TestFUSELoseDeviceDirs: the namespace is as redundant as the data.
// A tree written through the mount, the target stopped, any M (2 of the
// default 4+2) device directories deleted, the target started again:
// every file, directory, symlink, mode and xattr is there, byte-exact.
// Nothing of the store lives outside the device directories.
func TestFUSELoseDeviceDirs(t *testing.T) {
	for _, lost := range [][2]int{{0, 1}, {2, 5}} {
		t.Run(fmt.Sprintf("dev%d-dev%d", lost[0], lost[1]), func(t *testing.T) {
			data := t.TempDir()
			d, shm, _ := startFileTarget(t, data)
			m := mountFUSE(t, shm)
			makeTree(t, m.path("t"), 1)
			want := readTree(t, m.path("t"))
			require.NoError(t, m.cmd.Process.Signal(os.Interrupt))
			waitExit(t, m)
			d.stop(t)

			dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
			entries, err := os.ReadDir(data)
			require.NoError(t, err)
			for _, e := range entries {
				// reservations.db is the subsystem's (NVMe reservations
				// that persist through power loss), not the store's.
				require.Contains(t, []string{"dev0", "dev1", "dev2", "dev3", "dev4", "dev5", "reservations.db"}, e.Name(),
					"nothing of the store outside the device directories")
			}
			for _, i := range lost {
				require.NoError(t, os.RemoveAll(dirs[i]))
			}

			startDaemonAt(t, shm, data)
			m = mountFUSE(t, shm)
			requireSameTree(t, want, readTree(t, m.path("t")), fmt.Sprintf("devices %v deleted", lost))
		})
	}
}

// TestFUSEKilledTargetKeepsSynced: what fsync made durable survives a
// target killed with SIGKILL (no Close, no sync of its own): a file
// fsynced, and a directory's new entries fsynced with the directory.
func TestFUSEKilledTargetKeepsSynced(t *testing.T) {
	data := t.TempDir()
	d, shm, _ := startFileTarget(t, data)
	m := mountFUSE(t, shm, "--reconnect-timeout", "60s")
	p := bytes.Repeat([]byte("synced bytes "), 50000)
	f, err := os.Create(m.path("file"))
	require.NoError(t, err)
	_, err = f.Write(p)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, os.Mkdir(m.path("dir"), 0o755))
	for i := range 20 {
		require.NoError(t, os.WriteFile(m.path("dir", fmt.Sprint(i)), []byte(fmt.Sprint(i)), 0o644))
	}
	dir, err := os.Open(m.path("dir"))
	require.NoError(t, err)
	require.NoError(t, dir.Sync()) // fsyncdir
	require.NoError(t, dir.Close())
	d.kill9(t)

	startDaemonAt(t, shm, data)
	// A new mount: nothing comes from the first one's page cache.
	m2 := mountFUSE(t, shm)
	got, err := os.ReadFile(m2.path("file"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(p, got), "the fsynced file after the target was killed")
	for i := range 20 {
		got, err := os.ReadFile(m2.path("dir", fmt.Sprint(i)))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), string(got))
	}
	// The first mount goes while the target it reconnected to still runs.
	require.NoError(t, m.cmd.Process.Signal(os.Interrupt))
	waitExit(t, m)
}

// TestFUSEHandlesSurviveRestart: files programs hold open through the
// mount go on working across a restart of the target: the mount
// reconnects and reclaims its handles, so reads, writes, fstat, fsync
// and close on the old descriptors succeed. A file its owner may write
// only through the descriptor that created it (0444, by a user who is
// not root) stays writable through it; a file unlinked while open keeps
// its data for its descriptor, and goes at its close (its inode is free
// at once, not when the target's reclaim grace ends).
func TestFUSEHandlesSurviveRestart(t *testing.T) {
	prereq.Root(t, "a root mount, and a program of another user on it")
	data := t.TempDir()
	d, shm, _ := startFileTarget(t, data)
	m := mountFUSE(t, shm, "--reconnect-timeout", "60s")
	require.NoError(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	require.NoError(t, os.Mkdir(m.path("pub"), 0o777))
	require.NoError(t, os.Chmod(m.path("pub"), 0o777))

	// alice's program creates pub/ro 0444 (umask 222) and holds it open
	// on fd 3 across the restart, writing before and after.
	alice := exec.Command(prereq.Tool(t, "sh"), "-c",
		`umask 222; exec 3>pub/ro || exit 1; printf before >&3 || exit 2; echo ready; read x; printf after >&3 || exit 3; exec 3>&-; echo done`)
	alice.Dir = m.dir
	alice.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uidAlice, Gid: uidAlice}}
	stdin, err := alice.StdinPipe()
	require.NoError(t, err)
	stdout, err := alice.StdoutPipe()
	require.NoError(t, err)
	var aliceErr bytes.Buffer
	alice.Stderr = &aliceErr
	require.NoError(t, alice.Start())
	t.Cleanup(func() { _ = alice.Process.Kill(); _ = alice.Wait() })
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan(), "alice's program: %s", &aliceErr)
	require.Equal(t, "ready", lines.Text())

	open := func(name string, flag int, perm os.FileMode) *os.File {
		f, err := os.OpenFile(m.path(name), flag, perm)
		require.NoError(t, err)
		return f
	}
	before := bytes.Repeat([]byte("before the restart "), 10000)
	rw := open("rw", os.O_CREATE|os.O_RDWR, 0o644)
	tmp := open("tmp", os.O_CREATE|os.O_RDWR, 0o600)
	for _, f := range []*os.File{rw, tmp} {
		_, err := f.Write(before)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
	}
	require.NoError(t, os.Remove(m.path("tmp")))
	inodes := func() uint64 {
		var st unix.Statfs_t
		require.NoError(t, unix.Statfs(m.dir, &st))
		return st.Files - st.Ffree
	}
	inUse := inodes()
	d.stop(t)

	startDaemonAt(t, shm, data)
	after := []byte("after the restart")
	for _, f := range []*os.File{rw, tmp} {
		_, err := f.Write(after)
		require.NoError(t, err, "%s: a write through a descriptor opened before the restart", f.Name())
		st, err := f.Stat()
		require.NoError(t, err)
		require.Equal(t, int64(len(before)+len(after)), st.Size(), f.Name())
		require.NoError(t, f.Sync(), f.Name())
		got := make([]byte, len(before)+len(after))
		_, err = f.ReadAt(got, 0)
		require.NoError(t, err, f.Name())
		require.True(t, bytes.Equal(append(append([]byte(nil), before...), after...), got), "%s reads back", f.Name())
	}
	_, err = io.WriteString(stdin, "go on\n")
	require.NoError(t, err)
	require.True(t, lines.Scan(), "alice's write through her 0444 file's descriptor after the restart: %s", &aliceErr)
	require.Equal(t, "done", lines.Text())
	require.NoError(t, alice.Wait(), "alice's program: %s", &aliceErr)
	got, err := os.ReadFile(m.path("pub", "ro"))
	require.NoError(t, err)
	require.Equal(t, "beforeafter", string(got))

	require.NoError(t, rw.Close())
	require.Equal(t, inUse, inodes(), "the unlinked file is still open")
	require.NoError(t, tmp.Close())
	// The kernel sends the RELEASE after close returns.
	require.Eventually(t, func() bool { return inodes() == inUse-1 }, 10*time.Second, 50*time.Millisecond,
		"the unlinked file goes at its close after the restart, not at the end of the grace")
	// The mount goes while the target it reconnected to still runs.
	require.NoError(t, m.cmd.Process.Signal(os.Interrupt))
	waitExit(t, m)
}
