// Package fs is capsule's Go file client: a library that talks to the
// file namespace of a capsule target over NVMe-oF (tcp://, iwarp://,
// shm://), each file operation one vendor-specific I/O command on the
// same queues as block I/O (the protocol is specified in
// fs/internal/proto/protocol.go; the target side is fs/server).
//
//	import capfs "github.com/capsule-storage/capsule/fs"
//	c, err := capfs.Dial(ctx, "iwarp://127.0.0.1:4420")
//	fsys := c.FS()
//	err = fsys.MkdirAll("notes", 0o755)
//	f, err := fsys.Create("notes/today.txt")
//	data, err := fsys.ReadFile("notes/today.txt")
//
// # Two layers
//
// The inode API on Client (Lookup, GetAttr, SetAttr, Mknod, Mkdir, Create,
// Symlink, Readlink, Link, Unlink, Rmdir, Rename, Open, OpenAttr, Access,
// Release, Read, Write, WriteAppend, Fsync, Fallocate, CopyFileRange,
// ReadDir, StatFS and the xattr methods) is one round trip per call,
// except Read, Write, CopyFileRange and ReadDir, which split what one
// command cannot carry (Read and Write in pieces of the controller's
// transfer size, sent in parallel; CopyFileRange, which the target does
// itself, in GiB; ReadDir in pages of 64 KiB). The FUSE mount
// (fs/fusefs) is built on it.
//
// The path view, FS (c.FS()), is io/fs.FS, fs.StatFS, fs.ReadDirFS,
// fs.ReadFileFS and fs.ReadLinkFS, plus Create, OpenFile, Mkdir, MkdirAll,
// Remove, RemoveAll, Rename, Symlink, Link and Truncate; its File has
// Read, ReadAt, Write, WriteAt, Seek, Sync, Truncate, ReadDir, Stat and
// Close. It passes testing/fstest.TestFS. It is a type of its own because
// the inode API already has the method names Open, Create, Mkdir ... that
// io/fs gives other signatures.
//
// # Credentials
//
// Every operation runs for a caller, whose uid, gid and supplementary
// groups the target checks access against (fs/server's doc.go,
// "Permissions"): the process's own, or those a context carries
// (WithCred; the FUSE mount passes each request's caller so). A
// credential travels as an ID in the command (protocol.go,
// "Credentials"); the first command with one the target does not hold
// is answered ENOKEY, and the client registers it (one more round trip,
// also after a target restart) and sends the command again. The uid and
// gid arguments of Mknod, Mkdir, Create and Symlink name the new
// inode's owner only when the caller is root.
//
// # Data movement
//
// Names, symlink targets and SetAttr records travel as in-capsule data;
// attributes, directory pages, xattr values and read data come back
// through a keyed SGL: the target RDMA-Writes them into the host
// library's registered buffers. Write data goes in the capsule when it
// fits the in-capsule size, else the target RDMA-Reads it (over NVMe/TCP
// the same bytes travel in C2HData PDUs, and in H2CData PDUs after an
// R2T). The host
// library copies between its registered buffers and the caller's memory,
// unless that memory is one of the client's own registered buffers
// (Buffer, buffers.go: up to 16 of 1 MiB, registered once with the
// controller): then the data moves straight into or out of it. A buffer
// stays valid until Release even across a reconnect or Close: the
// controller it belongs to is closed when the last one comes back.
//
// # Consistency
//
// The server is the authority and the client caches nothing across
// calls: what one client has written and closed, another sees at its next
// open (close-to-open), and metadata changes show at once. A File's Read
// keeps up to 64 KiB it fetched beyond what was asked, for small
// sequential reads; its own writes drop it.
//
// # Errors
//
// Every error the inode API returns is, or wraps, a syscall.Errno: the
// server's errno from the completion's DW0; ENOSYS and EINVAL when the
// target refuses a command (Invalid Command Opcode, Invalid Field); EINTR
// when ctx ends before the command is sent; EIO for transport failures.
// Names are checked before they are sent ('/' or NUL: EINVAL, over 255
// bytes: ENAMETOOLONG). The path view wraps them in *fs.PathError.
//
// # Reconnect
//
// The client rides on the host library's reconnect: while the target is
// away, operations wait, up to WithReconnectTimeout (the host's
// controller-loss timeout), and then fail with EIO; none waits longer.
// A command in flight at a loss is sent again after the reconnect: it is
// idempotent (lookups, reads, writes at an offset, attribute changes,
// listings), or it carries a request ID (create, mkdir, unlink, rename,
// link, open, release, append, setxattr with flags ...) and the server
// answers one it has run with that run's outcome instead of running it
// again (it remembers the last 4096; a target restart forgets them, so a
// create resent to a restarted target may find its own file: EEXIST).
// When the host library gives up on a connection early (a reconnect
// refused for good) an operation dials again and resends, within its
// reconnect timeout; after the timeout the next operation dials again. A target that stops
// answering without dropping the connection is noticed by the host
// library's keep-alive (within 3×KATO, 15 s by default) or I/O timeout
// (30 s); the reconnect timeout runs from then. Handles are kept by the
// target in memory, so a target restart ends them; the client remembers
// every handle it holds (inode, flags, credential) and, before the first
// command on a connection it had not used (the host library reconnected,
// or the client dialed again), reopens each by number (reclaim.go), so
// that its grant (a 0444 file created for writing) and a file unlinked
// while open live on. A handle whose reclaim fails is forgotten, and
// its Release returns nil.
//
// # Concurrency
//
// Client, FS and File methods are safe for concurrent use; a File's Read,
// Write and Seek share its offset and run one at a time.
//
// # Libraries
//
// The standard library, and capsule's nvmeof/host for the NVMe-oF host,
// which links in the RDMA providers it dials through (iwarp, shm, and
// verbs where built with -tags rdma); fault+ URLs need rdma/fault
// imported as well.
package fs
