// Package devsvc is the device service of a capsule cluster: a node
// exports each of its device directories as a namespace of its internal
// subsystem, and the node serving a volume reaches the volume's
// directory on that device as a vfs.FS (FS), so that the chunk store
// runs on remote devices as it does on local ones. Every operation is
// one NVMe-oF I/O command with a vendor-specific opcode, and file data
// moves as block data does: RDMA Write into the head's buffer on READ,
// RDMA Read from it on WRITE (C2HData and H2CData over NVMe/TCP).
//
//	srv := devsvc.NewServer(vfs.NewOS("/srv/capsule/d0"), log)     // on the device's node
//	sub.AddNamespace(target.NamespaceConfig{NSID: 1, Vendor: srv})
//
//	fsys, _ := devsvc.New(ctrl, 1, "vol0", devsvc.WithEpoch(head.Epoch)) // on the head
//	store, _ := chunkstore.Open([]vfs.FS{fsys, ...})
//
// # Commands
//
// Opcodes are 80h | n<<2 | direction, as in the file service (package
// fs's protocol): bits 1:0 give the data direction the way NVMe defines
// it, so the target core and every transport move the data without
// knowing the operation.
//
//	op   name      dir     CDW2-3  CDW10-11  CDW12-13  CDW14-15          request bytes        reply
//	83h  OPEN      in+out  epoch   -         flags     -                 name                 handle u64, Info
//	84h  CLOSE     none    -       handle    -         -                 -                    -
//	8Ah  READ      out     -       handle    offset    length (CDW14)    -                    data
//	8Dh  WRITE     in      epoch   handle    offset    -                 data                 -
//	90h  SYNC      none    epoch   handle    -         -                 -                    -
//	96h  FSTAT     out     -       handle    -         -                 -                    Info
//	98h  TRUNCATE  none    epoch   handle    size      -                 -                    -
//	9Ch  PUNCH     none    epoch   handle    offset    length            -                    -
//	A1h  RENAME    in      epoch   -         -         first name length old name, new name   -
//	A5h  REMOVE    in      epoch   -         -         -                 name                 -
//	A9h  MKDIRALL  in      epoch   -         -         -                 name                 -
//	ADh  SYNCDIR   in      epoch   -         -         -                 name                 -
//	B3h  STAT      in+out  -       -         -         -                 name                 Info
//	B7h  LIST      in+out  -       -         -         -                 name                 names, each NUL-terminated
//	BBh  READRANGES in+out -       handle    -         -                 ranges               their data, back to back
//
// READRANGES' request is 16 bytes per range (offset u64, length u32,
// four reserved zero bytes; at most MaxRanges of them): a chunk store
// reads a shard's header and a range of its data in one round trip
// (vfs.RangeReader), where READ takes two. A range cut short by the end
// of the file ends the reply. The client also gathers the buffers of a
// WriteAtv or ReadAtv that fit one command (a shard's header and data)
// into one WRITE or READ.
//
// 64-bit fields span two dwords, low dword first. Open flags are Linux's
// O_RDWR (2), O_CREAT (40h), O_EXCL (80h) and O_TRUNC (200h); no other
// bit may be set. Info (proto.go) is 32 bytes: size, mode (the type,
// S_IFDIR or S_IFREG, and the permission bits), the modification time in
// nanoseconds, and reserved zeros. The completion is always successful
// for a command the server accepted: DW0 is an errno (0 for success)
// and DW1 the bytes of reply data. A command of the wrong shape (an
// unknown flag, a reply buffer too small for its record, a name longer
// than MaxName) is refused with Invalid Field and DNR.
//
// Names are slash-separated paths relative to the device's directory,
// cleaned and checked as vfs does (no "..", nothing absolute); the first
// element is the volume, which may not start with a dot. So one device
// holds a directory per volume with a shard position there, and each
// volume's store sees only its own. OPEN, RENAME and REMOVE need a name
// inside a volume's directory, never the directory itself.
//
// # Fencing
//
// Every command that changes the device carries the epoch of the head
// that sent it (cluster.Head's Epoch; OPEN carries it too, and is fenced
// when it may create or truncate). The device keeps each volume's newest
// epoch in .fence/VOLUME (8 bytes, replaced atomically, made durable
// before the first command of the new epoch runs) and refuses an older
// one with EKEYREVOKED (ErrStaleEpoch at the client). Commands of the
// current epoch hold the volume's fence shared while they check and run;
// raising the epoch holds it exclusively, so once the new head's first
// change has returned no change of an older head is running or can
// start. A head that was replaced but still believes it serves (its
// lease check passed just before it paused) therefore cannot write to
// any device the new head has touched. Reads are not fenced.
//
// # Handles
//
// OPEN returns a handle whose top 32 bits the server draws at random
// when it starts. A handle of an earlier run gets ESTALE, and the client
// opens its file again (without O_CREAT, O_EXCL or O_TRUNC) and sends the
// command once more, so a device node's restart costs open files
// nothing. Commands on a handle hold its lock shared and CLOSE holds it
// exclusively, so a file is never closed under a command still using
// it, whatever order a client sends them in.
//
// Through the host library a command lost with its connection is sent
// again after the reconnect only if it is idempotent: RENAME, REMOVE and
// an OPEN that creates or truncates are not, and fail instead.
//
// # Sharp edges
//
//   - A remote FS has no host path (HostPath is ErrNotSupported), so a
//     chunk store keeps its metadata replica there as meta.log (package
//     chunkstore, "Metadata"), not in bbolt. TestStoreOnRemoteDevices
//     runs a 2+1 store on three device services.
//   - A device is no lock: two heads of one epoch could both write. The
//     cluster's head lease keeps them apart; the epoch keeps out a head
//     that lost it.
//   - ReadAtv and WriteAtv send one command per buffer (at most the
//     controller's MaxTransfer bytes each), in order.
//   - The device's own durability is the host's: SYNC is fdatasync of
//     the file on the device's node, SYNCDIR fsync of the directory.
//
// # Libraries
//
// The target and host of package nvmeof carry the commands; chunkstore/vfs
// does the file work on the device's node. NVMe-oF has no command set
// for files, so the commands are hand-written here, as the file
// service's are.
package devsvc
