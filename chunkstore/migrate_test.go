package chunkstore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// v1Pattern is testdata/v1-store.gen.go.txt's pattern: the bytes the
// version 1 code wrote into the fixture.
func v1Pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// untarV1 unpacks the version 1 fixture into a new directory and returns
// its device directories.
func untarV1(t testing.TB) []string {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open("testdata/v1-store.tar.gz")
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
		p := filepath.Join(dir, filepath.Clean(h.Name))
		if h.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(p, 0o755))
			continue
		}
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	return DeviceDirs(dir, DefaultGeometry)
}

// v1Want is what the fixture's volume "vol" holds.
func v1Want() []byte {
	want := make([]byte, 256<<10)
	copy(want, v1Pattern(1, 64<<10))
	copy(want[6*16384+1000:], v1Pattern(2, 6000))
	copy(want[200<<10:], v1Pattern(3, 4096))
	return want
}

func verifyV1Content(t *testing.T, s *Store) {
	t.Helper()
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, v.Size())
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(v1Want(), got), "volume vol reads back as the v1 code wrote it")
	e, err := s.OpenVolume("empty")
	require.NoError(t, err)
	assert.EqualValues(t, 1<<20, e.Size())
	for i, c := range []struct {
		seed uint64
		n    int
	}{{4, 40000}, {5, 3000}} {
		got, err := s.GetChunk(ChunkID{byte(i + 1)})
		require.NoError(t, err)
		require.True(t, bytes.Equal(v1Pattern(c.seed, c.n), got), "chunk %d", i+1)
	}
}

func TestMigrateV1(t *testing.T) {
	dirs := untarV1(t)
	_, err := OpenDirs(dirs)
	require.ErrorIs(t, err, ErrFormatV1, "a v1 store is refused, never misread")
	assert.Contains(t, err.Error(), "bin/target migrate")

	var steps []Progress
	rep, err := MigrateDirs(dirs, MigrateOptions{Progress: func(p Progress) { steps = append(steps, p) }})
	require.NoError(t, err)
	assert.True(t, rep.Converted)
	assert.Equal(t, 2, rep.Volumes)
	assert.Equal(t, 2, rep.Chunks)
	assert.Equal(t, 6, rep.Identities)
	// 6 stripes of "vol" (0-3, 6, 12) and the chunks' 3 + 1.
	assert.Equal(t, 10, rep.Stripes)
	require.Len(t, steps, 12)
	assert.EqualValues(t, 12, steps[11].Done)

	s, err := OpenDirs(dirs)
	require.NoError(t, err)
	verifyV1Content(t, s)
	rs, err := s.Scrub(context.Background(), ScrubOptions{NoRepair: true})
	require.NoError(t, err)
	assert.EqualValues(t, 10, rs.Checked)
	assert.Zero(t, rs.Damaged)

	// The converted store takes writes into its log and cleans the old
	// stripes like any other: overwrite most of vol, then let the cleaner
	// move what is left of the v1 stripes.
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	want := v1Want()
	p := v1Pattern(9, 100<<10)
	_, err = v.WriteAt(p, 10<<10)
	require.NoError(t, err)
	copy(want[10<<10:], p)
	for slot := uint64(0); slot < 10; slot++ {
		require.NoError(t, s.cleanSlot(slot))
	}
	s.lmu.Lock()
	for p := range 10 {
		assert.False(t, s.slots[p].used && s.slots[p].key.Owner != logOwner, "v1 stripe in slot %d was moved", p)
	}
	s.lmu.Unlock()
	require.NoError(t, s.Close())
	s, err = OpenDirs(dirs)
	require.NoError(t, err)
	got := make([]byte, len(want))
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	for i, c := range []struct {
		seed uint64
		n    int
	}{{4, 40000}, {5, 3000}} {
		b, err := s.GetChunk(ChunkID{byte(i + 1)})
		require.NoError(t, err)
		require.True(t, bytes.Equal(v1Pattern(c.seed, c.n), b))
	}
	requireClean(t, s)
	require.NoError(t, s.Close())

	// Migrating a version 2 store does nothing.
	rep, err = MigrateDirs(dirs, MigrateOptions{})
	require.NoError(t, err)
	assert.False(t, rep.Converted)
	assert.Zero(t, rep.Identities)
}

// TestMigrateResumes: a migration cut after the metadata of some replicas
// was converted, or after some identities were rewritten, leaves a store
// that Open refuses and that Migrate finishes.
func TestMigrateResumes(t *testing.T) {
	for _, failAt := range []int{0, 3, 5} {
		dirs := untarV1(t)
		devs := osDevices(dirs)
		inj := vfs.NewInjectFS(devs[failAt])
		devs[failAt] = inj
		// The identity rewrite of device failAt fails: by then every
		// replica is converted and the identities before it rewritten.
		remove := inj.Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpCreate}, Err: syscall.EIO})
		_, err := Migrate(devs, MigrateOptions{})
		require.Error(t, err)
		remove()
		_, err = Open(osDevices(dirs))
		require.ErrorIs(t, err, ErrFormatV1, "failAt %d", failAt)
		rep, err := Migrate(osDevices(dirs), MigrateOptions{})
		require.NoError(t, err)
		assert.False(t, rep.Converted, "the metadata was converted by the first run")
		assert.Equal(t, 6-failAt, rep.Identities)
		s, err := Open(osDevices(dirs))
		require.NoError(t, err)
		verifyV1Content(t, s)
		requireClean(t, s)
		require.NoError(t, s.Close())
	}
}
