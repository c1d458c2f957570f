package chunkstore

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVolumeRoundTrip(t *testing.T) {
	for _, g := range []Geometry{{4, 2}, {1, 0}, {2, 1}, {1, 2}} {
		t.Run(g.String(), func(t *testing.T) {
			td := newTestDevices(t, g.Devices())
			s := mustCreate(t, td, testOpts(g, 8192)...)
			size := int64(g.Data*8192*5 + 3000) // a partial last stripe
			v, err := s.CreateVolume("vol", size)
			require.NoError(t, err)

			r := rand.New(rand.NewPCG(1, 2))
			model := make([]byte, size)
			for range 60 {
				off := r.Int64N(size)
				n := 1 + r.Int64N(min(size-off, int64(g.Data*8192*2)))
				p := randBytes(r, int(n))
				_, err := v.WriteAt(p, off)
				require.NoError(t, err)
				copy(model[off:], p)
				if r.IntN(10) == 0 {
					require.NoError(t, v.Sync())
				}
				if r.IntN(8) == 0 {
					zo := r.Int64N(size)
					zn := r.Int64N(size - zo)
					require.NoError(t, v.Discard(zo, zn))
					clear(model[zo : zo+zn])
				}
			}
			got := make([]byte, size)
			n, err := v.ReadAt(got, 0)
			require.NoError(t, err)
			require.EqualValues(t, size, n)
			require.True(t, bytes.Equal(model, got), "read before sync differs")
			require.NoError(t, s.Close())

			s = mustOpen(t, td)
			v, err = s.OpenVolume("vol")
			require.NoError(t, err)
			clear(got)
			_, err = v.ReadAt(got, 0)
			require.NoError(t, err)
			require.True(t, bytes.Equal(model, got), "read after reopen differs")
			requireClean(t, s)

			// io.ReaderAt at the end.
			buf := make([]byte, 100)
			n, err = v.ReadAt(buf, size-10)
			assert.Equal(t, 10, n)
			assert.ErrorIs(t, err, io.EOF)
			_, err = v.WriteAt(buf, size-10)
			assert.ErrorIs(t, err, ErrOutOfRange)
			require.NoError(t, s.Close())
		})
	}
}

func TestChunkRoundTrip(t *testing.T) {
	td := newTestDevices(t, 6)
	s := mustCreate(t, td, testOpts(DefaultGeometry, 4096)...)
	r := rand.New(rand.NewPCG(3, 4))
	chunks := map[ChunkID][]byte{}
	for _, n := range []int{0, 1, 100, 4096, 4*4096 - 1, 4 * 4096, 4*4096 + 1, 50000} {
		id := NewChunkID()
		data := randBytes(r, n)
		require.NoError(t, s.PutChunk(id, data, 0))
		chunks[id] = data
	}
	check := func(s *Store) {
		for id, want := range chunks {
			got, err := s.GetChunk(id)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "chunk %s of %d bytes", id, len(want))
			if len(want) > 10 {
				p := make([]byte, 20)
				n, err := s.ReadChunkAt(id, p, int64(len(want)-10))
				assert.Equal(t, 10, n)
				assert.ErrorIs(t, err, io.EOF)
				assert.Equal(t, want[len(want)-10:], p[:10])
			}
		}
	}
	check(s)
	// Replace and delete.
	var any ChunkID
	for id := range chunks {
		any = id
		break
	}
	chunks[any] = []byte("replaced")
	require.NoError(t, s.PutChunk(any, chunks[any], FUA))
	gone := NewChunkID()
	require.NoError(t, s.PutChunk(gone, []byte("x"), 0))
	require.NoError(t, s.DeleteChunk(gone, 0))
	_, err := s.GetChunk(gone)
	assert.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, s.Close())

	s = mustOpen(t, td)
	check(s)
	assert.Len(t, s.Chunks(), len(chunks))
	requireClean(t, s)
	require.NoError(t, s.Close())
}

func TestVolumeTable(t *testing.T) {
	td := newTestDevices(t, 3)
	s := mustCreate(t, td, testOpts(Geometry{2, 1}, 4096)...)
	_, err := s.CreateVolume("a", 1<<20)
	require.NoError(t, err)
	_, err = s.CreateVolume("a", 1<<20)
	assert.ErrorIs(t, err, ErrExists)
	_, err = s.CreateVolume("", 1)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = s.CreateVolume("b", 0)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	b, err := s.CreateVolume("b", 3<<20)
	require.NoError(t, err)
	_, err = b.WriteAt(bytes.Repeat([]byte{7}, 1<<20), 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	inUse := s.Info().SlotsInUse
	assert.NotZero(t, inUse)

	require.NoError(t, s.DeleteVolume("b"))
	_, err = b.ReadAt(make([]byte, 1), 0)
	assert.ErrorIs(t, err, ErrClosed)
	_, err = s.OpenVolume("b")
	assert.ErrorIs(t, err, ErrNotFound)
	// Freed slots come back after the next commit.
	require.NoError(t, s.Sync())
	assert.Zero(t, s.Info().SlotsInUse)

	names := []string{}
	for _, vi := range s.Volumes() {
		names = append(names, vi.Name)
	}
	assert.Equal(t, []string{"a"}, names)
	require.NoError(t, s.Close())
	s = mustOpen(t, td)
	assert.Len(t, s.Volumes(), 1)
	require.NoError(t, s.Close())
	_, err = s.OpenVolume("a")
	assert.ErrorIs(t, err, ErrClosed)
}

func TestScrubCleanStoreFindsNothing(t *testing.T) {
	td := newTestDevices(t, 6)
	s := mustCreate(t, td, testOpts(DefaultGeometry, 4096)...)
	v, err := s.CreateVolume("v", 1<<20)
	require.NoError(t, err)
	_, err = v.WriteAt(bytes.Repeat([]byte("abc"), 100000), 1000)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	rep, err := s.Scrub(context.Background(), ScrubOptions{})
	require.NoError(t, err)
	assert.NotZero(t, rep.Checked)
	assert.Zero(t, rep.Damaged)
	assert.Zero(t, rep.Repaired)
	require.NoError(t, s.Close())
}
