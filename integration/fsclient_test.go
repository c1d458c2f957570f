package integration

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	capfs "github.com/capsule-storage/capsule/fs"
)

// TestFileClient starts `target serve` (its default file namespace on the
// erasure-coded store) and uses the Go file client from this process over
// iwarp and shm: files written through one connection read back byte for
// byte (sha256) through another, and after a restart of the target.
func TestFileClient(t *testing.T) {
	shm := fmt.Sprintf("shm://fsclient-it-%d", os.Getpid())
	data := t.TempDir()
	args := []string{"serve", "--listen", "iwarp://127.0.0.1:0", "--listen", shm, "--data", data,
		"--namespace", "ec:vol0:64MiB", "--scrub-rate", "0"}
	d := startDaemon(t, "capsule target ready", args...)
	listeners := strings.Split(field(d.ready, "listeners"), ",")
	require.Len(t, listeners, 2, d.ready)

	r := rand.New(rand.NewPCG(5, 6))
	files := map[string][]byte{}
	for i, size := range []int{0, 1, 4096, 100_000, 3<<20 + 11} {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		files[fmt.Sprintf("dir%d/file-%d", i%2, size)] = b
	}
	dialFS := func(url string) *capfs.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := capfs.Dial(ctx, url, capfs.WithSubsystem("nqn.2026-11.io.capsule:default"))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	check := func(f *capfs.FS) {
		for name, want := range files {
			got, err := f.ReadFile(name)
			require.NoError(t, err, name)
			require.Equal(t, sha256.Sum256(want), sha256.Sum256(got), "%s reads back byte for byte", name)
		}
	}

	w := dialFS(listeners[0]).FS() // iwarp
	for name, b := range files {
		require.NoError(t, w.MkdirAll(strings.Split(name, "/")[0], 0o755))
		f, err := w.Create(name)
		require.NoError(t, err)
		// In pieces of odd sizes, as a copy program would.
		for off := 0; off < len(b); {
			n := min(len(b)-off, 65536+off%777)
			k, err := f.Write(b[off : off+n])
			require.NoError(t, err)
			off += k
		}
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
	}
	check(dialFS(listeners[1]).FS()) // shm
	check(w)

	// A restart keeps everything.
	d.stop(t)
	d = startDaemon(t, "capsule target ready", append(args[:1:1], append([]string{"--listen", shm}, args[5:]...)...)...)
	f := dialFS(shm).FS()
	check(f)
	fl, err := f.Open("dir0/file-0")
	require.NoError(t, err)
	b, err := io.ReadAll(fl)
	require.NoError(t, err)
	require.Empty(t, b)
	require.NoError(t, fl.Close())
	d.stop(t)
}
