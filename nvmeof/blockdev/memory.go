package blockdev

import (
	"io"
	"sync/atomic"
)

// Memory chunking: 64 KiB chunks, 1024 chunks (64 MiB) per leaf.
const (
	memChunkShift = 16
	memChunkSize  = 1 << memChunkShift
	memLeafShift  = 10
	memLeafChunks = 1 << memLeafShift
)

// memChunk is one allocated chunk of a Memory device.
type memChunk [memChunkSize]byte

// memLeaf maps memLeafChunks consecutive chunks.
type memLeaf [memLeafChunks]atomic.Pointer[memChunk]

// Memory is a sparse in-memory Device: chunks are allocated on the first
// nonzero write and freed by Discard and WriteZeroes. Safe for concurrent
// use; see the package documentation.
type Memory struct {
	size      int64
	leaves    []atomic.Pointer[memLeaf]
	allocated atomic.Int64 // bytes in allocated chunks
}

var (
	_ Device      = (*Memory)(nil)
	_ WriteZeroer = (*Memory)(nil)
	_ Discarder   = (*Memory)(nil)
	_ NonBlocking = (*Memory)(nil)
)

// maxMemorySize bounds a Memory device so that chunk indexes fit an int
// on every platform.
const maxMemorySize = 1 << 50

// NewMemory returns a Memory device of size bytes, all zeros. It uses
// memory only for chunks that get written.
func NewMemory(size int64) (*Memory, error) {
	if size <= 0 || size > maxMemorySize {
		return nil, ErrInvalidSize
	}
	chunks := (size + memChunkSize - 1) >> memChunkShift
	leaves := (chunks + memLeafChunks - 1) >> memLeafShift
	return &Memory{size: size, leaves: make([]atomic.Pointer[memLeaf], leaves)}, nil
}

// Size returns the device size.
func (m *Memory) Size() int64 { return m.size }

// Sync does nothing: memory has nothing to make durable.
func (m *Memory) Sync() error { return nil }

// NonBlocking reports true: Memory never waits for I/O.
func (m *Memory) NonBlocking() bool { return true }

// Allocated returns the bytes of memory held by written chunks.
func (m *Memory) Allocated() int64 { return m.allocated.Load() }

// chunk returns chunk i, or nil if it is not allocated.
func (m *Memory) chunk(i int64) *memChunk {
	leaf := m.leaves[i>>memLeafShift].Load()
	if leaf == nil {
		return nil
	}
	return leaf[i&(memLeafChunks-1)].Load()
}

// chunkSlot returns the pointer that holds chunk i, allocating its leaf.
func (m *Memory) chunkSlot(i int64) *atomic.Pointer[memChunk] {
	lp := &m.leaves[i>>memLeafShift]
	leaf := lp.Load()
	if leaf == nil {
		fresh := new(memLeaf)
		if lp.CompareAndSwap(nil, fresh) {
			leaf = fresh
		} else {
			leaf = lp.Load()
		}
	}
	return &leaf[i&(memLeafChunks-1)]
}

// ReadAt implements io.ReaderAt.
func (m *Memory) ReadAt(p []byte, off int64) (int, error) {
	n, err := readRange(m.size, off, len(p))
	for done := 0; done < n; {
		pos := off + int64(done)
		in := int(pos & (memChunkSize - 1))
		k := min(n-done, memChunkSize-in)
		if c := m.chunk(pos >> memChunkShift); c != nil {
			copy(p[done:done+k], c[in:in+k])
		} else {
			clear(p[done : done+k])
		}
		done += k
	}
	return n, err
}

// WriteAt implements io.WriterAt. A write that crosses Size writes nothing
// and returns ErrOutOfRange.
func (m *Memory) WriteAt(p []byte, off int64) (int, error) {
	if err := checkRange(m.size, off, int64(len(p))); err != nil {
		return 0, err
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		in := int(pos & (memChunkSize - 1))
		k := min(len(p)-done, memChunkSize-in)
		src := p[done : done+k]
		slot := m.chunkSlot(pos >> memChunkShift)
		c := slot.Load()
		if c == nil {
			if allZero(src) {
				done += k
				continue
			}
			fresh := new(memChunk)
			if slot.CompareAndSwap(nil, fresh) {
				m.allocated.Add(memChunkSize)
				c = fresh
			} else {
				c = slot.Load()
			}
		}
		copy(c[in:in+k], src)
		done += k
	}
	return len(p), nil
}

// WriteZeroes makes [off, off+n) read as zeros, freeing whole chunks.
func (m *Memory) WriteZeroes(off, n int64) error {
	if err := checkRange(m.size, off, n); err != nil {
		return err
	}
	end := off + n
	for pos := off; pos < end; {
		in := pos & (memChunkSize - 1)
		k := min(end-pos, memChunkSize-in)
		i := pos >> memChunkShift
		whole := in == 0 && (k == memChunkSize || pos+k == m.size)
		if leaf := m.leaves[i>>memLeafShift].Load(); leaf != nil {
			slot := &leaf[i&(memLeafChunks-1)]
			if whole {
				if slot.Swap(nil) != nil {
					m.allocated.Add(-memChunkSize)
				}
			} else if c := slot.Load(); c != nil {
				clear(c[in : in+k])
			}
		}
		pos += k
	}
	return nil
}

// Discard forgets [off, off+n): it reads as zeros afterwards, and whole
// chunks are freed. For Memory it is WriteZeroes.
func (m *Memory) Discard(off, n int64) error { return m.WriteZeroes(off, n) }

// allZero reports whether every byte of b is zero.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

var _ io.ReaderAt = (*Memory)(nil)
