package chunkstore

import (
	"time"
)

// resvBytes is how much stripe data a checkpoint reserves slots for: the
// log writes that much before it must wait for the next checkpoint, and
// the roll-forward at Open examines at most that much.
const resvBytes = 1 << 30

// maxResv bounds the slots a checkpoint reserves (and the size of the
// reservation record in every replica) for stores of small stripes.
const maxResv = 4096

// resvHeadMin is the least the log may use of its reservation while a
// checkpoint is being written. It may use half of it (Store.resvHead):
// all that is left when the background committer starts a checkpoint,
// so that the checkpoint's fsync of what the log wrote (up to half a
// reservation, which the page cache may hold unwritten until then) does
// not stall the writers. With a quarter, 1 MiB writes through a target
// waited for every checkpoint and ran 15-20 % slower.
const resvHeadMin = 2 * maxInflight

// coldScan bounds the free slots a checkpoint examines for blocks when a
// FUA load runs cold (checkpointLocked), and an eighth of it the slots it
// takes that way.
const coldScan = 8192

// ckptInterval: the background committer checkpoints at least this often
// while anything waits for a checkpoint.
const ckptInterval = 5 * time.Second

func (s *Store) kickCommit() {
	select {
	case s.ckptKick <- struct{}{}:
	default:
	}
}

// autoCommit is the background committer. It checkpoints when half the
// log reservation is used, when WithAutoCommit released slots wait to be
// freed, and every ckptInterval while an unmap or chunk record change
// waits. A checkpoint makes durable what the maps point at (writing the
// open stripe short if it must); it is what frees the slots of
// overwritten data and bounds the roll-forward.
func (s *Store) autoCommit() {
	defer close(s.bgDone)
	t := time.NewTicker(ckptInterval)
	defer t.Stop()
	for {
		timed := false
		select {
		case <-s.stop:
			return
		case <-s.ckptKick:
		case <-t.C:
			timed = true
		}
		s.lmu.Lock()
		need := s.resvLimit-s.pops <= uint64(s.resvSize/2) || s.trimWanted || s.punchWanted ||
			(s.opts.commit > 0 && s.alloc.waiting() >= s.opts.commit) ||
			s.shortCold >= coldKick ||
			(timed && (s.ckptNeeded || len(s.dirtySlots) > 0))
		s.lmu.Unlock()
		if !need {
			continue
		}
		s.commitMu.Lock()
		if !s.closed.Load() {
			if err := s.commitLocked(nil); err != nil {
				s.log.Warn("chunkstore: background checkpoint failed", "err", err)
			} else {
				s.stats.autoCommits.Add(1)
			}
		}
		s.commitMu.Unlock()
	}
}

// throttleFactor: a writer checkpoints itself once this many thresholds of
// released slots wait, the background committer having fallen behind.
const throttleFactor = 4

// throttle is where writes, discards and chunk puts and deletes start,
// holding no lock: when throttleFactor × opts.commit released slots wait
// for a checkpoint, the writer makes it itself, so that a writer faster
// than the committer cannot grow the shard files without bound.
func (s *Store) throttle() {
	if s.opts.commit == 0 || s.alloc.waiting() < throttleFactor*s.opts.commit {
		return
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.closed.Load() || s.alloc.waiting() < throttleFactor*s.opts.commit {
		return
	}
	if err := s.commitLocked(nil); err != nil {
		s.log.Warn("chunkstore: checkpoint for a throttled writer failed", "err", err)
		return
	}
	s.stats.autoCommits.Add(1)
}

// commit checkpoints.
func (s *Store) commit() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.commitLocked(nil)
}

// commitLocked is the checkpoint (doc.go, "Crash consistency"):
//
//  1. start an allocator epoch; under lmu, seal the open stripe and take
//     the snapshot: the changed map pages, the slot records of stripes
//     already written, the slots released, the chunk records, and a new
//     log reservation (the slots not yet used of the last one, topped
//     up), with LogGen, the last generation handed out;
//  2. wait until every stripe sealed so far is written, then fsync the
//     shard file of every writable device; a device whose fsync fails is
//     taken out, and the snapshot marks it missing in every stripe
//     written since the last fsync;
//  3. for every writable device: probe it through its FS, then apply the
//     snapshot to its replica in one bbolt transaction (Seq+1);
//  4. free the slots released before step 1, once no read that could
//     still use them is running; let the log use the new reservation.
//
// extra adds to the snapshot (volume creation and deletion, the device
// table). The caller holds commitMu.
func (s *Store) commitLocked(extra func(*batch)) error {
	s.lmu.Lock()
	punch := s.punchWanted
	s.punchWanted = false
	s.lmu.Unlock()
	trim, err := s.checkpointLocked(extra)
	s.lmu.Lock()
	if err != nil {
		// Writers waiting for log room (openLocked) fail with it rather
		// than wait on a checkpoint that may never complete.
		s.ckptErr = err
		s.ckptFails++
		s.lcond.Broadcast()
	} else {
		s.ckptErr = nil
	}
	s.lmu.Unlock()
	if trim || punch {
		// Even after a failed checkpoint: what is free is free since the
		// last one that completed, and a full file system (a stripe that
		// met ENOSPC fails every checkpoint until it is written) needs
		// the blocks back first.
		s.punchFree()
	}
	if trim && err == nil {
		s.stats.compactions.Add(1)
	}
	return err
}

// checkpointLocked is commitLocked's checkpoint; it reports whether it
// was a trimming one, after which the caller, still holding commitMu,
// punches the free slots.
func (s *Store) checkpointLocked(extra func(*batch)) (bool, error) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	epoch := s.alloc.beginCommit()
	b := newBatch()
	next := s.gen.Load()
	if next+genReserve/2 > s.genHigh {
		b.super.GenHigh = next + genReserve
	} else {
		b.super.GenHigh = s.genHigh
	}
	b.super.Store, b.super.Geo, b.super.Unit = s.id, s.geo, s.unit
	b.super.Seq = s.seq + 1
	if s.devDirty {
		for pos, r := range s.devRecs {
			b.devices[pos] = r
		}
	}

	// 1. The snapshot.
	type pageKeyOf struct{ owner, page uint64 }
	var (
		takenPages []pageKeyOf
		takenSlots []uint64
		pending    []*logStripe
		recs       = map[uint64]slotRecord{}
	)
	s.lmu.Lock()
	s.sealLocked()
	target := s.sealed
	// Every caller's write so far is in a stripe sealed now, which this
	// checkpoint makes durable: so are the journal's records.
	wepoch, jdead := s.wepoch, s.gen.Load()+1
	for owner, m := range s.owners {
		for page := range m.dirty {
			var val []byte
			if runs := m.pages[page]; len(runs) > 0 {
				val = encodePage(runs)
			}
			b.pages = append(b.pages, pageChange{owner: owner, page: page, val: val})
			takenPages = append(takenPages, pageKeyOf{owner, page})
		}
		clear(m.dirty)
	}
	for slot := range s.dirtySlots {
		si := &s.slots[slot]
		switch {
		case !si.used:
			b.slots = append(b.slots, slotChange{slot: slot})
		case si.mem != nil:
			continue // sealed later than the snapshot, or below: see pending
		default:
			recs[slot] = slotRecord{Key: si.key, Ext: si.ext, Sectors: int(si.sectors)}
		}
		takenSlots = append(takenSlots, slot)
		delete(s.dirtySlots, slot)
	}
	for _, o := range s.unwritten {
		if o.seq <= target {
			pending = append(pending, o)
		}
	}
	for _, o := range s.failed {
		if o.seq <= target {
			pending = append(pending, o)
		}
	}
	// The new reservation: the next resvHead slots of the current one
	// (the log may use those before this checkpoint completes: they are
	// in the last committed reservation too), then the lowest free slots,
	// so that the log fills the holes the cleaner and overwrites leave.
	//
	// A trimming checkpoint (an idle pass asked for it) keeps only a few
	// slots of the current reservation and reserves only a few more, so
	// that the slots it gives back are free for punchFree; the next
	// checkpoint reserves as usual, from slots that have no blocks now.
	//
	// When flushes wrote short stripes into slots without blocks (short),
	// the head shrinks to what the flushes may take during this
	// checkpoint, and the rest of the reservation is taken afresh from
	// the lowest free slots, which overwrites and the cleaner left, and
	// which have blocks: a FUA load soon flushes one disk cache per write.
	trim := s.trimWanted
	s.trimWanted = false
	short := s.shortCold
	s.shortCold = 0
	head, size := min(len(s.resv), s.resvHead), s.resvSize
	if short > 0 {
		head = min(head, max(resvHeadMin, 2*short))
	}
	if trim {
		head = min(len(s.resv), resvHeadMin)
		size = head + trimPrepare
	}
	if len(s.resv) > head && (trim || short > 0 || s.alloc.freeBelow(s.resv[len(s.resv)-1])) {
		for _, slot := range s.resv[head:] {
			s.alloc.abort(slot)
		}
		s.resv = s.resv[:head]
	}
	fresh := len(s.resv)
	if short > 0 {
		// A FUA load is writing into slots without blocks: reserve
		// first the free slots that have them, wherever they are (the
		// lowest free ones may be holes a trim punched).
		want := min(size-len(s.resv), coldScan/8)
		for _, slot := range s.alloc.freeSlots(coldScan) {
			if want == 0 {
				break
			}
			if s.slotAllocatedLocked(slot, slotHead) && s.alloc.markUsed(slot) {
				s.resv = append(s.resv, slot)
				want--
			}
		}
	}
	for len(s.resv) < size {
		s.resv = append(s.resv, s.alloc.get())
	}
	// Slots for the short stripes of flushes to come: as many as flushes
	// sealed into cold slots since the last snapshot, and a few more;
	// after a trim, all the few it reserved, for the writes that end the
	// idle time.
	var prep []uint64
	if short > 0 || trim {
		n := min(len(s.resv)-fresh, 8*short+resvHeadMin, maxPrepare)
		if trim {
			n = len(s.resv) - fresh
		}
		prep = append(prep, s.resv[fresh:fresh+n]...)
	}
	b.resv = append([]uint64(nil), s.resv...)
	pops := s.pops
	s.resvLimit = min(s.resvLimit, pops+uint64(head))
	b.super.LogGen = s.gen.Load()
	ckptNeeded := s.ckptNeeded
	s.ckptNeeded = false
	s.ckptBusy = ckptNeeded
	defer func() {
		s.lmu.Lock()
		s.ckptBusy = false
		s.lmu.Unlock()
	}()
	// After the flag is cleared, under lmu: a chunk record swapped in
	// later sets it again (PutChunk, DeleteChunk).
	chunkIDs := s.chunks.takeDirty(b)
	s.takeRecordsLocked(b)
	// After the chunk records: every owner they name was handed out
	// before (PutChunk takes its owner before it swaps the record in), so
	// a store reopened from this checkpoint does not hand one out again.
	b.super.NextOwner = s.owner.Load()
	s.lmu.Unlock()
	if extra != nil {
		extra(b)
	}
	restore := func() {
		s.lmu.Lock()
		for _, k := range takenPages {
			if m := s.owners[k.owner]; m != nil {
				m.dirty[k.page] = struct{}{}
			}
		}
		for _, slot := range takenSlots {
			s.dirtySlots[slot] = struct{}{}
		}
		s.ckptNeeded = s.ckptNeeded || ckptNeeded
		s.trimWanted = s.trimWanted || trim
		s.restoreRecordsLocked(b.records)
		s.lmu.Unlock()
		s.chunks.redirty(chunkIDs)
	}
	fail := func(err error) error {
		restore()
		return err
	}

	// 2. Every stripe the snapshot names is written, then synced; and so
	// are the new reserved slots prepared for short stripes.
	s.prepareSlots(prep)
	s.lmu.Lock()
	err := s.waitWrittenLocked(target)
	s.lmu.Unlock()
	if err != nil {
		return trim, fail(err)
	}
	before := s.writableMask()
	if err := s.syncDevicesLocked(); err != nil {
		return trim, fail(err)
	}
	lost := before &^ s.writableMask()
	for _, o := range pending {
		recs[o.slot] = slotRecord{Key: stripeKey{Owner: logOwner, Index: o.slot},
			Ext: extent{Slot: o.slot, Gen: o.gen, ShardLen: o.shardLen, Missing: o.lost}, Sectors: o.n}
	}
	for slot, r := range recs {
		r.Ext.Missing |= lost
		b.slots = append(b.slots, slotChange{slot: slot, rec: r.encode()})
	}
	s.durable = max(s.durable, wepoch)
	s.jdead = max(s.jdead, jdead)

	// 3. The replicas.
	committed := s.forWritable(func(d *device, f *devFiles) error {
		if _, err := f.fs.Stat(identityFile); err != nil {
			return err
		}
		return f.db.update(b.apply)
	})
	s.seq = b.super.Seq
	if committed == 0 {
		return trim, fail(ErrTooManyFailures)
	}
	if err := s.enoughDevices(); err != nil {
		return trim, fail(err)
	}
	s.genHigh = b.super.GenHigh
	s.devDirty = false

	// 4. Free what the previous checkpoint named and this one does not.
	s.gate.Lock()
	s.alloc.commitDone(epoch)
	s.gate.Unlock()
	s.lmu.Lock()
	s.resvLimit = pops + uint64(len(b.resv))
	s.lcond.Broadcast()
	s.lmu.Unlock()
	return trim, nil
}
