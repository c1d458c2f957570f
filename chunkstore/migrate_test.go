package chunkstore_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/internal/storetest"
)

func osFS(dirs []string) []vfs.FS {
	out := make([]vfs.FS, len(dirs))
	for i, d := range dirs {
		out[i] = vfs.NewOS(d)
	}
	return out
}

func TestMigrateV1(t *testing.T) {
	dirs := storetest.UntarV1(t, t.TempDir())
	_, err := chunkstore.OpenDirs(dirs)
	require.ErrorIs(t, err, chunkstore.ErrFormatV1, "a v1 store is refused, never misread")
	assert.Contains(t, err.Error(), "bin/target migrate")

	var steps []chunkstore.Progress
	rep, err := chunkstore.MigrateDirs(dirs, chunkstore.MigrateOptions{Progress: func(p chunkstore.Progress) { steps = append(steps, p) }})
	require.NoError(t, err)
	assert.True(t, rep.Converted)
	assert.Equal(t, 2, rep.Volumes)
	assert.Equal(t, 2, rep.Chunks)
	assert.Equal(t, 6, rep.Identities)
	assert.Equal(t, storetest.V1Stripes, rep.Stripes)
	require.Len(t, steps, 12)
	assert.EqualValues(t, 12, steps[11].Done)

	s, err := chunkstore.OpenDirs(dirs, chunkstore.WithOverProvision(0.05))
	require.NoError(t, err)
	storetest.VerifyV1(t, s)
	rs, err := s.Scrub(context.Background(), chunkstore.ScrubOptions{NoRepair: true})
	require.NoError(t, err)
	assert.EqualValues(t, storetest.V1Stripes, rs.Checked)
	assert.Zero(t, rs.Damaged)

	// The converted store writes to its log, and its cleaner (given
	// little over-provisioning) moves what is left live in the v1 stripes
	// like in any other: 4 KiB writes at random over both volumes.
	vols := map[string][]byte{"vol": storetest.V1Vol(), "empty": make([]byte, 1<<20)}
	r := rand.New(rand.NewPCG(9, 9))
	for i := range 3000 {
		name := "vol"
		if i%2 == 1 {
			name = "empty"
		}
		v, err := s.OpenVolume(name)
		require.NoError(t, err)
		off := r.IntN(len(vols[name])/4096) * 4096
		p := storetest.V1Pattern(uint64(100+i), 4096)
		_, err = v.WriteAt(p, int64(off))
		require.NoError(t, err)
		copy(vols[name][off:], p)
	}
	require.NoError(t, s.Sync())
	require.Eventually(t, func() bool { return s.Stats().CleanerBytes > 0 }, 10*time.Second, 10*time.Millisecond)
	st := s.Stats()
	t.Logf("live %d, dead %d, cleaner moved %d, write amplification %.2f", st.LiveBytes, st.DeadBytes, st.CleanerBytes, st.WriteAmplification)
	require.NoError(t, s.Close())

	s, err = chunkstore.OpenDirs(dirs)
	require.NoError(t, err)
	for name, want := range vols {
		v, err := s.OpenVolume(name)
		require.NoError(t, err)
		got := make([]byte, len(want))
		_, err = v.ReadAt(got, 0)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "volume %s", name)
	}
	for id, w := range storetest.V1Chunks() {
		b, err := s.GetChunk(id)
		require.NoError(t, err)
		require.True(t, bytes.Equal(w, b))
	}
	rs, err = s.Scrub(context.Background(), chunkstore.ScrubOptions{NoRepair: true})
	require.NoError(t, err)
	assert.Zero(t, rs.Damaged)
	require.NoError(t, s.Close())

	// Migrating a version 2 store does nothing.
	rep, err = chunkstore.MigrateDirs(dirs, chunkstore.MigrateOptions{})
	require.NoError(t, err)
	assert.False(t, rep.Converted)
	assert.Zero(t, rep.Identities)
}

// TestMigrateResumes: a migration cut after every replica was converted
// and some identities were rewritten leaves a store that Open refuses and
// that Migrate finishes.
func TestMigrateResumes(t *testing.T) {
	for _, failAt := range []int{0, 3, 5} {
		dirs := storetest.UntarV1(t, t.TempDir())
		devs := osFS(dirs)
		inj := vfs.NewInjectFS(devs[failAt])
		devs[failAt] = inj
		// The identity rewrite of device failAt fails: by then every
		// replica is converted and the identities before it rewritten.
		remove := inj.Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpCreate}, Err: syscall.EIO})
		_, err := chunkstore.Migrate(devs, chunkstore.MigrateOptions{})
		require.Error(t, err)
		remove()
		_, err = chunkstore.Open(osFS(dirs))
		require.ErrorIs(t, err, chunkstore.ErrFormatV1, "failAt %d", failAt)
		rep, err := chunkstore.Migrate(osFS(dirs), chunkstore.MigrateOptions{})
		require.NoError(t, err)
		assert.False(t, rep.Converted, "the metadata was converted by the first run")
		assert.Equal(t, 6-failAt, rep.Identities)
		s, err := chunkstore.Open(osFS(dirs))
		require.NoError(t, err)
		storetest.VerifyV1(t, s)
		rs, err := s.Scrub(context.Background(), chunkstore.ScrubOptions{NoRepair: true})
		require.NoError(t, err)
		assert.Zero(t, rs.Damaged)
		require.NoError(t, s.Close())
	}
}
