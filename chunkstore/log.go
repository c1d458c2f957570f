package chunkstore

import (
	"fmt"
	"sync"
)

// logOwner is the owner in the header key of every log stripe: its key is
// {logOwner, slot}. Volumes and chunks have owners from 1 on.
const logOwner = 0

// maxInflight bounds the sealed log stripes being written at once; an
// appender that would open one more waits.
const maxInflight = 8

// slotInfo is what the store knows of one physical slot. Guarded by
// Store.lmu.
type slotInfo struct {
	used    bool
	key     stripeKey // what its shard headers name
	ext     extent
	sectors int32  // data sectors it holds
	live    int32  // of them, those a map points at
	seq     uint64 // log order of a stripe written since Open (0: older)
	mem     *logStripe
}

// logStripe is a log stripe in memory: the open one, or a sealed one
// being written. Its buffer holds K × unit bytes of data, sector i of the
// stripe at i × SectorSize.
type logStripe struct {
	slot, gen, seq uint64
	buf            *[]byte
	n              int // sectors used
	runs           []sumRun
	shardLen       int    // set when sealed
	lost           uint64 // devices the write missed
	err            error
	// dirty: the positions callers wrote since the last flush journaled
	// the stripe (journal.go), ndirty of them.
	dirty  []uint64
	ndirty int
}

// capSectors is the data sectors of a full stripe.
func (s *Store) capSectors() int { return s.geo.Data * s.unit / SectorSize }

// slot returns the slot table entry of p, growing the table. lmu is held.
func (s *Store) slotAt(p uint64) *slotInfo {
	for uint64(len(s.slots)) <= p {
		s.slots = append(s.slots, slotInfo{})
	}
	return &s.slots[p]
}

// ownerLocked returns an owner's map, or nil. lmu is held.
func (s *Store) ownerLocked(owner uint64) *ownerMap { return s.owners[owner] }

// gone accounts for n sectors of slot that a map no longer points at, and
// releases the slot when none is left. lmu is held.
func (s *Store) goneLocked(slot uint64, n int) {
	si := &s.slots[slot]
	si.live -= int32(n)
	s.liveTotal -= int64(n)
	if invariants && si.live < 0 {
		panic(fmt.Sprintf("chunkstore: slot %d has %d live sectors", slot, si.live))
	}
	if si.live == 0 && si.mem == nil {
		s.releaseSlotLocked(slot)
	}
}

// capOf is how many data sectors the stripe in si has room for: a short
// stripe only what its shards hold (the rest of its slot was never
// written, so it takes no space in a sparse shard file), a stripe still
// open all of it. lmu is held.
func (s *Store) capOf(si *slotInfo) int64 {
	if si.mem != nil && si.mem == s.open {
		return int64(s.capSectors())
	}
	return max(int64(si.sectors), int64(s.geo.Data*si.ext.ShardLen/SectorSize))
}

// releaseSlotLocked drops a slot that holds nothing live: it is free once
// the next checkpoint, which no longer names it, has completed.
func (s *Store) releaseSlotLocked(slot uint64) {
	si := &s.slots[slot]
	if !si.used {
		return
	}
	s.dataCap -= s.capOf(si)
	*si = slotInfo{}
	s.dataSlots--
	s.dirtySlots[slot] = struct{}{}
	s.alloc.release(slot)
}

// mapUpdateLocked maps (or unmaps) n sectors of owner from lba on. lmu is
// held.
func (s *Store) mapUpdateLocked(m *ownerMap, lba uint64, n int, set bool, slot uint64, sec int) {
	m.update(lba, n, set, slot, sec, &s.scratch, s.goneLocked)
	if set {
		si := &s.slots[slot]
		si.live += int32(n)
		s.liveTotal += int64(n)
	}
}

// openLocked makes sure there is an open stripe with room, waiting for the
// writers or a checkpoint when needed. lmu is held (and released while
// waiting).
func (s *Store) openLocked(cleaner bool) error {
	fails := s.ckptFails
	for {
		if s.closed.Load() {
			return ErrClosed
		}
		if o := s.open; o != nil {
			if o.n < s.capSectors() {
				return nil
			}
			s.sealLocked()
			continue
		}
		if s.inflight >= maxInflight {
			s.lcond.Wait()
			continue
		}
		if lvl := s.cleanLevel(); lvl > 0 {
			s.kickClean()
			if lvl == 2 && !cleaner && !s.opening {
				// Too much dead space: wait for the cleaner.
				s.lcond.Wait()
				continue
			}
		}
		if s.pops >= s.resvLimit || len(s.resv) == 0 {
			// Every slot the last checkpoint reserved is used: a stripe
			// in another slot could not be found after a crash. A
			// checkpoint that failed since this writer came fails it.
			if s.ckptFails != fails {
				return fmt.Errorf("chunkstore: no room in the log without a checkpoint: %w", s.ckptErr)
			}
			s.kickCommit()
			s.lcond.Wait()
			continue
		}
		slot := s.resv[0]
		s.resv = s.resv[1:]
		s.pops++
		if s.resvLimit-s.pops <= uint64(s.resvSize/2) {
			s.kickCommit()
		}
		bp := s.bufs.stripe()
		s.nextSeq++
		o := &logStripe{slot: slot, gen: s.gen.Add(1), seq: s.nextSeq, buf: bp, runs: s.takeRuns()}
		si := s.slotAt(slot)
		*si = slotInfo{used: true, key: stripeKey{Owner: logOwner, Index: slot},
			ext: extent{Slot: slot, Gen: o.gen, ShardLen: s.unit}, seq: o.seq, mem: o}
		s.dataSlots++
		s.dataCap += int64(s.capSectors())
		s.open = o
		return nil
	}
}

func (s *Store) takeRuns() []sumRun {
	if n := len(s.runPool); n > 0 {
		r := s.runPool[n-1]
		s.runPool = s.runPool[:n-1]
		return r[:0]
	}
	return make([]sumRun, 0, 16)
}

// sealLocked closes the open stripe and starts writing it: whole if it is
// full, short (each shard as long as the data needs, RAID-Z style)
// otherwise. lmu is held.
func (s *Store) sealLocked() {
	if o := s.sealOpenLocked(); o != nil {
		s.logQ = append(s.logQ, o)
		if s.logWriters < maxLogWriters {
			s.logWriters++
			go s.logWriter()
		}
	}
}

// maxLogWriters bounds the goroutines writing sealed log stripes. Each
// takes every stripe sealed while it was busy (up to maxBatch) and writes
// them as one batch: one pwritev per device for each run of consecutive
// slots, not one per stripe. File systems serialise the buffered writes of
// one file (ext4 takes the inode's lock for each), so more writers than
// this only queue on that lock, and each handoff is a sleep and a wake.
const maxLogWriters = 2

// logWriter writes the sealed stripes of logQ in batches until it is
// empty.
func (s *Store) logWriter() {
	var arr [maxBatch]*logStripe
	s.lmu.Lock()
	defer s.lmu.Unlock()
	for len(s.logQ) > 0 {
		batch := arr[:copy(arr[:], s.logQ)]
		n := copy(s.logQ, s.logQ[len(batch):])
		clear(s.logQ[n:])
		s.logQ = s.logQ[:n]
		s.lmu.Unlock()
		err := s.writeLogStripes(batch)
		s.lmu.Lock()
		for _, o := range batch {
			s.finishLocked(o, err)
		}
		clear(batch)
	}
	s.logWriters--
}

// sealOpenLocked closes the open stripe, if it holds anything, and returns
// it for the caller to write (logWriter, or writeLogStripe and
// finishLocked): it counts as in flight. lmu is held.
func (s *Store) sealOpenLocked() *logStripe {
	o := s.open
	if o == nil || o.n == 0 {
		return nil
	}
	s.open = nil
	k := s.geo.Data
	per := (o.n + k - 1) / k // sectors per shard
	o.shardLen = per * SectorSize
	if o.n == s.capSectors() {
		o.shardLen = s.unit
	}
	clear((*o.buf)[o.n*SectorSize : k*o.shardLen])
	si := &s.slots[o.slot]
	si.ext.ShardLen = o.shardLen
	si.ext.Zero = s.zeroShards(si.key, o.shardLen, o.n)
	si.sectors = int32(o.n)
	s.dataCap -= int64(s.capSectors() - k*per)
	if o.n < s.capSectors() && !s.slotAllocatedLocked(o.slot, shardHeaderRegion+o.shardLen) {
		// Flushes are writing short stripes into slots the shard files
		// have no blocks for, an fdatasync per device each: a checkpoint
		// gives the log allocated slots first (prepareSlots).
		if s.shortCold++; s.shortCold == coldKick {
			s.kickCommit()
		}
	}
	s.unwritten[o.seq] = o
	s.sealed = o.seq
	s.inflight++
	return o
}

// writeLogStripe writes one sealed stripe (the flush's own).
func (s *Store) writeLogStripe(o *logStripe) error {
	return s.writeLogStripes([]*logStripe{o})
}

// writeLogStripes writes sealed stripes as one batch (writeStripesAt).
func (s *Store) writeLogStripes(batch []*logStripe) error {
	k := s.geo.Data
	ws := make([]stripeWrite, len(batch))
	exts := make([]extent, len(batch))
	for i, o := range batch {
		data := make([][]byte, k)
		for j := range data {
			data[j] = (*o.buf)[j*o.shardLen : (j+1)*o.shardLen]
		}
		ws[i] = stripeWrite{key: stripeKey{Owner: logOwner, Index: o.slot}, data: data, summary: o.runs}
		exts[i] = extent{Slot: o.slot, Gen: o.gen, ShardLen: o.shardLen, Zero: s.zeroShards(ws[i].key, o.shardLen, o.n)}
	}
	err := s.writeStripesAt(ws, exts)
	for i, o := range batch {
		o.lost = exts[i].Missing
	}
	return err
}

// finishLocked records the outcome of a stripe write. lmu is held.
func (s *Store) finishLocked(o *logStripe, err error) {
	s.inflight--
	delete(s.unwritten, o.seq)
	defer s.lcond.Broadcast()
	if err != nil {
		o.err = err
		s.failed[o.seq] = o
		if IsNoSpace(err) {
			// Give the file system back what the store can: compact
			// and punch now, busy or not (cleaner).
			s.spaceShort = true
			s.kickClean()
		}
		s.log.Warn("chunkstore: log stripe write failed; it stays in memory", "slot", o.slot, "err", err)
		return
	}
	delete(s.failed, o.seq)
	si := &s.slots[o.slot]
	si.mem = nil
	si.ext.Missing = o.lost
	s.dirtySlots[o.slot] = struct{}{}
	s.unsynced = append(s.unsynced, o.slot)
	s.bufs.putStripe(o.buf)
	s.runPool = append(s.runPool, o.runs)
	o.buf, o.runs = nil, nil
	if si.live == 0 {
		s.releaseSlotLocked(o.slot)
	}
}

// moveSource is where the cleaner found the sectors it moves: from sector
// sec on of the stripe of generation gen in slot.
type moveSource struct {
	slot uint64
	sec  int
	gen  uint64
}

// appendLocked writes data (whole sectors) as sectors lba… of owner m.
// With from set, it is the cleaner's move of sectors found at from: each
// sector is written only if the map still points there and the slot still
// holds that stripe (it may have been freed and written again, with the
// same sector of the same owner, while the cleaner read). It returns the
// write epoch to flush through for a caller's data to be durable (0 for
// the cleaner's). lmu is held, and released while waiting for room.
func (s *Store) appendLocked(owner uint64, lba uint64, data []byte, from *moveSource) (uint64, error) {
	nsec := len(data) / SectorSize
	if err := s.enoughDevices(); err != nil {
		return 0, err
	}
	var epoch uint64
	for i := 0; i < nsec; {
		// Room first: openLocked may wait, releasing lmu, and what the
		// map says must be read after that.
		if err := s.openLocked(from != nil); err != nil {
			return epoch, err
		}
		m := s.ownerLocked(owner)
		if m == nil {
			if from != nil {
				return epoch, nil
			}
			return epoch, fmt.Errorf("%w: owner %d is gone", ErrClosed, owner)
		}
		l, run, mapped := m.find(lba+uint64(i), nsec-i)
		if from != nil {
			want := loc{slot: from.slot, sec: from.sec + i}
			if !mapped || l != want || s.slots[from.slot].ext.Gen != from.gen {
				// Rewritten or unmapped since the cleaner read it.
				i++
				continue
			}
			run = 1
		}
		if mapped && l.slot == s.open.slot {
			// Rewritten while its stripe is open: in place.
			copy((*s.open.buf)[l.sec*SectorSize:(l.sec+run)*SectorSize], data[i*SectorSize:])
			s.open.markDirty(l.sec, run)
			s.wepoch++
			epoch = s.wepoch
			s.hostSecs += int64(run)
			i += run
			continue
		}
		o := s.open
		// The whole run fits up to the stripe's end; the summary takes a
		// new run unless this continues the last one.
		n := min(run, s.capSectors()-o.n)
		last := len(o.runs) - 1
		if last >= 0 && o.runs[last].Owner == owner && o.runs[last].LBA+uint64(o.runs[last].N) == lba+uint64(i) {
			o.runs[last].N += uint32(n)
		} else {
			if len(o.runs) >= s.maxRuns {
				s.sealLocked()
				continue
			}
			o.runs = append(o.runs, sumRun{Owner: owner, LBA: lba + uint64(i), N: uint32(n)})
		}
		copy((*o.buf)[o.n*SectorSize:(o.n+n)*SectorSize], data[i*SectorSize:])
		s.mapUpdateLocked(m, lba+uint64(i), n, true, o.slot, o.n)
		if from == nil {
			// The cleaner's moves need no flush: what they move stays
			// where the last checkpoint found it until the next one.
			s.hostSecs += int64(n)
			o.markDirty(o.n, n)
			s.wepoch++
			epoch = s.wepoch
		}
		o.n += n
		i += n
		if o.n == s.capSectors() {
			s.sealLocked()
		}
	}
	return epoch, nil
}

// unmapLocked unmaps n sectors of owner from lba on. lmu is held.
func (s *Store) unmapLocked(owner uint64, lba uint64, n int) {
	if m := s.ownerLocked(owner); m != nil {
		s.mapUpdateLocked(m, lba, n, false, 0, 0)
		s.ckptNeeded = true
	}
}

// dropOwnerLocked forgets an owner's map, releasing what it pointed at.
// lmu is held.
func (s *Store) dropOwnerLocked(owner uint64) {
	m := s.owners[owner]
	if m == nil {
		return
	}
	delete(s.owners, owner)
	for _, runs := range m.pages {
		for _, r := range runs {
			s.goneLocked(r.slot, int(r.n))
		}
	}
}

// appendSectors appends whole sectors for owner and returns the write
// epoch to flush through for them to be durable.
func (s *Store) appendSectors(owner uint64, lba uint64, data []byte) (uint64, error) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.appendLocked(owner, lba, data, nil)
}

// lastEpoch returns the write epoch of the newest caller's append.
func (s *Store) lastEpoch() uint64 {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.wepoch
}

// flushLog makes every write up to write epoch through durable, and every
// other before it, for everyone waiting (group commit: callers that
// arrive during a flush are served together by the next). It waits for
// the sealed stripes' writes, and makes the open stripe's data durable:
// when a few sectors of it are not yet, in the journal (journal.go),
// which leaves it open; otherwise by sealing it short and writing it.
// Then it syncs every device written once. It does not checkpoint the
// map: the roll-forward at Open finds these stripes and records.
func (s *Store) flushLog(through uint64) error {
	if through == 0 {
		return nil
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if s.durable >= through {
		return nil
	}
	epoch, dead, jw, err := s.writeOutLocked()
	if jw != nil {
		if err == nil {
			s.writeJournal(jw)
		}
		if err == nil {
			err = s.syncDevicesLocked()
		}
		if err == nil {
			err = s.journalDurable(jw)
		}
		if err != nil {
			s.journalFailed(jw)
		}
	} else if err == nil {
		err = s.syncDevicesLocked()
	}
	if err != nil {
		return err
	}
	s.durable = max(s.durable, epoch)
	s.jdead = max(s.jdead, dead)
	return nil
}

// writeOutLocked makes the open stripe's data the flush's to make
// durable: a journal record of its dirty sectors, or the stripe sealed
// and written. It waits until every sealed stripe is written (retrying
// failed ones), and returns the write epoch all of that covers and the
// generation below which journal records are dead once the flush's
// device sync is done. flushMu is held.
func (s *Store) writeOutLocked() (epoch, dead uint64, jw *jwrite, err error) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	epoch = s.wepoch
	var mine *logStripe
	if o := s.open; o != nil && o.n > 0 {
		if o.ndirty == 0 {
			dead = o.gen // nothing of it to flush: journaled already, or only the cleaner's
		} else if jw = s.journalLocked(o); jw != nil {
			dead = o.gen
		} else {
			mine = s.sealOpenLocked()
		}
	}
	if dead == 0 {
		// Every stripe handed out is sealed, and written below.
		dead = s.gen.Load() + 1
	}
	target := s.sealed
	if mine != nil {
		// The flush writes the stripe it sealed itself: a FUA write then
		// waits for no other goroutine before its sync.
		s.lmu.Unlock()
		err := s.writeLogStripe(mine)
		s.lmu.Lock()
		s.finishLocked(mine, err)
	}
	return epoch, dead, jw, s.waitWrittenLocked(target)
}

// waitWrittenLocked waits until every sealed stripe up to log sequence
// target is written, retrying failed ones. flushMu and lmu are held.
func (s *Store) waitWrittenLocked(target uint64) error {
	for {
		waiting := false
		for seq := range s.unwritten {
			if seq <= target {
				waiting = true
				break
			}
		}
		if waiting {
			s.lcond.Wait()
			continue
		}
		var retry *logStripe
		for seq, o := range s.failed {
			if seq <= target {
				retry = o
				break
			}
		}
		if retry == nil {
			return nil
		}
		delete(s.failed, retry.seq)
		s.inflight++
		s.unwritten[retry.seq] = retry
		s.lmu.Unlock()
		err := s.writeLogStripe(retry)
		s.lmu.Lock()
		s.finishLocked(retry, err)
		if err != nil {
			return err
		}
	}
}

// syncDevicesLocked makes durable the shard file of every writable device
// written since its last flush (syncFiles: an fdatasync each, or one cache
// flush for the devices of one disk that wrote over allocated slots), and
// probes every writable device. A
// device whose fsync or probe fails is taken out, and its shards of the
// stripes written since the last fsync are marked missing. flushMu is
// held.
func (s *Store) syncDevicesLocked() error {
	s.lmu.Lock()
	unsynced := s.unsynced
	s.unsynced = nil
	s.lmu.Unlock()
	var tasks []flushTask
	for _, d := range s.devs {
		if !d.writable() {
			continue
		}
		f := d.files.Load()
		if d.unsynced.Swap(false) {
			tasks = append(tasks, flushTask{d: d, file: f.data, alloc: f.alloc})
		}
		if d.junsynced.Swap(false) && f.jnl != nil {
			tasks = append(tasks, flushTask{d: d, file: f.jnl, alloc: f.jalloc})
		}
	}
	syncFiles(tasks, &s.stats)
	failed := make([]error, s.n)
	for _, t := range tasks {
		if failed[t.d.pos] == nil {
			failed[t.d.pos] = t.err
		}
	}
	// Every writable device, not only those synced: a flush after
	// devices went away must fail when too few are left, even if the
	// stripe it wrote had zero shards on them. A device whose directory
	// is gone still syncs its open file, so each is looked up by path
	// (a stat each, one after the other: too quick to hand to
	// goroutines), but those whose directory the watcher saw unchanged
	// since the last flush (one read for all of them).
	var quiet uint64
	if s.watch != nil {
		quiet = s.watch.Quiet()
	}
	synced := s.forWritableSeq(func(d *device, f *devFiles) error {
		if err := failed[d.pos]; err != nil {
			return err
		}
		if quiet&(1<<d.pos) != 0 {
			return nil
		}
		_, err := f.fs.Stat(identityFile)
		return err
	})
	if lost := s.allMask() &^ synced; lost != 0 {
		s.lmu.Lock()
		for _, slot := range unsynced {
			if si := &s.slots[slot]; si.used && si.ext.Missing&lost != lost {
				si.ext.Missing |= lost
				s.dirtySlots[slot] = struct{}{}
			}
		}
		s.lmu.Unlock()
	}
	return s.enoughDevices()
}

// piece is part of a read: sectors [sec, sec+n) of slot's stripe data go
// to dst.
type piece struct {
	key stripeKey
	ext extent
	sec int
	dst []byte
}

// readSectors reads whole sectors of owner from lba on into p. Sectors in
// memory are copied under lmu; the rest are read from the devices after
// it, under the read gate, so their slots are not reused meanwhile.
func (s *Store) readSectors(owner uint64, lba uint64, p []byte) error {
	nsec := len(p) / SectorSize
	var arr [8]piece
	pieces := arr[:0]
	s.lmu.Lock()
	m := s.ownerLocked(owner)
	if m == nil {
		s.lmu.Unlock()
		return fmt.Errorf("%w: owner %d is gone", ErrClosed, owner)
	}
	s.hostReads++
	for i := 0; i < nsec; {
		l, n, mapped := m.find(lba+uint64(i), nsec-i)
		dst := p[i*SectorSize : (i+n)*SectorSize]
		switch {
		case !mapped:
			clear(dst)
		case s.slots[l.slot].mem != nil:
			copy(dst, (*s.slots[l.slot].mem.buf)[l.sec*SectorSize:])
		default:
			si := &s.slots[l.slot]
			pieces = append(pieces, piece{key: si.key, ext: si.ext, sec: l.sec, dst: dst})
		}
		i += n
	}
	if len(pieces) == 0 {
		s.lmu.Unlock()
		return nil
	}
	s.gate.RLock()
	s.lmu.Unlock()
	defer s.gate.RUnlock()
	for i := range pieces {
		if err := s.readPiece(&pieces[i]); err != nil {
			clear(pieces[i:])
			return err
		}
	}
	clear(pieces) // drop references to p
	return nil
}

// readPiece reads one piece. A stripe written by format version 1 may end
// inside a sector (a chunk's last stripe): the rest reads as zeros.
func (s *Store) readPiece(pc *piece) error {
	lo := pc.sec * SectorSize
	hi := min(lo+len(pc.dst), s.geo.Data*pc.ext.ShardLen)
	if hi <= lo {
		clear(pc.dst)
		return nil
	}
	if err := s.readStripe(pc.key, pc.ext, lo, hi, pc.dst[:hi-lo]); err != nil {
		return err
	}
	clear(pc.dst[hi-lo:])
	return nil
}

// readBytes reads len(p) bytes of owner at byte offset off, for any
// alignment.
func (s *Store) readBytes(owner uint64, p []byte, off int64) error {
	if off%SectorSize == 0 && len(p)%SectorSize == 0 {
		return s.readSectors(owner, uint64(off/SectorSize), p)
	}
	// The aligned middle goes straight into p; the ends through a sector.
	for done := 0; done < len(p); {
		pos := off + int64(done)
		sec := pos / SectorSize
		in := int(pos % SectorSize)
		if in == 0 && len(p)-done >= SectorSize {
			n := (len(p) - done) / SectorSize
			if err := s.readSectors(owner, uint64(sec), p[done:done+n*SectorSize]); err != nil {
				return err
			}
			done += n * SectorSize
			continue
		}
		var tmp [SectorSize]byte
		if err := s.readSectors(owner, uint64(sec), tmp[:]); err != nil {
			return err
		}
		done += copy(p[done:], tmp[in:])
	}
	return nil
}

// writeBytes writes p at byte offset off of owner, for any alignment, and
// with fua waits until it is durable. A sector only partly written is
// read, merged and written whole, under its lock in locks, so that two
// such writes do not lose each other's bytes; nil locks when the caller
// serialises the owner's writes itself (a chunk's lock).
func (s *Store) writeBytes(owner uint64, locks *[stripeLocks]sync.Mutex, p []byte, off int64, fua bool) error {
	var seq uint64
	for done := 0; done < len(p); {
		pos := off + int64(done)
		sec := pos / SectorSize
		in := int(pos % SectorSize)
		if in == 0 && len(p)-done >= SectorSize {
			n := (len(p) - done) / SectorSize
			q, err := s.appendSectors(owner, uint64(sec), p[done:done+n*SectorSize])
			if err != nil {
				return err
			}
			seq = max(seq, q)
			done += n * SectorSize
			continue
		}
		var l *sync.Mutex
		if locks != nil {
			l = &locks[uint64(sec)%stripeLocks]
			l.Lock()
		}
		var tmp [SectorSize]byte
		err := s.readSectors(owner, uint64(sec), tmp[:])
		c := 0
		if err == nil {
			c = copy(tmp[in:], p[done:])
			var q uint64
			q, err = s.appendSectors(owner, uint64(sec), tmp[:])
			seq = max(seq, q)
		}
		if l != nil {
			l.Unlock()
		}
		if err != nil {
			return err
		}
		done += c
	}
	if fua {
		return s.flushLog(seq) // a write epoch
	}
	return nil
}
