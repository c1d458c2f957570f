package chunkstore

import (
	"fmt"
	"runtime"
	"sort"
	"time"
)

// DefaultOverProvision is the dead space the cleaner lets the store hold,
// as a fraction of the live data (WithOverProvision).
const DefaultOverProvision = 1.0

// DefaultIdleOverProvision and DefaultIdleAfter are WithIdleCompaction's
// defaults: after 3 s without a write, compact to 1.1 × the live data.
const (
	DefaultIdleOverProvision = 0.1
	DefaultIdleAfter         = 3 * time.Second
)

// cleanSlack is the number of slots beyond the over-provisioning the
// cleaner tolerates, so that small stores are not cleaned all the time.
const cleanSlack = 4 * maxInflight

// cleanBatch is how many victims one pass of the cleaner picks.
const cleanBatch = 16

// WithOverProvision sets how much dead space (overwritten or discarded
// data still in its slots) the store may hold, as a fraction of the live
// data: the cleaner starts when the slots in use hold more than
// (1 + f) × the live data (plus a few slots), and writers wait for it when
// they hold more than (1 + 1.5f) × (default DefaultOverProvision). A larger
// f means less cleaning (lower write amplification) and larger shard
// files.
func WithOverProvision(f float64) Option {
	return func(o *options) { o.overprov, o.overprovSet = f, true }
}

// WithIdleCompaction sets what the cleaner does once no caller has
// written for after (default DefaultIdleAfter; 0 never): it compacts the
// store until the slots in use hold at most (1 + f) × the live data (plus
// a few slots; default DefaultIdleOverProvision), stopping as soon as a
// write arrives, and then a checkpoint gives the blocks of every free slot
// back to the file system (vfs.Puncher), so that a store at rest takes
// little more than its live data and parity. An f at or above
// WithOverProvision's compacts nothing more than a busy store does, and
// only punches.
func WithIdleCompaction(f float64, after time.Duration) Option {
	return func(o *options) { o.idleProv, o.idleAfter = f, after }
}

// cleanLevel says how far the slots in use exceed the live data: 0
// within the over-provisioning, 1 past it (clean), 2 past one and a half
// times it (writers wait). lmu is held.
func (s *Store) cleanLevel() int {
	cs := int64(s.capSectors())
	used := s.dataCap
	live := float64(s.liveTotal)
	f := s.opts.overprov
	slack := float64(cleanSlack * cs)
	switch {
	case float64(used) > (1+1.5*f)*live+2*slack:
		return 2
	case float64(used) > (1+f)*live+slack:
		return 1
	}
	return 0
}

// idleDirtyLocked reports whether the slots in use exceed the idle
// target, (1 + WithIdleCompaction's f) × the live data. lmu is held.
func (s *Store) idleDirtyLocked() bool {
	cs := int64(s.capSectors())
	return float64(s.dataCap) > (1+s.opts.idleProv)*float64(s.liveTotal)+float64(cleanSlack*cs)
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
// the next checkpoint; with no write for a second it cleans only for
// writers at their limit. Once no caller has written for a while and it has
// had nothing to do meanwhile, it makes one idle pass
// (WithIdleCompaction): the same, down to the idle target, then a
// trimming checkpoint.
func (s *Store) cleaner() {
	defer close(s.cleanDone)
	tick := 50 * time.Millisecond
	if a := s.opts.idleAfter; a > 0 && a < tick {
		tick = a // tests: short idle times
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	// A store that no one has written to since Open needs no idle pass.
	s.lmu.Lock()
	written := s.hostSecs // hostSecs when last looked at
	s.lmu.Unlock()
	var (
		host      int64     = -1   // hostOpsLocked when last looked at
		active    time.Time        // when I/O or a busy pass was last seen
		compacted bool      = true // the idle pass since the last write is done
		lastShort time.Time        // when the last pass for a full file system ended
		lastWrite time.Time        // when a write was last seen
	)
	for {
		select {
		case <-s.stop:
			return
		case <-s.cleanKick:
		case <-t.C:
		}
		for {
			s.lmu.Lock()
			now := time.Now()
			if ops := s.hostOpsLocked(); ops != host {
				// Reads delay the idle pass; only writes call for
				// another one.
				if s.hostSecs != written {
					written, compacted, lastWrite = s.hostSecs, false, now
				}
				host, active = ops, now
			}
			// Space is for writes: with none for a second, only writers'
			// limit calls for cleaning (reads keep the cores), and the
			// idle pass takes the rest once all I/O stops.
			level := s.cleanLevel()
			busy := level == 2 || level == 1 && now.Sub(lastWrite) < time.Second
			idle := !busy && !compacted && s.opts.idleAfter > 0 && now.Sub(active) >= s.opts.idleAfter
			// Out of space: an idle pass at once, writes or not, at most
			// one a second (every flush that fails asks again).
			short := s.spaceShort && now.Sub(lastShort) >= time.Second
			if short {
				idle, busy = true, false
			}
			var victims []uint64
			if busy || idle && s.idleDirtyLocked() {
				victims = s.pickVictimsLocked(cleanBatch)
			}
			if idle && len(victims) == 0 {
				// The pass is done (or had nothing to move): the next
				// checkpoint frees what it released and punches; after
				// an idle time it also trims the reservation.
				if short {
					s.spaceShort, s.punchWanted, lastShort = false, true, now
				} else {
					compacted = true
					s.trimWanted = true
				}
				s.kickCommit()
			}
			s.lmu.Unlock()
			if len(victims) == 0 {
				break
			}
			if busy {
				active = now
			}
			for _, v := range victims {
				select {
				case <-s.stop:
					return
				default:
				}
				if idle && !s.isSpaceShort() && s.ioSince(host) {
					break // I/O: busy rules again
				}
				if err := s.cleanSlot(v, idle); err != nil {
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

// isSpaceShort reports whether a stripe write met ENOSPC since the last
// idle pass.
func (s *Store) isSpaceShort() bool {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.spaceShort
}

// hostOpsLocked counts the callers' reads and written sectors. lmu is
// held.
func (s *Store) hostOpsLocked() int64 { return s.hostSecs + s.hostReads }

// ioSince reports whether callers read or wrote since hostOpsLocked was
// host.
func (s *Store) ioSince(host int64) bool {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.hostOpsLocked() != host
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

// cleanSlot moves the live sectors of slot to the log; idle: for an idle
// pass.
func (s *Store) cleanSlot(slot uint64, idle bool) error {
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
		if idle {
			s.idleCleaned += int64(n)
		}
		off += n * SectorSize
	}
	return rerr
}
