//go:build linux

package iwarp

import (
	"io"
	"syscall"
	"unsafe"
)

// readvInto fills p from the socket with readv(2), putting up to
// rxLookahead bytes of what follows p in the stream (the trailer and the
// next FPDU's header) into the buffer in the same system call. The
// buffer must be empty.
func (d *rxReader) readvInto(p []byte) error {
	if d.rc == nil {
		rc, err := d.conn.SyscallConn()
		if err != nil {
			_, err = io.ReadFull(d.conn, p)
			return err
		}
		d.rc = rc
		d.readvFn = d.readvOnce
	}
	d.r, d.w = 0, 0
	for len(p) > 0 {
		d.iov[0].Base = &p[0]
		d.iov[0].SetLen(len(p))
		d.iov[1].Base = &d.buf[0]
		d.iov[1].SetLen(rxLookahead)
		err := d.rc.Read(d.readvFn)
		if err == nil {
			err = d.rvErr
		}
		if err == nil && d.rvN == 0 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			d.iov[0].Base, d.iov[1].Base = nil, nil
			return err
		}
		if d.rvN <= len(p) {
			p = p[d.rvN:]
		} else {
			d.w = d.rvN - len(p)
			p = nil
		}
	}
	d.iov[0].Base, d.iov[1].Base = nil, nil
	return nil
}

// readvOnce is the RawConn.Read callback: one readv, asking to wait for
// readability on EAGAIN.
func (d *rxReader) readvOnce(fd uintptr) bool {
	for {
		n, _, errno := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&d.iov[0])), uintptr(len(d.iov)))
		switch errno {
		case 0:
			d.rvN, d.rvErr = int(n), nil
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			d.rvN, d.rvErr = 0, errno
			return true
		}
	}
}

// readvState is rxReader's readv scratch.
type readvState struct {
	rc      syscall.RawConn
	readvFn func(uintptr) bool
	iov     [2]syscall.Iovec
	rvN     int
	rvErr   error
}
