package integration

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/chunkstore"
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
