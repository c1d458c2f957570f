package chunkstore

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// extended turns on the long runs: more seeds for the crash and fault
// tests. Set CHUNKSTORE_EXTENDED=1 or pass -chunkstore.extended.
var extendedFlag = flag.Bool("chunkstore.extended", false, "run the extended crash and fault tests (more seeds)")

func extended() bool { return *extendedFlag || os.Getenv("CHUNKSTORE_EXTENDED") != "" }

// seeds returns how many seeds a randomized test runs.
func seeds(normal, ext int) int {
	if extended() {
		return ext
	}
	if testing.Short() {
		return max(1, normal/4)
	}
	return normal
}

// hostDir returns a directory for bbolt's host files: tmpfs when the
// machine has one (bbolt fsyncs every commit), else the test's temp dir.
func hostDir(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "chunkstore-test-")
		if err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// testDevices is a set of in-memory devices sharing a crash clock.
type testDevices struct {
	t     testing.TB
	clock *vfs.CrashClock
	mem   []*vfs.MemFS
	inj   []*vfs.InjectFS
	hosts []string
	// direct: the store sees the MemFS devices themselves, which share
	// flushes and punch holes (vfs.SharedFlush, vfs.Puncher), instead of
	// the InjectFS wrappers, which do neither.
	direct bool
}

func newTestDevices(t testing.TB, n int) *testDevices {
	td := &testDevices{t: t, clock: vfs.NewCrashClock()}
	for i := range n {
		h := hostDir(t)
		td.hosts = append(td.hosts, h)
		m := vfs.NewMem(vfs.WithCrashClock(td.clock), vfs.WithHostDir(h), vfs.WithName("mem"+string(rune('0'+i))))
		td.mem = append(td.mem, m)
		td.inj = append(td.inj, vfs.NewInjectFS(m))
	}
	return td
}

// fs returns the devices as the store sees them.
func (td *testDevices) fs() []vfs.FS {
	out := make([]vfs.FS, len(td.inj))
	for i, f := range td.inj {
		out[i] = f
		if td.direct {
			out[i] = td.mem[i]
		}
	}
	return out
}

// crash simulates a power loss of every device: only synced data
// survives. The devices afterwards have a fresh clock.
func (td *testDevices) crash() {
	td.clock.Crash()
	td.clock = vfs.NewCrashClock()
	for i, m := range td.mem {
		after := m.Crash(vfs.WithCrashClock(td.clock))
		td.mem[i] = after
		td.inj[i] = vfs.NewInjectFS(after)
	}
}

// replace swaps device i for an empty one (a new disk in the slot).
func (td *testDevices) replace(i int) {
	td.mem[i].Vanish()
	h := hostDir(td.t)
	td.hosts[i] = h
	td.mem[i] = vfs.NewMem(vfs.WithCrashClock(td.clock), vfs.WithHostDir(h), vfs.WithName("new"+string(rune('0'+i))))
	td.inj[i] = vfs.NewInjectFS(td.mem[i])
}

func testOpts(g Geometry, unit int, extra ...Option) []Option {
	return append([]Option{WithGeometry(g), WithStripeUnit(unit)}, extra...)
}

func mustCreate(t testing.TB, td *testDevices, opts ...Option) *Store {
	t.Helper()
	s, err := Create(td.fs(), opts...)
	require.NoError(t, err)
	return s
}

func mustOpen(t testing.TB, td *testDevices, opts ...Option) *Store {
	t.Helper()
	s, err := Open(td.fs(), opts...)
	require.NoError(t, err)
	return s
}

// requireClean checks that every stripe verifies (headers, sector
// checksums, and parity against data) and that the maps agree with the
// stripes' summaries.
func requireClean(t testing.TB, s *Store) {
	t.Helper()
	require.NoError(t, s.checkMap())
	rep, err := s.Scrub(context.Background(), ScrubOptions{NoRepair: true})
	require.NoError(t, err)
	require.Zero(t, rep.Damaged, "damaged stripes: %+v", rep.Problems)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}
