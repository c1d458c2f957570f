package fusefs

import (
	"context"

	capfs "github.com/capsule-storage/capsule/fs"
)

// The node layer speaks the file client's types (package fs, imported
// as capfs); these aliases keep its signatures short.
type (
	Ino      = capfs.Ino
	Attr     = capfs.Attr
	SetAttr  = capfs.SetAttr
	DirEntry = capfs.DirEntry
	StatFS   = capfs.StatFS
	Handle   = capfs.Handle
)

// RootIno is the root directory's inode number.
const RootIno = capfs.RootIno

// Rename flags, as Linux renameat2.
const (
	RenameNoReplace = capfs.RenameNoReplace
	RenameExchange  = capfs.RenameExchange
)

// Client is the file client's low-level inode API that the node layer
// calls: the method set of *capfs.Client the contract between the two
// packages fixes.
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

// *capfs.Client is the Client every real mount uses.
var _ Client = (*capfs.Client)(nil)

// openAttrer is a Client that returns the attributes with an open in one
// round trip (*capfs.Client.OpenAttr); Open uses it when it is there.
type openAttrer interface {
	OpenAttr(ctx context.Context, ino Ino, flags int) (Handle, Attr, error)
}

var _ openAttrer = (*capfs.Client)(nil)

// bufferer is a Client with registered buffers that reads land in
// without a copy (*capfs.Client.Buffer); Read uses them when it is there.
type bufferer interface {
	Buffer() *capfs.Buffer
}

var _ bufferer = (*capfs.Client)(nil)

// copier is a Client that copies file ranges inside the target
// (*capfs.Client.CopyFileRange).
type copier interface {
	CopyFileRange(ctx context.Context, src Ino, srcOff int64, dst Ino, dstOff int64, length int64) (int64, error)
}

var _ copier = (*capfs.Client)(nil)
