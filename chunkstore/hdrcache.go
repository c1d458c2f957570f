package chunkstore

import "sync"

// The shard header cache. A read of part of a shard (a random 4 KiB
// read) needs the shard's header for the CRC32C of its sectors, and the
// header and the sectors are apart on the device: two preads, which were
// 70 % of BenchmarkRandRead's time. The cache keeps the sector CRCs and
// the identity of the headers reads decoded, so that the next read of
// part of the same shard reads only its sectors.
//
// An entry is good for the stripe the read expects, which the extent
// names: the slot, the shard, the generation (a slot written again has
// a new one), the stripe key and the shard length. The sectors read are
// checked against the cached CRCs, which are those of that stripe: a
// device that holds something else in the slot (a stale shard it
// missed the write of, say) fails the checksum instead of the header
// check, and the stripe is reconstructed as before. Nothing else writes
// a slot without a new generation: repair and rebuild write the same
// shard again.

// hdrCacheEntries bounds the cache: with the default 64 KiB stripe unit
// an entry is about 130 bytes, so about 8.5 MiB at most.
const hdrCacheEntries = 1 << 16

// hdrCacheShift: the cache is spread over 1<<hdrCacheShift maps and
// locks.
const (
	hdrCacheShift  = 6
	hdrCacheShards = 1 << hdrCacheShift
)

type hdrKey struct {
	slot  uint64
	shard int
}

type hdrEntry struct {
	gen, owner, index uint64
	length            int
	crcs              []uint32
}

type hdrCache struct {
	shards [hdrCacheShards]struct {
		mu sync.Mutex
		m  map[hdrKey]*hdrEntry
		_  [48]byte // one cache line each
	}
}

func (c *hdrCache) shard(k hdrKey) int {
	return int(((k.slot ^ uint64(k.shard)<<56) * 0x9e3779b97f4a7c15) >> (64 - hdrCacheShift))
}

// get copies into crcs the sector CRCs of shard i of the stripe key at
// ext, if the cache has that stripe's header, and reports whether it did.
func (c *hdrCache) get(key stripeKey, ext extent, i int, crcs []uint32) bool {
	k := hdrKey{ext.Slot, i}
	sh := &c.shards[c.shard(k)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil || e.gen != ext.Gen || e.owner != key.Owner || e.index != key.Index || e.length != ext.ShardLen || len(crcs) < len(e.crcs) {
		return false
	}
	copy(crcs, e.crcs)
	return true
}

// put records the header h of shard i, which a read found to be that of
// the stripe it expected.
func (c *hdrCache) put(h *shardHeader, i int) {
	k := hdrKey{h.Slot, i}
	sh := &c.shards[c.shard(k)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[hdrKey]*hdrEntry)
	}
	e := sh.m[k]
	if e == nil {
		if len(sh.m) >= hdrCacheEntries/hdrCacheShards {
			// Evict an arbitrary entry (map order) and reuse it.
			for old, oe := range sh.m {
				delete(sh.m, old)
				e = oe
				break
			}
		} else {
			e = &hdrEntry{}
		}
		sh.m[k] = e
	}
	e.gen, e.owner, e.index, e.length = h.Gen, h.Owner, h.Index, h.Length
	e.crcs = append(e.crcs[:0], h.CRCs...)
}
