package chunkstore

import (
	"fmt"
	"runtime"
	"sort"
	"time"
)

// DefaultOverProvision is the dead space the cleaner lets the store hold,
// as a fraction of the live data (WithOverProvision).
const DefaultOverProvision = 0.5

// cleanSlack is the number of slots beyond the over-provisioning the
// cleaner tolerates, so that small stores are not cleaned all the time.
const cleanSlack = 4 * maxInflight

// cleanBatch is how many victims one pass of the cleaner picks.
const cleanBatch = 16

// WithOverProvision sets how much dead space (overwritten or discarded
// data still in its slots) the store may hold, as a fraction of the live
// data: the cleaner starts when the slots in use hold more than
// (1 + f) × the live data (plus a few slots), and writers wait for it when
// they hold more than (1 + 2f) × (default DefaultOverProvision). A larger
// f means less cleaning (lower write amplification) and larger shard
// files.
func WithOverProvision(f float64) Option {
	return func(o *options) { o.overprov, o.overprovSet = f, true }
}

// cleanLevel says how far the slots in use exceed the live data: 0
// within the over-provisioning, 1 past it (clean), 2 past twice it
// (writers wait). lmu is held.
func (s *Store) cleanLevel() int {
	cs := int64(s.capSectors())
	used := s.dataCap
	live := float64(s.liveTotal)
	f := s.opts.overprov
	slack := float64(cleanSlack * cs)
	switch {
	case float64(used) > (1+2*f)*live+2*slack:
		return 2
	case float64(used) > (1+f)*live+slack:
		return 1
	}
	return 0
}

func (s *Store) kickClean() {
	select {
	case s.cleanKick <- struct{}{}:
	default:
	}
}

// cleaner is the store's cleaner goroutine, from Open to Close. While the
// slots in use exceed the over-provisioning it picks victims by cost and
// benefit, as in LFS: (1 - u) × age / (1 + u), where u is the live
// fraction of the slot and age counts the generations written since it,
// so mostly dead slots go first and, among equally dead ones, the old,
// cold ones, whose remaining data is unlikely to die soon on its own. It
// moves each victim's live sectors to the log, which frees the victim at
// the next checkpoint.
func (s *Store) cleaner() {
	defer close(s.cleanDone)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.cleanKick:
		case <-t.C:
		}
		for {
			s.lmu.Lock()
			want := s.cleanLevel() > 0
			var victims []uint64
			if want {
				victims = s.pickVictimsLocked(cleanBatch)
			}
			s.lmu.Unlock()
			if len(victims) == 0 {
				break
			}
			for _, v := range victims {
				select {
				case <-s.stop:
					return
				default:
				}
				if err := s.cleanSlot(v); err != nil {
					s.log.Warn("chunkstore: cleaner could not move a slot", "slot", v, "err", err)
				}
				runtime.Gosched()
			}
			s.lmu.Lock()
			s.lcond.Broadcast() // writers waiting for the cleaner
			s.lmu.Unlock()
		}
	}
}

// pickVictimsLocked returns up to n slots with the best cost-benefit
// score. lmu is held.
func (s *Store) pickVictimsLocked(n int) []uint64 {
	type cand struct {
		slot  uint64
		score float64
	}
	now := s.gen.Load()
	var best []cand
	for p := range s.slots {
		si := &s.slots[p]
		if !si.used || si.mem != nil || si.live <= 0 || (s.open != nil && s.open.slot == uint64(p)) {
			continue
		}
		u := float64(si.live) / float64(s.capOf(si))
		if u >= 1 {
			continue
		}
		age := float64(now-si.ext.Gen) + 1
		c := cand{slot: uint64(p), score: (1 - u) * age / (1 + u)}
		if len(best) < n {
			best = append(best, c)
			if len(best) == n {
				sort.Slice(best, func(i, j int) bool { return best[i].score > best[j].score })
			}
			continue
		}
		if c.score <= best[n-1].score {
			continue
		}
		i := sort.Search(n, func(i int) bool { return best[i].score < c.score })
		copy(best[i+1:], best[i:n-1])
		best[i] = c
	}
	out := make([]uint64, len(best))
	for i, c := range best {
		out[i] = c.slot
	}
	return out
}

// move is a run of live sectors the cleaner copies.
type move struct {
	owner, lba uint64
	sec, n     int
}

// cleanSlot moves the live sectors of slot to the log.
func (s *Store) cleanSlot(slot uint64) error {
	s.lmu.Lock()
	si := s.slots[slot]
	s.lmu.Unlock()
	if !si.used || si.mem != nil {
		return nil
	}
	runs, err := s.summaryOf(si.key, si.ext, int(si.sectors))
	if err != nil {
		return err
	}
	s.lmu.Lock()
	if cur := s.slots[slot]; !cur.used || cur.ext.Gen != si.ext.Gen {
		s.lmu.Unlock()
		return nil
	}
	var moves []move
	total := 0
	pos := 0
	for _, r := range runs {
		m := s.owners[r.Owner]
		for j := 0; m != nil && j < int(r.N); {
			l, n, mapped := m.find(r.LBA+uint64(j), int(r.N)-j)
			if mapped && l.slot == slot && l.sec == pos+j {
				moves = append(moves, move{owner: r.Owner, lba: r.LBA + uint64(j), sec: pos + j, n: n})
				total += n
			}
			j += n
		}
		pos += int(r.N)
	}
	if total == 0 {
		s.lmu.Unlock()
		return nil
	}
	if int32(total) != s.slots[slot].live {
		s.lmu.Unlock()
		return fmt.Errorf("%w: slot %d: its summary names %d live sectors, the maps %d", ErrCorrupt, slot, total, s.slots[slot].live)
	}
	key, ext := s.slots[slot].key, s.slots[slot].ext
	s.gate.RLock()
	s.lmu.Unlock()
	buf := make([]byte, total*SectorSize)
	off := 0
	var rerr error
	for i, mv := range moves {
		pc := piece{key: key, ext: ext, sec: mv.sec, dst: buf[off : off+mv.n*SectorSize]}
		if err := s.readPiece(&pc); err != nil {
			moves[i].n = -mv.n // leave it where it is
			rerr = err
		}
		off += mv.n * SectorSize
	}
	s.gate.RUnlock()
	s.lmu.Lock()
	defer s.lmu.Unlock()
	off = 0
	for _, mv := range moves {
		n := mv.n
		if n < 0 {
			off += -n * SectorSize
			continue
		}
		if _, err := s.appendLocked(mv.owner, mv.lba, buf[off:off+n*SectorSize], &moveSource{slot: slot, sec: mv.sec, gen: ext.Gen}); err != nil {
			return err
		}
		s.cleaned += int64(n)
		off += n * SectorSize
	}
	return rerr
}
