// Package fusefs mounts capsule's file service with FUSE. It is the node
// layer on hanwen/go-fuse/v2's fs API: every inode the kernel knows is a
// node that embeds fs.Inode and turns each kernel request into one call
// of the file client's low-level inode API (Client, which
// *capfs.Client implements), passing the client's errno through as is.
//
// # Identity
//
// A node's StableAttr is {file type, capsule Ino, Gen}: inode numbers in
// stat are the target's, stable across mounts and remounts, and a reused
// inode number with a new generation is a new node. The root is RootIno.
// With the writeback cache, Gen also carries the incarnation of a file
// that another client changed ("Writes"), so one inode number can have
// several nodes, each a kernel inode of its own. The mount keeps an
// incarnation and a count of its own writes per inode number only while
// the kernel holds a node of it (OnForget drops them), so they do not
// grow with every file a long-lived mount has seen.
//
// # Access
//
// The target decides access: every request goes to it with its caller's
// credentials — the uid and gid of the kernel's request header and the
// supplementary groups of /proc/PID/status, kept a second per process
// (cred.go; the file is read again then, and a caller whose groups are
// the same keeps its credential) — and the target checks them as Linux
// would (fs/server's doc.go, "Permissions"). Each caller's credential
// and the context its client calls run under are made once and shared
// by its requests, so a request allocates nothing for them. The mount
// is made without default_permissions, so the kernel checks nothing
// itself, and answers access(2) and chdir(2) by asking the target
// (ACCESS). I/O through an open file
// (read, write, fsync, fallocate, ftruncate) runs with the credentials
// that opened it, as a file descriptor keeps its opener's: the target
// lets that credential do what its handle was opened for.
//
// A mount made by root serves every user (allow_other, whatever
// Options.AllowOther says); a non-root mount does with AllowOther
// (--allow-other, which needs user_allow_other in /etc/fuse.conf). On
// such a mount the kernel's cache of names would let a user walk through
// a directory it may not search without asking (the kernel does not
// check search permission on cached names without default_permissions),
// so names in a directory that not everyone may search (some x bit
// clear, as the mount last saw its mode) are not cached: each walk
// through them is a LOOKUP the target checks as the walker. A chmod by
// another client is seen within AttrTimeout/EntryTimeout.
// Options.DefaultPermissions adds the kernel's own checks (from cached
// attributes, with the kernel's knowledge of the groups) to the
// target's, and then names are cached everywhere.
//
// The mount is nodev: device nodes can be made (by root), listed and
// stat'ed with their type and device number, but not opened.
//
// # Caching and close-to-open consistency
//
// Attributes and names are cached by the kernel for Options.AttrTimeout
// and Options.EntryTimeout; failed lookups are not cached, so a file
// another client creates is visible at once. The mount itself caches one
// answer for AttrTimeout: that a file has no security.capability, which
// the kernel asks before a file's first write and every chown (the
// target drops capabilities on write, truncate and chown itself, so the
// answer only spares the round trip; node.go, capsXattr). File data is cached in the
// kernel's page cache and is consistent with close-to-open semantics
// across clients: every open first fetches the attributes from the
// target, and the kernel keeps its cached pages (FOPEN_KEEP_CACHE) only
// when size, mtime and ctime equal those of the previous open through
// this mount and this mount has not written the file since; otherwise
// the pages and the cached attributes are dropped. Every close (FLUSH)
// of a file this mount wrote comes after its data is at the target
// (below), so the next open anywhere sees it.
// Directories are listed from the target on every opendir (no
// FOPEN_CACHE_DIR).
//
// # Writes
//
// With Options.WritebackCache (bin/mount's default) the kernel's
// writeback cache is on: writes land in the page cache and the kernel
// sends the dirty pages in WRITEs of up to MaxWrite when it writes them
// back, which it does before the FLUSH of every close, at fsync and at
// unmount. An 8 KiB write(2) then costs what a page cache copy does, not
// a round trip to the target. The kernel also keeps a regular file's
// size, mtime and ctime itself and ignores the target's for an inode it
// has, so a file another client grew or shrank would keep its old size
// here: an open that finds the target's size or mtime different from
// those the kernel's inode agrees with answers ESTALE after retiring the
// node, and the kernel's retry opens a new inode made from the target's
// attributes; a lookup that finds them different leads the name to such
// a new inode (writeback.go). Files already open keep the old inode. The
// kernel's ctime of a file another client only chmod'ed or renamed stays
// old (its mode and owner come from the target). The
// kernel reads a page before a write that covers part of it, through
// the writing file: through a file opened O_WRONLY those reads run with
// the mount's own credentials, since the writer may have no right to
// read. It sends mtime as a value even for "now" (utimensat with
// UTIME_NOW, truncate, the times of a write): an mtime equal to the
// ctime beside it is sent to the target as "now", which whoever may
// write may set, and any other as an explicit time, which needs the
// owner. A killed mount loses the dirty pages the kernel held, as a
// crash loses a page cache.
//
// Without the writeback cache every write(2) is one WRITE, answered once
// the target has the data. Options.WriteBehind (bin/mount
// --writeback-cache=false --write-behind) then buffers small writes in
// the mount, as an NFS client does (writebehind.go): a WRITE
// under MaxWrite through a file opened without O_DIRECT, O_SYNC or
// O_DSYNC is answered once the mount holds the bytes. Each inode has one
// buffer of contiguous bytes from one open file, sent in one WRITE of up
// to MaxWrite when it is full, when a write does not continue it, 100 ms
// after its first write, and before anything whose answer depends on the
// data: an open, read, stat, setattr (truncate, chmod, utimes),
// fallocate, xattr call, fsync, close and release. Buffers of an inode reach the
// target in the order they were written, one in flight at a time, and a
// mount holds at most 64 MiB of them (then writes go through). A write
// the target refuses is reported by the next write, fsync or close of
// the file, as a write-back error is on a local file system; what a
// killed mount held (at most 100 ms of writes) is lost, as a page cache
// is in a crash.
//
// An inode call (stat, open, readlink) that the target answers with
// ENOENT means another client removed the inode while this kernel still
// cached its name; it returns ESTALE, which makes the kernel look the
// path up again and retry once, instead of failing. When the node comes
// straight from a lookup (no call on it has succeeded since), that retry
// has happened already and the answer is ENOENT. An open of an inode
// that only other open files keep (no links left), and a stat of one
// not open in this mount, count as ENOENT too, so a name another client
// renamed a new file over leads to the new file; the price is that
// reopening an unlinked file through /proc/PID/fd fails with ESTALE.
//
// # Open files, unlink and handles
//
// Open and create get a Handle from the target, and reads and writes go
// through it; the target keeps an unlinked file while handles to it are
// open, so unlinking an open file works as POSIX says. Release gives the
// handle back. Directories are opened on the target too, so an open
// directory that is removed stays valid for fstat. O_TMPFILE is a create
// under a unique hidden name and an unlink at once (the target has no
// such operation). st_blocks is the target's, so holes show.
//
// # Locks
//
// fcntl byte-range locks and flock locks are kept by the mount, per
// inode, owned by the open file (as F_OFD_SETLK and flock locks are),
// and go when the file is released. The target has no lock operations:
// locks exclude each other within one mount, not across mounts.
//
// # Directories
//
// Listing is READDIRPLUS in pages of dirPage entries that resume at the
// cookie of the entry before, which is also the directory offset the
// kernel sees, so telldir/seekdir and listings of any size work, and the
// attributes in each page answer the kernel's per-entry lookups.
//
// # Copies and fallocate
//
// copy_file_range(2) between files of the mount is one COPYRANGE: the
// target copies the bytes itself, so they cross neither the network nor
// the mount. fallocate passes its mode to the target, which does what
// Linux does for each; the kernel's FUSE itself refuses collapse and
// insert ranges (EOPNOTSUPP) before they reach a mount. fsync of a
// directory is an FSYNC of it on the target.
//
// # Errors, interrupts and a lost target
//
// Every reply's errno is the syscall.Errno the client returns (errors
// that carry none become EIO). Names over 255 bytes get ENAMETOOLONG
// before they reach the target. Client calls run without the kernel's
// interrupt (a signal to the calling thread must not turn a done rename
// into EINTR); they are bounded by the client's reconnect timeout
// instead, after which a lost target gives EIO, so no request hangs.
//
// # Requests
//
// READ and WRITE requests are up to MaxWrite (1 MiB). Splicing READ
// replies is off by default: a 1 MiB reply and its header do not fit the
// kernel's 1 MiB pipe, so go-fuse would copy anyway after a failed try.
// A READ of 64 KiB or more lands in one of the client's registered
// buffers (capsule/fs, Client.Buffer), which the target writes straight
// into, and its reply is written to the kernel from there (a vectored
// read result, released once written): that saves the copy into
// go-fuse's buffer, about 90 µs of mount CPU for 1 MiB. Smaller reads,
// and reads while all 16 buffers are out, copy as before.
// The read-ahead window (Options.MaxReadAhead; beyond FUSE's 128 KiB it
// is set on the mount's bdi in sysfs) and the number of request readers
// are options, with defaults chosen by benchmark (BENCHMARKS.md, R6).
//
// # Library
//
// github.com/hanwen/go-fuse/v2 (fs and fuse packages), mounted through
// fusermount3 (or directly, as root) with nodev, allow_other for root
// or when asked, and without default_permissions unless asked: EACCES
// and EPERM come from the target.
//
// # Concurrency
//
// go-fuse runs requests in parallel; a node's own state (the data
// version seen at the last open, its count of open files) is behind its
// mutex, the incarnations and write counts behind the mount's, and an
// open directory is only used by one request at a time.
package fusefs
