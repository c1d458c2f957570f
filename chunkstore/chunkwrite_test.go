package chunkstore

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/stretchr/testify/require"
)

func readWhole(t testing.TB, s *Store, id ChunkID) []byte {
	t.Helper()
	n, err := s.ChunkSize(id)
	require.NoError(t, err)
	buf := make([]byte, n)
	got, err := s.ReadChunkAt(id, buf, 0)
	if err != io.EOF {
		require.NoError(t, err)
	}
	require.Equal(t, int(n), got)
	return buf
}

// TestWriteChunkAt: random writes at any alignment, growing and not,
// read back as a byte model says, before and after a reopen; a write
// makes the chunk when there is none; it writes only its own sectors.
func TestWriteChunkAt(t *testing.T) {
	td := newTestDevices(t, 3)
	opts := testOpts(Geometry{Data: 2, Parity: 1}, 4096)
	s := mustCreate(t, td, opts...)
	r := rand.New(rand.NewPCG(7, 7))
	id := NewChunkID()
	var model []byte
	for i := range 300 {
		off := r.IntN(len(model) + 9000)
		p := randBytes(r, 1+r.IntN(12000))
		before := s.Stats().HostBytes
		created, err := s.WriteChunkAt(id, p, int64(off), 0)
		require.NoError(t, err)
		require.Equal(t, i == 0, created)
		if end := off + len(p); end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], p)
		if i%50 == 0 {
			require.Equal(t, model, readWhole(t, s, id), "write %d", i)
		}
		sectors := (off+len(p)+SectorSize-1)/SectorSize - off/SectorSize
		require.LessOrEqual(t, s.Stats().HostBytes-before, int64(sectors+1)*SectorSize, "a write costs its own sectors")
	}
	require.Equal(t, model, readWhole(t, s, id))
	require.NoError(t, s.Sync())
	require.NoError(t, s.Close())
	s = mustOpen(t, td, opts...)
	defer s.Close()
	require.Equal(t, model, readWhole(t, s, id), "after a reopen")
	_, err := s.WriteChunkAt(id, []byte("x"), MaxChunkSize, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestWriteChunkAtStaleTail: bytes a crash left past a chunk's end (a
// growth whose length no checkpoint took, while the log holding them
// was flushed) read as zeros when a later write grows the chunk past
// them.
func TestWriteChunkAtStaleTail(t *testing.T) {
	td := newTestDevices(t, 3)
	opts := testOpts(Geometry{Data: 2, Parity: 1}, 4096)
	s := mustCreate(t, td, opts...)
	id := NewChunkID()
	_, err := s.WriteChunkAt(id, bytes.Repeat([]byte("a"), 100), 0, 0)
	require.NoError(t, err)
	v, err := s.CreateVolume("v", 1<<20) // a checkpoint: before the growth
	require.NoError(t, err)
	require.NoError(t, s.Sync())
	// A growth to 300 bytes: its sector reaches the log and is flushed
	// (a volume's FUA write flushes the log), but no checkpoint takes
	// the new length.
	_, err = s.WriteChunkAt(id, bytes.Repeat([]byte("b"), 200), 100, 0)
	require.NoError(t, err)
	_, err = v.WriteAtFlags(make([]byte, 4096), 0, FUA)
	require.NoError(t, err)
	td.clock.Crash() // power goes before Close could checkpoint
	_ = s.Close()
	td.crash()
	s = mustOpen(t, td, opts...)
	defer s.Close()
	require.Equal(t, bytes.Repeat([]byte("a"), 100), readWhole(t, s, id), "the growth was lost with its length")
	_, err = s.WriteChunkAt(id, []byte("c"), 250, 0)
	require.NoError(t, err)
	want := append(append(bytes.Repeat([]byte("a"), 100), make([]byte, 150)...), 'c')
	require.Equal(t, want, readWhole(t, s, id), "the bytes between the old end and the write are zeros")
}

// TestWritesFailWhenCheckpointsFail: when no checkpoint can complete
// (every device fails the probe before its replica is written, while
// stripe writes still work), the log runs out of reserved room; small
// writes that wait for that room fail with the checkpoint's error
// instead of waiting for ever.
func TestWritesFailWhenCheckpointsFail(t *testing.T) {
	td := newTestDevices(t, 3)
	opts := testOpts(Geometry{Data: 2, Parity: 1}, 4096, WithAutoCommit(1))
	s := mustCreate(t, td, opts...)
	defer s.Close()
	for _, inj := range td.inj {
		inj.Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpStat}, Path: identityFile})
	}
	// Aligned writes read nothing, so a writer meets the failure only
	// through the checkpoint it waits for; several of them are waiting
	// when it fails.
	const writers = 4
	p := bytes.Repeat([]byte("stuck? "), 8192/7+1)[:8192]
	done := make(chan error, writers)
	for range writers {
		go func() {
			id := NewChunkID()
			for i := range 1 << 20 {
				if _, err := s.WriteChunkAt(id, p, int64(i%64)*int64(len(p)), 0); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range writers {
		select {
		case err := <-done:
			t.Log(err)
			require.Error(t, err, "writes to a store that cannot checkpoint go on failing nothing")
			require.True(t, errors.Is(err, vfs.ErrInjected) || errors.Is(err, ErrTooManyFailures), "failed for another reason: %v", err)
		case <-time.After(time.Minute):
			t.Fatal("writes waiting for log room hang when checkpoints fail")
		}
	}
}
