package chunkstore

import (
	"math/bits"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// readHeader reads the header region of shard i of slot and decodes its
// header and, for a version 2 header, the stripe summary after it.
func (s *Store) readHeader(slot uint64, i int, runs []sumRun) (shardHeader, []sumRun, error) {
	pos := s.devOf(slot, i)
	d := s.devs[pos]
	f := d.files.Load()
	if f == nil || f.data == nil || !(d.readable() || d.writable()) {
		return shardHeader{}, runs, &shardError{fault: faultUnavailable, dev: pos, err: errUnavailable}
	}
	h := s.bufs.hdr()
	defer s.bufs.putHdr(h)
	d.reads.Add(1)
	if err := vfs.ReadFull(f.data, h.b[:], s.slotOffset(slot)); err != nil {
		d.errs.Add(1)
		return shardHeader{}, runs, &shardError{fault: faultIO, dev: pos, err: err}
	}
	d.readBytes.Add(int64(len(h.b)))
	hdr, err := decodeShardHeader(h.b[:], nil)
	if err != nil {
		return hdr, runs, &shardError{fault: faultHeader, dev: pos, err: err}
	}
	if hdr.Version == formatV1 {
		return hdr, runs, nil
	}
	runs, err = decodeSummary(h.b[shardHeaderSize(hdr.Length):], runs)
	if err != nil {
		return hdr, runs, &shardError{fault: faultHeader, dev: pos, err: err}
	}
	return hdr, runs, nil
}

// summaryOf returns what the stripe in slot holds, as runs in order: from
// the first header that reads (log stripes), or, for a stripe written by
// format version 1, from its key (stripe Index of Owner holds that
// owner's sectors from Index × capSectors on).
func (s *Store) summaryOf(key stripeKey, ext extent, sectors int) ([]sumRun, error) {
	if key.Owner != logOwner {
		return []sumRun{{Owner: key.Owner, LBA: key.Index * uint64(s.capSectors()), N: uint32(sectors)}}, nil
	}
	var last error
	for i := range s.n {
		if ext.Missing&(1<<s.devOf(ext.Slot, i)) != 0 || ext.Zero&(1<<i) != 0 {
			continue
		}
		hdr, runs, err := s.readHeader(ext.Slot, i, nil)
		if err == nil && (hdr.Store != s.id || hdr.Owner != key.Owner || hdr.Index != key.Index || hdr.Gen != ext.Gen) {
			err = corruptf("slot %d shard %d holds another stripe", ext.Slot, i)
		}
		if err == nil {
			return runs, nil
		}
		last = err
	}
	if last == nil {
		last = ErrTooManyFailures
	}
	return nil, last
}

// replay is the roll-forward at Open: it examines the slots the adopted
// checkpoint reserved for the log, in the order the log uses them, and
// applies every complete stripe written after the checkpoint's snapshot
// (a generation above logGen): K or more shards whose headers name it
// and whose sectors all verify. Its summary maps its sectors, each only
// over an older mapping (the checkpoint's, or a stripe replayed before
// it). A stripe with fewer good shards was cut by the crash and was never
// made durable; shards of a complete stripe that are bad are marked
// missing for repair. The log keeps at most maxInflight stripes in flight,
// so past that many slots in a row without a stripe there is nothing
// more. It returns the generations of the stripes applied.
func (s *Store) replay(resv []uint64, logGen uint64) map[uint64]bool {
	applied, miss := map[uint64]bool{}, 0
	var keep []uint64
	for idx, slot := range resv {
		if miss > maxInflight+1 {
			keep = append(keep, resv[idx:]...)
			break
		}
		gen, ok := s.replayStripe(slot, logGen)
		if !ok {
			miss++
			keep = append(keep, slot)
			continue
		}
		miss = 0
		applied[gen] = true
	}
	s.resv = keep
	return applied
}

// replayStripe examines and applies one slot, and returns the generation
// of the stripe it applied.
func (s *Store) replayStripe(slot uint64, logGen uint64) (uint64, bool) {
	type view struct {
		hdr  shardHeader
		runs []sumRun
		err  error
	}
	views := make([]view, s.n)
	parallel(s.n, true, func(i int) {
		views[i].hdr, views[i].runs, views[i].err = s.readHeader(slot, i, nil)
	})
	// The generation most headers name.
	votes := map[uint64]int{}
	for i, v := range views {
		h := v.hdr
		if v.err != nil || h.Version != formatVersion || h.Store != s.id || h.Owner != logOwner ||
			h.Index != slot || h.Slot != slot || h.Shard != i || h.Geo != s.geo || h.Gen <= logGen {
			views[i].err = errUnavailable
			continue
		}
		votes[h.Gen]++
	}
	var gen uint64
	for g, c := range votes {
		if c > votes[gen] {
			gen = g
		}
	}
	if votes[gen] == 0 {
		return 0, false
	}
	var ref *view
	for i := range views {
		if views[i].err == nil && views[i].hdr.Gen == gen {
			ref = &views[i]
			break
		}
	}
	L := ref.hdr.Length
	sectors := 0
	for _, r := range ref.runs {
		sectors += int(r.N)
	}
	if L > s.unit || sectors == 0 || sectors > s.geo.Data*L/SectorSize {
		return 0, false
	}
	key := stripeKey{Owner: logOwner, Index: slot}
	// A short stripe's zero padding was never written: those shards count
	// as good without a header (their slots hold older stripes' bytes,
	// of generations the checkpoint knows).
	ext := extent{Slot: slot, Gen: gen, ShardLen: L, Zero: s.zeroShards(key, L, sectors)}
	if votes[gen]+bits.OnesCount64(ext.Zero) < s.geo.Data {
		return 0, false
	}
	// Every sector of every shard that claims the stripe must verify.
	var bad uint64
	good := 0
	buf := make([]byte, L)
	for i, v := range views {
		if ext.Zero&(1<<i) != 0 {
			good++
			continue
		}
		if v.err != nil || v.hdr.Gen != gen || v.hdr.Length != L {
			bad |= 1 << s.devOf(slot, i)
			continue
		}
		if err := s.readShardRange(key, ext, i, 0, L, buf); err != nil {
			bad |= 1 << s.devOf(slot, i)
			continue
		}
		good++
	}
	if good < s.geo.Data {
		return 0, false
	}
	ext.Missing = bad
	s.lmu.Lock()
	defer s.lmu.Unlock()
	si := s.slotAt(slot)
	*si = slotInfo{used: true, key: key, ext: ext, sectors: int32(sectors)}
	s.dataSlots++
	s.dataCap += s.capOf(si)
	s.dirtySlots[slot] = struct{}{}
	pos := 0
	for _, r := range ref.runs {
		m := s.owners[r.Owner]
		for j := 0; m != nil && j < int(r.N); {
			lba := r.LBA + uint64(j)
			l, n, mapped := m.find(lba, int(r.N)-j)
			if mapped && s.slots[l.slot].ext.Gen > gen {
				j += n
				continue
			}
			s.mapUpdateLocked(m, lba, n, true, slot, pos+j)
			j += n
		}
		pos += int(r.N)
	}
	if si.live == 0 {
		s.releaseSlotLocked(slot)
	}
	if bad != 0 {
		s.repair.add(slot)
	}
	return gen, true
}
