// Package ecvolume puts an NVMe namespace on an erasure-coded volume: it
// adapts a chunkstore.Volume to the block-device interface of package
// blockdev, and the store's errors to NVMe statuses.
//
//	s, _ := chunkstore.OpenOrCreateDirs(chunkstore.DeviceDirs("data", chunkstore.DefaultGeometry))
//	dev, _ := ecvolume.OpenOrCreate(s, "vol0", 1<<30) // thin: takes no space yet
//	sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev})
//	...
//	t.Close() // syncs the namespace: the store's Sync
//	s.Close() // the caller owns the store; Device has no Close
//
// # The mapping
//
// Device is a blockdev.Device with every optional interface but
// NonBlocking (reads and writes may wait on disks, so the target runs
// them on its workers):
//
//	ReadAt        Volume.ReadAt (zeros where never written)
//	WriteAt       Volume.WriteAt (cached: durable after Sync)
//	WriteAtFUA    Volume.WriteAtFlags with chunkstore.FUA: durable on return
//	WriteZeroes   Volume.WriteZeroes (whole stripes are unmapped)
//	Discard       Volume.Discard (reads zeros afterwards, frees whole stripes)
//	Sync          Volume.Sync, which is the store's Sync: one flush covers
//	              every volume of the store
//	Size          Volume.Size
//
// The target sends Write with FUA (and every write while the host has
// turned the volatile write cache off) to WriteAtFUA, and Flush to Sync.
//
// # Errors
//
// Every error but io.EOF is an *Error: the store's error (errors.Is finds
// chunkstore's sentinels), the operation and range, and the NVMe status
// the namespace answers with, which errors.As finds as an nvmeof.Status
// (the target looks for it first):
//
//	store error                          NVMe status
//	IsUnavailable (more than M devices   Unrecovered Read Error (02h/81h) on
//	  or shards lost), IsCorruption        reads, Write Fault (02h/80h) on
//	                                       writes and flushes; DNR
//	IsNoSpace (a device is full)         Capacity Exceeded (00h/81h), DNR
//	ErrOutOfRange                        LBA Out of Range (00h/80h), DNR;
//	                                       also blockdev.ErrOutOfRange
//	ErrClosed (the store was closed)     Namespace Not Ready (00h/82h); also
//	                                       blockdev.ErrClosed
//	anything else                        Unrecovered Read Error or Write Fault
//
// So a read the store cannot reconstruct fails with a media error: the
// store never returns wrong bytes, and neither does the namespace. DNR is
// set where retrying the same command cannot help before an operator acts.
//
// # Volumes and sizes
//
// OpenOrCreate opens the named volume or creates it thin. A volume's size
// is fixed at creation: asking for another size is ErrSizeMismatch, and
// nothing changes, so a typo in a size never hides or truncates data.
//
// # Concurrency
//
// Every method is safe for concurrent use, as Volume's are (see package
// chunkstore: each stripe is read and written under its own lock).
//
// # Where it lives
//
// The package is a blockdev.Device implementation, as Memory and File
// are, so it sits under nvmeof/blockdev beside them, where a program that
// builds its own target (nvmeof/target) on a chunkstore finds it. It is a
// subpackage, not part of blockdev, so that blockdev itself does not
// depend on chunkstore: a program with memory or file namespaces only
// does not link the store.
//
// # Sharp edges
//
//   - Sync of one namespace flushes every volume of the store, and a FUA
//     write is a full store commit (chunkstore's doc has the cost).
//   - The store outlives the Device: whoever opened the store closes it,
//     after the target that uses the Device has closed.
package ecvolume
