package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/storetest"
)

// The store these tests make (package internal/storetest): a 2 MiB
// volume, 128 stripes, and the chunk.
const (
	storeVolSize = 2 << 20
	storeStripes = storeVolSize/storetest.StripeData + storetest.ChunkStripes
)

// requireStoreCommands checks that bin/target has the scrub and repair
// commands. It asks `target help CMD`: with a command missing, `target
// CMD --help` would run the default action (the perf responder) instead
// of saying so.
func requireStoreCommands(t *testing.T) {
	t.Helper()
	for _, cmd := range []string{"scrub", "repair"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "target"), "help", cmd).CombinedOutput()
		cancel()
		require.NotContains(t, string(out), "No help topic for '"+cmd+"'", "cmd/target/main.go lists the %s command", cmd)
		require.NoError(t, err, "target help %s:\n%s", cmd, out)
		require.Contains(t, string(out), "--data", "target help %s", cmd)
	}
}

// storeRun is one finished bin/target process.
type storeRun struct {
	stdout, stderr string
	code           int
}

// runStoreCommand runs bin/target and returns its output and exit status,
// failing the test only if it could not run.
func runStoreCommand(t *testing.T, args ...string) storeRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "target"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := storeRun{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		t.Fatalf("target %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return r
}

// TestScrubBinary corrupts shard files on disk and runs `target scrub`.
func TestScrubBinary(t *testing.T) {
	requireStoreCommands(t)
	data := t.TempDir()
	c := storetest.Make(t, data, storeVolSize, 1)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	slots := r.Perm(storeStripes)[:12]
	for _, slot := range slots {
		storetest.FlipPayload(t, r, dirs[r.IntN(len(dirs))], slot)
	}

	res := runStoreCommand(t, "scrub", "--data", data)
	require.Zero(t, res.code, "%s\n%s", res.stdout, res.stderr)
	sum := storetest.Summary(t, res.stdout, "scrub:")
	assert.EqualValues(t, storeStripes, sum["checked"])
	assert.EqualValues(t, len(slots), sum["damaged"])
	assert.EqualValues(t, len(slots), sum["repaired"])
	assert.Zero(t, sum["unrecoverable"])
	assert.EqualValues(t, 1, sum["complete"])
	stats := c.Verify(t, dirs)
	assert.Zero(t, stats.Reconstructions, "the repairs are on disk")

	// Three bad shards of one stripe are one more than parity covers.
	lost := r.IntN(storeStripes)
	for _, d := range r.Perm(len(dirs))[:3] {
		storetest.FlipPayload(t, r, dirs[d], lost)
	}
	res = runStoreCommand(t, "scrub", "--data", data)
	assert.Equal(t, 3, res.code, "exit status 3: unrecoverable\n%s", res.stderr)
	assert.Contains(t, res.stderr, "1 stripe is unrecoverable")
	sum = storetest.Summary(t, res.stdout, "scrub:")
	assert.EqualValues(t, 1, sum["damaged"])
	assert.EqualValues(t, 1, sum["unrecoverable"])
}

// TestRepairBinary deletes a device directory, rebuilds it into a new one
// with `target repair`, interrupts it with SIGINT, and runs it again.
func TestRepairBinary(t *testing.T) {
	requireStoreCommands(t)
	data := t.TempDir()
	c := storetest.Make(t, data, storeVolSize, 2)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	require.NoError(t, os.RemoveAll(dirs[3]))
	newDir := filepath.Join(t.TempDir(), "replacement")

	// Slowed down so the interrupt lands mid-way; sent at the first
	// progress line, which is printed after the first stripe.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "target"), "repair", "--data", data, "--device", newDir, "--rate", "256KiB")
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var errOut strings.Builder
	sc := bufio.NewScanner(stderr)
	interrupted := false
	for sc.Scan() {
		errOut.WriteString(sc.Text() + "\n")
		if !interrupted && strings.Contains(sc.Text(), "stripes (") {
			require.NoError(t, syscall.Kill(cmd.Process.Pid, syscall.SIGINT))
			interrupted = true
		}
	}
	err = cmd.Wait()
	require.True(t, interrupted, "no progress line on stderr:\n%s", errOut.String())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "an interrupted repair fails:\n%s", errOut.String())
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, errOut.String(), "run the same command again to resume")
	first := storetest.Summary(t, out.String(), "repair:")
	assert.Zero(t, first["complete"])
	require.Positive(t, first["rebuilt"])
	require.Less(t, first["rebuilt"], int64(storeStripes))

	res := runStoreCommand(t, "repair", "--data", data, "--device", newDir)
	require.Zero(t, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stderr, "resuming the rebuild of device 3")
	sum := storetest.Summary(t, res.stdout, "repair:")
	assert.EqualValues(t, 3, sum["device"])
	assert.EqualValues(t, 1, sum["complete"])
	assert.Equal(t, first["rebuilt"], sum["skipped"], "the stripes done before the interrupt are not done again")
	assert.EqualValues(t, storeStripes, sum["rebuilt"]+sum["skipped"])
	assert.Zero(t, sum["unrecoverable"])

	dirs[3] = newDir
	stats := c.Verify(t, dirs)
	assert.Zero(t, stats.Reconstructions, "every shard is in place")
	args := []string{"scrub"}
	for _, d := range dirs {
		args = append(args, "--device", d)
	}
	res = runStoreCommand(t, args...)
	require.Zero(t, res.code, "%s\n%s", res.stdout, res.stderr)
	sum = storetest.Summary(t, res.stdout, "scrub:")
	assert.EqualValues(t, storeStripes, sum["checked"])
	assert.Zero(t, sum["damaged"])
}
