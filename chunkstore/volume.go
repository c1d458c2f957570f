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

// Volume is a thin-provisioned block device of a fixed size: sectors
// never written, or discarded, take no space and read as zeros.
//
// ReadAt and WriteAt follow io.ReaderAt and io.WriterAt and may be called
// concurrently, on overlapping ranges too: each 4 KiB sector is written
// whole (a write of part of a sector reads, merges and writes it under a
// per-sector lock), so a read sees each sector before or after a
// concurrent write to it. Writes go to the volume's write cache
// (WithWriteCache) or the store's log, both volatile: durable after Sync,
// or at once with FUA.
type Volume struct {
	s       *Store
	name    string
	owner   uint64
	size    int64
	created time.Time

	// locks serialise the read-merge-write of partly written sectors:
	// locks[sector % stripeLocks]. Taken before Store.lmu.
	locks [stripeLocks]sync.Mutex

	// wc is the volume's write cache (wcache.go); nil without
	// WithWriteCache.
	wc *wcache

	// deleted is set once DeleteVolume has committed; guarded by mu.
	mu      sync.Mutex
	deleted bool
}

func newVolume(s *Store, name string, r volumeRecord) *Volume {
	v := &Volume{s: s, name: name, owner: r.Owner, size: r.Size, created: time.Unix(0, r.Created)}
	v.wc = newWcache(s, v)
	return v
}

// VolumeInfo describes a volume.
type VolumeInfo struct {
	Name    string
	Size    int64
	Created time.Time
	// Allocated is the bytes of the volume that are mapped (written and
	// not discarded); the space they take on each device is about
	// Allocated/K, plus the dead space the cleaner has yet to reclaim.
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
	s.lmu.Lock()
	s.owners[rec.Owner] = newOwnerMap()
	s.lmu.Unlock()
	if err := s.commitLocked(func(b *batch) { b.volumes[name] = &rec }); err != nil {
		s.lmu.Lock()
		delete(s.owners, rec.Owner)
		s.lmu.Unlock()
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

// DeleteVolume deletes a volume and frees its space. Operations in
// flight on the volume finish or fail with ErrClosed; later ones fail
// with ErrClosed. It is durable when it returns.
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
	err := s.commitLocked(func(b *batch) {
		b.volumes[name] = nil
		b.dropOwners = append(b.dropOwners, v.owner)
	})
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.deleted = true
	v.mu.Unlock()
	if v.wc != nil {
		v.wc.dropAll()
	}
	s.volMu.Lock()
	delete(s.vols, name)
	delete(s.volByOwner, v.owner)
	s.volMu.Unlock()
	s.lmu.Lock()
	s.dropOwnerLocked(v.owner)
	s.lmu.Unlock()
	return nil
}

// Name returns the volume's name.
func (v *Volume) Name() string { return v.name }

// Size returns the volume's size in bytes.
func (v *Volume) Size() int64 { return v.size }

// Info describes the volume.
func (v *Volume) Info() VolumeInfo {
	in := VolumeInfo{Name: v.name, Size: v.size, Created: v.created}
	v.s.lmu.Lock()
	if m := v.s.owners[v.owner]; m != nil {
		in.Allocated = m.mapped * SectorSize
	}
	v.s.lmu.Unlock()
	return in
}

// usable checks that the volume may be used.
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
	if err := v.usable(); err != nil {
		return 0, err
	}
	n := int64(len(p))
	var eof error
	if off+n > v.size {
		n, eof = v.size-off, io.EOF
	}
	var err error
	if v.wc != nil {
		err = v.wc.read(p[:n], off)
	} else {
		err = v.s.readBytes(v.owner, p[:n], off)
	}
	if err != nil {
		return 0, v.gone(err)
	}
	return int(n), eof
}

// gone turns the error of an owner that vanished under a call into the
// deleted volume's error.
func (v *Volume) gone(err error) error {
	if uerr := v.usable(); uerr != nil {
		return uerr
	}
	return err
}

// WriteAt writes p at off (io.WriterAt). The whole range must lie inside
// the volume, or nothing is written and the error is ErrOutOfRange. It
// does not retain p. The data goes to the write cache or the store's
// log; it is durable after Sync.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	return v.WriteAtFlags(p, off, 0)
}

// WriteAtFlags is WriteAt with flags; with FUA the data is durable when it
// returns (a log flush: see Store.Sync).
func (v *Volume) WriteAtFlags(p []byte, off int64, flags WriteFlags) (int, error) {
	if off < 0 || off+int64(len(p)) > v.size {
		return 0, fmt.Errorf("%w: write of %d bytes at %d, volume %q is %d bytes", ErrOutOfRange, len(p), off, v.name, v.size)
	}
	if err := v.usable(); err != nil {
		return 0, err
	}
	write := func() error {
		v.s.throttle()
		return v.s.writeBytes(v.owner, &v.locks, p, off, flags&FUA != 0)
	}
	var err error
	switch {
	case v.wc == nil:
		err = write()
	case flags&FUA == 0 && len(p) > 0 && off%SectorSize == 0 && len(p)%SectorSize == 0 && v.wc.write(p, off):
	default:
		err = v.wc.through(off, off+int64(len(p)), func(dst []byte, lo, hi int64) { copy(dst, p[lo-off:hi-off]) }, write)
	}
	if err != nil {
		return 0, v.gone(err)
	}
	return len(p), nil
}

// Sync makes every write that returned before it durable. It is the
// store's Sync: one flush covers every volume and chunk.
func (v *Volume) Sync() error {
	if err := v.usable(); err != nil {
		return err
	}
	return v.s.Sync()
}

// WriteZeroes makes [off, off+n) read as zeros. Whole sectors are
// unmapped (their space is freed by the cleaner and the next checkpoint);
// the ends are written with zeros. Durable after Sync, or at once with
// FUA.
func (v *Volume) WriteZeroes(off, n int64, flags WriteFlags) error {
	if off < 0 || n < 0 || off+n > v.size {
		return fmt.Errorf("%w: %d bytes at %d, volume %q is %d bytes", ErrOutOfRange, n, off, v.name, v.size)
	}
	if err := v.usable(); err != nil {
		return err
	}
	if v.wc != nil {
		return v.wc.through(off, off+n, func(dst []byte, _, _ int64) { clear(dst) }, func() error { return v.writeZeroes(off, n, flags) })
	}
	return v.writeZeroes(off, n, flags)
}

// writeZeroes is WriteZeroes in the store.
func (v *Volume) writeZeroes(off, n int64, flags WriteFlags) error {
	v.s.throttle()
	end := off + n
	first := (off + SectorSize - 1) / SectorSize * SectorSize
	last := end / SectorSize * SectorSize
	if last <= first {
		first, last = end, end // no whole sector inside
	}
	for _, r := range [][2]int64{{off, min(first, end)}, {last, end}} {
		if r[1] > r[0] {
			if err := v.s.writeBytes(v.owner, &v.locks, make([]byte, r[1]-r[0]), r[0], false); err != nil {
				return v.gone(err)
			}
		}
	}
	if last > first {
		v.s.lmu.Lock()
		v.s.unmapLocked(v.owner, uint64(first/SectorSize), int((last-first)/SectorSize))
		v.s.lmu.Unlock()
	}
	if flags&FUA != 0 {
		return v.s.commit()
	}
	return nil
}

// Discard unmaps [off, off+n) (NVMe deallocate, TRIM): the range reads as
// zeros afterwards and whole sectors give their space back. Like a write,
// it is durable after Sync.
func (v *Volume) Discard(off, n int64) error { return v.WriteZeroes(off, n, 0) }
