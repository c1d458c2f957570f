// Package blockdev is the block-device interface NVMe namespaces sit on,
// and its first two implementations: Memory, a sparse in-memory device,
// and File, a regular file or a block device node.
//
//	dev, _ := blockdev.NewMemory(1 << 30)        // 1 GiB, no memory used yet
//	f, _ := blockdev.OpenFile("disk.img", 1<<30) // created sparse if missing
//	defer f.Close()
//
// # The model
//
// A Device is a fixed-size array of bytes: io.ReaderAt and io.WriterAt
// with the standard library's contracts, Sync (make every completed write
// durable: NVMe Flush), and Size. Optional capabilities are separate small
// interfaces, found with a type assertion, each with a documented
// fallback when a device lacks it:
//
//	WriteZeroer  WriteZeroes(off, n): the range reads as zeros afterwards.
//	             Without it, callers write zeros (the Zero helper does).
//	Discarder    Discard(off, n): the range is no longer needed and reads
//	             as zeros afterwards. ErrNotSupported means the device
//	             cannot; callers fall back to WriteZeroes (the Deallocate
//	             helper does), so that "deallocated blocks read as zeros"
//	             holds for every device.
//	FUAWriter    WriteAtFUA(p, off): WriteAt that is durable when it
//	             returns (NVMe Force Unit Access). Without it, callers
//	             WriteAt and then Sync (the WriteFUA helper does).
//	NonBlocking  NonBlocking() true: reads and writes are served from
//	             memory and never wait on I/O, so a caller may run them on
//	             a latency-critical goroutine instead of a worker.
//
// Subpackage ecvolume puts a volume of the erasure-coded store (package
// chunkstore) behind the same interface, so a namespace can sit on any of
// them.
//
// # Contracts
//
//   - ReadAt follows io.ReaderAt: it reads len(p) bytes or returns an
//     error saying why not; at or past Size it returns io.EOF, and a read
//     that crosses Size returns the bytes before it and io.EOF. Bytes never
//     written read as zeros.
//   - WriteAt follows io.WriterAt: it writes len(p) bytes or returns an
//     error. A device does not grow: a write that crosses Size writes
//     nothing and returns ErrOutOfRange. Neither call keeps p.
//   - WriteZeroes, Discard and WriteAtFUA check their range the same way
//     (ErrOutOfRange, nothing changed) and negative offsets or lengths give
//     ErrOutOfRange too.
//   - Sync makes every write, WriteZeroes and Discard that returned before
//     it was called durable. Memory has nothing to make durable.
//
// # Concurrency
//
// Every method of Memory and File is safe to call from many goroutines at
// once. As io.WriterAt says, calls on ranges that do not overlap do not
// affect each other; calls on overlapping ranges at the same time leave
// the overlap holding bytes of either (for Memory a concurrent write and
// read of the same bytes is a data race in the Go memory model, harmless
// to the process but visible to the race detector, the same as for a
// shared []byte). An NVMe host that wants ordering between two commands
// waits for the first to complete, and then it holds.
//
// # Memory
//
// Memory keeps 64 KiB chunks in a two-level table of atomic pointers (a
// directory of 1024-chunk leaves), so a device larger than RAM costs only
// the chunks written: a chunk is allocated on the first write that puts a
// nonzero byte in it (a write of zeros to an unallocated chunk allocates
// nothing), and Discard or WriteZeroes of a whole chunk frees it. Reading
// an unallocated chunk fills zeros. Allocated reports the bytes in use.
// Chunk allocation races are settled by compare-and-swap; no lock is taken
// on any path.
//
// Sharp edge: a Discard of a whole chunk that races with a write into the
// same chunk may lose the write (the writer copied into the chunk being
// freed). The two overlap, so the result is one of the outcomes a host
// allowed by issuing them together: the write is ordered before the
// discard.
//
// # File
//
// File serves a regular file or a block device through pread/pwrite
// (os.File.ReadAt and WriteAt), so concurrent calls run in parallel in the
// kernel. OpenFile creates a missing regular file sparse at the size asked
// for and grows a smaller one; a block device's size is the device's
// (BLKGETSIZE64), and a size asked for must fit in it. Sync is
// fdatasync(2). On Linux, WriteZeroes is fallocate(2) with
// FALLOC_FL_ZERO_RANGE, else FALLOC_FL_PUNCH_HOLE, else plain writes of
// zeros; Discard is FALLOC_FL_PUNCH_HOLE (block devices: the kernel zeroes
// or unmaps the range, reads return zeros either way), and
// ErrNotSupported where the file system has no hole punching. WriteAtFUA
// is pwritev2(2) with RWF_DSYNC. Which fallocate modes work is learnt on
// first use and remembered. Elsewhere WriteZeroes writes zeros, Discard is
// not supported, and WriteAtFUA is WriteAt plus Sync.
//
// # Libraries
//
// The standard library and golang.org/x/sys/unix (fallocate, fdatasync,
// pwritev2, the BLKGETSIZE64 ioctl).
package blockdev
