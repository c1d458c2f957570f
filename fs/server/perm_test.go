package server

import (
	"bytes"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// userCred is a caller with a uid, a primary gid and supplementary
// groups.
func userCred(uid, gid uint32, groups ...uint32) *cred {
	return newCred(&proto.Cred{UID: uid, GID: gid, Groups: groups})
}

// The callers of the permission tests: alice and bob own their files,
// carol is in group users (100) by a supplementary group.
var (
	alice = userCred(1000, 1000)
	bob   = userCred(1001, 1001)
	carol = userCred(1002, 1002, 100)
)

const gUsers = 100

// permTree is a namespace made by root for the permission tests:
//
//	/home        0755 root
//	/home/alice  0700 alice        /home/alice/f  0644 alice
//	/shared      0770 root:users   /shared/f      0660 root:users
//	/tmp         1777 root         /tmp/a 0644 alice, /tmp/adir 0755 alice
//	/pub         0755 root         /pub/r 0444, /pub/w 0666, /pub/none 0000,
//	                               /pub/x 0755, /pub/nx 0644 (all root's)
//	/mine        0755 alice
type permTree struct {
	s                           *Server
	home, alice, shared, tmp    uint64
	pub, mine                   uint64
	aliceF, sharedF, tmpA, tmpD uint64
	pubR, pubW, pubNone         uint64
	pubX, pubNX                 uint64
}

func newPermTree(t *testing.T) *permTree {
	opt := testOptions()
	s := newServer(t, opt)
	p := &permTree{s: s}
	dir := func(parent uint64, name string, mode, uid, gid uint32) uint64 {
		a, err := s.mkdir(rootCred, parent, []byte(name), mode, uid, gid)
		require.NoError(t, err)
		return a.Ino
	}
	file := func(parent uint64, name string, mode, uid, gid uint32) uint64 {
		a, err := s.mknod(rootCred, parent, []byte(name), syscall.S_IFREG|mode, 0, uid, gid)
		require.NoError(t, err)
		return a.Ino
	}
	p.home = dir(root, "home", 0o755, 0, 0)
	p.alice = dir(p.home, "alice", 0o700, 1000, 1000)
	p.aliceF = file(p.alice, "f", 0o644, 1000, 1000)
	p.shared = dir(root, "shared", 0o770, 0, gUsers)
	p.sharedF = file(p.shared, "f", 0o660, 0, gUsers)
	p.tmp = dir(root, "tmp", 0o1777, 0, 0)
	p.tmpA = file(p.tmp, "a", 0o644, 1000, 1000)
	p.tmpD = dir(p.tmp, "adir", 0o755, 1000, 1000)
	p.pub = dir(root, "pub", 0o755, 0, 0)
	p.pubR = file(p.pub, "r", 0o444, 0, 0)
	p.pubW = file(p.pub, "w", 0o666, 0, 0)
	p.pubNone = file(p.pub, "none", 0, 0, 0)
	p.pubX = file(p.pub, "x", 0o755, 0, 0)
	p.pubNX = file(p.pub, "nx", 0o644, 0, 0)
	p.mine = dir(root, "mine", 0o755, 1000, 1000)
	return p
}

func name(c *cred) string {
	switch c {
	case rootCred:
		return "root"
	case alice:
		return "alice"
	case bob:
		return "bob"
	case carol:
		return "carol"
	}
	return "?"
}

func requireErr(t *testing.T, want syscall.Errno, err error, msg ...any) {
	t.Helper()
	if want == 0 {
		require.NoError(t, err, msg...)
		return
	}
	requireErrno(t, want, err, msg...)
}

func TestPermissionLookup(t *testing.T) {
	p := newPermTree(t)
	for _, c := range []struct {
		who    *cred
		dir    uint64
		name   string
		want   syscall.Errno
		reason string
	}{
		{alice, p.alice, "f", 0, "the owner searches her 0700 directory"},
		{bob, p.alice, "f", syscall.EACCES, "others may not search a 0700 directory"},
		{bob, p.alice, "missing", syscall.EACCES, "EACCES comes before ENOENT"},
		{bob, p.alice, "..", syscall.EACCES, "\"..\" needs search permission too"},
		{rootCred, p.alice, "f", 0, "root searches any directory"},
		{carol, p.shared, "f", 0, "a supplementary group gives the group's bits"},
		{bob, p.shared, "f", syscall.EACCES, "not in the group: the others' bits"},
		{bob, p.pub, "r", 0, "0755: everyone searches"},
	} {
		_, err := p.s.lookup(c.who, c.dir, []byte(c.name))
		requireErr(t, c.want, err, "%s: %s", name(c.who), c.reason)
	}
}

func TestPermissionOpen(t *testing.T) {
	p := newPermTree(t)
	const rd, wr, rw = syscall.O_RDONLY, syscall.O_WRONLY, syscall.O_RDWR
	for _, c := range []struct {
		who    *cred
		ino    uint64
		flags  uint32
		want   syscall.Errno
		reason string
	}{
		{bob, p.pubR, rd, 0, "0444 reads"},
		{bob, p.pubR, wr, syscall.EACCES, "0444 does not write"},
		{bob, p.pubR, rd | syscall.O_TRUNC, syscall.EACCES, "O_TRUNC needs write"},
		{bob, p.pubW, rw, 0, "0666 reads and writes"},
		{bob, p.pubNone, rd, syscall.EACCES, "0000"},
		{alice, p.aliceF, rw, 0, "0644: the owner's bits are rw"},
		{bob, p.aliceF, rd, 0, "the file is 0644 (the directory is what keeps bob out, at lookup)"},
		{rootCred, p.pubNone, rw, 0, "root reads and writes a 0000 file"},
		{carol, p.sharedF, rw, 0, "group users: rw"},
		{bob, p.sharedF, rd, syscall.EACCES, "not in users"},
		{bob, p.pubX, rd | fmodeExec, 0, "exec of a 0755 program needs x, not r"},
		{bob, p.pubNX, rd | fmodeExec, syscall.EACCES, "no x bit: no exec"},
		{rootCred, p.pubNX, rd | fmodeExec, syscall.EACCES, "root execs only what has an x bit"},
		{rootCred, p.pubX, rd | fmodeExec, 0, "root execs a program with x bits"},
		{bob, p.pub, rd | syscall.O_DIRECTORY, 0, "a directory opens for reading"},
		{bob, p.alice, rd | syscall.O_DIRECTORY, syscall.EACCES, "0700 directory of another"},
	} {
		h, _, err := p.s.openIno(c.who, c.ino, c.flags, true, 0)
		requireErr(t, c.want, err, "%s: %s", name(c.who), c.reason)
		if err == nil {
			require.NoError(t, p.s.release(c.ino, h))
		}
	}
}

// TestPermissionReadWrite: reads and writes pass by the mode or by an
// open handle of the same credential (a file created 0444 is writable
// through the handle its create returned).
func TestPermissionReadWrite(t *testing.T) {
	p := newPermTree(t)
	s := p.s
	buf := make([]byte, 10)
	_, err := s.write(bob, p.pubR, 0, []byte("x"), false)
	requireErrno(t, syscall.EACCES, err, "bob may not write a 0444 file")
	_, err = s.read(bob, p.pubNone, 0, buf)
	requireErrno(t, syscall.EACCES, err, "bob may not read a 0000 file")
	_, err = s.read(bob, p.pubR, 0, buf)
	require.NoError(t, err)
	_, err = s.write(rootCred, p.pubR, 0, []byte("root"), false)
	require.NoError(t, err, "root writes anything")

	a, h, err := s.create(alice, p.mine, []byte("ro"), 0o444, 0, 0, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL)
	require.NoError(t, err, "create with mode 0444 opens for writing")
	assert.Equal(t, uint32(1000), a.UID, "the owner is the caller, not CDW12")
	_, err = s.write(alice, a.Ino, 0, []byte("hello"), false)
	require.NoError(t, err, "the handle alice holds lets her write")
	_, err = s.write(bob, a.Ino, 0, []byte("x"), false)
	requireErrno(t, syscall.EACCES, err, "bob holds no handle")
	_, err = s.setAttr(alice, a.Ino, &proto.SetAttr{Valid: proto.SetSize, Size: 2})
	require.NoError(t, err, "ftruncate through the handle")
	require.NoError(t, s.release(a.Ino, h))
	_, err = s.write(alice, a.Ino, 0, []byte("x"), false)
	requireErrno(t, syscall.EACCES, err, "with the handle gone, the mode decides")
	_, _, err = s.openIno(alice, a.Ino, syscall.O_WRONLY, true, 0)
	requireErrno(t, syscall.EACCES, err)

	// Read-only handles do not grant writes.
	h, _, err = s.openIno(bob, p.pubR, syscall.O_RDONLY, true, 0)
	require.NoError(t, err)
	_, err = s.write(bob, p.pubR, 0, []byte("x"), false)
	requireErrno(t, syscall.EACCES, err)
	require.NoError(t, s.release(p.pubR, h))

	requireErrno(t, syscall.EACCES, s.fallocate(bob, p.pubR, 0, 0, 10))
	_, err = s.readDir(bob, p.alice, 0, make([]byte, 4096), false)
	requireErrno(t, syscall.EACCES, err, "listing a 0700 directory of another")
	_, err = s.readDir(bob, p.pub, 0, make([]byte, 4096), false)
	require.NoError(t, err)

	requireErrno(t, syscall.EACCES, s.access(bob, p.pubR, mayWrite))
	require.NoError(t, s.access(bob, p.pubR, mayRead))
	require.NoError(t, s.access(bob, p.pubNone, 0), "F_OK")
	require.NoError(t, s.access(rootCred, p.pubNone, mayRead|mayWrite))
	requireErrno(t, syscall.EACCES, s.access(rootCred, p.pubNX, mayExec))
	require.NoError(t, s.access(rootCred, p.alice, mayExec), "root searches any directory")
	requireErrno(t, syscall.EINVAL, s.access(bob, p.pubR, 8))
}

func TestPermissionNamespace(t *testing.T) {
	p := newPermTree(t)
	s := p.s
	type op func(c *cred) error
	mkdir := func(dir uint64, n string) op {
		return func(c *cred) error { _, err := s.mkdir(c, dir, []byte(n), 0o755, c.uid, c.gid); return err }
	}
	create := func(dir uint64, n string) op {
		return func(c *cred) error {
			a, h, err := s.create(c, dir, []byte(n), 0o644, c.uid, c.gid, syscall.O_CREAT|syscall.O_WRONLY)
			if err == nil {
				err = s.release(a.Ino, h)
			}
			return err
		}
	}
	symlink := func(dir uint64, n string) op {
		return func(c *cred) error { _, err := s.symlink(c, dir, []byte(n), []byte("t"), c.uid, c.gid); return err }
	}
	link := func(ino, dir uint64, n string) op {
		return func(c *cred) error { _, err := s.link(c, ino, dir, []byte(n)); return err }
	}
	unlink := func(dir uint64, n string) op {
		return func(c *cred) error { return s.unlink(c, dir, []byte(n), false) }
	}
	rmdir := func(dir uint64, n string) op { return func(c *cred) error { return s.unlink(c, dir, []byte(n), true) } }
	rename := func(d1 uint64, n1 string, d2 uint64, n2 string) op {
		return func(c *cred) error { return s.rename(c, d1, []byte(n1), d2, []byte(n2), 0) }
	}
	// Fixtures the cases below remove.
	_, err := s.mknod(rootCred, p.tmp, []byte("b"), syscall.S_IFREG|0o666, 0, 1001, 1001)
	require.NoError(t, err)
	_, err = s.mknod(rootCred, p.tmp, []byte("b2"), syscall.S_IFREG|0o666, 0, 1001, 1001)
	require.NoError(t, err)
	_, err = s.mkdir(rootCred, p.tmp, []byte("bdir"), 0o777, 1001, 1001)
	require.NoError(t, err)
	_, err = s.mkdir(rootCred, p.mine, []byte("sub"), 0o755, 1000, 1000)
	require.NoError(t, err)
	_, err = s.mkdir(rootCred, p.mine, []byte("rootsub"), 0o755, 0, 0)
	require.NoError(t, err)
	_, err = s.mkdir(rootCred, p.mine, []byte("bsub"), 0o777, 1001, 1001)
	require.NoError(t, err)

	for _, c := range []struct {
		who    *cred
		op     op
		want   syscall.Errno
		reason string
	}{
		{bob, mkdir(p.pub, "d"), syscall.EACCES, "mkdir needs write on the parent"},
		{bob, create(p.pub, "f"), syscall.EACCES, "create needs write on the parent"},
		{bob, create(p.pub, "w"), 0, "O_CREAT of an existing file is an open: no write on the parent needed"},
		{bob, create(p.pub, "r"), syscall.EACCES, "... and the open's own check: 0444 is not writable"},
		{bob, mkdir(p.pub, "r"), syscall.EEXIST, "EEXIST before EACCES, as Linux"},
		{bob, symlink(p.pub, "l"), syscall.EACCES, "symlink needs write on the parent"},
		{bob, link(p.pubR, p.pub, "r2"), syscall.EACCES, "link needs write on the new parent"},
		{bob, mkdir(p.alice, "d"), syscall.EACCES, "no search of a 0700 parent"},
		{alice, mkdir(p.mine, "d"), 0, "alice writes her directory"},
		{carol, create(p.shared, "c"), 0, "group users writes /shared"},
		{bob, unlink(p.pub, "r"), syscall.EACCES, "unlink needs write on the parent"},
		{rootCred, link(p.pubR, p.pub, "r2"), 0, "root links anywhere"},
		{bob, unlink(p.tmp, "a"), syscall.EPERM, "sticky: bob owns neither /tmp nor /tmp/a"},
		{bob, rename(p.tmp, "a", p.tmp, "c"), syscall.EPERM, "sticky: rename away"},
		{bob, rename(p.tmp, "b", p.tmp, "a"), syscall.EPERM, "sticky: rename over another's file"},
		{bob, rmdir(p.tmp, "adir"), syscall.EPERM, "sticky: rmdir of another's directory"},
		{bob, rename(p.tmp, "b2", p.tmp, "b3"), 0, "sticky: bob renames his own file"},
		{bob, unlink(p.tmp, "b"), 0, "sticky: bob unlinks his own file"},
		{bob, rmdir(p.tmp, "bdir"), 0, "sticky: bob removes his own directory"},
		{rootCred, unlink(p.tmp, "a"), 0, "root passes the sticky rule"},
		{bob, rename(p.mine, "bsub", p.pub, "moved"), syscall.EACCES, "rename needs write on the new parent"},
		{alice, rename(p.mine, "sub", p.mine, "sub2"), 0, "rename within a directory alice writes"},
		{alice, rename(p.mine, "rootsub", p.home, "x"), syscall.EACCES, "moving into /home, which alice may not write"},
		{alice, rename(p.mine, "rootsub", p.mine, "rootsub2"), 0, "a directory renamed in place needs no write on itself"},
		{alice, rmdir(p.mine, "rootsub2"), 0, "rmdir needs write on the parent, not on the directory"},
	} {
		requireErr(t, c.want, c.op(c.who), "%s: %s", name(c.who), c.reason)
	}

	// A directory that moves to another parent needs write on itself
	// (its ".." changes).
	_, err = s.mkdir(rootCred, p.mine, []byte("ro"), 0o555, 1001, 1001)
	require.NoError(t, err)
	_, err = s.mkdir(alice, p.mine, []byte("to"), 0o755, 0, 0)
	require.NoError(t, err)
	to, err := s.lookup(alice, p.mine, []byte("to"))
	require.NoError(t, err)
	requireErrno(t, syscall.EACCES, s.rename(alice, p.mine, []byte("ro"), to.Ino, []byte("ro"), 0), "its .. would change")
	require.NoError(t, s.rename(rootCred, p.mine, []byte("ro"), to.Ino, []byte("ro"), 0))
}

// TestPermissionOwnership: new inodes belong to the caller; a
// set-group-ID directory gives its group (and its bit, to directories).
func TestPermissionOwnership(t *testing.T) {
	p := newPermTree(t)
	s := p.s
	a, err := s.mkdir(alice, p.mine, []byte("d"), 0o755, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, [2]uint32{1000, 1000}, [2]uint32{a.UID, a.GID}, "CDW12-13 count only for root")
	a, err = s.mkdir(rootCred, p.mine, []byte("r"), 0o755, 7, 8)
	require.NoError(t, err)
	assert.Equal(t, [2]uint32{7, 8}, [2]uint32{a.UID, a.GID}, "root's CDW12-13 name the owner")

	sg, err := s.mkdir(rootCred, root, []byte("sgid"), 0o2777, 0, gUsers)
	require.NoError(t, err)
	a, err = s.mkdir(bob, sg.Ino, []byte("d"), 0o755, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, uint32(gUsers), a.GID, "the set-group-ID directory's group")
	assert.Equal(t, uint32(syscall.S_IFDIR|0o2755), a.Mode, "a new directory inherits the bit")
	a, err = s.mknod(bob, sg.Ino, []byte("f"), syscall.S_IFREG|0o2755, 0, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, uint32(gUsers), a.GID)
	assert.Equal(t, uint32(syscall.S_IFREG|0o755), a.Mode, "bob is not in the group the file gets: no set-group-ID")
	a, err = s.mknod(carol, sg.Ino, []byte("g"), syscall.S_IFREG|0o2755, 0, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, uint32(syscall.S_IFREG|0o2755), a.Mode, "carol is in users: the bit stays")
	a, err = s.mknod(bob, p.tmp, []byte("g"), syscall.S_IFREG|0o2755, 0, 0, gUsers)
	require.NoError(t, err)
	assert.Equal(t, [2]uint32{1001, syscall.S_IFREG | 0o2755}, [2]uint32{a.GID, a.Mode}, "bob's own group, whatever CDW13 says")
}

func TestPermissionSetAttr(t *testing.T) {
	p := newPermTree(t)
	s := p.s
	u32 := func(v uint32) uint32 { return v }
	for _, c := range []struct {
		who    *cred
		ino    uint64
		in     proto.SetAttr
		want   syscall.Errno
		reason string
	}{
		{bob, p.aliceF, proto.SetAttr{Valid: proto.SetMode, Mode: 0o777}, syscall.EPERM, "chmod by a non-owner"},
		{alice, p.aliceF, proto.SetAttr{Valid: proto.SetMode, Mode: 0o640}, 0, "chmod by the owner"},
		{rootCred, p.aliceF, proto.SetAttr{Valid: proto.SetMode, Mode: 0o644}, 0, "chmod by root"},
		{alice, p.aliceF, proto.SetAttr{Valid: proto.SetUID, UID: 1001}, syscall.EPERM, "only root gives a file away"},
		{alice, p.aliceF, proto.SetAttr{Valid: proto.SetUID, UID: 1000}, 0, "chown to oneself changes nothing"},
		{bob, p.aliceF, proto.SetAttr{Valid: proto.SetUID, UID: 1000}, syscall.EPERM, "a non-owner may not even chown to the owner"},
		{alice, p.aliceF, proto.SetAttr{Valid: proto.SetGID, GID: gUsers}, syscall.EPERM, "chgrp to a group alice is not in"},
		{alice, p.aliceF, proto.SetAttr{Valid: proto.SetGID, GID: 1000}, 0, "chgrp to her own group"},
		{bob, p.aliceF, proto.SetAttr{Valid: proto.SetGID, GID: 1001}, syscall.EPERM, "chgrp by a non-owner"},
		{rootCred, p.aliceF, proto.SetAttr{Valid: proto.SetUID | proto.SetGID, UID: 1000, GID: u32(gUsers)}, 0, "root chowns"},
		{bob, p.pubR, proto.SetAttr{Valid: proto.SetSize, Size: 0}, syscall.EACCES, "truncate needs write"},
		{bob, p.pubW, proto.SetAttr{Valid: proto.SetSize, Size: 3}, 0, "truncate of a 0666 file"},
		{bob, p.pubW, proto.SetAttr{Valid: proto.SetAtime | proto.SetMtime, Atime: 1, Mtime: 2}, syscall.EPERM, "explicit times: the owner only"},
		{bob, p.pubW, proto.SetAttr{Valid: proto.SetAtime | proto.SetAtimeNow | proto.SetMtime | proto.SetMtimeNow}, 0, "times to now: a writer may"},
		{bob, p.pubR, proto.SetAttr{Valid: proto.SetAtime | proto.SetAtimeNow | proto.SetMtime | proto.SetMtimeNow}, syscall.EACCES, "times to now: not without write"},
		{alice, p.tmpA, proto.SetAttr{Valid: proto.SetMtime, Mtime: 5}, 0, "the owner sets any time"},
		{rootCred, p.pubR, proto.SetAttr{Valid: proto.SetMtime, Mtime: 5}, 0, "root sets any time"},
	} {
		_, err := s.setAttr(c.who, c.ino, &c.in)
		requireErr(t, c.want, err, "%s: %s", name(c.who), c.reason)
	}
	a, err := s.getAttr(p.aliceF)
	require.NoError(t, err)
	assert.Equal(t, [2]uint32{1000, gUsers}, [2]uint32{a.UID, a.GID})

	// chmod by a caller outside the file's group drops set-group-ID.
	_, err = s.setAttr(alice, p.aliceF, &proto.SetAttr{Valid: proto.SetMode, Mode: 0o2755})
	require.NoError(t, err)
	a, _ = s.getAttr(p.aliceF)
	assert.Equal(t, uint32(0o755), a.Mode&0o7777, "alice is not in users")
	_, err = s.setAttr(rootCred, p.aliceF, &proto.SetAttr{Valid: proto.SetMode, Mode: 0o2755})
	require.NoError(t, err)
	a, _ = s.getAttr(p.aliceF)
	assert.Equal(t, uint32(0o2755), a.Mode&0o7777, "root keeps it")
}

// TestSetIDCleared: a write or truncate by anyone but root, and any
// chown, drop the set-user-ID bit, and the set-group-ID bit of a group
// executable file; a writer who is not the owner may clear them
// itself (the kernel asks so before a write).
func TestSetIDCleared(t *testing.T) {
	p := newPermTree(t)
	s := p.s
	mode := func(ino uint64) uint32 {
		a, err := s.getAttr(ino)
		require.NoError(t, err)
		return a.Mode & 0o7777
	}
	set := func(ino uint64, m uint32) {
		_, err := s.setAttr(rootCred, ino, &proto.SetAttr{Valid: proto.SetMode, Mode: m})
		require.NoError(t, err)
	}
	f := p.pubW
	for _, c := range []struct {
		name   string
		before uint32
		do     func() error
		after  uint32
	}{
		{"write by bob", 0o6777, func() error { _, err := s.write(bob, f, 0, []byte("x"), false); return err }, 0o777},
		{"write by root", 0o6777, func() error { _, err := s.write(rootCred, f, 0, []byte("x"), false); return err }, 0o6777},
		{"write by bob, setgid without g+x", 0o6767, func() error { _, err := s.write(bob, f, 0, []byte("x"), false); return err }, 0o2767},
		{"chunked write by bob", 0o4777, func() error { _, err := s.write(bob, f, 0, make([]byte, 20000), false); return err }, 0o777},
		{"truncate by bob", 0o6777, func() error {
			_, err := s.setAttr(bob, f, &proto.SetAttr{Valid: proto.SetSize, Size: 1})
			return err
		}, 0o777},
		{"truncate by root", 0o6777, func() error {
			_, err := s.setAttr(rootCred, f, &proto.SetAttr{Valid: proto.SetSize, Size: 1})
			return err
		}, 0o6777},
		{"chown by root", 0o6777, func() error {
			_, err := s.setAttr(rootCred, f, &proto.SetAttr{Valid: proto.SetUID, UID: 0})
			return err
		}, 0o777},
		{"chown with a mode, which wins", 0o6777, func() error {
			_, err := s.setAttr(rootCred, f, &proto.SetAttr{Valid: proto.SetUID | proto.SetMode, UID: 0, Mode: 0o4777})
			return err
		}, 0o4777},
		{"bob, who may write, clears the bits", 0o6777, func() error {
			_, err := s.setAttr(bob, f, &proto.SetAttr{Valid: proto.SetMode, Mode: 0o777})
			return err
		}, 0o777},
	} {
		set(f, c.before)
		require.NoError(t, c.do(), c.name)
		assert.Equal(t, c.after, mode(f), c.name)
	}
	set(f, 0o6777)
	_, err := s.setAttr(bob, f, &proto.SetAttr{Valid: proto.SetMode, Mode: 0o4777})
	requireErrno(t, syscall.EPERM, err, "a non-owner may clear the set-ID bits, nothing else")
}

// TestTimestamps: ctime on chmod, chown, link, rename and truncate;
// mtime and ctime on write and truncate (also to the same size); times
// not named are left alone (UTIME_OMIT), and "now" is the server's
// clock.
func TestTimestamps(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	opt := testOptions()
	opt.Now = func() time.Time { return now }
	s := newServer(t, opt)
	f, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, syscall.O_CREAT|syscall.O_RDWR)
	require.NoError(t, err)
	defer s.release(f.Ino, h)
	d, err := s.mkdir(rootCred, root, []byte("d"), 0o755, 0, 0)
	require.NoError(t, err)
	step := func() int64 { now = now.Add(time.Second); return now.UnixNano() }
	attr := func() proto.Attr {
		a, err := s.getAttr(f.Ino)
		require.NoError(t, err)
		return a
	}
	setattr := func(in proto.SetAttr) func() error {
		return func() error { _, err := s.setAttr(rootCred, f.Ino, &in); return err }
	}
	for _, c := range []struct {
		name         string
		do           func() error
		mtime, ctime bool
	}{
		{"chmod", setattr(proto.SetAttr{Valid: proto.SetMode, Mode: 0o600}), false, true},
		{"chown", setattr(proto.SetAttr{Valid: proto.SetUID | proto.SetGID, UID: 5, GID: 5}), false, true},
		{"link", func() error { _, err := s.link(rootCred, f.Ino, d.Ino, []byte("l")); return err }, false, true},
		{"rename", func() error { return s.rename(rootCred, root, []byte("f"), root, []byte("g"), 0) }, false, true},
		{"unlink of another link", func() error { return s.unlink(rootCred, d.Ino, []byte("l"), false) }, false, true},
		{"write", func() error { _, err := s.write(rootCred, f.Ino, 0, []byte("abc"), false); return err }, true, true},
		{"truncate", setattr(proto.SetAttr{Valid: proto.SetSize, Size: 1}), true, true},
		{"truncate to the same size", setattr(proto.SetAttr{Valid: proto.SetSize, Size: 1}), true, true},
		{"setxattr", func() error { return s.setXattr(rootCred, f.Ino, []byte("user.a"), []byte("v"), 0) }, false, true},
	} {
		before := attr()
		t0 := step()
		require.NoError(t, c.do(), c.name)
		a := attr()
		if c.mtime {
			assert.Equal(t, t0, a.Mtime, "%s sets mtime", c.name)
		} else {
			assert.Equal(t, before.Mtime, a.Mtime, "%s leaves mtime", c.name)
		}
		if c.ctime {
			assert.Equal(t, t0, a.Ctime, "%s sets ctime", c.name)
		}
		assert.Equal(t, before.Atime, a.Atime, "%s leaves atime", c.name)
	}

	// utimensat: UTIME_OMIT leaves a time, UTIME_NOW is the server's
	// clock, explicit times are kept as given; ctime always moves.
	before := attr()
	t0 := step()
	_, err = s.setAttr(rootCred, f.Ino, &proto.SetAttr{Valid: proto.SetMtime, Mtime: 42})
	require.NoError(t, err)
	a := attr()
	assert.Equal(t, [3]int64{before.Atime, 42, t0}, [3]int64{a.Atime, a.Mtime, a.Ctime}, "atime omitted")
	t0 = step()
	_, err = s.setAttr(rootCred, f.Ino, &proto.SetAttr{Valid: proto.SetAtime | proto.SetAtimeNow})
	require.NoError(t, err)
	a = attr()
	assert.Equal(t, [3]int64{t0, 42, t0}, [3]int64{a.Atime, a.Mtime, a.Ctime}, "atime now, mtime omitted")
}

func TestXattrPermissions(t *testing.T) {
	p := newPermTree(t)
	s := p.s
	buf := make([]byte, 100)
	for _, c := range []struct {
		who    *cred
		ino    uint64
		name   string
		set    bool
		want   syscall.Errno
		reason string
	}{
		{rootCred, p.pubW, "system.posix_acl_access", true, syscall.EOPNOTSUPP, "POSIX ACLs are refused: cp -a falls back to chmod"},
		{rootCred, p.pubW, "system.posix_acl_default", true, syscall.EOPNOTSUPP, ""},
		{rootCred, p.pubW, "system.posix_acl_access", false, syscall.EOPNOTSUPP, ""},
		{bob, p.pubW, "user.a", true, 0, "user.* with write permission"},
		{bob, p.pubR, "user.a", true, syscall.EACCES, "user.* without write permission"},
		{bob, p.pubW, "user.a", false, 0, "user.* with read permission"},
		{bob, p.pubNone, "user.a", false, syscall.EACCES, "user.* without read permission"},
		{bob, p.pubW, "trusted.a", true, syscall.EPERM, "trusted.* is root's"},
		{rootCred, p.pubW, "trusted.a", true, 0, ""},
		{bob, p.pubW, "trusted.a", false, syscall.ENODATA, "others do not see trusted.*"},
		{rootCred, p.pubW, "trusted.a", false, 0, ""},
		{bob, p.tmp, "user.a", true, syscall.EPERM, "user.* of a sticky directory: its owner only"},
	} {
		var err error
		if c.set {
			err = s.setXattr(c.who, c.ino, []byte(c.name), []byte("v"), 0)
		} else {
			_, err = s.getXattr(c.who, c.ino, []byte(c.name), buf)
		}
		requireErr(t, c.want, err, "%s %s: %s", name(c.who), c.name, c.reason)
	}
	requireErrno(t, syscall.EOPNOTSUPP, s.removeXattr(rootCred, p.pubW, aclAccess))
	requireErrno(t, syscall.EACCES, s.removeXattr(bob, p.pubR, []byte("user.a")))
	n, err := s.listXattr(bob, p.pubW, buf)
	require.NoError(t, err)
	names, err := proto.ParseNames(buf[:n])
	require.NoError(t, err)
	assert.Equal(t, []string{"user.a"}, names, "trusted.* hidden from bob")
	n, err = s.listXattr(rootCred, p.pubW, buf)
	require.NoError(t, err)
	names, _ = proto.ParseNames(buf[:n])
	assert.Equal(t, []string{"trusted.a", "user.a"}, names)
}

func TestDeviceNodes(t *testing.T) {
	s := newServer(t, testOptions())
	rdev := uint32(8<<8 | 1) // 8:1 in the kernel's encoding (new_encode_dev)
	for _, c := range []struct {
		typ  uint32
		name string
	}{{syscall.S_IFBLK, "blk"}, {syscall.S_IFCHR, "chr"}} {
		a, err := s.mknod(rootCred, root, []byte(c.name), c.typ|0o640, rdev, 0, 6)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.typ|0o640, a.Mode)
		assert.Equal(t, rdev, a.Rdev)
		b, err := s.lookup(rootCred, root, []byte(c.name))
		require.NoError(t, err)
		assert.Equal(t, a, b, "stat returns the type and rdev")
		_, err = s.read(rootCred, a.Ino, 0, make([]byte, 1))
		requireErrno(t, syscall.EINVAL, err, "the server holds no device data")
		_, err = s.mknod(alice, root, []byte(c.name+"2"), c.typ|0o640, rdev, 0, 0)
		requireErrno(t, syscall.EPERM, err, "only root makes device nodes (CAP_MKNOD)")
	}
	_, err := s.mknod(rootCred, root, []byte("bad"), 0o170000|0o640, 0, 0, 0)
	requireErrno(t, syscall.EINVAL, err, "no such file type")
}

// TestCredentials runs commands through the handler: one naming a
// credential the server does not hold is answered ENOKEY and runs
// nothing, not even into the reply cache; CRED registers one whose ID
// is its hash, after which the command runs as that caller.
func TestCredentials(t *testing.T) {
	s := newServer(t, testOptions())
	_, err := s.mkdir(rootCred, root, []byte("ro"), 0o555, 0, 0)
	require.NoError(t, err)
	ro, _ := s.lookup(rootCred, root, []byte("ro"))
	pc := proto.Cred{UID: 1000, GID: 1000, Groups: []uint32{27}}
	rec := make([]byte, pc.Size())
	pc.MarshalTo(rec)

	exec := func(cmd nvmeof.Command, in []byte, outLen int) *target.VendorCommand {
		t.Helper()
		vc, dataLen, payloadLen := vendorCommand(&cmd, in, outLen)
		require.True(t, s.PrepareVendor(&cmd, dataLen, payloadLen).Success())
		require.True(t, s.ExecuteVendor(vc).Success())
		return vc
	}
	mkdir := nvmeof.Command{Opcode: proto.OpMkdir, MPTR: pc.ID(), CDW2: 7, CDW14: 0o755}
	proto.SetArgs(&mkdir, ro.Ino, 0)
	vc := exec(mkdir, []byte("d"), proto.AttrSize)
	assert.Equal(t, uint32(syscall.ENOKEY), vc.DW0, "an unknown credential")

	bad := nvmeof.Command{Opcode: proto.OpCred}
	proto.SetArgs(&bad, pc.ID()+1, 0)
	assert.Equal(t, uint32(syscall.EINVAL), exec(bad, rec, 0).DW0, "an ID that is not the record's hash")
	withMPTR := bad
	withMPTR.MPTR = 1
	assert.False(t, s.PrepareVendor(&withMPTR, len(rec), 0).Success(), "CRED's MPTR is reserved")

	reg := nvmeof.Command{Opcode: proto.OpCred}
	proto.SetArgs(&reg, pc.ID(), 0)
	assert.Zero(t, exec(reg, rec, 0).DW0)
	assert.Zero(t, exec(reg, rec, 0).DW0, "registering again changes nothing")
	vc = exec(mkdir, []byte("d"), proto.AttrSize)
	assert.Equal(t, uint32(syscall.EACCES), vc.DW0, "the same request ID runs now, as uid 1000, and is refused")

	open, err := s.mkdir(rootCred, root, []byte("open"), 0o777, 0, 0)
	require.NoError(t, err)
	mkdir.CDW2 = 8
	proto.SetArgs(&mkdir, open.Ino, 0)
	vc = exec(mkdir, []byte("d"), proto.AttrSize)
	require.Zero(t, vc.DW0)
	var a proto.Attr
	require.NoError(t, a.Unmarshal(vc.Data))
	assert.Equal(t, [2]uint32{1000, 1000}, [2]uint32{a.UID, a.GID}, "owned by the credential's caller")

	access := nvmeof.Command{Opcode: proto.OpAccess, MPTR: pc.ID(), CDW14: mayWrite}
	proto.SetArgs(&access, ro.Ino, 0)
	assert.Equal(t, uint32(syscall.EACCES), exec(access, nil, 0).DW0)
	access.MPTR = proto.RootCredID
	assert.Zero(t, exec(access, nil, 0).DW0, "credential 0 is root's")
}

// TestStatFSDevices: on devices that are directories, STATFS reports
// their file system's space after redundancy: K of the K+M devices'
// share of each file system, here all on one.
func TestStatFSDevices(t *testing.T) {
	dir := t.TempDir()
	var devs []vfs.FS
	for i := range testGeometry.Devices() {
		devs = append(devs, vfs.NewOS(filepath.Join(dir, string(rune('a'+i)))))
	}
	st, err := chunkstore.OpenOrCreate(devs, storeOpts...)
	require.NoError(t, err)
	defer st.Close()
	s, err := Open(st, Options{FSID: 1})
	require.NoError(t, err)
	defer s.Close()

	var sf syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &sf))
	n, k := int64(testGeometry.Devices()), int64(testGeometry.Data)
	got := s.statFS()
	want := int64(sf.Blocks) * sf.Frsize / n * k / statfsBlock
	assert.InDelta(t, want, int64(got.Blocks), float64(want)/100+1, "K/(K+M) of the disk")
	assert.LessOrEqual(t, got.Bavail, got.Bfree)
	assert.LessOrEqual(t, got.Bfree, got.Blocks)
	assert.Greater(t, got.Bfree, uint64(0))
	assert.Equal(t, uint64(1), got.Files-got.Ffree, "the root is the one inode in use")
	assert.LessOrEqual(t, got.Ffree, uint64(sf.Bavail)*uint64(sf.Frsize)/statfsInodeBytes)

	capped, err := Open(st, Options{FSID: 2, Capacity: 1 << 20})
	require.NoError(t, err)
	defer capped.Close()
	got = capped.statFS()
	assert.Equal(t, uint64(1<<20/statfsBlock), got.Blocks, "Capacity bounds the total")
}

// TestStatFSFallback: devices statfs cannot ask report Capacity.
func TestStatFSFallback(t *testing.T) {
	s := newServer(t, testOptions())
	_, err := s.write(rootCred, mustCreate(t, s, "f"), 0, make([]byte, 40000), false)
	require.NoError(t, err)
	got := s.statFS()
	assert.Equal(t, uint64(1<<30/statfsBlock), got.Blocks)
	assert.Equal(t, uint64((1<<30-s.used.Load())/statfsBlock), got.Bfree)
	assert.Equal(t, uint64(2), got.Files-got.Ffree)
}

func mustCreate(t *testing.T, s *Server, n string) uint64 {
	t.Helper()
	a, err := s.mknod(rootCred, root, []byte(n), syscall.S_IFREG|0o644, 0, 0, 0)
	require.NoError(t, err)
	return a.Ino
}

// TestWriteDropsCaps: a write (inline or into chunks), a truncate and a
// chown drop a regular file's security.capability, whoever makes them, as
// Linux does; a chmod and a setxattr do not. The mount leaves this to the
// server (HANDLE_KILLPRIV_V2).
func TestWriteDropsCaps(t *testing.T) {
	s := newServer(t, testOptions())
	caps := []byte("security.capability")
	big := bytes.Repeat([]byte("c"), 3*int(s.bs)/2)
	for _, c := range []struct {
		name  string
		do    func(ino uint64) error
		drops bool
	}{
		{"inline write", func(ino uint64) error { _, err := s.write(rootCred, ino, 0, []byte("abc"), false); return err }, true},
		{"chunked write", func(ino uint64) error { _, err := s.write(rootCred, ino, 0, big, false); return err }, true},
		{"truncate", func(ino uint64) error {
			_, err := s.setAttr(rootCred, ino, &proto.SetAttr{Valid: proto.SetSize, Size: 7})
			return err
		}, true},
		{"chown", func(ino uint64) error {
			_, err := s.setAttr(rootCred, ino, &proto.SetAttr{Valid: proto.SetUID, UID: 9})
			return err
		}, true},
		{"chmod", func(ino uint64) error {
			_, err := s.setAttr(rootCred, ino, &proto.SetAttr{Valid: proto.SetMode, Mode: 0o755})
			return err
		}, false},
		{"setxattr", func(ino uint64) error { return s.setXattr(rootCred, ino, []byte("user.x"), []byte("v"), 0) }, false},
	} {
		f, h, err := s.create(rootCred, root, []byte(c.name), 0o644, 0, 0, syscall.O_CREAT|syscall.O_RDWR)
		require.NoError(t, err)
		defer s.release(f.Ino, h)
		require.NoError(t, s.setXattr(rootCred, f.Ino, caps, []byte("caps"), 0))
		require.NoError(t, c.do(f.Ino), c.name)
		_, err = s.getXattr(rootCred, f.Ino, caps, make([]byte, 64))
		if c.drops {
			requireErrno(t, syscall.ENODATA, err)
		} else {
			require.NoError(t, err, "%s keeps the capabilities", c.name)
		}
	}
	// A directory's security.capability (meaningless, but allowed) stays.
	d, err := s.mkdir(rootCred, root, []byte("d"), 0o755, 0, 0)
	require.NoError(t, err)
	require.NoError(t, s.setXattr(rootCred, d.Ino, caps, []byte("caps"), 0))
	_, err = s.setAttr(rootCred, d.Ino, &proto.SetAttr{Valid: proto.SetUID, UID: 9})
	require.NoError(t, err)
	_, err = s.getXattr(rootCred, d.Ino, caps, make([]byte, 64))
	require.NoError(t, err)
}
