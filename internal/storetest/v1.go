package storetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
)

// The version 1 fixture, chunkstore/testdata/v1-store.tar.gz: a 4+2 store
// with a 4 KiB stripe unit that the v1 code wrote (its generator is
// testdata/v1-store.gen.go.txt). It holds the volume "vol" (256 KiB, V1Vol
// bytes), the empty volume "empty" (1 MiB) and two chunks, V1Chunks.

// V1Pattern is the generator's pattern: seeded PCG bytes.
func V1Pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// V1Vol is what the fixture's volume "vol" holds.
func V1Vol() []byte {
	want := make([]byte, 256<<10)
	copy(want, V1Pattern(1, 64<<10))
	copy(want[6*16384+1000:], V1Pattern(2, 6000))
	copy(want[200<<10:], V1Pattern(3, 4096))
	return want
}

// V1Chunks is what the fixture's chunks hold, by ID.
func V1Chunks() map[chunkstore.ChunkID][]byte {
	return map[chunkstore.ChunkID][]byte{
		{1}: V1Pattern(4, 40000),
		{2}: V1Pattern(5, 3000),
	}
}

// V1Stripes is how many stripes the fixture holds: six of "vol" and four
// of the chunks.
const V1Stripes = 10

// UntarV1 unpacks the fixture into data (DATA/dev0 … dev5) and returns
// the device directories.
func UntarV1(t testing.TB, data string) []string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(here), "..", "..", "chunkstore", "testdata", "v1-store.tar.gz"))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		p := filepath.Join(data, filepath.Clean(h.Name))
		if h.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(p, 0o755))
			continue
		}
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	return chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
}

// VerifyV1 requires s to hold exactly what the fixture's v1 store held.
func VerifyV1(t testing.TB, s *chunkstore.Store) {
	t.Helper()
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, v.Size())
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(V1Vol(), got), "volume vol reads back as the v1 code wrote it")
	e, err := s.OpenVolume("empty")
	require.NoError(t, err)
	require.EqualValues(t, 1<<20, e.Size())
	for id, want := range V1Chunks() {
		got, err := s.GetChunk(id)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "chunk %s", id)
	}
}
