package chunkstore

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestOSReadsCachedAndNot reads stripes some of whose shards are in the
// page cache and some not (two devices' shard files dropped from it with
// POSIX_FADV_DONTNEED): the cached shards are read without waiting, the
// others after, and the bytes are the same either way. On a tmpfs
// directory nothing can be dropped, and every shard is read without
// waiting.
func TestOSReadsCachedAndNot(t *testing.T) {
	g := DefaultGeometry
	dirs := DeviceDirs(t.TempDir(), g)
	s, err := CreateDirs(dirs, WithGeometry(g))
	require.NoError(t, err)
	defer s.Close()
	v, err := s.CreateVolume("vol", 4<<20)
	require.NoError(t, err)
	want := randBytes(rand.New(rand.NewPCG(11, 11)), 4<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	read := func(what string) {
		got := make([]byte, len(want))
		for off := 0; off < len(got); off += 1 << 20 {
			_, err := v.ReadAt(got[off:off+1<<20], int64(off))
			require.NoError(t, err, what)
		}
		require.True(t, bytes.Equal(want, got), what)
	}
	read("every shard cached")
	for _, d := range []int{0, 2} {
		f, err := os.Open(filepath.Join(dirs[d], shardFile))
		require.NoError(t, err)
		require.NoError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
		require.NoError(t, f.Close())
	}
	read("devices 0 and 2 dropped from the page cache")
	read("every shard cached again")
	st := s.Stats()
	assert.Zero(t, st.ShardIOErrors+st.ShardHeader+st.ShardChecksum+st.Reconstructions, "no shard counted as failed")
}
