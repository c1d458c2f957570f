package shm

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newMemfd creates a memfd of size bytes and maps it read-write.
func newMemfd(name string, size int) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err = unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shm: ftruncate memfd: %w", err)
	}
	mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("shm: mmap memfd: %w", err)
	}
	return fd, mem, nil
}

// mapFd maps a received fd (read-only if !writable) after checking that
// it is at least min bytes long. It maps the whole file.
func mapFd(fd int, min int, writable bool) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < int64(min) || st.Size <= 0 || st.Size > 1<<46 {
		return nil, fmt.Errorf("%w: shared file of %d bytes (mode %#o), want at least %d", ErrBadTable, st.Size, st.Mode, min)
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap: %w", err)
	}
	return mem, nil
}

func unmap(mem []byte) {
	if mem != nil {
		unix.Munmap(mem)
	}
}

func pageRound(n int) int {
	p := os.Getpagesize()
	return (n + p - 1) &^ (p - 1)
}

// addrOf is the virtual address of b[0].
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// rawBytes is the n bytes at virtual address addr of this process. It is
// how Inline WRs read SGEs that name no region: the caller vouches for the
// memory, as with ibv_post_send and IBV_SEND_INLINE.
func rawBytes(addr uint64, n int) []byte {
	if n == 0 {
		return nil
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

// The doorbell is a futex on a word of the QP block, without
// FUTEX_PRIVATE_FLAG so that it works between processes.
const (
	futexWait = 0
	futexWake = 1
)

// sleep blocks while *w == 1, for at most d (d < 0: no limit). It may
// return early, spuriously.
func sleep(w *atomic.Uint32, d time.Duration) {
	var ts *unix.Timespec
	var t unix.Timespec
	if d >= 0 {
		t = unix.NsecToTimespec(int64(d))
		ts = &t
	}
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, 1, uintptr(unsafe.Pointer(ts)), 0, 0)
}

// ring wakes the sleeper of doorbell w if it says it sleeps. The caller
// has published what the sleeper should see before calling ring.
func ring(w *atomic.Uint32) {
	if w.Load() == 1 && w.Swap(0) == 1 {
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, 1<<30, 0, 0, 0)
	}
}
