package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

var (
	_ SharedFlush = osFile{}
	_ Puncher     = osFile{}
)

// File systems whose overwrites of allocated blocks need no metadata
// (statfs f_type).
const (
	ext4Magic = 0xEF53 // ext2, ext3, ext4
	xfsMagic  = 0x58465342
)

// Disk implements SharedFlush: the file system's device number, and true
// on ext2/3/4 and XFS.
func (f osFile) Disk() (uint64, bool) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.f.Fd()), &st); err != nil {
		return 0, false
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.f.Fd()), &sfs); err != nil {
		return 0, false
	}
	switch uint32(sfs.Type) {
	case ext4Magic, xfsMagic:
		return st.Dev, true
	}
	return st.Dev, false
}

// WriteBack implements SharedFlush with sync_file_range(2) over the whole
// file.
func (f osFile) WriteBack() error {
	const flags = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
	for {
		err := unix.SyncFileRange(int(f.f.Fd()), 0, 0, flags)
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "sync_file_range", Path: f.f.Name(), Err: err}
			}
			return nil
		}
	}
}

// StartWriteBack implements SharedFlush with sync_file_range(2)'s WRITE.
func (f osFile) StartWriteBack() error {
	for {
		err := unix.SyncFileRange(int(f.f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "sync_file_range", Path: f.f.Name(), Err: err}
			}
			return nil
		}
	}
}

// Allocated implements SharedFlush with lseek(2)'s SEEK_DATA and
// SEEK_HOLE.
func (f osFile) Allocated(fn func(off, n int64)) error {
	fd := int(f.f.Fd())
	var off int64
	for {
		lo, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // no data at or after off
		}
		if err != nil {
			return &os.PathError{Op: "lseek", Path: f.f.Name(), Err: err}
		}
		hi, err := unix.Seek(fd, lo, unix.SEEK_HOLE)
		if err != nil {
			return &os.PathError{Op: "lseek", Path: f.f.Name(), Err: err}
		}
		if hi > lo {
			fn(lo, hi-lo)
		}
		off = hi
	}
}

// Punch implements Puncher with fallocate(2).
func (f osFile) Punch(off, n int64) error {
	const mode = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE
	for {
		err := unix.Fallocate(int(f.f.Fd()), mode, off, n)
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fallocate", Path: f.f.Name(), Err: err}
			}
			return nil
		}
	}
}
