package chunkstore

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
	"unicode/utf8"
)

// WriteFlags modify a write.
type WriteFlags uint8

// FUA (force unit access) makes a write durable before it returns, as the
// NVMe FUA bit asks. Without it a write is durable after the next Sync.
const FUA WriteFlags = 1

// stripeLocks is the number of lock shards per volume and chunk table.
const stripeLocks = 64

// Volume is a thin-provisioned block device of a fixed size: stripes
// never written, or discarded, take no space and read as zeros.
//
// ReadAt and WriteAt follow io.ReaderAt and io.WriterAt and may be called
// concurrently, on overlapping ranges too: each stripe is read and written
// under its own lock, so a read sees each stripe either before or after a
// concurrent write to it (a read spanning stripes may see some stripes of
// a write and not others, as with any block device). Writes are cached
// (a volatile write cache): durable after Sync, or at once with FUA.
type Volume struct {
	s           *Store
	name        string
	owner       uint64
	size        int64
	created     time.Time
	stripeBytes int64

	// locks serialise work on a logical stripe: WriteAt, flushes and repair
	// hold locks[idx%stripeLocks] exclusively, ReadAt shared. They also
	// guard the contents of the stripe's cachedStripe. Whoever holds more
	// than one takes them in ascending lock index: writeFullStripes (a
	// batch) and Store.DeleteVolume (all). Taken after Store.commitMu and
	// before mu.
	locks [stripeLocks]sync.RWMutex

	// mu guards extents, dirty, cache, fifo and deleted. Held only for
	// map operations, never across I/O.
	mu      sync.Mutex
	extents map[uint64]extent // logical stripe → where it lives
	dirty   map[uint64]struct{}
	cache   map[uint64]*cachedStripe
	fifo    []uint64 // cache insertion order, for eviction
	deleted bool
}

// cachedStripe is a partially written stripe held in memory: buf is the
// whole stripe's data; valid marks the sectors that hold current bytes.
type cachedStripe struct {
	buf   []byte
	valid []bool
	count int
}

func newVolume(s *Store, name string, r volumeRecord) *Volume {
	return &Volume{
		s: s, name: name, owner: r.Owner, size: r.Size, created: time.Unix(0, r.Created),
		stripeBytes: int64(s.stripeBytes()),
		extents:     map[uint64]extent{},
		dirty:       map[uint64]struct{}{},
		cache:       map[uint64]*cachedStripe{},
	}
}

// VolumeInfo describes a volume.
type VolumeInfo struct {
	Name    string
	Size    int64
	Created time.Time
	// Allocated is the data capacity of the stripes that hold data; the
	// space used on each device is about Allocated/K plus 4 KiB per stripe.
	Allocated int64
}

func validVolumeName(name string) error {
	if name == "" || len(name) > 255 || !utf8.ValidString(name) {
		return fmt.Errorf("%w: volume name %q: want 1 to 255 bytes of UTF-8", ErrInvalidArgument, name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: volume name %q has a control character", ErrInvalidArgument, name)
		}
	}
	return nil
}

// CreateVolume creates a thin volume of size bytes (any size up to
// MaxVolumeSize). It is durable when CreateVolume returns.
func (s *Store) CreateVolume(name string, size int64) (*Volume, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := validVolumeName(name); err != nil {
		return nil, err
	}
	if size <= 0 || size > MaxVolumeSize {
		return nil, fmt.Errorf("%w: volume size %d: want 1 byte to %d", ErrInvalidArgument, size, int64(MaxVolumeSize))
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.volMu.RLock()
	_, exists := s.vols[name]
	s.volMu.RUnlock()
	if exists {
		return nil, fmt.Errorf("%w: volume %q", ErrExists, name)
	}
	rec := volumeRecord{Owner: s.owner.Add(1) - 1, Size: size, Created: time.Now().UnixNano()}
	if err := s.commitLocked(func(b *batch) { b.volumes[name] = &rec }); err != nil {
		return nil, err
	}
	v := newVolume(s, name, rec)
	s.volMu.Lock()
	s.vols[name] = v
	s.volByOwner[rec.Owner] = v
	s.volMu.Unlock()
	return v, nil
}

// OpenVolume returns the volume's handle. Every call returns the same
// handle; it stays valid until the volume is deleted or the store closed.
func (s *Store) OpenVolume(name string) (*Volume, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	s.volMu.RLock()
	defer s.volMu.RUnlock()
	v, ok := s.vols[name]
	if !ok {
		return nil, fmt.Errorf("%w: volume %q", ErrNotFound, name)
	}
	return v, nil
}

// Volumes lists the volumes by name.
func (s *Store) Volumes() []VolumeInfo {
	vs := s.volumeList()
	out := make([]VolumeInfo, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DeleteVolume deletes a volume and frees its space. It waits for
// operations in flight on the volume; later ones fail with ErrClosed. It
// is durable when it returns.
func (s *Store) DeleteVolume(name string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.volMu.RLock()
	v, ok := s.vols[name]
	s.volMu.RUnlock()
	if !ok {
		return fmt.Errorf("%w: volume %q", ErrNotFound, name)
	}
	for i := range v.locks {
		v.locks[i].Lock()
	}
	defer func() {
		for i := range v.locks {
			v.locks[i].Unlock()
		}
	}()
	v.mu.Lock()
	v.deleted = true
	v.dirty = map[uint64]struct{}{}
	v.mu.Unlock()
	err := s.commitLocked(func(b *batch) {
		b.volumes[name] = nil
		b.dropOwners = append(b.dropOwners, v.owner)
	})
	if err != nil {
		v.mu.Lock()
		v.deleted = false
		for idx := range v.extents {
			v.dirty[idx] = struct{}{}
		}
		v.mu.Unlock()
		return err
	}
	s.volMu.Lock()
	delete(s.vols, name)
	delete(s.volByOwner, v.owner)
	s.volMu.Unlock()
	v.mu.Lock()
	for _, e := range v.extents {
		s.alloc.release(e.Slot)
	}
	v.extents = map[uint64]extent{}
	v.cache = map[uint64]*cachedStripe{}
	v.fifo = nil
	v.mu.Unlock()
	return nil
}

// Name returns the volume's name.
func (v *Volume) Name() string { return v.name }

// Size returns the volume's size in bytes.
func (v *Volume) Size() int64 { return v.size }

// Info describes the volume.
func (v *Volume) Info() VolumeInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	return VolumeInfo{Name: v.name, Size: v.size, Created: v.created, Allocated: int64(len(v.extents)) * v.stripeBytes}
}

func (v *Volume) key(idx uint64) stripeKey { return stripeKey{Owner: v.owner, Index: idx} }

// valid returns how many bytes of stripe idx lie inside the volume.
func (v *Volume) valid(idx uint64) int {
	return int(min(v.stripeBytes, v.size-int64(idx)*v.stripeBytes))
}

func (v *Volume) lock(idx uint64) *sync.RWMutex { return &v.locks[idx%stripeLocks] }

// usable checks, under a stripe lock, that the volume may be used.
func (v *Volume) usable() error {
	if err := v.s.checkOpen(); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.deleted {
		return fmt.Errorf("%w: volume %q was deleted", ErrClosed, v.name)
	}
	return nil
}

// ReadAt reads len(p) bytes at off (io.ReaderAt). Unwritten and discarded
// ranges read as zeros. A read that reaches the end of the volume returns
// io.EOF with the bytes before it. A stripe that cannot be reconstructed
// fails the read with an error for which IsUnavailable is true.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: offset %d", ErrOutOfRange, off)
	}
	if off >= v.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := int64(len(p))
	var eof error
	if off+n > v.size {
		n, eof = v.size-off, io.EOF
	}
	for done := int64(0); done < n; {
		pos := off + done
		idx := uint64(pos / v.stripeBytes)
		lo := int(pos % v.stripeBytes)
		hi := int(min(v.stripeBytes, int64(lo)+n-done))
		if err := v.readStripe(idx, lo, hi, p[done:done+int64(hi-lo)]); err != nil {
			return int(done), err
		}
		done += int64(hi - lo)
	}
	return int(n), eof
}

func (v *Volume) readStripe(idx uint64, lo, hi int, dst []byte) error {
	l := v.lock(idx)
	l.RLock()
	defer l.RUnlock()
	if err := v.usable(); err != nil {
		return err
	}
	v.mu.Lock()
	ext, mapped := v.extents[idx]
	cs := v.cache[idx]
	v.mu.Unlock()
	if cs != nil && cs.covers(lo, hi) {
		copy(dst, cs.buf[lo:hi])
		return nil
	}
	if !mapped {
		clear(dst)
	} else if err := v.s.readStripe(v.key(idx), ext, lo, hi, dst); err != nil {
		return err
	}
	if cs != nil {
		cs.overlay(lo, hi, dst)
	}
	return nil
}

func (c *cachedStripe) covers(lo, hi int) bool {
	for sec := lo / SectorSize; sec*SectorSize < hi; sec++ {
		if !c.valid[sec] {
			return false
		}
	}
	return true
}

// overlay copies the cached sectors of [lo, hi) over dst.
func (c *cachedStripe) overlay(lo, hi int, dst []byte) {
	for sec := lo / SectorSize; sec*SectorSize < hi; sec++ {
		if !c.valid[sec] {
			continue
		}
		a, b := max(lo, sec*SectorSize), min(hi, (sec+1)*SectorSize)
		copy(dst[a-lo:b-lo], c.buf[a:b])
	}
}

// WriteAt writes p at off (io.WriterAt). The whole range must lie inside
// the volume, or nothing is written and the error is ErrOutOfRange. It
// does not retain p. Full stripes go to the devices at once; partial
// stripes are cached until they fill up, are evicted, or Sync.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	return v.WriteAtFlags(p, off, 0)
}

// WriteAtFlags is WriteAt with flags; with FUA the data is durable when it
// returns.
func (v *Volume) WriteAtFlags(p []byte, off int64, flags WriteFlags) (int, error) {
	if off < 0 || off+int64(len(p)) > v.size {
		return 0, fmt.Errorf("%w: write of %d bytes at %d, volume %q is %d bytes", ErrOutOfRange, len(p), off, v.name, v.size)
	}
	v.s.throttle()
	fua := flags&FUA != 0
	n := int64(len(p))
	for done := int64(0); done < n; {
		pos := off + done
		idx := uint64(pos / v.stripeBytes)
		lo := int(pos % v.stripeBytes)
		hi := int(min(v.stripeBytes, int64(lo)+n-done))
		if lo == 0 && hi == int(v.stripeBytes) {
			// A run of whole stripes: written as one batch.
			count := int(min(int64(maxBatch), (n-done)/v.stripeBytes))
			if err := v.writeFullStripes(idx, p[done:done+int64(count)*v.stripeBytes]); err != nil {
				return int(done), err
			}
			done += int64(count) * v.stripeBytes
			continue
		}
		if err := v.writeStripe(idx, lo, hi, p[done:done+int64(hi-lo)], fua); err != nil {
			return int(done), err
		}
		done += int64(hi - lo)
	}
	if err := v.evict(); err != nil {
		return int(n), err
	}
	if fua {
		if err := v.s.commit(); err != nil {
			return int(n), err
		}
	}
	return int(n), nil
}

// writeStripe writes src into bytes [lo, hi) of stripe idx.
func (v *Volume) writeStripe(idx uint64, lo, hi int, src []byte, direct bool) error {
	l := v.lock(idx)
	l.Lock()
	defer l.Unlock()
	if err := v.usable(); err != nil {
		return err
	}
	if lo == 0 && hi >= v.valid(idx) {
		// A full stripe: encode once, from the caller's buffer when it is
		// a whole stripe.
		data := src
		var tmp []byte
		if hi < int(v.stripeBytes) {
			tmp = make([]byte, v.stripeBytes)
			copy(tmp, src)
			data = tmp
		}
		return v.writeFull(idx, data)
	}
	cs := v.cached(idx)
	// A sector only partly written must first hold its current bytes.
	for _, sec := range [2]int{lo / SectorSize, (hi - 1) / SectorSize} {
		if !cs.valid[sec] && (lo > sec*SectorSize || hi < min((sec+1)*SectorSize, v.valid(idx))) {
			if err := v.fill(idx, cs, sec, sec+1); err != nil {
				if cs.count == 0 {
					v.mu.Lock()
					delete(v.cache, idx)
					v.mu.Unlock()
				}
				return err
			}
		}
	}
	copy(cs.buf[lo:hi], src)
	for sec := lo / SectorSize; sec*SectorSize < hi; sec++ {
		if !cs.valid[sec] {
			cs.valid[sec] = true
			cs.count++
		}
	}
	if direct || cs.count == len(cs.valid) || v.s.opts.cache == 0 {
		return v.flushLocked(idx, cs)
	}
	return nil
}

// writeFullStripes writes whole stripes first, first+1, … from data (a
// multiple of the stripe size), encoding each once and writing them as one
// batch. It holds their stripe locks, in lock order.
func (v *Volume) writeFullStripes(first uint64, data []byte) error {
	count := len(data) / int(v.stripeBytes)
	var held [stripeLocks]bool
	for i := range count {
		held[(first+uint64(i))%stripeLocks] = true
	}
	for i := range held {
		if held[i] {
			v.locks[i].Lock()
		}
	}
	defer func() {
		for i := range held {
			if held[i] {
				v.locks[i].Unlock()
			}
		}
	}()
	if err := v.usable(); err != nil {
		return err
	}
	k, unit := v.s.geo.Data, v.s.unit
	ws := make([]stripeWrite, count)
	for i := range ws {
		sd := data[i*int(v.stripeBytes):]
		ws[i] = stripeWrite{key: v.key(first + uint64(i)), data: make([][]byte, k)}
		for j := range k {
			ws[i].data[j] = sd[j*unit : (j+1)*unit]
		}
	}
	exts, err := v.s.writeStripes(ws, unit)
	if err != nil {
		return err
	}
	for i := range exts {
		v.install(first+uint64(i), &exts[i])
	}
	return nil
}

// cached returns stripe idx's cache entry, creating it. The stripe lock
// is held.
func (v *Volume) cached(idx uint64) *cachedStripe {
	v.mu.Lock()
	defer v.mu.Unlock()
	cs := v.cache[idx]
	if cs == nil {
		cs = &cachedStripe{buf: make([]byte, v.stripeBytes), valid: make([]bool, (v.valid(idx)+SectorSize-1)/SectorSize)}
		v.cache[idx] = cs
		if len(v.fifo) > 4*len(v.cache)+64 {
			keep := v.fifo[:0]
			for _, i := range v.fifo {
				if _, ok := v.cache[i]; ok && i != idx {
					keep = append(keep, i)
				}
			}
			v.fifo = keep
		}
		v.fifo = append(v.fifo, idx)
	}
	return cs
}

// fill loads sectors [from, to) of a cached stripe from the devices (or
// zeros, when the stripe is unmapped). The stripe lock is held.
func (v *Volume) fill(idx uint64, cs *cachedStripe, from, to int) error {
	v.mu.Lock()
	ext, mapped := v.extents[idx]
	v.mu.Unlock()
	lo, hi := from*SectorSize, min(to*SectorSize, v.valid(idx))
	if mapped {
		if err := v.s.readStripe(v.key(idx), ext, lo, hi, cs.buf[lo:hi]); err != nil {
			return err
		}
	} else {
		clear(cs.buf[lo:hi])
	}
	for sec := from; sec < to; sec++ {
		if !cs.valid[sec] {
			cs.valid[sec] = true
			cs.count++
		}
	}
	return nil
}

// flushLocked writes a cached stripe out. The stripe lock is held. On
// failure the cache entry stays, so no acknowledged write is lost.
func (v *Volume) flushLocked(idx uint64, cs *cachedStripe) error {
	if cs.count < len(cs.valid) {
		v.mu.Lock()
		_, mapped := v.extents[idx]
		v.mu.Unlock()
		if mapped {
			// Read the stripe's current data for the sectors not cached.
			from := -1
			for sec := 0; sec <= len(cs.valid); sec++ {
				if sec < len(cs.valid) && !cs.valid[sec] {
					if from < 0 {
						from = sec
					}
					continue
				}
				if from >= 0 {
					if err := v.fill(idx, cs, from, sec); err != nil {
						return err
					}
					from = -1
				}
			}
		} else {
			for sec := range cs.valid {
				cs.valid[sec] = true
			}
			cs.count = len(cs.valid)
		}
	}
	return v.writeFull(idx, cs.buf)
}

// writeFull writes a whole stripe's data to a new slot and installs it.
// The stripe lock is held.
func (v *Volume) writeFull(idx uint64, data []byte) error {
	k, unit := v.s.geo.Data, v.s.unit
	shards := make([][]byte, k)
	for j := range shards {
		shards[j] = data[j*unit : (j+1)*unit]
	}
	ext, err := v.s.writeStripe(v.key(idx), shards, unit)
	if err != nil {
		return err
	}
	v.install(idx, &ext)
	return nil
}

// install points stripe idx at ext (nil: unmapped), drops its cache entry
// and releases the old slot. The stripe lock is held.
func (v *Volume) install(idx uint64, ext *extent) {
	v.mu.Lock()
	old, had := v.extents[idx]
	if ext != nil {
		v.extents[idx] = *ext
	} else {
		delete(v.extents, idx)
	}
	if ext != nil || had {
		v.dirty[idx] = struct{}{}
	}
	delete(v.cache, idx)
	v.mu.Unlock()
	if had {
		v.s.alloc.release(old.Slot)
	}
}

// evict writes out cached stripes, oldest first, until the cache is
// within its limit. No stripe lock is held.
func (v *Volume) evict() error {
	for {
		v.mu.Lock()
		if len(v.cache) <= v.s.opts.cache || len(v.fifo) == 0 {
			v.mu.Unlock()
			return nil
		}
		idx := v.fifo[0]
		v.fifo = v.fifo[1:]
		v.mu.Unlock()
		if err := v.flushOne(idx); err != nil {
			return err
		}
	}
}

// flushOne writes out stripe idx if it is cached.
func (v *Volume) flushOne(idx uint64) error {
	l := v.lock(idx)
	l.Lock()
	defer l.Unlock()
	v.mu.Lock()
	cs := v.cache[idx]
	deleted := v.deleted
	v.mu.Unlock()
	if cs == nil || deleted {
		return nil
	}
	if err := v.flushLocked(idx, cs); err != nil {
		v.mu.Lock()
		v.fifo = append(v.fifo, idx)
		v.mu.Unlock()
		return err
	}
	return nil
}

// flushAll writes out every cached stripe.
func (v *Volume) flushAll() error {
	v.mu.Lock()
	idxs := make([]uint64, 0, len(v.cache))
	for idx := range v.cache {
		idxs = append(idxs, idx)
	}
	v.mu.Unlock()
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	var first error
	for _, idx := range idxs {
		if err := v.flushOne(idx); err != nil && first == nil {
			first = err
		}
	}
	v.mu.Lock()
	keep := v.fifo[:0]
	for _, idx := range v.fifo {
		if _, ok := v.cache[idx]; ok {
			keep = append(keep, idx)
		}
	}
	v.fifo = keep
	v.mu.Unlock()
	return first
}

// Sync makes every write that returned before it durable. It is the
// store's Sync: one flush covers every volume and chunk.
func (v *Volume) Sync() error {
	if err := v.usable(); err != nil {
		return err
	}
	return v.s.Sync()
}

// WriteZeroes makes [off, off+n) read as zeros. Whole stripes are
// unmapped (their space is freed); the ends are written with zeros.
func (v *Volume) WriteZeroes(off, n int64, flags WriteFlags) error {
	if off < 0 || n < 0 || off+n > v.size {
		return fmt.Errorf("%w: %d bytes at %d, volume %q is %d bytes", ErrOutOfRange, n, off, v.name, v.size)
	}
	v.s.throttle()
	for done := int64(0); done < n; {
		pos := off + done
		idx := uint64(pos / v.stripeBytes)
		lo := int(pos % v.stripeBytes)
		hi := int(min(v.stripeBytes, int64(lo)+n-done))
		if err := v.zeroStripe(idx, lo, hi, flags&FUA != 0); err != nil {
			return err
		}
		done += int64(hi - lo)
	}
	if err := v.evict(); err != nil {
		return err
	}
	if flags&FUA != 0 {
		return v.s.commit()
	}
	return nil
}

// Discard unmaps [off, off+n) (NVMe deallocate, TRIM): the range reads as
// zeros afterwards and whole stripes give their space back. Like a write,
// it is durable after Sync.
func (v *Volume) Discard(off, n int64) error { return v.WriteZeroes(off, n, 0) }

func (v *Volume) zeroStripe(idx uint64, lo, hi int, fua bool) error {
	if lo == 0 && hi >= v.valid(idx) {
		l := v.lock(idx)
		l.Lock()
		defer l.Unlock()
		if err := v.usable(); err != nil {
			return err
		}
		v.install(idx, nil)
		return nil
	}
	v.mu.Lock()
	_, mapped := v.extents[idx]
	_, cached := v.cache[idx]
	v.mu.Unlock()
	if !mapped && !cached {
		return nil // already zeros
	}
	return v.writeStripe(idx, lo, hi, make([]byte, hi-lo), fua)
}

// takeDirty moves the volume's changed extents into b and returns their
// indices, for redirty if the commit fails.
func (v *Volume) takeDirty(b *batch) []uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.dirty) == 0 || v.deleted {
		return nil
	}
	keys := make([]uint64, 0, len(v.dirty))
	for idx := range v.dirty {
		keys = append(keys, idx)
		c := extentChange{key: v.key(idx)}
		if e, ok := v.extents[idx]; ok {
			c.ext = &e
		}
		b.extents = append(b.extents, c)
	}
	v.dirty = map[uint64]struct{}{}
	return keys
}

func (v *Volume) redirty(keys []uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, idx := range keys {
		v.dirty[idx] = struct{}{}
	}
}
