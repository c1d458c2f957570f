package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
)

// File is a Device on a regular file or a block device node. Safe for
// concurrent use; see the package documentation.
type File struct {
	f     *os.File
	path  string
	size  int64
	block bool // a block device node, not a regular file

	// What fallocate(2) modes the file system accepts, learnt on first
	// use: 0 untried, 1 works, 2 not supported.
	zeroRange atomic.Int32
	punchHole atomic.Int32
	fuaWrite  atomic.Int32
}

var (
	_ Device      = (*File)(nil)
	_ WriteZeroer = (*File)(nil)
	_ Discarder   = (*File)(nil)
	_ FUAWriter   = (*File)(nil)
)

// Feature states of File's learnt capabilities.
const (
	featureUntried     = 0
	featureWorks       = 1
	featureUnsupported = 2
)

// OpenFile opens path as a device of size bytes.
//
//   - A missing path is created as a sparse regular file of size bytes
//     (size must then be positive).
//   - An existing regular file smaller than size is grown (sparse); a
//     larger one is used for its first size bytes. Size 0 means the file's
//     size, which must then be positive.
//   - A block device's size is the device's; size 0 means all of it, and
//     a larger size is refused with ErrInvalidSize.
//
// The caller closes the File.
func OpenFile(path string, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("blockdev: %s: size %d: %w", path, size, ErrInvalidSize)
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if size == 0 {
			return nil, fmt.Errorf("blockdev: %s does not exist and no size was given: %w", path, ErrInvalidSize)
		}
		return openRegular(path, size, os.O_RDWR|os.O_CREATE|os.O_EXCL)
	case err != nil:
		return nil, fmt.Errorf("blockdev: %w", err)
	case st.Mode().IsRegular():
		return openRegular(path, size, os.O_RDWR)
	case st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		return openBlockDevice(path, size)
	}
	return nil, fmt.Errorf("blockdev: %s (%v): %w", path, st.Mode().Type(), ErrNotDevice)
}

func openRegular(path string, size int64, flag int) (*File, error) {
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	if size == 0 {
		size = st.Size()
		if size == 0 {
			f.Close()
			return nil, fmt.Errorf("blockdev: %s is empty and no size was given: %w", path, ErrInvalidSize)
		}
	}
	if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("blockdev: growing %s to %d bytes: %w", path, size, err)
		}
	}
	return &File{f: f, path: path, size: size}, nil
}

func openBlockDevice(path string, size int64) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	devSize, err := blockDeviceSize(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blockdev: size of %s: %w", path, err)
	}
	if size == 0 {
		size = devSize
	}
	if size > devSize || size == 0 {
		f.Close()
		return nil, fmt.Errorf("blockdev: %s holds %d bytes, asked for %d: %w", path, devSize, size, ErrInvalidSize)
	}
	return &File{f: f, path: path, size: size, block: true}, nil
}

// Size returns the device size.
func (d *File) Size() int64 { return d.size }

// Path returns the path the device was opened with.
func (d *File) Path() string { return d.path }

// ReadAt implements io.ReaderAt.
func (d *File) ReadAt(p []byte, off int64) (int, error) {
	n, clipErr := readRange(d.size, off, len(p))
	if n == 0 {
		return 0, clipErr
	}
	got, err := d.f.ReadAt(p[:n], off)
	if err != nil {
		return got, d.wrap(err)
	}
	return got, clipErr
}

// WriteAt implements io.WriterAt. A write that crosses Size writes
// nothing and returns ErrOutOfRange.
func (d *File) WriteAt(p []byte, off int64) (int, error) {
	if err := checkRange(d.size, off, int64(len(p))); err != nil {
		return 0, err
	}
	n, err := d.f.WriteAt(p, off)
	return n, d.wrap(err)
}

// Sync makes completed writes durable (fdatasync(2) where there is one).
func (d *File) Sync() error { return d.wrap(d.sync()) }

// Close closes the file.
func (d *File) Close() error { return d.wrap(d.f.Close()) }

// WriteZeroes makes [off, off+n) read as zeros.
func (d *File) WriteZeroes(off, n int64) error {
	if err := checkRange(d.size, off, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if d.zeroRange.Load() != featureUnsupported {
		err := d.fallocZeroRange(off, n)
		if err == nil {
			d.zeroRange.Store(featureWorks)
			return nil
		}
		if !errors.Is(err, ErrNotSupported) {
			return d.wrap(err)
		}
		d.zeroRange.Store(featureUnsupported)
	}
	if err := d.Discard(off, n); !errors.Is(err, ErrNotSupported) {
		return err
	}
	return writeZeros(d, off, n)
}

// Discard forgets [off, off+n) by punching a hole; the range reads as
// zeros afterwards. ErrNotSupported when the file system cannot.
func (d *File) Discard(off, n int64) error {
	if err := checkRange(d.size, off, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if d.punchHole.Load() == featureUnsupported {
		return ErrNotSupported
	}
	err := d.fallocPunchHole(off, n)
	if err == nil {
		d.punchHole.Store(featureWorks)
		return nil
	}
	if errors.Is(err, ErrNotSupported) {
		d.punchHole.Store(featureUnsupported)
		return err
	}
	return d.wrap(err)
}

// WriteAtFUA writes p at off and returns once it is durable.
func (d *File) WriteAtFUA(p []byte, off int64) (int, error) {
	if err := checkRange(d.size, off, int64(len(p))); err != nil {
		return 0, err
	}
	if d.fuaWrite.Load() != featureUnsupported {
		n, err := d.writeDSync(p, off)
		if err == nil {
			d.fuaWrite.Store(featureWorks)
			return n, nil
		}
		if !errors.Is(err, ErrNotSupported) {
			return n, d.wrap(err)
		}
		d.fuaWrite.Store(featureUnsupported)
	}
	n, err := d.f.WriteAt(p, off)
	if err != nil {
		return n, d.wrap(err)
	}
	return n, d.Sync()
}

// wrap turns the os package's closed-file error into ErrClosed.
func (d *File) wrap(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}
