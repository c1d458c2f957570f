//go:build linux || darwin || openbsd

package vfs

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// iovMax is the most buffers one preadv/pwritev takes (IOV_MAX).
const iovMax = 1024

// ReadAtv reads with preadv(2), continuing after short reads.
func (f osFile) ReadAtv(bufs [][]byte, off int64) (int, error) {
	return f.vectored(bufs, off, unix.Preadv, "preadv")
}

// WriteAtv writes with pwritev(2), continuing after short writes.
func (f osFile) WriteAtv(bufs [][]byte, off int64) (int, error) {
	return f.vectored(bufs, off, unix.Pwritev, "pwritev")
}

func (f osFile) vectored(bufs [][]byte, off int64, op func(int, [][]byte, int64) (int, error), name string) (int, error) {
	rc, err := f.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	done := 0
	// Work on a copy: partial transfers trim the front buffer.
	rest := append([][]byte(nil), bufs...)
	for len(rest) > 0 {
		if len(rest[0]) == 0 {
			rest = rest[1:]
			continue
		}
		batch := rest[:min(len(rest), iovMax)]
		var n int
		var opErr error
		if cerr := rc.Control(func(fd uintptr) {
			for {
				n, opErr = op(int(fd), batch, off+int64(done))
				if opErr != syscall.EINTR {
					return
				}
			}
		}); cerr != nil {
			return done, cerr
		}
		if opErr != nil {
			return done, &os.PathError{Op: name, Path: f.f.Name(), Err: opErr}
		}
		if n == 0 {
			return done, io.EOF
		}
		done += n
		for n > 0 {
			if n >= len(rest[0]) {
				n -= len(rest[0])
				rest = rest[1:]
				continue
			}
			rest[0] = rest[0][n:]
			n = 0
		}
	}
	return done, nil
}
