package fusefs

import (
	"context"
	"time"
)

// The types below are the file client's (package fs, imported as capfs)
// low-level inode API types, field for field as the contract between the
// two packages fixes them. They become aliases of the capfs types once
// that package declares them, so that *capfs.Client satisfies Client.

// Ino is an inode number; RootIno is the root directory.
type Ino uint64

// RootIno is the root directory's inode number.
const RootIno Ino = 1

// Attr is an inode's attributes. Mode holds the file type and the
// permission bits as in syscall.Stat_t.Mode.
type Attr struct {
	Ino                 Ino
	Gen                 uint64 // changes when an inode number is reused
	Mode                uint32
	Nlink               uint32
	Uid                 uint32
	Gid                 uint32
	Rdev                uint32
	Size                uint64
	Blocks              uint64 // 512-byte blocks allocated
	Atime, Mtime, Ctime time.Time
}

// SetAttr says which attributes to change; nil pointers are left alone.
type SetAttr struct {
	Mode               *uint32 // permission bits only
	Uid                *uint32
	Gid                *uint32
	Size               *uint64
	Atime              *time.Time // zero Time with AtimeNow: now
	Mtime              *time.Time
	AtimeNow, MtimeNow bool
}

// DirEntry is one READDIR(PLUS) entry; Attr is filled by the plus form.
type DirEntry struct {
	Name   string
	Ino    Ino
	Mode   uint32 // the file type bits at least
	Cookie uint64 // resume point: continue after this entry
	Attr   Attr
}

// StatFS is the file system's usage.
type StatFS struct {
	Blocks, Bfree, Bavail, Files, Ffree uint64
	Bsize, Frsize, NameLen              uint32
}

// Handle is an open-file handle the target tracks, so that an unlinked
// file stays readable and writable while it is open.
type Handle uint64

// Rename flags, as Linux renameat2.
const (
	RenameNoReplace = 1
	RenameExchange  = 2
)

// Client is the file client's low-level inode API that the node layer
// calls: exactly the method set of *capfs.Client the contract fixes.
// Every error is, or wraps, a syscall.Errno; transport failures after
// the client's reconnect timeout are syscall.EIO. All methods are safe
// for concurrent use.
type Client interface {
	Lookup(ctx context.Context, parent Ino, name string) (Attr, error)
	GetAttr(ctx context.Context, ino Ino) (Attr, error)
	SetAttr(ctx context.Context, ino Ino, in SetAttr) (Attr, error)
	Mknod(ctx context.Context, parent Ino, name string, mode, rdev, uid, gid uint32) (Attr, error)
	Mkdir(ctx context.Context, parent Ino, name string, mode, uid, gid uint32) (Attr, error)
	Create(ctx context.Context, parent Ino, name string, mode, uid, gid uint32, flags int) (Attr, Handle, error)
	Symlink(ctx context.Context, parent Ino, name, target string, uid, gid uint32) (Attr, error)
	Readlink(ctx context.Context, ino Ino) (string, error)
	Link(ctx context.Context, ino, newParent Ino, newName string) (Attr, error)
	Unlink(ctx context.Context, parent Ino, name string) error
	Rmdir(ctx context.Context, parent Ino, name string) error
	Rename(ctx context.Context, parent Ino, name string, newParent Ino, newName string, flags uint32) error
	Open(ctx context.Context, ino Ino, flags int) (Handle, error)
	Release(ctx context.Context, ino Ino, h Handle) error
	Read(ctx context.Context, ino Ino, h Handle, p []byte, off int64) (int, error)
	Write(ctx context.Context, ino Ino, h Handle, p []byte, off int64) (int, error)
	Fsync(ctx context.Context, ino Ino, h Handle, dataOnly bool) error
	Fallocate(ctx context.Context, ino Ino, h Handle, mode uint32, off, length int64) error
	ReadDir(ctx context.Context, ino Ino, cookie uint64, plus bool, fn func(DirEntry) bool) error
	StatFS(ctx context.Context) (StatFS, error)
	GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error)
	SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags uint32) error
	ListXattr(ctx context.Context, ino Ino) ([]string, error)
	RemoveXattr(ctx context.Context, ino Ino, name string) error
}
