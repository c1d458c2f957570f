package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/chunkstore"
)

// The test store: 4+2 with a 4 KiB stripe unit, so a stripe holds 16 KiB
// of data and a slot is 8 KiB on each device.
const (
	testUnit      = 4096
	testSlot      = 4096 + testUnit // header region + payload
	testVolSize   = 1 << 20         // 64 stripes
	testChunkSize = 3 * 4 * testUnit
	testStripes   = testVolSize/(4*testUnit) + testChunkSize/(4*testUnit)
)

var testGeo = chunkstore.DefaultGeometry

// storeApp is a cli.App with the store commands, as main.go builds it.
func storeApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "target",
		Writer:    stdout,
		ErrWriter: stderr,
		Commands:  []*cli.Command{scrubCommand(), repairCommand()},
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

// summary parses the key=value fields of the last stdout line that begins
// with prefix ("scrub:", "repair:").
func (r cliRun) summary(t *testing.T, prefix string) map[string]int64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, prefix), "the last stdout line is the summary:\n%s", r.stdout)
	m := map[string]int64{}
	for _, f := range strings.Fields(strings.TrimPrefix(last, prefix)) {
		k, v, ok := strings.Cut(f, "=")
		require.True(t, ok, "field %q of %q", f, last)
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

// testData is what a test store holds.
type testData struct {
	vol   []byte
	chunk chunkstore.ChunkID
	data  []byte
}

// makeStore creates a 4+2 store on data's default device directories
// through the library: a fully written volume "vol" and one chunk, all in
// full stripes, in slots 0 … testStripes-1.
func makeStore(t *testing.T, data string, seed uint64) testData {
	t.Helper()
	s, err := chunkstore.CreateDirs(chunkstore.DeviceDirs(data, testGeo), chunkstore.WithStripeUnit(testUnit))
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(seed, seed))
	td := testData{vol: randBytes(r, testVolSize), chunk: chunkstore.NewChunkID(), data: randBytes(r, testChunkSize)}
	v, err := s.CreateVolume("vol", testVolSize)
	require.NoError(t, err)
	_, err = v.WriteAt(td.vol, 0)
	require.NoError(t, err)
	require.NoError(t, s.PutChunk(td.chunk, td.data, 0))
	require.NoError(t, s.Sync())
	in := s.Info()
	require.EqualValues(t, testStripes, in.SlotsInUse)
	require.Equal(t, in.SlotsInUse, in.Slots, "every slot handed out is in use, so every slot below it is live")
	require.NoError(t, s.Close())
	return td
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// verifyStore opens the store on dirs and requires every byte to read
// back as written; it returns the store's stats after the reads.
func verifyStore(t *testing.T, dirs []string, td testData) chunkstore.Stats {
	t.Helper()
	s, err := chunkstore.OpenDirs(dirs)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, testVolSize)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(td.vol, got), "the volume reads back as written")
	chunk, err := s.GetChunk(td.chunk)
	require.NoError(t, err)
	require.True(t, bytes.Equal(td.data, chunk), "the chunk reads back as written")
	return s.Stats()
}

// flipShardBytes flips 1 to 3 random bytes of one shard: in its payload,
// or one in the checksummed part of its header.
func flipShardBytes(t *testing.T, r *rand.Rand, devDir string, slot int) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(devDir, "shards"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	offs := []int64{int64(slot*testSlot) + int64(r.IntN(64))} // header fields before the sector checksums
	if r.IntN(4) != 0 {
		offs = offs[:0]
		for range 1 + r.IntN(3) {
			offs = append(offs, int64(slot*testSlot+4096+r.IntN(testUnit)))
		}
	}
	for _, off := range offs {
		b := []byte{0}
		_, err := f.ReadAt(b, off)
		require.NoError(t, err)
		b[0] ^= byte(1 + r.IntN(255))
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
	}
}

// corruptSlots flips bytes in one shard of each of n distinct random
// slots and returns the slots.
func corruptSlots(t *testing.T, r *rand.Rand, dirs []string, n int) []int {
	t.Helper()
	slots := r.Perm(testStripes)[:n]
	for _, slot := range slots {
		flipShardBytes(t, r, dirs[r.IntN(len(dirs))], slot)
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
	td := makeStore(t, data, 1)
	dirs := chunkstore.DeviceDirs(data, testGeo)
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

	stats := verifyStore(t, dirs, td)
	assert.Zero(t, stats.Reconstructions, "the repaired shards are on disk: reads need no reconstruction")

	res = run("scrub", "--data", data)
	require.NoError(t, res.err)
	sum = res.summary(t, "scrub:")
	assert.EqualValues(t, testStripes, sum["checked"])
	assert.Zero(t, sum["damaged"], "a second scrub finds nothing")
}

func TestScrubNoRepair(t *testing.T) {
	data := t.TempDir()
	td := makeStore(t, data, 3)
	dirs := chunkstore.DeviceDirs(data, testGeo)
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
	verifyStore(t, dirs, td)
}

// volumeProblem matches a scrub line about a damaged volume stripe.
var volumeProblem = regexp.MustCompile(`damaged: volume "vol" stripe (\d+), bad shards on devices \[[0-9 ]+\]: unrecoverable`)

func TestScrubUnrecoverable(t *testing.T) {
	data := t.TempDir()
	td := makeStore(t, data, 4)
	dirs := chunkstore.DeviceDirs(data, testGeo)
	r := rand.New(rand.NewPCG(4, 4))
	// M+1 = 3 bad shards of one stripe are past what parity covers;
	// another stripe has one bad shard, which is repaired.
	lost := r.IntN(testStripes)
	for _, d := range r.Perm(len(dirs))[:3] {
		flipShardBytes(t, r, dirs[d], lost)
	}
	flipShardBytes(t, r, dirs[0], (lost+1)%testStripes)

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
	const stripeBytes = 4 * testUnit
	for i := range testVolSize / stripeBytes {
		got := make([]byte, stripeBytes)
		_, err := v.ReadAt(got, int64(i*stripeBytes))
		if i == stripe {
			assert.True(t, chunkstore.IsUnavailable(err), "stripe %d: %v", i, err)
			continue
		}
		require.NoError(t, err, "stripe %d", i)
		require.True(t, bytes.Equal(td.vol[i*stripeBytes:(i+1)*stripeBytes], got), "stripe %d", i)
	}
	chunk, err := s.GetChunk(td.chunk)
	if stripe < 0 {
		assert.Contains(t, res.stdout, "damaged: chunk "+td.chunk.String())
		assert.True(t, chunkstore.IsUnavailable(err), "the lost stripe is the chunk's: %v", err)
	} else {
		require.NoError(t, err)
		assert.True(t, bytes.Equal(td.data, chunk))
	}
}

func TestScrubDegraded(t *testing.T) {
	data := t.TempDir()
	td := makeStore(t, data, 5)
	dirs := chunkstore.DeviceDirs(data, testGeo)
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
	verifyStore(t, dirs, td)
}

func TestScrubInterrupted(t *testing.T) {
	data := t.TempDir()
	makeStore(t, data, 6)
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
	makeStore(t, data, 7)
	res := run("scrub", "--data", data, "--ec", "2+1")
	require.Error(t, res.err)
	assert.ErrorIs(t, res.err, chunkstore.ErrGeometryMismatch)
	assert.Contains(t, res.err.Error(), "--ec must be the store's geometry")
}

func TestScrubStoreInUse(t *testing.T) {
	data := t.TempDir()
	makeStore(t, data, 8)
	s, err := chunkstore.OpenDirs(chunkstore.DeviceDirs(data, testGeo))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	res := run("scrub", "--data", data)
	require.Error(t, res.err)
	assert.Equal(t, 1, res.code())
	assert.ErrorIs(t, res.err, chunkstore.ErrDeviceBusy)
	assert.Contains(t, res.err.Error(), "stop `target serve`")
}
