package chunkstore

import (
	"sync"
	"sync/atomic"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// allocTrack is what a device knows of its shard file's blocks, so that a
// flush can make the writes of several devices on one disk durable with
// one cache flush (vfs.SharedFlush) instead of an fdatasync each: on a
// 4+2 store whose six devices share a disk, a 4 KiB FUA write then costs
// one flush, as it does on a plain file, where six fdatasyncs cost six.
//
// A slot is allocated on the device when its whole region (header region
// and unit) has blocks that a Sync has made durable. A write that lies
// over an allocated slot changes no metadata; any other sets meta, and
// the device's next flush is its own fdatasync, after which the slots it
// wrote whole are allocated.
type allocTrack struct {
	disk   uint64 // the disk, from vfs.SharedFlush.Disk
	shared vfs.SharedFlush

	// meta: a write since the last Sync began may need metadata.
	meta atomic.Bool

	// mu guards done, head, whole and heads. Leaf lock.
	mu    sync.Mutex
	done  []uint64 // bitmap of allocated slots
	head  []uint64 // bitmap of slots whose head (header region and first sector) is allocated
	whole []uint64 // slots written whole over unallocated blocks since the last Sync began
	heads []uint64 // slots whose head was written over unallocated blocks since then
}

// slotHead is the part of a slot a one-sector short stripe writes on each
// device: its header region and first sector, all that prepareSlots
// zeros. One-sector FUA writes, the common flush at QD1, then share
// their disk's flush there.
const slotHead = shardHeaderRegion + SectorSize

// trackAlloc sets up f's allocation tracking: when the shard file's file
// system writes in place, the slots it has blocks for (with scan) are
// allocated. The file is synced first, so that no block is counted that
// the file system has not yet allocated.
func (s *Store) trackAlloc(f *devFiles, scan bool) error {
	sf, ok := f.data.(vfs.SharedFlush)
	if !ok {
		return nil
	}
	disk, inPlace := sf.Disk()
	if !inPlace {
		return nil
	}
	t := &allocTrack{disk: disk, shared: sf}
	if scan {
		if err := f.data.Sync(); err != nil {
			return err
		}
		size := s.slotSize
		err := sf.Allocated(func(off, n int64) {
			first := (off + size - 1) / size
			for p := first; (p+1)*size <= off+n; p++ {
				setBit(&t.done, uint64(p))
			}
			// A head inside the range, whole slot or not.
			for p := off / size; p*size < off+n; p++ {
				if p*size >= off && p*size+slotHead <= off+n {
					setBit(&t.head, uint64(p))
				}
			}
		})
		if err != nil {
			return err
		}
	}
	f.alloc = t
	return nil
}

func setBit(bm *[]uint64, p uint64) {
	w := int(p / 64)
	for len(*bm) <= w {
		*bm = append(*bm, 0)
	}
	(*bm)[w] |= 1 << (p % 64)
}

func bitSet(bm []uint64, p uint64) bool {
	w := int(p / 64)
	return w < len(bm) && bm[w]&(1<<(p%64)) != 0
}

// note records a write of n bytes from the start of slot's region once it
// has completed; whole: it covered the region. A nil track needs nothing:
// every flush syncs.
func (t *allocTrack) note(slot uint64, n int, whole bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if bitSet(t.done, slot) || n <= slotHead && bitSet(t.head, slot) {
		return
	}
	t.meta.Store(true)
	if whole {
		t.whole = append(t.whole, slot)
	} else if n >= slotHead {
		t.heads = append(t.heads, slot)
	}
}

// syncBegin starts a Sync: it returns the slots that become allocated when
// it succeeds.
func (t *allocTrack) syncBegin() (whole, heads []uint64) {
	if t == nil {
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.meta.Store(false)
	whole, heads = t.whole, t.heads
	t.whole, t.heads = nil, nil
	return whole, heads
}

// synced marks slots (or their heads) allocated after a successful Sync.
func (t *allocTrack) synced(whole, heads []uint64) {
	if t == nil || len(whole)+len(heads) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range whole {
		setBit(&t.done, p)
		setBit(&t.head, p)
	}
	for _, p := range heads {
		setBit(&t.head, p)
	}
}

// forget marks the slots of runs as having no blocks (they are being
// punched), so that the next write into one of them has its own Sync.
// Call it holding flushMu: a flush in progress could otherwise mark a
// punched slot allocated when its Sync completes.
func (t *allocTrack) forget(runs []slotRun) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range runs {
		for p := r.first; p < r.first+r.n; p++ {
			if w := int(p / 64); w < len(t.done) {
				t.done[w] &^= 1 << (p % 64)
			}
			if w := int(p / 64); w < len(t.head) {
				t.head[w] &^= 1 << (p % 64)
			}
		}
	}
	t.meta.Store(true)
}

// flushTask is one file's part of a flush: a device's shard file or its
// journal.
type flushTask struct {
	d     *device
	file  vfs.File
	alloc *allocTrack // nil: the file syncs on its own
	err   error
}

// syncFiles makes every write that completed before it on the devices in
// tasks durable, and sets each task's err. Devices whose file system
// shares flushes (allocTrack) and that wrote only over allocated slots
// are written back, then one Sync per disk flushes them all; the others
// are synced each, after the write-backs of their disk, so that their
// Syncs' flushes serve the disk too. c counts the Syncs and the disks
// flushed by write-backs and one Sync alone.
func syncFiles(tasks []flushTask, c *counters) {
	groups := map[uint64][]int{} // disk → tasks that share its flush
	var alone []int
	for i := range tasks {
		if t := tasks[i].alloc; t != nil {
			groups[t.disk] = append(groups[t.disk], i)
		} else {
			alone = append(alone, i)
		}
	}
	if len(alone) == 0 && len(groups) == 1 {
		// One disk (the common case): no goroutine to hand off to.
		for _, g := range groups {
			syncGroup(tasks, g, c)
		}
		return
	}
	var wg sync.WaitGroup
	for _, i := range alone {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.deviceSyncs.Add(1)
			tasks[i].err = tasks[i].file.Sync()
		}()
	}
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			syncGroup(tasks, g, c)
		}()
	}
	wg.Wait()
}

// syncGroup flushes the tasks of one disk.
func syncGroup(tasks []flushTask, g []int, c *counters) {
	// Whether a device needs its own Sync is settled before anything is
	// issued: a write noted later is not this flush's to make durable.
	type member struct {
		i            int
		own          bool
		whole, heads []uint64
	}
	ms := make([]member, len(g))
	for n, i := range g {
		t := tasks[i].alloc
		own := t.meta.Load()
		ms[n] = member{i: i, own: own}
		if own {
			ms[n].whole, ms[n].heads = t.syncBegin()
		}
	}
	// each runs fn on every member, at once when more than one of the
	// busy members blocks.
	each := func(busy int, fn func(m *member)) {
		if busy <= 1 {
			for n := range ms {
				fn(&ms[n])
			}
			return
		}
		var wg sync.WaitGroup
		for n := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(&ms[n])
			}()
		}
		wg.Wait()
	}
	// Write back the devices that need no metadata, then sync the others:
	// their fdatasyncs, issued after the write-backs completed, flush
	// the disk for everyone. The write-backs are started all at once,
	// then waited for one after the other, from this goroutine: the
	// disk serves them together, and a lone FUA write's flush hands off to
	// no other goroutine.
	for n := range ms {
		if !ms[n].own {
			tasks[ms[n].i].err = tasks[ms[n].i].alloc.shared.StartWriteBack()
		}
	}
	for n := range ms {
		if tk := &tasks[ms[n].i]; !ms[n].own && tk.err == nil {
			tk.err = tk.alloc.shared.WriteBack()
		}
	}
	own := 0
	for n := range ms {
		if ms[n].own {
			own++
		}
	}
	flushed := false
	var mu sync.Mutex
	each(own, func(m *member) {
		if !m.own {
			return
		}
		tk := &tasks[m.i]
		c.deviceSyncs.Add(1)
		if tk.err = tk.file.Sync(); tk.err == nil {
			tk.alloc.synced(m.whole, m.heads)
			mu.Lock()
			flushed = true
			mu.Unlock()
		}
	})
	if flushed {
		return
	}
	// Only write-backs: one Sync flushes the disk; should it fail, each
	// device syncs on its own.
	for n := range ms {
		if tk := &tasks[ms[n].i]; tk.err == nil {
			c.deviceSyncs.Add(1)
			if tk.err = tk.file.Sync(); tk.err == nil {
				c.sharedFlushes.Add(1)
				return
			}
		}
	}
}

// slotAllocatedLocked reports whether every writable device that tracks
// its blocks has them for the first n bytes of slot (a shard's header
// region and payload), so that a short stripe there shares its disk's
// flush; true when no device tracks (nothing to prepare). lmu is held.
func (s *Store) slotAllocatedLocked(slot uint64, n int) bool {
	for _, d := range s.devs {
		f := d.files.Load()
		if !d.writable() || f == nil || f.alloc == nil {
			continue
		}
		f.alloc.mu.Lock()
		ok := bitSet(f.alloc.done, slot) || n <= slotHead && bitSet(f.alloc.head, slot)
		f.alloc.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// trimKeep is how many of the lowest free slots punchFree leaves their
// blocks: about 100 MiB of shard files at 4+2 with 64 KiB units.
const trimKeep = 256

// maxPrepare bounds the slots one checkpoint prepares (prepareSlots), and
// coldKick is how many short stripes sealed into slots without blocks
// kick a checkpoint: each checkpoint prepares eight for each of those,
// so that a FUA load shares its disk's flushes for most of its writes.
// After a trim the reservation is trimPrepare slots past its head, all
// prepared, for the writes that end the idle time.
const (
	maxPrepare  = 256
	coldKick    = 32
	trimPrepare = 64
)

// prepareSlots gives slots' heads (slotHead) blocks on every device whose
// shard file has no blocks for them yet, by writing zeros there, so that
// the one-sector short stripes a flush writes into them later change no
// metadata and share their disk's cache flush (allocTrack). The caller's next
// syncDevicesLocked makes the blocks durable; until then a flush into
// them simply has its own fdatasync. The slots must be ones the log
// cannot use yet (a checkpoint's new reservation, before the checkpoint
// completes) and that hold nothing: whatever they held is garbage.
func (s *Store) prepareSlots(slots []uint64) {
	if len(slots) == 0 {
		return
	}
	// Only the head: what a one-sector short stripe writes on a device.
	zero := make([]byte, slotHead)
	for _, d := range s.devs {
		f := d.files.Load()
		if !d.writable() || f == nil || f.alloc == nil {
			continue
		}
		for _, slot := range slots {
			f.alloc.mu.Lock()
			done := bitSet(f.alloc.done, slot) || bitSet(f.alloc.head, slot)
			f.alloc.mu.Unlock()
			if done {
				continue
			}
			d.writes.Add(1)
			n, err := f.data.WriteAt(zero, s.slotOffset(slot))
			s.stats.deviceBytes.Add(int64(n))
			d.writeBytes.Add(int64(n))
			if err != nil {
				// Only a preparation: the stripes written here later
				// meet the error themselves.
				d.errs.Add(1)
				break
			}
			s.wrote(d, f, slot, SectorSize)
		}
	}
}

// punchFree gives the blocks of every free slot back to the file system
// on each writable device whose shard file can punch holes (vfs.Puncher),
// after an idle pass: a store at rest then takes what its stripes in use
// need. The caller holds commitMu, so no checkpoint can reserve a free
// slot meanwhile, and nothing else writes or reads one. A failed punch
// costs only space: it is logged, and that device is left alone until
// the next trim.
func (s *Store) punchFree() {
	// The lowest free slots keep their blocks: the flushes that end the
	// idle time write a short stripe into a slot each, and one with
	// blocks shares its disk's flush.
	runs := s.alloc.freeRuns()
	for keep := trimKeep; keep > 0 && len(runs) > 0; {
		if r := &runs[0]; r.n > uint64(keep) {
			r.first += uint64(keep)
			r.n -= uint64(keep)
			break
		} else {
			keep -= int(r.n)
			runs = runs[1:]
		}
	}
	if len(runs) == 0 {
		return
	}
	type target struct {
		d *device
		f *devFiles
		p vfs.Puncher
	}
	var ts []target
	for _, d := range s.devs {
		f := d.files.Load()
		if !d.writable() || f == nil {
			continue
		}
		if p, ok := f.data.(vfs.Puncher); ok {
			ts = append(ts, target{d, f, p})
		}
	}
	if len(ts) == 0 {
		return
	}
	s.flushMu.Lock()
	for _, t := range ts {
		t.f.alloc.forget(runs)
	}
	s.flushMu.Unlock()
	parallel(len(ts), true, func(i int) {
		t := ts[i]
		for _, r := range runs {
			if err := t.p.Punch(s.slotOffset(r.first), int64(r.n)*s.slotSize); err != nil {
				s.log.Warn("chunkstore: could not punch free slots", "device", t.d.pos, "err", err)
				return
			}
			s.stats.slotsPunched.Add(int64(r.n))
		}
	})
}
