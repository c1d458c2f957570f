// Package proto is the wire protocol of capsule's file service: file
// operations as NVMe-oF I/O commands with vendor-specific opcodes on a
// file namespace of the subsystem. This file is the protocol's
// specification; wire.go holds the encoders and decoders of the records
// below.
//
// # Commands
//
// Every file operation is one I/O command on an I/O queue, NSID the file
// namespace. The opcodes are vendor specific (80h to FFh); bits 1:0 give
// the data direction exactly as NVMe defines it, so the target core and
// every transport binding move the data without knowing the operation:
//
//	00b  no data                          SGL1: none (a zero keyed SGL)
//	01b  host to controller ("in")        SGL1: the request bytes, in the
//	                                      capsule (Data Block, offset) or in
//	                                      a host buffer (Keyed SGL: RDMA Read)
//	10b  controller to host ("out")       SGL1: the host's reply buffer
//	                                      (Keyed SGL: RDMA Write; TCP: C2HData)
//	11b  bidirectional ("in+out")         the request bytes are the capsule's
//	                                      in-capsule data, at offset 0 and not
//	                                      described by SGL1; SGL1 is the reply
//	                                      buffer, as for 10b
//
// Opcodes are 80h | n<<2 | direction:
//
//	op   name          dir     CDW10-11  CDW12-13     CDW14      CDW15       request bytes          reply
//	83h  LOOKUP        in+out  parent    -            -          -           name                   Attr
//	86h  GETATTR       out     ino       -            -          -           -                      Attr
//	8Bh  SETATTR       in+out  ino       -            -          -           SetAttr                Attr
//	8Fh  CREATE        in+out  parent    uid | gid<<32 mode      open flags  name                   Attr, handle u64
//	93h  MKDIR         in+out  parent    uid | gid<<32 mode      -           name                   Attr
//	97h  MKNOD         in+out  parent    uid | gid<<32 mode      rdev        name                   Attr
//	9Bh  SYMLINK       in+out  parent    uid | gid<<32 -         name length name, target           Attr
//	9Eh  READLINK      out     ino       -            -          -           -                      target
//	A3h  LINK          in+out  ino       new parent   -          -           new name               Attr
//	A5h  UNLINK        in      parent    -            -          -           name                   -
//	A9h  RMDIR         in      parent    -            -          -           name                   -
//	ADh  RENAME        in      parent    new parent   flags      name length name, new name         -
//	B2h  OPEN          out     ino       reclaim      open flags -           -                      handle u64, Attr
//	B4h  RELEASE       none    ino       handle       -          -           -                      -
//	BAh  READ          out     ino       offset       length     -           -                      data
//	BDh  WRITE         in      ino       offset       flags      -           data                   -
//	C0h  FSYNC         none    ino       -            flags      -           -                      -
//	C6h  READDIR       out     ino       cookie       -          -           -                      Dirents
//	CAh  READDIRPLUS   out     ino       cookie       -          -           -                      Dirents with Attr
//	CEh  STATFS        out     -         -            -          -           -                      StatFS
//	D0h  FALLOCATE     none    ino       offset       mode       -           -                      -      (CDW2-3: length)
//	D7h  GETXATTR      in+out  ino       -            -          -           name                   value
//	D9h  SETXATTR      in      ino       -            flags      name length name, value            -
//	DEh  LISTXATTR     out     ino       -            -          -           -                      names, each NUL-terminated
//	E1h  REMOVEXATTR   in      ino       -            -          -           name                   -
//	E5h  CRED          in      cred ID   -            -          -           Cred                   -
//	E8h  ACCESS        none    ino       -            mask       -           -                      -
//	EDh  COPYRANGE     in      ino       offset       -          -           CopyRange (the source) -      (DW1: bytes copied)
//
// 64-bit fields span two dwords, low dword first (CDW10 is the low half
// of the inode number). Names are raw bytes with their length implied by
// the request bytes; where two strings travel together, CDW15 bits 15:0
// give the length of the first and the second is the rest. Open flags are
// Linux's (O_ACCMODE, O_CREAT 40h, O_EXCL 80h, O_TRUNC 200h, O_APPEND
// 400h); WRITE flags bit 0 is append (write at the end of the file, which
// the server finds); FSYNC flags bit 0 is datasync; RENAME flags are
// renameat2's (NOREPLACE 1, EXCHANGE 2); SETXATTR flags are setxattr's
// (CREATE 1, REPLACE 2); FALLOCATE mode is fallocate's (0, KEEP_SIZE 1,
// PUNCH_HOLE|KEEP_SIZE 3, COLLAPSE_RANGE 8, ZERO_RANGE 10h with or
// without KEEP_SIZE, INSERT_RANGE 20h; others are EOPNOTSUPP). Fields
// marked "-" are reserved: zero. The handle of
// RELEASE is the one CREATE or OPEN returned. ACCESS masks are
// access(2)'s (R 4, W 2, X 1; 0 asks whether the inode exists).
//
// OPEN's CDW12-13, when not zero, reclaims a handle after a target
// restart: the handle the host held on the inode, which the open
// registers again by that number (with the credential and flags of the
// command, no O_TRUNC and no permission check: it was checked when it
// was first opened) and returns. A server draws the top 32 bits of its
// handles at random at each start, so a handle of an earlier run never
// collides with one of its own; a reclaim naming one of its own that is
// not open on that inode with that credential and access gets EBADF, and
// one sent again for the same open returns it unchanged. A restarted
// server keeps the files unlinked while open for a grace (90 s by
// default) so that reclaims find them.
//
// CDW2-3 (outside FALLOCATE) carry a request ID for the operations that
// running twice would not leave as running once: CREATE, MKDIR, MKNOD,
// SYMLINK, LINK, UNLINK, RMDIR, RENAME, OPEN, RELEASE, WRITE with append,
// SETXATTR and REMOVEXATTR; zero for none, and zero for every other operation. The
// server remembers the outcome of the last 4096 IDs it ran; a command
// whose ID it remembers is not run again but answered with the first
// run's errno and reply (or, while the first still runs, once it is
// done). So a host may send such a command again after a lost connection
// and get the answer of the one run. A client draws the top 32 bits of
// its IDs at random and counts the low 32.
//
// # Credentials
//
// Every command but CRED runs for a caller, named by the credential ID
// in MPTR (CDW4-5; the file namespace has no metadata, so the field
// means nothing else here, and the core passes it through). The ID is
// the Cred record's own hash (Cred.ID): FNV-1a of its encoding, and 0
// for uid 0 and gid 0 without supplementary groups, which is never
// registered. CRED registers a credential: CDW10-11 its ID, the request
// bytes its Cred record (MPTR zero); an ID that is not the record's
// hash gets EINVAL. The server keeps the credentials it was told (up to
// a bound, at least 1024) and answers a command whose ID it does not
// hold with ENOKEY before running anything (and before its request ID
// is remembered), so the host registers the credential and sends the
// command again. A target restart forgets every credential, which
// costs each one such round trip.
//
//	Cred (16 bytes + 4 per group)
//	  0  uid      u32       4  gid    u32       8  group count u32 (≤ 1024)
//	 12  reserved u32      16  supplementary gids, u32 each
//
// The server decides access from the caller as Linux does (fs/server's
// doc.go has the rules): owner, group (the primary and supplementary
// groups), other; uid 0 passes every check but exec of a file with no
// x bit. READ, WRITE, truncating SETATTR, FALLOCATE and READDIR pass
// either by the mode or by an open handle of the same credential with
// that access (a file created 0444 is writable through its handle, as
// POSIX says). The owner of a new inode is the caller; only a root
// caller's CDW12-13 name another.
//
// # Completions and errors
//
// The NVMe status says whether the command was well formed. A malformed
// command is refused with an NVMe status (DNR set) and does nothing:
//
//	Invalid Command Opcode       an opcode this table does not have, or any
//	                             of them on a namespace that is not a file
//	                             namespace
//	Invalid Field in Command     a reserved field not zero; request bytes
//	                             missing, too long or of the wrong size for
//	                             the operation (a name length past the
//	                             request, a SetAttr record of the wrong
//	                             size); a reply buffer smaller than the
//	                             fixed part of the reply; a READ length
//	                             larger than the reply buffer
//	(the core's own checks)      SGL, transfer size, namespace, sequence
//
// A well-formed command completes with status Success; CQE DW0 then holds
// the operation's outcome as a Linux errno (0: it succeeded; ENOENT 2,
// EEXIST 17, ENOTEMPTY 39 ...), and DW1 the number of reply bytes the
// server wrote (READ: the bytes read, short only at the end of the file;
// WRITE: the bytes written). Name errors are errnos: a name containing
// '/' or NUL gets EINVAL, a name over 255 bytes ENAMETOOLONG, an empty
// name ENOENT; "." and ".." are answered as Linux answers them: LOOKUP
// finds the directory and its parent (the root's parent is the root),
// making an entry of either name gets EEXIST, UNLINK EISDIR, RMDIR of "."
// EINVAL and of ".." ENOTEMPTY, RENAME of or onto either EBUSY. A reply that
// does not fit the reply buffer gets ERANGE (GETXATTR, LISTXATTR,
// READLINK); READDIR stops at a full buffer instead.
//
// # Records
//
// All integers little endian. Times are nanoseconds since the Unix epoch,
// signed.
//
//	Attr (80 bytes)
//	  0  ino      u64       8  gen    u64      16  size    u64
//	 24  blocks   u64 (512-byte blocks allocated)
//	 32  atime    i64      40  mtime  i64      48  ctime   i64
//	 56  mode     u32 (S_IFMT type | permission bits)
//	 60  nlink    u32      64  uid    u32      68  gid     u32
//	 72  rdev     u32      76  reserved u32 (zero)
//
//	SetAttr (40 bytes)
//	  0  valid    u32: 1 mode, 2 uid, 4 gid, 8 size, 10h atime, 20h mtime,
//	              40h atime now, 80h mtime now; other bits reserved
//	  4  mode     u32 (permission bits only: 07777)
//	  8  uid      u32      12  gid    u32
//	 16  size     u64
//	 24  atime    i64      32  mtime  i64
//
//	StatFS (56 bytes)
//	  0  blocks   u64       8  bfree  u64      16  bavail  u64
//	 24  files    u64      32  ffree  u64
//	 40  bsize    u32      44  frsize u32      48  namelen u32
//	 52  reserved u32
//
//	Dirents: an 8-byte header, then entries, each padded to 8 bytes
//	  header   0  count u32   4  flags u32 (bit 0: end of directory)
//	  entry    0  ino u64     8  cookie u64   16  mode u32 (S_IFMT bits)
//	          20  name length u16   22  reserved u16
//	          24  name (padded with zeros to a multiple of 8)
//	          READDIRPLUS: then the entry's Attr (80 bytes)
//
// READDIR starts after the entry whose cookie is given (0: from the
// start). "." has cookie 1 and ".." cookie 2; other entries have cookies
// above 2 that stay valid while the entry exists, in the order the
// directory lists them, so a listing resumed at any cookie goes on where
// it left off, skips nothing that was there all along, and shows nothing
// twice. The server fills the reply buffer with as many whole entries as
// fit and sets the end flag when none is left.
//
// # Sizes
//
// Request bytes of 11b commands are limited by the in-capsule data size
// (IOCCSZ); names by 255 bytes, symlink targets by 4095, xattr names by
// 255 and xattr values by 64 KiB (E2BIG beyond). READ and WRITE move at
// most the controller's transfer size (MDTS) per command; the client
// splits larger ones.
package proto
