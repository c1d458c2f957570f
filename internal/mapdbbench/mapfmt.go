package mapdbbench

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
)

// Sizes of the persisted map-page format.
const (
	KeySize    = 16 // owner u64 BE, page index u64 BE
	RunSize    = 12 // u8 offset in page, u8 length, u16 sector in stripe, u64 physical slot
	headerSize = 4  // u16 run count, u16 flags
	crcSize    = 4  // CRC32C of header and runs
	// SectorsPerPage is the number of 4 KiB logical sectors a page covers.
	SectorsPerPage = 64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ValueSize is the encoded size of a page value with runs runs.
func ValueSize(runs int) int { return headerSize + runs*RunSize + crcSize }

// Key returns the map key of page index page of owner.
func Key(owner, page uint64) []byte {
	k := make([]byte, KeySize)
	binary.BigEndian.PutUint64(k[0:8], owner)
	binary.BigEndian.PutUint64(k[8:16], page)
	return k
}

// Run is one extent of a page mapped to consecutive physical slots.
type Run struct {
	Offset uint8  // first sector of the run within the page
	Length uint8  // sectors in the run
	Sector uint16 // sector within the stripe
	Slot   uint64 // physical slot of the first sector
}

// EncodeValue appends the encoding of runs to dst and returns it.
func EncodeValue(dst []byte, runs []Run) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(runs)))
	dst = binary.BigEndian.AppendUint16(dst, 0)
	for _, r := range runs {
		dst = append(dst, r.Offset, r.Length)
		dst = binary.BigEndian.AppendUint16(dst, r.Sector)
		dst = binary.BigEndian.AppendUint64(dst, r.Slot)
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// CheckValue reports whether v is a well-formed page value and returns
// its run count.
func CheckValue(v []byte) (int, bool) {
	if len(v) < headerSize+crcSize {
		return 0, false
	}
	n := int(binary.BigEndian.Uint16(v))
	if len(v) != ValueSize(n) {
		return 0, false
	}
	body := v[:len(v)-crcSize]
	return n, crc32.Checksum(body, castagnoli) == binary.BigEndian.Uint32(v[len(body):])
}

// Layout is how the volume behind the map was written, which sets the
// shape of the page values and of the checkpoint batches.
type Layout int

const (
	// Sequential is a volume written sequentially: two runs per page
	// (32-byte values), and a checkpoint covers consecutive pages.
	Sequential Layout = iota
	// Random is a volume written with 4 KiB random writes: 64 runs per
	// page (776-byte values), and a checkpoint touches pages uniformly at
	// random.
	Random
)

func (l Layout) String() string {
	if l == Sequential {
		return "sequential"
	}
	return "random"
}

// Runs is the number of runs per page in the layout.
func (l Layout) Runs() int {
	if l == Sequential {
		return 2
	}
	return SectorsPerPage
}

// physSlots is the number of physical 4 KiB slots of a 1 TiB store.
const physSlots = 1 << 28

// makeValue returns a page value of the layout. A sequential page is two
// runs of 32 sectors in consecutive slots from head; a random page has
// one single-sector run per sector, each in a slot written at another
// time (uniform over the device).
func makeValue(l Layout, rng *rand.Rand, head uint64) []byte {
	runs := make([]Run, 0, l.Runs())
	if l == Sequential {
		runs = append(runs,
			Run{Offset: 0, Length: 32, Sector: uint16(head % 1024), Slot: head},
			Run{Offset: 32, Length: 32, Sector: uint16((head + 32) % 1024), Slot: head + 32})
	} else {
		for i := range SectorsPerPage {
			s := rng.Uint64N(physSlots)
			runs = append(runs, Run{Offset: uint8(i), Length: 1, Sector: uint16(s % 1024), Slot: s})
		}
	}
	return EncodeValue(make([]byte, 0, ValueSize(len(runs))), runs)
}
