package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/storetest"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// TestMigrateV1Store starts the built bin/target on a store that the v1
// code wrote (chunkstore/testdata), sees it refuse in one line, converts
// it with `target migrate`, serves it and reads every byte of the volume
// back through the host library; then writes over it, and after a
// restart reads that back too.
func TestMigrateV1Store(t *testing.T) {
	data := t.TempDir()
	storetest.UntarV1(t, data)
	ns := []string{"--namespace", "ec:vol:256KiB", "--scrub-rate", "0"}

	// Serving a v1 store fails, saying what to run.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "target"), append([]string{"serve", "--listen", "tcp://127.0.0.1:0", "--data", data}, ns...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.Error(t, err, "serve on a v1 store must fail")
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	assert.Contains(t, last, "format v1")
	assert.Contains(t, last, "target migrate --data "+data)

	out := runTarget(ctx, t, "migrate", "--data", data)
	assert.Contains(t, out, "migrate: format=2 volumes=2 chunks=2 stripes=10 converted=true")

	shm := fmt.Sprintf("shm://migrate-it-%d", os.Getpid())
	nqn := "nqn.2026-12.io.capsule:migrate"
	args := append([]string{"serve", "--listen", shm, "--data", data, "--nqn", nqn}, ns...)
	d := startDaemon(t, "capsule target ready", args...)
	c, err := host.Dial(ctx, shm, host.WithSubsystem(nqn))
	require.NoError(t, err)
	n, err := c.Namespace(1)
	require.NoError(t, err)
	want := storetest.V1Vol()
	got := make([]byte, len(want))
	_, err = n.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "every byte the v1 store held reads back")

	p := storetest.V1Pattern(77, 96<<10)
	_, err = n.WriteAt(p, 40<<10)
	require.NoError(t, err)
	require.NoError(t, n.Flush())
	copy(want[40<<10:], p)
	require.NoError(t, c.Close())
	d.stop(t)

	d = startDaemon(t, "capsule target ready", args...)
	c, err = host.Dial(ctx, shm, host.WithSubsystem(nqn))
	require.NoError(t, err)
	defer c.Close()
	n, err = c.Namespace(1)
	require.NoError(t, err)
	_, err = n.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	_ = d
}
