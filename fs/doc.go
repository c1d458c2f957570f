// Package fs is capsule's file client: a Go library that talks to the
// file namespace of a capsule target over NVMe-oF (iwarp://, shm://),
// with file operations as vendor-specific I/O commands (the protocol is
// specified in fs/internal/proto/protocol.go).
//
//	import capfs "github.com/capsule-storage/capsule/fs"
//	c, err := capfs.Dial(ctx, "iwarp://127.0.0.1:4420")
//
// It has two layers. The inode API (Lookup, GetAttr, SetAttr, Mknod,
// Mkdir, Create, Symlink, Readlink, Link, Unlink, Rmdir, Rename, Open,
// Release, Read, Write, Fsync, Fallocate, ReadDir, StatFS and the xattr
// methods) is one round trip per call, except Read, Write and ReadDir,
// which split what one command cannot carry; the FUSE mount (fs/fusefs) is
// built on it.
//
// Every error is, or wraps, a syscall.Errno: the server's errno from the
// completion's DW0, ENOSYS and EINVAL for commands the target refuses, EIO
// for transport failures.
//
// # Reconnect
//
// The client rides on the host library's reconnect (nvmeof/host): while
// the target is away, operations wait up to WithReconnectTimeout (the
// host's controller-loss timeout) and then fail with EIO; none waits
// longer. An operation in flight at a loss is sent again after the
// reconnect only if it is idempotent (lookups, reads, writes at an
// offset, attribute changes, listings); the others (create, unlink,
// rename, append ...) fail with EIO, since they may or may not have run.
// After the host library gives up, the next operation dials again.
//
// # Libraries
//
// The standard library and capsule's nvmeof/host.
package fs
