// Package server is the target side of capsule's file service: one file
// namespace, served to hosts as vendor-specific NVMe-oF I/O commands
// (the protocol is fs/internal/proto/protocol.go). A Server implements
// target.VendorHandler; cmd/target adds it to the subsystem as a
// namespace with no blocks.
//
//	srv, err := server.Open("data/fs-files.db", store, server.Options{FSID: 1})
//	sub.AddNamespace(target.NamespaceConfig{NSID: 2, Vendor: srv})
//
// # The model
//
// Metadata lives in a bbolt database (go.etcd.io/bbolt: one file, a B+tree,
// atomic fsynced transactions, which is exactly what a namespace of
// inodes needs; the chunkstore chose it for its metadata for the same
// reasons), in these buckets:
//
//	inodes      ino → inode record (mode, nlink, uid, gid, rdev, size,
//	            times; directories: parent and next cookie; files: chunk
//	            count and the inline flag), with a CRC32C
//	dirents     parent ino + name → child ino, cookie, file type: LOOKUP
//	            is one B+tree get, keyed by name
//	dircookies  parent ino + cookie → name: READDIR seeks to the cookie
//	            and walks forward, so every page costs one seek plus its
//	            entries, however large the directory (100 000 entries
//	            list in pages of 64 KiB; TestHundredThousandEntries)
//	data        ino → inline file data, or a symlink's target
//	xattrs      ino + name → value
//	orphans     ino → (): unlinked while open
//	super       format version, next inode number, FSID
//
// Inode numbers come from a counter and are never reused (the root is 1),
// so a generation is not needed (Attr.Gen is 1). Cookies come from a
// per-directory counter: "." is 1, ".." 2, entries 3 and up in the order
// they were made; a rename makes a new cookie in the target directory.
//
// File data lives in the chunkstore (erasure-coded): block b of inode i
// (BlockSize bytes, 256 KiB by default: one full stripe of the default
// 4+2 geometry with 64 KiB units) is the chunk whose ID spells a magic,
// the FSID, i and b. A block never written has no chunk (sparse files:
// holes cost nothing, offsets go far beyond 4 GiB); PutChunk replaces a
// block atomically.
//
// # Small files
//
// A file of at most InlineMax bytes (4 KiB by default) keeps its data in
// the data bucket, written in the same transaction as its size: a small
// file costs no chunk (a chunk takes whole stripe slots on every device,
// which for a 100-byte file would be hundreds of KiB) and is read and
// written in one B+tree access. When a file grows past InlineMax its
// data moves into block 0, the store is synced, and only then does the
// inode say "chunked". It stays chunked until it is deleted.
//
// # Consistency and crashes
//
// Every metadata operation is one bbolt transaction: it happens wholly
// or not at all, also across a crash. File data follows the chunkstore's
// rule: a PutChunk is durable at the next Sync (FSYNC, Flush of the
// namespace, or the server's own sync every SyncInterval, 5 s by default,
// while data changes: it bounds what a crash loses, as ext4's commit
// interval does, and lets the store reuse the slots of replaced chunks),
// and after a crash each chunk is as of its last Sync. The
// promises, and why they hold:
//
//   - No file points at chunks that were never written. Files do not
//     point at chunks at all: a block's chunk is found by its ID, and a
//     missing chunk reads as zeros, the same as a hole. The one place
//     where metadata would otherwise depend on unsynced data — an inline
//     file moving into chunks — syncs the store before it commits. Bytes
//     of a chunk past the end of its file (left by a shrink, or by a crash
//     between a data write and its size commit) never show: reads stop at
//     the size, and a file that grows first cuts the block that held its
//     old end back to it.
//   - No space leaks without end. Chunks are deleted after the commit that
//     drops them (unlink of the last link, truncate, a punched hole); a
//     crash in between leaves chunks that no inode owns. Open runs the
//     orphan sweep: inodes in the orphans bucket (unlinked while open:
//     handles do not survive a restart) are deleted, then every chunk of
//     this FSID whose inode is gone, not a chunked regular file, or whose
//     block lies wholly past the end of the file is deleted, every inode's
//     chunk count is recounted, and the store is synced. So space is
//     freed at the latest when the server next opens.
//   - A completed FSYNC (or Flush) makes the file's data and every
//     committed metadata change durable.
//
// TestCrash checks these on chunkstore devices that lose power at random
// points (only synced data survives): after reopening, every chunk
// belongs to a file and lies inside it, chunk counts and the space in use
// match, every file reads whole, and files synced and not touched since
// read exactly as synced.
//
// # Open files
//
// OPEN and CREATE return a handle; the server counts handles per inode.
// An unlink that takes the last link of an open file keeps the inode (in
// the orphans bucket) until its last RELEASE, so it stays readable and
// writable through the handles; READ and WRITE address the inode, not the
// handle. Handles live in memory: a restart of the target ends them, and
// the sweep deletes what they kept.
//
// # Errors
//
// Each operation returns a Linux errno in the completion's DW0 (0 for
// success); malformed commands are refused in PrepareVendor with an NVMe
// status before any data moves. ENOSPC comes from the Capacity option
// (checked before data is written) or from the chunkstore. The server
// checks no permissions: it keeps mode, uid and gid, and the edge (the
// FUSE mount with default_permissions, or the caller) decides access,
// so EACCES comes from there; EXDEV cannot happen inside one namespace
// and comes from the kernel across mounts.
//
// # Concurrency
//
// The Server's methods are safe for concurrent use. Writing
// transactions run on one goroutine, the committer, several to a commit
// (commit.go); bbolt lets readers run beside them. Data operations
// of one inode (write, truncate, punch, deleting its chunks) hold its data
// lock (a striped RWMutex) exclusively and reads hold it shared; the data
// lock is taken before any transaction and never two at once. Lock
// order: a data lock, then txMu (held around each writing transaction,
// and by OPEN around its check and the registration of its handle, which
// so need no commit of their own), then hmu (the handle table, a leaf).
//
// # Sharp edges
//
//   - atime changes only by SETATTR (like noatime): a read writes nothing.
//   - A small write into a chunked file rewrites its whole block (read,
//     merge, PutChunk): scattered small writes cost a block each.
//   - The metadata database is one file on one disk, not erasure-coded
//     like the data: losing it loses the namespace.
//   - Capacity is a configured figure, not the devices' free space; the
//     chunkstore's ENOSPC still applies.
//   - Every metadata change is in a bbolt commit, fsynced: on a disk, one
//     client's creates, unlinks and renames one at a time run at the
//     device's fsync rate (hundreds per second); on tmpfs or a fast SSD
//     far quicker. Changes that arrive together share a commit (group
//     commit, commit.go): the four parallel commands of a 1 MiB write, or
//     many clients, pay one fsync. Reads of metadata (LOOKUP, GETATTR,
//     READDIR) take no lock but bbolt's.
//
// # Libraries
//
// go.etcd.io/bbolt for the metadata, capsule's chunkstore for the data,
// nvmeof/target for the VendorHandler seam.
package server
