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
// published: Put, Delete and repair replace the pointer.
type chunkTable struct {
	// locks: readers of a chunk hold locks[hash(id)] shared; Put, Delete
	// and repair hold it exclusively while they replace the record, so
	// no reader is on a slot when it is released. Taken after
	// Store.commitMu and before mu; at most one at a time.
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

// chunkShardLen returns the shard length of a chunk stripe holding n data
// bytes: n/K rounded up to 64 bytes (the coder's vector width).
func (s *Store) chunkShardLen(n int) int {
	l := (n + s.geo.Data - 1) / s.geo.Data
	return min((l+63)&^63, s.unit)
}

// PutChunk stores data under id, replacing any earlier chunk of that ID
// atomically: a reader, and a crash, sees the old chunk or the new one
// whole. With FUA it is durable on return; otherwise after the next
// Sync. Each chunk occupies whole stripe slots, so chunks much smaller
// than K × stripe unit waste space. It does not retain data.
func (s *Store) PutChunk(id ChunkID, data []byte, flags WriteFlags) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if len(data) > MaxChunkSize {
		return fmt.Errorf("%w: chunk of %d bytes, at most %d", ErrInvalidArgument, len(data), MaxChunkSize)
	}
	s.throttle()
	owner := s.owner.Add(1) - 1
	sb := s.stripeBytes()
	rec := &chunkRecord{Owner: owner, Length: int64(len(data))}
	k := s.geo.Data
	fail := func(err error) error {
		for _, e := range rec.Stripes {
			s.alloc.abort(e.Slot)
		}
		return err
	}
	full := len(data) / sb
	for i := 0; i < full; i += maxBatch {
		ws := make([]stripeWrite, min(maxBatch, full-i))
		for j := range ws {
			part := data[(i+j)*sb:]
			ws[j] = stripeWrite{key: stripeKey{Owner: owner, Index: uint64(i + j)}, data: make([][]byte, k)}
			for c := range k {
				ws[j].data[c] = part[c*s.unit : (c+1)*s.unit]
			}
		}
		exts, err := s.writeStripes(ws, s.unit)
		if err != nil {
			return fail(err)
		}
		rec.Stripes = append(rec.Stripes, exts...)
	}
	if tail := data[full*sb:]; len(tail) > 0 {
		shardLen := s.chunkShardLen(len(tail))
		buf := make([]byte, k*shardLen)
		copy(buf, tail)
		shards := make([][]byte, k)
		for j := range shards {
			shards[j] = buf[j*shardLen : (j+1)*shardLen]
		}
		ext, err := s.writeStripe(stripeKey{Owner: owner, Index: uint64(full)}, shards, shardLen)
		if err != nil {
			return fail(err)
		}
		rec.Stripes = append(rec.Stripes, ext)
	}
	l := s.chunks.lock(id)
	l.Lock()
	old := s.chunks.swap(id, rec)
	l.Unlock()
	if old != nil {
		for _, e := range old.Stripes {
			s.alloc.release(e.Slot)
		}
	}
	if flags&FUA != 0 {
		return s.commit()
	}
	return nil
}

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
	sb := int64(s.stripeBytes())
	for done := int64(0); done < int64(len(p)); {
		pos := off + done
		i := pos / sb
		lo := int(pos % sb)
		hi := int(min(sb, int64(lo)+int64(len(p))-done))
		if i >= int64(len(r.Stripes)) {
			return corruptf("chunk owner %d has %d stripes for %d bytes", r.Owner, len(r.Stripes), r.Length)
		}
		if err := s.readStripe(stripeKey{Owner: r.Owner, Index: uint64(i)}, r.Stripes[i], lo, hi, p[done:done+int64(hi-lo)]); err != nil {
			return err
		}
		done += int64(hi - lo)
	}
	return nil
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
	l.Unlock()
	for _, e := range old.Stripes {
		s.alloc.release(e.Slot)
	}
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
