package vfs

import (
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// FS is one rooted file system: a device directory of the chunk store.
// Names are slash-separated and relative to the root ("identity",
// "shards/0"); a name that is absolute, empty or climbs out of the root
// with ".." is refused with ErrInvalidName.
//
// Implementations are safe for concurrent use.
type FS interface {
	// OpenFile opens name with os.O_* flags (O_RDONLY, O_RDWR, O_CREATE,
	// O_EXCL, O_TRUNC). A new file is not durable until the file is
	// synced and, for its directory entry, SyncDir of its directory.
	OpenFile(name string, flag int) (File, error)
	// Rename atomically replaces newname with oldname. The change is not
	// durable until SyncDir of the directory.
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory. Durable after SyncDir.
	Remove(name string) error
	// MkdirAll creates a directory and any missing parents. Durable after
	// SyncDir of each parent.
	MkdirAll(dir string) error
	// SyncDir makes the entries of dir (creates, renames, removes) durable.
	// "." is the root.
	SyncDir(dir string) error
	// Stat describes name.
	Stat(name string) (fs.FileInfo, error)
	// List returns the names in dir, sorted.
	List(dir string) ([]string, error)
	// HostPath returns a path on the host's file system for name, for
	// libraries that must open an *os.File themselves (bbolt maps its file
	// into memory). Such files live beside the FS, not inside it: a
	// simulated crash leaves them as the host has them. An FS with no host
	// storage returns ErrNotSupported.
	HostPath(name string) (string, error)
	// String names the file system in messages (its root directory).
	String() string
}

// File is an open file. ReadAt and WriteAt follow the io.ReaderAt and
// io.WriterAt contracts (a short read returns an error, io.EOF at the end)
// and may be called concurrently on disjoint ranges.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data and size durable (fdatasync on Linux:
	// the data and the metadata needed to read it back, not the times).
	Sync() error
	// Stat describes the open file.
	Stat() (fs.FileInfo, error)
	// Truncate changes the file's size.
	Truncate(size int64) error
	// ReadAtv fills bufs in order from off, as one preadv(2) where the
	// platform has it. Like ReadAt, a short read returns an error (io.EOF
	// at the end of the file).
	ReadAtv(bufs [][]byte, off int64) (int, error)
	// WriteAtv writes bufs in order at off, as one pwritev(2) where the
	// platform has it.
	WriteAtv(bufs [][]byte, off int64) (int, error)
}

// SharedFlush is implemented by Files whose writes over allocated blocks
// can be made durable by a cache flush of their disk alone, so that the
// shards of one write on several files of one disk need one flush, not
// one each. The rules it adds to File.Sync's:
//
//   - A byte range is allocated once a Sync has made its blocks durable
//     (Allocated lists such ranges). Writing over it changes no metadata
//     on a file system that writes in place: ext4 and XFS do, copy-on-write
//     file systems (btrfs, ZFS) do not, and there Disk reports false.
//   - WriteBack puts the file's dirty bytes on the device (and its
//     volatile cache) without a flush or a metadata write.
//   - A Sync of any file on the same disk (same Disk id) flushes the
//     disk's cache: written-back bytes over allocated ranges of every file
//     there are then durable. Bytes over ranges not yet allocated are not,
//     until their own file's Sync.
//
// Linux's fdatasync(2) issues the cache flush even for a file with nothing
// to write (ext4_sync_file, xfs_file_fsync), after every write that had
// completed when it was called. InjectFS does not pass it through.
type SharedFlush interface {
	// Disk identifies the disk the file is on (st_dev), and reports
	// whether its file system writes allocated blocks in place.
	Disk() (id uint64, inPlace bool)
	// WriteBack writes the file's dirty bytes to the device and waits for
	// them (sync_file_range(2): WAIT_BEFORE, WRITE, WAIT_AFTER).
	WriteBack() error
	// StartWriteBack starts writing the file's dirty bytes to the device
	// and does not wait (sync_file_range(2): WRITE), so that the write-backs
	// of several files, then waited for by WriteBack one after the other,
	// run at once. Only WriteBack counts for the flush.
	StartWriteBack() error
	// Allocated calls fn for each byte range of the file that has blocks
	// (SEEK_DATA, SEEK_HOLE), in order. Sync the file first: Linux counts
	// dirty pages not yet allocated as data.
	Allocated(fn func(off, n int64)) error
}

// Puncher is implemented by Files that can give up the blocks under a
// byte range (fallocate(2) with FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE on
// Linux): the range then reads as zeros and takes no space, and the size
// does not change. Like a write, a punch is durable after the next Sync;
// a crash before it may leave the old bytes. The range's blocks are no
// longer allocated (SharedFlush): a write there needs its own Sync again.
type Puncher interface {
	Punch(off, n int64) error
}

// Op names one kind of operation, for error injection and counting.
type Op uint8

// The operations an FS and its Files perform.
const (
	OpOpen     Op = iota // OpenFile without O_CREATE
	OpCreate             // OpenFile with O_CREATE
	OpRead               // File.ReadAt
	OpWrite              // File.WriteAt
	OpSync               // File.Sync
	OpTruncate           // File.Truncate
	OpFileStat           // File.Stat
	OpClose              // File.Close
	OpRename             // FS.Rename
	OpRemove             // FS.Remove
	OpMkdir              // FS.MkdirAll
	OpSyncDir            // FS.SyncDir
	OpStat               // FS.Stat
	OpList               // FS.List
	OpHostPath           // FS.HostPath
	numOps
)

var opNames = [numOps]string{
	"open", "create", "read", "write", "sync", "truncate", "filestat", "close",
	"rename", "remove", "mkdir", "syncdir", "stat", "list", "hostpath",
}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return "op?"
}

// Mutating reports whether the operation changes what a crash can keep.
func (o Op) Mutating() bool {
	switch o {
	case OpCreate, OpWrite, OpSync, OpTruncate, OpRename, OpRemove, OpMkdir, OpSyncDir:
		return true
	}
	return false
}

// clean validates a name and returns its cleaned form ("." for the root).
// Clean checks and cleans a name as every FS does: ErrInvalidName (in an
// *os.PathError) for an empty or absolute name, one with a backslash, or
// one that climbs out of the root; otherwise path.Clean of it.
func Clean(name string) (string, error) { return clean(name) }

func clean(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "\\") {
		return "", &os.PathError{Op: "vfs", Path: name, Err: ErrInvalidName}
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", &os.PathError{Op: "vfs", Path: name, Err: ErrInvalidName}
	}
	return c, nil
}

// ReadFull reads len(p) bytes at off, or fails. Short reads are reported as
// io.ErrUnexpectedEOF (or io.EOF when nothing was read).
func ReadFull(f io.ReaderAt, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || (err == io.EOF && n > 0) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// totalLen is the number of bytes in bufs.
func totalLen(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// ReadAtvLoop implements ReadAtv with one ReadAt per buffer, for files
// with no vectored read of their own.
func ReadAtvLoop(f io.ReaderAt, bufs [][]byte, off int64) (int, error) {
	done := 0
	for _, b := range bufs {
		n, err := f.ReadAt(b, off+int64(done))
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// RangeReader is a File that reads several ranges in one call, each
// bufs[i] from offs[i], as ReadAt would one after the other (io.EOF when
// the file ends first; the count is the bytes filled, in order). A file
// on a remote device (a cluster's device service) does it in one round
// trip where several ReadAt calls take several.
type RangeReader interface {
	ReadRanges(bufs [][]byte, offs []int64) (int, error)
}

// A NowaitReader reads only what is in memory already. ReadAtvNowait is
// ReadAtv, except that it fails with ErrWouldBlock when it would have to
// wait for the device: on the OS a preadv2 with RWF_NOWAIT, which reads
// from the page cache or not at all. What it filled before failing so is
// not to be used. The store reads the shards of a stripe that are in
// memory on the calling goroutine and starts goroutines only for the
// shards that wait for a device.
type NowaitReader interface {
	ReadAtvNowait(bufs [][]byte, off int64) (int, error)
}

// WriteAtvLoop implements WriteAtv with one WriteAt per buffer.
func WriteAtvLoop(f io.WriterAt, bufs [][]byte, off int64) (int, error) {
	done := 0
	for _, b := range bufs {
		n, err := f.WriteAt(b, off+int64(done))
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// WriteFile creates name with data durably: it writes a temporary file,
// syncs it, renames it over name and syncs the directory. A crash leaves
// either the old file (or none) or the complete new one.
func WriteFile(fsys FS, name string, data []byte) error {
	c, err := clean(name)
	if err != nil {
		return err
	}
	tmp := c + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, c); err != nil {
		return err
	}
	return fsys.SyncDir(path.Dir(c))
}

// ReadFile reads all of name.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size())
	if err := ReadFull(f, buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}
