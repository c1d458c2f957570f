package chunkstore

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// overwriteUnsynced fills a fresh volume of 64 stripes, then overwrites
// whole stripes at random, never calling Sync, and returns the store, the volume's expected
// content and the high-water mark of slots once the background committer
// has had its chance.
func overwriteUnsynced(t *testing.T, autoCommit, writes int) (*Store, []byte, Info) {
	t.Helper()
	const (
		unit    = 4096
		stripes = 64
	)
	g := Geometry{Data: 2, Parity: 1}
	td := newTestDevices(t, g.Devices())
	s := mustCreate(t, td, testOpts(g, unit, WithAutoCommit(autoCommit))...)
	t.Cleanup(func() { s.Close() })
	stripe := g.Data * unit
	v, err := s.CreateVolume("vol", int64(stripes*stripe))
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(7, 7))
	want := randBytes(r, stripes*stripe)
	_, err = v.WriteAt(want, 0) // every stripe mapped: one live slot each
	require.NoError(t, err)
	for i := range writes {
		off := r.IntN(stripes) * stripe
		p := randBytes(r, stripe)
		_, err := v.WriteAt(p, int64(off))
		require.NoError(t, err, "write %d", i)
		copy(want[off:], p)
	}
	got := make([]byte, len(want))
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the volume reads back as written")
	if autoCommit > 0 {
		// The last kick may still be committing.
		require.Eventually(t, func() bool { return s.alloc.waiting() < autoCommit }, 10*time.Second, time.Millisecond)
	}
	return s, want, s.Info()
}

// TestAutoCommitReclaimsOverwrittenSlots: a host that overwrites and never
// flushes must not grow the shard files without bound. Every overwrite of
// a whole stripe goes to a fresh slot of the log and releases the old
// one, which only a checkpoint makes reusable; the background committer
// checkpoints once 16 released slots wait.
func TestAutoCommitReclaimsOverwrittenSlots(t *testing.T) {
	const writes = 2000
	s, want, in := overwriteUnsynced(t, 16, writes)
	st := s.Stats()
	t.Logf("high-water %d slots, %d background commits", in.Slots, st.AutoCommits)
	require.Positive(t, st.AutoCommits, "the background committer ran")
	require.EqualValues(t, 64, in.SlotsInUse, "one live slot per stripe")
	// Without commits the high-water mark would be 64 + writes (see
	// TestAutoCommitOff). The writer runs on while a background commit is
	// in flight, until throttleFactor thresholds of released slots wait;
	// then it commits itself. A released slot is freed by the next
	// checkpoint and joins the log's reservation at the one after,
	// behind the s.resvHead slots the log may use meanwhile: up to twice
	// the throttle's count of slots wait to be written again.
	require.LessOrEqual(t, in.Slots, uint64(64+2*throttleFactor*16+s.resvHead+maxInflight), "slots ever handed out (high-water)")

	// What the background commits made durable is a consistent state:
	// after Close (which syncs) the store reopens with the same content
	// and every stripe verifies.
	requireClean(t, s)
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, len(want))
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
}

// TestAutoCommitOff shows what the committer prevents: with it off, every
// unsynced overwrite takes a slot that is never reused.
func TestAutoCommitOff(t *testing.T) {
	// Fewer writes than half the log's reservation, which would make a
	// checkpoint of its own.
	const writes = 400
	s, _, in := overwriteUnsynced(t, 0, writes)
	require.Zero(t, s.Stats().AutoCommits)
	require.EqualValues(t, 64+writes, in.Slots, "every overwrite took a new slot")
	require.NoError(t, s.Sync())
	require.EqualValues(t, 64, s.Info().SlotsInUse, "Sync freed the released slots")
}

func TestAutoCommitOptionChecked(t *testing.T) {
	_, err := buildOptions([]Option{WithAutoCommit(-1)})
	require.ErrorIs(t, err, ErrInvalidOption)
}
