package blockdev

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// blockDeviceSize asks the kernel for the size of a block device.
func blockDeviceSize(f *os.File) (int64, error) {
	var size uint64
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
		if errno != 0 {
			ioErr = errno
		}
	})
	if err != nil {
		return 0, err
	}
	return int64(size), ioErr
}

func (d *File) sync() error {
	return ignoreEINTR(func() error { return unix.Fdatasync(int(d.f.Fd())) })
}

func (d *File) fallocZeroRange(off, n int64) error {
	return d.fallocate(unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

func (d *File) fallocPunchHole(off, n int64) error {
	return d.fallocate(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// fallocate runs fallocate(2); a mode the file system does not have is
// ErrNotSupported.
func (d *File) fallocate(mode uint32, off, n int64) error {
	err := ignoreEINTR(func() error { return unix.Fallocate(int(d.f.Fd()), mode, off, n) })
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return errors.Join(ErrNotSupported, err)
	}
	return err
}

// writeDSync is one pwritev2(2) with RWF_DSYNC.
func (d *File) writeDSync(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Pwritev2(int(d.f.Fd()), [][]byte{p[done:]}, off+int64(done), unix.RWF_DSYNC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
			if done == 0 {
				return 0, errors.Join(ErrNotSupported, err)
			}
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

func ignoreEINTR(f func() error) error {
	for {
		err := f()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
