// Package server is the target side of capsule's file service: one file
// namespace, served to hosts as vendor-specific NVMe-oF I/O commands
// (the protocol is fs/internal/proto/protocol.go). A Server implements
// target.VendorHandler; cmd/target adds it to the subsystem as a
// namespace with no blocks.
//
//	srv, err := server.Open(store, server.Options{FSID: 1})
//	sub.AddNamespace(target.NamespaceConfig{NSID: 2, Vendor: srv})
//
// # The model
//
// Metadata is worked on in an in-memory database of ordered buckets with
// atomic transactions (memdb.go, on github.com/tidwall/btree's
// copy-on-write B-trees: readers see a snapshot and never wait) and kept
// in the chunkstore (see "Where the metadata lives"), in these buckets:
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
// holes cost nothing, offsets go far beyond 4 GiB). A write goes to the
// chunk by extent (chunkstore.WriteChunkAt): only the bytes written, in
// the store's log, so an 8 KiB append costs 8 KiB plus parity, not a
// block. A block wholly past a file's old end drops any chunk a crash
// left there first, and a file that grows first cuts the block holding
// its old end back to it, so bytes never synced never show inside it.
//
// # Small files
//
// A file of at most InlineMax bytes (4 KiB by default) keeps its data in
// the data bucket, written in the same transaction as its size: a small
// file costs no chunk (a chunk takes whole stripe slots on every device,
// which for a 100-byte file would be hundreds of KiB) and is read and
// written in one B+tree access (and read from the inode cache once
// cached). When a file grows past InlineMax its
// data moves into block 0, the store is synced, and only then does the
// inode say "chunked". It stays chunked until it is deleted.
//
// # Where the metadata lives
//
// The namespace is as safe as the data: its durable copy is the
// chunkstore's records (chunkstore.PutRecords, space "fs/" and the FSID
// in hex), which the store keeps in its own metadata database,
// replicated on every device and changed only at checkpoints. Losing
// any M devices loses no file and no name (chunkstore's
// TestRecordsSurviveLostDevices; integration's TestFUSELoseDeviceDirs
// deletes M device directories of a stopped target and reads every file
// back). Nothing lives outside the device directories: the database
// the operations use is a working copy in memory, filled from the
// records at every Open (0.05 s for 20 000 files on in-memory devices,
// some 1.2 million records a second: BenchmarkOpenNamespace). A record
// is one bucket key: its bucket's tag, then the key, with the same
// value.
//
// The choice over the alternatives: a bbolt file per device for the
// namespace alone (M+1 or K+M copies) would cost as many fsyncs per sync
// as the store's checkpoint already pays, in a second set of files, and
// would need its own rule for which copy wins after a crash; putting the
// metadata in chunks of the store would make every small change a
// read-modify-write of a chunk. The records ride in the checkpoint the
// store writes anyway, and a checkpoint holds a namespace change and the
// chunk records it depends on in one atomic step.
//
// A namespace of the first format (a bbolt file of its own,
// DATA/fs-NAME.db) is imported into the records when the store has none
// for its FSID (Options.Import), and renamed to fs-NAME.db.imported.
//
// # Durability: POSIX's rules, not an fsync per change
//
// Every metadata operation is one transaction of the working database:
// it happens wholly or not at all. Changes become durable at a sync:
// FSYNC of a file or directory (the mount forwards fsync and fsyncdir),
// Flush of the namespace, Close (a stopping target; the mount sends a
// FSYNC when it unmounts), or the server's own sync every SyncInterval
// (5 s by default, as ext4's commit interval) while anything changed. A
// sync stages (records.go) every key changed since the last one with its
// current value, read between two writing transactions, in one
// PutRecords call, and syncs the store, whose checkpoint takes the call
// whole. File data follows the chunkstore's rule: a write is durable at
// the next Sync, and after a crash each chunk is as of its last Sync.
// The promises, and why they hold:
//
//   - After a crash the namespace is one that existed at or after the
//     last sync that completed, never a mix: each stage is a consistent
//     cut, a checkpoint takes every stage before it whole, and a later
//     stage only adds the keys that changed since.
//   - No file points at chunks that were never written. Files do not
//     point at chunks at all: a block's chunk is found by its ID, and a
//     missing chunk reads as zeros, the same as a hole. An inline file
//     moving into chunks stages its new record after the chunk's record
//     is in the store, so no checkpoint has the one without the other.
//     Bytes of a chunk past the end of its file (left by a shrink, or by
//     a crash between a data write and its size change) never show:
//     reads stop at the size, and a file that grows first cuts the block
//     that held its old end back to it.
//   - No file names a deleted chunk. Chunks are deleted only after the
//     change that drops them is staged: a checkpoint that takes a
//     deletion takes that change too.
//   - No space leaks without end. Chunks are deleted after the change
//     that drops them (unlink of the last link, truncate, a punched hole);
//     a crash in between leaves chunks that no inode owns. Open runs the
//     orphan sweep: inodes in the orphans bucket (unlinked while open)
//     are deleted when the reclaim grace ends (below), then every chunk of
//     this FSID whose inode is gone, not a chunked regular file, or whose
//     block lies wholly past the end of the file is deleted, every inode's
//     chunk count is recounted, and the store is synced. So space is
//     freed at the latest when the server next opens.
//   - A completed FSYNC (or Flush) makes the file's data and every
//     committed metadata change durable.
//
// TestCrash checks these on chunkstore devices that lose power at random
// points (only synced data and metadata survive), with background
// checkpoints between the operations' steps: after reopening, the names
// and sizes are a state from the last sync on, every chunk belongs to a
// file and lies inside it, chunk counts and the space in use match,
// every file reads whole, and files synced and not written since read
// exactly as synced (also one whose unlink the crash undid).
//
// # The inode cache
//
// READ, GETATTR, FSYNC, ACCESS and the checks that WRITE, OPEN, SETATTR
// and FALLOCATE make before they change anything take their inode from
// an in-memory cache of committed inode records (icache.go), with an
// inline file's data, so that a READ or GETATTR of a cached inode opens
// no transaction and allocates nothing in the server
// (BenchmarkServerRead, TestReadAllocatesNothing).
// Changes inside transactions read the database, as before. The cache
// is coherent with every change: each inode write or deletion in a
// transaction (putInode, deleteInodeRecords, putData, deleteData) drops
// the entry and, by a commit handler, puts the committed record in
// (or drops it again, for inline files and deleted inodes) after the
// commit and before the change's caller hears of it; a rolled-back
// transaction leaves the entry to be read again. A miss fills the entry
// only if no change touched its shard meanwhile (a generation per
// shard). So an operation that starts after a change returned sees it,
// as with a transaction of its own (the working database's commit is
// what the cache follows; durability is the sync's). The cache holds at most
// Options.CacheBytes (DefaultCacheBytes, 32 MiB: about 200 000 inodes of
// chunked files, each entry costs some 160 bytes plus an inline file's
// data), in 64 shards that forget entries at random when full; inline
// data over a quarter of a shard's share is not cached. It lives and
// dies with the Server: a restart starts it empty. CacheBytes -1 turns
// it off. Permissions are decided from the cached record exactly as
// from the database's, and crashes are unchanged: the cache holds only
// committed records and is never written back.
//
// # Open files
//
// OPEN and CREATE return a handle; the server counts handles per inode.
// An unlink that takes the last link of an open file keeps the inode (in
// the orphans bucket) until its last RELEASE, so it stays readable and
// writable through the handles; READ and WRITE address the inode, not the
// handle. Handles live in memory, so a restart of the target ends them;
// a client that held them reclaims them by number (OPEN naming the old
// handle, protocol.go), and the open registers that number again with
// its grant, truncating nothing and checking no permission (the handle
// was checked when first opened; the client is trusted to say so as it
// is trusted to name its caller). Handle numbers carry a random 32-bit
// epoch drawn at each Open, so an earlier run's numbers never collide
// with this run's, and a reclaim of this run's number that is not that
// open is EBADF. The files unlinked while open when the last run ended
// stay for Options.ReclaimGrace (90 s by default, longer than a client's
// default reconnect timeout); those no reclaim holds then are deleted.
//
// # Errors
//
// Each operation returns a Linux errno in the completion's DW0 (0 for
// success); malformed commands are refused in PrepareVendor with an NVMe
// status before any data moves. ENOSPC comes from the Capacity option,
// when set (checked before data is written), or from the chunkstore.
// EACCES and EPERM come from the permission checks below; ENOKEY means
// the command's credential is not registered (nothing ran). EXDEV cannot
// happen inside one namespace and comes from the kernel across mounts.
//
// # Permissions
//
// Every command runs for a caller: the credential (uid, gid,
// supplementary groups) its MPTR names, registered by CRED (protocol.go,
// "Credentials"; the table keeps up to 4096 and forgets one at random
// past that, which costs its host one more CRED). Credential 0 is root.
// The server decides access as Linux does for a local file system
// without ACLs (perm.go), so every client — the FUSE mount without
// default_permissions, another mount, the Go client — is held to it:
//
//   - Class: the owner's bits for the owner, the group's for a member of
//     the file's group (primary or supplementary), else the others'.
//     Root (uid 0, CAP_DAC_OVERRIDE) passes read and write always,
//     search of a directory always, exec of a file only when some x bit
//     is set.
//   - LOOKUP needs search (x) on the directory, and so does every
//     operation on a name in it; a name that does not exist in a
//     directory the caller may not search is EACCES, not ENOENT.
//   - OPEN needs read for O_RDONLY, write for O_WRONLY or O_TRUNC, both
//     for O_RDWR, and exec instead of read for the kernel's open of a
//     program (__FMODE_EXEC). CREATE of an existing name is such an open;
//     a CREATE that makes the file opens it whatever its mode (creat of a
//     0444 file returns a writable handle, as POSIX says).
//   - READ, WRITE, FALLOCATE, a truncating SETATTR and READDIR pass by the
//     mode, or by an open handle of the same credential with that access:
//     POSIX checks at open, and the handle stands for the open file
//     (the mount sends a file's I/O with the credential that opened it).
//     A restart ends the grants with the handles; a reclaim brings a
//     handle's grant back.
//   - CREATE, MKDIR, MKNOD, SYMLINK and LINK need write and search on the
//     directory (after EEXIST, as Linux orders them). UNLINK, RMDIR and
//     RENAME need them on each directory involved; in a sticky directory
//     (S_ISVTX) an entry goes (unlinked, renamed away or replaced) only
//     for root, the directory's owner or the entry's owner (EPERM
//     otherwise). A directory that moves to another parent needs write
//     on itself (its ".." changes).
//   - New inodes are owned by the caller (the uid and gid in CDW12-13
//     count only from root). In a set-group-ID directory they get its
//     group, a new directory its set-group-ID bit, and a group-executable
//     file loses the bit if the caller is not in that group. A
//     set-group-ID bit chmod'ed by a caller outside the file's group is
//     dropped.
//   - SETATTR (setattr_prepare, chown_ok): chmod by the owner or root;
//     chown to another uid by root only (even to the same uid by the
//     owner only); chgrp by root, or by the owner to one of its groups;
//     explicit times by the owner or root (EPERM), times set to now also
//     by whoever may write (EACCES otherwise). The set-user-ID bit, and
//     the set-group-ID bit of a group-executable file, go on any chown,
//     on a write or truncate by anyone but root, and may be cleared by a
//     mode change from anyone who may write the file (the kernel sends
//     that before a write when the mount does not handle it itself; an
//     explicit mode in the same SETATTR as a chown wins).
//   - MKNOD of block and character devices is root's (CAP_MKNOD); the
//     device number is kept as the host sends it (Linux's encoding) and
//     returned in Attr.Rdev. The server never opens a device: its
//     READ and WRITE answer EINVAL, and the mount is nodev.
//   - Extended attributes: user.* needs read to get and write to set or
//     remove, and exists only on regular files and directories (and on
//     a sticky directory only its owner sets them); trusted.* is root's
//     (others get EPERM setting and ENODATA reading, and LISTXATTR hides
//     them); security.* and others are not checked.
//   - POSIX ACLs are refused: system.posix_acl_access and
//     system.posix_acl_default get EOPNOTSUPP (and are hidden from
//     LISTXATTR, should an older database hold some). Implementing them
//     means evaluating ACL entries in every check above, keeping the
//     access ACL's owner, group-or-mask and other entries equal to the
//     mode on both chmod and setxattr, and inheriting default ACLs at
//     every create — a second permission model for little gain, since
//     tools fall back cleanly: cp -a, told EOPNOTSUPP, chmods instead,
//     so modes survive a copy (when the ACL was stored as a plain
//     xattr, cp -a left every file 0600; TestPOSIXCopyKeepsModes).
//   - GETATTR, READLINK, FSYNC, RELEASE and STATFS need nothing beyond
//     what found the inode. ACCESS answers access(2) with these rules.
//
// Timestamps follow POSIX: a create sets all three and the parent's mtime
// and ctime; WRITE sets mtime and ctime; a truncate sets both, even to
// the same size; chmod, chown, LINK, RENAME (of the inode moved, and of
// one it replaces), UNLINK of one of several links and xattr changes set
// ctime; SETATTR's times are set as given, to the server's clock for
// "now", and left alone where not named (UTIME_OMIT); atime changes only
// by SETATTR.
//
// # Space
//
// STATFS reports the store's real space after redundancy (statfs.go):
// K shards of data for every shard the fullest device's file system can
// still take, with devices that share a file system sharing its space;
// inodes free are the smaller of the inode numbers left and the room of
// the metadata database's file system. Capacity, when set, bounds both
// what STATFS reports and what writes may fill.
//
// FALLOCATE follows Linux: mode 0 grows the file, KEEP_SIZE checks the
// room only (the store is thin, so nothing is reserved), PUNCH_HOLE
// frees the chunks it covers whole and writes zeros over the rest, and
// ZERO_RANGE does the same, growing the file unless KEEP_SIZE. COLLAPSE
// and INSERT take whole 4 KiB blocks (EINVAL otherwise, and for a
// collapse that reaches the end or an insert at or past it) and move
// the bytes after the range down over it or up past a new hole: the
// server copies them itself, a MiB at a time under the file's data
// lock, so they never cross the network. (The kernel's FUSE refuses
// COLLAPSE and INSERT before they reach a mount; the Go client can send
// them.) COPYRANGE, copy_file_range(2), copies between files (or within
// one, not overlapping) the same way, as its caller, with read access to
// the source and write access to the destination, up to the source's
// end.
//
// # Concurrency
//
// The Server's methods are safe for concurrent use. Writing
// transactions run one at a time under txMu: on the caller's goroutine
// when none is running or waiting, else several to a commit on the
// committer goroutine (commit.go); readers run beside them on a
// snapshot. Data operations
// of one inode (write, truncate, punch, deleting its chunks) hold its data
// lock (a striped RWMutex) exclusively and reads hold it shared; the data
// lock is taken before any transaction and never two at once. Lock
// order: a data lock, then txMu (held around each writing transaction,
// and by OPEN around its check and the registration of its handle, which
// so need no commit of their own), then hmu (the handle table and its
// grants, a leaf). The credential table's lock and the inode cache's
// shard locks are leaves of their own (the cache's are taken inside
// transactions and commit handlers, and never held around anything).
//
// # Sharp edges
//
//   - atime changes only by SETATTR (like noatime): a read writes nothing.
//   - A write not aligned to the store's 4 KiB sectors reads and merges
//     its first and last sectors in the store (WriteChunkAt).
//   - The working database holds the whole namespace in memory, inline
//     files' data included: some 300 bytes per file plus its inline
//     bytes (a million small files of 2 KiB take about 2.3 GB). Open
//     reads it all from the records: millions of files open in seconds.
//   - A sync with metadata waiting is a checkpoint of the store (its
//     replicas on every device are written): an fsync costs a few
//     milliseconds on a disk whatever it covers.
//   - STATFS's space is the devices' file systems' as statfs(2) sees
//     them: other files on those disks use it too, and stripes the
//     cleaner has not reclaimed yet count as used. The store does not
//     reserve space, so the free figure is an estimate and ENOSPC comes
//     from the chunkstore when a disk fills.
//   - Access is decided from the credential the host sends, as NFS's
//     AUTH_SYS does: a host that lies about its caller is believed. The
//     target's network access control (host NQNs) is what limits hosts.
//   - Metadata changes are commits of the working database, which
//     fsyncs nothing; changes that arrive together share a commit (group
//     commit, commit.go): the four parallel commands of a 1 MiB write, or
//     many clients, pay one. Reads of metadata (LOOKUP, READDIR)
//     take no lock; READ and GETATTR of a cached inode take
//     only a shard's read lock (and READ its data lock).
//
// # Libraries
//
// github.com/tidwall/btree for the working database (copy-on-write
// trees, so a transaction's copies cost a few node copies), capsule's
// chunkstore for the data and the metadata's durable copy,
// go.etcd.io/bbolt to read a first-format metadata file, nvmeof/target
// for the VendorHandler seam.
package server
