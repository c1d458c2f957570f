package chunkstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// repairQueue holds the slots of stripes a read found damaged.
type repairQueue struct {
	// mu guards slots. Leaf lock.
	mu    sync.Mutex
	slots map[uint64]struct{}
}

func (q *repairQueue) init() { q.slots = map[uint64]struct{}{} }

func (q *repairQueue) add(slot uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.slots[slot] = struct{}{}
}

func (q *repairQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.slots)
}

func (q *repairQueue) take() []uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]uint64, 0, len(q.slots))
	for p := range q.slots {
		out = append(out, p)
	}
	q.slots = map[uint64]struct{}{}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// stripeRef names a stripe to check: its slot, and the key and
// generation it held when listed.
type stripeRef struct {
	slot    uint64
	key     stripeKey
	gen     uint64
	sectors int
}

// cursor is the rebuild cursor of a ref: slots are checked in order.
func (r stripeRef) cursor() stripeKey { return stripeKey{Owner: 0, Index: r.slot} }

// stripeRefs lists every slot that holds a written stripe, by slot.
func (s *Store) stripeRefs() []stripeRef {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	var refs []stripeRef
	for p := range s.slots {
		if si := &s.slots[p]; si.used && si.mem == nil {
			refs = append(refs, stripeRef{slot: uint64(p), key: si.key, gen: si.ext.Gen, sectors: int(si.sectors)})
		}
	}
	return refs
}

// refOf returns the ref of a queued slot, if it still holds a stripe.
func (s *Store) refOf(slot uint64) (stripeRef, bool) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if slot >= uint64(len(s.slots)) {
		return stripeRef{}, false
	}
	si := &s.slots[slot]
	if !si.used || si.mem != nil {
		return stripeRef{}, false
	}
	return stripeRef{slot: slot, key: si.key, gen: si.ext.Gen, sectors: int(si.sectors)}, true
}

// lockStripe returns the stripe's current extent, holding the read gate
// so that its slot is not freed and reused until unlock; ok is false if
// the slot no longer holds that stripe. Whoever holds the gate must not
// take lmu (a reader holds lmu while it takes the gate). Stripes are never changed in
// place except by repairs, which only rewrite bad shards with what they
// should hold.
func (s *Store) lockStripe(ref stripeRef) (ext extent, ok bool, unlock func()) {
	s.lmu.Lock()
	si := &s.slots[ref.slot]
	ok = si.used && si.mem == nil && si.ext.Gen == ref.gen && si.key == ref.key
	ext = si.ext
	s.gate.RLock()
	s.lmu.Unlock()
	return ext, ok, s.gate.RUnlock
}

// clearMissing marks the devices in mask as holding good shards of the
// stripe again, if its slot still holds it.
func (s *Store) clearMissing(ref stripeRef, ext extent, mask uint64) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	si := &s.slots[ref.slot]
	if si.used && si.ext.Slot == ext.Slot && si.ext.Gen == ext.Gen && si.ext.Missing&mask != 0 {
		si.ext.Missing &^= mask
		s.dirtySlots[ref.slot] = struct{}{}
	}
}

// problemOf describes a damaged stripe for a report: the volume or chunk
// whose sectors it holds, when that is one. The caller holds the gate.
func (s *Store) problemOf(ref stripeRef, ext extent) StripeProblem {
	p := StripeProblem{Slot: ref.slot, Index: ref.key.Index}
	owner := ref.key.Owner
	if owner == logOwner {
		runs, err := s.summaryOf(ref.key, ext, ref.sectors)
		if err != nil || len(runs) == 0 {
			p.Mixed = true
			return p
		}
		first := runs[0].LBA
		for _, r := range runs[1:] {
			if r.Owner != runs[0].Owner {
				p.Mixed = true
				return p
			}
			first = min(first, r.LBA)
		}
		owner = runs[0].Owner
		p.Index = first / uint64(s.capSectors())
	}
	s.volMu.RLock()
	v := s.volByOwner[owner]
	s.volMu.RUnlock()
	if v != nil {
		p.Volume = v.name
		return p
	}
	s.chunks.mu.Lock()
	p.Chunk = s.chunks.byOwner[owner]
	s.chunks.mu.Unlock()
	return p
}

// ScrubOptions configure Scrub and RepairQueued.
type ScrubOptions struct {
	// BytesPerSecond limits the read rate; 0 is unlimited.
	BytesPerSecond int64
	// NoRepair only reports; nothing is written.
	NoRepair bool
	// Progress, if set, is called after each window of stripes.
	Progress func(Progress)
	// Window is how many stripes are rebuilt at once (0:
	// DefaultRebuildWindow). Progress is recorded, and a canceled
	// rebuild stops, at window boundaries.
	Window int
}

// Progress reports how far a scrub or rebuild has come.
type Progress struct {
	Stripes int64 // to do in all
	Done    int64
	Bytes   int64 // read so far
}

// ScrubReport counts what a scrub found.
type ScrubReport struct {
	// Checked stripes: every shard read and verified, data and parity
	// compared.
	Checked int64
	// Damaged stripes: at least one shard missing, unreadable, corrupt
	// or stale.
	Damaged int64
	// Repaired stripes: every bad shard rewritten in place.
	Repaired int64
	// ShardsRepaired counts the shards rewritten.
	ShardsRepaired int64
	// Unrecoverable stripes: fewer than K good shards, or data and parity
	// that disagree beyond what parity can locate. Their data is not
	// served.
	Unrecoverable int64
	// Degraded stripes: bad shards on devices that cannot take a repair
	// now (missing or failed); Rebuild fixes them.
	Degraded int64
	// Bytes read.
	Bytes int64
	// Problems lists damaged stripes (the first 100).
	Problems []StripeProblem
}

// StripeProblem is one damaged stripe.
type StripeProblem struct {
	Slot uint64 // the physical slot
	// A stripe of the log holds sectors of any volumes and chunks; a
	// stripe written by format version 1 (before Migrate) belongs to one
	// volume or chunk, named here with its stripe index.
	// Mixed: a log stripe that holds sectors of several volumes or chunks
	// (or whose summary could not be read); Volume and Chunk are unset.
	// The log writes sectors in the order they come, so a stripe of one
	// volume may hold several ranges of it.
	Mixed  bool
	Volume string  // owning volume, or ""
	Chunk  ChunkID // owning chunk, when Volume is "" and not Mixed
	// Index is the stripe index in the volume or chunk: for a log stripe,
	// the stripe-sized range of the volume or chunk that holds its first
	// sector.
	Index uint64
	// Devices holds the positions of the bad shards.
	Devices []int
	Err     error // set when unrecoverable
}

const maxProblems = 100

// Scrub verifies every stripe: it reads every shard, checks headers and
// sector checksums, checks that data and parity agree, and rewrites bad
// shards in place from the others (unless NoRepair). The repairs are
// durable when it returns. Scrub runs beside normal I/O, one stripe at a
// time under that stripe's lock; ctx cancels it.
func (s *Store) Scrub(ctx context.Context, opts ScrubOptions) (ScrubReport, error) {
	if err := s.checkOpen(); err != nil {
		return ScrubReport{}, err
	}
	return s.scrubRefs(ctx, s.stripeRefs(), opts)
}

// RepairQueued checks and repairs the stripes that reads found damaged
// (Stats.RepairQueue). A target calls it from a background goroutine.
func (s *Store) RepairQueued(ctx context.Context, opts ScrubOptions) (ScrubReport, error) {
	if err := s.checkOpen(); err != nil {
		return ScrubReport{}, err
	}
	var refs []stripeRef
	for _, slot := range s.repair.take() {
		if ref, ok := s.refOf(slot); ok {
			refs = append(refs, ref)
		}
	}
	return s.scrubRefs(ctx, refs, opts)
}

type pendingFix struct {
	ref  stripeRef
	ext  extent
	mask uint64
}

func (s *Store) scrubRefs(ctx context.Context, refs []stripeRef, opts ScrubOptions) (ScrubReport, error) {
	var rep ScrubReport
	lim := newLimiter(opts.BytesPerSecond)
	var fixes []pendingFix
	var err error
	for i, ref := range refs {
		if err = ctx.Err(); err != nil {
			break
		}
		n := s.scrubStripe(ref, opts.NoRepair, &rep, &fixes)
		rep.Bytes += n
		if opts.Progress != nil {
			opts.Progress(Progress{Stripes: int64(len(refs)), Done: int64(i + 1), Bytes: rep.Bytes})
		}
		if err = lim.wait(ctx, n); err != nil {
			break
		}
	}
	if cerr := s.applyFixes(fixes, nil); cerr != nil && err == nil {
		err = cerr
	}
	return rep, err
}

// scrubStripe checks one stripe and returns the bytes it read.
func (s *Store) scrubStripe(ref stripeRef, noRepair bool, rep *ScrubReport, fixes *[]pendingFix) int64 {
	ext, ok, unlock := s.lockStripe(ref)
	defer unlock()
	if !ok {
		return 0
	}
	c := s.examineStripe(ref.key, ext, 0)
	defer c.release()
	read := int64(ext.ShardLen) * int64(s.n)
	rep.Checked++
	if c.bad == 0 && c.err == nil {
		return read
	}
	rep.Damaged++
	prob := s.problemOf(ref, ext)
	prob.Err = c.err
	for i := range s.n {
		if c.bad&(1<<i) != 0 {
			prob.Devices = append(prob.Devices, s.devOf(ext.Slot, i))
		}
	}
	if len(rep.Problems) < maxProblems {
		rep.Problems = append(rep.Problems, prob)
	}
	if c.err != nil {
		rep.Unrecoverable++
		s.log.Error("chunkstore: stripe unrecoverable", "slot", ref.slot, "owner", ref.key.Owner, "index", ref.key.Index, "err", c.err)
		return read
	}
	if noRepair {
		return read
	}
	fixed, degraded := s.rewriteShards(ref, ext, c, rep)
	if degraded {
		rep.Degraded++
	} else {
		rep.Repaired++
	}
	if fixed != 0 {
		*fixes = append(*fixes, pendingFix{ref: ref, ext: ext, mask: fixed})
	}
	return read
}

// rewriteShards writes the bad shards of a checked stripe in place, on
// every device that can take them. It returns the devices written and
// whether some bad shard could not be written.
func (s *Store) rewriteShards(ref stripeRef, ext extent, c *stripeCheck, rep *ScrubReport) (fixed uint64, degraded bool) {
	key := ref.key
	var summary []sumRun
	if key.Owner == logOwner {
		// Every shard's header carries the stripe's summary: take it from
		// a good shard.
		for i := range s.n {
			if c.bad&(1<<i) != 0 || ext.Zero&(1<<i) != 0 {
				continue
			}
			hdr, runs, err := s.readHeader(ext.Slot, i, nil)
			if err == nil && hdr.Gen == ext.Gen && hdr.Index == key.Index {
				summary = runs
				break
			}
		}
		if summary == nil {
			return 0, true
		}
	}
	for i := range s.n {
		if c.bad&(1<<i) == 0 {
			continue
		}
		d := s.devs[s.devOf(ext.Slot, i)]
		if !d.writable() {
			degraded = true
			continue
		}
		if err := s.writeShard(d, key, ext.Slot, ext.Gen, i, c.shards[i][:ext.ShardLen], summary); err != nil {
			if !IsNoSpace(err) {
				d.fail(err, s.log)
			}
			degraded = true
			continue
		}
		fixed |= 1 << d.pos
		s.stats.shardsRepaired.Add(1)
		if rep != nil {
			rep.ShardsRepaired++
		}
	}
	return fixed, degraded
}

// applyFixes clears the missing marks of rewritten shards and commits;
// the commit fsyncs the shards before the metadata says they are good.
// extra adds to the commit (rebuild progress).
func (s *Store) applyFixes(fixes []pendingFix, extra func()) error {
	if len(fixes) == 0 && extra == nil {
		return nil
	}
	for _, f := range fixes {
		s.clearMissing(f.ref, f.ext, f.mask)
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if extra != nil {
		extra()
	}
	return s.commitLocked(nil)
}

// limiter paces a scan to a byte rate.
type limiter struct {
	rate  int64
	start time.Time
	bytes int64
}

func newLimiter(rate int64) *limiter { return &limiter{rate: rate, start: time.Now()} }

func (l *limiter) wait(ctx context.Context, n int64) error {
	if l.rate <= 0 {
		return nil
	}
	l.bytes += n
	due := l.start.Add(time.Duration(float64(l.bytes) / float64(l.rate) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RebuildOptions configure Rebuild.
type RebuildOptions struct {
	// FS is the replacement device; nil means the FS the store was opened
	// with at that position (an emptied or new directory there).
	FS vfs.FS
	// BytesPerSecond limits the read rate; 0 is unlimited.
	BytesPerSecond int64
	// Progress, if set, is called after each window of stripes.
	Progress func(Progress)
	// Window is how many stripes are rebuilt at once (0:
	// DefaultRebuildWindow). Progress is recorded, and a canceled
	// rebuild stops, at window boundaries.
	Window int
}

// RebuildReport counts what a rebuild did.
type RebuildReport struct {
	Stripes       int64 // stripes of the store when the pass began
	Rebuilt       int64 // stripes whose shard was written to the device
	Skipped       int64 // already complete (written after the rebuild began, or before a resume point), or zero padding there
	Unrecoverable int64 // stripes with fewer than K good shards elsewhere
	Bytes         int64 // bytes read
}

// rebuildCheckpoint is how many stripes a rebuild does between commits of
// its progress.
const rebuildCheckpoint = 256

// DefaultRebuildWindow is how many stripes a rebuild works on at once
// by default. Each stripe's reads run in parallel already; a window keeps
// several stripes' round trips in flight, which is what a rebuild over
// the network waits on (a cluster head's), and queues more I/O for a
// local disk.
const DefaultRebuildWindow = 16

// Rebuild fills the device at pos, which must be missing, failed or
// already rebuilding, with its shard of every stripe. A missing or failed
// device is replaced by an empty one (opts.FS, or the directory at that
// position), which gets a new identity; the old device is never used
// again (Open reports it as ErrForeignDevice). The rebuild commits its
// progress as it goes: after a crash or a cancelled ctx, Open the store and
// call Rebuild again to resume. The store serves reads and writes
// throughout; new writes go to the device at once.
func (s *Store) Rebuild(ctx context.Context, pos int, opts RebuildOptions) (RebuildReport, error) {
	var rep RebuildReport
	if err := s.checkOpen(); err != nil {
		return rep, err
	}
	if pos < 0 || pos >= s.n {
		return rep, fmt.Errorf("%w: device position %d of %d", ErrInvalidArgument, pos, s.n)
	}
	d := s.devs[pos]
	rec, err := s.startRebuild(d, opts.FS)
	if err != nil {
		return rep, err
	}
	s.log.Info("chunkstore: rebuilding device", "pos", pos, "device", d.name(), "resume", rec.Cursor)

	refs := s.stripeRefs()
	rep.Stripes = int64(len(refs))
	lim := newLimiter(opts.BytesPerSecond)
	var fixes []pendingFix
	cursor := rec.Cursor
	checkpoint := func(next stripeKey) error {
		err := s.applyFixes(fixes, func() {
			r := s.devRecs[pos]
			r.Cursor = next
			s.devRecs[pos] = r
			s.devDirty = true
		})
		fixes = fixes[:0]
		return err
	}
	type stripeResult struct {
		read int64
		fix  *pendingFix
		rep  RebuildReport
	}
	width := cmp.Or(max(opts.Window, 0), DefaultRebuildWindow)
	results := make([]stripeResult, width)
	for start := 0; start < len(refs); start += width {
		window := refs[start:min(start+width, len(refs))]
		if err := ctx.Err(); err != nil {
			return rep, errors.Join(err, checkpoint(window[0].cursor()))
		}
		if !d.writable() {
			return rep, d.devErr(fmt.Errorf("%w: %v", ErrDeviceFailed, d.getErr()))
		}
		// The window's stripes at once: each waits on its reads and
		// writes, which on a remote device are round trips.
		clear(results)
		parallel(len(window), true, func(j int) {
			ref, r := window[j], &results[j]
			if ref.cursor().less(cursor) {
				r.rep.Skipped++
				return
			}
			r.read, r.fix = s.rebuildStripe(ref, pos, rec.StartGen, &r.rep)
		})
		var read int64
		for _, r := range results[:len(window)] {
			if r.fix != nil {
				fixes = append(fixes, *r.fix)
			}
			read += r.read
			rep.Rebuilt += r.rep.Rebuilt
			rep.Skipped += r.rep.Skipped
			rep.Unrecoverable += r.rep.Unrecoverable
		}
		rep.Bytes += read
		if opts.Progress != nil {
			opts.Progress(Progress{Stripes: rep.Stripes, Done: int64(start + len(window)), Bytes: rep.Bytes})
		}
		next := window[len(window)-1].cursor()
		next.Index++
		if len(fixes) >= rebuildCheckpoint {
			if err := checkpoint(next); err != nil {
				return rep, err
			}
		}
		if err := lim.wait(ctx, read); err != nil {
			return rep, errors.Join(err, checkpoint(next))
		}
	}
	if err := checkpoint(stripeKey{Owner: ^uint64(0), Index: ^uint64(0)}); err != nil {
		return rep, err
	}
	if !d.writable() {
		return rep, d.devErr(fmt.Errorf("%w: %v", ErrDeviceFailed, d.getErr()))
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.devRecs[pos] = deviceRecord{Device: s.devRecs[pos].Device, State: recHealthy}
	s.devDirty = true
	if err := s.commitLocked(nil); err != nil {
		return rep, err
	}
	d.state.CompareAndSwap(int32(DeviceRebuilding), int32(DeviceHealthy))
	s.log.Info("chunkstore: device rebuilt", "pos", pos, "rebuilt", rep.Rebuilt, "unrecoverable", rep.Unrecoverable)
	return rep, nil
}

// startRebuild prepares the device at pos: resumes a rebuild in progress,
// or formats a replacement and records it in the device table.
func (s *Store) startRebuild(d *device, newFS vfs.FS) (deviceRecord, error) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	pos := d.pos
	switch d.getState() {
	case DeviceHealthy:
		return deviceRecord{}, d.devErr(fmt.Errorf("%w: device is healthy; nothing to rebuild (use Scrub to repair shards)", ErrInvalidArgument))
	case DeviceRebuilding:
		if newFS != nil && newFS != d.fsys() {
			return deviceRecord{}, d.devErr(fmt.Errorf("%w: a rebuild onto this device is in progress; resume it without a new FS", ErrInvalidArgument))
		}
		return s.devRecs[pos], nil
	}
	fsys := newFS
	if fsys == nil {
		fsys = d.fsys()
	}
	if _, err := readIdentity(fsys); err == nil {
		return deviceRecord{}, &DeviceError{Pos: pos, Device: fsys.String(),
			Err: fmt.Errorf("%w: the replacement holds an identity record; give an empty directory", ErrStoreExists)}
	}
	var src *devFiles
	for _, o := range s.devs {
		if o.writable() {
			src = o.files.Load()
			break
		}
	}
	if src == nil {
		return deviceRecord{}, ErrTooManyFailures
	}
	old := s.devRecs[pos]
	rec := deviceRecord{Device: uuid.New(), State: recRebuilding, StartGen: s.gen.Load() + 1}
	// The table names the new device before it has an identity, so a
	// crash in between leaves an empty device, not a foreign one.
	s.devRecs[pos] = rec
	s.devDirty = true
	if err := s.commitLocked(nil); err != nil {
		s.devRecs[pos] = old
		return deviceRecord{}, err
	}
	id := identity{Device: rec.Device, Store: s.id, Pos: pos, Geo: s.geo, Unit: s.unit, Created: time.Now().UnixNano(), Golden: s.golden}
	files, err := formatDevice(fsys, id, s.opts.journal, s.opts.metaLog, func(db metaDB) error { return copyMeta(db, src.db) })
	if err == nil {
		err = s.trackAlloc(files, false)
	}
	if err != nil {
		return deviceRecord{}, &DeviceError{Pos: pos, Device: fsys.String(), Err: err}
	}
	// Under flushMu: a flush writing the old device's journal is done.
	s.flushMu.Lock()
	if oldFiles := d.files.Load(); oldFiles != nil {
		oldFiles.close()
	}
	d.files.Store(files)
	d.setErr(nil)
	d.state.Store(int32(DeviceRebuilding))
	if s.watch != nil {
		s.watch.Add(pos, fsys)
	}
	s.flushMu.Unlock()
	return rec, nil
}

// rebuildStripe writes the rebuilt device's shard of one stripe (and
// repairs any other bad shard it meets). It returns the bytes read and
// the fix to record.
func (s *Store) rebuildStripe(ref stripeRef, pos int, startGen uint64, rep *RebuildReport) (int64, *pendingFix) {
	ext, ok, unlock := s.lockStripe(ref)
	defer unlock()
	if !ok {
		rep.Skipped++
		return 0, nil
	}
	if ext.Gen >= startGen && ext.Missing&(1<<pos) == 0 || ext.Zero&(1<<s.shardOf(ext.Slot, pos)) != 0 {
		// Written since the rebuild began, or zero padding there.
		rep.Skipped++
		return 0, nil
	}
	c := s.examineStripe(ref.key, ext, 1<<s.shardOf(ext.Slot, pos))
	defer c.release()
	read := int64(ext.ShardLen) * int64(s.n-1)
	if c.err != nil {
		rep.Unrecoverable++
		s.log.Error("chunkstore: stripe unrecoverable during rebuild", "slot", ref.slot, "err", c.err)
		return read, nil
	}
	fixed, _ := s.rewriteShards(ref, ext, c, nil)
	if fixed&(1<<pos) != 0 {
		rep.Rebuilt++
	}
	if fixed == 0 {
		return read, nil
	}
	return read, &pendingFix{ref: ref, ext: ext, mask: fixed}
}

// errRetired is the error of a device Retire took out of use.
var errRetired = errors.New("chunkstore: device retired (to be replaced)")

// Retire takes the healthy device at pos out of use, as an I/O error
// would: the store goes on without it, degraded, and Rebuild can then
// replace it with another device (moving a position to a device
// elsewhere: a cluster's rebalancer drains a node this way). It refuses
// with ErrTooManyFailures when more than M devices would then be out of
// use, and does nothing to a device already out of use.
func (s *Store) Retire(pos int) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if pos < 0 || pos >= s.n {
		return fmt.Errorf("%w: device position %d of %d", ErrInvalidArgument, pos, s.n)
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	d := s.devs[pos]
	if !d.writable() {
		return nil
	}
	if out := s.n - bits.OnesCount64(s.writableMask()) + 1; out > s.geo.Parity {
		return fmt.Errorf("%w: retiring device %d would leave %d of %d devices out of use, %s tolerates %d",
			ErrTooManyFailures, pos, out, s.n, s.geo, s.geo.Parity)
	}
	st := d.getState()
	if d.state.CompareAndSwap(int32(st), int32(DeviceFailed)) {
		d.setErr(errRetired)
		s.log.Info("chunkstore: device retired; continuing degraded until it is replaced", "pos", pos, "device", d.name())
	}
	return nil
}
