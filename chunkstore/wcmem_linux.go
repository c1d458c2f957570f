package chunkstore

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// wcSlab is the write cache's allocation unit: 2 MiB, one huge page.
const wcSlab = 2 << 20

// newSlab maps a slab of anonymous memory outside the Go heap, aligned to
// a huge page and advised to use one (MADV_HUGEPAGE), so that touching it
// first costs one fault rather than 512: on a virtual machine each fault
// of fresh memory is an exit to the hypervisor (some 11 µs a 4 KiB page
// here, where a 1 GiB cache first filled at about 250 MB/s in Go's heap).
// mapped is false for a slab from the Go heap, when the kernel maps none.
func newSlab() (b []byte, mapped bool) {
	p, err := unix.MmapPtr(-1, 0, nil, 2*wcSlab, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return make([]byte, wcSlab), false
	}
	off := (wcSlab - uintptr(p)%wcSlab) % wcSlab
	if off > 0 {
		_ = unix.MunmapPtr(p, off)
	}
	if tail := wcSlab - off; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, off+wcSlab), tail)
	}
	b = unsafe.Slice((*byte)(unsafe.Add(p, off)), wcSlab)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b, true
}

// freeSlab gives a slab back.
func freeSlab(b []byte, mapped bool) {
	if mapped {
		_ = unix.MunmapPtr(unsafe.Pointer(&b[0]), wcSlab)
	}
}
