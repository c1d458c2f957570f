package server

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/fs/internal/proto"
)

// TestCrash runs random file operations on devices that lose power at a
// random point (only synced data and metadata survive), reopens, and
// checks the recovery's promises: the namespace (names and sizes) is one
// that existed at or after the last completed sync, never a mix (the
// operation the crash cut may have happened or not); no file points at
// a chunk that was never written (every file reads whole), no chunk is
// left that no file owns and no space leaks (checkInvariants); files
// that were not touched after the last sync read exactly as then; and
// the file system keeps working.
// CAPFS_CRASH_SEEDS=N runs N seeds.
func TestCrash(t *testing.T) {
	n := 24
	if testing.Short() {
		n = 6
	}
	if os.Getenv("CAPFS_CRASH_SEEDS") != "" {
		n, _ = strconv.Atoi(os.Getenv("CAPFS_CRASH_SEEDS"))
	}
	for seed := range n {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCrash(t, uint64(seed)) })
	}
}

type crashFile struct {
	ino     uint64
	name    string
	data    []byte // current contents
	synced  []byte // contents at the last sync, nil if not synced since the last change
	h       uint64 // open handle, 0 if none
	removed bool
}

func runCrash(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0xf11e))
	d := newDevices(t)
	// Checkpoints in the background as soon as a slot is released: they
	// take whatever chunk records and staged metadata wait, between the
	// operations' own steps.
	d.opts = []chunkstore.Option{chunkstore.WithAutoCommit(1)}
	opt := testOptions()
	st, s := d.open(opt)
	var files []*crashFile
	live := func() []*crashFile {
		var out []*crashFile
		for _, f := range files {
			if !f.removed {
				out = append(out, f)
			}
		}
		return out
	}
	// snapshot is the namespace as the model has it: name → size.
	snapshot := func() map[string]int {
		m := map[string]int{}
		for _, f := range live() {
			m[f.name] = len(f.data)
		}
		return m
	}
	var (
		states  []map[string]int // after each operation that completed, from the last sync on
		touched string           // the name the running operation changes
	)
	step := func(i int) error {
		switch op := r.IntN(10); {
		case op < 2 || len(live()) == 0:
			name := fmt.Sprintf("f%d", i)
			touched = name
			a, h, err := s.create(rootCred, root, []byte(name), 0o644, 0, 0, 0)
			if err != nil {
				return err
			}
			f := &crashFile{ino: a.Ino, name: name, data: []byte{}}
			if r.IntN(2) == 0 {
				f.h = h
			} else if err := s.release(a.Ino, h); err != nil {
				return err
			}
			files = append(files, f)
		case op < 6:
			fs := live()
			f := fs[r.IntN(len(fs))]
			touched = f.name
			size := []int{10, 300, 5000, 20000, 70000}[r.IntN(5)]
			off := r.IntN(len(f.data) + 10000)
			p := make([]byte, size)
			for j := range p {
				p[j] = byte(r.Uint32()) | 1
			}
			f.synced = nil
			if _, err := s.write(rootCred, f.ino, int64(off), p, false); err != nil {
				return err
			}
			if end := off + size; end > len(f.data) {
				f.data = append(f.data, make([]byte, end-len(f.data))...)
			}
			copy(f.data[off:], p)
		case op < 7:
			fs := live()
			f := fs[r.IntN(len(fs))]
			touched = f.name
			size := r.IntN(len(f.data) + 20000)
			f.synced = nil
			if _, err := s.setAttr(rootCred, f.ino, &proto.SetAttr{Valid: proto.SetSize, Size: uint64(size)}); err != nil {
				return err
			}
			if size < len(f.data) {
				f.data = f.data[:size]
			} else {
				f.data = append(f.data, make([]byte, size-len(f.data))...)
			}
		case op < 8:
			fs := live()
			f := fs[r.IntN(len(fs))]
			touched = f.name
			f.removed = true
			if err := s.unlink(rootCred, root, []byte(f.name), false); err != nil {
				return err
			}
		default:
			touched = ""
			if err := s.Sync(); err != nil {
				return err
			}
			for _, f := range files {
				f.synced = append([]byte(nil), f.data...)
			}
			states = states[:0]
		}
		states = append(states, snapshot())
		return nil
	}
	for i := range 20 {
		require.NoError(t, step(i))
	}
	require.NoError(t, s.Sync())
	for _, f := range files {
		f.synced = append([]byte(nil), f.data...)
	}
	states = []map[string]int{snapshot()}
	d.clock.CrashAfter(r.Int64N(400))
	var err error
	for i := 20; i < 120 && err == nil; i++ {
		err = step(i)
	}
	if err == nil {
		touched = ""
	}
	t.Logf("workload ended: %v (after %d vfs operations)", err, d.clock.Ops())
	if err != nil {
		require.True(t, errors.Is(err, vfs.ErrCrashed) || errors.Is(err, chunkstore.ErrTooManyFailures) || chunkstore.IsUnavailable(err),
			"the workload failed for another reason: %v", err)
	}
	s.Close()
	_ = st.Close()
	d.crash()

	st, s = d.open(opt)
	defer st.Close()
	defer s.Close()
	checkInvariants(t, s)
	require.Zero(t, s.Stats().Handles)
	got := map[string]int{}
	names := []string{touched}
	for _, f := range files {
		names = append(names, f.name)
	}
	for _, name := range names {
		if a, err := s.lookup(rootCred, root, []byte(name)); err == nil {
			got[name] = int(a.Size)
		}
	}
	matched := false
	for _, st := range states {
		matched = matched || maps.Equal(st, got)
	}
	if !matched && touched != "" {
		// The operation the crash cut may have happened, wholly or in
		// part, on top of the last state: its file may be anything.
		last := maps.Clone(states[len(states)-1])
		g := maps.Clone(got)
		delete(last, touched)
		delete(g, touched)
		matched = maps.Equal(last, g)
	}
	require.True(t, matched, "after the crash the namespace is %v: not one from the last sync on (%v)", got, states)
	for _, f := range files {
		a, err := s.lookup(rootCred, root, []byte(f.name))
		if f.removed && err != nil {
			continue // its unlink may or may not have been durable: if not, it reads as synced
		}
		if f.synced == nil {
			continue // changed after the last sync: old, new or between, but readable (checked above)
		}
		require.NoError(t, err, "%s was synced", f.name)
		require.Equal(t, uint64(len(f.synced)), a.Size, f.name)
		got := make([]byte, len(f.synced))
		n, err := s.read(rootCred, a.Ino, 0, got)
		require.NoError(t, err)
		require.Equal(t, len(got), n)
		require.True(t, bytes.Equal(f.synced, got), "%s reads as at the last sync", f.name)
	}
	// It keeps working.
	a, h, err := s.create(rootCred, root, []byte("after"), 0o644, 0, 0, 0)
	require.NoError(t, err)
	p := bytes.Repeat([]byte("after the crash "), 2000)
	_, err = s.write(rootCred, a.Ino, 0, p, false)
	require.NoError(t, err)
	back := make([]byte, len(p))
	_, err = s.read(rootCred, a.Ino, 0, back)
	require.NoError(t, err)
	require.Equal(t, p, back)
	require.NoError(t, s.release(a.Ino, h))
	checkInvariants(t, s)
}
