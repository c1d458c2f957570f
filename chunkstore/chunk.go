package chunkstore

import (
	"fmt"
	"hash/maphash"
	"io"
	"sort"
	"sync"

	"github.com/google/uuid"
)

// ChunkID names a chunk: 16 bytes chosen by the caller (NewChunkID makes
// a random one; a file service may pack an inode and an index).
type ChunkID [16]byte

// NewChunkID returns a random (UUIDv4) chunk ID.
func NewChunkID() ChunkID { return ChunkID(uuid.New()) }

// ParseChunkID parses the String form.
func ParseChunkID(s string) (ChunkID, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return ChunkID{}, fmt.Errorf("%w: chunk ID %q: %v", ErrInvalidArgument, s, err)
	}
	return ChunkID(u), nil
}

// String formats the ID as a UUID.
func (id ChunkID) String() string { return uuid.UUID(id).String() }

// chunkTable holds the chunks. A chunk's record is immutable once
// published: Put and Delete replace the pointer.
type chunkTable struct {
	// locks: readers of a chunk hold locks[hash(id)] shared; Put and
	// Delete hold it exclusively while they replace the record and drop
	// the old version's map, so a reader sees one version whole. Taken
	// after Store.commitMu and before mu and Store.lmu; at most one at a
	// time.
	locks [stripeLocks]sync.RWMutex
	seed  maphash.Seed

	// mu guards m, byOwner and dirty. Never held across I/O.
	mu      sync.Mutex
	m       map[ChunkID]*chunkRecord
	byOwner map[uint64]ChunkID
	dirty   map[ChunkID]struct{}
}

func (t *chunkTable) init() {
	t.seed = maphash.MakeSeed()
	t.m = map[ChunkID]*chunkRecord{}
	t.byOwner = map[uint64]ChunkID{}
	t.dirty = map[ChunkID]struct{}{}
}

func (t *chunkTable) lock(id ChunkID) *sync.RWMutex {
	return &t.locks[maphash.Bytes(t.seed, id[:])%stripeLocks]
}

func (t *chunkTable) get(id ChunkID) *chunkRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// swap publishes r (nil: delete) for id and returns the old record. The
// chunk's lock is held exclusively.
func (t *chunkTable) swap(id ChunkID, r *chunkRecord) *chunkRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.m[id]
	if old != nil {
		delete(t.byOwner, old.Owner)
	}
	if r != nil {
		t.m[id] = r
		t.byOwner[r.Owner] = id
	} else {
		delete(t.m, id)
	}
	if r != nil || old != nil {
		t.dirty[id] = struct{}{}
	}
	return old
}

func (t *chunkTable) takeDirty(b *batch) []ChunkID {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]ChunkID, 0, len(t.dirty))
	for id := range t.dirty {
		ids = append(ids, id)
		b.chunks[id] = t.m[id]
	}
	t.dirty = map[ChunkID]struct{}{}
	return ids
}

func (t *chunkTable) redirty(ids []ChunkID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.dirty[id] = struct{}{}
	}
}

// PutChunk stores data under id, replacing any earlier chunk of that ID
// atomically: a reader, and a crash, sees the old chunk or the new one
// whole. The data goes to the log like a volume's writes, so chunks share
// stripes and a small chunk takes about its own size; with FUA it is
// durable on return (a checkpoint, since the chunk record changes),
// otherwise after the next Sync. It does not retain data.
func (s *Store) PutChunk(id ChunkID, data []byte, flags WriteFlags) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if len(data) > MaxChunkSize {
		return fmt.Errorf("%w: chunk of %d bytes, at most %d", ErrInvalidArgument, len(data), MaxChunkSize)
	}
	s.throttle()
	owner := s.owner.Add(1) - 1
	rec := &chunkRecord{Owner: owner, Length: int64(len(data))}
	s.lmu.Lock()
	s.owners[owner] = newOwnerMap()
	s.lmu.Unlock()
	whole := len(data) / SectorSize * SectorSize
	var err error
	for done := 0; done < whole && err == nil; done += maxChunkAppend {
		n := min(maxChunkAppend, whole-done)
		_, err = s.appendSectors(owner, uint64(done/SectorSize), data[done:done+n])
	}
	if tail := data[whole:]; err == nil && len(tail) > 0 {
		var last [SectorSize]byte
		copy(last[:], tail)
		_, err = s.appendSectors(owner, uint64(whole/SectorSize), last[:])
	}
	if err != nil {
		s.lmu.Lock()
		s.dropOwnerLocked(owner)
		s.lmu.Unlock()
		return err
	}
	l := s.chunks.lock(id)
	l.Lock()
	old := s.chunks.swap(id, rec)
	s.lmu.Lock()
	if old != nil {
		s.dropOwnerLocked(old.Owner)
	}
	s.ckptNeeded = true
	s.lmu.Unlock()
	l.Unlock()
	if flags&FUA != 0 {
		return s.commit()
	}
	return nil
}

// WriteChunkAt writes p into the chunk id at off, making the chunk (of
// off+len(p) bytes, zeros before off) when there is none, and reports
// whether it did. Unlike PutChunk it writes only p's sectors (a partly
// written sector is read and merged), so a small write into a large
// chunk costs its own size; the chunk grows to off+len(p) when that is
// past its end, and bytes between the old end and off read as zeros.
//
// It is not atomic: after a crash the chunk may hold some of p's
// sectors and not others (as a volume does), and a growth is durable
// only with the checkpoint that takes the new length (a Sync after a
// growth is one), so bytes written past the old end may be lost with
// it. With FUA it is durable on return.
func (s *Store) WriteChunkAt(id ChunkID, p []byte, off int64, flags WriteFlags) (created bool, err error) {
	if err := s.checkOpen(); err != nil {
		return false, err
	}
	end := off + int64(len(p))
	if off < 0 || end < off || end > MaxChunkSize {
		return false, fmt.Errorf("%w: write of %d bytes at %d into a chunk (at most %d bytes)", ErrInvalidArgument, len(p), off, MaxChunkSize)
	}
	s.throttle()
	l := s.chunks.lock(id)
	l.Lock()
	defer l.Unlock()
	r := s.chunks.get(id)
	if r == nil {
		owner := s.owner.Add(1) - 1
		s.lmu.Lock()
		s.owners[owner] = newOwnerMap()
		s.lmu.Unlock()
		r = &chunkRecord{Owner: owner}
		created = true
	}
	// The sector that held the old end may hold bytes past it (a write
	// whose growth a crash undid): zero them before they come inside.
	if tail := r.Length % SectorSize; off > r.Length && tail != 0 {
		zend := min(off, r.Length-tail+SectorSize)
		if err := s.writeBytes(r.Owner, nil, make([]byte, zend-r.Length), r.Length, false); err != nil {
			return false, s.abandonChunk(created, r, err)
		}
	}
	if err := s.writeBytes(r.Owner, nil, p, off, false); err != nil {
		return false, s.abandonChunk(created, r, err)
	}
	if created || end > r.Length {
		s.chunks.swap(id, &chunkRecord{Owner: r.Owner, Length: max(r.Length, end)})
		s.lmu.Lock()
		s.ckptNeeded = true
		s.lmu.Unlock()
	}
	if flags&FUA != 0 {
		return created, s.commit()
	}
	return created, nil
}

// abandonChunk drops the owner of a chunk WriteChunkAt was making when
// the write failed, and returns err.
func (s *Store) abandonChunk(created bool, r *chunkRecord, err error) error {
	if created {
		s.lmu.Lock()
		s.dropOwnerLocked(r.Owner)
		s.lmu.Unlock()
	}
	return err
}

// maxChunkAppend is the most bytes of a chunk appended under lmu at once,
// so that readers and other writers get their turn.
const maxChunkAppend = 1 << 20

// ChunkSize returns a chunk's length.
func (s *Store) ChunkSize(id ChunkID) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	r := s.chunks.get(id)
	if r == nil {
		return 0, fmt.Errorf("%w: chunk %s", ErrNotFound, id)
	}
	return r.Length, nil
}

// GetChunk returns a whole chunk.
func (s *Store) GetChunk(id ChunkID) ([]byte, error) {
	l := s.chunks.lock(id)
	l.RLock()
	defer l.RUnlock()
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	r := s.chunks.get(id)
	if r == nil {
		return nil, fmt.Errorf("%w: chunk %s", ErrNotFound, id)
	}
	buf := make([]byte, r.Length)
	if err := s.readChunk(r, buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}

// ReadChunkAt reads from a chunk at off (io.ReaderAt semantics: io.EOF
// with the bytes before the end).
func (s *Store) ReadChunkAt(id ChunkID, p []byte, off int64) (int, error) {
	l := s.chunks.lock(id)
	l.RLock()
	defer l.RUnlock()
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	r := s.chunks.get(id)
	if r == nil {
		return 0, fmt.Errorf("%w: chunk %s", ErrNotFound, id)
	}
	if off < 0 {
		return 0, fmt.Errorf("%w: offset %d", ErrOutOfRange, off)
	}
	if off >= r.Length {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.Length-off)
	if err := s.readChunk(r, p[:n], off); err != nil {
		return 0, err
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// readChunk reads [off, off+len(p)) of r, which lies inside it.
func (s *Store) readChunk(r *chunkRecord, p []byte, off int64) error {
	return s.readBytes(r.Owner, p, off)
}

// DeleteChunk removes a chunk. With FUA it is durable on return.
func (s *Store) DeleteChunk(id ChunkID, flags WriteFlags) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	s.throttle()
	l := s.chunks.lock(id)
	l.Lock()
	if s.chunks.get(id) == nil {
		l.Unlock()
		return fmt.Errorf("%w: chunk %s", ErrNotFound, id)
	}
	old := s.chunks.swap(id, nil)
	s.lmu.Lock()
	s.dropOwnerLocked(old.Owner)
	s.ckptNeeded = true
	s.lmu.Unlock()
	l.Unlock()
	if flags&FUA != 0 {
		return s.commit()
	}
	return nil
}

// ChunkInfo describes a chunk.
type ChunkInfo struct {
	ID   ChunkID
	Size int64
}

// Chunks lists the chunks, ordered by ID.
func (s *Store) Chunks() []ChunkInfo {
	s.chunks.mu.Lock()
	out := make([]ChunkInfo, 0, len(s.chunks.m))
	for id, r := range s.chunks.m {
		out = append(out, ChunkInfo{ID: id, Size: r.Length})
	}
	s.chunks.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return string(out[i].ID[:]) < string(out[j].ID[:]) })
	return out
}
