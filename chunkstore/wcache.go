package chunkstore

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The volumes' write-back cache (WithWriteCache; doc.go, "The write
// cache"). A volume's writes of whole 4 KiB pages land in memory and
// return; the store sees them only when they are destaged: at Sync and
// Close, when a page has waited DefaultWriteCacheExpire, or when the
// cache runs short of room. A page
// written again before then costs nothing more, so a host that rewrites
// the same blocks between flushes (a file system's journal, a database's
// pages, a guest's hot metadata) writes each once per flush interval.
//
// Pages live in slots of a store-wide pool of 2 MiB slabs (wcmem_*.go),
// at most the budget. Each volume keeps its pages in a map from page number to slot
// and a generation, and its regions (one full stripe of data each, the
// unit of destaging) with the time their oldest page was cached.
//
// Locks: regionLocks[r % stripeLocks] is held while region r is destaged
// and while a write that bypasses the cache (FUA, not page-aligned, no
// room, WriteZeroes and Discard) runs against the store, so the two never
// overlap on a region: an older page can never reach the log after a
// newer write-through of the same bytes. mu guards the maps and the
// pages' bytes (copies in and out happen under it); the pool's lock is a
// leaf. Lock order: region locks (ascending), then the Volume's sector
// locks and the store's, then mu, then the pool's.

// DefaultWriteCacheExpire is how long a page may stay in the write cache
// before the background destager writes it to the log.
const DefaultWriteCacheExpire = 5 * time.Second

// wcSlabPages is the pool's allocation unit, in pages (wcSlab: 2 MiB).
const wcSlabPages = wcSlab / SectorSize

// WithWriteCache gives the store's volumes a write-back cache of up to
// bytes of data in memory (rounded up to whole 2 MiB; 0, the default,
// turns it off). Writes of whole 4 KiB pages go to it and return; they
// reach the log at the next Sync (an NVMe Flush) or Close, after
// DefaultWriteCacheExpire, or when the cache is short of room. The
// promise does not change: a write is durable after the next Sync or at
// once with FUA. Chunks do not use it.
func WithWriteCache(bytes int64) Option {
	return func(o *options) { o.wcache = bytes }
}

// wpool is the store's memory for cached pages.
type wpool struct {
	mu     sync.Mutex
	slabs  [][]byte // fixed length; nil until first used
	mapped []bool   // by slab: mapped outside the Go heap (newSlab)
	free   []int32
	used   int
	max    int // slots
	// lastTake is when take last handed out slots.
	lastTake time.Time
	// destaged counts the bytes written out of the cache since Open.
	destaged int64
}

func newWpool(bytes int64) *wpool {
	slabs := int((bytes + wcSlab - 1) / wcSlab)
	if slabs <= 0 {
		return nil
	}
	return &wpool{slabs: make([][]byte, slabs), mapped: make([]bool, slabs), max: slabs * wcSlabPages}
}

// take hands out n slots, or none if fewer than n are left.
func (p *wpool) take(n int, dst []int32) ([]int32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used+n > p.max {
		return dst, false
	}
	for len(p.free) < n {
		i := slices.IndexFunc(p.slabs, func(b []byte) bool { return b == nil })
		p.slabs[i], p.mapped[i] = newSlab()
		for j := wcSlabPages - 1; j >= 0; j-- {
			p.free = append(p.free, int32(i*wcSlabPages+j))
		}
	}
	p.lastTake = time.Now()
	k := len(p.free) - n
	dst = append(dst, p.free[k:]...)
	p.free = p.free[:k]
	p.used += n
	return dst, true
}

// put returns slots.
func (p *wpool) put(slots []int32, destaged int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, slots...)
	p.used -= len(slots)
	p.destaged += destaged
}

// wcIdleRelease is how long the pool stays empty and untouched before
// its slabs go back: a store whose hosts stopped writing holds no cache
// memory, and one that flushes often does not map and fault its slabs in
// again after every flush.
const wcIdleRelease = time.Minute

// release frees the slabs if no slot is in use and none was taken for
// wcIdleRelease.
func (p *wpool) release(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used == 0 && len(p.free) > 0 && now.Sub(p.lastTake) >= wcIdleRelease {
		p.freeSlabsLocked()
	}
}

// freeSlabsLocked gives every slab back. No slot may be in use.
func (p *wpool) freeSlabsLocked() {
	for i, s := range p.slabs {
		if s != nil {
			freeSlab(s, p.mapped[i])
		}
	}
	clear(p.slabs)
	p.free = p.free[:0]
}

// short says whether more than half the slots are in use.
func (p *wpool) short() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used > p.max/2
}

// page returns a slot's bytes. The caller holds the slot.
func (p *wpool) page(slot int32) []byte {
	s := p.slabs[slot/wcSlabPages]
	o := int(slot%wcSlabPages) * SectorSize
	return s[o : o+SectorSize : o+SectorSize]
}

// wentry is a cached page: its slot, and the generation of its last
// change (unique in the volume).
type wentry struct {
	slot int32
	gen  uint64
}

// wregion is which pages of a region are cached (a bit a page, so that
// destaging a region of a few pages looks up only those), and when the
// oldest was cached (monotonic, since the volume's cache was made). A
// region in the map has at least one page.
type wregion struct {
	since time.Duration
	bits  []uint64
}

// count returns how many pages of the region are cached.
func (r wregion) count() int {
	n := 0
	for _, w := range r.bits {
		n += bits.OnesCount64(w)
	}
	return n
}

// wcache is one volume's write cache.
type wcache struct {
	s     *Store
	v     *Volume
	pool  *wpool
	rpage int64 // pages per region: one full stripe of data
	epoch time.Time

	regionLocks [stripeLocks]sync.Mutex

	mu    sync.Mutex
	pages map[int64]wentry
	// npages is len(pages), stored under mu (unlock): a read of a volume
	// whose cache is empty takes no lock.
	npages  atomic.Int64
	regions map[int64]wregion
	gen     uint64
	slots   []int32 // scratch for take; guarded by mu
	// dropped: the volume was deleted (dropAll); guarded by mu. A write
	// that raced the deletion caches nothing afterwards.
	dropped bool
}

func newWcache(s *Store, v *Volume) *wcache {
	if s.wpool == nil {
		return nil
	}
	return &wcache{s: s, v: v, pool: s.wpool, rpage: int64(s.geo.Data * s.unit / SectorSize), epoch: time.Now(),
		pages: make(map[int64]wentry), regions: make(map[int64]wregion)}
}

// unlock records len(pages) in npages and lets mu go.
func (c *wcache) unlock() {
	c.npages.Store(int64(len(c.pages)))
	c.mu.Unlock()
}

// write caches p at off, both multiples of the page size. It returns
// false, having changed nothing, when the pool has no room.
func (c *wcache) write(p []byte, off int64) bool {
	first, n := off/SectorSize, int64(len(p)/SectorSize)
	c.mu.Lock()
	if c.dropped {
		c.mu.Unlock()
		return false // the write goes to the store, which refuses it
	}
	missing := 0
	for i := range n {
		if _, ok := c.pages[first+i]; !ok {
			missing++
		}
	}
	slots := c.slots[:0]
	if missing > 0 {
		var ok bool
		if slots, ok = c.pool.take(missing, slots); !ok {
			c.mu.Unlock()
			c.s.kickDestager()
			return false
		}
		c.slots = slots[:0] // kept for the next write
	}
	now := time.Since(c.epoch)
	for i := range n {
		pg := first + i
		e, ok := c.pages[pg]
		if !ok {
			e.slot, slots = slots[0], slots[1:]
			r, ok := c.regions[pg/c.rpage]
			if !ok {
				r.since = now
				r.bits = make([]uint64, (c.rpage+63)/64)
			}
			b := pg % c.rpage
			r.bits[b/64] |= 1 << (b % 64)
			c.regions[pg/c.rpage] = r
		}
		c.gen++
		e.gen = c.gen
		c.pages[pg] = e
		copy(c.pool.page(e.slot), p[i*SectorSize:])
	}
	c.unlock()
	if missing > 0 && c.pool.short() {
		c.s.kickDestager()
	}
	return true
}

// read reads len(p) bytes at off: the cached pages from the cache, the
// rest from the store. A page leaves the cache only after the store has
// it, so what the store gives for a page not cached when the cache was
// looked at is as new as the cache was.
func (c *wcache) read(p []byte, off int64) error {
	if c.npages.Load() == 0 {
		return c.s.readBytes(c.v.owner, p, off)
	}
	end := off + int64(len(p))
	first, last := off/SectorSize, (end-1)/SectorSize
	var small [4]uint64
	hit := small[:]
	if w := int((last-first)/64 + 1); w > len(hit) {
		hit = make([]uint64, w)
	}
	any := false
	c.mu.Lock()
	if len(c.pages) > 0 {
		for pg := first; pg <= last; pg++ {
			e, ok := c.pages[pg]
			if !ok {
				continue
			}
			lo, hi := max(pg*SectorSize, off), min((pg+1)*SectorSize, end)
			copy(p[lo-off:hi-off], c.pool.page(e.slot)[lo-pg*SectorSize:])
			hit[(pg-first)/64] |= 1 << ((pg - first) % 64)
			any = true
		}
	}
	c.mu.Unlock()
	if !any {
		return c.s.readBytes(c.v.owner, p, off)
	}
	for pg := first; pg <= last; {
		if hit[(pg-first)/64]&(1<<((pg-first)%64)) != 0 {
			pg++
			continue
		}
		run := pg
		for pg <= last && hit[(pg-first)/64]&(1<<((pg-first)%64)) == 0 {
			pg++
		}
		lo, hi := max(run*SectorSize, off), min(pg*SectorSize, end)
		if err := c.s.readBytes(c.v.owner, p[lo-off:hi-off], lo); err != nil {
			return err
		}
	}
	return nil
}

// A mask of region locks is one uint64: this fails to compile unless
// there are 64 of them.
var _ = [1]int{}[stripeLocks-64]

// lockRange takes the region locks of [off, end), in ascending order, and
// returns which, for unlockRange.
func (c *wcache) lockRange(off, end int64) (held uint64) {
	rb := c.rpage * SectorSize
	for r := off / rb; r <= (end-1)/rb && r-off/rb < stripeLocks; r++ {
		held |= 1 << (r % stripeLocks)
	}
	for w := held; w != 0; w &= w - 1 {
		c.regionLocks[bits.TrailingZeros64(w)].Lock()
	}
	return held
}

// unlockRange lets go of the region locks lockRange took.
func (c *wcache) unlockRange(held uint64) {
	for w := held; w != 0; w &= w - 1 {
		c.regionLocks[bits.TrailingZeros64(w)].Unlock()
	}
}

// through runs op, a change of [off, end) that bypasses the cache, under
// the range's region locks. Cached pages it overlaps first take the
// change too (apply copies the new bytes of [lo, hi) into dst), so that
// reads see it at once and a later destage writes it again rather than
// older bytes; pages it covers whole leave the cache once op is done,
// unless written again meanwhile.
func (c *wcache) through(off, end int64, apply func(dst []byte, lo, hi int64), op func() error) error {
	if end <= off {
		return op()
	}
	defer c.unlockRange(c.lockRange(off, end))
	type touched struct {
		pg  int64
		gen uint64
	}
	var covered []touched
	first, last := off/SectorSize, (end-1)/SectorSize
	change := func(pg int64, e wentry) {
		lo, hi := max(pg*SectorSize, off), min((pg+1)*SectorSize, end)
		apply(c.pool.page(e.slot)[lo-pg*SectorSize:hi-pg*SectorSize], lo, hi)
		c.gen++
		e.gen = c.gen
		c.pages[pg] = e
		if hi-lo == SectorSize {
			covered = append(covered, touched{pg, e.gen})
		}
	}
	c.mu.Lock()
	if last-first >= int64(len(c.pages)) {
		// A range larger than the cache (a discard of the volume, say):
		// walk the cache, not the range.
		for pg, e := range c.pages {
			if pg >= first && pg <= last {
				change(pg, e)
			}
		}
	} else {
		for pg := first; pg <= last; pg++ {
			if e, ok := c.pages[pg]; ok {
				change(pg, e)
			}
		}
	}
	c.mu.Unlock()
	if err := op(); err != nil {
		return err
	}
	if len(covered) == 0 {
		return nil
	}
	var freed []int32
	c.mu.Lock()
	for _, t := range covered {
		if e, ok := c.pages[t.pg]; ok && e.gen == t.gen {
			freed = c.forgetLocked(t.pg, e, freed)
		}
	}
	c.unlock()
	c.pool.put(freed, 0)
	return nil
}

// forgetLocked drops page pg (entry e) from the maps and adds its slot
// to freed.
func (c *wcache) forgetLocked(pg int64, e wentry, freed []int32) []int32 {
	delete(c.pages, pg)
	r := c.regions[pg/c.rpage]
	i := pg % c.rpage
	r.bits[i/64] &^= 1 << (i % 64) // the map's value shares bits
	if r.count() == 0 {
		delete(c.regions, pg/c.rpage)
	}
	return append(freed, e.slot)
}

// testHookDestage, when set (by tests), runs in every destage between
// taking the pages and writing them to the log.
var testHookDestage func()

// destage writes region r's cached pages to the log and drops those not
// written again meanwhile.
func (c *wcache) destage(r int64, buf []byte) error {
	l := &c.regionLocks[r%stripeLocks]
	l.Lock()
	defer l.Unlock()
	base := r * c.rpage
	type taken struct {
		i   int64 // page in the region
		gen uint64
	}
	c.mu.Lock()
	reg, ok := c.regions[r]
	if !ok {
		c.mu.Unlock()
		return nil
	}
	pages := make([]taken, 0, reg.count())
	for w, word := range reg.bits {
		for word != 0 {
			i := int64(w*64 + bits.TrailingZeros64(word))
			word &= word - 1
			e := c.pages[base+i]
			copy(buf[i*SectorSize:], c.pool.page(e.slot))
			pages = append(pages, taken{i, e.gen})
		}
	}
	c.mu.Unlock()
	if testHookDestage != nil {
		testHookDestage()
	}
	c.s.throttle() // as any writer: a destager must not outrun the checkpoints
	var written int64
	for k := 0; k < len(pages); {
		j := k + 1 // pages[k:j] are consecutive
		for j < len(pages) && pages[j].i == pages[j-1].i+1 {
			j++
		}
		lo, hi := pages[k].i, pages[j-1].i+1
		if err := c.s.writeBytes(c.v.owner, &c.v.locks, buf[lo*SectorSize:hi*SectorSize], (base+lo)*SectorSize, false); err != nil {
			return fmt.Errorf("chunkstore: write cache of volume %q: %w", c.v.name, err)
		}
		written += (hi - lo) * SectorSize
		k = j
	}
	var freed []int32
	c.mu.Lock()
	for _, t := range pages {
		if e, ok := c.pages[base+t.i]; ok && e.gen == t.gen {
			freed = c.forgetLocked(base+t.i, e, freed)
		}
	}
	if reg, ok := c.regions[r]; ok {
		reg.since = time.Since(c.epoch) // what stays was cached during the write
		c.regions[r] = reg
	}
	c.unlock()
	c.pool.put(freed, written)
	return nil
}

// due returns the regions to destage, oldest first: all of them, those
// cached longer than expire, or (short) the oldest until half of them.
func (c *wcache) due(all bool, expire time.Duration, short bool) []int64 {
	type aged struct {
		r     int64
		since time.Duration
	}
	c.mu.Lock()
	list := make([]aged, 0, len(c.regions))
	for r, reg := range c.regions {
		list = append(list, aged{r, reg.since})
	}
	c.mu.Unlock()
	slices.SortFunc(list, func(a, b aged) int {
		if d := cmp.Compare(a.since, b.since); d != 0 {
			return d
		}
		return cmp.Compare(a.r, b.r)
	})
	now := time.Since(c.epoch)
	out := make([]int64, 0, len(list))
	for i, a := range list {
		if all || now-a.since >= expire || (short && i < (len(list)+1)/2) {
			out = append(out, a.r)
		}
	}
	if all {
		slices.Sort(out) // in address order: the log writes them in order
	}
	return out
}

// flush destages every region cached now.
func (c *wcache) flush() error {
	rs := c.due(true, 0, false)
	if len(rs) == 0 {
		return nil
	}
	buf := make([]byte, c.rpage*SectorSize)
	for _, r := range rs {
		if err := c.destage(r, buf); err != nil {
			return err
		}
	}
	return nil
}

// dropAll forgets every cached page (the volume was deleted).
func (c *wcache) dropAll() {
	c.mu.Lock()
	freed := make([]int32, 0, len(c.pages))
	for _, e := range c.pages {
		freed = append(freed, e.slot)
	}
	clear(c.pages)
	clear(c.regions)
	c.dropped = true
	c.unlock()
	c.pool.put(freed, 0)
}

// flushCaches destages every volume's cache, for Sync and Close.
func (s *Store) flushCaches() error {
	if s.wpool == nil {
		return nil
	}
	for _, v := range s.volumeList() {
		if err := v.wc.flush(); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) kickDestager() {
	select {
	case s.wcKick <- struct{}{}:
	default:
	}
}

// destager writes out pages that waited DefaultWriteCacheExpire, and the
// oldest half of every volume's regions while the pool is more than half
// used. It runs while the store is open, if it has a write cache.
func (s *Store) destager() {
	defer close(s.wcDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.wcKick:
		case now := <-t.C:
			s.wpool.release(now)
		}
		for _, v := range s.volumeList() {
			if v.usable() != nil {
				continue
			}
			rs := v.wc.due(false, s.opts.wcExpire, s.wpool.short())
			if len(rs) == 0 {
				continue
			}
			buf := make([]byte, v.wc.rpage*SectorSize)
			for _, r := range rs {
				if err := v.wc.destage(r, buf); err != nil {
					s.log.Warn("chunkstore: destaging the write cache failed", "volume", v.name, "err", err)
					break
				}
			}
		}
	}
}
