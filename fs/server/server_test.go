package server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

const root = 1

func TestNameErrors(t *testing.T) {
	s := newServer(t, testOptions())
	long := []byte(strings.Repeat("n", 256))
	max := []byte(strings.Repeat("n", 255))
	_, err := s.mkdir(rootCred, root, max, 0o755, 0, 0)
	require.NoError(t, err, "255 bytes is a name")
	for _, c := range []struct {
		name string
		want syscall.Errno
	}{
		{"a/b", syscall.EINVAL}, {"a\x00b", syscall.EINVAL}, {"/", syscall.EINVAL}, {string(long), syscall.ENAMETOOLONG},
		{"", syscall.ENOENT},
	} {
		_, err := s.mkdir(rootCred, root, []byte(c.name), 0o755, 0, 0)
		requireErrno(t, c.want, err, "mkdir %q", c.name)
		_, err = s.lookup(rootCred, root, []byte(c.name))
		requireErrno(t, c.want, err, "lookup %q", c.name)
		_, _, err = s.create(rootCred, root, []byte(c.name), 0o644, 0, 0, 0)
		requireErrno(t, c.want, err, "create %q", c.name)
		requireErrno(t, c.want, s.unlink(rootCred, root, []byte(c.name), false), "unlink %q", c.name)
		requireErrno(t, c.want, s.rename(rootCred, root, []byte(c.name), root, []byte("x"), 0), "rename %q", c.name)
		_, err = s.symlink(rootCred, root, []byte(c.name), []byte("t"), 0, 0)
		requireErrno(t, c.want, err, "symlink %q", c.name)
	}
	// "." and "..", as Linux answers them.
	for _, n := range []string{".", ".."} {
		_, err := s.mkdir(rootCred, root, []byte(n), 0o755, 0, 0)
		requireErrno(t, syscall.EEXIST, err, "mkdir %s", n)
		_, err = s.mknod(rootCred, root, []byte(n), syscall.S_IFREG|0o644, 0, 0, 0)
		requireErrno(t, syscall.EEXIST, err, "mknod %s", n)
		requireErrno(t, syscall.EISDIR, s.unlink(rootCred, root, []byte(n), false), "unlink %s", n)
		requireErrno(t, syscall.EBUSY, s.rename(rootCred, root, []byte(n), root, []byte("x"), 0), "rename %s", n)
	}
	requireErrno(t, syscall.EINVAL, s.unlink(rootCred, root, []byte("."), true), "rmdir .")
	requireErrno(t, syscall.ENOTEMPTY, s.unlink(rootCred, root, []byte(".."), true), "rmdir ..")
}

func TestErrnos(t *testing.T) {
	s := newServer(t, testOptions())
	d, err := s.mkdir(rootCred, root, []byte("d"), 0o755, 0, 0)
	require.NoError(t, err)
	f, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, oExcl)
	require.NoError(t, err)
	require.NoError(t, s.release(f.Ino, h))

	_, _, err = s.create(rootCred, root, []byte("f"), 0o644, 0, 0, oExcl)
	requireErrno(t, syscall.EEXIST, err)
	_, _, err = s.create(rootCred, root, []byte("d"), 0o644, 0, 0, 0)
	requireErrno(t, syscall.EISDIR, err)
	_, err = s.lookup(rootCred, f.Ino, []byte("x"))
	requireErrno(t, syscall.ENOTDIR, err)
	_, err = s.mkdir(rootCred, f.Ino, []byte("x"), 0o755, 0, 0)
	requireErrno(t, syscall.ENOTDIR, err)
	_, err = s.mkdir(rootCred, 999, []byte("x"), 0o755, 0, 0)
	requireErrno(t, syscall.ENOENT, err)
	_, err = s.mknod(userCred(1000, 1000), root, []byte("dev"), syscall.S_IFCHR|0o644, 1, 0, 0)
	requireErrno(t, syscall.EPERM, err)
	_, err = s.link(rootCred, d.Ino, root, []byte("dl"))
	requireErrno(t, syscall.EPERM, err)
	_, err = s.link(rootCred, f.Ino, root, []byte("d"))
	requireErrno(t, syscall.EEXIST, err)
	_, err = s.read(rootCred, d.Ino, 0, make([]byte, 10))
	requireErrno(t, syscall.EISDIR, err)
	_, err = s.write(rootCred, d.Ino, 0, []byte("x"), false)
	requireErrno(t, syscall.EISDIR, err)
	_, err = s.write(rootCred, f.Ino, -1, []byte("x"), false)
	requireErrno(t, syscall.EINVAL, err)
	_, err = s.write(rootCred, f.Ino, maxFileSize, []byte("x"), false)
	requireErrno(t, syscall.EFBIG, err)
	_, _, err = s.openIno(rootCred, d.Ino, oWronly, true, 0)
	requireErrno(t, syscall.EISDIR, err)
	requireErrno(t, syscall.EBADF, s.release(f.Ino, 12345))

	// Rename.
	_, err = s.mkdir(rootCred, d.Ino, []byte("sub"), 0o755, 0, 0)
	require.NoError(t, err)
	requireErrno(t, syscall.EINVAL, s.rename(rootCred, root, []byte("d"), d.Ino, []byte("inside"), 0), "a directory into itself")
	requireErrno(t, syscall.EISDIR, s.rename(rootCred, root, []byte("f"), root, []byte("d"), 0), "a file over a directory")
	_, err = s.mkdir(rootCred, root, []byte("e"), 0o755, 0, 0)
	require.NoError(t, err)
	requireErrno(t, syscall.ENOTEMPTY, s.rename(rootCred, root, []byte("e"), root, []byte("d"), 0))
	requireErrno(t, syscall.ENOTDIR, s.rename(rootCred, root, []byte("e"), root, []byte("f"), 0))
	requireErrno(t, syscall.EEXIST, s.rename(rootCred, root, []byte("e"), root, []byte("f"), proto.RenameNoRepl))
	requireErrno(t, syscall.ENOENT, s.rename(rootCred, root, []byte("e"), root, []byte("none"), proto.RenameExch))
	requireErrno(t, syscall.ENOENT, s.rename(rootCred, root, []byte("none"), root, []byte("x"), 0))
	requireErrno(t, syscall.EINVAL, s.rename(rootCred, root, []byte("e"), root, []byte("f"), proto.RenameNoRepl|proto.RenameExch))

	// Exchange a file and a directory across directories.
	require.NoError(t, s.rename(rootCred, root, []byte("f"), d.Ino, []byte("sub"), proto.RenameExch))
	got, err := s.lookup(rootCred, root, []byte("f"))
	require.NoError(t, err)
	require.Equal(t, uint32(sIFDIR), got.Mode&sIFMT)
	dotdot, err := s.lookup(rootCred, got.Ino, []byte(".."))
	require.NoError(t, err)
	require.Equal(t, uint64(root), dotdot.Ino, "the exchanged directory's parent moved")
	rootAttr, _ := s.getAttr(root)
	dAttr, _ := s.getAttr(d.Ino)
	require.Equal(t, uint32(5), rootAttr.Nlink, "root: . .. d e f(dir)")
	require.Equal(t, uint32(2), dAttr.Nlink, "d: . and the parent's entry; sub is a file now")

	// Xattrs.
	requireErrno(t, syscall.ENODATA, s.removeXattr(rootCred, f.Ino, []byte("user.x")))
	_, err = s.getXattr(rootCred, f.Ino, []byte("user.x"), make([]byte, 10))
	requireErrno(t, syscall.ENODATA, err)
	require.NoError(t, s.setXattr(rootCred, f.Ino, []byte("user.x"), []byte("0123456789ab"), 0))
	_, err = s.getXattr(rootCred, f.Ino, []byte("user.x"), make([]byte, 10))
	requireErrno(t, syscall.ERANGE, err)
	requireErrno(t, syscall.E2BIG, s.setXattr(rootCred, f.Ino, []byte("user.big"), make([]byte, proto.MaxXattrValue+1), 0))
	_, err = s.listXattr(rootCred, f.Ino, make([]byte, 3))
	requireErrno(t, syscall.ERANGE, err)

	// No space.
	small := newServer(t, Options{BlockSize: 8192, InlineMax: 512, Capacity: 64 << 10})
	sf, sh, err := small.create(rootCred, root, []byte("f"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	_, err = small.write(rootCred, sf.Ino, 0, make([]byte, 128<<10), false)
	requireErrno(t, syscall.ENOSPC, err)
	_, err = small.write(rootCred, sf.Ino, 0, make([]byte, 32<<10), false)
	require.NoError(t, err)
	require.NoError(t, small.release(sf.Ino, sh))
	requireErrno(t, syscall.ENOSPC, small.fallocate(rootCred, sf.Ino, 0, 0, 1<<20))
}

// TestHundredThousandEntries lists a directory of 100 000 entries in
// pages: every entry once, in few pages, each page one seek in the
// cookie index.
func TestHundredThousandEntries(t *testing.T) {
	s := newServer(t, testOptions())
	d, err := s.mkdir(rootCred, root, []byte("big"), 0o755, 0, 0)
	require.NoError(t, err)
	const n = 100_000
	// One transaction for the set-up: bbolt fsyncs each commit.
	want := make(map[string]bool, n)
	require.NoError(t, s.runUpdate(func(tx *bboltTx) error {
		dn, err := getDir(tx, d.Ino)
		if err != nil {
			return err
		}
		for i := range n {
			name := fmt.Sprintf("entry-%06d-%s", i, strings.Repeat("x", i%40))
			ino, err := s.newIno(tx)
			if err != nil {
				return err
			}
			in := &inode{Mode: sIFREG | 0o644, Nlink: 1, Flags: flagInline}
			if err := s.putInode(tx, ino, in); err != nil {
				return err
			}
			if err := s.addEntry(tx, d.Ino, dn, []byte(name), ino, in.Mode); err != nil {
				return err
			}
			want[name] = true
		}
		return s.putInode(tx, d.Ino, dn)
	}))
	for _, plus := range []bool{false, true} {
		names, pages := listAll(t, s, d.Ino, 64<<10, plus)
		require.Len(t, names, n+2)
		seen := map[string]bool{}
		for _, nm := range names[2:] {
			require.True(t, want[nm], nm)
			require.False(t, seen[nm], "listed twice: %s", nm)
			seen[nm] = true
		}
		entry := proto.DirentSize(len("entry-000000-")+40, plus)
		require.LessOrEqual(t, pages, (n*entry)/(64<<10)*2+2, "pages of 64 KiB are filled")
	}
	// A listing that starts in the middle goes on where it left off, and
	// entries removed and added meanwhile behave.
	buf := make([]byte, 4096)
	nb, err := s.readDir(rootCred, d.Ino, 0, buf, false)
	require.NoError(t, err)
	var last uint64
	_, err = proto.ParseDirents(buf[:nb], false, func(e *proto.Dirent) error { last = e.Cookie; return nil })
	require.NoError(t, err)
	require.NoError(t, s.unlink(rootCred, d.Ino, []byte("entry-099999-"+strings.Repeat("x", 99999%40)), false))
	_, err = s.mknod(rootCred, d.Ino, []byte("late"), sIFREG|0o644, 0, 0, 0)
	require.NoError(t, err)
	var rest []string
	for cookie := last; ; {
		nb, err := s.readDir(rootCred, d.Ino, cookie, buf, false)
		require.NoError(t, err)
		eof, err := proto.ParseDirents(buf[:nb], false, func(e *proto.Dirent) error {
			rest = append(rest, string(e.Name))
			cookie = e.Cookie
			return nil
		})
		require.NoError(t, err)
		if eof {
			break
		}
	}
	require.Equal(t, "late", rest[len(rest)-1])
	seen := map[string]bool{}
	for _, nm := range rest {
		require.False(t, seen[nm], nm)
		seen[nm] = true
	}
}

func TestSmallFilesInlineThenChunks(t *testing.T) {
	s := newServer(t, testOptions())
	f, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	_, err = s.write(rootCred, f.Ino, 0, []byte("tiny"), false)
	require.NoError(t, err)
	require.Empty(t, s.store.Chunks(), "a small file lives in the metadata")
	n, _ := s.viewInode(f.Ino)
	require.True(t, n.inline())
	big := bytes.Repeat([]byte("0123456789"), 3000)
	_, err = s.write(rootCred, f.Ino, 2, big, false)
	require.NoError(t, err)
	n, _ = s.viewInode(f.Ino)
	require.False(t, n.inline())
	require.Equal(t, uint64(4), n.Chunks, "30 002 bytes in 8 KiB blocks")
	got := make([]byte, 30_010)
	k, err := s.read(rootCred, f.Ino, 0, got)
	require.NoError(t, err)
	require.Equal(t, 30_002, k)
	require.Equal(t, "ti", string(got[:2]))
	require.Equal(t, big, got[2:k])
	require.NoError(t, s.release(f.Ino, h))
	require.NoError(t, s.unlink(rootCred, root, []byte("f"), false))
	require.Empty(t, s.store.Chunks(), "unlink frees the chunks")
	require.Zero(t, s.used.Load())
	checkInvariants(t, s)
}

func TestUnlinkWhileOpen(t *testing.T) {
	d := newDevices(t)
	st, s := d.open(testOptions())
	f, h, err := s.create(rootCred, root, []byte("f"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	data := bytes.Repeat([]byte("x"), 20000)
	_, err = s.write(rootCred, f.Ino, 0, data, false)
	require.NoError(t, err)
	require.NoError(t, s.unlink(rootCred, root, []byte("f"), false))
	_, err = s.lookup(rootCred, root, []byte("f"))
	requireErrno(t, syscall.ENOENT, err)
	got := make([]byte, 30000)
	n, err := s.read(rootCred, f.Ino, 0, got)
	require.NoError(t, err, "an open file stays readable")
	require.Equal(t, data, got[:n])
	_, err = s.write(rootCred, f.Ino, 20000, []byte("more"), false)
	require.NoError(t, err, "and writable")
	a, err := s.getAttr(f.Ino)
	require.NoError(t, err)
	require.Zero(t, a.Nlink)
	require.NoError(t, s.release(f.Ino, h))
	_, err = s.getAttr(f.Ino)
	requireErrno(t, syscall.ENOENT, err)
	require.Empty(t, st.Chunks())

	// The same with a stop before the release: the next open deletes it
	// (with no reclaim grace; TestReclaim has the grace).
	f, _, err = s.create(rootCred, root, []byte("g"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	_, err = s.write(rootCred, f.Ino, 0, data, false)
	require.NoError(t, err)
	require.NoError(t, s.unlink(rootCred, root, []byte("g"), false))
	require.NoError(t, st.Sync())
	require.NoError(t, s.Close())
	require.NoError(t, st.Close())
	opt := testOptions()
	opt.ReclaimGrace = -1
	st, s = d.open(opt)
	defer st.Close()
	defer s.Close()
	_, err = s.getAttr(f.Ino)
	requireErrno(t, syscall.ENOENT, err)
	require.Empty(t, st.Chunks())
	checkInvariants(t, s)
}

// TestGroupCommit runs many metadata changes at once, some of which fail:
// the failures undo only themselves, and every success is there.
func TestGroupCommit(t *testing.T) {
	s := newServer(t, testOptions())
	const n = 64
	errs := make(chan error, 2*n)
	for i := range n {
		go func() {
			_, err := s.mkdir(rootCred, root, []byte(fmt.Sprintf("d%d", i)), 0o755, 0, 0)
			errs <- err
		}()
		go func() {
			_, _, err := s.create(rootCred, root, []byte("same"), 0o644, 0, 0, oExcl)
			errs <- err
		}()
	}
	created := 0
	for range 2 * n {
		err := <-errs
		if err == nil {
			created++
			continue
		}
		requireErrno(t, syscall.EEXIST, err)
	}
	require.Equal(t, n+1, created, "every mkdir and one create")
	names, _ := listAll(t, s, root, 64<<10, false)
	require.Len(t, names, n+3)
	a, err := s.getAttr(root)
	require.NoError(t, err)
	require.Equal(t, uint32(2+n), a.Nlink)
	require.Equal(t, 1, s.Stats().Handles, "the one create's handle")
	checkInvariants(t, s)
}

// TestRequestIDs: a command sent again with the same request ID is
// answered with the first run's outcome, not run twice.
func TestRequestIDs(t *testing.T) {
	s := newServer(t, testOptions())
	run := func(op nvmeof.Opcode, id uint64, name string) (uint32, []byte) {
		cmd := nvmeof.Command{Opcode: op, NSID: 1, CDW2: proto.Lo(id), CDW3: proto.Hi(id)}
		if op == proto.OpMkdir {
			cmd.CDW14 = 0o755
		}
		proto.SetArgs(&cmd, root, 0)
		vc := target.VendorCommand{Cmd: &cmd}
		if op.Direction() == nvmeof.HostToController {
			vc.Data = []byte(name)
		} else {
			vc.Payload, vc.Data = []byte(name), make([]byte, proto.AttrSize)
		}
		require.True(t, s.PrepareVendor(&cmd, len(vc.Data), len(vc.Payload)).Success())
		require.True(t, s.ExecuteVendor(&vc).Success())
		return vc.DW0, vc.Data[:vc.N]
	}
	errno, first := run(proto.OpMkdir, 7<<32|1, "d")
	require.Zero(t, errno)
	errno, again := run(proto.OpMkdir, 7<<32|1, "d")
	require.Zero(t, errno, "the same request again: the first outcome")
	require.Equal(t, first, again)
	errno, _ = run(proto.OpMkdir, 7<<32|2, "d")
	require.Equal(t, uint32(syscall.EEXIST), errno, "a new request runs")
	errno, _ = run(proto.OpRmdir, 7<<32|3, "d")
	require.Zero(t, errno)
	errno, _ = run(proto.OpRmdir, 7<<32|3, "d")
	require.Zero(t, errno, "a removal sent again succeeds as the first did")
	errno, _ = run(proto.OpRmdir, 7<<32|4, "d")
	require.Equal(t, uint32(syscall.ENOENT), errno)
	// Each operation that ran is counted once, a reply sent again not.
	ops := map[string]OpStats{}
	for _, o := range s.OpStats() {
		ops[o.Op] = o
	}
	require.Equal(t, OpStats{Op: "mkdir", Ops: 2, Errors: 1}, ops["mkdir"])
	require.Equal(t, OpStats{Op: "rmdir", Ops: 2, Errors: 1}, ops["rmdir"])
	require.Equal(t, OpStats{Op: "write"}, ops["write"])
	// Reserved for idempotent operations.
	cmd := nvmeof.Command{Opcode: proto.OpGetAttr, NSID: 1, CDW10: 1, CDW2: 5}
	require.Equal(t, nvmeof.StatusInvalidField, s.PrepareVendor(&cmd, proto.AttrSize, 0))
}

func TestInlineVendorOnlyShortReads(t *testing.T) {
	s := newServer(t, Options{})
	read := &nvmeof.Command{Opcode: proto.OpRead}
	require.True(t, s.InlineVendor(read, 4<<10))
	require.True(t, s.InlineVendor(read, inlineReadMax))
	require.False(t, s.InlineVendor(read, inlineReadMax+1))
	require.False(t, s.InlineVendor(read, 1<<20))
	require.False(t, s.InlineVendor(&nvmeof.Command{Opcode: proto.OpWrite}, 4<<10))
	require.False(t, s.InlineVendor(&nvmeof.Command{Opcode: proto.OpCreate}, 4<<10))
}

// TestImportLegacy: a namespace of the first format (its own bbolt file,
// the same buckets) is imported into a store that has none for the FSID,
// renamed aside, and read from the store's records from then on.
func TestImportLegacy(t *testing.T) {
	// The first format's file: the buckets of a namespace, written by
	// hand from a server's working database.
	src := newServer(t, testOptions())
	a, err := src.mknod(rootCred, root, []byte("old"), sIFREG|0o640, 0, 0, 0)
	require.NoError(t, err)
	_, err = src.write(rootCred, a.Ino, 0, []byte("from the first format"), false)
	require.NoError(t, err)
	_, err = src.mkdir(rootCred, root, []byte("dir"), 0o700, 0, 0)
	require.NoError(t, err)
	legacy := filepath.Join(t.TempDir(), "fs-files.db")
	old, err := bolt.Open(legacy, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, src.db.View(func(stx *memTx) error {
		return old.Update(func(tx *bolt.Tx) error {
			for _, name := range allBuckets {
				b, err := tx.CreateBucket(name)
				if err != nil {
					return err
				}
				if err := stx.Bucket(name).ForEach(func(k, v []byte) error { return b.Put(k, v) }); err != nil {
					return err
				}
			}
			return nil
		})
	}))
	require.NoError(t, old.Close())

	d := newDevices(t)
	opt := testOptions()
	opt.Import = legacy
	st, s := d.open(opt)
	check := func(s *Server) {
		t.Helper()
		a, err := s.lookup(rootCred, root, []byte("old"))
		require.NoError(t, err)
		require.Equal(t, uint32(sIFREG|0o640), a.Mode)
		buf := make([]byte, 64)
		n, err := s.read(rootCred, a.Ino, 0, buf)
		require.NoError(t, err)
		require.Equal(t, "from the first format", string(buf[:n]))
		_, err = s.lookup(rootCred, root, []byte("dir"))
		require.NoError(t, err)
	}
	check(s)
	_, err = os.Stat(legacy)
	require.ErrorIs(t, err, os.ErrNotExist, "the imported file is renamed")
	_, err = os.Stat(legacy + ".imported")
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, st.Close())

	st, s = d.open(testOptions()) // no Import: the records have it
	defer st.Close()
	defer s.Close()
	check(s)
}

// TestReclaim: after a restart a client reopens its handles by number
// (OPEN with the old handle): the grants come back, a file unlinked
// while open stays for the reclaim grace and lives on while reclaimed,
// and one nobody reclaims is deleted when the grace ends. A handle of
// this run cannot be claimed.
func TestReclaim(t *testing.T) {
	d := newDevices(t)
	opt := testOptions()
	opt.ReclaimGrace = time.Hour // ended by hand below
	st, s := d.open(opt)
	data := bytes.Repeat([]byte("y"), 20000)
	mk := func(name string, mode uint32) (proto.Attr, uint64) {
		f, h, err := s.create(rootCred, root, []byte(name), mode, 0, 0, syscall.O_CREAT|syscall.O_RDWR)
		require.NoError(t, err)
		_, err = s.write(rootCred, f.Ino, 0, data, false)
		require.NoError(t, err)
		return f, h
	}
	kept, hk := mk("kept", 0o644)
	lost, _ := mk("lost", 0o644)
	// alice's handle on a file she may write only through it (0444).
	pub, err := s.mkdir(rootCred, root, []byte("pub"), 0o777, 0, 0)
	require.NoError(t, err)
	ro, ha, err := s.create(alice, pub.Ino, []byte("ro"), 0o444, 1000, 1000, syscall.O_CREAT|syscall.O_WRONLY)
	require.NoError(t, err)
	require.NoError(t, s.unlink(rootCred, root, []byte("kept"), false))
	require.NoError(t, s.unlink(rootCred, root, []byte("lost"), false))
	require.NoError(t, st.Sync())
	require.NoError(t, s.Close())
	require.NoError(t, st.Close())

	st, s = d.open(opt)
	defer st.Close()
	defer s.Close()
	// Before the reclaim: the grant is gone; the orphans are there.
	_, err = s.write(alice, ro.Ino, 0, []byte("a"), false)
	requireErrno(t, syscall.EACCES, err)
	_, err = s.getAttr(lost.Ino)
	require.NoError(t, err, "a file unlinked while open stays for the grace")

	h, _, err := s.openIno(alice, ro.Ino, syscall.O_WRONLY, true, ha)
	require.NoError(t, err)
	require.Equal(t, ha, h, "the reclaim registers the old number")
	_, err = s.write(alice, ro.Ino, 0, []byte("a"), false)
	require.NoError(t, err, "the reclaimed handle grants its write again")
	_, _, err = s.openIno(alice, ro.Ino, syscall.O_WRONLY, true, ha)
	require.NoError(t, err, "a reclaim sent twice is the same open")
	_, _, err = s.openIno(rootCred, ro.Ino, syscall.O_RDONLY, true, ha)
	requireErrno(t, syscall.EBADF, err, "another open may not take the number")
	fresh, _, err := s.openIno(rootCred, ro.Ino, syscall.O_RDONLY, true, 0)
	require.NoError(t, err)
	require.NotEqual(t, ha>>32, fresh>>32, "this run's handles are of another epoch")
	require.NoError(t, s.release(ro.Ino, fresh))
	_, _, err = s.openIno(rootCred, ro.Ino, syscall.O_RDONLY, true, fresh)
	requireErrno(t, syscall.EBADF, err, "a closed handle of this run is not reclaimed")
	// A reclaim of a file gone is refused as an open is.
	_, _, err = s.openIno(alice, 1<<40, syscall.O_RDONLY, true, ha+1)
	requireErrno(t, syscall.ENOENT, err)

	_, _, err = s.openIno(rootCred, kept.Ino, syscall.O_RDWR, true, hk)
	require.NoError(t, err)
	s.endGrace()
	_, err = s.getAttr(lost.Ino)
	requireErrno(t, syscall.ENOENT, err, "nobody reclaimed it: deleted when the grace ends")
	got := make([]byte, len(data))
	n, err := s.read(rootCred, kept.Ino, 0, got)
	require.NoError(t, err, "the reclaimed orphan lives on")
	require.Equal(t, data, got[:n])
	require.NoError(t, s.release(kept.Ino, hk))
	_, err = s.getAttr(kept.Ino)
	requireErrno(t, syscall.ENOENT, err, "and goes at its last release")
	require.NoError(t, s.release(ro.Ino, ha))
	checkInvariants(t, s)
}
