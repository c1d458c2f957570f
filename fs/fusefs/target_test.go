package fusefs

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/fs/internal/fstest"
	"github.com/capsule-storage/capsule/fs/server"
	"github.com/capsule-storage/capsule/internal/prereq"
)

// mountTarget mounts the file namespace of a target started in this
// process (package fs/internal/fstest) at url, through the real client.
func mountTarget(t testing.TB, url string, o Options) (string, *capfs.Client) {
	t.Helper()
	prereq.FUSE(t)
	tt := fstest.Start(t, url, server.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := capfs.Dial(ctx, tt.Addr, capfs.WithSubsystem(fstest.NQN), capfs.WithLogger(fstest.Logger(t)))
	require.NoError(t, err)
	dir := t.TempDir()
	srv, err := Mount(ctx, c, dir, o)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, srv.Unmount())
		require.NoError(t, c.Close())
	})
	watchMount(t, dir)
	return dir, c
}

// TestTargetPosix runs go-fuse's POSIX suite on a mount of a real target
// over each transport, every case in a directory of its own.
func TestTargetPosix(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, url := range fstest.URLs() {
		t.Run(fstest.Scheme(url), func(t *testing.T) {
			mnt, _ := mountTarget(t, url, cached)
			for _, name := range names {
				t.Run(name, func(t *testing.T) {
					dir := filepath.Join(mnt, name)
					require.NoError(t, os.Mkdir(dir, 0o755))
					posixtest.All[name](t, dir)
				})
			}
		})
	}
}

// TestTargetThroughClient: what the mount writes, the Go client reads,
// and the other way round.
func TestTargetThroughClient(t *testing.T) {
	mnt, c := mountTarget(t, fstest.URLs()[1], cached)
	want := make([]byte, 3<<20+7)
	for i := range want {
		want[i] = byte(i * 13)
	}
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "from-mount"), want, 0o644))
	ctx := context.Background()
	a, err := c.Lookup(ctx, capfs.RootIno, "from-mount")
	require.NoError(t, err)
	h, err := c.Open(ctx, a.Ino, os.O_RDONLY)
	require.NoError(t, err)
	got := make([]byte, len(want))
	n, err := c.Read(ctx, a.Ino, h, got, 0)
	require.NoError(t, err)
	assert.Equal(t, len(want), n)
	assert.Equal(t, want, got)
	require.NoError(t, c.Release(ctx, a.Ino, h))

	b, h2, err := c.Create(ctx, capfs.RootIno, "from-client", 0o644, 0, 0, os.O_RDWR)
	require.NoError(t, err)
	_, err = c.Write(ctx, b.Ino, h2, want[:12345], 0)
	require.NoError(t, err)
	require.NoError(t, c.Release(ctx, b.Ino, h2))
	got, err = os.ReadFile(filepath.Join(mnt, "from-client"))
	require.NoError(t, err)
	assert.Equal(t, want[:12345], got)
}
