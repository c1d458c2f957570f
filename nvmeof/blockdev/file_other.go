//go:build !linux

package blockdev

import (
	"io"
	"os"
)

// blockDeviceSize finds a block device's size by seeking to its end.
func blockDeviceSize(f *os.File) (int64, error) { return f.Seek(0, io.SeekEnd) }

func (d *File) sync() error { return d.f.Sync() }

func (d *File) fallocZeroRange(off, n int64) error { return ErrNotSupported }

func (d *File) fallocPunchHole(off, n int64) error { return ErrNotSupported }

func (d *File) writeDSync(p []byte, off int64) (int, error) { return 0, ErrNotSupported }
