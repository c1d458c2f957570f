package chunkstore

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// bufferPool recycles shard-sized buffers and header buffers, so the
// steady-state I/O path does not allocate them.
type bufferPool struct {
	unit    int
	stripes sync.Pool // *[]byte of K × unit bytes: log stripes
	shards  sync.Pool // *[]byte of unit bytes
	hdrs    sync.Pool // *hdrBuf
	reads   sync.Pool // *readScratch
}

type hdrBuf struct {
	b    [shardHeaderRegion]byte
	crcs [MaxStripeUnit / SectorSize]uint32
	// iov is readShardRange's preadv vector (header region, payload),
	// and offs their offsets for a RangeReader, kept here so that
	// building them allocates nothing.
	iov  [2][]byte
	offs [2]int64
}

func (p *bufferPool) init(unit, k int) {
	p.unit = unit
	p.stripes.New = func() any { b := make([]byte, k*unit); return &b }
	p.shards.New = func() any { b := make([]byte, unit); return &b }
	p.hdrs.New = func() any { return new(hdrBuf) }
	p.reads.New = func() any { return new(readScratch) }
}

func (p *bufferPool) stripe() *[]byte     { return p.stripes.Get().(*[]byte) }
func (p *bufferPool) putStripe(b *[]byte) { p.stripes.Put(b) }
func (p *bufferPool) shard() *[]byte      { return p.shards.Get().(*[]byte) }
func (p *bufferPool) putShard(b *[]byte)  { p.shards.Put(b) }
func (p *bufferPool) hdr() *hdrBuf        { return p.hdrs.Get().(*hdrBuf) }
func (p *bufferPool) putHdr(h *hdrBuf)    { p.hdrs.Put(h) }

// counters are the store's event counts (Stats).
type counters struct {
	stripesWritten, stripesRead   atomic.Int64
	degradedWrites                atomic.Int64
	reconstructions, readFailures atomic.Int64
	shardUnavailable, shardIO     atomic.Int64
	shardChecksum, shardHeader    atomic.Int64
	shardsRepaired                atomic.Int64
	autoCommits                   atomic.Int64
	compactions, slotsPunched     atomic.Int64
	deviceSyncs, sharedFlushes    atomic.Int64
	deviceBytes                   atomic.Int64 // header regions and payloads written, journal records
	journalRecords, journalBytes  atomic.Int64
}

// Stats are counts since Open.
type Stats struct {
	StripesWritten int64 // stripes written (copy-on-write)
	StripesRead    int64 // stripe reads (one per stripe a read touched)
	DegradedWrites int64 // stripes written with some device unavailable
	// Reconstructions counts stripe reads served by reconstructing from
	// parity because a shard was missing, unreadable or corrupt.
	Reconstructions int64
	// ReadFailures counts stripe reads that failed with too few shards.
	ReadFailures int64
	// Shard faults met by reads, by kind.
	ShardUnavailable int64 // device out of use, or shard marked missing
	ShardIOErrors    int64 // the read failed
	ShardChecksum    int64 // a sector's CRC32C did not match
	ShardHeader      int64 // header corrupt, or of another stripe (stale)
	// ShardsRepaired counts shards rewritten by scrub, the repair queue
	// and rebuild.
	ShardsRepaired int64
	// RepairQueue is the number of stripes waiting for RepairQueued.
	RepairQueue int
	// AutoCommits counts the checkpoints made in the background (log
	// reservation half used, released slots waiting, or a timer).
	AutoCommits int64

	// The log and its cleaner.
	LiveBytes int64 // data the maps point at
	// DeadBytes is the space in slots holding stripes that no map points
	// at any more (overwritten, discarded, or the unused tail of a short
	// stripe): what the cleaner can reclaim, in data bytes.
	DeadBytes    int64
	SlotsUsed    int64 // slots holding a stripe
	SlotsFree    int64 // slots below the high-water mark holding none
	StripesOpen  int   // log stripes in memory: open, or being written
	CleanerBytes int64 // data the cleaner moved since Open
	HostBytes    int64 // data written by callers since Open (whole sectors)
	// DeviceBytes counts what went to the shard and journal files since
	// Open: header regions, data and parity, the cleaner's moves,
	// repairs, and journal records.
	DeviceBytes int64
	// JournalRecords counts the flushes that made the open stripe's data
	// durable in the journal (journal.go), each written to M+1 devices,
	// and JournalBytes what they wrote, headers included.
	JournalRecords int64
	JournalBytes   int64
	// IdleBytes is the part of CleanerBytes that idle passes moved
	// (WithIdleCompaction); Compactions counts the idle passes finished,
	// each with its trimming checkpoint, and SlotsPunched the free slots
	// those gave back to the file system (a slot counts once per device
	// set punched, each time).
	IdleBytes    int64
	Compactions  int64
	SlotsPunched int64
	// WriteCacheBytes is the volumes' data in the write cache now
	// (WithWriteCache), not yet in the log; WriteCacheDestaged counts
	// what went from the cache to the log since Open. Data written again
	// while cached reaches the log once.
	WriteCacheBytes    int64
	WriteCacheDestaged int64
	// DeviceSyncs counts the fdatasyncs of shard files, and SharedFlushes
	// the flushes of a disk that write-backs and one of those served for
	// all its devices (vfs.SharedFlush): a 4 KiB FUA write costs one
	// sync when it shares, one per shard written when it does not.
	DeviceSyncs   int64
	SharedFlushes int64
	// WriteAmplification is DeviceBytes / HostBytes (0 before any write);
	// the metadata replicas' own writes are not in it.
	WriteAmplification float64
}

// Stats returns the event counters.
func (s *Store) Stats() Stats {
	c := &s.stats
	st := Stats{
		StripesWritten:   c.stripesWritten.Load(),
		StripesRead:      c.stripesRead.Load(),
		DegradedWrites:   c.degradedWrites.Load(),
		Reconstructions:  c.reconstructions.Load(),
		ReadFailures:     c.readFailures.Load(),
		ShardUnavailable: c.shardUnavailable.Load(),
		ShardIOErrors:    c.shardIO.Load(),
		ShardChecksum:    c.shardChecksum.Load(),
		ShardHeader:      c.shardHeader.Load(),
		ShardsRepaired:   c.shardsRepaired.Load(),
		RepairQueue:      s.repair.len(),
		AutoCommits:      c.autoCommits.Load(),
		Compactions:      c.compactions.Load(),
		SlotsPunched:     c.slotsPunched.Load(),
		DeviceSyncs:      c.deviceSyncs.Load(),
		SharedFlushes:    c.sharedFlushes.Load(),
		DeviceBytes:      c.deviceBytes.Load(),
		JournalRecords:   c.journalRecords.Load(),
		JournalBytes:     c.journalBytes.Load(),
	}
	if p := s.wpool; p != nil {
		p.mu.Lock()
		st.WriteCacheBytes, st.WriteCacheDestaged = int64(p.used)*SectorSize, p.destaged
		p.mu.Unlock()
	}
	s.lmu.Lock()
	st.LiveBytes = s.liveTotal * SectorSize
	st.SlotsUsed = s.dataSlots
	st.DeadBytes = s.dataCap*SectorSize - st.LiveBytes
	high := int64(0)
	for p := len(s.slots) - 1; p >= 0; p-- {
		if s.slots[p].used {
			high = int64(p) + 1
			break
		}
	}
	st.SlotsFree = high - s.dataSlots
	st.StripesOpen = len(s.unwritten) + len(s.failed)
	if s.open != nil {
		st.StripesOpen++
	}
	st.CleanerBytes = s.cleaned * SectorSize
	st.IdleBytes = s.idleCleaned * SectorSize
	st.HostBytes = s.hostSecs * SectorSize
	s.lmu.Unlock()
	if st.HostBytes > 0 {
		st.WriteAmplification = float64(st.DeviceBytes) / float64(st.HostBytes)
	}
	return st
}

// shardFault classifies why a shard could not be used.
type shardFault int

const (
	faultUnavailable shardFault = iota + 1
	faultIO
	faultHeader
	faultChecksum
)

// shardError is a shard that could not be used.
type shardError struct {
	fault shardFault
	dev   int
	err   error
}

func (e *shardError) Error() string { return fmt.Sprintf("device %d: %v", e.dev, e.err) }
func (e *shardError) Unwrap() error { return e.err }

var errUnavailable = errors.New("device unavailable")

func (s *Store) countFault(err error) {
	var se *shardError
	if !errors.As(err, &se) {
		s.stats.shardIO.Add(1)
		return
	}
	switch se.fault {
	case faultUnavailable:
		s.stats.shardUnavailable.Add(1)
	case faultIO:
		s.stats.shardIO.Add(1)
	case faultHeader:
		s.stats.shardHeader.Add(1)
	case faultChecksum:
		s.stats.shardChecksum.Add(1)
	}
}

// parallel runs fn(i) for i in [0, n), concurrently when n > 1 and
// there is enough work to pay for the goroutines.
func parallel(n int, concurrent bool, fn func(i int)) {
	if n == 1 || !concurrent {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	wg.Add(n - 1)
	for i := 1; i < n; i++ {
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	fn(0)
	wg.Wait()
}

// parallelMin is the number of bytes below which shard I/O stays on the
// calling goroutine.
const parallelMin = 32 << 10

// maxBatch is the most stripes written in one batch.
const maxBatch = 16

// stripeWrite is one stripe to write: K data shards of one length, and
// for a log stripe the summary its headers carry.
type stripeWrite struct {
	key     stripeKey
	data    [][]byte
	summary []sumRun
}

// devWrite is one shard bound for a device.
type devWrite struct {
	stripe int // index in the batch
	shard  int
	slot   uint64
}

// writeStripesAt writes stripes into the slots and generations exts name
// (each exts[j].ShardLen the length of ws[j]'s shards): it encodes each
// stripe's K data shards into M parity shards, then has one goroutine per
// device checksum its shards and write them, each run of consecutive
// slots with one pwritev. On ENOSPC it fails with ErrNoSpace; a device
// that fails otherwise is taken out of use and exts[j].Missing marks it,
// unless a stripe is then left with fewer than K shards
// (ErrTooManyFailures).
func (s *Store) writeStripesAt(ws []stripeWrite, exts []extent) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	k, m := s.geo.Data, s.geo.Parity
	shards := make([][][]byte, len(ws))
	parity := make([]*[]byte, 0, len(ws)*m)
	defer func() {
		for _, p := range parity {
			s.bufs.putShard(p)
		}
	}()
	bytes := 0
	for j, w := range ws {
		shardLen := exts[j].ShardLen
		bytes += shardLen * s.n
		shards[j] = make([][]byte, s.n)
		copy(shards[j], w.data)
		for i := range m {
			p := s.bufs.shard()
			parity = append(parity, p)
			shards[j][k+i] = (*p)[:shardLen]
		}
		if err := s.codec.encode(shards[j]); err != nil {
			return fmt.Errorf("chunkstore: encode: %w", err)
		}
	}
	errs := make([]error, s.n)
	parallel(s.n, bytes >= parallelMin, func(pos int) {
		d := s.devs[pos]
		var list [maxBatch]devWrite
		writes := list[:0]
		for j, e := range exts {
			// A short stripe's zero padding is not written.
			if i := s.shardOf(e.Slot, pos); e.Zero&(1<<i) == 0 {
				writes = append(writes, devWrite{stripe: j, shard: i, slot: e.Slot})
			}
		}
		if len(writes) == 0 {
			return
		}
		if !d.writable() {
			errs[pos] = errUnavailable
			return
		}
		errs[pos] = s.writeDeviceShards(d, ws, exts, shards, writes)
	})
	var lost uint64
	var nospace error
	for pos, err := range errs {
		if err == nil {
			continue
		}
		d := s.devs[pos]
		lost |= 1 << pos
		switch {
		case IsNoSpace(err):
			nospace = d.devErr(err)
		case err != errUnavailable:
			d.fail(err, s.log)
		}
	}
	if nospace != nil {
		return fmt.Errorf("%w: %w", ErrNoSpace, nospace)
	}
	if bits.OnesCount64(lost) > m {
		return &StripeError{Owner: ws[0].key.Owner, Index: ws[0].key.Index,
			Err: fmt.Errorf("%w: %d of %d shards could not be written", ErrTooManyFailures, bits.OnesCount64(lost), s.n)}
	}
	for j := range exts {
		exts[j].Missing = lost
	}
	s.stats.stripesWritten.Add(int64(len(ws)))
	if lost != 0 {
		s.stats.degradedWrites.Add(int64(len(ws)))
	}
	return nil
}

// writeDeviceShards checksums and writes one device's shards of a batch,
// each run of consecutive full slots in one vectored write.
func (s *Store) writeDeviceShards(d *device, ws []stripeWrite, exts []extent, shards [][][]byte, writes []devWrite) error {
	f := d.files.Load()
	sort.Slice(writes, func(a, b int) bool { return writes[a].slot < writes[b].slot })
	hdrs := make([]*hdrBuf, 0, len(writes))
	defer func() {
		for _, h := range hdrs {
			s.bufs.putHdr(h)
		}
	}()
	var iovArr [2 * maxBatch][]byte
	iov := iovArr[:0]
	first := 0 // the run is writes[first:first+len(iov)/2]
	flush := func() error {
		if len(iov) == 0 {
			return nil
		}
		d.writes.Add(1)
		n, err := f.data.WriteAtv(iov, s.slotOffset(writes[first].slot))
		s.stats.deviceBytes.Add(int64(n))
		d.writeBytes.Add(int64(n))
		for _, w := range writes[first : first+len(iov)/2] {
			s.wrote(d, f, w.slot, len(shards[w.stripe][w.shard]))
		}
		first += len(iov) / 2
		iov = iov[:0]
		if err != nil {
			d.errs.Add(1)
		}
		return err
	}
	for n, w := range writes {
		e := exts[w.stripe]
		payload := shards[w.stripe][w.shard]
		h := s.bufs.hdr()
		hdrs = append(hdrs, h)
		s.encodeShardHeader(h, ws[w.stripe].key, e.Slot, e.Gen, w.shard, payload, ws[w.stripe].summary)
		// Slots are contiguous in the file only when the one before is
		// full (header region + a whole unit).
		contiguous := n > 0 && w.slot == writes[n-1].slot+1 && exts[writes[n-1].stripe].ShardLen == s.unit
		if !contiguous {
			if err := flush(); err != nil {
				return err
			}
		}
		iov = append(iov, h.b[:], payload)
	}
	return flush()
}

// wrote records, once a write of a shard of length n into slot has
// completed (or failed), that the device has something to flush. Not
// before: a flush running meanwhile would take the mark and sync before
// the write landed, and the flush that needs the write would find nothing
// to sync.
func (s *Store) wrote(d *device, f *devFiles, slot uint64, n int) {
	f.alloc.note(slot, shardHeaderRegion+n, n == s.unit)
	d.unsynced.Store(true)
}

// encodeShardHeader fills h's header region (the header, the stripe's
// summary, then zeros) for shard i of a stripe.
func (s *Store) encodeShardHeader(h *hdrBuf, key stripeKey, slot, gen uint64, i int, payload []byte, summary []sumRun) {
	n := sectorsOf(len(payload))
	hdr := shardHeader{Store: s.id, Owner: key.Owner, Index: key.Index, Slot: slot, Gen: gen,
		Shard: i, Geo: s.geo, Length: len(payload), CRCs: h.crcs[:n]}
	for j := range n {
		hdr.CRCs[j] = checksum(payload[j*SectorSize : min((j+1)*SectorSize, len(payload))])
	}
	hn := hdr.marshalInto(h.b[:])
	hn += encodeSummary(h.b[hn:], summary)
	clear(h.b[hn:])
}

// writeShard writes shard i of a stripe, header and payload, into slot
// (an in-place repair of a shard known to be bad).
func (s *Store) writeShard(d *device, key stripeKey, slot, gen uint64, i int, payload []byte, summary []sumRun) error {
	f := d.files.Load()
	h := s.bufs.hdr()
	defer s.bufs.putHdr(h)
	s.encodeShardHeader(h, key, slot, gen, i, payload, summary)
	d.writes.Add(1)
	n, err := f.data.WriteAtv([][]byte{h.b[:], payload}, s.slotOffset(slot))
	s.stats.deviceBytes.Add(int64(n))
	d.writeBytes.Add(int64(n))
	s.wrote(d, f, slot, len(payload))
	if err != nil {
		d.errs.Add(1)
		return err
	}
	return nil
}

// readShardRange reads bytes [a, b) of shard i of the stripe at ext into
// dst (len b-a) and verifies them: the header must name this stripe,
// slot, generation and shard, and every sector in the range must match
// its CRC32C. a must be sector-aligned; b is sector-aligned or the shard's
// end.
func (s *Store) readShardRange(key stripeKey, ext extent, i, a, b int, dst []byte) error {
	return s.readShard(key, ext, i, a, b, dst, false)
}

// errWouldBlock: a read with nowait found bytes not in memory.
var errWouldBlock = vfs.ErrWouldBlock

// readShard is readShardRange. With nowait it reads only from memory (the
// page cache): it returns errWouldBlock, having counted nothing, when the
// device would have to be waited for or its file cannot tell
// (vfs.NowaitReader).
func (s *Store) readShard(key stripeKey, ext extent, i, a, b int, dst []byte, nowait bool) error {
	if ext.Zero&(1<<i) != 0 {
		clear(dst) // zero padding, never written
		return nil
	}
	pos := s.devOf(ext.Slot, i)
	d := s.devs[pos]
	f := d.files.Load()
	if f == nil || f.data == nil {
		return &shardError{fault: faultUnavailable, dev: pos, err: errUnavailable}
	}
	var nw vfs.NowaitReader
	if nowait {
		var ok bool
		if nw, ok = f.data.(vfs.NowaitReader); !ok {
			return errWouldBlock
		}
	}
	h := s.bufs.hdr()
	defer s.bufs.putHdr(h)
	off := s.slotOffset(ext.Slot)
	payload := off + shardHeaderRegion + int64(a)
	n := 0            // bytes read
	got := false      // dst was read with the header
	var crcs []uint32 // the sectors' CRC32C
	// fault counts the read (nothing is counted before it completes or
	// fails, so that a nowait read that would block counted nothing).
	fault := func(kind shardFault, err error) error {
		d.reads.Add(1)
		d.readBytes.Add(int64(n))
		if kind == faultIO {
			d.errs.Add(1)
		}
		return &shardError{fault: kind, dev: pos, err: err}
	}
	if a != 0 && s.hdrs.get(key, ext, i, h.crcs[:]) {
		// The header is known (hdrcache.go): only the sectors.
		crcs = h.crcs[:sectorsOf(ext.ShardLen)]
	} else {
		hn := shardHeaderSize(ext.ShardLen)
		var rerr error
		rr, remote := f.data.(vfs.RangeReader)
		switch {
		case a == 0:
			// Header region and payload are contiguous: one read.
			h.iov[0], h.iov[1] = h.b[:], dst
			n, rerr = readv(f.data, nw, h.iov[:], off)
			got = true
		case remote && nw == nil:
			// A remote device: the header and the range in one round trip.
			h.iov[0], h.iov[1] = h.b[:hn], dst
			h.offs[0], h.offs[1] = off, payload
			n, rerr = rr.ReadRanges(h.iov[:], h.offs[:])
			got = true
		default:
			h.iov[0] = h.b[:hn]
			n, rerr = readv(f.data, nw, h.iov[:1], off)
		}
		h.iov[0], h.iov[1] = nil, nil // the pool must not keep the caller's buffer
		if rerr == errWouldBlock {
			return errWouldBlock
		}
		if rerr != nil {
			return fault(faultIO, rerr)
		}
		hdr, err := decodeShardHeader(h.b[:hn], h.crcs[:])
		if err != nil {
			return fault(faultHeader, err)
		}
		if hdr.Store != s.id || hdr.Owner != key.Owner || hdr.Index != key.Index || hdr.Slot != ext.Slot ||
			hdr.Gen != ext.Gen || hdr.Shard != i || hdr.Geo != s.geo || hdr.Length != ext.ShardLen {
			return fault(faultHeader, corruptf(
				"shard header is of stripe %d/%d slot %d gen %d shard %d, want %d/%d slot %d gen %d shard %d",
				hdr.Owner, hdr.Index, hdr.Slot, hdr.Gen, hdr.Shard, key.Owner, key.Index, ext.Slot, ext.Gen, i))
		}
		s.hdrs.put(&hdr, i)
		crcs = hdr.CRCs
	}
	if !got {
		h.iov[0] = dst
		m, rerr := readv(f.data, nw, h.iov[:1], payload)
		h.iov[0] = nil
		n += m
		if rerr == errWouldBlock {
			return errWouldBlock // the header, if read, is cached for the next try
		}
		if rerr != nil {
			return fault(faultIO, rerr)
		}
	}
	d.reads.Add(1)
	d.readBytes.Add(int64(n))
	for sec := a / SectorSize; sec*SectorSize < b; sec++ {
		lo := sec*SectorSize - a
		hi := min((sec+1)*SectorSize, b) - a
		if checksum(dst[lo:hi]) != crcs[sec] {
			return &shardError{fault: faultChecksum, dev: pos, err: corruptf("sector %d of shard %d fails its checksum", sec, i)}
		}
	}
	return nil
}

// readv reads bufs at off from f; with nw (f itself) only from memory,
// failing with errWouldBlock when the device would be waited for. One
// buffer is read with ReadAt: the OS file's ReadAtv copies its list.
func readv(f vfs.File, nw vfs.NowaitReader, bufs [][]byte, off int64) (int, error) {
	switch {
	case nw != nil:
		return nw.ReadAtvNowait(bufs, off)
	case len(bufs) == 1:
		if err := vfs.ReadFull(f, bufs[0], off); err != nil {
			return 0, err
		}
		return len(bufs[0]), nil
	}
	return f.ReadAtv(bufs, off)
}

// shardUsable reports whether shard i of ext is worth reading as a first
// choice: its device is healthy and it is not marked missing.
// zeroShards returns the data shards (bit i for shard i) of a log stripe
// of the given shard length holding sectors that hold only zero padding:
// a short stripe lays its sectors over the first ceil(sectors/per) data
// shards, per = shardLen / SectorSize, and the rest are zeros, which the
// parity covers as it would written zeros. Full stripes and stripes of
// format version 1 have none.
func (s *Store) zeroShards(key stripeKey, shardLen, sectors int) uint64 {
	per := shardLen / SectorSize
	if key.Owner != logOwner || per <= 0 || sectors <= 0 {
		return 0
	}
	var m uint64
	for i := (sectors + per - 1) / per; i < s.geo.Data; i++ {
		m |= 1 << i
	}
	return m
}

func (s *Store) shardUsable(ext extent, i int) bool {
	pos := s.devOf(ext.Slot, i)
	return ext.Missing&(1<<pos) == 0 && s.devs[pos].readable()
}

// readStripe reads bytes [lo, hi) of the stripe's data into dst. It reads
// only the data shards the range covers; a shard that is unavailable,
// unreadable or corrupt is reconstructed from any K others, counted, and
// its stripe queued for repair. With fewer than K good shards it fails
// with ErrTooManyFailures, never with wrong bytes. When a needed shard is
// known to be unavailable (its device is out, or it is marked missing),
// the shards that replace it are read in the same round as the others.
func (s *Store) readStripe(key stripeKey, ext extent, lo, hi int, dst []byte) error {
	L := ext.ShardLen
	if lo < 0 || hi > s.geo.Data*L || lo >= hi || len(dst) != hi-lo {
		return fmt.Errorf("%w: stripe range [%d, %d) of %d", ErrOutOfRange, lo, hi, s.geo.Data*L)
	}
	s.stats.stripesRead.Add(1)
	sc := s.bufs.reads.Get().(*readScratch)
	parts := sc.parts[:0]
	for j := lo / L; j <= (hi-1)/L; j++ {
		a := max(lo, j*L) - j*L
		b := min(hi, (j+1)*L) - j*L
		p := readPart{j: j, a: a, b: b, A: a &^ (SectorSize - 1), B: min((b+SectorSize-1)&^(SectorSize-1), L)}
		p.dst = dst[j*L+a-lo : j*L+b-lo]
		if !s.shardUsable(ext, j) {
			p.known = true
			p.err = &shardError{fault: faultUnavailable, dev: s.devOf(ext.Slot, j), err: errUnavailable}
		}
		parts = append(parts, p)
	}
	extras := sc.extras[:0]
	defer func() {
		for i := range parts {
			if parts[i].tmp != nil {
				s.bufs.putShard(parts[i].tmp)
			}
		}
		for i := range extras {
			s.bufs.putShard(extras[i].tmp)
		}
		clear(parts) // drop references to the caller's buffer
		clear(extras)
		s.bufs.reads.Put(sc)
	}()
	// Replacements for shards known to be unavailable.
	if RA, RB, bad := failedRange(parts, L); bad != 0 {
		extras = s.planExtras(ext, parts, RA, RB, bad, extras)
	}
	work := len(parts) + len(extras)
	if work == 1 {
		if !parts[0].known {
			s.readPart(key, ext, &parts[0])
		}
	} else {
		// The closure gets copies of the slices: capturing the variables
		// themselves (assigned above) would move them to the heap on
		// every read, even the single-shard reads that never get here.
		ps, xs := parts, extras
		read := func(i int, nowait bool) bool {
			if i < len(ps) {
				return ps[i].known || s.readPartNowait(key, ext, &ps[i], nowait)
			}
			x := &xs[i-len(ps)]
			if x.err = s.readShard(key, ext, x.i, x.A, x.B, x.buf, nowait); x.err == errWouldBlock {
				x.err = nil
				return false
			}
			return true
		}
		// Shards in the page cache are read here, one after the other;
		// only those that wait for a device get goroutines, which pay
		// off only while a device is waited for. The file service's
		// 1 MiB reads from the page cache (fs/server
		// BenchmarkServerReadLarge) took 250 us and 322 us of CPU with a
		// goroutine per shard, 196 us and 200 us so.
		pending := sc.wait[:0]
		for i := range work {
			if hi-lo < parallelMin || !read(i, true) {
				pending = append(pending, i)
			}
		}
		if len(pending) > 0 {
			parallel(len(pending), hi-lo >= parallelMin, func(t int) { read(pending[t], false) })
		}
	}
	failed := false
	for i := range parts {
		if parts[i].err != nil {
			failed = true
			s.noteFault(key, ext, parts[i].err)
		}
	}
	for i := range extras {
		if extras[i].err != nil {
			s.noteFault(key, ext, extras[i].err)
		}
	}
	if !failed {
		return nil
	}
	return s.reconstructParts(key, ext, parts, extras)
}

// readPart is one data shard's share of a stripe read.
type readPart struct {
	j     int    // data shard
	a, b  int    // bytes wanted within the shard
	A, B  int    // sector-aligned range read
	dst   []byte // where bytes [a, b) go
	buf   []byte // bytes [A, B) as read (dst itself when aligned)
	tmp   *[]byte
	known bool // known unavailable before reading
	err   error
}

// extraRead is a shard read only to reconstruct others.
type extraRead struct {
	i    int // shard index
	A, B int
	buf  []byte
	tmp  *[]byte
	err  error
}

// readScratch is the per-read bookkeeping, pooled.
type readScratch struct {
	parts  [MaxDevices]readPart
	extras [MaxDevices]extraRead
	wait   [2 * MaxDevices]int // reads that wait for a device
}

// readPart reads one part of a stripe read into its destination.
func (s *Store) readPart(key stripeKey, ext extent, p *readPart) {
	s.readPartNowait(key, ext, p, false)
}

// readPartNowait is readPart; with nowait it reads only from memory and
// reports false, leaving p to be read again, when that is not possible.
func (s *Store) readPartNowait(key stripeKey, ext extent, p *readPart, nowait bool) bool {
	if p.buf == nil {
		if p.A == p.a && p.B == p.b {
			p.buf = p.dst
		} else {
			p.tmp = s.bufs.shard()
			p.buf = (*p.tmp)[:p.B-p.A]
		}
	}
	p.err = s.readShard(key, ext, p.j, p.A, p.B, p.buf, nowait)
	if p.err == errWouldBlock {
		p.err = nil
		return false
	}
	if p.err == nil && p.tmp != nil {
		copy(p.dst, p.buf[p.a-p.A:p.b-p.A])
	}
	return true
}

// noteFault counts a shard fault and queues the stripe for repair when
// the device could take a repaired shard.
func (s *Store) noteFault(key stripeKey, ext extent, err error) {
	s.countFault(err)
	var se *shardError
	if errors.As(err, &se) && s.devs[se.dev].writable() {
		s.repair.add(ext.Slot)
	}
}

// failedRange returns the range the failed parts need and their shards.
func failedRange(parts []readPart, L int) (RA, RB int, bad uint64) {
	RA = L
	for _, p := range parts {
		if p.err != nil {
			RA, RB = min(RA, p.A), max(RB, p.B)
			bad |= 1 << p.j
		}
	}
	return RA, RB, bad
}

// covers reports whether a good part holds [RA, RB).
func (p *readPart) covers(RA, RB int) bool { return p.err == nil && p.A <= RA && p.B >= RB }

// candidates lists the shards that may stand in for bad ones: data shards
// not excluded, then parity, then shards on rebuilding devices as a last
// resort (their headers make any of them safe to try).
func (s *Store) candidates(ext extent, exclude uint64, out []int) []int {
	var last [MaxDevices]int
	nl := 0
	// Zero padding costs no read: first.
	for i := range s.geo.Data {
		if ext.Zero&^exclude&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	for i := range s.n {
		if exclude&(1<<i) != 0 || ext.Zero&(1<<i) != 0 {
			continue
		}
		pos := s.devOf(ext.Slot, i)
		switch {
		case ext.Missing&(1<<pos) != 0:
		case s.devs[pos].readable():
			out = append(out, i)
		case s.devs[pos].writable():
			last[nl] = i
			nl++
		}
	}
	return append(out, last[:nl]...)
}

// planExtras picks the shards to read beside the good parts so that K
// shards cover [RA, RB).
func (s *Store) planExtras(ext extent, parts []readPart, RA, RB int, bad uint64, extras []extraRead) []extraRead {
	have := 0
	exclude := bad
	for i := range parts {
		if !parts[i].known {
			exclude |= 1 << parts[i].j // read anyway; reused if they cover the range
			if parts[i].A <= RA && parts[i].B >= RB {
				have++
			}
		}
	}
	var candArr [MaxDevices]int
	for _, i := range s.candidates(ext, exclude, candArr[:0]) {
		if have >= s.geo.Data {
			break
		}
		tp := s.bufs.shard()
		extras = append(extras, extraRead{i: i, A: RA, B: RB, buf: (*tp)[:RB-RA], tmp: tp})
		have++
	}
	return extras
}

// reconstructParts completes a stripe read whose parts partly failed: it
// gathers K good shards over the range the failed parts need (reusing
// what was read already, reading more if needed) and decodes the missing
// data.
func (s *Store) reconstructParts(key stripeKey, ext extent, parts []readPart, extras []extraRead) error {
	k := s.geo.Data
	RA, RB, bad := failedRange(parts, ext.ShardLen)
	rlen := RB - RA
	shards := make([][]byte, s.n)
	var tmps []*[]byte
	defer func() {
		for _, t := range tmps {
			s.bufs.putShard(t)
		}
	}()
	good := 0
	tried := bad
	for i := range parts {
		p := &parts[i]
		tried |= 1 << p.j
		if p.covers(RA, RB) {
			shards[p.j] = p.buf[RA-p.A : RB-p.A]
			good++
		}
	}
	for _, x := range extras {
		if x.err != nil {
			tried |= 1 << x.i
			continue
		}
		if x.A <= RA && x.B >= RB && shards[x.i] == nil && good < k {
			shards[x.i] = x.buf[RA-x.A : RB-x.A]
			tried |= 1 << x.i
			good++
		}
	}
	// Good parts that do not cover the range can be read again over it.
	for i := range parts {
		if parts[i].err == nil && !parts[i].covers(RA, RB) {
			tried &^= 1 << parts[i].j
		}
	}
	var candArr [MaxDevices]int
	cands := s.candidates(ext, tried, candArr[:0])
	for good < k && len(cands) > 0 {
		take := min(k-good, len(cands))
		batch := cands[:take]
		cands = cands[take:]
		errs := make([]error, take)
		bufs := make([][]byte, take)
		for t := range batch {
			tp := s.bufs.shard()
			tmps = append(tmps, tp)
			bufs[t] = (*tp)[:rlen]
		}
		parallel(take, rlen*take >= parallelMin, func(t int) {
			errs[t] = s.readShardRange(key, ext, batch[t], RA, RB, bufs[t])
		})
		for t, i := range batch {
			if errs[t] != nil {
				s.noteFault(key, ext, errs[t])
				continue
			}
			shards[i] = bufs[t]
			good++
		}
	}
	if good < k {
		s.stats.readFailures.Add(1)
		return &StripeError{Owner: key.Owner, Index: key.Index,
			Err: fmt.Errorf("%w: %d of %d shards readable, %d needed", ErrTooManyFailures, good, s.n, k)}
	}
	required := make([]bool, k)
	for _, p := range parts {
		if p.err != nil {
			required[p.j] = true
			tp := s.bufs.shard()
			tmps = append(tmps, tp)
			shards[p.j] = (*tp)[:0]
		}
	}
	if err := s.codec.reconstructData(shards, required); err != nil {
		s.stats.readFailures.Add(1)
		return &StripeError{Owner: key.Owner, Index: key.Index, Err: err}
	}
	for _, p := range parts {
		if p.err != nil {
			copy(p.dst, shards[p.j][p.a-RA:p.b-RA])
		}
	}
	s.stats.reconstructions.Add(1)
	return nil
}

// stripeCheck is the verdict of examineStripe.
type stripeCheck struct {
	shards  [][]byte // every shard, reconstructed where bad
	bad     uint64   // shards (by index) that were bad
	err     error    // unrecoverable
	release func()   // returns the buffers
}

// examineStripe reads every shard of a stripe whole, verifies each, checks
// that data and parity agree, and reconstructs the bad shards. skip marks
// shards not to read (treated as bad). The caller returns the buffers with
// release.
func (s *Store) examineStripe(key stripeKey, ext extent, skip uint64) *stripeCheck {
	c := &stripeCheck{shards: make([][]byte, s.n)}
	tmps := make([]*[]byte, s.n)
	errs := make([]error, s.n)
	parallel(s.n, ext.ShardLen*s.n >= parallelMin, func(i int) {
		tmps[i] = s.bufs.shard()
		if ext.Zero&(1<<i) != 0 {
			clear((*tmps[i])[:ext.ShardLen]) // padding: known, never bad
			return
		}
		if skip&(1<<i) != 0 {
			errs[i] = errUnavailable
			return
		}
		pos := s.devOf(ext.Slot, i)
		if ext.Missing&(1<<pos) != 0 || !(s.devs[pos].readable() || s.devs[pos].writable()) {
			errs[i] = &shardError{fault: faultUnavailable, dev: pos, err: errUnavailable}
			return
		}
		errs[i] = s.readShardRange(key, ext, i, 0, ext.ShardLen, (*tmps[i])[:ext.ShardLen])
	})
	good := 0
	orig := make([][]byte, s.n)
	for i, err := range errs {
		if err != nil {
			c.bad |= 1 << i
			c.shards[i] = (*tmps[i])[:0]
			continue
		}
		c.shards[i] = (*tmps[i])[:ext.ShardLen]
		orig[i] = c.shards[i]
		good++
	}
	c.release = func() {
		for _, t := range tmps {
			s.bufs.putShard(t)
		}
	}
	if good < s.geo.Data {
		c.err = fmt.Errorf("%w: %d of %d shards good, %d needed", ErrTooManyFailures, good, s.n, s.geo.Data)
		return c
	}
	if s.geo.Parity == 0 {
		return c
	}
	if c.bad != 0 {
		if err := s.codec.reconstruct(c.shards); err != nil {
			c.err = err
			return c
		}
	}
	if ok, _ := s.codec.verify(c.shards); ok {
		return c
	}
	// All shards verify on their own but do not agree: find the one
	// shard whose removal makes the rest consistent.
	culprit := -1
	var fix [][]byte
	for g := range s.n {
		if orig[g] == nil || ext.Zero&(1<<g) != 0 {
			continue
		}
		trial := make([][]byte, s.n)
		for i := range trial {
			if orig[i] != nil && i != g {
				trial[i] = orig[i]
			}
		}
		if err := s.codec.reconstruct(trial); err != nil {
			continue
		}
		if ok, _ := s.codec.verify(trial); ok {
			if culprit >= 0 {
				culprit = -2
				break
			}
			culprit, fix = g, trial
		}
	}
	if culprit >= 0 {
		for i := range fix {
			if c.bad&(1<<i) != 0 || i == culprit {
				copy(c.shards[i][:ext.ShardLen], fix[i])
			}
		}
	}
	if culprit < 0 {
		c.err = corruptf("data and parity disagree and no single shard explains it")
		return c
	}
	c.bad |= 1 << culprit
	return c
}
