package vfs

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestOSReadNowait: ReadAtvNowait reads what is in the page cache, and
// answers ErrWouldBlock for bytes that are not (dropped with
// POSIX_FADV_DONTNEED) and for a read past the end; a blocking read
// brings the bytes back, and then it reads them.
func TestOSReadNowait(t *testing.T) {
	dir := t.TempDir()
	f, err := NewOS(dir).OpenFile("f", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	defer f.Close()
	want := make([]byte, 256<<10)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	_, err = f.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	nw, ok := f.(NowaitReader)
	require.True(t, ok, "an OS file reads without waiting on Linux")

	got := make([]byte, len(want))
	n, err := nw.ReadAtvNowait([][]byte{got[:4096], got[4096:]}, 0)
	require.NoError(t, err, "just written: in the page cache")
	assert.Equal(t, len(want), n)
	assert.Equal(t, want, got)

	_, err = nw.ReadAtvNowait([][]byte{make([]byte, 8192)}, int64(len(want))-4096)
	assert.ErrorIs(t, err, ErrWouldBlock, "past the end: short, left to the blocking read")

	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	if st.Type == unix.TMPFS_MAGIC {
		t.Logf("%s is tmpfs, whose pages cannot be dropped: the uncached case is not tried", dir)
		return
	}
	g, err := os.Open(filepath.Join(dir, "f"))
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, unix.Fadvise(int(g.Fd()), 0, 0, unix.FADV_DONTNEED))
	clear(got)
	_, err = nw.ReadAtvNowait([][]byte{got}, 0)
	require.ErrorIs(t, err, ErrWouldBlock, "dropped from the page cache")
	n, err = f.ReadAtv([][]byte{got}, 0)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	clear(got)
	n, err = nw.ReadAtvNowait([][]byte{got}, 0)
	require.NoError(t, err, "read back into the page cache")
	assert.Equal(t, len(want), n)
	assert.Equal(t, want, got)
}
