package server

import (
	"bytes"
	"sync"
	"syscall"
)

// The inode cache: committed inode records (and an inline file's data)
// in memory, so that READ, GETATTR and the checks before a write or an
// open find their inode without a transaction (doc.go, "The inode
// cache").
//
// Coherence. Inode records change only in writing transactions, all of
// which run under txMu (commit.go; before the server serves, in init and
// recover). Every change goes through putInode,
// deleteInodeRecords, putData or deleteData, which drop the entry at
// once and register a commit handler (tx.OnCommit) that runs after
// the commit, still under txMu, before the
// change's caller hears of it: it puts the new record in (a chunked or
// non-regular inode) or drops the entry (an inline file, a deleted
// inode). A rolled-back transaction runs no handler, and the entries it
// dropped are filled again from the database. So when a change has
// returned, the cache holds its outcome or nothing.
//
// A miss reads the inode in a transaction and fills the entry,
// unless the shard's generation moved since the miss: a change that
// committed meanwhile may be newer than what the transaction saw. Every
// drop and every commit handler moves the generation, under the shard's
// lock.
//
// Entries are immutable once in the cache: a change replaces one.
// Readers use an entry without a lock.

// Bounds of the cache.
const (
	icacheShards = 64
	// icacheEntryCost is what an entry costs beside its inline data:
	// the entry, its pointer and its slot in the map.
	icacheEntryCost = 160
	// DefaultCacheBytes is the default of Options.CacheBytes.
	DefaultCacheBytes = 32 << 20
)

// icacheEntry is an inode as committed, with an inline file's data.
type icacheEntry struct {
	n    inode
	data []byte // inline regular files: the data, len n.Size; nil otherwise
}

func (e *icacheEntry) cost() int64 { return icacheEntryCost + int64(len(e.data)) }

// inodeCache is the cache, in shards by inode number.
type inodeCache struct {
	shards   [icacheShards]icacheShard
	maxBytes int64 // per shard; 0: the cache is off
}

type icacheShard struct {
	// mu guards m, gen and bytes; a leaf lock.
	mu    sync.RWMutex
	m     map[uint64]*icacheEntry
	gen   uint64 // moved by every drop and every commit handler
	bytes int64  // cost of the entries in m
	_     [24]byte
}

func (c *inodeCache) init(total int64) {
	if total <= 0 {
		return
	}
	c.maxBytes = max(total/icacheShards, 4*icacheEntryCost)
	for i := range c.shards {
		c.shards[i].m = map[uint64]*icacheEntry{}
	}
}

func (c *inodeCache) shard(ino uint64) *icacheShard { return &c.shards[ino%icacheShards] }

// get returns ino's entry and, on a miss, the generation to fill with.
func (c *inodeCache) get(ino uint64) (*icacheEntry, uint64) {
	if c.maxBytes == 0 {
		return nil, 0
	}
	sh := c.shard(ino)
	sh.mu.RLock()
	e, gen := sh.m[ino], sh.gen
	sh.mu.RUnlock()
	return e, gen
}

// fill puts e in for ino, read from the database after get returned gen,
// unless a change moved the generation meanwhile.
func (c *inodeCache) fill(ino, gen uint64, e *icacheEntry) {
	if c.maxBytes == 0 || e.cost() > c.maxBytes/4 {
		return
	}
	sh := c.shard(ino)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen == gen {
		sh.putLocked(ino, e, c.maxBytes)
	}
}

// set puts e in for ino: a commit handler's, so the newest record. A nil
// e, or one too large to keep, removes ino's entry.
func (c *inodeCache) set(ino uint64, e *icacheEntry) {
	if c.maxBytes == 0 {
		return
	}
	sh := c.shard(ino)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.gen++
	if e == nil || e.cost() > c.maxBytes/4 {
		sh.dropLocked(ino)
		return
	}
	sh.putLocked(ino, e, c.maxBytes)
}

// drop removes ino's entry.
func (c *inodeCache) drop(ino uint64) { c.set(ino, nil) }

func (sh *icacheShard) dropLocked(ino uint64) {
	if old, ok := sh.m[ino]; ok {
		sh.bytes -= old.cost()
		delete(sh.m, ino)
	}
}

// putLocked replaces ino's entry, forgetting others at random (map order)
// while the shard is over its bound.
func (sh *icacheShard) putLocked(ino uint64, e *icacheEntry, maxBytes int64) {
	sh.dropLocked(ino)
	for k, old := range sh.m {
		if sh.bytes+e.cost() <= maxBytes {
			break
		}
		sh.bytes -= old.cost()
		delete(sh.m, k)
	}
	sh.m[ino] = e
	sh.bytes += e.cost()
}

// each calls fn for every entry (tests: checkInvariants compares them
// with the database).
func (c *inodeCache) each(fn func(ino uint64, e *icacheEntry)) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		for ino, e := range sh.m {
			fn(ino, e)
		}
		sh.mu.RUnlock()
	}
}

// loadInode returns ino's committed record and, for an inline regular
// file, its data (which the caller must not change), from the cache or
// else from the database, filling the cache.
func (s *Server) loadInode(ino uint64) (*icacheEntry, error) {
	e, gen := s.icache.get(ino)
	if e != nil {
		return e, nil
	}
	e = new(icacheEntry)
	err := s.db.View(func(tx *memTx) error {
		v := tx.Bucket(bucketInodes).Get(inoKey(ino))
		if v == nil {
			return syscall.ENOENT
		}
		if err := e.n.unmarshal(v); err != nil {
			return err
		}
		if e.n.isReg() && e.n.inline() {
			e.data = bytes.Clone(tx.Bucket(bucketData).Get(inoKey(ino)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.icache.fill(ino, gen, e)
	return e, nil
}

// putInode writes ino's record in tx; the cache drops it now and takes
// the record when tx commits.
func (s *Server) putInode(tx *memTx, ino uint64, n *inode) error {
	if err := s.put(tx, tagInodes, inoKey(ino), n.marshal()); err != nil {
		return err
	}
	s.icache.drop(ino)
	if n.isReg() && n.inline() {
		// The data may change in the same transaction: read it again.
		tx.OnCommit(func() { s.icache.drop(ino) })
		return nil
	}
	e := &icacheEntry{n: *n}
	tx.OnCommit(func() { s.icache.set(ino, e) })
	return nil
}

// putData writes ino's inline data or symlink target in tx.
func (s *Server) putData(tx *memTx, ino uint64, data []byte) error {
	if err := s.put(tx, tagData, inoKey(ino), data); err != nil {
		return err
	}
	s.dropOnCommit(tx, ino)
	return nil
}

// deleteData deletes ino's inline data in tx.
func (s *Server) deleteData(tx *memTx, ino uint64) error {
	if err := s.del(tx, tagData, inoKey(ino)); err != nil {
		return err
	}
	s.dropOnCommit(tx, ino)
	return nil
}

// dropOnCommit drops ino's entry now and when tx commits.
func (s *Server) dropOnCommit(tx *memTx, ino uint64) {
	s.icache.drop(ino)
	tx.OnCommit(func() { s.icache.drop(ino) })
}
