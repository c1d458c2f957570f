package vfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWatcher(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	for _, d := range []string{a, b} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "identity"), []byte("x"), 0o600))
	}
	w := NewWatcher()
	defer w.Close()
	require.True(t, w.Add(0, NewOS(a)))
	require.True(t, w.Add(1, NewOS(b)))
	assert.False(t, w.Add(2, NewMem()), "only OSFS roots are watched")
	assert.Zero(t, w.Quiet(), "the first Quiet after Add reports every root changed")
	assert.Equal(t, uint64(0b11), w.Quiet())

	// Writing and creating files is not a change of entries that matters.
	require.NoError(t, os.WriteFile(filepath.Join(a, "new"), []byte("y"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(a, "identity"), []byte("z"), 0o600))
	assert.Equal(t, uint64(0b11), w.Quiet())

	// Removing or renaming an entry is, once.
	require.NoError(t, os.Remove(filepath.Join(a, "new")))
	assert.Equal(t, uint64(0b10), w.Quiet())
	assert.Equal(t, uint64(0b11), w.Quiet())
	require.NoError(t, os.Rename(filepath.Join(b, "identity"), filepath.Join(b, "old")))
	assert.Equal(t, uint64(0b01), w.Quiet())
	assert.Equal(t, uint64(0b11), w.Quiet())

	// A root renamed away is never quiet again, even with a directory
	// back at its path, until it is added anew.
	require.NoError(t, os.Rename(b, b+".gone"))
	require.NoError(t, os.Mkdir(b, 0o755))
	assert.Equal(t, uint64(0b01), w.Quiet())
	assert.Equal(t, uint64(0b01), w.Quiet())
	require.True(t, w.Add(1, NewOS(b)))
	assert.Equal(t, uint64(0b01), w.Quiet())
	assert.Equal(t, uint64(0b11), w.Quiet())

	// A root removed: the same.
	require.NoError(t, os.RemoveAll(a))
	assert.Equal(t, uint64(0b10), w.Quiet())
	assert.Equal(t, uint64(0b10), w.Quiet())

	require.NoError(t, w.Close())
	assert.Zero(t, w.Quiet(), "a closed Watcher is never quiet")
}

// BenchmarkWatcherQuiet is what a flush pays to know that its devices are
// still there, against BenchmarkStatIdentity, the lookup by path of each.
func BenchmarkWatcherQuiet(b *testing.B) {
	w := NewWatcher()
	defer w.Close()
	for i := range 6 {
		d := filepath.Join(b.TempDir(), "dev")
		require.NoError(b, os.Mkdir(d, 0o755))
		require.True(b, w.Add(i, NewOS(d)))
	}
	w.Quiet()
	for b.Loop() {
		if w.Quiet() != 0b111111 {
			b.Fatal("not quiet")
		}
	}
}

func BenchmarkStatIdentity(b *testing.B) {
	var fss []FS
	for range 6 {
		d := filepath.Join(b.TempDir(), "dev")
		require.NoError(b, os.Mkdir(d, 0o755))
		require.NoError(b, os.WriteFile(filepath.Join(d, "identity"), []byte("x"), 0o600))
		fss = append(fss, NewOS(d))
	}
	for b.Loop() {
		for _, f := range fss {
			if _, err := f.Stat("identity"); err != nil {
				b.Fatal(err)
			}
		}
	}
}
