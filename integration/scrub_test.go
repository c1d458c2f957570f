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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
)

// The store these tests make: 4+2 with a 4 KiB stripe unit (16 KiB of
// data per stripe, an 8 KiB slot per device), a 2 MiB volume and a chunk
// of three stripes, in slots 0 … storeStripes-1.
const (
	storeUnit    = 4096
	storeSlot    = 4096 + storeUnit
	storeVolSize = 2 << 20
	storeChunk   = 3 * 4 * storeUnit
	storeStripes = storeVolSize/(4*storeUnit) + storeChunk/(4*storeUnit)
)

// requireStoreCommands skips the test when bin/target lacks the scrub and
// repair commands. It asks `target help CMD`: with a command missing,
// `target CMD --help` would run the default action (the perf responder)
// instead of saying so.
func requireStoreCommands(t *testing.T) {
	t.Helper()
	for _, cmd := range []string{"scrub", "repair"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "target"), "help", cmd).CombinedOutput()
		cancel()
		if strings.Contains(string(out), "No help topic for '"+cmd+"'") {
			t.Skipf("bin/target has no %q command yet: cmd/target/main.go must list scrubCommand() and repairCommand() in its Commands", cmd)
		}
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

// summary returns the key=value fields of the last stdout line, which must
// begin with prefix.
func summary(t *testing.T, stdout, prefix string) map[string]int64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, prefix), "the last stdout line is the summary:\n%s", stdout)
	m := map[string]int64{}
	for _, f := range strings.Fields(strings.TrimPrefix(last, prefix)) {
		k, v, _ := strings.Cut(f, "=")
		switch v {
		case "true":
			m[k] = 1
		case "false":
			m[k] = 0
		default:
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "field %q of %q", f, last)
			m[k] = n
		}
	}
	return m
}

type storeContent struct {
	vol   []byte
	chunk chunkstore.ChunkID
	data  []byte
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// makeStore creates the test store on data's default device directories.
func makeStore(t *testing.T, data string, seed uint64) storeContent {
	t.Helper()
	s, err := chunkstore.CreateDirs(chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry), chunkstore.WithStripeUnit(storeUnit))
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(seed, seed))
	c := storeContent{vol: randBytes(r, storeVolSize), chunk: chunkstore.NewChunkID(), data: randBytes(r, storeChunk)}
	v, err := s.CreateVolume("vol", storeVolSize)
	require.NoError(t, err)
	_, err = v.WriteAt(c.vol, 0)
	require.NoError(t, err)
	require.NoError(t, s.PutChunk(c.chunk, c.data, 0))
	require.NoError(t, s.Sync())
	in := s.Info()
	require.EqualValues(t, storeStripes, in.SlotsInUse)
	require.Equal(t, in.SlotsInUse, in.Slots, "slots 0 … SlotsInUse-1 are all live")
	require.NoError(t, s.Close())
	return c
}

// verifyStore requires the data to read back as written and returns the
// store's stats after the reads.
func verifyStore(t *testing.T, dirs []string, c storeContent) chunkstore.Stats {
	t.Helper()
	s, err := chunkstore.OpenDirs(dirs)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, storeVolSize)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(c.vol, got), "the volume reads back as written")
	chunk, err := s.GetChunk(c.chunk)
	require.NoError(t, err)
	require.True(t, bytes.Equal(c.data, chunk), "the chunk reads back as written")
	return s.Stats()
}

// flipPayloadBytes flips 1 to 3 random payload bytes of one shard.
func flipPayloadBytes(t *testing.T, r *rand.Rand, devDir string, slot int) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(devDir, "shards"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	for range 1 + r.IntN(3) {
		off := int64(slot*storeSlot + 4096 + r.IntN(storeUnit))
		b := []byte{0}
		_, err := f.ReadAt(b, off)
		require.NoError(t, err)
		b[0] ^= byte(1 + r.IntN(255))
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
	}
}

// TestScrubBinary corrupts shard files on disk and runs `target scrub`.
func TestScrubBinary(t *testing.T) {
	requireStoreCommands(t)
	data := t.TempDir()
	c := makeStore(t, data, 1)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	slots := r.Perm(storeStripes)[:12]
	for _, slot := range slots {
		flipPayloadBytes(t, r, dirs[r.IntN(len(dirs))], slot)
	}

	res := runStoreCommand(t, "scrub", "--data", data)
	require.Zero(t, res.code, "%s\n%s", res.stdout, res.stderr)
	sum := summary(t, res.stdout, "scrub:")
	assert.EqualValues(t, storeStripes, sum["checked"])
	assert.EqualValues(t, len(slots), sum["damaged"])
	assert.EqualValues(t, len(slots), sum["repaired"])
	assert.Zero(t, sum["unrecoverable"])
	assert.EqualValues(t, 1, sum["complete"])
	stats := verifyStore(t, dirs, c)
	assert.Zero(t, stats.Reconstructions, "the repairs are on disk")

	// Three bad shards of one stripe are one more than parity covers.
	lost := r.IntN(storeStripes)
	for _, d := range r.Perm(len(dirs))[:3] {
		flipPayloadBytes(t, r, dirs[d], lost)
	}
	res = runStoreCommand(t, "scrub", "--data", data)
	assert.Equal(t, 3, res.code, "exit status 3: unrecoverable\n%s", res.stderr)
	assert.Contains(t, res.stderr, "1 stripe is unrecoverable")
	sum = summary(t, res.stdout, "scrub:")
	assert.EqualValues(t, 1, sum["damaged"])
	assert.EqualValues(t, 1, sum["unrecoverable"])
}

// TestRepairBinary deletes a device directory, rebuilds it into a new one
// with `target repair`, interrupts it with SIGINT, and runs it again.
func TestRepairBinary(t *testing.T) {
	requireStoreCommands(t)
	data := t.TempDir()
	c := makeStore(t, data, 2)
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
	first := summary(t, out.String(), "repair:")
	assert.Zero(t, first["complete"])
	require.Positive(t, first["rebuilt"])
	require.Less(t, first["rebuilt"], int64(storeStripes))

	res := runStoreCommand(t, "repair", "--data", data, "--device", newDir)
	require.Zero(t, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stderr, "resuming the rebuild of device 3")
	sum := summary(t, res.stdout, "repair:")
	assert.EqualValues(t, 3, sum["device"])
	assert.EqualValues(t, 1, sum["complete"])
	assert.Equal(t, first["rebuilt"], sum["skipped"], "the stripes done before the interrupt are not done again")
	assert.EqualValues(t, storeStripes, sum["rebuilt"]+sum["skipped"])
	assert.Zero(t, sum["unrecoverable"])

	dirs[3] = newDir
	stats := verifyStore(t, dirs, c)
	assert.Zero(t, stats.Reconstructions, "every shard is in place")
	args := []string{"scrub"}
	for _, d := range dirs {
		args = append(args, "--device", d)
	}
	res = runStoreCommand(t, args...)
	require.Zero(t, res.code, "%s\n%s", res.stdout, res.stderr)
	sum = summary(t, res.stdout, "scrub:")
	assert.EqualValues(t, storeStripes, sum["checked"])
	assert.Zero(t, sum["damaged"])
}
