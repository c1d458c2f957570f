package fusefs

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/internal/prereq"
)

var writeback = Options{AttrTimeout: time.Hour, EntryTimeout: time.Hour, WritebackCache: true}

// wbFile mounts an in-memory file service with the writeback cache,
// writes data to the file name through the mount, and returns the mount,
// the client and the file's attributes as the target has them.
func wbFile(t *testing.T, name, data string) (string, *memClient, Attr) {
	t.Helper()
	mnt, m := mountMem(t, writeback)
	return mnt, m, wbFileIn(t, mnt, m, name, data)
}

// wbFileIn writes data to the file name through the mount mnt of m and
// returns the target's attributes of it.
func wbFileIn(t *testing.T, mnt string, m *memClient, name, data string) Attr {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(mnt, name), []byte(data), 0o644))
	a, err := m.Lookup(context.Background(), RootIno, name)
	require.NoError(t, err)
	return a
}

// rewrite writes data over the file ino from its start as another
// client would (truncating it first when trunc), behind the mount.
func rewrite(t *testing.T, m *memClient, ino Ino, data string, trunc bool) {
	t.Helper()
	ctx := context.Background()
	h, err := m.Open(ctx, ino, syscall.O_RDWR)
	require.NoError(t, err)
	if trunc {
		_, err = m.SetAttr(ctx, ino, SetAttr{Size: new(uint64(0))})
		require.NoError(t, err)
	}
	_, err = m.Write(ctx, ino, h, []byte(data), 0)
	require.NoError(t, err)
	require.NoError(t, m.Release(ctx, ino, h))
}

// readString reads the file at path through the mount.
func readString(t *testing.T, path string) string {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(got)
}

// TestWritebackCoalesces: with the kernel's writeback cache, small
// writes reach the target in a few large WRITEs, by close at the latest,
// and the mount reads its own writes back before that.
func TestWritebackCoalesces(t *testing.T) {
	mnt, m := mountMem(t, writeback)
	f, err := os.Create(filepath.Join(mnt, "f"))
	require.NoError(t, err)
	want := make([]byte, 0, 1<<20)
	piece := make([]byte, 8<<10)
	writes := m.count("Write")
	for i := range 128 {
		for j := range piece {
			piece[j] = byte(i + j)
		}
		_, err := f.Write(piece)
		require.NoError(t, err)
		want = append(want, piece...)
	}
	st, err := f.Stat()
	require.NoError(t, err)
	assert.Equal(t, int64(len(want)), st.Size(), "the kernel's size counts the writes it holds")
	got := make([]byte, len(want))
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the mount reads its own writes")
	require.NoError(t, f.Close())
	sent := m.count("Write") - writes
	assert.Less(t, sent, 32, "128 writes of 8 KiB went in %d WRITEs", sent)

	// The target has everything after the close.
	ctx := context.Background()
	a, err := m.Lookup(ctx, RootIno, "f")
	require.NoError(t, err)
	assert.Equal(t, uint64(len(want)), a.Size)
	h, err := m.Open(ctx, a.Ino, syscall.O_RDONLY)
	require.NoError(t, err)
	n, err := m.Read(ctx, a.Ino, h, got, 0)
	require.NoError(t, err)
	assert.Equal(t, len(want), n)
	assert.Equal(t, want, got)
	require.NoError(t, m.Release(ctx, a.Ino, h))
}

// TestWritebackForget: the mount's incarnations and write counts are
// kept only for inodes the kernel knows. Files written through the mount
// leave no entries once they are unlinked and the kernel has forgotten
// their inodes; a file still cached keeps its write count, and one whose
// reopen retired its node (another client changed it) its incarnation.
func TestWritebackForget(t *testing.T) {
	prereq.FUSE(t)
	m := newMemClient()
	mnt := t.TempDir()
	server, fsys, err := mount(context.Background(), m, mnt, writeback)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, server.Unmount()) })
	watchMount(t, mnt)
	ctx := context.Background()
	// entries reports which of inos the mount still has entries for.
	entries := func(inos []Ino) (nodes, inc, written []Ino) {
		fsys.incMu.Lock()
		defer fsys.incMu.Unlock()
		for _, ino := range inos {
			if _, ok := fsys.nodes[ino]; ok {
				nodes = append(nodes, ino)
			}
			if _, ok := fsys.inc[ino]; ok {
				inc = append(inc, ino)
			}
			if _, ok := fsys.written[ino]; ok {
				written = append(written, ino)
			}
		}
		return nodes, inc, written
	}

	var gone []Ino
	for i := range 50 {
		name := fmt.Sprint(i)
		require.NoError(t, os.WriteFile(filepath.Join(mnt, name), []byte("data"), 0o644))
		a, err := m.Lookup(ctx, RootIno, name)
		require.NoError(t, err)
		gone = append(gone, a.Ino)
	}
	nodes, _, written := entries(gone)
	assert.Len(t, nodes, len(gone), "a node per file")
	assert.Len(t, written, len(gone), "every file was written here")

	kept := wbFileIn(t, mnt, m, "kept", "data")
	retired := wbFileIn(t, mnt, m, "retired", "data")
	rewrite(t, m, retired.Ino, "other client", true)
	assert.Equal(t, "other client", readString(t, filepath.Join(mnt, "retired")), "the reopen found the change")
	f, err := os.Open(filepath.Join(mnt, "retired"))
	require.NoError(t, err)
	defer f.Close()

	for i := range gone {
		require.NoError(t, os.Remove(filepath.Join(mnt, fmt.Sprint(i))))
	}
	var inc []Ino
	deadline := time.Now().Add(10 * time.Second)
	for {
		nodes, inc, written = entries(gone)
		if len(nodes)+len(inc)+len(written) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	assert.Empty(t, nodes, "nodes of unlinked files")
	assert.Empty(t, inc, "incarnations of unlinked files")
	assert.Empty(t, written, "write counts of unlinked files")
	nodes, _, written = entries([]Ino{kept.Ino})
	assert.Equal(t, []Ino{kept.Ino}, nodes, "the cached file keeps its node")
	assert.Equal(t, []Ino{kept.Ino}, written, "and its write count")
	_, inc, _ = entries([]Ino{retired.Ino})
	assert.Equal(t, []Ino{retired.Ino}, inc, "the file open on its new incarnation keeps it")
}

// TestWritebackOtherClient: the kernel keeps a cached file's size
// itself with the writeback cache, so a change by another client must
// reach the next open through a new inode: a file grown, shrunk, and
// changed while this mount holds it open (the open file keeps the old
// inode, the next open gets the new one); st_ino stays the target's
// throughout.
func TestWritebackOtherClient(t *testing.T) {
	mnt, m, a := wbFile(t, "f", "one")
	path := filepath.Join(mnt, "f")
	other := func(data string) { rewrite(t, m, a.Ino, data, true) }
	read := func() string { return readString(t, path) }
	require.Equal(t, "one", read())

	other("two, and longer")
	assert.Equal(t, "two, and longer", read(), "grown by another client")
	other("3")
	assert.Equal(t, "3", read(), "shrunk by another client")

	held, err := os.Open(path)
	require.NoError(t, err)
	other("four, held")
	buf := make([]byte, 64)
	n, err := held.ReadAt(buf, 0)
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, "3", string(buf[:n]), "a file open here keeps the inode it opened")
	assert.Equal(t, "four, held", read(), "the next open sees the change, with the old file still open")
	n, err = held.ReadAt(buf, 0)
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, "3", string(buf[:n]), "which still reads what it read")
	require.NoError(t, held.Close())
	assert.Equal(t, "four, held", read())

	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	assert.Equal(t, uint64(a.Ino), st.Ino)
	assert.Equal(t, int64(len("four, held")), st.Size)

	// This mount's own writes never make it look again.
	require.NoError(t, os.WriteFile(path, []byte("five, written here"), 0o644))
	opens := m.count("Open")
	assert.Equal(t, "five, written here", read())
	assert.Equal(t, opens+1, m.count("Open"), "one open, no retry")
}

// TestWritebackTimes: with the writeback cache the kernel sends mtime as
// a value even for "now"; the mount tells the two apart by the ctime
// beside it, so that a truncate or touch needs only write access and an
// explicit time stays an explicit time.
func TestWritebackTimes(t *testing.T) {
	mnt, m, a := wbFile(t, "f", "x")
	path := filepath.Join(mnt, "f")
	ctx := context.Background()

	explicit := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	require.NoError(t, os.Chtimes(path, explicit, explicit))
	b, err := m.GetAttr(ctx, a.Ino)
	require.NoError(t, err)
	assert.True(t, b.Mtime.Equal(explicit), "explicit mtime %v", b.Mtime)

	before := time.Now().Add(-time.Second)
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, path, nil, 0)) // touch: now
	b, err = m.GetAttr(ctx, a.Ino)
	require.NoError(t, err)
	assert.True(t, b.Mtime.After(before), "touch sets now: %v", b.Mtime)
	assert.True(t, m.lastSetAttr().MtimeNow, "sent as now")
}

// TestWritebackHardLinks: a file with two names, changed by another
// client between opens through each: every open sees the change, also
// through a name whose cached entry still leads to a node retired since
// (the kernel retries an open only once, so that retry must get a node
// never opened).
func TestWritebackHardLinks(t *testing.T) {
	mnt, m, at := wbFile(t, "a", "v0")
	a, b := filepath.Join(mnt, "a"), filepath.Join(mnt, "b")
	require.NoError(t, os.Link(a, b))
	other := func(data string) { rewrite(t, m, at.Ino, data, false) }
	read := func(p string) string { return readString(t, p) }
	require.Equal(t, "v0", read(a))
	require.Equal(t, "v0", read(b))
	other("v1, longer")
	assert.Equal(t, "v1, longer", read(a))
	other("v2, longer still")
	assert.Equal(t, "v2, longer still", read(b), "through the other name")
	assert.Equal(t, "v2, longer still", read(a))
}

// TestWritebackLateRelease: the kernel sends a close's RELEASE later,
// asynchronously, and a SETATTR may come before it (here a chmod; often
// the write-back of the times the kernel keeps). Another client's change
// after the close must still reach the next open: the SETATTR leaves
// the kernel agreeing with the target, not with a file open here.
func TestWritebackLateRelease(t *testing.T) {
	mnt, m := mountMem(t, writeback)
	p := filepath.Join(mnt, "f")
	let := m.holdReleases(t)
	require.NoError(t, os.WriteFile(p, []byte("v0"), 0o644))
	a, err := m.Lookup(context.Background(), RootIno, "f")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(p, 0o640))
	ctx := context.Background()
	h, err := m.Open(ctx, a.Ino, syscall.O_RDWR) // the other client
	require.NoError(t, err)
	_, err = m.Write(ctx, a.Ino, h, []byte("v1, longer"), 0)
	require.NoError(t, err)
	assert.Equal(t, "v1, longer", readString(t, p))
	let()
	require.NoError(t, m.Release(ctx, a.Ino, h))
}

// TestWritebackSetattrAfterOtherClient: a SETATTR whose reply shows
// another client's change of the data (here a chmod after a rewrite)
// does not make that change the kernel's: the next open still sees it.
func TestWritebackSetattrAfterOtherClient(t *testing.T) {
	mnt, m, a := wbFile(t, "f", "v0")
	p := filepath.Join(mnt, "f")
	require.Equal(t, "v0", readString(t, p))
	rewrite(t, m, a.Ino, "v1, longer", false)
	require.NoError(t, os.Chmod(p, 0o640))
	assert.Equal(t, "v1, longer", readString(t, p))
}

// TestWritebackRemovedFile: the kernel writes back the times it keeps
// of a file it wrote also after the file is gone; a syncfs must not fail
// on that.
func TestWritebackRemovedFile(t *testing.T) {
	mnt, _ := mountMem(t, writeback)
	p := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(p, make([]byte, 100<<10), 0o644))
	require.NoError(t, os.Remove(p))
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Syncfs(fd))
}

// TestWritebackUnlink: the kernel writes back the ctime an unlink gives
// the inode; for a file whose last name this mount removed the mount
// answers that itself, so an unlink costs the target one request, as
// without the writeback cache. Another name keeps the file, and its
// times still go to the target.
func TestWritebackUnlink(t *testing.T) {
	mnt, m := mountMem(t, writeback)
	p := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	setattrs := m.count("SetAttr")
	require.NoError(t, os.Remove(p))
	assert.Equal(t, setattrs, m.count("SetAttr"), "no SETATTR for a removed file")

	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	require.NoError(t, os.Link(p, filepath.Join(mnt, "g")))
	require.NoError(t, os.Remove(p))
	explicit := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(mnt, "g"), explicit, explicit))
	a, err := m.Lookup(context.Background(), RootIno, "g")
	require.NoError(t, err)
	assert.True(t, a.Mtime.Equal(explicit), "the file with a name left keeps its times: %v", a.Mtime)
}

// TestWritebackModel: with the writeback cache, random writes through
// two open files, O_DIRECT writes and reads, hole punches, truncates,
// copy_file_range from another file and stats, checked against the same
// operations on a local file; at the end the target holds the model's
// bytes. (No mmap here: a page fault on a mount this process serves can
// wait for a goroutine that a stop-the-world has stopped; the
// integration tests map files of a mount served by bin/mount.)
func TestWritebackModel(t *testing.T) {
	mnt, m := mountMem(t, writeback)
	rng := rand.New(rand.NewPCG(3, 4))
	model, err := os.Create(filepath.Join(t.TempDir(), "model"))
	require.NoError(t, err)
	defer model.Close()
	const span = 2 << 20
	fill := func(n int, seed int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(seed + j*3 + 1)
		}
		return b
	}
	src := fill(span, 99)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "src"), src, 0o644))
	sf, err := os.Open(filepath.Join(mnt, "src"))
	require.NoError(t, err)
	defer sf.Close()
	path := filepath.Join(mnt, "f")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	g, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	d, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
	require.NoError(t, err)
	size := func() int64 {
		st, err := model.Stat()
		require.NoError(t, err)
		return st.Size()
	}
	for i := range 500 {
		w := f
		if rng.IntN(4) == 0 {
			w = g
		}
		off := rng.Int64N(span)
		switch op := rng.IntN(20); {
		case op < 8: // a buffered write
			b := fill(1+rng.IntN(40<<10), i)
			_, err := w.WriteAt(b, off)
			require.NoError(t, err)
			_, err = model.WriteAt(b, off)
			require.NoError(t, err)
		case op < 10: // an O_DIRECT write of whole blocks
			off &^= 4095
			b := alignedCopy(fill(4096*(1+rng.IntN(8)), i))
			_, err := d.WriteAt(b, off)
			require.NoError(t, err)
			_, err = model.WriteAt(b, off)
			require.NoError(t, err)
		case op < 13: // a hole punched
			length := 1 + rng.Int64N(64<<10)
			require.NoError(t, unix.Fallocate(int(w.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length))
			if end := min(off+length, size()); off < end {
				_, err := model.WriteAt(make([]byte, end-off), off)
				require.NoError(t, err)
			}
		case op < 14: // a copy from the other file
			length := 1 + rng.IntN(64<<10)
			offIn, offOut := rng.Int64N(span-int64(length)), off
			n, err := unix.CopyFileRange(int(sf.Fd()), &offIn, int(w.Fd()), &offOut, length, 0)
			require.NoError(t, err)
			require.Equal(t, length, n)
			_, err = model.WriteAt(src[offIn-int64(n):offIn], off)
			require.NoError(t, err)
		case op < 15:
			n := rng.Int64N(span)
			require.NoError(t, w.Truncate(n))
			require.NoError(t, model.Truncate(n))
		case op < 17: // an O_DIRECT read
			off &^= 4095
			b := alignedBuf(64 << 10)
			n, _ := d.ReadAt(b, off)
			want := make([]byte, len(b))
			k, _ := model.ReadAt(want, off)
			require.Equal(t, want[:k], b[:n], "step %d: direct read at %d", i, off)
		default:
			b, want := make([]byte, 48<<10), make([]byte, 48<<10)
			n, _ := w.ReadAt(b, off)
			k, _ := model.ReadAt(want, off)
			require.Equal(t, k, n, "step %d: read at %d", i, off)
			require.Equal(t, want[:k], b[:n], "step %d: read at %d", i, off)
		}
		st, err := w.Stat()
		require.NoError(t, err)
		require.Equal(t, size(), st.Size(), "step %d: size", i)
	}
	require.NoError(t, d.Close())
	require.NoError(t, g.Close())
	require.NoError(t, f.Close())
	want, err := os.ReadFile(model.Name())
	require.NoError(t, err)
	assert.Equal(t, want, targetBytes(t, m, "f"))
}

// TestWritebackStatAfterEntryExpires: a stat through a name whose cached
// entry has expired sees another client's change in size, since the
// lookup leads the name to a new inode; while the entry is cached, the
// old size is what an attribute cache allows.
func TestWritebackStatAfterEntryExpires(t *testing.T) {
	o := writeback
	o.AttrTimeout, o.EntryTimeout = 50*time.Millisecond, 50*time.Millisecond
	mnt, m := mountMem(t, o)
	p := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(p, []byte("short"), 0o644))
	a, err := m.Lookup(context.Background(), RootIno, "f")
	require.NoError(t, err)
	rewrite(t, m, a.Ino, "a good deal longer", false)
	require.Eventually(t, func() bool {
		st, err := os.Stat(p)
		return err == nil && st.Size() == int64(len("a good deal longer"))
	}, 5*time.Second, 20*time.Millisecond)
}

// TestWritebackOwnRenameAndLink: this mount's own rename and link of a
// file it holds open with written, unflushed data do not part the open
// file from the next opens of the file in the same mount.
func TestWritebackOwnRenameAndLink(t *testing.T) {
	mnt, _ := mountMem(t, writeback)
	a, b, c := filepath.Join(mnt, "a"), filepath.Join(mnt, "b"), filepath.Join(mnt, "c")
	w, err := os.Create(a)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Write([]byte("written, not yet flushed"))
	require.NoError(t, err)
	require.NoError(t, os.Rename(a, b))
	require.NoError(t, os.Link(b, c))
	_, err = w.Write([]byte(" and more"))
	require.NoError(t, err)
	assert.Equal(t, "written, not yet flushed and more", readString(t, b))
	assert.Equal(t, "written, not yet flushed and more", readString(t, c))
}
