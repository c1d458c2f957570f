package vfs_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// implementations is the conformance matrix: one test body, every FS.
func implementations(t *testing.T) map[string]func(t *testing.T) vfs.FS {
	return map[string]func(t *testing.T) vfs.FS{
		"os":     func(t *testing.T) vfs.FS { return vfs.NewOS(t.TempDir()) },
		"mem":    func(t *testing.T) vfs.FS { return vfs.NewMem(vfs.WithHostDir(t.TempDir())) },
		"inject": func(t *testing.T) vfs.FS { return vfs.NewInjectFS(vfs.NewMem()) },
	}
}

func TestConformance(t *testing.T) {
	for name, mk := range implementations(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("ReadWrite", func(t *testing.T) { testReadWrite(t, mk(t)) })
			t.Run("Namespace", func(t *testing.T) { testNamespace(t, mk(t)) })
			t.Run("Names", func(t *testing.T) { testNames(t, mk(t)) })
			t.Run("WriteFile", func(t *testing.T) { testWriteFile(t, mk(t)) })
		})
	}
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

func TestMemCrashKeepsOnlySynced(t *testing.T) {
	m := vfs.NewMem()
	// Synced file, synced entry: survives.
	f, err := m.OpenFile("kept", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("durable"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, m.SyncDir("."))
	// Written after the sync: lost.
	_, err = f.WriteAt([]byte("XX"), 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("tail"), 7)
	require.NoError(t, err)
	// Synced data but no directory sync: the file is lost.
	g, err := m.OpenFile("unlinked", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	_, err = g.WriteAt([]byte("x"), 0)
	require.NoError(t, err)
	require.NoError(t, g.Sync())
	// A rename without a directory sync is undone.
	require.NoError(t, m.Rename("kept", "renamed"))

	after := m.Crash()
	_, err = f.WriteAt([]byte("z"), 0)
	assert.ErrorIs(t, err, vfs.ErrCrashed, "the old FS is dead")
	_, err = m.Stat("kept")
	assert.ErrorIs(t, err, vfs.ErrCrashed)

	got, err := vfs.ReadFile(after, "kept")
	require.NoError(t, err)
	assert.Equal(t, "durable", string(got))
	_, err = after.Stat("unlinked")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = after.Stat("renamed")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestMemCrashTruncateAndRegrow(t *testing.T) {
	m := vfs.NewMem()
	f, err := m.OpenFile("f", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	require.NoError(t, m.SyncDir("."))
	_, err = f.WriteAt([]byte("abcdef"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Truncate(2))
	_, err = f.WriteAt([]byte("Z"), 4)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	got, err := vfs.ReadFile(m.Crash(), "f")
	require.NoError(t, err)
	assert.Equal(t, "ab\x00\x00Z", string(got))
}

func TestCrashClockStopsEveryFSAtOnce(t *testing.T) {
	clock := vfs.NewCrashClock()
	a := vfs.NewMem(vfs.WithCrashClock(clock))
	b := vfs.NewMem(vfs.WithCrashClock(clock))
	clock.CrashAfter(3)
	// WriteFile creates, writes, syncs (three operations), then renames.
	err := vfs.WriteFile(a, "x", []byte("1"))
	require.ErrorIs(t, err, vfs.ErrCrashed)
	assert.True(t, clock.Crashed())
	assert.EqualValues(t, 3, clock.Ops())
	_, err = b.Stat(".")
	assert.ErrorIs(t, err, vfs.ErrCrashed)
	// Three operations happened: create, write, sync. The rename did not.
	after := a.Crash()
	_, err = after.Stat("x")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestMemVanish(t *testing.T) {
	m := vfs.NewMem()
	f, err := m.OpenFile("f", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	m.Vanish()
	_, err = f.WriteAt([]byte("x"), 0)
	assert.ErrorIs(t, err, vfs.ErrVanished)
	_, err = m.List(".")
	assert.ErrorIs(t, err, vfs.ErrVanished)
	assert.NoError(t, f.Close())
}

func TestMemHostPath(t *testing.T) {
	_, err := vfs.NewMem().HostPath("db")
	assert.ErrorIs(t, err, vfs.ErrNotSupported)
	dir := t.TempDir()
	p, err := vfs.NewMem(vfs.WithHostDir(dir)).HostPath("db")
	require.NoError(t, err)
	assert.Equal(t, dir+"/db", p)
}

func TestInjectRules(t *testing.T) {
	in := vfs.NewInjectFS(vfs.NewMem())
	f, err := in.OpenFile("shards", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	remove := in.Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpWrite}, Path: "shard*", After: 2, Times: 1, Err: syscall.ENOSPC})
	for i := range 2 {
		_, err := f.WriteAt([]byte("ok"), int64(2*i))
		require.NoError(t, err)
	}
	_, err = f.WriteAt([]byte("no"), 4)
	assert.ErrorIs(t, err, syscall.ENOSPC)
	var pe *os.PathError
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, "write", pe.Op)
	_, err = f.WriteAt([]byte("ok"), 4)
	assert.NoError(t, err, "Times: 1 fires once")
	remove()

	in.Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpWrite}, Torn: true})
	n, err := f.WriteAt([]byte("abcd"), 0)
	assert.ErrorIs(t, err, vfs.ErrInjected)
	assert.Equal(t, 2, n, "a torn write lands half its bytes")
	n, err = f.WriteAtv([][]byte{[]byte("x"), []byte("yzw")}, 0)
	assert.ErrorIs(t, err, vfs.ErrInjected)
	assert.Equal(t, 2, n, "a torn vectored write lands half its bytes")
	in.Clear()
	buf := make([]byte, 4)
	require.NoError(t, vfs.ReadFull(f, buf, 0))
	assert.Equal(t, "xyok", string(buf))

	in.Inject(vfs.Rule{Path: "other"})
	_, err = in.Stat("shards")
	assert.NoError(t, err, "the pattern does not match")
	_, err = in.Stat("other")
	assert.ErrorIs(t, err, vfs.ErrInjected)
	assert.EqualValues(t, 2, in.Count(vfs.OpStat))
	assert.EqualValues(t, 1, in.Count(vfs.OpRead))
	in.ResetCounts()
	assert.Zero(t, in.Count(vfs.OpStat))
}

func TestOpNames(t *testing.T) {
	assert.Equal(t, "write", vfs.OpWrite.String())
	assert.True(t, vfs.OpSyncDir.Mutating())
	assert.False(t, vfs.OpRead.Mutating())
}

func TestVectoredIO(t *testing.T) {
	for name, mk := range implementations(t) {
		t.Run(name, func(t *testing.T) {
			fsys := mk(t)
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
		})
	}
}
