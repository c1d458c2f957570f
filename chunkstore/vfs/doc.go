// Package vfs is the file system seam under the chunk store: the few
// operations the store performs on a device directory, behind an interface
// with three implementations.
//
//   - OSFS (NewOS) is a directory of the host's file system. This is what
//     the target runs on.
//   - MemFS (NewMem) is in memory and can crash. Every file keeps what was
//     written and what was last synced; every directory keeps its entries
//     and the entries as of its last SyncDir. Crash returns what a machine
//     finds after a power loss: synced bytes, reachable through synced
//     directory entries. A CrashClock shared by several MemFS crashes them
//     together after any chosen number of operations. Vanish makes a device
//     disappear (every later operation fails with ErrVanished).
//   - InjectFS (NewInjectFS) wraps any FS and fails chosen operations: by
//     kind (Op), by name pattern, after N matching operations, N times,
//     with any error (ErrInjected, syscall.ENOSPC, syscall.EIO), optionally
//     tearing a write in half. It also counts operations by kind.
//
// One FS is one device: the store gives each device directory its own FS,
// so a test can make a whole device vanish, crash, or fail.
//
// Files also read and write several buffers at one offset in one call
// (ReadAtv, WriteAtv: preadv/pwritev on the OS), which the store uses to
// write a shard's header region and payload, or a run of shard slots, at
// once. On MemFS such a call is one operation, atomic with respect to a
// crash; InjectFS counts it as one OpRead or OpWrite. A file may also be
// a RangeReader, reading buffers at several offsets in one call: a
// cluster's remote device (package devsvc) is, so that the store reads a
// shard's header and a range of its payload in one round trip; the OS
// and memory files are not (two preads cost little). The OS and memory
// files are NowaitReaders: they read only what is in memory, or answer
// ErrWouldBlock (preadv2 with RWF_NOWAIT), so that the store starts
// goroutines only for the reads that wait for a device.
//
// # Durability rules
//
// The rules are POSIX's, which every implementation follows and MemFS
// enforces: data written to a file is durable after File.Sync; a created,
// renamed or removed directory entry is durable after SyncDir of its
// directory. WriteFile does the full dance (temporary file, sync, rename,
// sync directory) for small records that must be replaced atomically.
//
// # Host files
//
// bbolt needs an *os.File it can map, which no in-memory FS can give.
// HostPath therefore names a host file for such libraries: OSFS returns the
// file's own path; MemFS returns a path in the host directory given with
// WithHostDir. Host files live beside a MemFS, so a simulated crash leaves
// them exactly as the host has them. That is faithful for a library whose
// commits are atomic and durable when they return (bbolt's are): after a
// real power loss, its file holds the last committed transaction, and so
// does the host file after a simulated one. The store probes the device
// through the FS (Stat) before each commit to a host file, so a crash or a
// vanished device stops the commit at the same point as it would on real
// hardware.
//
// # Concurrency
//
// All implementations are safe for concurrent use. ReadAt and WriteAt
// follow the io.ReaderAt and io.WriterAt contracts. MemFS serialises all
// operations of one FS under one mutex (it is a test tool, not fast);
// each operation is atomic with respect to Crash.
//
// # Sharp edges
//
//   - MemFS's Close never fails and is not counted by the clock, like
//     close(2) on a healthy descriptor.
//   - On OSFS, removing a device directory while files are open does not
//     make reads or writes fail (the host keeps the unlinked files); the
//     store notices through its Stat probes, which a Watcher (inotify on
//     the device directories, OSFS only) lets a flush skip while nothing
//     was removed or renamed there. MemFS.Vanish is the harsher model:
//     every operation fails at once.
//   - Host files of a MemFS are not removed by Vanish or Crash; the test
//     owns that directory.
package vfs
