package server

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof"
)

// Defaults of Options.
const (
	DefaultBlockSize = 256 << 10
	DefaultInlineMax = 4096
	// maxFileSize keeps block indexes within the 48 bits a chunk ID has.
	maxFileSize = 1<<63 - 1
)

// Options configure Open.
type Options struct {
	// BlockSize is the file data each chunk holds (a power of two, 4 KiB
	// to 8 MiB). Default DefaultBlockSize: one full stripe of the default
	// 4+2 geometry with 64 KiB units.
	BlockSize int
	// InlineMax is the largest file kept inline in the metadata database.
	// Default DefaultInlineMax; -1 keeps no file inline.
	InlineMax int
	// Capacity, when set, bounds the file data writes may fill and the
	// space STATFS reports, in bytes. Zero: no bound of its own; STATFS
	// reports the store's devices (statfs.go) and ENOSPC comes from the
	// chunkstore.
	Capacity int64
	// FSID tells this file system's chunks from others' in the same
	// store: chunk IDs carry it.
	FSID uint16
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Now is the clock for timestamps; default time.Now.
	Now func() time.Time
	// RootUID and RootGID own the root directory of a new namespace
	// (default root's; an existing one keeps its owner).
	RootUID, RootGID uint32
	// SyncInterval is how often the server syncs when file data or
	// metadata changed since the last sync, without any FSYNC: it bounds
	// what a crash loses (the commit interval) and lets the store reuse
	// the space of replaced chunks (DefaultSyncInterval; -1: only FSYNC,
	// Flush and Close sync).
	SyncInterval time.Duration
	// Import names a metadata database of the first format (a bbolt file
	// of its own, outside the store): when the store holds no namespace
	// of this FSID yet and the file exists, Open copies it into the
	// store's records, syncs, and renames it to Import+".imported".
	Import string
	// CacheBytes bounds the memory of the inode cache (icache.go):
	// DefaultCacheBytes when zero; -1 turns the cache off, so that every
	// operation reads its inode from the database.
	CacheBytes int64
	// ReclaimGrace is how long after Open the files unlinked while open
	// before a restart stay, for the clients that had them open to
	// reclaim their handles (OPEN naming the old handle); those nobody
	// reclaimed are deleted then (DefaultReclaimGrace; -1: at Open).
	ReclaimGrace time.Duration
}

// DefaultReclaimGrace is the default of Options.ReclaimGrace: longer
// than a client's default reconnect timeout (30 s), so that a client
// that comes back at all comes back within it.
const DefaultReclaimGrace = 90 * time.Second

// DefaultSyncInterval is the default of Options.SyncInterval, as ext4's
// commit interval.
const DefaultSyncInterval = 5 * time.Second

// Server is a file namespace: metadata in the chunkstore's records,
// worked on in memory (memdb.go), file data in the chunkstore's chunks.
// It implements target.VendorHandler. Its methods are safe for
// concurrent use.
type Server struct {
	db    *memDB // the working database (memdb.go)
	store *chunkstore.Store
	space string // the store's record space of this FSID
	opt   Options
	log   *slog.Logger
	bs    int64

	// dataLocks serialize the data operations of one inode (write,
	// truncate, punch, the deletion of its chunks) and let reads run
	// together; indexed by ino modulo their number. Taken before any
	// transaction, never two at once.
	dataLocks [256]sync.RWMutex

	// hmu guards handles, open, grants, nextHandle and reclaimable.
	hmu        sync.Mutex
	handles    map[uint64]handle // by handle number
	open       map[uint64]int    // ino → open handles
	grants     map[grant]int     // open handles by inode, credential and access
	nextHandle uint64            // the last handed out; the top 32 bits are this run's
	// reclaimable are the files unlinked while open when the last run
	// ended, kept until graceTimer fires (Options.ReclaimGrace).
	reclaimable []uint64
	graceTimer  *time.Timer
	// epoch is the top 32 bits of this run's handle numbers, set at
	// Open (read without hmu).
	epoch uint64

	creds credTable // registered credentials (perm.go)

	icache inodeCache // committed inodes (icache.go)

	replies replyCache // outcomes by request ID

	used   atomic.Int64 // bytes of file data allocated: chunks × BlockSize + inline bytes
	inodes atomic.Int64
	closed atomic.Bool
	ops    [0x80]opCounters // by opcode - 80h (OpStats)

	// commits feeds the committer (commit.go). commitMu: update holds it
	// shared while it sends or runs its transaction itself, Close
	// exclusively while it closes commits.
	commits       chan *commitReq
	commitMu      sync.RWMutex
	committerDone chan struct{}
	// txMu is held around every writing transaction (commit.go),
	// and by an open around its check and the registration of its handle
	// (data.go, openIno), and by stage. Taken after a data lock, before
	// hmu.
	txMu sync.Mutex
	// metaDirty holds the keys changed since the last stage (records.go):
	// bucket tag + key. Guarded by txMu (writing transactions run under
	// it, or in Open before anything else).
	metaDirty map[string]struct{}

	// dirty is set when file data or metadata changes and cleared by a
	// sync; the
	// syncer goroutine syncs when it finds it set, until stopSync closes.
	dirty    atomic.Bool
	stopSync chan struct{}
	syncDone chan struct{}
}

// Open opens (or creates) the file namespace of opt.FSID in store, then
// recovers from any crash: files unlinked while open are deleted, and
// chunks no file owns are deleted (the orphan sweep).
func Open(store *chunkstore.Store, opt Options) (*Server, error) {
	if opt.BlockSize == 0 {
		opt.BlockSize = DefaultBlockSize
	}
	if opt.BlockSize < 4096 || opt.BlockSize > 8<<20 || opt.BlockSize&(opt.BlockSize-1) != 0 {
		return nil, fmt.Errorf("fs/server: block size %d: want a power of two from 4 KiB to 8 MiB", opt.BlockSize)
	}
	switch {
	case opt.InlineMax == 0:
		opt.InlineMax = DefaultInlineMax
	case opt.InlineMax < 0:
		opt.InlineMax = 0
	case opt.InlineMax > opt.BlockSize:
		return nil, fmt.Errorf("fs/server: inline limit %d above the block size %d", opt.InlineMax, opt.BlockSize)
	}
	if opt.Capacity <= 0 {
		opt.Capacity = math.MaxInt64
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.SyncInterval == 0 {
		opt.SyncInterval = DefaultSyncInterval
	}
	if opt.CacheBytes == 0 {
		opt.CacheBytes = DefaultCacheBytes
	}
	if opt.ReclaimGrace == 0 {
		opt.ReclaimGrace = DefaultReclaimGrace
	}
	db := newMemDB()
	s := &Server{db: db, store: store, space: recordSpace(opt.FSID), metaDirty: map[string]struct{}{},
		opt: opt, log: opt.Logger, bs: int64(opt.BlockSize),
		handles: map[uint64]handle{}, open: map[uint64]int{}, grants: map[grant]int{},
		commits: make(chan *commitReq, maxGroup), committerDone: make(chan struct{}),
		stopSync: make(chan struct{}), syncDone: make(chan struct{})}
	s.epoch = handleEpoch()
	s.nextHandle = s.epoch << 32
	s.icache.init(opt.CacheBytes)
	found, err := s.load()
	imported := false
	if err == nil && !found && opt.Import != "" {
		imported, err = s.importLegacy(opt.Import)
	}
	if err == nil {
		err = s.init()
	}
	if err == nil {
		err = s.recover()
	}
	if err == nil && len(s.metaDirty) > 0 {
		err = s.Sync() // a new or imported namespace
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	if imported {
		if err := os.Rename(opt.Import, opt.Import+".imported"); err != nil {
			s.log.Warn("fs: the imported metadata file stays where it was", "path", opt.Import, "err", err)
		}
		s.log.Info("fs: metadata imported into the store", "from", opt.Import)
	} else if found && opt.Import != "" {
		if _, err := os.Stat(opt.Import); err == nil {
			s.log.Warn("fs: a metadata file of the first format is left beside a namespace in the store; it is not read",
				"path", opt.Import)
		}
	}
	go s.committer()
	go s.syncer()
	if len(s.reclaimable) > 0 {
		s.graceTimer = time.AfterFunc(opt.ReclaimGrace, s.endGrace)
	}
	return s, nil
}

// handleEpoch returns the top 32 bits of this run's handle numbers:
// random and not zero, so that a handle of an earlier run is never one
// of this run (a client reclaims those by number).
func handleEpoch() uint64 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if e := binary.LittleEndian.Uint32(b[:]); e != 0 {
			return uint64(e)
		}
	}
}

// endGrace ends the reclaim grace: the files unlinked while open before
// the restart that no handle holds now are deleted.
func (s *Server) endGrace() {
	s.hmu.Lock()
	inos := s.reclaimable
	s.reclaimable = nil
	s.hmu.Unlock()
	for _, ino := range inos {
		if s.closed.Load() {
			return
		}
		if err := s.dropOrphan(ino); err != nil {
			s.log.Warn("fs: deleting a file unlinked while open failed; the next start retries", "ino", ino, "err", err)
		}
	}
}

// init checks the format and FSID of a namespace, or makes the root
// directory of a new one.
func (s *Server) init() error {
	return s.db.Update(func(tx *memTx) error {
		sb := tx.Bucket(bucketSuper)
		var fsid [2]byte
		binary.LittleEndian.PutUint16(fsid[:], s.opt.FSID)
		if v := sb.Get(keyVersion); v != nil {
			if len(v) != 4 || binary.LittleEndian.Uint32(v) != formatVersion {
				return fmt.Errorf("fs/server: metadata format %x, this build reads %d", v, formatVersion)
			}
			if got := sb.Get(keyFSID); string(got) != string(fsid[:]) {
				return fmt.Errorf("fs/server: the metadata belongs to FSID %x, not %#04x: its chunks would not be found", got, s.opt.FSID)
			}
			return nil
		}
		var v [4]byte
		binary.LittleEndian.PutUint32(v[:], formatVersion)
		if err := s.put(tx, tagSuper, keyVersion, v[:]); err != nil {
			return err
		}
		if err := s.put(tx, tagSuper, keyFSID, fsid[:]); err != nil {
			return err
		}
		now := s.opt.Now().UnixNano()
		root := &inode{Mode: sIFDIR | 0o755, Nlink: 2, UID: s.opt.RootUID, GID: s.opt.RootGID, Atime: now, Mtime: now, Ctime: now,
			NextCookie: 3, Parent: 1}
		if err := s.putInode(tx, 1, root); err != nil {
			return err
		}
		return s.put(tx, tagSuper, keyNextIno, inoKey(2))
	})
}

// Close syncs (unmounting makes everything durable) and closes the
// working database. The chunkstore is the caller's.
func (s *Server) Close() error {
	s.commitMu.Lock()
	if s.closed.Swap(true) {
		s.commitMu.Unlock()
		return nil
	}
	close(s.commits)
	s.commitMu.Unlock()
	if s.graceTimer != nil {
		s.graceTimer.Stop()
	}
	close(s.stopSync)
	<-s.syncDone
	<-s.committerDone
	err := s.Sync()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// Sync makes every completed operation durable: the metadata changed
// since the last sync is staged into the store's records, and the store
// synced (a checkpoint, with records or chunk records waiting).
func (s *Server) Sync() error {
	s.dirty.Store(false)
	err := s.stage()
	if err == nil {
		err = s.store.Sync()
	}
	if err != nil {
		s.dirty.Store(true)
		return err
	}
	return nil
}

// syncer syncs the store every SyncInterval while file data changes.
func (s *Server) syncer() {
	defer close(s.syncDone)
	if s.opt.SyncInterval < 0 {
		<-s.stopSync
		return
	}
	t := time.NewTicker(s.opt.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopSync:
			return
		case <-t.C:
		}
		if s.dirty.Load() {
			if err := s.Sync(); err != nil {
				s.log.Warn("fs: periodic sync of the store failed", "err", err)
			}
		}
	}
}

// Chunk IDs: 2 bytes of magic, the FSID, 48 bits of inode number and 48
// bits of block index, big endian, so the IDs of one file sort by block.
const (
	chunkMagic0 = 0xcf
	chunkMagic1 = 0x5f
	maxIno      = 1<<48 - 1
)

func (s *Server) chunkID(ino uint64, block int64) chunkstore.ChunkID {
	var id chunkstore.ChunkID
	id[0], id[1] = chunkMagic0, chunkMagic1
	binary.BigEndian.PutUint16(id[2:], s.opt.FSID)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], ino)
	copy(id[4:10], b[2:])
	binary.BigEndian.PutUint64(b[:], uint64(block))
	copy(id[10:16], b[2:])
	return id
}

// parseChunkID returns the inode and block of one of this file system's
// chunk IDs.
func (s *Server) parseChunkID(id chunkstore.ChunkID) (ino uint64, block int64, ok bool) {
	if id[0] != chunkMagic0 || id[1] != chunkMagic1 || binary.BigEndian.Uint16(id[2:]) != s.opt.FSID {
		return 0, 0, false
	}
	var b [8]byte
	copy(b[2:], id[4:10])
	ino = binary.BigEndian.Uint64(b[:])
	copy(b[2:], id[10:16])
	return ino, int64(binary.BigEndian.Uint64(b[:])), true
}

// recover deletes what a crash or an unclean stop left: inodes unlinked
// while open (bucketOrphans; with a reclaim grace, endGrace does when it
// ends), and chunks that no file owns (their inode is gone, not a regular
// file with chunked data, or they lie past the end of the file). It then
// recounts each file's chunks and the space in use.
func (s *Server) recover() error {
	var orphans [][]byte
	err := s.db.Update(func(tx *memTx) error {
		c := tx.Bucket(bucketOrphans).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			orphans = append(orphans, append([]byte(nil), k...))
		}
		if s.opt.ReclaimGrace > 0 {
			// Kept for their handles' reclaim (endGrace).
			for _, k := range orphans {
				s.reclaimable = append(s.reclaimable, binary.BigEndian.Uint64(k))
			}
			orphans = nil
			return nil
		}
		for _, k := range orphans {
			if err := s.deleteInodeRecords(tx, binary.BigEndian.Uint64(k)); err != nil {
				return err
			}
			if err := s.del(tx, tagOrphans, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	counts := map[uint64]uint64{}
	deleted := 0
	for _, ci := range s.store.Chunks() {
		ino, block, ok := s.parseChunkID(ci.ID)
		if !ok {
			continue
		}
		keep := false
		_ = s.db.View(func(tx *memTx) error {
			var n inode
			if v := tx.Bucket(bucketInodes).Get(inoKey(ino)); v != nil && n.unmarshal(v) == nil {
				keep = n.isReg() && !n.inline() && block*s.bs < int64(n.Size)
			}
			return nil
		})
		if keep {
			counts[ino]++
			continue
		}
		if err := s.store.DeleteChunk(ci.ID, 0); err != nil && !errors.Is(err, chunkstore.ErrNotFound) {
			return fmt.Errorf("fs/server: orphan sweep: %w", err)
		}
		deleted++
	}
	var used, inodes int64
	err = s.db.Update(func(tx *memTx) error {
		b := tx.Bucket(bucketInodes)
		type fix struct {
			k []byte
			n inode
		}
		var fixes []fix
		err := b.ForEach(func(k, v []byte) error {
			var n inode
			if err := n.unmarshal(v); err != nil {
				return fmt.Errorf("inode %x: %w", k, err)
			}
			inodes++
			ino := binary.BigEndian.Uint64(k)
			if n.isReg() && !n.inline() && n.Chunks != counts[ino] {
				n.Chunks = counts[ino]
				fixes = append(fixes, fix{append([]byte(nil), k...), n})
			}
			if n.isReg() && n.inline() {
				used += int64(n.Size)
			} else {
				used += int64(counts[ino]) * s.bs
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, f := range fixes {
			if err := s.putInode(tx, binary.BigEndian.Uint64(f.k), &f.n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.used.Store(used)
	s.inodes.Store(inodes)
	if deleted > 0 || len(orphans) > 0 {
		s.log.Info("fs: recovered", "orphan_inodes", len(orphans), "orphan_chunks", deleted)
		return s.Sync()
	}
	return nil
}

// deleteInodeRecords removes an inode and what hangs off it in the
// database: inline data or symlink target, xattrs. Its chunks are
// deleted by the caller after the commit (or by the next sweep).
func (s *Server) deleteInodeRecords(tx *memTx, ino uint64) error {
	if err := s.del(tx, tagInodes, inoKey(ino)); err != nil {
		return err
	}
	if err := s.deleteData(tx, ino); err != nil {
		return err
	}
	c := tx.Bucket(bucketXattrs).Cursor()
	prefix := inoKey(ino)
	for k, _ := c.Seek(prefix); k != nil && len(k) >= 8 && string(k[:8]) == string(prefix); k, _ = c.Seek(prefix) {
		s.mark(tagXattrs, k)
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Stats is what the server holds.
type Stats struct {
	Inodes    int64
	UsedBytes int64
	Handles   int
}

// Stats returns the counts the server keeps.
func (s *Server) Stats() Stats {
	s.hmu.Lock()
	h := len(s.handles)
	s.hmu.Unlock()
	return Stats{Inodes: s.inodes.Load(), UsedBytes: s.used.Load(), Handles: h}
}

// opCounters count one file operation.
type opCounters struct {
	ops, errors, bytes atomic.Uint64
}

// OpStats are the counters of one file operation since the server was
// opened.
type OpStats struct {
	Op     string // the operation's name in lower case: lookup, create, read, write, ...
	Ops    uint64 // operations run (a request sent again and answered from the reply cache is not)
	Errors uint64 // of them, those answered with an errno
	Bytes  uint64 // file data moved by reads and writes that succeeded
}

// OpStats returns the counters of every operation of the protocol, in
// opcode order.
func (s *Server) OpStats() []OpStats {
	var out []OpStats
	for i := range s.ops {
		name := proto.OpName(nvmeof.Opcode(0x80 + i))
		if name == "" {
			continue
		}
		c := &s.ops[i]
		out = append(out, OpStats{Op: strings.ToLower(name), Ops: c.ops.Load(), Errors: c.errors.Load(), Bytes: c.bytes.Load()})
	}
	return out
}

// countOp records one operation that ran.
func (s *Server) countOp(op nvmeof.Opcode, n int, err error) {
	if op < 0x80 {
		return
	}
	c := &s.ops[op-0x80]
	c.ops.Add(1)
	switch {
	case err != nil:
		c.errors.Add(1)
	case op == proto.OpRead || op == proto.OpWrite:
		c.bytes.Add(uint64(n))
	}
}

// errnoOf maps a Go error from the layers below to an errno.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0 // before e, which escapes to the heap: no allocation on success
	}
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case chunkstore.IsNoSpace(err):
		return syscall.ENOSPC
	}
	return syscall.EIO
}
