package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// Sync is fdatasync(2): the data and the metadata needed to read it back
// (size, block allocation), without the times, which saves a journal
// commit when a write overwrote allocated blocks.
func (f osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(f.f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.f.Name(), Err: err}
			}
			return nil
		}
	}
}
