package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/storetest"
)

// The test store (package internal/storetest): a 1 MiB volume, 64
// stripes, and the chunk.
const (
	testVolSize = 1 << 20
	testStripes = testVolSize/storetest.StripeData + storetest.ChunkStripes
)

// storeApp is a cli.App with the store commands, as main.go builds it.
func storeApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "target",
		Writer:    stdout,
		ErrWriter: stderr,
		Commands:  []*cli.Command{scrubCommand(), repairCommand(), migrateCommand()},
		// The exit status is read from the returned error; the default
		// handler would exit the test binary.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// cliRun is one in-process run of the app.
type cliRun struct {
	stdout, stderr string
	err            error
}

// code is the exit status main would give.
func (r cliRun) code() int {
	var ec cli.ExitCoder
	switch {
	case r.err == nil:
		return 0
	case errors.As(r.err, &ec):
		return ec.ExitCode()
	}
	return 1
}

// summary parses the summary line, the last on stdout, which begins with
// prefix ("scrub:", "repair:").
func (r cliRun) summary(t *testing.T, prefix string) map[string]int64 {
	t.Helper()
	return storetest.Summary(t, r.stdout, prefix)
}

func runCLI(ctx context.Context, stderr io.Writer, args ...string) cliRun {
	var out, errOut bytes.Buffer
	w := io.Writer(&errOut)
	if stderr != nil {
		w = io.MultiWriter(&errOut, stderr)
	}
	err := storeApp(&out, w).RunContext(ctx, append([]string{"target"}, args...))
	return cliRun{stdout: out.String(), stderr: errOut.String(), err: err}
}

func run(args ...string) cliRun { return runCLI(context.Background(), nil, args...) }

// cancelOnWrite cancels a context when a line containing match is written
// through it: an interrupt at a point the output shows.
type cancelOnWrite struct {
	match  string
	cancel context.CancelFunc
	mu     sync.Mutex
	seen   int
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(p, []byte(w.match)) {
		w.seen++
		w.cancel()
	}
	return len(p), nil
}

// corruptSlots flips bytes in one shard of each of n distinct random
// slots and returns the slots.
func corruptSlots(t *testing.T, r *rand.Rand, dirs []string, n int) []int {
	t.Helper()
	slots := r.Perm(testStripes)[:n]
	for _, slot := range slots {
		storetest.FlipShard(t, r, dirs[r.IntN(len(dirs))], slot)
	}
	return slots
}

func TestScrubFlags(t *testing.T) {
	data := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no store named", nil, "--data DIR"},
		{"bad ec", []string{"--data", data, "--ec", "4-2"}, "bad --ec"},
		{"no data shards", []string{"--data", data, "--ec", "0+2"}, "bad --ec"},
		{"devices do not match ec", []string{"--device", data + "/a", "--device", data + "/b", "--ec", "2+1"}, "needs 3 --device"},
		{"empty device", []string{"--device", ""}, "--device needs a directory"},
		{"bad rate", []string{"--data", data, "--rate", "fast"}, "bad --rate"},
		{"negative rate", []string{"--data", data, "--rate", "-5MiB"}, "bad --rate"},
		{"stray argument", []string{"--data", data, "now"}, "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(append([]string{"scrub"}, tc.args...)...)
			require.Error(t, r.err)
			assert.Equal(t, exitUsage, r.code(), r.err.Error())
			assert.Contains(t, r.err.Error(), tc.want)
		})
	}
	ents, err := os.ReadDir(data)
	require.NoError(t, err)
	assert.Empty(t, ents, "bad flags touch nothing")

	// A directory without a store is an error, and scrub creates nothing.
	r := run("scrub", "--data", data)
	require.Error(t, r.err)
	assert.Equal(t, 1, r.code())
	assert.ErrorIs(t, r.err, chunkstore.ErrNoStore)
	assert.Contains(t, r.err.Error(), "is --data (or --device) right?")
	ents, err = os.ReadDir(data)
	require.NoError(t, err)
	assert.Empty(t, ents, "scrub never creates a store")
}

func TestScrubRepairsCorruptShards(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 1)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	slots := corruptSlots(t, r, dirs, 10)

	res := run("scrub", "--data", data, "--rate", "512MiB/s")
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	sum := res.summary(t, "scrub:")
	assert.EqualValues(t, testStripes, sum["checked"])
	assert.EqualValues(t, len(slots), sum["damaged"], "one damaged stripe per corrupted slot")
	assert.EqualValues(t, len(slots), sum["repaired"])
	assert.EqualValues(t, len(slots), sum["shards_repaired"])
	assert.Zero(t, sum["unrecoverable"])
	assert.Zero(t, sum["degraded"])
	assert.EqualValues(t, 1, sum["complete"])
	assert.Equal(t, len(slots), strings.Count(res.stdout, "damaged: "), "each damaged stripe is named")
	assert.Contains(t, res.stderr, "scrub: 1/67 stripes", "progress lines when stderr is not a terminal")

	stats := td.Verify(t, dirs)
	assert.Zero(t, stats.Reconstructions, "the repaired shards are on disk: reads need no reconstruction")

	res = run("scrub", "--data", data)
	require.NoError(t, res.err)
	sum = res.summary(t, "scrub:")
	assert.EqualValues(t, testStripes, sum["checked"])
	assert.Zero(t, sum["damaged"], "a second scrub finds nothing")
}

func TestScrubNoRepair(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 3)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	slots := corruptSlots(t, rand.New(rand.NewPCG(3, 3)), dirs, 3)

	res := run("scrub", "--data", data, "--no-repair")
	require.NoError(t, res.err)
	sum := res.summary(t, "scrub:")
	assert.EqualValues(t, len(slots), sum["damaged"])
	assert.Zero(t, sum["repaired"])
	assert.Zero(t, sum["shards_repaired"])

	res = run("scrub", "--data", data)
	require.NoError(t, res.err)
	assert.EqualValues(t, len(slots), res.summary(t, "scrub:")["repaired"], "--no-repair left them for this run")
	td.Verify(t, dirs)
}

// volumeProblem matches a scrub line about a damaged volume stripe.
var volumeProblem = regexp.MustCompile(`damaged: volume "vol" stripe (\d+), bad shards on devices \[[0-9 ]+\]: unrecoverable`)

func TestScrubUnrecoverable(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 4)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	r := rand.New(rand.NewPCG(4, 4))
	// M+1 = 3 bad shards of one stripe are past what parity covers;
	// another stripe has one bad shard, which is repaired.
	lost := r.IntN(testStripes)
	for _, d := range r.Perm(len(dirs))[:3] {
		storetest.FlipShard(t, r, dirs[d], lost)
	}
	storetest.FlipShard(t, r, dirs[0], (lost+1)%testStripes)

	res := run("scrub", "--data", data)
	require.Error(t, res.err)
	assert.Equal(t, exitUnrecoverable, res.code(), "%v", res.err)
	assert.Contains(t, res.err.Error(), "1 stripe is unrecoverable")
	sum := res.summary(t, "scrub:")
	assert.EqualValues(t, testStripes, sum["checked"])
	assert.EqualValues(t, 2, sum["damaged"])
	assert.EqualValues(t, 1, sum["repaired"])
	assert.EqualValues(t, 1, sum["unrecoverable"])

	// The lost stripe fails to read (never wrong bytes); the rest is intact.
	s, err := chunkstore.OpenDirs(dirs)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	stripe := -1
	if m := volumeProblem.FindStringSubmatch(res.stdout); m != nil {
		stripe, err = strconv.Atoi(m[1])
		require.NoError(t, err)
	}
	const stripeBytes = 4 * storetest.Unit
	for i := range testVolSize / stripeBytes {
		got := make([]byte, stripeBytes)
		_, err := v.ReadAt(got, int64(i*stripeBytes))
		if i == stripe {
			assert.True(t, chunkstore.IsUnavailable(err), "stripe %d: %v", i, err)
			continue
		}
		require.NoError(t, err, "stripe %d", i)
		require.True(t, bytes.Equal(td.Vol[i*stripeBytes:(i+1)*stripeBytes], got), "stripe %d", i)
	}
	chunk, err := s.GetChunk(td.Chunk)
	if stripe < 0 {
		assert.Contains(t, res.stdout, "damaged: chunk "+td.Chunk.String())
		assert.True(t, chunkstore.IsUnavailable(err), "the lost stripe is the chunk's: %v", err)
	} else {
		require.NoError(t, err)
		assert.True(t, bytes.Equal(td.ChunkData, chunk))
	}
}

func TestScrubDegraded(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 5)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	require.NoError(t, os.RemoveAll(dirs[5]))
	slots := corruptSlots(t, rand.New(rand.NewPCG(5, 5)), dirs[:5], 4)

	// The devices named one by one, as after a repair onto another directory.
	args := []string{"scrub", "--ec", "4+2"}
	for _, d := range dirs {
		args = append(args, "--device", d)
	}
	res := run(args...)
	require.NoError(t, res.err, "%s\n%s", res.stdout, res.stderr)
	sum := res.summary(t, "scrub:")
	assert.EqualValues(t, testStripes, sum["checked"])
	assert.EqualValues(t, testStripes, sum["damaged"], "every stripe has a shard on the missing device")
	assert.EqualValues(t, testStripes, sum["degraded"])
	assert.Zero(t, sum["unrecoverable"])
	assert.Positive(t, sum["shards_repaired"], "shards on the devices present are repaired")
	assert.Equal(t, len(slots), strings.Count(res.stdout, "damaged: "),
		"the listing leaves out stripes damaged only by the missing device:\n%s", res.stdout)
	assert.Contains(t, res.stdout, fmt.Sprintf("scrub: %d more damaged stripes not listed", testStripes-len(slots)))
	assert.Contains(t, res.stderr, "device 5 ("+dirs[5]+") is missing")
	assert.Contains(t, res.stderr, "target repair")
	td.Verify(t, dirs)
}

func TestScrubInterrupted(t *testing.T) {
	data := t.TempDir()
	storetest.Make(t, data, testVolSize, 6)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := runCLI(ctx, &cancelOnWrite{match: "stripes (", cancel: cancel}, "scrub", "--data", data)
	require.Error(t, res.err)
	assert.ErrorIs(t, res.err, context.Canceled)
	assert.Equal(t, 1, res.code())
	sum := res.summary(t, "scrub:")
	assert.Zero(t, sum["complete"])
	assert.Less(t, sum["checked"], int64(testStripes))
}

func TestScrubGeometryHint(t *testing.T) {
	data := t.TempDir()
	storetest.Make(t, data, testVolSize, 7)
	res := run("scrub", "--data", data, "--ec", "2+1")
	require.Error(t, res.err)
	assert.Equal(t, exitUsage, res.code(), "an --ec that is not the store's is a bad flag")
	assert.ErrorIs(t, res.err, chunkstore.ErrGeometryMismatch)
	assert.Equal(t, "--ec 2+1: the store is 4+2; --ec must be the store's geometry (leave it out to take the store's own)", res.err.Error())
}

func TestScrubStoreInUse(t *testing.T) {
	data := t.TempDir()
	storetest.Make(t, data, testVolSize, 8)
	s, err := chunkstore.OpenDirs(chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	res := run("scrub", "--data", data)
	require.Error(t, res.err)
	assert.Equal(t, 1, res.code())
	assert.ErrorIs(t, res.err, chunkstore.ErrDeviceBusy)
	assert.Contains(t, res.err.Error(), "stop `target serve`")
}
