package integration

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/chunkstore"
	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/internal/prereq"
)

// The POSIX-semantics tests: a root mount (made by this process, which
// CI runs as root) without default_permissions, used by other users
// through child processes with their own credentials, so that every
// refusal comes from the target's checks.

// Users the tests act as.
const (
	uidAlice, uidBob = 2000, 2001
	gidShared        = 2100
)

// posixMount starts a target and a root mount of it, and opens the path
// down to the mountpoint for other users (t.TempDir's parent is 0700).
func posixMount(t *testing.T) (*fuseMount, string) {
	t.Helper()
	prereq.Root(t, "acting as other users (setuid children) on a root mount")
	data := t.TempDir()
	_, shm, _ := startFileTarget(t, data)
	m := mountFUSE(t, shm)
	require.NoError(t, os.Chmod(filepath.Dir(m.dir), 0o755))
	return m, shm
}

// as runs sh -c script as uid and gid with the supplementary groups,
// in the mount's root, and returns its combined output and error.
func as(t *testing.T, m *fuseMount, uid, gid uint32, groups []uint32, script string) (string, error) {
	t.Helper()
	cmd := exec.Command(prereq.Tool(t, "sh"), "-c", script)
	cmd.Dir = m.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mountOptions returns the options mountinfo shows for dir: the mount's
// own and the super block's.
func mountOptions(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == dir {
			return f[5] + "," + f[len(f)-1]
		}
	}
	t.Fatalf("%s is not mounted", dir)
	return ""
}

// TestPOSIXAccessWithoutDefaultPermissions: the mount has no
// default_permissions, so the kernel checks nothing and every refusal
// below is the target's: search of a directory, read and write by mode,
// create and unlink in a directory without write permission, the sticky
// rule, supplementary groups, chmod and chown's EPERM, utimensat's
// rules, and set-user-ID cleared by a write of another user.
func TestPOSIXAccessWithoutDefaultPermissions(t *testing.T) {
	m, _ := posixMount(t)
	opts := mountOptions(t, m.dir)
	assert.NotContains(t, opts, "default_permissions", "the target decides access")
	assert.Contains(t, opts, "allow_other", "a root mount serves every user")
	assert.Contains(t, opts, "nodev")

	mk := func(name string, mode os.FileMode, uid, gid int, dir bool) {
		t.Helper()
		p := m.path(name)
		if dir {
			require.NoError(t, os.Mkdir(p, 0o700))
		} else {
			require.NoError(t, os.WriteFile(p, []byte("secret\n"), 0o600))
		}
		require.NoError(t, os.Chown(p, uid, gid))
		require.NoError(t, os.Chmod(p, mode))
	}
	mk("alice", 0o700|os.ModeDir, uidAlice, uidAlice, true)
	mk("alice/f", 0o644, uidAlice, uidAlice, false)
	mk("pub", 0o755|os.ModeDir, 0, 0, true)
	mk("pub/ro", 0o444, 0, 0, false)
	mk("pub/rw", 0o666, 0, 0, false)
	mk("pub/none", 0, 0, 0, false)
	mk("tmp", 0o777|os.ModeDir|os.ModeSticky, 0, 0, true)
	mk("tmp/alices", 0o666, uidAlice, uidAlice, false)
	mk("shared", 0o770|os.ModeDir, 0, gidShared, true)
	mk("suid", 0o777|os.ModeSetuid|os.ModeSetgid, uidAlice, uidAlice, false)
	mk("alicefile", 0o644, uidAlice, uidAlice, false)
	prog, err := os.ReadFile(prereq.Tool(t, "true"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(m.path("pub/true"), prog, 0o600))
	require.NoError(t, os.Chmod(m.path("pub/true"), 0o711))
	require.NoError(t, os.WriteFile(m.path("pub/noexec"), prog, 0o644))

	bob := func(script string) (string, error) { return as(t, m, uidBob, uidBob, nil, script) }
	for _, c := range []struct {
		script, fails string // fails: the message the refusal prints; "" for success
		reason        string
	}{
		{"cat alice/f", "Permission denied", "no search of another's 0700 directory"},
		{"ls alice", "Permission denied", "no listing of another's 0700 directory"},
		{"cat pub/ro", "", "0444 reads"},
		{"echo x > pub/ro", "Permission denied", "0444 does not write"},
		{"cat pub/none", "Permission denied", "0000"},
		{"echo x >> pub/rw && cat pub/rw", "", "0666 writes"},
		{"touch pub/new", "Permission denied", "no create in a directory without write permission"},
		{"mkdir pub/d", "Permission denied", "no mkdir there either"},
		{"rm -f pub/rw", "Permission denied", "no unlink there"},
		{"mv pub/rw pub/rw2", "Permission denied", "no rename there"},
		{"rm -f tmp/alices", "Operation not permitted", "sticky: another's file"},
		{"mv tmp/alices tmp/mine", "Operation not permitted", "sticky: rename away another's file"},
		{"echo mine > tmp/bobs && mv tmp/bobs tmp/bobs2 && rm tmp/bobs2", "", "sticky: bob's own file"},
		{"touch shared/x", "Permission denied", "not in the directory's group"},
		{"chmod 777 alicefile", "Operation not permitted", "chmod by a non-owner"},
		{"chown 2001 alicefile", "Operation not permitted", "chown by a non-owner"},
		{"touch -d @100 pub/rw", "Operation not permitted", "explicit times: the owner only"},
		{"touch pub/rw", "", "times to now: anyone who may write"},
		{"touch pub/ro", "Permission denied", "times to now: not without write"},
		{"echo x >> suid", "", "a write by another user..."},
		{"./pub/true", "", "exec of a 0711 program needs x, not r"},
		{"cat pub/true > /dev/null", "Permission denied", "...which bob may not read"},
		{"./pub/noexec", "Permission denied", "no x bit: no exec"},
	} {
		out, err := bob(c.script)
		if c.fails == "" {
			assert.NoError(t, err, "%s (%s): %s", c.script, c.reason, out)
		} else {
			assert.Error(t, err, "%s (%s) succeeded: %s", c.script, c.reason, out)
			assert.Contains(t, out, c.fails, "%s (%s)", c.script, c.reason)
		}
	}
	_, err = exec.Command(m.path("pub/noexec")).CombinedOutput()
	assert.ErrorIs(t, err, fs.ErrPermission, "root execs only what has an x bit")
	fi, err := os.Stat(m.path("suid"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o777), fi.Mode().Perm()|fi.Mode()&(os.ModeSetuid|os.ModeSetgid), "...clears set-user-ID and set-group-ID")

	// A supplementary group gives the group's bits (the mount reads the
	// caller's groups from /proc).
	out, err := as(t, m, uidBob, uidBob, []uint32{gidShared}, "touch shared/x && ls -n shared/x")
	require.NoError(t, err, out)
	assert.Contains(t, out, " 2001 2001 ", "owned by bob")

	// The owner changes the group to one of hers, and no other.
	out, err = as(t, m, uidAlice, uidAlice, []uint32{gidShared}, "chgrp 2100 alicefile")
	require.NoError(t, err, out)
	out, err = as(t, m, uidAlice, uidAlice, nil, "chgrp 2001 alicefile")
	require.Error(t, err, out)
	assert.Contains(t, out, "Operation not permitted")

	// access(2) and chdir(2) ask the target too.
	out, err = bob("cd alice")
	require.Error(t, err, out)
	out, err = bob("test -w pub/ro && echo writable || echo refused")
	require.NoError(t, err, out)
	assert.Equal(t, "refused\n", out)
}

// TestPOSIXGoClientHeldToChecks: the Go client, dialing the target
// itself, is refused what the mode refuses its caller (WithCred), and
// is given what it allows.
func TestPOSIXGoClientHeldToChecks(t *testing.T) {
	m, shm := posixMount(t)
	require.NoError(t, os.WriteFile(m.path("private"), []byte("root's"), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := capfs.Dial(ctx, shm)
	require.NoError(t, err)
	defer c.Close()
	a, err := c.Lookup(ctx, capfs.RootIno, "private")
	require.NoError(t, err)
	bob := capfs.WithCred(ctx, capfs.Cred{Uid: uidBob, Gid: uidBob})
	_, err = c.Open(bob, a.Ino, os.O_RDONLY)
	assert.ErrorIs(t, err, syscall.EACCES, "bob may not open root's 0600 file")
	_, err = c.Read(bob, a.Ino, 0, make([]byte, 10), 0)
	assert.ErrorIs(t, err, syscall.EACCES, "nor read it without opening")
	_, _, err = c.Create(bob, capfs.RootIno, "bobs", 0o644, uidBob, uidBob, os.O_CREATE|os.O_WRONLY)
	assert.ErrorIs(t, err, syscall.EACCES, "the root directory is 0755 root")
	h, err := c.Open(ctx, a.Ino, os.O_RDONLY)
	require.NoError(t, err, "root opens it")
	require.NoError(t, c.Release(ctx, a.Ino, h))
}

// TestPOSIXNonRootUserOnRootMount: a root mount serves every user
// (allow_other): another user lists, creates, writes and reads back.
func TestPOSIXNonRootUserOnRootMount(t *testing.T) {
	m, _ := posixMount(t)
	require.NoError(t, os.Mkdir(m.path("open"), 0o777))
	require.NoError(t, os.Chmod(m.path("open"), 0o777))
	out, err := as(t, m, uidBob, uidBob, nil,
		"ls -la . >/dev/null && mkdir open/d && echo hello > open/d/f && cat open/d/f && ls -n open/d/f")
	require.NoError(t, err, out)
	assert.True(t, strings.HasPrefix(out, "hello\n"), out)
	assert.Contains(t, out, " 2001 2001 ")
	fi, err := os.Stat(m.path("open", "d", "f"))
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	assert.Equal(t, [2]uint32{uidBob, uidBob}, [2]uint32{st.Uid, st.Gid})
}

// TestPOSIXCopyKeepsModes: cp -a of a tree with every kind of mode keeps
// modes, owners and times (cp's system.posix_acl_access gets
// EOPNOTSUPP, so cp falls back to chmod instead of leaving 0600/0700).
func TestPOSIXCopyKeepsModes(t *testing.T) {
	m, _ := posixMount(t)
	src := filepath.Join(t.TempDir(), "src")
	type entry struct {
		name     string
		mode     os.FileMode
		uid, gid int
	}
	tree := []entry{
		{"", 0o755 | os.ModeDir, 0, 0},
		{"a", 0o644, 0, 0},
		{"b", 0o600, uidAlice, uidAlice},
		{"x", 0o755, 0, 0},
		{"ro", 0o444, 0, 0},
		{"gw", 0o664, uidAlice, gidShared},
		{"suid", 0o755 | os.ModeSetuid, 0, 0},
		{"d", 0o750 | os.ModeDir, uidAlice, gidShared},
		{"d/f", 0o640, uidAlice, gidShared},
		{"d/priv", 0o700 | os.ModeDir, uidAlice, uidAlice},
		{"d/priv/f", 0o400, uidAlice, uidAlice},
		{"sg", 0o2775 | os.ModeDir, 0, gidShared},
		{"sticky", 0o1777 | os.ModeDir, 0, 0},
	}
	for _, e := range tree {
		p := filepath.Join(src, e.name)
		if e.mode.IsDir() {
			require.NoError(t, os.MkdirAll(p, 0o700))
		} else {
			require.NoError(t, os.WriteFile(p, []byte(e.name), 0o600))
		}
	}
	for i := len(tree) - 1; i >= 0; i-- { // children first, so that times stay
		e := tree[i]
		p := filepath.Join(src, e.name)
		require.NoError(t, os.Chown(p, e.uid, e.gid))
		require.NoError(t, os.Chmod(p, e.mode))
		when := time.Unix(1_600_000_000+int64(i)*1000, 0)
		require.NoError(t, os.Chtimes(p, when, when))
	}
	runCommand(t, "cp", "-a", src, m.path("copy"))
	for _, e := range tree {
		s, err := os.Lstat(filepath.Join(src, e.name))
		require.NoError(t, err)
		d, err := os.Lstat(m.path("copy", e.name))
		require.NoError(t, err)
		assert.Equal(t, s.Mode(), d.Mode(), "mode of %q", e.name)
		ss, ds := s.Sys().(*syscall.Stat_t), d.Sys().(*syscall.Stat_t)
		assert.Equal(t, [2]uint32{ss.Uid, ss.Gid}, [2]uint32{ds.Uid, ds.Gid}, "owner of %q", e.name)
		assert.Equal(t, s.ModTime(), d.ModTime(), "mtime of %q", e.name)
	}
	// No ACL is stored, and getting one says so.
	_, err := unix.Getxattr(m.path("copy", "a"), "system.posix_acl_access", make([]byte, 64))
	assert.ErrorIs(t, err, unix.EOPNOTSUPP)
	err = unix.Setxattr(m.path("copy", "a"), "system.posix_acl_access", []byte{2, 0, 0, 0}, 0)
	assert.ErrorIs(t, err, unix.EOPNOTSUPP)
}

// TestPOSIXDeviceNodes: mknod of a character and a block device stores
// the type and the device number, and stat returns them; the mount is
// nodev, so opening them is refused.
func TestPOSIXDeviceNodes(t *testing.T) {
	m, _ := posixMount(t)
	for _, c := range []struct {
		name         string
		typ          uint32
		major, minor uint32
	}{{"null", unix.S_IFCHR, 1, 3}, {"sda1", unix.S_IFBLK, 8, 1}, {"bigminor", unix.S_IFCHR, 254, 70000}} {
		dev := unix.Mkdev(c.major, c.minor)
		require.NoError(t, unix.Mknod(m.path(c.name), c.typ|0o640, int(dev)), c.name)
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(m.path(c.name), &st))
		assert.Equal(t, c.typ|0o640, st.Mode, c.name)
		assert.Equal(t, [2]uint32{c.major, c.minor}, [2]uint32{unix.Major(st.Rdev), unix.Minor(st.Rdev)}, c.name)
		_, err := os.Open(m.path(c.name))
		assert.ErrorIs(t, err, fs.ErrPermission, "%s: the mount is nodev", c.name)
	}
	out := runCommand(t, "stat", "-c", "%F %t:%T", m.path("null"))
	assert.Equal(t, "character special file 1:3\n", out)
	out, err := as(t, m, uidBob, uidBob, nil, "mknod c 1 3 2>&1; true; ls c 2>/dev/null || echo absent")
	require.NoError(t, err, out)
	assert.Contains(t, out, "absent", "only root makes device nodes")
}

// TestPOSIXStatFS: df shows the store's devices' space after redundancy
// (here every device directory is on the data directory's file
// system), not a fixed figure, and inodes in use and free.
func TestPOSIXStatFS(t *testing.T) {
	prereq.Root(t, "a root mount")
	data := t.TempDir()
	_, shm, _ := startFileTarget(t, data)
	m := mountFUSE(t, shm)
	var host, got unix.Statfs_t
	require.NoError(t, unix.Statfs(data, &host))
	require.NoError(t, unix.Statfs(m.dir, &got))
	g := chunkstore.DefaultGeometry
	want := float64(host.Blocks) * float64(host.Frsize) * float64(g.Data) / float64(g.Devices())
	total := float64(got.Blocks) * float64(got.Frsize)
	assert.InEpsilon(t, want, total, 0.02, "K/(K+M) of the data file system")
	assert.LessOrEqual(t, float64(got.Bfree)*float64(got.Frsize), float64(host.Bfree)*float64(host.Frsize))
	assert.LessOrEqual(t, got.Bavail, got.Bfree)
	assert.Greater(t, got.Files, got.Ffree)
	require.NoError(t, os.WriteFile(m.path("one"), nil, 0o644))
	var after unix.Statfs_t
	require.NoError(t, unix.Statfs(m.dir, &after))
	assert.Equal(t, got.Files-got.Ffree+1, after.Files-after.Ffree, "one more inode in use")
}

// TestPOSIXTimestamps: through the mount, chmod, chown, link and rename
// set ctime only; write and truncate set mtime and ctime; utimensat's
// UTIME_OMIT leaves a time and UTIME_NOW sets it.
func TestPOSIXTimestamps(t *testing.T) {
	m, _ := posixMount(t)
	p := m.path("f")
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	old := unix.NsecToTimespec(time.Unix(1_500_000_000, 0).UnixNano())
	stat := func() unix.Stat_t {
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p, &st))
		return st
	}
	for _, c := range []struct {
		name         string
		do           func() error
		mtime, ctime bool
	}{
		{"chmod", func() error { return os.Chmod(p, 0o600) }, false, true},
		{"chown", func() error { return os.Chown(p, uidAlice, uidAlice) }, false, true},
		{"link", func() error { return os.Link(p, m.path("l")) }, false, true},
		{"rename", func() error {
			if err := os.Rename(p, m.path("g")); err != nil {
				return err
			}
			return os.Rename(m.path("g"), p)
		}, false, true},
		{"write", func() error { return os.WriteFile(p, []byte("abc"), 0o644) }, true, true},
		{"truncate", func() error { return os.Truncate(p, 1) }, true, true},
	} {
		// Put both times in the past, so any change shows.
		require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, old}, 0), c.name)
		before := stat()
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, c.do(), c.name)
		after := stat()
		assert.Equal(t, c.mtime, after.Mtim != before.Mtim, "%s: mtime changed", c.name)
		assert.Equal(t, c.ctime, after.Ctim != before.Ctim, "%s: ctime changed", c.name)
	}
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, old}, 0))
	omit := unix.Timespec{Nsec: unix.UTIME_OMIT}
	now := unix.Timespec{Nsec: unix.UTIME_NOW}
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{now, omit}, 0))
	st := stat()
	assert.Equal(t, old, st.Mtim, "UTIME_OMIT keeps mtime")
	assert.Greater(t, st.Atim.Sec, old.Sec, "UTIME_NOW sets atime")
}

// TestPOSIXWriteDropsCaps: file capabilities (setcap's
// security.capability) go at a write, even root's, and at a truncate,
// as on a local file system: the mount leaves this to the target
// (HANDLE_KILLPRIV_V2), so the kernel asks for no xattr before a write.
func TestPOSIXWriteDropsCaps(t *testing.T) {
	m, _ := posixMount(t)
	// struct vfs_cap_data, revision 2: CAP_NET_BIND_SERVICE permitted.
	caps := []byte{0, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, c := range []struct {
		name string
		do   func(p string) error
	}{
		{"write", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt([]byte("more"), 1); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}},
		{"truncate", func(p string) error { return os.Truncate(p, 2) }},
	} {
		p := m.path(c.name)
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o755))
		require.NoError(t, unix.Setxattr(p, "security.capability", caps, 0), c.name)
		buf := make([]byte, 64)
		n, err := unix.Getxattr(p, "security.capability", buf)
		require.NoError(t, err)
		require.Equal(t, caps, buf[:n])
		require.NoError(t, c.do(p), c.name)
		_, err = unix.Getxattr(p, "security.capability", buf)
		require.ErrorIs(t, err, unix.ENODATA, "%s drops the capabilities", c.name)
	}
}

// TestPOSIXWritebackCache: with the kernel's writeback cache (the
// mount's default) the kernel reads a page to fill it before a write
// that covers part of it, through the writer's file, and sends "now" as
// a time value. Neither may cost a user what it may do on a local file
// system: a user who may write a file but not read it writes part of a
// page; one who may write but does not own it truncates it and touches
// it (times set to now), while an explicit time still needs the owner;
// and the owner's data around the writes is intact.
func TestPOSIXWritebackCache(t *testing.T) {
	m, _ := posixMount(t)
	p := m.path("wo")
	orig := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB
	require.NoError(t, os.WriteFile(p, orig, 0o622))
	require.NoError(t, os.Chown(p, uidAlice, uidAlice))
	require.NoError(t, os.Chmod(p, 0o622))
	// Drop the pages the owner's write left cached, so that bob's write
	// needs the kernel to read its page first.
	fd, err := unix.Open(p, unix.O_RDONLY, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED))
	require.NoError(t, unix.Close(fd))

	out, err := as(t, m, uidBob, uidBob, nil, "cat wo")
	require.Error(t, err, "bob may not read: %s", out)
	out, err = as(t, m, uidBob, uidBob, nil, "printf BOB | dd of=wo bs=1 seek=5000 conv=notrunc status=none")
	require.NoError(t, err, "a write into part of a page by a user who may not read: %s", out)
	want := slices.Clone(orig)
	copy(want[5000:], "BOB")
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the page around the write is intact")

	out, err = as(t, m, uidBob, uidBob, nil, "touch -c wo")
	require.NoError(t, err, "touch (now) by a user who may write: %s", out)
	out, err = as(t, m, uidBob, uidBob, nil, "touch -c -d 2001-01-01 wo")
	require.Error(t, err, "an explicit time needs the owner: %s", out)
	assert.Contains(t, out, "Operation not permitted")
	out, err = as(t, m, uidBob, uidBob, nil, "truncate -s 100 wo")
	require.NoError(t, err, "truncate by a user who may write: %s", out)
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, int64(100), st.Size())
	got, err = os.ReadFile(p)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want[:100], got), "what is left is the owner's")
}
