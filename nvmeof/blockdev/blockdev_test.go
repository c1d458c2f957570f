package blockdev

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// deviceCase makes a fresh device of the given size for the conformance
// tests, which every implementation passes.
type deviceCase struct {
	name string
	make func(t testing.TB, size int64) Device
}

func deviceCases() []deviceCase {
	return []deviceCase{
		{"memory", func(t testing.TB, size int64) Device {
			m, err := NewMemory(size)
			require.NoError(t, err)
			return m
		}},
		{"file", func(t testing.TB, size int64) Device {
			f, err := OpenFile(filepath.Join(t.TempDir(), "dev.img"), size)
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			return f
		}},
		// plain hides every optional interface, so the helpers' fallbacks run.
		{"plain", func(t testing.TB, size int64) Device {
			m, err := NewMemory(size)
			require.NoError(t, err)
			return plain{m}
		}},
	}
}

// plain is a Device with none of the optional interfaces.
type plain struct{ Device }

func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32() | 1) // never zero, so a zero means "not written"
	}
	return b
}

func TestDeviceConformance(t *testing.T) {
	const size = 3*memChunkSize + 4096 + 512 // not a multiple of the chunk size
	for _, dc := range deviceCases() {
		t.Run(dc.name, func(t *testing.T) {
			t.Run("unwritten reads zeros", func(t *testing.T) {
				d := dc.make(t, size)
				assert.Equal(t, int64(size), d.Size())
				buf := bytes.Repeat([]byte{0xaa}, 3*memChunkSize)
				n, err := d.ReadAt(buf, 100)
				require.NoError(t, err)
				assert.Equal(t, len(buf), n)
				assert.Equal(t, make([]byte, len(buf)), buf)
			})
			t.Run("write then read across chunks", func(t *testing.T) {
				d := dc.make(t, size)
				p := pattern(1, memChunkSize+8192)
				off := int64(memChunkSize - 4096)
				n, err := d.WriteAt(p, off)
				require.NoError(t, err)
				require.Equal(t, len(p), n)
				got := make([]byte, len(p)+2)
				n, err = d.ReadAt(got, off-1)
				require.NoError(t, err)
				require.Equal(t, len(got), n)
				assert.Equal(t, byte(0), got[0])
				assert.Equal(t, p, got[1:len(p)+1])
				assert.Equal(t, byte(0), got[len(got)-1])
			})
			t.Run("read at and across the end", func(t *testing.T) {
				d := dc.make(t, size)
				tail := pattern(2, 100)
				_, err := d.WriteAt(tail, size-100)
				require.NoError(t, err)
				buf := make([]byte, 300)
				n, err := d.ReadAt(buf, size-100)
				assert.ErrorIs(t, err, io.EOF)
				assert.Equal(t, 100, n)
				assert.Equal(t, tail, buf[:100])
				n, err = d.ReadAt(buf, size)
				assert.ErrorIs(t, err, io.EOF)
				assert.Zero(t, n)
				_, err = d.ReadAt(buf, -1)
				assert.Error(t, err)
			})
			t.Run("write across the end writes nothing", func(t *testing.T) {
				d := dc.make(t, size)
				n, err := d.WriteAt(pattern(3, 200), size-100)
				assert.ErrorIs(t, err, ErrOutOfRange)
				assert.Zero(t, n)
				buf := make([]byte, 100)
				_, err = d.ReadAt(buf, size-100)
				require.NoError(t, err)
				assert.Equal(t, make([]byte, 100), buf)
				_, err = d.WriteAt([]byte{1}, -1)
				assert.ErrorIs(t, err, ErrOutOfRange)
			})
			t.Run("zero and deallocate", func(t *testing.T) {
				d := dc.make(t, size)
				p := pattern(4, size)
				_, err := d.WriteAt(p, 0)
				require.NoError(t, err)
				// A partial range inside chunk 0, and whole chunks 1 and 2 plus the start of 3.
				require.NoError(t, Zero(d, 512, 1024))
				require.NoError(t, Deallocate(d, memChunkSize, 2*memChunkSize+512))
				copy(p[512:1536], make([]byte, 1024))
				copy(p[memChunkSize:3*memChunkSize+512], make([]byte, 2*memChunkSize+512))
				got := make([]byte, size)
				_, err = d.ReadAt(got, 0)
				require.NoError(t, err)
				assert.True(t, bytes.Equal(p, got), "contents after zeroing differ")
				// The tail chunk is partial in size; zeroing all of it works too.
				require.NoError(t, Deallocate(d, 3*memChunkSize, size-3*memChunkSize))
				_, err = d.ReadAt(got[:size-3*memChunkSize], 3*memChunkSize)
				require.NoError(t, err)
				assert.Equal(t, make([]byte, size-3*memChunkSize), got[:size-3*memChunkSize])
				assert.ErrorIs(t, Zero(d, size-10, 11), ErrOutOfRange)
				assert.ErrorIs(t, Deallocate(d, -1, 1), ErrOutOfRange)
			})
			t.Run("fua write", func(t *testing.T) {
				d := dc.make(t, size)
				p := pattern(5, 4096)
				n, err := WriteFUA(d, p, 8192)
				require.NoError(t, err)
				assert.Equal(t, 4096, n)
				got := make([]byte, 4096)
				_, err = d.ReadAt(got, 8192)
				require.NoError(t, err)
				assert.Equal(t, p, got)
				_, err = WriteFUA(d, p, size-1)
				assert.ErrorIs(t, err, ErrOutOfRange)
				require.NoError(t, d.Sync())
			})
			t.Run("parallel writers and readers", func(t *testing.T) {
				d := dc.make(t, size)
				const workers, block = 8, 4096
				var wg sync.WaitGroup
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]byte, block)
						for i := w; i*block+block <= size; i += workers {
							p := pattern(uint64(i), block)
							_, err := d.WriteAt(p, int64(i*block))
							assert.NoError(t, err)
							_, err = d.ReadAt(buf, int64(i*block))
							assert.NoError(t, err)
							assert.Equal(t, p, buf)
						}
					}()
				}
				wg.Wait()
				buf := make([]byte, block)
				for i := 0; i*block+block <= size; i++ {
					_, err := d.ReadAt(buf, int64(i*block))
					require.NoError(t, err)
					require.Equal(t, pattern(uint64(i), block), buf, "block %d", i)
				}
			})
		})
	}
}

func TestMemorySparse(t *testing.T) {
	m, err := NewMemory(1 << 40) // 1 TiB: only the table of leaves is allocated
	require.NoError(t, err)
	assert.Zero(t, m.Allocated())
	_, err = m.WriteAt(make([]byte, 3*memChunkSize), 0)
	require.NoError(t, err)
	assert.Zero(t, m.Allocated(), "writing zeros to unallocated chunks allocates nothing")
	_, err = m.WriteAt([]byte{1}, 1<<39)
	require.NoError(t, err)
	assert.Equal(t, int64(memChunkSize), m.Allocated())
	_, err = m.WriteAt(pattern(1, 2*memChunkSize), 5*memChunkSize+10)
	require.NoError(t, err)
	assert.Equal(t, int64(4*memChunkSize), m.Allocated())
	require.NoError(t, m.Discard(5*memChunkSize, 3*memChunkSize))
	assert.Equal(t, int64(memChunkSize), m.Allocated(), "discarding whole chunks frees them")
	require.NoError(t, m.WriteZeroes(1<<39, 1))
	assert.Equal(t, int64(memChunkSize), m.Allocated(), "zeroing part of a chunk keeps it")
	require.NoError(t, m.WriteZeroes(1<<39, memChunkSize))
	assert.Zero(t, m.Allocated())
	assert.True(t, IsNonBlocking(m))

	for _, size := range []int64{0, -1, maxMemorySize + 1} {
		_, err := NewMemory(size)
		assert.ErrorIs(t, err, ErrInvalidSize, "size %d", size)
	}
}

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.img")

	_, err := OpenFile(path, 0)
	assert.ErrorIs(t, err, ErrInvalidSize, "a missing file needs a size")

	f, err := OpenFile(path, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), f.Size())
	assert.False(t, IsNonBlocking(f))
	_, err = f.WriteAt([]byte("hello"), 4096)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = f.WriteAt([]byte("x"), 0)
	assert.ErrorIs(t, err, ErrClosed)

	// Reopen with no size: the file's size; with a larger size: grown.
	f, err = OpenFile(path, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), f.Size())
	got := make([]byte, 5)
	_, err = f.ReadAt(got, 4096)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(got))
	require.NoError(t, f.Close())

	f, err = OpenFile(path, 2<<20)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, int64(2<<20), st.Size())
	require.NoError(t, f.Close())

	// A smaller size uses the start of the file and leaves it as it is.
	f, err = OpenFile(path, 8192)
	require.NoError(t, err)
	assert.Equal(t, int64(8192), f.Size())
	_, err = f.WriteAt(make([]byte, 10), 8190)
	assert.ErrorIs(t, err, ErrOutOfRange)
	require.NoError(t, f.Close())

	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = OpenFile(empty, 0)
	assert.ErrorIs(t, err, ErrInvalidSize)

	_, err = OpenFile(dir, 0)
	assert.ErrorIs(t, err, ErrNotDevice)
	_, err = OpenFile(path, -1)
	assert.ErrorIs(t, err, ErrInvalidSize)
	_, err = OpenFile("/dev/null", 0)
	assert.ErrorIs(t, err, ErrNotDevice, "a character device is not a block device")
}

func TestFileDiscardFreesSpace(t *testing.T) {
	f, err := OpenFile(filepath.Join(t.TempDir(), "d.img"), 4<<20)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(pattern(9, 4<<20), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	err = f.Discard(1<<20, 2<<20)
	if errors.Is(err, ErrNotSupported) {
		prereq.Missing(t, "the file system under TempDir cannot punch holes")
	}
	require.NoError(t, err)
	got := make([]byte, 2<<20)
	_, err = f.ReadAt(got, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 2<<20), got)
	allocated := allocatedBytes(t, f.Path())
	assert.Less(t, allocated, int64(3<<20), "a punched hole frees the blocks under it")
}
