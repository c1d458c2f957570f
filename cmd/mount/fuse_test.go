package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFUSEArguments(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	target := "shm://capsule-mount-test-nothing-here"
	assert.Equal(t, 2, exitCode(t, runApp(t, "--target", target, filepath.Join(dir, "missing"))), "a mountpoint that does not exist")
	assert.Equal(t, 2, exitCode(t, runApp(t, "--target", target, file)), "a mountpoint that is a file")
	assert.Equal(t, 2, exitCode(t, runApp(t, "--target", target, "--attr-timeout", "-1s", dir)))
	assert.Equal(t, 2, exitCode(t, runApp(t, "--target", target, "--max-readahead", "-1", dir)))
	assert.Equal(t, 2, exitCode(t, runApp(t, "--target", target, dir, "extra")), "two mountpoints")
}

// TestFUSENoTarget: with no target listening, mount fails with an error
// that names the target, and mounts nothing.
func TestFUSENoTarget(t *testing.T) {
	dir := t.TempDir()
	err := runApp(t, "--target", "shm://capsule-mount-test-nothing-here", "--reconnect-timeout", "1s", dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shm://capsule-mount-test-nothing-here")
	mounts, rerr := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, rerr)
	assert.NotContains(t, string(mounts), " "+dir+" ")
}
