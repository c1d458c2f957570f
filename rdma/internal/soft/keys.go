package soft

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	maxIndex  = 1<<24 - 1
)

// Region is one registered memory region as the key table sees it.
type Region struct {
	Buf    []byte
	Base   uint64 // virtual address of Buf[0]
	Access rdma.Access
	Key    uint32

	mu    sync.RWMutex // readers: accesses in progress; writer: Deregister
	valid bool         // guarded by mu
}

// KeyTable maps keys to regions. The zero value is ready to use.
type KeyTable struct {
	chunks [1 << (24 - chunkBits)]atomic.Pointer[[chunkSize]atomic.Pointer[Region]]

	mu   sync.Mutex // guards free, next and gens
	free []uint32
	next uint32 // next never-used index; 0 is never used
	gens map[uint32]uint8
}

// Add registers buf with access and returns its Region.
func (t *KeyTable) Add(buf []byte, access rdma.Access) (*Region, error) {
	t.mu.Lock()
	var idx uint32
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if t.next == 0 {
			t.next = 1
		}
		if t.next > maxIndex {
			t.mu.Unlock()
			return nil, rdma.ErrInvalidArgument
		}
		idx = t.next
		t.next++
	}
	if t.gens == nil {
		t.gens = map[uint32]uint8{}
	}
	g := t.gens[idx] + 1
	if g == 0 {
		g = 1
	}
	t.gens[idx] = g
	ch := t.chunks[idx>>chunkBits].Load()
	if ch == nil {
		ch = new([chunkSize]atomic.Pointer[Region])
		t.chunks[idx>>chunkBits].Store(ch)
	}
	t.mu.Unlock()

	r := &Region{Buf: buf, Access: access, Key: idx<<8 | uint32(g), valid: true}
	if len(buf) > 0 {
		r.Base = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	}
	ch[idx&(chunkSize-1)].Store(r)
	return r, nil
}

// Lookup returns the live region for key, or nil.
func (t *KeyTable) Lookup(key uint32) *Region {
	idx := key >> 8
	ch := t.chunks[idx>>chunkBits].Load()
	if ch == nil {
		return nil
	}
	r := ch[idx&(chunkSize-1)].Load()
	if r == nil || r.Key != key {
		return nil
	}
	return r
}

// Remove invalidates r: it waits for accesses in progress, then frees its
// slot so its key never resolves again.
func (t *KeyTable) Remove(r *Region) {
	r.mu.Lock()
	was := r.valid
	r.valid = false
	r.mu.Unlock()
	if !was {
		return
	}
	idx := r.Key >> 8
	t.chunks[idx>>chunkBits].Load()[idx&(chunkSize-1)].CompareAndSwap(r, nil)
	t.mu.Lock()
	t.free = append(t.free, idx)
	t.mu.Unlock()
}

// Acquire resolves [addr, addr+n) of the region named by key for an access
// that needs want. On success the returned slice is valid until Release
// is called on the returned region; the caller must call it. ok is false
// when the key is unknown or invalidated, the range is out of bounds or
// the rights are missing.
func (t *KeyTable) Acquire(key uint32, addr uint64, n uint64, want rdma.Access) (r *Region, b []byte, ok bool) {
	r = t.Lookup(key)
	if r == nil {
		return nil, nil, false
	}
	r.mu.RLock()
	if !r.valid || r.Access&want != want || addr < r.Base || n > uint64(len(r.Buf)) || addr-r.Base > uint64(len(r.Buf))-n {
		r.mu.RUnlock()
		return nil, nil, false
	}
	off := addr - r.Base
	return r, r.Buf[off : off+n : off+n], true
}

// Release ends an access begun by Acquire.
func (r *Region) Release() { r.mu.RUnlock() }
