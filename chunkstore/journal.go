package chunkstore

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"slices"

	"github.com/google/uuid"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// The flush journal (doc.go, "Flushes of a few sectors: the journal"):
// a flush that finds only a few sectors of the open stripe not yet
// durable writes them, with a header, to the journal files of M+1
// devices, instead of sealing the stripe short. The open stripe stays
// open and is written whole when it fills; the journal records of its
// generation are dead once it is durable.

const (
	journalFile = "journal" // in every device directory: a ring of flush records

	// DefaultJournalSize is each device's journal file (WithJournalSize).
	DefaultJournalSize = 1 << 20

	// jMaxSectors and jMaxRuns bound a journal record: a flush of more
	// sectors, or of sectors in more runs, seals a short stripe, which
	// writes fewer bytes for them.
	jMaxSectors = 8
	jMaxRuns    = 8
)

// WithJournalSize sets the size of each device's journal file, a multiple
// of 4 KiB of at least 64 KiB (default DefaultJournalSize); 0 turns the
// journal off, so that every flush seals a short stripe. A larger journal
// lets more flushes of one open stripe go to it before one must seal.
func WithJournalSize(n int64) Option { return func(o *options) { o.journal = n } }

func validJournalSize(n int64) error {
	if n == 0 || n >= 64<<10 && n <= 1<<30 && n%SectorSize == 0 {
		return nil
	}
	return fmt.Errorf("%w: journal size %d: want 0, or a multiple of 4 KiB from 64 KiB to 1 GiB", ErrInvalidOption, n)
}

// ---------------------------------------------------------------------------
// Journal record: a 4 KiB header, then the data sectors it names, at a
// 4 KiB-aligned offset of a device's journal file.

const (
	jrOffMagic    = 0  // u32 journalMagic
	jrOffVersion  = 4  // u16 formatVersion
	jrOffRuns     = 6  // u16 r, the number of runs
	jrOffStore    = 8  // [16] store UUID
	jrOffPos      = 24 // u16 the device's position
	jrOffSectors  = 26 // u16 d, the data sectors after the header
	jrOffReserved = 28 // u32 zero
	jrOffOffset   = 32 // u64 the record's byte offset in the journal file
	jrOffSeq      = 40 // u64 record sequence, store-wide, from 1
	jrOffGen      = 48 // u64 generation of the open log stripe it journals
	jrOffSlot     = 56 // u64 that stripe's slot
	jrOffRunList  = 64 // r × {u64 owner, u64 first logical sector, u32 count}
	// then d × u32 CRC32C of each data sector, then u32 CRC32C of all
	// the bytes before it.

	jrRunSize    = 20
	journalMagic = 0x524a5343 // "CSJR"
)

// jrecordSize is a header's encoded size.
func jrecordSize(runs, sectors int) int { return jrOffRunList + jrRunSize*runs + 4*sectors + 4 }

// jrecord is a journal record's header.
type jrecord struct {
	Store          uuid.UUID
	Pos            int
	Offset         uint64
	Seq, Gen, Slot uint64
	Runs           []sumRun
	CRCs           []uint32 // one per data sector, in run order
}

// marshalInto encodes r into b (at least jrecordSize bytes) and returns
// the size.
func (r *jrecord) marshalInto(b []byte) int {
	size := jrecordSize(len(r.Runs), len(r.CRCs))
	clear(b[:size])
	le.PutUint32(b[jrOffMagic:], journalMagic)
	le.PutUint16(b[jrOffVersion:], formatVersion)
	le.PutUint16(b[jrOffRuns:], uint16(len(r.Runs)))
	copy(b[jrOffStore:], r.Store[:])
	le.PutUint16(b[jrOffPos:], uint16(r.Pos))
	le.PutUint16(b[jrOffSectors:], uint16(len(r.CRCs)))
	le.PutUint64(b[jrOffOffset:], r.Offset)
	le.PutUint64(b[jrOffSeq:], r.Seq)
	le.PutUint64(b[jrOffGen:], r.Gen)
	le.PutUint64(b[jrOffSlot:], r.Slot)
	o := jrOffRunList
	for _, run := range r.Runs {
		le.PutUint64(b[o:], run.Owner)
		le.PutUint64(b[o+8:], run.LBA)
		le.PutUint32(b[o+16:], run.N)
		o += jrRunSize
	}
	for _, c := range r.CRCs {
		le.PutUint32(b[o:], c)
		o += 4
	}
	le.PutUint32(b[o:], checksum(b[:o]))
	return size
}

// decodeJRecord decodes the header at the start of b: its magic, version,
// counts (every run at least one sector, their sum the sector count, the
// whole within one sector), reserved bytes and CRC32C are checked.
func decodeJRecord(b []byte) (jrecord, error) {
	var r jrecord
	if len(b) < jrOffRunList+4 {
		return r, corruptf("journal record of %d bytes", len(b))
	}
	if m := le.Uint32(b[jrOffMagic:]); m != journalMagic {
		return r, corruptf("journal record magic %#x", m)
	}
	if v := le.Uint16(b[jrOffVersion:]); v != formatVersion {
		return r, corruptf("journal record version %d", v)
	}
	nr, ns := int(le.Uint16(b[jrOffRuns:])), int(le.Uint16(b[jrOffSectors:]))
	size := jrecordSize(nr, ns)
	if nr == 0 || ns == 0 || size > SectorSize || size > len(b) {
		return r, corruptf("journal record of %d runs and %d sectors", nr, ns)
	}
	if got, want := le.Uint32(b[size-4:]), checksum(b[:size-4]); got != want {
		return r, corruptf("journal record checksum %#x, want %#x", got, want)
	}
	if le.Uint32(b[jrOffReserved:]) != 0 {
		return r, corruptf("journal record reserved bytes set")
	}
	copy(r.Store[:], b[jrOffStore:])
	r.Pos = int(le.Uint16(b[jrOffPos:]))
	r.Offset = le.Uint64(b[jrOffOffset:])
	r.Seq = le.Uint64(b[jrOffSeq:])
	r.Gen = le.Uint64(b[jrOffGen:])
	r.Slot = le.Uint64(b[jrOffSlot:])
	if r.Offset%SectorSize != 0 {
		return r, corruptf("journal record at offset %d", r.Offset)
	}
	o := jrOffRunList
	total := 0
	r.Runs = make([]sumRun, nr)
	for i := range r.Runs {
		run := sumRun{Owner: le.Uint64(b[o:]), LBA: le.Uint64(b[o+8:]), N: le.Uint32(b[o+16:])}
		if run.N == 0 || run.N > uint32(ns) {
			return r, corruptf("journal record run of %d sectors", run.N)
		}
		total += int(run.N)
		r.Runs[i] = run
		o += jrRunSize
	}
	if total != ns {
		return r, corruptf("journal record runs hold %d sectors, header says %d", total, ns)
	}
	r.CRCs = make([]uint32, ns)
	for i := range r.CRCs {
		r.CRCs[i] = le.Uint32(b[o:])
		o += 4
	}
	return r, nil
}

// ---------------------------------------------------------------------------
// The ring of one device's journal file.

// jring is where a device's journal records live: records are appended
// at head and wrap to the start when one does not fit before the end;
// live holds the records not yet dead, oldest first. Guarded by flushMu.
type jring struct {
	size int64
	head int64
	live []jspan
}

type jspan struct {
	off, n int64
	gen    uint64
}

// drop forgets the records of generations below dead: their stripes are
// durable. Records are appended in generation order.
func (r *jring) drop(dead uint64) {
	i := 0
	for i < len(r.live) && r.live[i].gen < dead {
		i++
	}
	if i > 0 {
		r.live = append(r.live[:0], r.live[i:]...)
	}
}

// place returns where a record of n bytes goes, if it fits without
// overwriting a live one.
func (r *jring) place(n int64) (int64, bool) {
	if n > r.size {
		return 0, false
	}
	if len(r.live) == 0 {
		if r.head+n <= r.size {
			return r.head, true
		}
		return 0, true
	}
	tail := r.live[0].off
	if r.head > tail {
		// Free: [head, size) and [0, tail).
		if r.head+n <= r.size {
			return r.head, true
		}
		if n <= tail {
			return 0, true
		}
		return 0, false
	}
	// Wrapped: free is [head, tail).
	if r.head+n <= tail {
		return r.head, true
	}
	return 0, false
}

func (r *jring) push(off, n int64, gen uint64) {
	r.live = append(r.live, jspan{off: off, n: n, gen: gen})
	r.head = off + n
}

// ---------------------------------------------------------------------------
// Journal files.

// createJournal writes a device's journal file whole, zeros, and syncs
// it, so that every block of it is allocated: records written over it
// later change no metadata and share their disk's flush (allocTrack).
func createJournal(fsys vfs.FS, size int64) (vfs.File, error) {
	f, err := fsys.OpenFile(journalFile, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return nil, err
	}
	if err := zeroJournal(f, size); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func zeroJournal(f vfs.File, size int64) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	zero := make([]byte, min(size, 256<<10))
	for off := int64(0); off < size; off += int64(len(zero)) {
		if _, err := f.WriteAt(zero[:min(int64(len(zero)), size-off)], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// openJournal opens a device's journal file, creating it empty when the
// device has none (a store made before the journal, or a crash during
// its creation) and size is not 0, and reports whether it is whole: its
// size, and every block allocated where the file system shares flushes.
// With size 0 (no journal) a journal file still opens, for its records.
func openJournal(fsys vfs.FS, size int64) (vfs.File, bool, error) {
	f, err := fsys.OpenFile(journalFile, os.O_RDWR)
	if errors.Is(err, fs.ErrNotExist) {
		if size == 0 {
			return nil, false, nil
		}
		f, err = fsys.OpenFile(journalFile, os.O_RDWR|os.O_CREATE)
	}
	if err != nil {
		return nil, false, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, false, err
	}
	if fi.Size() != size {
		return f, false, nil
	}
	return f, journalAllocated(f, size), nil
}

// journalAllocated reports whether every block of a journal file of size
// bytes is allocated, where that matters (vfs.SharedFlush).
func journalAllocated(f vfs.File, size int64) bool {
	sf, ok := f.(vfs.SharedFlush)
	if !ok {
		return true
	}
	if _, inPlace := sf.Disk(); !inPlace {
		return true
	}
	if f.Sync() != nil {
		return false
	}
	covered := int64(0)
	err := sf.Allocated(func(off, n int64) {
		if off <= covered {
			covered = max(covered, off+n)
		}
	})
	return err == nil && covered >= size
}

// trackJournal lets a whole journal file share its disk's flushes: it has
// all its blocks, so its writes never need metadata.
func trackJournal(f *devFiles, size int64) {
	f.ring = jring{size: size}
	sf, ok := f.jnl.(vfs.SharedFlush)
	if !ok {
		return
	}
	if disk, inPlace := sf.Disk(); inPlace {
		f.jalloc = &allocTrack{disk: disk, shared: sf}
	}
}

// resetJournals makes every writable device's journal whole and empty,
// once Open has applied its records and checkpointed (they are all dead).
// A device whose journal cannot be made whole flushes without one: the
// journal is only a faster path.
func (s *Store) resetJournals() {
	for _, d := range s.devs {
		f := d.files.Load()
		if f == nil || f.jnl == nil {
			continue
		}
		if s.opts.journal == 0 || !d.writable() {
			_ = f.jnl.Close()
			f.jnl = nil
			continue
		}
		if !f.jwhole {
			if err := zeroJournal(f.jnl, s.opts.journal); err != nil {
				s.log.Warn("chunkstore: could not write the journal; flushing without it", "device", d.pos, "err", err)
				_ = f.jnl.Close()
				f.jnl = nil
				continue
			}
			if err := f.fs.SyncDir("."); err != nil {
				s.log.Warn("chunkstore: could not write the journal; flushing without it", "device", d.pos, "err", err)
				_ = f.jnl.Close()
				f.jnl = nil
				continue
			}
			f.jwhole = true
		}
		trackJournal(f, s.opts.journal)
	}
}

// ---------------------------------------------------------------------------
// Writing records.

// jwrite is one flush's journal record; the Store keeps one (flushMu).
type jwrite struct {
	gen, slot, seq uint64
	runs           []sumRun
	data           []byte
	crcs           []uint32
	devs           []jdev
	hdr            []byte
	iov            [][]byte // header and data, for the vectored write: kept, so a flush allocates none
}

type jdev struct {
	d   *device
	f   *devFiles
	off int64
	err error
}

// markDirtyLocked notes that n sectors of the open stripe from position
// pos on were written by a caller and are not durable. lmu is held.
func (o *logStripe) markDirty(pos, n int) {
	for p := pos; p < pos+n; p++ {
		w := p / 64
		for len(o.dirty) <= w {
			o.dirty = append(o.dirty, 0)
		}
		if o.dirty[w]&(1<<(p%64)) == 0 {
			o.dirty[w] |= 1 << (p % 64)
			o.ndirty++
		}
	}
}

// journalLocked builds the record of the open stripe o's dirty sectors
// and picks the devices it goes to, or returns nil when the flush should
// seal o instead: too many sectors or runs, no journal, or no room on
// enough devices. It clears o's dirty sectors. flushMu and lmu are held.
func (s *Store) journalLocked(o *logStripe) *jwrite {
	if s.opts.journal == 0 || o.ndirty == 0 || o.ndirty > jMaxSectors {
		return nil
	}
	w := &s.jw
	w.runs, w.data = w.runs[:0], w.data[:0]
	ri, start := 0, 0 // o's summary run holding position p, and its first position
	for wi, word := range o.dirty {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << b
			p := wi*64 + b
			for p >= start+int(o.runs[ri].N) {
				start += int(o.runs[ri].N)
				ri++
			}
			r := o.runs[ri]
			lba := r.LBA + uint64(p-start)
			if n := len(w.runs); n > 0 && w.runs[n-1].Owner == r.Owner && w.runs[n-1].LBA+uint64(w.runs[n-1].N) == lba {
				w.runs[n-1].N++
			} else {
				if n == jMaxRuns {
					return nil
				}
				w.runs = append(w.runs, sumRun{Owner: r.Owner, LBA: lba, N: 1})
			}
			w.data = append(w.data, (*o.buf)[p*SectorSize:(p+1)*SectorSize]...)
		}
	}
	// A record must outlive as many device losses as the store can
	// still take: M+1 copies, fewer when devices are out.
	writable := 0
	for _, d := range s.devs {
		if d.writable() {
			writable++
		}
	}
	want := writable - s.geo.Data + 1
	if want <= 0 {
		return nil // the seal path reports the store's state
	}
	size := int64(SectorSize + len(w.data))
	seq := s.jseq + 1
	// Consecutive records start at devices want apart, which spreads
	// them over all devices.
	first := int(seq * uint64(want) % uint64(s.n))
	w.devs = w.devs[:0]
	for i := range s.n {
		if len(w.devs) == want {
			break
		}
		d := s.devs[(first+i)%s.n]
		f := d.files.Load()
		if !d.writable() || f == nil || f.jnl == nil {
			continue
		}
		f.ring.drop(s.jdead)
		if off, ok := f.ring.place(size); ok {
			w.devs = append(w.devs, jdev{d: d, f: f, off: off})
		}
	}
	if len(w.devs) < want {
		return nil
	}
	for _, jd := range w.devs {
		jd.f.ring.push(jd.off, size, o.gen)
	}
	s.jseq = seq
	w.gen, w.slot, w.seq = o.gen, o.slot, seq
	clear(o.dirty)
	o.ndirty = 0
	return w
}

// writeJournal writes w to each of its devices (a header and the data, one
// vectored write each); a device whose write fails is taken out. The
// caller's device sync makes them durable. flushMu is held.
func (s *Store) writeJournal(w *jwrite) {
	w.crcs = w.crcs[:0]
	for off := 0; off < len(w.data); off += SectorSize {
		w.crcs = append(w.crcs, checksum(w.data[off:off+SectorSize]))
	}
	if len(w.hdr) < SectorSize {
		w.hdr = make([]byte, SectorSize)
	}
	rec := jrecord{Store: s.id, Seq: w.seq, Gen: w.gen, Slot: w.slot, Runs: w.runs, CRCs: w.crcs}
	for i := range w.devs {
		jd := &w.devs[i]
		rec.Pos, rec.Offset = jd.d.pos, uint64(jd.off)
		rec.marshalInto(w.hdr)
		jd.d.writes.Add(1)
		w.iov = append(w.iov[:0], w.hdr[:SectorSize], w.data)
		n, err := jd.f.jnl.WriteAtv(w.iov, jd.off)
		s.stats.deviceBytes.Add(int64(n))
		s.stats.journalBytes.Add(int64(n))
		jd.d.writeBytes.Add(int64(n))
		jd.d.junsynced.Store(true)
		if err != nil {
			jd.err = err
			jd.d.errs.Add(1)
			jd.d.fail(fmt.Errorf("journal write: %w", err), s.log)
		}
	}
	s.stats.journalRecords.Add(1)
}

// journalDurable checks, after the device sync, that w lives on enough
// devices: one more than the writable devices the store can still lose.
func (s *Store) journalDurable(w *jwrite) error {
	ok, writable := 0, 0
	for _, jd := range w.devs {
		if jd.err == nil && jd.d.writable() {
			ok++
		}
	}
	for _, d := range s.devs {
		if d.writable() {
			writable++
		}
	}
	if need := writable - s.geo.Data + 1; ok < max(need, 1) {
		return fmt.Errorf("%w: a flush's journal record reached %d devices, %d needed", ErrTooManyFailures, ok, need)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Replaying records at Open.

// jfound is a record read back at Open, with its data.
type jfound struct {
	jrecord
	data []byte
}

// readJournals reads every valid record of this store above logGen from
// the journal of every device that has one, one copy of each (replicas
// share a seq), in seq order.
func (s *Store) readJournals(logGen uint64) []jfound {
	bySeq := map[uint64]jfound{}
	for _, d := range s.devs {
		f := d.files.Load()
		if f == nil || f.jnl == nil || !(d.readable() || d.writable()) {
			continue
		}
		fi, err := f.jnl.Stat()
		if err != nil {
			continue
		}
		buf := make([]byte, fi.Size()&^(SectorSize-1))
		if err := vfs.ReadFull(f.jnl, buf, 0); err != nil {
			s.log.Warn("chunkstore: could not read the journal", "device", d.pos, "err", err)
			continue
		}
		for off := 0; off+SectorSize <= len(buf); {
			r, err := decodeJRecord(buf[off : off+SectorSize])
			end := off + SectorSize + len(r.CRCs)*SectorSize
			if err != nil || r.Store != s.id || r.Pos != d.pos || r.Offset != uint64(off) || end > len(buf) {
				off += SectorSize
				continue
			}
			// New records take seqs above every one on the devices.
			s.jseq = max(s.jseq, r.Seq)
			if r.Gen <= logGen {
				off += SectorSize
				continue
			}
			data := buf[off+SectorSize : end]
			good := true
			for i, c := range r.CRCs {
				if checksum(data[i*SectorSize:(i+1)*SectorSize]) != c {
					good = false
					break
				}
			}
			if !good {
				off += SectorSize
				continue
			}
			if _, dup := bySeq[r.Seq]; !dup {
				bySeq[r.Seq] = jfound{jrecord: r, data: data}
			}
			off = end
		}
	}
	out := make([]jfound, 0, len(bySeq))
	for _, r := range bySeq {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b jfound) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// replayJournal applies the journal at Open, after the roll-forward:
// every record above logGen whose stripe the roll-forward did not find
// holds sectors a flush made durable in the journal alone. The newest
// version of each sector (by record seq) is written to the log again,
// unless the map points at a stripe of a later generation (written after
// the record); the checkpoint Open makes next makes them durable in
// stripes. It returns the records applied.
func (s *Store) replayJournal(logGen uint64, replayed map[uint64]bool) (int, error) {
	recs := s.readJournals(logGen)
	type sectorKey struct{ owner, lba uint64 }
	type version struct {
		gen  uint64
		data []byte
	}
	newest := map[sectorKey]version{}
	var order []sectorKey
	applied := 0
	for _, r := range recs {
		if replayed[r.Gen] {
			continue
		}
		applied++
		i := 0
		for _, run := range r.Runs {
			for j := range uint64(run.N) {
				k := sectorKey{run.Owner, run.LBA + j}
				if _, ok := newest[k]; !ok {
					order = append(order, k)
				}
				newest[k] = version{gen: r.Gen, data: r.data[i*SectorSize : (i+1)*SectorSize]}
				i++
			}
		}
	}
	if len(order) == 0 {
		return 0, nil
	}
	slices.SortFunc(order, func(a, b sectorKey) int {
		if c := cmp.Compare(a.owner, b.owner); c != 0 {
			return c
		}
		return cmp.Compare(a.lba, b.lba)
	})
	s.lmu.Lock()
	defer s.lmu.Unlock()
	// The slots the checkpoint reserved and the roll-forward left are the
	// log's until Open's checkpoint: a stripe written there is found by
	// the next roll-forward should Open not get that far.
	if need := (len(order) + s.capSectors() - 1) / s.capSectors(); len(s.resv) < need+1 {
		return 0, fmt.Errorf("chunkstore: the journal holds %d sectors, the log reservation has room for %d", len(order), len(s.resv)*s.capSectors())
	}
	s.resvLimit = s.pops + uint64(len(s.resv))
	s.opening = true
	defer func() { s.opening = false }()
	for _, k := range order {
		v := newest[k]
		m := s.ownerLocked(k.owner)
		if m == nil {
			continue
		}
		if l, _, mapped := m.find(k.lba, 1); mapped && s.slots[l.slot].ext.Gen > v.gen {
			continue
		}
		if _, err := s.appendLocked(k.owner, k.lba, v.data, nil); err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// journalFailed is called when a flush that journaled w failed: the
// sectors it took from the open stripe are not durable, so the next flush
// seals that stripe (if it is still open) instead of journaling the rest.
func (s *Store) journalFailed(w *jwrite) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if o := s.open; o != nil && o.gen == w.gen {
		o.ndirty = jMaxSectors + 1
	}
}
