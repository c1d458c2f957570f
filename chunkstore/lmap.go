package chunkstore

// The logical map: for each owner (a volume, or one version of a chunk),
// logical 4 KiB sector → (slot, sector within the slot's stripe data),
// kept as range-merged runs in pages of pageSectors sectors. Every map is
// guarded by Store.lmu.
//
// Memory: a page costs its Go map entry (about 40 bytes), a slice header
// (24) and 16 bytes per run. Sequentially written data needs one or two
// runs per page (the log's stripes start wherever the log is), about
// 100 bytes per 256 KiB, or 400 MiB per TiB mapped; data written by
// scattered 4 KiB writes needs a run per sector, about 1.1 KiB per
// 256 KiB, or 4.4 GiB per TiB. The slot table adds about 80 bytes per
// slot (a 4+2 stripe of 64 KiB units holds 256 KiB: 320 MiB per TiB).

// pageRun maps sectors [off, off+n) of a page to sectors [sec, sec+n) of
// slot's stripe data.
type pageRun struct {
	off, n uint8
	sec    uint16
	slot   uint64
}

// ownerMap is one owner's map.
type ownerMap struct {
	pages  map[uint64][]pageRun
	dirty  map[uint64]struct{} // pages changed since the last checkpoint
	mapped int64               // sectors mapped
}

func newOwnerMap() *ownerMap {
	return &ownerMap{pages: map[uint64][]pageRun{}, dirty: map[uint64]struct{}{}}
}

// loc is where one logical sector lives.
type loc struct {
	slot uint64
	sec  int
}

// find returns how sector lba is mapped, and for how many sectors from lba
// on (at most max) the mapping continues alike: unmapped, or contiguous in
// one slot.
func (m *ownerMap) find(lba uint64, max int) (l loc, n int, mapped bool) {
	page, off := lba/pageSectors, int(lba%pageSectors)
	max = min(max, pageSectors-off)
	runs := m.pages[page]
	for _, r := range runs {
		end := int(r.off) + int(r.n)
		if off >= end {
			continue
		}
		if off < int(r.off) {
			return loc{}, min(max, int(r.off)-off), false
		}
		return loc{slot: r.slot, sec: int(r.sec) + off - int(r.off)}, min(max, end-off), true
	}
	return loc{}, max, false
}

// update maps sectors [lba, lba+n) to slot from sector sec on (or unmaps
// them, if !set), calling gone for every displaced piece. scratch is
// reused between calls.
func (m *ownerMap) update(lba uint64, n int, set bool, slot uint64, sec int, scratch *[]pageRun, gone func(slot uint64, n int)) {
	for n > 0 {
		page, off := lba/pageSectors, int(lba%pageSectors)
		k := min(n, pageSectors-off)
		var nr *pageRun
		if set {
			nr = &pageRun{off: uint8(off), n: uint8(k), sec: uint16(sec), slot: slot}
		}
		old := m.pages[page]
		out := pageUpdate((*scratch)[:0], old, off, k, nr, func(slot uint64, c int) {
			m.mapped -= int64(c)
			gone(slot, c)
		})
		*scratch = out
		if set {
			m.mapped += int64(k)
		}
		if len(out) == 0 {
			if old != nil {
				delete(m.pages, page)
				m.dirty[page] = struct{}{}
			}
		} else {
			m.pages[page] = append(old[:0], out...)
			m.dirty[page] = struct{}{}
		}
		lba += uint64(k)
		n -= k
		sec += k
	}
}

// pageUpdate writes into out the runs of a page with [off, off+k) cleared
// and, if nr is not nil, nr put in its place, merging runs that continue
// each other.
func pageUpdate(out, runs []pageRun, off, k int, nr *pageRun, gone func(slot uint64, n int)) []pageRun {
	end := off + k
	put := func(r pageRun) {
		if l := len(out); l > 0 {
			p := &out[l-1]
			if p.slot == r.slot && int(p.off)+int(p.n) == int(r.off) && int(p.sec)+int(p.n) == int(r.sec) {
				p.n += r.n
				return
			}
		}
		out = append(out, r)
	}
	placed := nr == nil
	for _, r := range runs {
		rs, re := int(r.off), int(r.off)+int(r.n)
		if re <= off {
			put(r)
			continue
		}
		if rs >= end {
			if !placed {
				put(*nr)
				placed = true
			}
			put(r)
			continue
		}
		// r overlaps [off, end): keep its parts outside.
		if rs < off {
			put(pageRun{off: r.off, n: uint8(off - rs), sec: r.sec, slot: r.slot})
		}
		gone(r.slot, min(re, end)-max(rs, off))
		if !placed {
			put(*nr)
			placed = true
		}
		if re > end {
			put(pageRun{off: uint8(end), n: uint8(re - end), sec: r.sec + uint16(end-rs), slot: r.slot})
		}
	}
	if !placed {
		put(*nr)
	}
	return out
}
