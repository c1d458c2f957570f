package fusefs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var behind = Options{AttrTimeout: time.Second, EntryTimeout: time.Second, WriteBehind: true}

// targetBytes reads the whole of the file name as the target holds it,
// without the mount.
func targetBytes(t *testing.T, m *memClient, name string) []byte {
	t.Helper()
	ctx := context.Background()
	a, err := m.Lookup(ctx, RootIno, name)
	require.NoError(t, err)
	h, err := m.Open(ctx, a.Ino, syscall.O_RDONLY)
	require.NoError(t, err)
	defer m.Release(ctx, a.Ino, h)
	b := make([]byte, a.Size)
	n, err := m.Read(ctx, a.Ino, h, b, 0)
	require.NoError(t, err)
	return b[:n]
}

// Small writes are answered from the mount and reach the target in
// WRITEs of up to wbMax bytes: at close, before a stat or a read that
// needs them, and wbDelay after the first of them.
func TestWriteBehind(t *testing.T) {
	mnt, m := mountMem(t, behind)
	name := filepath.Join(mnt, "f")
	want := bytes.Repeat(pattern8K(), 100)
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	writes := m.count("Write")
	for i := range 100 {
		_, err := f.Write(want[i*8192 : (i+1)*8192])
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, m.count("Write")-writes, 1, "100 writes of 8 KiB reach the target as one (or two, if the timer went off)")

	st, err := os.Stat(name)
	require.NoError(t, err)
	assert.Equal(t, int64(len(want)), st.Size())
	assert.Equal(t, want, targetBytes(t, m, "f"), "a stat sent the buffered writes first")

	// A read the page cache cannot answer (O_DIRECT) sees the writes.
	_, err = f.Write(want[:8192])
	require.NoError(t, err)
	r, err := os.OpenFile(name, os.O_RDONLY|syscall.O_DIRECT, 0)
	require.NoError(t, err)
	buf := alignedBuf(8192)
	n, err := r.ReadAt(buf, int64(len(want)))
	require.NoError(t, err)
	assert.Equal(t, want[:8192], buf[:n])
	require.NoError(t, r.Close())

	// Left alone, a write reaches the target within wbDelay.
	_, err = f.Write([]byte("tail"))
	require.NoError(t, err)
	assert.Eventually(t, func() bool {
		return bytes.HasSuffix(targetBytes(t, m, "f"), []byte("tail"))
	}, 20*wbDelay, wbDelay/4, "the timer sends a buffer nobody flushes")
	require.NoError(t, f.Close())
	assert.Len(t, targetBytes(t, m, "f"), len(want)+8192+4)
}

// Names looked up and listed while writes wait in the mount carry the
// size after them: the kernel takes an entry's size as the file's.
func TestWriteBehindEntries(t *testing.T) {
	mnt, m := mountMem(t, Options{WriteBehind: true}) // no caching: every stat is a LOOKUP
	name := filepath.Join(mnt, "f")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer f.Close()
	want := bytes.Repeat(pattern8K(), 6)
	for i := range 6 {
		_, err := f.Write(want[i*8192 : (i+1)*8192])
		require.NoError(t, err)
		if i == 3 {
			_, err = os.ReadDir(mnt) // READDIRPLUS
			require.NoError(t, err)
		}
		time.Sleep(5 * time.Millisecond) // a jiffy or more: the entry has expired
		st, err := os.Stat(name)         // LOOKUP
		require.NoError(t, err)
		require.Equal(t, int64((i+1)*8192), st.Size(), "after write %d", i)
	}
	got := make([]byte, len(want))
	n, err := f.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got[:n])
	assert.Equal(t, want, targetBytes(t, m, "f"))
}

// A buffered write that the target refuses fails the next write, fsync
// or close of the file.
func TestWriteBehindErrors(t *testing.T) {
	mnt, m := mountMem(t, behind)
	name := filepath.Join(mnt, "f")
	for _, when := range []string{"close", "fsync", "write"} {
		t.Run(when, func(t *testing.T) {
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			require.NoError(t, err)
			_, err = f.Write(pattern8K())
			require.NoError(t, err, "buffered")
			writes := m.count("Write")
			m.setFail(syscall.ENOSPC)
			switch when {
			case "close":
				assert.ErrorIs(t, f.Close(), syscall.ENOSPC)
				m.setFail(0)
				return
			case "fsync":
				assert.ErrorIs(t, f.Sync(), syscall.ENOSPC)
			case "write":
				// The timer sends the buffer, which fails; the next
				// write reports it. (Waiting for the target to see the
				// write, not a fixed time: under -race on a busy
				// machine 300 ms were once not enough.)
				require.Eventually(t, func() bool { return m.count("Write") > writes }, 10*time.Second, 5*time.Millisecond)
				time.Sleep(wbDelay) // for the refusal to reach the mount
				_, err = f.Write(pattern8K())
				assert.ErrorIs(t, err, syscall.ENOSPC)
			}
			m.setFail(0)
			require.NoError(t, f.Sync(), "reported once")
			require.NoError(t, f.Close())
		})
	}
}

// Files opened with O_SYNC, O_DSYNC or O_DIRECT, and mounts without
// WriteBehind, write through.
func TestWriteThrough(t *testing.T) {
	for _, c := range []struct {
		name  string
		o     Options
		flags int
	}{
		{"O_SYNC", behind, os.O_SYNC},
		{"O_DSYNC", behind, syscall.O_DSYNC},
		{"O_DIRECT", behind, syscall.O_DIRECT},
		{"default", cached, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			mnt, m := mountMem(t, c.o)
			f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_CREATE|os.O_WRONLY|c.flags, 0o644)
			require.NoError(t, err)
			defer f.Close()
			writes := m.count("Write")
			_, err = f.Write(alignedCopy(pattern8K()))
			require.NoError(t, err)
			assert.Equal(t, writes+1, m.count("Write"), "at the target when write returns")
		})
	}
}

// Random writes, some in runs, truncates and reads through the mount
// leave the file as the same operations leave a local file.
func TestWriteBehindModel(t *testing.T) {
	mnt, m := mountMem(t, behind)
	rng := rand.New(rand.NewPCG(1, 2))
	model, err := os.Create(filepath.Join(t.TempDir(), "model"))
	require.NoError(t, err)
	defer model.Close()
	f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	g, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_RDWR, 0) // a second open file of the inode
	require.NoError(t, err)
	const span = 3 << 20
	off := int64(0)
	for i := range 600 {
		w := f
		if rng.IntN(8) == 0 {
			w = g
		}
		switch op := rng.IntN(20); {
		case op < 15: // a write, usually continuing the last
			if rng.IntN(4) == 0 {
				off = rng.Int64N(span)
			}
			b := make([]byte, 1+rng.IntN(64<<10))
			for j := range b {
				b[j] = byte(i + j)
			}
			_, err := w.WriteAt(b, off)
			require.NoError(t, err)
			_, err = model.WriteAt(b, off)
			require.NoError(t, err)
			off += int64(len(b))
		case op < 17:
			size := rng.Int64N(span)
			require.NoError(t, w.Truncate(size))
			require.NoError(t, model.Truncate(size))
		default:
			at := rng.Int64N(span)
			b, want := make([]byte, 32<<10), make([]byte, 32<<10)
			n, _ := w.ReadAt(b, at)
			k, _ := model.ReadAt(want, at)
			require.Equal(t, k, n, "read at %d", at)
			require.Equal(t, want[:k], b[:n], "read at %d", at)
		}
	}
	require.NoError(t, f.Close())
	require.NoError(t, g.Close())
	want, err := os.ReadFile(model.Name())
	require.NoError(t, err)
	assert.Equal(t, want, targetBytes(t, m, "f"))
}

func pattern8K() []byte {
	b := make([]byte, 8192)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// alignedBuf returns n bytes aligned for O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	a := 4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)
	return b[a : a+n]
}

func alignedCopy(p []byte) []byte {
	b := alignedBuf(len(p))
	copy(b, p)
	return b
}
