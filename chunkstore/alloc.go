package chunkstore

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// allocator hands out physical stripe slots. Slot p is the p-th shard slot
// of every device's shard file. A slot is in use while any extent may
// still point at it: the in-memory maps, the committed metadata, or a
// commit in flight.
//
// Copy-on-write needs one rule from it: a slot that an extent stopped
// using is not reused until a commit that no longer references it has
// completed on every replica. release therefore tags the slot with the
// current epoch; a commit begins by bumping the epoch and, when it has
// completed, frees the slots released before it began (commitDone). A slot
// that was never referenced by anything (a write that failed) goes back at
// once (abort).
type allocator struct {
	// mu guards every field. It is a leaf lock: nothing is taken while it
	// is held.
	mu      sync.Mutex
	used    []uint64 // bitmap of slots in use
	high    uint64   // slots below high have been handed out at least once
	hint    uint64   // no free slot below hint
	epoch   uint64
	pending []pendingSlot

	// commitAt is how many pending slots make release signal kick (the
	// store's background committer); 0 never does. Set before use.
	commitAt int
	kick     chan struct{}
	// nPending is len(pending), readable without mu: every write checks
	// it (Store.throttle).
	nPending atomic.Int64
}

type pendingSlot struct{ slot, epoch uint64 }

func (a *allocator) isSet(p uint64) bool {
	w := p / 64
	return w < uint64(len(a.used)) && a.used[w]&(1<<(p%64)) != 0
}

func (a *allocator) set(p uint64) {
	w := p / 64
	for uint64(len(a.used)) <= w {
		a.used = append(a.used, 0)
	}
	a.used[w] |= 1 << (p % 64)
	if p >= a.high {
		a.high = p + 1
	}
}

func (a *allocator) clearBit(p uint64) {
	if invariants && !a.isSet(p) {
		panic(fmt.Sprintf("chunkstore: freeing slot %d, which is free", p))
	}
	w := p / 64
	if w < uint64(len(a.used)) {
		a.used[w] &^= 1 << (p % 64)
	}
	if p < a.hint {
		a.hint = p
	}
}

// markUsed records a slot found in the metadata at Open. It reports
// false if the slot was already in use: two extents naming one slot.
func (a *allocator) markUsed(p uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.isSet(p) {
		return false
	}
	a.set(p)
	return true
}

// get returns the lowest free slot.
func (a *allocator) get() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	for w := a.hint / 64; w < uint64(len(a.used)); w++ {
		free := ^a.used[w]
		if w == a.hint/64 {
			free &^= (1 << (a.hint % 64)) - 1
		}
		if free != 0 {
			p := w*64 + uint64(bits.TrailingZeros64(free))
			a.set(p)
			a.hint = p + 1
			return p
		}
	}
	p := uint64(len(a.used)) * 64
	if a.high > p {
		p = a.high
	}
	a.set(p)
	a.hint = p + 1
	return p
}

// freeBelow reports whether some slot below p is free.
func (a *allocator) freeBelow(p uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for q := a.hint; q < p; q++ {
		w := q / 64
		if w >= uint64(len(a.used)) {
			return true
		}
		if a.used[w] == ^uint64(0) {
			q = w*64 + 63
			continue
		}
		if a.used[w]&(1<<(q%64)) == 0 {
			return true
		}
	}
	return false
}

// abort frees a slot that nothing references.
func (a *allocator) abort(p uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clearBit(p)
}

// release frees a slot once the next commit has completed.
func (a *allocator) release(p uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if invariants {
		if !a.isSet(p) {
			panic(fmt.Sprintf("chunkstore: releasing slot %d, which is free", p))
		}
		for _, ps := range a.pending {
			if ps.slot == p {
				panic(fmt.Sprintf("chunkstore: releasing slot %d twice", p))
			}
		}
	}
	a.pending = append(a.pending, pendingSlot{slot: p, epoch: a.epoch})
	a.nPending.Store(int64(len(a.pending)))
	if a.commitAt > 0 && len(a.pending) >= a.commitAt {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

// waiting returns how many released slots wait for a commit.
func (a *allocator) waiting() int { return int(a.nPending.Load()) }

// beginCommit starts a commit: slots released so far are freed by
// commitDone of the returned epoch. Call it before taking the snapshot.
func (a *allocator) beginCommit() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.epoch
	a.epoch++
	return e
}

// commitDone frees the slots released up to epoch e.
func (a *allocator) commitDone(e uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	keep := a.pending[:0]
	for _, ps := range a.pending {
		if ps.epoch <= e {
			a.clearBit(ps.slot)
		} else {
			keep = append(keep, ps)
		}
	}
	a.pending = keep
	a.nPending.Store(int64(len(keep)))
}

// slotRun is n slots from first on.
type slotRun struct{ first, n uint64 }

// freeRuns returns the runs of free slots below the high-water mark.
func (a *allocator) freeRuns() []slotRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []slotRun
	for p := uint64(0); p < a.high; p++ {
		if w := p / 64; w < uint64(len(a.used)) && a.used[w] == ^uint64(0) {
			p = w*64 + 63
			continue
		}
		if a.isSet(p) {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k].first+out[k].n == p {
			out[k].n++
		} else {
			out = append(out, slotRun{first: p, n: 1})
		}
	}
	return out
}

// freeSlots returns up to max free slots below the high-water mark,
// lowest first.
func (a *allocator) freeSlots(max int) []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []uint64
	for p := a.hint; p < a.high && len(out) < max; p++ {
		if w := p / 64; w < uint64(len(a.used)) && a.used[w] == ^uint64(0) {
			p = w*64 + 63
			continue
		}
		if !a.isSet(p) {
			out = append(out, p)
		}
	}
	return out
}
