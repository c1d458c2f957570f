package fusefs

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var writeback = Options{AttrTimeout: time.Hour, EntryTimeout: time.Hour, WritebackCache: true}

// wbFile mounts an in-memory file service with the writeback cache,
// writes data to the file name through the mount, and returns the mount,
// the client and the file's attributes as the target has them.
func wbFile(t *testing.T, name, data string) (string, *memClient, Attr) {
	t.Helper()
	mnt, m := mountMem(t, writeback)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, name), []byte(data), 0o644))
	a, err := m.Lookup(context.Background(), RootIno, name)
	require.NoError(t, err)
	return mnt, m, a
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
