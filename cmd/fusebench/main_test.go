package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// TestNullFS mounts the null file system and checks what it serves: a
// file of the given size whose bytes are the pattern, and writes that
// are taken and dropped.
func TestNullFS(t *testing.T) {
	prereq.FUSE(t)
	root := &nullRoot{size: 3<<20 + 5, pattern: make([]byte, 1<<20)}
	for i := range root.pattern {
		root.pattern[i] = byte(i * 7)
	}
	mnt := t.TempDir()
	server, err := fs.Mount(mnt, root, mountOptions(false, 0))
	require.NoError(t, err)
	defer server.Unmount()

	f, err := os.OpenFile(filepath.Join(mnt, "data"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	assert.EqualValues(t, root.size, fi.Size())
	got := make([]byte, 100)
	_, err = f.ReadAt(got, 1<<20-50) // across the pattern's wrap
	require.NoError(t, err)
	for i := range got {
		require.Equal(t, root.pattern[(1<<20-50+i)%(1<<20)], got[i], "byte %d", i)
	}
	n, err := f.ReadAt(got, int64(root.size)-5)
	assert.Equal(t, 5, n, "a short read at the end: %v", err)
	n, err = f.WriteAt([]byte("dropped"), 0)
	require.NoError(t, err)
	assert.Equal(t, 7, n)
	_, err = os.Stat(filepath.Join(mnt, "other"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestMeta(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, runMeta([]string{"--files", "50", dir}))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "meta removes what it made")
}
