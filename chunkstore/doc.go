// Package chunkstore is capsule's durable storage: an erasure-coded,
// checksummed, crash-safe store on K+M devices, holding thin-provisioned
// block volumes (what NVMe namespaces sit on) and chunks (the file
// service's data), written through a log of full stripes.
//
//	s, err := chunkstore.CreateDirs(chunkstore.DeviceDirs("data", chunkstore.DefaultGeometry))
//	v, err := s.CreateVolume("ns1", 1<<30)
//	v.WriteAt(p, off)            // in memory (the write cache or the log's) until Sync, or durable now with WriteAtFlags(p, off, FUA)
//	v.ReadAt(p, off)             // io.ReaderAt; zeros where never written
//	s.Sync()                     // NVMe Flush
//	s.Scrub(ctx, ScrubOptions{}) // verify every shard, repair what it can
//	s.Rebuild(ctx, pos, RebuildOptions{Progress: bar})
//	chunkstore.MigrateDirs(dirs, MigrateOptions{}) // a format v1 store to v2, in place
//
// # The model
//
// A store has K+M devices (Geometry, "4+2" by default; "1+0" is plain
// storage). Each device is a directory, reached through one vfs.FS, so
// tests can crash, break or remove a device at a real seam (package vfs).
//
// Data lives in stripes. A full stripe holds K × unit bytes of data (the
// stripe unit, 64 KiB by default) as K data shards, plus M parity shards
// computed by Reed-Solomon; shard i of a stripe sits on a different device
// from every other shard, so any K shards rebuild the stripe. A stripe
// occupies one physical slot: slot p is the p-th shard slot of every
// device's shard file, and shard i of slot p lives on device (p+i) mod
// (K+M), which spreads data and parity, reads and writes, over all
// devices. A stripe is written once and never changed (repairs rewrite a
// bad shard with what it held).
//
// Volumes and chunks are owners of logical 4 KiB sectors. Every write
// goes to the log: the store appends the written sectors, whatever their
// owner and address, to its one open stripe, and writes the stripe when it
// is full. A map per owner says where each logical sector lives (slot, and
// sector within the stripe's data). Unmapped sectors read as zeros and
// take no space (thin provisioning); Discard and WriteZeroes unmap. A
// chunk is a byte string of up to 256 MiB, stored as the sectors of an
// owner of its own; PutChunk writes a new owner and swaps the chunk's
// record to it atomically. The cleaner keeps the space that overwritten
// and unmapped sectors leave behind bounded (see below).
//
// # On-disk format (version 2)
//
// Each device directory holds four files:
//
//	identity  128-byte identity record, written once (temporary file,
//	          fsync, rename, fsync directory): device UUID, store UUID,
//	          format version, position, K, M, stripe unit, and the golden
//	          parity digest
//	shards    the shard slots: slot p at p × (4 KiB + unit); each slot is
//	          a 4 KiB header region followed by the payload, so payloads
//	          stay 4 KiB aligned
//	meta.db   a bbolt replica of the metadata (see below); meta.log on
//	          a device with no host path
//	journal   the flush journal: a ring of records of a few sectors each
//	          (journal.go has the offsets; see "Writes")
//
// A shard's header region holds its header (format.go has the offsets:
// the store, the key {0, slot} of a log stripe, the slot, the stripe's
// generation, the shard index, K, M, the payload length, one CRC32C per
// 4 KiB sector of the payload, then a CRC32C of itself) and, after it, the
// stripe's summary: the runs of (owner, first logical sector, count) that
// its data sectors hold, in order, with their own CRC32C. Every shard,
// data and parity, carries the same summary, so any one of them tells
// the cleaner and the roll-forward what the stripe holds. A read checks
// the header against the slot record it expects, so a stale shard (an
// older generation in a reused slot, a device that missed writes) or a
// misplaced one is treated as corrupt, never returned; and it checks the
// CRC32C of every sector it returns, so a 4 KiB read verifies 4 KiB.
//
// Every on-disk record (identity, shard header, summary, and the
// metadata records: superblock, log reservation, device record, volume
// record, slot record, map page, chunk record, journal record) has named
// offsets, an encoder and a decoder that validates lengths, reserved
// bytes and its CRC32C before use; each decoder has a fuzz target whose property is
// that whatever decodes re-encodes to the same bytes.
//
// Format version 1 (copy-on-write stripes, a block map entry per 256 KiB
// stripe) is not read: Open fails with ErrFormatV1, which names `target
// migrate`. Migrate converts such a store in place in seconds: a v1
// stripe is a valid v2 slot (its headers name it by its old key, stripe
// Index of Owner, and hold that owner's sectors from Index × K × unit / 4
// KiB on, which the cleaner derives in place of a summary), so only the
// metadata changes, one bbolt transaction per replica, then the identity
// records; a crash leaves a store that Migrate, run again, finishes.
//
// # Metadata: the embedded database, replicated on every device
//
// The superblock, the log reservation, the device table, the volume
// table, the slot records (what each slot holds: header key, generation,
// shard length, missing devices, data sectors), the map pages (an
// owner's map in pages of 64 sectors, each a list of runs), the chunk
// records and the callers' records (PutRecords: small key-value records
// in named spaces, where the file service keeps its namespace) live in
// go.etcd.io/bbolt, one replica per device, so losing any M devices
// loses no metadata. A device with no host file for bbolt to map (a
// remote device of a cluster volume, internal/devsvc; MemFS without a
// host directory), or every device of a store made WithMetaLog, keeps
// its replica as a log in its own files instead (meta.log, metalog.go):
// a snapshot frame, then one checksummed delta frame per transaction,
// appended and synced before the transaction returns; a torn last frame
// ends the log and is cut off; past four times the snapshot's size the
// log is written again as one snapshot (temporary file, sync, rename,
// directory sync). It holds the same buckets, read and written through
// the same code (metadb.go), and the whole replica is kept in memory as
// copy-on-write B-trees (tidwall/btree). Its crashes are real crashes of
// the device's files: a third of the crash test's seeds run on it. All replicas receive the same batch in
// the same checkpoint; the superblock's Seq counts checkpoints. Open
// reads every replica it can, adopts the one with the highest Seq
// (falling back to the next if it does not load), and rewrites any
// replica that is behind or unreadable from it in one transaction. bbolt
// checksums only its meta pages, so every value carries its own CRC32C,
// and a bbolt panic on a corrupt page is turned into a corruption error
// for that replica. bbolt maps its file and opens it itself, so it cannot
// go through vfs: each device's FS names a host path for it
// (vfs.FS.HostPath). Its file lock keeps a second process from opening a
// device (ErrDeviceBusy).
//
// The map is now the write-heavy part: a checkpoint writes every page
// that changed since the last one, to six replicas. internal/mapdbbench
// measures bbolt against cockroachdb/pebble for exactly that (its README
// has the tables): for map pages of scattered 4 KiB writes, pebble
// writes about half the bytes per changed page across six replicas
// (14.5 KB against 30 KB, compactions included), its checkpoints take
// 2.5× less time on average, its replicas are 1.7× smaller and a cold
// load is 15-20× faster; for sequentially written volumes bbolt with
// sorted keys is good enough (34-61 ms for an 8192-page checkpoint on six
// replicas). Pebble costs 8 goroutines and up to 81 files per replica,
// 100-220 MB of WAL each, and, untuned, six instances' compactions on two
// cores gave checkpoints a p99 of 3.8-7.8 s against bbolt's 1.8-3.0 s.
// The choice for now is bbolt: checkpoints come every 512 MiB of log, so
// a 1 GiB volume written at random rewrites its whole map about once per
// checkpoint, a few MB per replica (about 0.1 device bytes per host byte
// on six replicas; at 128 MiB between checkpoints it was 0.3); moving the map to pebble (a format
// change, with its memtables, WAL and compactions tuned for six
// instances sharing the cores) is the next step for large, randomly
// written volumes, where bbolt's per-page leaf copies dominate.
//
// Memory: the maps are held in memory. A page costs about 80 bytes plus
// 16 per run: sequentially written data needs one or two runs per page,
// about 100 bytes per 256 KiB or 400 MiB per TiB mapped; data written by
// scattered 4 KiB writes a run per sector, about 1.1 KiB per 256 KiB or
// 4.4 GiB per TiB. The slot table adds about 80 bytes per slot (320 MiB
// per TiB of 4+2 stripes with 64 KiB units). The cleaner moves scattered
// sectors into runs again, so the random figure is the worst case.
//
// # Writes: the log
//
// No write reads old data to update parity. A write appends its sectors
// to the open stripe under the log's lock (a memory copy; a sector whose
// latest version is in the open stripe is overwritten there instead), and
// points the owner's map at them; the summary gains a run, or extends the
// last one. A full stripe is sealed: encoded once (K data shards, M parity,
// a CRC32C per sector) and written while the next stripe fills, at most
// eight in flight. Two log writers take the sealed stripes in batches
// (every stripe sealed while a writer was busy), each run of consecutive
// slots in one pwritev per device (header regions and payloads). The
// buffered writes of one file serialise on its inode lock, and a 1 MiB
// host write seals four stripes: a writer per stripe made them queue
// there, a sleep and a wake per handoff, which cost a quarter of the CPU
// per byte through a target. Reads of sectors in a stripe still in memory
// are served from memory. A partly written sector is read, merged and
// appended whole, under a per-sector lock. Writes are durable after the
// next Sync (a volatile write cache, VWC=1), or at once with FUA.
//
// A flush (Sync, or a FUA write) makes durable every write that returned
// before it. The stripes sealed before it are waited for; what is left is
// the open stripe's data that no earlier flush covered (its dirty
// sectors), and there are two ways to make that durable.
//
// A few sectors (at most 8, in at most 8 runs) go to the journal: a
// record of them (a 4 KiB header naming the store, the device, its
// offset, a record sequence, the open stripe's generation and slot, the
// runs of (owner, first logical sector, count), and a CRC32C per sector
// and of itself, then the sectors) is written to the journal file of M+1
// devices (fewer when devices are out: one more than the devices the
// store can still lose), and the stripe stays open. It is written whole
// when it fills, like any other, and a record is dead once the stripe of
// its generation is durable (written and synced by a later flush or
// checkpoint). Each device's journal (the file "journal", 1 MiB by
// default, WithJournalSize) is a ring: records go at its head, wrap to
// its start, and never overwrite a live one; when there is no room (the
// same sectors flushed again and again) the flush seals instead. The
// file is written whole with zeros when it is made, so its blocks are
// allocated and its records share their disk's flush like slots with
// blocks do (below). Consecutive records start at devices M+1 apart, so
// they spread over all devices.
//
// More sectors seal the open stripe as a short stripe, RAID-Z style: the
// data present, d sectors, is laid out over the K data shards at
// ceil(d/K) sectors each (zero-padded), with M parity shards of that
// length: a complete stripe of its own width, checksummed and verified
// like a full one, whose slot's unused space the cleaner reclaims. Data
// shards that hold only padding (all of them past the first ceil(d /
// ceil(d/K))) are not written: the slot record's sector count says which
// they are (extent.Zero), reads, reconstruction, scrub and the
// roll-forward take them as zeros without reading, and a device that is
// out loses nothing of them.
//
// Why both, in figures, 4+2 with 64 KiB units: a full stripe writes 408
// KiB for 256 KiB (1.59×: 1.5 for parity, 1.06 for the header regions).
// A one-sector flush journals 3 × 8 KiB (6×) and leaves the sector in
// the open stripe, which later goes to disk at 1.59× with 63 other
// sectors: 7.6× in all, and no slot used. As a short stripe it would
// write the same 3 × 8 KiB, but take a whole slot for it, which the
// cleaner must then empty (its one live sector, at 1.59×) and a
// checkpoint free, and which needs blocks to share its disk's flush (a
// head prepared in a checkpoint, 48 KiB of zeros): under a FUA load that
// was a slot, a move and a share of a checkpoint per write. The journal
// costs (M+1)·(1+d) sectors against the short stripe's about (K+M)·(1 +
// ceil(d/K)), so past a few sectors the short stripe writes less: 8
// sectors journaled write 27 sectors, as a short stripe 18 (plus its
// slot). Keeping partial stripes as M+1 replicas until they can be
// aggregated into full stripes is what DAOS does; capsule does it only
// for the flushes where replicas are the cheaper, and only until the
// stripe they belong to is written, so the journal holds kilobytes, not
// a tier of the store.
//
// Group commit makes flushes rare under load: every Sync and FUA write
// that arrives while a flush is running is covered by the next one
// (flushLog: flushes are serialised, each takes the write epoch it
// covers, and a caller whose epoch an earlier flush covered returns
// without one), which makes every device written since the last flush
// durable once. Devices whose shard files share a disk and that wrote
// only over blocks already allocated share one cache flush: each is
// written back (sync_file_range) and one fdatasync flushes the disk
// (syncFiles, vfs.SharedFlush), so a 4 KiB FUA write on a store whose
// devices are directories of one disk costs one flush, as on a plain
// file, not one per record copy. Each device knows which slots its file
// has blocks for (SEEK_DATA at Open, then every slot written whole and
// synced); a write anywhere else has its own fdatasync, which allocates.
// So that flushes' short stripes find blocks, 32 short stripes sealed
// into slots without blocks kick a checkpoint, which keeps only as much
// of the reservation's head as the flushes may use while it runs, takes
// the rest afresh from the lowest free slots (those overwrites and the
// cleaner left, which have blocks), and writes zeros over the heads
// (header region and first sector) of the few of its new slots that
// still have none (prepareSlots: the log cannot use them before the
// checkpoint completes, and they hold nothing), eight for each cold
// flush that kicked it, up to 256; a trim leaves the lowest 256 free
// slots their blocks (Stats.SharedFlushes and DeviceSyncs show how
// flushes went). The flush writes the record or the stripe it seals
// itself, and starts every device's write-back before it waits for the
// first, so a lone FUA write waits for no other goroutine.
//
// A flush does not touch the metadata: the roll-forward at Open finds
// the stripes and journal records written since the last checkpoint
// (below). Unmaps, chunk record changes and device changes are not in
// the log; a Sync after one is a checkpoint.
//
// # The write cache
//
// With WithWriteCache, volumes put a write-back cache of host data before
// the log (wcache.go), as ZFS keeps a transaction group's dirty data in
// memory until it syncs: a write of whole 4 KiB pages (the NVMe LBA size
// may be 512 bytes; hosts write pages nearly always) is copied into it
// and returns. A page written again while cached is overwritten in
// memory, so it reaches the log once however often the host rewrote it:
// a file system's journal, a database's hot pages and a 1 MiB sequential
// overwrite of a volume smaller than the cache all write each block once
// per flush interval, where without the cache each write took log space
// and, before its slot could be reused, a checkpoint's sync. Pages leave
// for the log (destaging: the cached pages of one region, a full stripe
// of data, in address order, through the normal write path) at Sync and
// Close, when they have waited DefaultWriteCacheExpire (5 s, ZFS's
// transaction group interval), and, oldest regions first, while the
// cache is more than half full. A write that finds no room, a FUA write,
// a write not of whole pages, WriteZeroes and Discard go past the cache
// to the log; cached pages they overlap take their bytes too (so a later
// destage writes nothing older), and pages they cover whole leave the
// cache once they are done. A region is destaged and a write goes past
// the cache under the same region lock, never both at once, so an older
// cached page never reaches the log after a newer write past it.
//
// Nothing changes for durability: a write is durable after the next
// Sync, at once with FUA (which makes only itself durable, not the
// cache), and a crash loses at most what was written since the last Sync,
// each page old or new, as it may without the cache (VWC=1). Memory:
// at most the budget, in 2 MiB slabs mapped outside the Go heap with
// huge pages (the first touch of fresh memory faults once a page, and
// on a virtual machine each fault is an exit to the hypervisor), held
// while in use and for a minute after the cache last took a page; the target's default is a
// tenth of the machine's memory, at most 4 GiB (ZFS's default for a
// pool's dirty data). Reads look the range up in the cache (one map
// lookup a page, skipped while the cache is empty) and read the rest
// from the store; a page leaves the cache only after the store has it.
// Chunks do not use the cache: the file service batches its own writes.
//
// # Checkpoints
//
// A checkpoint (commitLocked) makes the metadata catch up with the log:
//
//  1. under the log's lock, seal the open stripe and take the snapshot
//     (and the write epoch it covers):
//     the changed map pages, the slot records of stripes written, the
//     slots released, the chunk records, and a new log reservation (the
//     next slots of the current one, up to half a reservation, which the
//     log may use until this checkpoint completes, then the lowest free
//     slots), with LogGen,
//     the last generation handed out;
//  2. wait until every stripe sealed so far is written, then fsync the
//     shard file of every writable device; a device whose fsync fails is
//     taken out and marked missing in every stripe written since the
//     last fsync;
//  3. for every writable device: probe it through its FS, then apply the
//     snapshot to its replica in one bbolt transaction (Seq+1);
//  4. free the slots released before step 1, once no read that could
//     still be on them is running, and let the log use the new
//     reservation.
//
// The background committer checkpoints when half the reservation is used
// (every 512 MiB of stripes by default: a reservation covers 1 GiB, at
// most 4096 slots, which bounds the roll-forward's examination), when
// WithAutoCommit released slots (default 4096) wait to be freed, when an
// idle pass asks for a trimming checkpoint (below), and every 5 s while an unmap or a chunk record waits;
// a writer that finds four times WithAutoCommit waiting checkpoints
// itself. Volume creation and deletion, scrub's repairs and rebuild's
// progress are checkpoints too.
//
// # The cleaner
//
// Overwritten and unmapped sectors leave dead space in their slots; a
// slot with nothing live left is released at once and freed by the next
// checkpoint. The cleaner (one goroutine from Open to Close) keeps the
// rest bounded: when the slots in use hold more than (1 + f) × the live
// data plus 32 slots (f is WithOverProvision, default 1), it picks
// victims by cost and benefit, as in LFS: (1 - u) × age / (1 + u), where u
// is the slot's live fraction and age counts the generations written
// since it, so mostly dead slots go first and, among equally dead ones,
// old, cold ones, whose remaining data is unlikely to die soon on its
// own. It reads a victim's summary, checks each sector it names against
// the map, reads the live ones (reconstructing if it must) and appends
// them to the log, each only if the map still points at the victim (a
// write in between wins), which releases the victim. Writers wait for it
// when the slots in use exceed (1 + 1.5f) × the live data, so a full
// store slows down instead of growing without bound; the cleaner's own
// appends never wait for that, so it cannot deadlock. Space is for
// writes: once none has come for a second, the cleaner waits (unless the
// slots in use are at the writers' limit), so that a read load keeps the
// cores, and the idle pass takes the rest once all I/O stops. Under uniformly
// random overwrites the victims' live fraction u follows from f, and the
// cleaner moves u/(1 - u) bytes per host byte, each at the stripe's 1.59×:
// with f = 0.5, u is about 0.5 and a store whose cleaner keeps up writes
// about 3.2 device bytes per host byte (measured, checkpoints included);
// with f = 1, u is about 0.3, for about 2.2-2.4. The default is 1: a busy
// store's slots hold up to twice its live data, which the idle pass
// (below) gives back; a smaller f saves space under load and costs
// writes.
//
// Over-provisioning is what a busy store needs; a store at rest does not.
// Once no caller has read or written for 3 s and the cleaner has had
// nothing to do meanwhile, it makes one idle pass (WithIdleCompaction),
// as F2FS's background cleaning does: the same cleaning, down to 1.1 ×
// the live data, stopping at the first I/O. Then a trimming checkpoint
// frees the victims, keeps only a few reserved slots (the next checkpoint
// reserves as usual), and gives the blocks of every free slot back to
// the file system (punchFree: fallocate PUNCH_HOLE through vfs.Puncher),
// so that the shard files of a store at rest hold about 1.1 × its live
// stripes. Writes after the idle time fill punched slots, which costs the
// file system allocations and the first flushes their own fdatasyncs
// (the trim prepares the few slots it reserves). The idle pass's moves
// are counted apart (Stats.IdleBytes) from the busy cleaner's.
//
// # Crash consistency
//
// The promises: a block reads either what it held at the last completed
// Sync (or FUA write to it), or something written after it; a completed
// FUA write or Sync is durable; and every stripe's data and parity agree.
// The argument, for a crash at any point:
//
//   - A checkpoint's map pages point only at stripes that were written
//     and fsynced before any replica changed (step 2 precedes step 3),
//     and whose slot records are in the same checkpoint.
//   - A slot named by a checkpoint that could be adopted (its slot
//     records and its reservation) is not written before a later
//     checkpoint that no longer names it has completed on every writable
//     replica: a released slot is freed only then (step 4), the log
//     writes only slots of the last committed reservation, and a
//     reservation takes only free slots. Stale replicas belong to
//     devices that failed; a replica that is ahead of the others (a crash
//     between replica commits) is equally safe, since step 2 made its
//     stripes durable before any replica changed.
//   - Every stripe opened after a checkpoint's snapshot has a generation
//     above its LogGen and sits in its reservation, in the order the log
//     took the slots; its summary is in every shard. The roll-forward at
//     Open examines those slots in order and applies each complete stripe
//     (K shards whose headers name it and whose every sector verifies)
//     over older mappings of its sectors. One stripe is open at a time
//     and generations grow in the order stripes open, so for every sector
//     the newest write is in the newest stripe that holds it.
//   - A flush returns after every stripe sealed before it is written and
//     every device fsynced, so every stripe before a flushed one is
//     complete on disk and found; a stripe cut by the crash was never
//     made durable by a flush, and skipping it returns an older version,
//     which the promise allows. A complete stripe with some bad shards
//     (a device lost its unsynced writes) is applied, its bad shards
//     marked missing and repaired before Open returns.
//   - A flush that journals copies the open stripe's dirty sectors under
//     the log's lock, so the record holds every caller's write into that
//     stripe that returned before the flush began; writes into stripes
//     sealed before it are waited for and synced. It returns only once
//     the record is synced on one more device than the store can still
//     lose, so a record it made durable is found. A flush that fails
//     after taking the sectors makes the next flush seal that stripe.
//   - A record's generation is that of the open stripe it journals. Every
//     record taken after a checkpoint's snapshot has a generation above
//     its LogGen (the snapshot seals the open stripe), and every record
//     taken before it is dead once that checkpoint completes (its stripe
//     was written and synced in step 2); records are taken and written
//     under flushMu, which a checkpoint holds throughout. Open reads every
//     valid record of this store above the adopted LogGen (its header
//     names the device and offset it was written at, so a copy of a
//     record elsewhere does not count), drops those whose stripe the
//     roll-forward found (that stripe holds everything the records of its
//     generation do, or newer), and takes for each sector the newest
//     version by record sequence, unless the map points at a stripe of a
//     later generation. It appends those to the log and checkpoints before
//     anything else is written: only then are the records dead.
//   - The ring never overwrites a record before it is dead: a record is
//     dead when a flush or checkpoint has synced every stripe below its
//     generation's, and the ring forgets records only then.
//   - Unmaps, chunk records and callers' records are in checkpoints
//     only, and a Sync after one is a checkpoint; a crash before it may
//     undo them, which the promise allows. A checkpoint takes every
//     PutRecords call staged before its snapshot whole, under lmu, with
//     the chunk records swapped in before it: a caller that stages its
//     records before it deletes a chunk they stop naming never finds,
//     after a crash, records naming a deleted chunk. A chunk's sectors in the log whose record was never
//     checkpointed belong to an owner the checkpoint does not know, and
//     are ignored.
//   - A device is marked as having something to flush only once a write
//     to it has completed, so a flush never takes the mark of a write in
//     flight, syncs before it lands, and leaves the flush that needs it
//     with nothing to sync.
//   - A Sync that finds a checkpoint in flight carrying its unmaps or
//     chunk records waits for it (and checkpoints again if it failed).
//   - A checkpoint's next owner is read after its chunk records, so no
//     owner it names is handed out again after a crash.
//   - A cleaner's move is a log append of the same bytes: a crash leaves
//     the victim (it is freed only by a checkpoint after the move) and
//     maybe the copy. It moves a sector only if, once it has room in the
//     log, the map still points at the victim and the victim's slot still
//     holds the same generation.
//   - Generations are reserved in blocks of 2^40 that are committed ahead
//     of use, so a slot reused after a crash never carries the generation
//     of a stripe the metadata knows.
//   - Only free slots are punched: no adoptable checkpoint names them
//     (they were freed after a checkpoint that no longer did completed),
//     the punch holds commitMu, so no reservation takes them meanwhile,
//     and nothing reads or writes them. A crash before the punch is
//     synced leaves their old bytes: stale stripes, which the roll-forward
//     skips by generation as in any reused slot. Their allocation marks
//     are dropped under flushMu first, so no flush in progress marks a
//     punched slot allocated again and a later write there has its own
//     fdatasync.
//
// The crash tests check exactly that (crash_test.go): random writes, FUA
// writes (most of them flushed through the journal), discards, chunk puts and deletes and syncs, with the cleaner
// running and two writers making FUA writes at once (group commits), and
// idle passes with their trims whenever the workload pauses, on in-memory
// devices that crash together at a random operation (a shared
// vfs.CrashClock; half the seeds use the devices' shared cache flushes
// and punched holes, the others wrappers without them), then reopen, compare every 512-byte block and chunk
// with what the model allows, scrub for parity, check the maps against
// the stripes' summaries (checkMap; invariants builds run it after every
// roll-forward) and keep working. Crashes in the middle of a rebuild
// resume and complete.
//
// Durability follows the POSIX rules: fsync a file to make its data
// durable; fsync the directory after a create or rename. Shard files and
// journals are created once, at format time, then the directory is
// synced; the identity record is written with vfs.WriteFile. A device
// without a whole journal (a store made before it, a crash while it was
// written) gets one after Open has read its records and checkpointed.
//
// # Reads
//
// A read looks its sectors up in the map, copies those whose stripe is
// still in memory, and reads the rest from their slots, each run of
// sectors contiguous in one slot with one stripe read, which touches only
// the data shards the run covers and only the sectors it needs (a 4 KiB
// read reads one header and one sector, or the sector alone when the
// shard's header is in the header cache: the sector CRCs and identity of
// the last 65,536 headers reads decoded, good only for the generation
// and stripe the read expects, hdrcache.go; the sectors are checked
// against the cached CRCs as against the header's, so a damaged sector
// is still found, while a damaged header whose sectors are intact is left
// to scrub, which reads every header).
// A shard that is missing (device out of use, or marked missing in the
// extent), unreadable, of the wrong identity or generation, or whose sector
// checksum fails, is reconstructed from any K other shards over just the
// needed range (Reed-Solomon works column by column). Shards known to be
// unavailable are replaced in the same round of reads, so a degraded read
// costs about what a healthy one does. Each fault is counted (Stats) and
// the stripe is queued for repair (RepairQueued). With fewer than K good
// shards the read fails with an error for which IsUnavailable is true:
// never wrong data. Shards on a device being rebuilt are a last resort.
//
// # Devices and degraded mode
//
// Open reads every identity record. The store is the one most devices
// name. A device of another store (ErrForeignDevice), in another position
// (ErrDeviceSwapped), or replaced in this store's device table (its UUID
// is no longer the one recorded: ErrForeignDevice) fails Open, naming every
// device at fault (*DevicesError): it is never silently used. A missing
// directory, an empty one (ErrDeviceEmpty: a new disk) or an unreadable
// identity counts as missing; up to M missing devices open the store
// degraded, more fail with ErrTooManyFailures.
//
// With up to M devices out (missing at Open, or failed while running: an
// I/O error other than ENOSPC, a failed fsync, a failed probe), writes
// continue: stripes are written without those devices and the slot
// record marks them missing (Stats.DegradedWrites); reads reconstruct. Past M, writes,
// Sync and unreconstructible reads fail with ErrTooManyFailures. A failed
// device stays out until the store is reopened (if it is healthy again,
// its stale shards are recognised by their headers and the missing marks,
// and Scrub rewrites them) or rebuilt.
//
// ENOSPC on any device fails the stripe's write with ErrNoSpace
// (IsNoSpace): the stripe stays in memory (reads are served from it), the
// device stays in use, and the Sync or FUA write that needed it fails;
// the next flush retries it, so Sync succeeds again once there is room.
// It also starts an idle pass at once, busy or not (at most one a
// second): the cleaner compacts to the idle target and the checkpoint
// that follows, done or failed, punches the free slots out of the shard
// files, which gives the file system back the space the store can
// spare. The store does not watch the file system's free space ahead of
// time: a disk smaller than what the over-provisioning lets a busy store
// take fills up first, then recovers.
//
// # Scrub, repair and rebuild
//
// Scrub reads every shard of every stripe (every slot that holds one, in
// slot order), checks headers and sector
// checksums, and checks data against parity (when every shard verifies on
// its own but they disagree, the one shard whose removal makes the rest
// consistent is the bad one; if none or several do, the stripe is
// unrecoverable). Bad shards are rewritten in place from the others: safe,
// because they were bad already and no other shard is touched. The repairs
// are fsynced before the missing marks are cleared in a commit. Scrub
// reports Checked, Damaged, Repaired, Unrecoverable and Degraded (bad
// shards on devices that cannot take a write), and can be rate-limited.
// RepairQueued does the same for the stripes reads found damaged.
//
// Rebuild fills a replaced, empty device: it records a new device UUID for
// the position in the device table (committed before the device gets its
// identity record, so a crash leaves an empty device, not a foreign one),
// formats the device with a copy of the metadata, and from then on new
// writes include it. It then writes the device's shard of every stripe
// older than the rebuild or marked missing, reconstructed from the others,
// in slot order, committing its cursor (a slot) every 256 stripes; after a crash or cancellation,
// Open and Rebuild again resume at the cursor. Progress is reported for a
// progress bar.
//
// # The erasure code as on-disk format
//
// Parity written by one build must be decodable by the next, so the
// geometry and reedsolomon's matrix options are format, as in MinIO: the
// store uses reedsolomon's default systematic Vandermonde matrix over
// GF(2^8), with no option that changes the output. At Create the codec
// encodes a fixed input and checks the SHA-256 of the parity against a
// table pinned in codec.go (for 19 common geometries), and the digest is
// recorded in every identity record; Open repeats the encoding and refuses
// the store with ErrGoldenMismatch if the digest differs. The tests show
// that reedsolomon's pure-Go and vector paths produce identical parity, and
// that a matrix option (Cauchy) would be caught.
//
// SIMD reports the vector path reedsolomon uses on this CPU (it follows
// reedsolomon's own detection: AVX512+GFNI, AVX+GFNI, AVX512, AVX2, SSSE3,
// NEON/SVE, or pure Go); Open logs it, Info reports it, and a test fails if
// a CPU with AVX2 falls back to pure Go.
//
// # The stripe unit
//
// DefaultStripeUnit is 64 KiB, chosen with BenchmarkStripeUnit: it keeps
// most of the sequential bandwidth of larger units, while a short stripe
// (a lone flushed sector) and the slot the cleaner must reclaim stay
// small, and a random 4 KiB read costs the same at every unit (one header
// and one sector, or one sector). BENCHMARKS.md has the figures.
//
// # Concurrency
//
// Store, Volume and the chunk methods are safe for concurrent use. The
// log's lock (lmu) guards the open stripe, the maps, the slot table and
// the reservation; it is held for map operations and memory copies,
// never across device I/O. A read resolves its sectors under it and reads
// the devices after it, holding the read gate shared from before it lets
// lmu go; freeing slots takes the gate exclusively, so no slot is reused
// under a read. A read of several shards reads those in the page cache on
// its own goroutine (preadv2 with RWF_NOWAIT, vfs.NowaitReader) and
// starts a goroutine for each of the others, which wait for a device;
// a read under 32 KiB reads every shard on its own goroutine. Sealed
// stripes are written by goroutines of their own;
// the cleaner, the background committer and (with a write cache) the
// destager are one goroutine each, from Open to Close. Scrub, RepairQueued and Rebuild run beside normal I/O,
// holding the gate while they examine and repair a stripe.
//
// Lock order (each mutex's comment says what it guards):
//
//	wcache.regionLocks[i] (a write cache's region, ascending)
//	Store.commitMu
//	  → Volume.locks[i] (a partly written sector) / chunkTable.locks[i]
//	    → Store.flushMu
//	      → Store.lmu
//	        → chunkTable.mu, Volume.mu, Store.volMu
//	          → allocator.mu, repairQueue.mu, device.mu, the header
//	            cache's locks (leaves)
//
// The read gate is taken holding lmu, or nothing; whoever holds it takes
// no lock above the leaves. No lock is held while waiting for commitMu.
//
// # For the target: mapping to NVMe
//
// A namespace maps Read and Write to ReadAt and WriteAtFlags (the FUA bit
// to FUA), Flush to Sync, Write Zeroes to WriteZeroes and Dataset
// Management deallocate to Discard (reads of deallocated blocks return
// zeros), and advertises a volatile write cache. Errors map by class:
// IsUnavailable (too many shards or devices lost) and IsCorruption to a
// media error (Unrecovered Read Error on reads, Write Fault on writes),
// IsNoSpace to Capacity Exceeded, ErrOutOfRange to LBA Out of Range,
// ErrClosed to Namespace Not Ready. A write that the log takes into memory
// reports a device error at the Flush (or FUA write) that must write it
// out, as a disk with a volatile cache does. Info and Stats feed a status
// command (Stats has live and dead bytes, slots used and free, stripes
// open, the cleaner's moves and the write amplification since Open);
// Scrub with BytesPerSecond is the background scrubber; Rebuild's
// Progress drives a progress bar. OpenOrCreateDirs(DeviceDirs(data, g))
// gives the default layout DATA/dev0 … DATA/dev{K+M-1}.
//
// # Sharp edges
//
//   - A meta.log replica takes no lock: where bbolt's file lock refuses a
//     second process (ErrDeviceBusy), two processes can open one device
//     with meta.log. Cluster volumes are kept apart by their head lease
//     and the devices' epoch fence (internal/devsvc), not by this.
//   - A Sync writes out what the write cache holds, up to its budget, as
//     an fsync writes a file's dirty pages: its time grows with what
//     hosts wrote since the last one. Size the cache to what the disks
//     write in well under a host's I/O timeout (30 s for Linux's NVMe
//     host), or turn it off for hosts that flush rarely and time out.
//   - A write cache much smaller than the data a host keeps rewriting
//     costs a little: it is short of room all the time, one destager
//     writes out what eight writers put in, and writes that find it full
//     go past it (BenchmarkRandWriteQD8: a 64 MiB cache before a 1 GiB
//     volume under random 4 KiB writes).
//   - A lone flushed 4 KiB sector costs a short stripe: three shard
//     writes (one data, two parity at 4+2) and a slot for the cleaner to
//     reclaim.
//   - Sharing a cache flush relies on the file system writing allocated
//     blocks in place and on fdatasync flushing the disk even for a file
//     with nothing dirty: ext4 in its default data=ordered mode and XFS do.
//     Other file systems get an fdatasync per device; ext4 mounted with
//     data=journal is not detected.
//   - Shard files keep the size of the high-water mark of slots; freed
//     slots are reused (the reservation takes the lowest first), and
//     punched only by the trimming checkpoint after an idle pass. While
//     a store is busy, a released slot joins the reservation two
//     checkpoints later, so the allocated space can pass the live slots
//     by the over-provisioning plus what waits to be freed and the
//     reservation (up to 4096 slots each): a store under constant
//     overwrites never gets its idle pass.
//   - A file system that cannot punch holes (vfs.Puncher fails) keeps the
//     blocks of free slots; only the compaction happens.
//   - The maps and the slot table are held in memory and loaded at Open
//     (figures above).
//   - The cleaner picks victims by scanning the slot table: about 10 ms
//     per million slots.
//   - On a real file system, deleting a device directory under a running
//     store does not fail its open files; the store notices at the next
//     flush's probe and takes the device out. The probe looks a device's
//     identity file up by path only when an inotify watch on its
//     directory (vfs.Watcher, one read for all devices) saw an entry
//     removed or renamed, or the directory itself go, since the last
//     flush; a file system mounted over a device directory is noticed at
//     the next checkpoint, which looks every device up. vfs.MemFS.Vanish
//     models a pulled disk, where every operation fails at once.
//   - An fsync error takes the device out (its page cache state is
//     unknown), even for ENOSPC; only write errors are treated as a full
//     device.
//   - A device taken out while running comes back only through a reopen or
//     Rebuild; Rebuild wants an empty directory.
//   - At most 64 devices (per-stripe device masks are 64-bit).
//   - Close while Scrub, RepairQueued or Rebuild runs makes them fail;
//     cancel their contexts first. Handles (volumes) die with the store.
//
// # Libraries
//
//   - github.com/klauspost/reedsolomon: the erasure code, with AVX2/GFNI
//     paths (ten times its pure-Go code).
//   - go.etcd.io/bbolt: the metadata database (above).
//   - github.com/google/uuid: store, device and chunk IDs.
//   - github.com/klauspost/cpuid/v2: to report the vector path; reedsolomon
//     uses the same detection.
//   - golang.org/x/sys/unix: preadv/pwritev for shard I/O.
//
// # Tests and benchmarks
//
// go test runs the crash test over 100 seeds (a quarter with a write
// cache), crashes during rebuild over 16 and silent corruption over 8,
// besides the device-loss, rebuild, identity, ENOSPC, concurrency, write
// cache (a model of the bytes, durability across a crash, concurrency, a
// FUA write held behind a destage of its page) and migration tests (the
// last on a store the v1 code wrote, testdata/v1-store.tar.gz); CHUNKSTORE_EXTENDED=1 (or
// -chunkstore.extended) runs ten times as many seeds. Builds with -tags
// invariants (and -race builds) also check the allocator's invariants (no
// slot freed twice or while free) and the maps against the summaries
// after every roll-forward. Benchmarks (bench_test.go) compare 4+2 with
// 1+0 and with a plain file, degraded with healthy reads, the store's
// encoding with reedsolomon's, FUA writes with a plain file's fsync, and
// sequential overwrites with and without the write cache; BENCHMARKS.md
// has the figures.
package chunkstore
