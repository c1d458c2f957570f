package chunkstore

import "encoding/binary"

// The records of the log-structured store (format version 2): the stripe
// summary behind every version 2 shard header, the slot records, the map
// pages, the version 2 chunk record and the log reservation. Conventions
// as in format.go.

// ---------------------------------------------------------------------------
// Stripe summary: which logical sectors a log stripe holds, in order. It
// follows the shard header (at shardHeaderSize(Length) in the header
// region) in every shard of the stripe, data and parity alike, so any one
// shard's header tells the cleaner and the roll-forward what the stripe
// holds.
//
//	u32 r, the number of runs
//	r × run: u64 owner, u64 first logical sector, u32 sectors
//	u32 CRC32C of the above
//
// Run i covers the stripe's data sectors that follow run i-1's.

const (
	sumRunSize = 20
	sumFixed   = 8 // count and CRC
)

// sumRun is one run of a stripe summary: n sectors of owner from lba on.
type sumRun struct {
	Owner uint64
	LBA   uint64
	N     uint32
}

// summarySize is the encoded size of a summary of r runs.
func summarySize(r int) int { return sumFixed + sumRunSize*r }

// maxSummaryRuns is how many runs fit in a header region beside the header
// of a full shard of unit bytes.
func maxSummaryRuns(unit int) int {
	return (shardHeaderRegion - shardHeaderSize(unit) - sumFixed) / sumRunSize
}

func encodeSummary(b []byte, runs []sumRun) int {
	n := summarySize(len(runs))
	_ = b[n-1]
	le.PutUint32(b, uint32(len(runs)))
	for i, r := range runs {
		o := 4 + sumRunSize*i
		le.PutUint64(b[o:], r.Owner)
		le.PutUint64(b[o+8:], r.LBA)
		le.PutUint32(b[o+16:], r.N)
	}
	le.PutUint32(b[n-4:], checksum(b[:n-4]))
	return n
}

// decodeSummary decodes the summary at the front of b, appending its runs
// to out.
func decodeSummary(b []byte, out []sumRun) ([]sumRun, error) {
	if len(b) < sumFixed {
		return out, corruptf("stripe summary cut at %d bytes", len(b))
	}
	r := int(le.Uint32(b))
	if r > shardHeaderRegion/sumRunSize || len(b) < summarySize(r) {
		return out, corruptf("stripe summary of %d runs in %d bytes", r, len(b))
	}
	n := summarySize(r)
	if got, want := le.Uint32(b[n-4:]), checksum(b[:n-4]); got != want {
		return out, corruptf("stripe summary checksum %#x, computed %#x", got, want)
	}
	for i := range r {
		o := 4 + sumRunSize*i
		run := sumRun{Owner: le.Uint64(b[o:]), LBA: le.Uint64(b[o+8:]), N: le.Uint32(b[o+16:])}
		if run.Owner == logOwner || run.N == 0 || run.LBA+uint64(run.N) < run.LBA {
			return out, corruptf("stripe summary run %d: owner %d, %d sectors at %d", i, run.Owner, run.N, run.LBA)
		}
		out = append(out, run)
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Slot record: bucket "slots", key = slot (u64 big-endian). What a slot
// holds: the key its shard headers carry ({logOwner, slot} for log
// stripes, the stripe's own key for a stripe written by format version 1),
// where and how it was written, and how many data sectors it holds.

const (
	srOffOwner   = 0  // u64 header key owner
	srOffIndex   = 8  // u64 header key index
	srOffExtent  = 16 // extentBody
	srOffSectors = 44 // u32 data sectors held
	srOffCRC     = 48 // u32 CRC32C of [0, 48)
	slotRecSize  = 52
)

// slotRecord is the persistent part of a slotInfo.
type slotRecord struct {
	Key     stripeKey
	Ext     extent
	Sectors int
}

func (r *slotRecord) encode() []byte {
	b := make([]byte, slotRecSize)
	le.PutUint64(b[srOffOwner:], r.Key.Owner)
	le.PutUint64(b[srOffIndex:], r.Key.Index)
	r.Ext.putBody(b[srOffExtent:])
	le.PutUint32(b[srOffSectors:], uint32(r.Sectors))
	le.PutUint32(b[srOffCRC:], checksum(b[:srOffCRC]))
	return b
}

func decodeSlotRecord(b []byte) (slotRecord, error) {
	var r slotRecord
	if len(b) != slotRecSize {
		return r, corruptf("slot record is %d bytes, want %d", len(b), slotRecSize)
	}
	if got, want := le.Uint32(b[srOffCRC:]), checksum(b[:srOffCRC]); got != want {
		return r, corruptf("slot record checksum %#x, computed %#x", got, want)
	}
	r.Key = stripeKey{Owner: le.Uint64(b[srOffOwner:]), Index: le.Uint64(b[srOffIndex:])}
	e, err := getExtentBody(b[srOffExtent:])
	if err != nil {
		return r, err
	}
	r.Ext = e
	r.Sectors = int(le.Uint32(b[srOffSectors:]))
	if r.Sectors == 0 || r.Sectors > MaxDevices*MaxStripeUnit/SectorSize {
		return r, corruptf("slot record of %d sectors", r.Sectors)
	}
	return r, nil
}

func slotKey(slot uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], slot)
	return k[:]
}

// ---------------------------------------------------------------------------
// Map page: bucket "pages", key = pageKey (owner, page index; big-endian,
// so an owner's pages sort together). A page maps pageSectors logical
// sectors; its value lists the mapped runs in order:
//
//	u16 r
//	r × run: u8 first sector in the page, u8 sectors, u16 first sector in
//	the slot's stripe data, u64 slot
//	u32 CRC32C of the above
//
// An unmapped page has no record.

const (
	pageSectors = 64
	pageRunSize = 12
)

func pageKey(owner, page uint64) []byte {
	var k [16]byte
	binary.BigEndian.PutUint64(k[:], owner)
	binary.BigEndian.PutUint64(k[8:], page)
	return k[:]
}

func decodePageKey(b []byte) (owner, page uint64, err error) {
	if len(b) != 16 {
		return 0, 0, corruptf("page key is %d bytes", len(b))
	}
	return binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), nil
}

func encodePage(runs []pageRun) []byte {
	n := 2 + pageRunSize*len(runs) + 4
	b := make([]byte, n)
	le.PutUint16(b, uint16(len(runs)))
	for i, r := range runs {
		o := 2 + pageRunSize*i
		b[o] = r.off
		b[o+1] = r.n
		le.PutUint16(b[o+2:], r.sec)
		le.PutUint64(b[o+4:], r.slot)
	}
	le.PutUint32(b[n-4:], checksum(b[:n-4]))
	return b
}

func decodePage(b []byte) ([]pageRun, error) {
	if len(b) < 6 {
		return nil, corruptf("map page is %d bytes", len(b))
	}
	r := int(le.Uint16(b))
	if r == 0 || r > pageSectors || len(b) != 2+pageRunSize*r+4 {
		return nil, corruptf("map page of %d bytes claims %d runs", len(b), r)
	}
	n := len(b)
	if got, want := le.Uint32(b[n-4:]), checksum(b[:n-4]); got != want {
		return nil, corruptf("map page checksum %#x, computed %#x", got, want)
	}
	runs := make([]pageRun, r)
	end := 0
	for i := range runs {
		o := 2 + pageRunSize*i
		runs[i] = pageRun{off: b[o], n: b[o+1], sec: le.Uint16(b[o+2:]), slot: le.Uint64(b[o+4:])}
		if runs[i].n == 0 || int(runs[i].off) < end || int(runs[i].off)+int(runs[i].n) > pageSectors {
			return nil, corruptf("map page run %d: %d sectors at %d", i, runs[i].n, runs[i].off)
		}
		end = int(runs[i].off) + int(runs[i].n)
	}
	return runs, nil
}

// ---------------------------------------------------------------------------
// Chunk record, version 2: bucket "chunks", key = chunk ID. The chunk's
// data is mapped like a volume's, by its owner's map pages.

const (
	c2OffOwner  = 0  // u64 owner ID of this version of the chunk
	c2OffLength = 8  // u64 length in bytes
	c2OffCRC    = 16 // u32 CRC32C of [0, 16)
	chunkRec2Sz = 20
)

func (r *chunkRecord) encodeV2() []byte {
	b := make([]byte, chunkRec2Sz)
	le.PutUint64(b[c2OffOwner:], r.Owner)
	le.PutUint64(b[c2OffLength:], uint64(r.Length))
	le.PutUint32(b[c2OffCRC:], checksum(b[:c2OffCRC]))
	return b
}

func decodeChunkRecordV2(b []byte) (chunkRecord, error) {
	var r chunkRecord
	if len(b) != chunkRec2Sz {
		return r, corruptf("chunk record is %d bytes, want %d", len(b), chunkRec2Sz)
	}
	if got, want := le.Uint32(b[c2OffCRC:]), checksum(b[:c2OffCRC]); got != want {
		return r, corruptf("chunk record checksum %#x, computed %#x", got, want)
	}
	r.Owner = le.Uint64(b[c2OffOwner:])
	r.Length = int64(le.Uint64(b[c2OffLength:]))
	if r.Length < 0 || r.Length > MaxChunkSize || r.Owner == logOwner {
		return r, corruptf("chunk record: owner %d, length %d", r.Owner, r.Length)
	}
	return r, nil
}

// ---------------------------------------------------------------------------
// Log reservation: bucket "store", key "resv". The slots the log will
// write next, in order; the roll-forward at Open examines them.
//
//	u32 n, n × u64 slot, u32 CRC32C

func encodeResv(slots []uint64) []byte {
	n := 4 + 8*len(slots) + 4
	b := make([]byte, n)
	le.PutUint32(b, uint32(len(slots)))
	for i, s := range slots {
		le.PutUint64(b[4+8*i:], s)
	}
	le.PutUint32(b[n-4:], checksum(b[:n-4]))
	return b
}

func decodeResv(b []byte) ([]uint64, error) {
	if len(b) < 8 {
		return nil, corruptf("log reservation is %d bytes", len(b))
	}
	c := int(le.Uint32(b))
	if c > 1<<24 || len(b) != 4+8*c+4 {
		return nil, corruptf("log reservation of %d bytes claims %d slots", len(b), c)
	}
	if got, want := le.Uint32(b[len(b)-4:]), checksum(b[:len(b)-4]); got != want {
		return nil, corruptf("log reservation checksum %#x, computed %#x", got, want)
	}
	out := make([]uint64, c)
	for i := range out {
		out[i] = le.Uint64(b[4+8*i:])
	}
	return out, nil
}
