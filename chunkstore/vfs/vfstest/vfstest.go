// Package vfstest is the conformance suite of vfs.FS: the behaviour the
// chunk store relies on, run against every implementation (OSFS, MemFS,
// InjectFS in package vfs, and the remote device file system of
// internal/devsvc).
package vfstest

import (
	"io"
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// Conformance runs the suite as subtests, each on a new FS from mk.
func Conformance(t *testing.T, mk func(t *testing.T) vfs.FS) {
	t.Run("ReadWrite", func(t *testing.T) { testReadWrite(t, mk(t)) })
	t.Run("Namespace", func(t *testing.T) { testNamespace(t, mk(t)) })
	t.Run("Names", func(t *testing.T) { testNames(t, mk(t)) })
	t.Run("WriteFile", func(t *testing.T) { testWriteFile(t, mk(t)) })
	t.Run("Vectored", func(t *testing.T) { testVectored(t, mk(t)) })
}

func testReadWrite(t *testing.T, fsys vfs.FS) {
	f, err := fsys.OpenFile("a", os.O_RDWR|os.O_CREATE|os.O_EXCL)
	require.NoError(t, err)
	defer f.Close()

	n, err := f.WriteAt([]byte("world"), 6)
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	_, err = f.WriteAt([]byte("hello"), 0)
	require.NoError(t, err)

	buf := make([]byte, 11)
	n, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, 11, n)
	assert.Equal(t, "hello\x00world", string(buf))

	// A read past the end is short and says io.EOF (io.ReaderAt).
	n, err = f.ReadAt(buf, 8)
	assert.Equal(t, 3, n)
	assert.ErrorIs(t, err, io.EOF)
	assert.ErrorIs(t, vfs.ReadFull(f, buf, 8), io.ErrUnexpectedEOF)

	st, err := f.Stat()
	require.NoError(t, err)
	assert.EqualValues(t, 11, st.Size())
	require.NoError(t, f.Truncate(4))
	require.NoError(t, f.Sync())
	st, err = fsys.Stat("a")
	require.NoError(t, err)
	assert.EqualValues(t, 4, st.Size())
	assert.False(t, st.IsDir())

	_, err = fsys.OpenFile("a", os.O_RDWR|os.O_CREATE|os.O_EXCL)
	assert.ErrorIs(t, err, fs.ErrExist)
	_, err = fsys.OpenFile("missing", os.O_RDONLY)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func testNamespace(t *testing.T, fsys vfs.FS) {
	require.NoError(t, fsys.MkdirAll("d/e"))
	require.NoError(t, vfs.WriteFile(fsys, "d/x", []byte("1")))
	require.NoError(t, fsys.Rename("d/x", "d/y"))
	names, err := fsys.List("d")
	require.NoError(t, err)
	assert.Equal(t, []string{"e", "y"}, names)
	require.NoError(t, fsys.SyncDir("d"))
	require.NoError(t, fsys.SyncDir("."))
	st, err := fsys.Stat("d/e")
	require.NoError(t, err)
	assert.True(t, st.IsDir())
	require.NoError(t, fsys.Remove("d/y"))
	_, err = fsys.Stat("d/y")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Error(t, fsys.Remove("d"), "a directory that is not empty stays")
}

func testNames(t *testing.T, fsys vfs.FS) {
	for _, bad := range []string{"", "/etc/passwd", "../x", "a/../../x"} {
		_, err := fsys.OpenFile(bad, os.O_RDONLY)
		assert.ErrorIs(t, err, vfs.ErrInvalidName, "%q", bad)
	}
}

func testWriteFile(t *testing.T, fsys vfs.FS) {
	require.NoError(t, vfs.WriteFile(fsys, "rec", []byte("one")))
	require.NoError(t, vfs.WriteFile(fsys, "rec", []byte("two!")))
	got, err := vfs.ReadFile(fsys, "rec")
	require.NoError(t, err)
	assert.Equal(t, "two!", string(got))
	_, err = fsys.Stat("rec.tmp")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func testVectored(t *testing.T, fsys vfs.FS) {
	f, err := fsys.OpenFile("v", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	defer f.Close()
	n, err := f.WriteAtv([][]byte{[]byte("head"), nil, []byte("-"), []byte("payload")}, 3)
	require.NoError(t, err)
	assert.Equal(t, 12, n)
	a, b := make([]byte, 5), make([]byte, 10)
	n, err = f.ReadAtv([][]byte{a, b}, 0)
	require.NoError(t, err)
	assert.Equal(t, 15, n)
	assert.Equal(t, "\x00\x00\x00head-payload", string(a)+string(b))
	n, err = f.ReadAtv([][]byte{a, b}, 5)
	assert.Equal(t, 10, n)
	assert.ErrorIs(t, err, io.EOF)
	// Many buffers: more than one system call's worth.
	var many [][]byte
	for i := range 3000 {
		many = append(many, []byte{byte(i)})
	}
	n, err = f.WriteAtv(many, 0)
	require.NoError(t, err)
	assert.Equal(t, 3000, n)
	got := make([]byte, 3000)
	require.NoError(t, vfs.ReadFull(f, got, 0))
	for i := range got {
		require.Equal(t, byte(i), got[i])
	}
}
