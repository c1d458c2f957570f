package fs

import "time"

// Ino is an inode number. Inode numbers are never reused, so Gen is
// always 1; a client that caches (ino, gen) pairs stays correct if a
// later version starts reusing them.
type Ino uint64

// RootIno is the root directory's inode number.
const RootIno Ino = 1

// Attr is an inode's attributes. Mode holds the file type and the
// permission bits as in syscall.Stat_t.Mode (S_IFREG|0644 ...).
type Attr struct {
	Ino                 Ino
	Gen                 uint64 // generation: changes when an inode number is reused
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
	Mode     *uint32 // permission bits only
	Uid      *uint32
	Gid      *uint32
	Size     *uint64 // truncate or extend
	Atime    *time.Time
	Mtime    *time.Time
	AtimeNow bool // set atime to the server's clock (Atime is ignored)
	MtimeNow bool // set mtime to the server's clock (Mtime is ignored)
}

// DirEntry is one READDIR(PLUS) entry. Attr is filled by the plus form.
type DirEntry struct {
	Name   string
	Ino    Ino
	Mode   uint32 // file type bits (S_IFMT part)
	Cookie uint64 // resume point: pass it back to continue after this entry
	Attr   Attr
}

// StatFS is the file system's usage, as statfs(2) reports it.
type StatFS struct {
	Blocks, Bfree, Bavail, Files, Ffree uint64
	Bsize, Frsize, NameLen              uint32
}

// Handle is an open-file handle the server tracks, so that an unlinked
// file stays readable and writable while it is open.
type Handle uint64

// Rename flags, as Linux renameat2.
const (
	RenameNoReplace = 1
	RenameExchange  = 2
)

// Xattr flags, as setxattr(2).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// Cred is the caller an operation runs for: the server decides access
// from it (fs/server's doc.go has the rules). A client runs operations
// for its own process's credentials unless the context names others
// (WithCred).
type Cred struct {
	Uid, Gid uint32
	Groups   []uint32 // supplementary groups; more than 1024 are cut
}
