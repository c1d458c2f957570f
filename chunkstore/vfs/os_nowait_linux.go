package vfs

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReadAtvNowait reads with preadv2(2) and RWF_NOWAIT: from the page cache,
// or ErrWouldBlock. A short count (some of the bytes are cached, or the
// file ends) is ErrWouldBlock too: the blocking read that follows tells
// which.
func (f osFile) ReadAtvNowait(bufs [][]byte, off int64) (int, error) {
	if len(bufs) > iovMax {
		return 0, ErrWouldBlock
	}
	want := 0
	for _, b := range bufs {
		want += len(b)
	}
	rc, err := f.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var opErr error
	if cerr := rc.Control(func(fd uintptr) {
		for {
			n, opErr = unix.Preadv2(int(fd), bufs, off, unix.RWF_NOWAIT)
			if opErr != syscall.EINTR {
				return
			}
		}
	}); cerr != nil {
		return 0, cerr
	}
	switch {
	case opErr == unix.EAGAIN || opErr == unix.EOPNOTSUPP:
		// EOPNOTSUPP: a file system that cannot read without waiting.
		return 0, ErrWouldBlock
	case opErr != nil:
		return 0, &os.PathError{Op: "preadv2", Path: f.f.Name(), Err: opErr}
	case n < want:
		return n, ErrWouldBlock
	}
	return n, nil
}
