package host

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

// Registered I/O memory: buffers the caller gets from the Controller,
// registered once with its transport, that a Request's data moves
// straight from and into (see AllocBuffer).

// ioBuffer is one region of AllocBuffer.
type ioBuffer struct {
	mem  []byte
	base uintptr
	// mr is the region's registration on RDMA, nil on TCP.
	mr rdma.MR
	// mapped: mem is the host's own anonymous mapping (munmap it when
	// freed); otherwise the provider's (Alloc), released by Deregister.
	mapped bool
}

// ioBuffers is a Controller's registered I/O memory. The list is
// replaced, never changed in place, so that the I/O path reads it
// without a lock.
type ioBuffers struct {
	mu   sync.Mutex // guards changes of list, and closed; held while registering
	list atomic.Pointer[[]*ioBuffer]
	// closed is set by Close: no buffer is allocated after it.
	closed bool
}

// AllocBuffer returns size bytes of zeroed memory for I/O data,
// registered once with the controller's transport for the life of the
// buffer: a Request of this controller whose Buf lies in it (ReadAt and
// WriteAt too) moves its data without a copy. On RDMA the controller
// reads writes from it and writes reads into it (and in-capsule write
// data is sent from it); on TCP, PDUs are written from it and read into
// it. Other memory keeps working as before: copied through the host's
// own registered buffers.
//
// The memory is outside the Go heap (an anonymous mapping, or the
// provider's shared memory on shm://), so it may be handed to C. It
// stays registered, with remote read and write access, until FreeBuffer
// or Close: the controller can reach it at any time (see Sharp edges in
// the package documentation). A buffer of one Controller is plain memory
// to another.
func (c *Controller) AllocBuffer(size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: AllocBuffer of %d bytes", ErrInvalidOption, size)
	}
	// Held across the registration, so that Close's freeBuffers, and the
	// PD's closing after it, wait for it.
	c.bufs.mu.Lock()
	defer c.bufs.mu.Unlock()
	if c.bufs.closed {
		return nil, ErrClosed
	}
	b := &ioBuffer{}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("nvmeof/host: AllocBuffer of %d bytes: %w", size, err)
	}
	b.mem, b.mapped = mem, true
	if c.pd != nil {
		b.mr, err = c.pd.Register(mem, rdma.AccessAll)
		if errors.Is(err, rdma.ErrNotSupported) {
			// shm: a peer maps only the provider's own memory.
			syscall.Munmap(mem)
			b.mem, b.mapped = nil, false
			if b.mr, err = c.pd.Alloc(size, rdma.AccessAll); err == nil {
				b.mem = b.mr.Bytes()
			}
		}
		if err != nil {
			if b.mapped {
				syscall.Munmap(mem)
			}
			return nil, fmt.Errorf("nvmeof/host: AllocBuffer of %d bytes: registering: %w", size, err)
		}
	}
	b.base = uintptr(unsafe.Pointer(unsafe.SliceData(b.mem)))
	var list []*ioBuffer
	if old := c.bufs.list.Load(); old != nil {
		list = append(list, *old...)
	}
	list = append(list, b)
	c.bufs.list.Store(&list)
	return b.mem, nil
}

// FreeBuffer deregisters and releases a buffer of AllocBuffer (buf as
// AllocBuffer returned it). No request may be using it: after FreeBuffer
// the memory is gone.
func (c *Controller) FreeBuffer(buf []byte) error {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	c.bufs.mu.Lock()
	defer c.bufs.mu.Unlock()
	old := c.bufs.list.Load()
	if old == nil {
		return fmt.Errorf("%w: FreeBuffer of memory AllocBuffer did not return", ErrInvalidOption)
	}
	for i, b := range *old {
		if b.base != base || len(b.mem) != len(buf) {
			continue
		}
		list := append(append([]*ioBuffer(nil), (*old)[:i]...), (*old)[i+1:]...)
		c.bufs.list.Store(&list)
		return b.free()
	}
	return fmt.Errorf("%w: FreeBuffer of memory AllocBuffer did not return", ErrInvalidOption)
}

// freeBuffers releases every buffer left, at Close, after the queues
// have closed and before the PD does.
func (c *Controller) freeBuffers() {
	c.bufs.mu.Lock()
	defer c.bufs.mu.Unlock()
	c.bufs.closed = true
	if old := c.bufs.list.Swap(nil); old != nil {
		for _, b := range *old {
			b.free()
		}
	}
}

// free deregisters b and releases its memory.
func (b *ioBuffer) free() error {
	var err error
	if b.mr != nil {
		err = b.mr.Deregister()
	}
	if b.mapped {
		if merr := syscall.Munmap(b.mem); err == nil {
			err = merr
		}
	}
	return err
}

// registered finds the buffer of AllocBuffer that p lies in wholly: its
// registration (nil on TCP) and p's offset in it. It allocates nothing.
func (c *Controller) registered(p []byte) (mr rdma.MR, off int, ok bool) {
	list := c.bufs.list.Load()
	if list == nil || len(p) == 0 {
		return nil, 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	for _, b := range *list {
		if base >= b.base && base-b.base+uintptr(len(p)) <= uintptr(len(b.mem)) {
			return b.mr, int(base - b.base), true
		}
	}
	return nil, 0, false
}
