package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// The load case runs the block and the file service of one target at
// once, for a bounded time, and checks every byte afterwards.
const (
	// loadDuration is how long new work starts; the fio run and the file
	// step under way then finish, so the load lasts a little longer.
	loadDuration = 15 * time.Second
	// loadNBDJobs is the number of fio jobs, each on its own NBD
	// connection and its own share of the loaded range.
	loadNBDJobs = 16
	// fileSlots is the number of files each FUSE mount's workload keeps;
	// a step creates one anew or patches it.
	fileSlots = 6
	// maxLoadFile bounds a file's size when it is created anew.
	maxLoadFile = 2 << 20
	// maxLoadPiece bounds a single write of the file workload.
	maxLoadPiece = 256 << 10
)

// loadBlockSizes are the fio block sizes of successive runs: each run
// writes its range with blocks of another size than the run before, so
// a block the target failed to write would still hold the earlier run's
// block and fail verification, not pass as an identical copy.
var loadBlockSizes = []string{"16k", "64k", "32k"}

// TestLoadNBDAndFUSE serves an erasure-coded namespace and the file
// namespace from one target and loads both at once for loadDuration:
// fio writes through one NBD bridge (over tcp://) on 16 connections,
// each job its own share of the range, and verifies every block at the
// end of each run, run after run; meanwhile two FUSE mounts of the same
// target (over shm:// and iwarp://) each create and patch files with
// random sizes and offsets, and after each close read the file whole
// through the other mount. When the load is over, everything is checked
// again: fio reads back every block of its last run, and every file
// matches its sha256 through both mounts.
func TestLoadNBDAndFUSE(t *testing.T) {
	prereq.Tool(t, "fio")
	prereq.FUSE(t)
	tgt, shm, iwarp := startFileTarget(t, t.TempDir(), "--nqn", nbdNQN, "--listen", "tcp://127.0.0.1:0")
	tcp := listenerWithScheme(t, tgt, "tcp://")
	bridge, uri := startBridge(t, tcp, nbdNQN, "127.0.0.1:0", "")
	mounts := [2]*fuseMount{mountFUSE(t, shm, "--nqn", nbdNQN), mountFUSE(t, iwarp, "--nqn", nbdNQN)}
	defer func() {
		if t.Failed() {
			t.Logf("target stderr:\n%s\nbridge stderr:\n%s\nmount 0 stderr:\n%s\nmount 1 stderr:\n%s",
				tgt.stderr, bridge.stderr, mounts[0].stderr, mounts[1].stderr)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), loadDuration)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // the workloads end before the mounts are stopped
	loads := [2]*fileLoad{}
	errs := make([]error, 2)
	for i, m := range mounts {
		loads[i] = &fileLoad{write: m, read: mounts[1-i], prefix: fmt.Sprintf("m%d-", i),
			r: rand.New(rand.NewPCG(uint64(i), 77)), files: map[string][]byte{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = loads[i].run(ctx)
		}()
	}

	// fio runs on this goroutine (its helpers may fail the test), one run
	// after another while the load lasts.
	var bs string
	var fioErr error
	runs := 0
	for ctx.Err() == nil {
		bs = loadBlockSizes[runs%len(loadBlockSizes)]
		start := time.Now()
		out, err := startLoadOn(t, uri, loadNBDJobs, bs, true)()
		runs++
		t.Logf("fio run %d, bs %s: %v", runs, bs, time.Since(start).Round(time.Millisecond))
		if err != nil {
			fioErr = fmt.Errorf("fio run %d (bs %s) on %d connections: %w\n%s", runs, bs, loadNBDJobs, err, out)
			break
		}
	}
	cancel()
	wg.Wait()
	require.NoError(t, fioErr)
	for i, err := range errs {
		require.NoError(t, err, "file workload through mount %d", i)
	}
	t.Logf("%d fio runs; file steps: %d and %d", runs, loads[0].steps, loads[1].steps)
	require.Positive(t, loads[0].steps)
	require.Positive(t, loads[1].steps)

	verifyLoaded(t, uri, loadNBDJobs, bs)
	for i, l := range loads {
		require.NotEmpty(t, l.files)
		for name, want := range l.files {
			sum := sha256.Sum256(want)
			for j, m := range mounts {
				require.Equal(t, hex.EncodeToString(sum[:]), fileSHA256(t, m.path(name)),
					"%s (%d bytes, written through mount %d) read through mount %d", name, len(want), i, j)
			}
		}
	}
}

// listenerWithScheme returns the target's listener URL that begins with
// scheme, from its ready line.
func listenerWithScheme(t *testing.T, d *daemon, scheme string) string {
	t.Helper()
	for _, l := range strings.Split(field(d.ready, "listeners"), ",") {
		if strings.HasPrefix(l, scheme) {
			return l
		}
	}
	t.Fatalf("no %s listener in %q", scheme, d.ready)
	return ""
}

// verifyLoaded reads back every block the last startLoadOn(t, uri, jobs,
// bs, true) wrote and checks it: a verify-only run over the same layout
// (startLoadRunning's: the loaded range in jobs equal shares, seed 12).
func verifyLoaded(t *testing.T, uri string, jobs int, bs string) {
	t.Helper()
	share := fmt.Sprintf("%dk", 32<<10/jobs)
	fioRun(t, uri, "loaded", "--offset=16m --size="+share+" --offset_increment="+share, "--rw=randwrite", "--bs="+bs,
		"--iodepth=16", fmt.Sprintf("--numjobs=%d", jobs), "--randseed=12", "--verify_only=1")
}

// fileLoad is one FUSE mount's file workload: it writes its files
// through write and reads each back through read after close, keeping
// what every file must hold. It does not touch the test, so it may run
// on its own goroutine; run's error says what went wrong.
type fileLoad struct {
	write, read *fuseMount
	prefix      string // of the file names, which no other workload uses
	r           *rand.Rand
	files       map[string][]byte // name -> the contents it must have
	steps       int
}

// run takes steps until ctx ends or one fails.
func (l *fileLoad) run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := l.step(); err != nil {
			return fmt.Errorf("step %d: %w", l.steps, err)
		}
		l.steps++
	}
	return nil
}

// step picks one of the workload's files and either writes it anew (a
// random size, written in pieces of random sizes in random order) or
// patches it (a piece at a random offset, possibly past the end, which
// leaves a hole that reads as zeros). After close it reads the whole
// file through the other mount.
func (l *fileLoad) step() error {
	name := fmt.Sprintf("%s%d", l.prefix, l.r.IntN(fileSlots))
	want, ok := l.files[name]
	type piece struct{ off, n int }
	var pieces []piece
	flags := os.O_WRONLY
	if !ok || l.r.IntN(4) == 0 {
		want = make([]byte, 1+l.r.IntN(maxLoadFile))
		for off := 0; off < len(want); {
			n := min(len(want)-off, 1+l.r.IntN(maxLoadPiece))
			pieces = append(pieces, piece{off, n})
			off += n
		}
		l.r.Shuffle(len(pieces), func(i, j int) { pieces[i], pieces[j] = pieces[j], pieces[i] })
		flags |= os.O_CREATE | os.O_TRUNC
	} else {
		p := piece{l.r.IntN(len(want) + maxLoadPiece/2), 1 + l.r.IntN(maxLoadPiece)}
		if end := p.off + p.n; end > len(want) {
			want = append(want, make([]byte, end-len(want))...)
		}
		pieces = []piece{p}
	}
	for _, p := range pieces {
		for i := range want[p.off : p.off+p.n] {
			want[p.off+i] = byte(l.r.Uint32())
		}
	}
	f, err := os.OpenFile(l.write.path(name), flags, 0o644)
	if err != nil {
		return err
	}
	for _, p := range pieces {
		if _, err := f.WriteAt(want[p.off:p.off+p.n], int64(p.off)); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	l.files[name] = want
	got, err := os.ReadFile(l.read.path(name))
	if err != nil {
		return fmt.Errorf("%s through the other mount after close: %w", name, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s through the other mount after close: %d bytes, want %d, first difference at %d",
			name, len(got), len(want), firstDifference(got, want))
	}
	return nil
}

// firstDifference is the first offset at which a and b differ.
func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
