package host

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stress drives random reads, writes, write-zeroes and discards at a
// fixed queue depth from Done callbacks, and checks every read against a
// shadow copy of the namespace. Requests in flight never overlap, so the
// shadow is exact: a write updates it when it completes, a read compares
// when it completes. Discarded blocks are zeros in the shadow when the
// namespace promises that, unknown (not compared until rewritten)
// otherwise.
type stress struct {
	t  testing.TB
	ns *Namespace
	bs int64

	mu        sync.Mutex // guards everything below
	rng       *rand.Rand
	shadow    []byte
	known     []bool // per block: the shadow is what the namespace holds
	busy      []bool // per block: a request in flight covers it
	left      int    // requests still to start
	inflight  int
	errs      []error
	counts    map[Op]int
	done      chan struct{}
	maxBlocks int64
}

func newStress(t testing.TB, ns *Namespace, seed uint64, requests int, maxBytes int64) *stress {
	n := ns.Size() / int64(ns.BlockSize())
	s := &stress{
		t: t, ns: ns, bs: int64(ns.BlockSize()),
		rng:    rand.New(rand.NewPCG(seed, seed^0x5bd1e995)),
		shadow: make([]byte, ns.Size()), known: make([]bool, n), busy: make([]bool, n),
		left: requests, counts: map[Op]int{}, done: make(chan struct{}),
		maxBlocks: maxBytes / int64(ns.BlockSize()),
	}
	return s
}

// pickLocked sets r up as a random request over blocks nobody else is
// using, or returns false when none is to start.
func (s *stress) pickLocked(r *Request, buf []byte) bool {
	if s.left == 0 {
		return false
	}
	nblocks := int64(len(s.busy))
	for {
		var size int64
		switch x := s.rng.IntN(100); {
		case x < 70:
			size = 1 + s.rng.Int64N(8)
		case x < 95:
			size = 1 + s.rng.Int64N(64)
		default:
			size = 1 + s.rng.Int64N(s.maxBlocks)
		}
		size = min(size, nblocks)
		start := s.rng.Int64N(nblocks - size + 1)
		free := true
		for b := start; b < start+size; b++ {
			if s.busy[b] {
				free = false
				break
			}
		}
		if !free {
			continue
		}
		for b := start; b < start+size; b++ {
			s.busy[b] = true
		}
		*r = Request{Done: r.Done, Tag: r.Tag}
		off, n := start*s.bs, size*s.bs
		switch x := s.rng.IntN(100); {
		case x < 40:
			r.Op, r.Offset, r.Buf = OpWrite, off, buf[:n]
			for i := range r.Buf {
				r.Buf[i] = byte(s.rng.Uint32())
			}
			r.FUA = s.rng.IntN(10) == 0
		case x < 80:
			// Reads need not be aligned: trim a few bytes off the ends.
			lo := s.rng.Int64N(min(n, 64))
			hi := n - s.rng.Int64N(min(n-lo, 64))
			r.Op, r.Offset, r.Buf = OpRead, off+lo, buf[lo:hi]
		case x < 90:
			r.Op, r.Offset, r.Length = OpWriteZeroes, off, n
		case x < 98:
			r.Op, r.Offset, r.Length = OpDiscard, off, n
		default:
			r.Op = OpFlush
			for b := start; b < start+size; b++ {
				s.busy[b] = false
			}
		}
		s.left--
		s.inflight++
		s.counts[r.Op]++
		return true
	}
}

// finishLocked applies a completed request to the shadow, or checks it.
func (s *stress) finishLocked(r *Request) {
	s.inflight--
	if r.Err != nil {
		s.errs = append(s.errs, fmt.Errorf("%v of %d at %d: %w", r.Op, max(len(r.Buf), int(r.Length)), r.Offset, r.Err))
	}
	var start, end int64
	switch r.Op {
	case OpRead, OpWrite:
		start, end = r.Offset/s.bs, (r.Offset+int64(len(r.Buf))+s.bs-1)/s.bs
	case OpWriteZeroes, OpDiscard:
		start, end = r.Offset/s.bs, (r.Offset+r.Length)/s.bs
	}
	for b := start; b < end; b++ {
		s.busy[b] = false
	}
	if r.Err != nil {
		// The namespace may hold old or new bytes now.
		for b := start; b < end; b++ {
			s.known[b] = false
		}
		return
	}
	switch r.Op {
	case OpWrite:
		copy(s.shadow[r.Offset:], r.Buf)
		for b := start; b < end; b++ {
			s.known[b] = true
		}
	case OpWriteZeroes:
		clear(s.shadow[r.Offset : r.Offset+r.Length])
		for b := start; b < end; b++ {
			s.known[b] = true
		}
	case OpDiscard:
		clear(s.shadow[r.Offset : r.Offset+r.Length])
		for b := start; b < end; b++ {
			s.known[b] = s.ns.DeallocatedReadsZero()
		}
	case OpRead:
		s.compareLocked(r.Offset, r.Buf)
	}
}

// compareLocked checks bytes read at off against the known blocks.
func (s *stress) compareLocked(off int64, got []byte) {
	for b := off / s.bs; b*s.bs < off+int64(len(got)); b++ {
		if !s.known[b] {
			continue
		}
		lo, hi := max(b*s.bs, off), min((b+1)*s.bs, off+int64(len(got)))
		if !bytes.Equal(got[lo-off:hi-off], s.shadow[lo:hi]) {
			s.errs = append(s.errs, fmt.Errorf("read at %d: block %d differs from the shadow", off, b))
			return
		}
	}
}

// run keeps qd requests in flight until all have been started and have
// completed.
func (s *stress) run(qd int) {
	s.t.Helper()
	reqs := make([]Request, qd)
	bufs := make([][]byte, qd)
	var next func(r *Request)
	next = func(r *Request) {
		for {
			s.mu.Lock()
			if r.Op != 0 {
				s.finishLocked(r)
			}
			ok := s.pickLocked(r, bufs[r.Tag])
			if !ok {
				r.Op = 0
				if s.inflight == 0 {
					close(s.done)
				}
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			if err := s.ns.Submit(r); err != nil {
				s.mu.Lock()
				r.Err = err
				s.mu.Unlock()
				continue // recorded by finishLocked in the next round
			}
			return
		}
	}
	for i := range reqs {
		bufs[i] = make([]byte, s.maxBlocks*s.bs)
		reqs[i].Tag = uint64(i)
		reqs[i].Done = next
	}
	for i := range reqs {
		next(&reqs[i])
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Minute):
		s.t.Fatalf("stress: still %d requests in flight after 5 minutes", s.inflight)
	}
}

// verify reads the whole namespace and checks the known blocks.
func (s *stress) verify() {
	s.t.Helper()
	got := make([]byte, s.ns.Size())
	_, err := s.ns.ReadAt(got, 0)
	require.NoError(s.t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compareLocked(0, got)
	require.Empty(s.t, s.errs)
}

func (s *stress) report() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("reads %d, writes %d, write-zeroes %d, discards %d, flushes %d",
		s.counts[OpRead], s.counts[OpWrite], s.counts[OpWriteZeroes], s.counts[OpDiscard], s.counts[OpFlush])
}
