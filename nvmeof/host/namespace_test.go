package host

import (
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadWriteAgainstResponder(t *testing.T) {
	forEachTransport(t, false, func(t *testing.T, url string) {
		r := newResponder(t, url, 4<<20, 512)
		c := dialResponder(t, r)
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		assert.Equal(t, int64(4<<20), ns.Size())
		assert.Equal(t, 512, ns.BlockSize())

		// Sizes across the in-capsule limit (8 KiB), the slot area and
		// the large buffers (MDTS 2^5 pages = 128 KiB), with splits.
		for i, size := range []int{512, 4096, 8192, 8704, 65536, 131072, 131072 + 512, 1 << 20} {
			off := int64(i) * (1 << 19) / 2 &^ 511
			w := make([]byte, size)
			pattern(w, int64(i+1), off)
			n, err := ns.WriteAt(w, off)
			require.NoError(t, err, "write %d at %d", size, off)
			require.Equal(t, size, n)
			require.Equal(t, w, r.nsBytes()[off:off+int64(size)], "the responder's memory after a write of %d", size)
			got := make([]byte, size)
			n, err = ns.ReadAt(got, off)
			require.NoError(t, err, "read %d at %d", size, off)
			require.Equal(t, size, n)
			require.Equal(t, w, got, "read back %d at %d", size, off)
		}
	})
}

func TestReadAtContract(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
	c := dialResponder(t, r)
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	mem := r.nsBytes()
	pattern(mem, 7, 0)

	t.Run("unaligned", func(t *testing.T) {
		for _, tc := range []struct{ off, n int64 }{{1, 1}, {511, 2}, {100, 5000}, {4095, 70000}, {3, 200000}} {
			got := make([]byte, tc.n)
			n, err := ns.ReadAt(got, tc.off)
			require.NoError(t, err)
			require.Equal(t, int(tc.n), n)
			require.Equal(t, mem[tc.off:tc.off+tc.n], got, "read of %d at %d", tc.n, tc.off)
		}
	})
	t.Run("at the end", func(t *testing.T) {
		got := make([]byte, 1000)
		n, err := ns.ReadAt(got, ns.Size()-600)
		assert.Equal(t, 600, n)
		assert.ErrorIs(t, err, io.EOF)
		assert.Equal(t, mem[ns.Size()-600:], got[:600])
		n, err = ns.ReadAt(got, ns.Size())
		assert.Equal(t, 0, n)
		assert.ErrorIs(t, err, io.EOF)
		n, err = ns.ReadAt(got[:512], ns.Size()-512)
		assert.Equal(t, 512, n)
		assert.NoError(t, err, "a read ending exactly at the end may return nil")
	})
	t.Run("negative offset", func(t *testing.T) {
		_, err := ns.ReadAt(make([]byte, 512), -512)
		assert.ErrorIs(t, err, ErrOutOfRange)
	})
	t.Run("empty", func(t *testing.T) {
		n, err := ns.ReadAt(nil, 0)
		assert.Equal(t, 0, n)
		assert.NoError(t, err)
	})
}

func TestWriteAtContract(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 4096)
	c := dialResponder(t, r)
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	mem := r.nsBytes()
	before := append([]byte(nil), mem...)

	for _, tc := range []struct {
		name string
		off  int64
		n    int
		want error
	}{
		{"unaligned offset", 512, 4096, ErrUnaligned},
		{"unaligned length", 0, 4000, ErrUnaligned},
		{"past the end", ns.Size() - 4096, 8192, ErrOutOfRange},
		{"negative", -4096, 4096, ErrOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ns.WriteAt(make([]byte, tc.n), tc.off)
			assert.Equal(t, 0, n)
			assert.ErrorIs(t, err, tc.want)
		})
	}
	assert.Equal(t, before, mem, "refused writes wrote nothing")
	assert.ErrorIs(t, ns.WriteZeroes(100, 4096), ErrUnaligned)
	assert.ErrorIs(t, ns.Discard(0, 100), ErrUnaligned)
}

func TestZeroesDiscardFlush(t *testing.T) {
	forEachTransport(t, false, func(t *testing.T, url string) {
		r := newResponder(t, url, 2<<20, 512)
		c := dialResponder(t, r)
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		mem := r.nsBytes()
		pattern(mem, 3, 0)
		want := append([]byte(nil), mem...)

		require.NoError(t, ns.WriteZeroes(512, 1<<20)) // several commands (MDTS)
		clear(want[512 : 512+1<<20])
		require.NoError(t, ns.Discard(1<<20+4096, 8192))
		clear(want[1<<20+4096 : 1<<20+4096+8192])
		require.NoError(t, ns.Flush())
		assert.True(t, ns.DeallocatedReadsZero())
		got := make([]byte, len(mem))
		_, err = ns.ReadAt(got, 0)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})
}

func TestConcurrentReadersWriters(t *testing.T) {
	forEachTransport(t, false, func(t *testing.T, url string) {
		r := newResponder(t, url, 8<<20, 4096)
		c := dialResponder(t, r, WithQueues(3), WithQueueDepth(8), WithBuffers(2))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		const workers, region = 12, 512 << 10
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				base := int64(w) * region
				buf := make([]byte, 64<<10)
				got := make([]byte, len(buf))
				for i := range 16 {
					off := base + int64(i%8)*int64(len(buf))
					pattern(buf, int64(w*100+i), off)
					if _, err := ns.WriteAt(buf, off); err != nil {
						errs <- err
						return
					}
					if _, err := ns.ReadAt(got, off); err != nil {
						errs <- err
						return
					}
					if string(got) != string(buf) {
						errs <- errors.New("read back differs")
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	})
}
