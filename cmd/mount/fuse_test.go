package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/fs/fusefs"
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

// stuckClient is a file client whose FSYNC never returns, as one waiting
// for a target that went away does until its reconnect timeout.
type stuckClient struct {
	fusefs.Client // nil: only Fsync is called
	release       chan struct{}
}

func (c stuckClient) Fsync(ctx context.Context, ino fusefs.Ino, h fusefs.Handle, dataOnly bool) error {
	<-c.release
	return nil
}

// TestSyncAtUnmountIsBounded: the sync at unmount gives up after its
// limit even when the client's FSYNC does not return, so a mount whose
// target is gone stops without waiting out the reconnect timeout.
func TestSyncAtUnmountIsBounded(t *testing.T) {
	c := stuckClient{release: make(chan struct{})}
	defer close(c.release)
	var log bytes.Buffer
	syncWithin(c, slog.New(slog.NewTextHandler(&log, nil)), 50*time.Millisecond) // returns: the test would hang otherwise
	assert.Contains(t, log.String(), "did not finish")
}
