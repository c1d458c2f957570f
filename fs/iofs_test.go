package fs_test

import (
	"bytes"
	"errors"
	"io"
	iofs "io/fs"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	capfs "github.com/capsule-storage/capsule/fs"
	capfstest "github.com/capsule-storage/capsule/fs/internal/fstest"
	"github.com/capsule-storage/capsule/fs/server"
)

func TestFSTestSuite(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *capfstest.Target, c *capfs.Client) {
		f := c.FS()
		r := rand.New(rand.NewPCG(3, 4))
		require.NoError(t, f.MkdirAll("a/b/c", 0o755))
		require.NoError(t, f.Mkdir("empty", 0o700))
		large := 20_003 // fstest reads it byte by byte with ReadAt: one round trip each
		if raceEnabled {
			large = 2_003
		}
		files := map[string][]byte{
			"hello.txt":     []byte("hello, world\n"),
			"a/small":       randBytes(r, 100),
			"a/b/medium":    randBytes(r, 5_000),
			"a/b/c/large":   randBytes(r, large),
			"a/b/c/empty":   nil,
			"name with spc": []byte("x"),
		}
		for name, data := range files {
			fl, err := f.Create(name)
			require.NoError(t, err)
			n, err := fl.Write(data)
			require.NoError(t, err)
			require.Equal(t, len(data), n)
			require.NoError(t, fl.Close())
		}
		require.NoError(t, f.Symlink("b/medium", "a/link"))
		require.NoError(t, fstest.TestFS(f, "hello.txt", "a/small", "a/b/medium", "a/b/c/large", "a/b/c/empty", "empty", "a/link"))
		for name, data := range files {
			got, err := f.ReadFile(name)
			require.NoError(t, err)
			require.True(t, bytes.Equal(data, got), name)
		}
		got, err := f.ReadFile("a/link")
		require.NoError(t, err)
		require.Equal(t, files["a/b/medium"], got)
	})
}

func TestFSWriting(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *capfstest.Target, c *capfs.Client) {
		f := c.FS()
		fl, err := f.OpenFile("f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		require.NoError(t, err)
		_, err = f.OpenFile("f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		require.ErrorIs(t, err, iofs.ErrExist)
		_, err = fl.WriteAt([]byte("0123456789"), 0)
		require.NoError(t, err)
		off, err := fl.Seek(-3, io.SeekEnd)
		require.NoError(t, err)
		require.Equal(t, int64(7), off)
		b := make([]byte, 5)
		n, err := fl.Read(b)
		require.NoError(t, err)
		require.Equal(t, "789", string(b[:n]))
		_, err = fl.Read(b)
		require.Equal(t, io.EOF, err)
		n, err = fl.ReadAt(b, 8)
		require.Equal(t, io.EOF, err)
		require.Equal(t, 2, n)
		require.NoError(t, fl.Truncate(4))
		require.NoError(t, fl.Sync())
		st, err := fl.Stat()
		require.NoError(t, err)
		require.Equal(t, int64(4), st.Size())
		require.Equal(t, iofs.FileMode(0o600), st.Mode())
		require.NoError(t, fl.Close())
		require.ErrorIs(t, fl.Close(), iofs.ErrClosed)

		// O_APPEND from two files.
		a1, err := f.OpenFile("log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		require.NoError(t, err)
		a2, err := f.OpenFile("log", os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = a1.Write([]byte("one "))
		require.NoError(t, err)
		_, err = a2.Write([]byte("two "))
		require.NoError(t, err)
		_, err = a1.Write([]byte("three"))
		require.NoError(t, err)
		require.NoError(t, a1.Close())
		require.NoError(t, a2.Close())
		data, err := f.ReadFile("log")
		require.NoError(t, err)
		require.Equal(t, "one two three", string(data))
		ro, err := f.OpenFile("log", os.O_RDONLY, 0)
		require.NoError(t, err)
		_, err = ro.Write([]byte("x"))
		require.ErrorIs(t, err, syscall.EBADF)
		require.NoError(t, ro.Close())

		// Rename over an existing file, links, truncate by name.
		require.NoError(t, f.Rename("log", "f"))
		data, err = f.ReadFile("f")
		require.NoError(t, err)
		require.Equal(t, "one two three", string(data))
		_, err = f.Stat("log")
		require.ErrorIs(t, err, iofs.ErrNotExist)
		require.NoError(t, f.Link("f", "g"))
		require.NoError(t, f.Truncate("g", 3))
		data, err = f.ReadFile("f")
		require.NoError(t, err)
		require.Equal(t, "one", string(data))
		require.NoError(t, f.Symlink("f", "s"))
		tgt, err := f.ReadLink("s")
		require.NoError(t, err)
		require.Equal(t, "f", tgt)
		lst, err := f.Lstat("s")
		require.NoError(t, err)
		require.Equal(t, iofs.ModeSymlink, lst.Mode().Type())

		// A self-referencing link loops.
		require.NoError(t, f.Symlink("loop", "loop"))
		_, err = f.Stat("loop")
		require.ErrorIs(t, err, syscall.ELOOP)

		// Unlink of an open file: readable until closed.
		op, err := f.Open("f")
		require.NoError(t, err)
		require.NoError(t, f.Remove("f"))
		require.NoError(t, f.Remove("g"))
		rb := make([]byte, 10)
		n, err = op.(io.ReaderAt).ReadAt(rb, 0)
		require.Equal(t, io.EOF, err)
		require.Equal(t, "one", string(rb[:n]))
		require.NoError(t, op.Close())

		// RemoveAll.
		require.NoError(t, f.MkdirAll("x/y/z", 0o755))
		w, err := f.Create("x/y/z/file")
		require.NoError(t, err)
		require.NoError(t, w.Close())
		require.ErrorIs(t, f.Remove("x"), syscall.ENOTEMPTY)
		require.NoError(t, f.RemoveAll("x"))
		require.NoError(t, f.RemoveAll("x"))
		_, err = f.Stat("x")
		require.True(t, errors.Is(err, iofs.ErrNotExist))

		_, err = f.Open("../escape")
		require.ErrorIs(t, err, iofs.ErrInvalid)
	})
}
