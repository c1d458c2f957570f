package chunkstore

import (
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"

	"github.com/capsule-storage/capsule/internal/crc32c"
)

// On-disk records. Every record has named offsets, a CRC32C over the bytes
// before it, an encoder that writes into a caller's buffer, and a decoder
// that checks every length and field before trusting it. Integers are
// little-endian, except bbolt keys, which are big-endian so that they sort.
// Reserved bytes must be zero, so that every valid record has exactly one
// encoding (the fuzz targets check that decode∘encode is the identity).

func checksum(b []byte) uint32 { return crc32c.Checksum(b) }

var le = binary.LittleEndian

// SectorSize is the checksum granule: each 4 KiB of a shard has its own
// CRC32C, so a 4 KiB read verifies 4 KiB, not the whole shard.
const SectorSize = 4096

// shardHeaderRegion is the space reserved in front of every shard's
// payload, which keeps payloads 4 KiB aligned.
const shardHeaderRegion = 4096

// MaxVolumeSize bounds a volume's size (1 PiB).
const MaxVolumeSize = 1 << 50

// MaxChunkSize bounds a chunk's length (256 MiB).
const MaxChunkSize = 256 << 20

// MaxStripeUnit bounds the stripe unit so a shard's sector checksums fit
// its header region.
const MaxStripeUnit = 1 << 20

// ---------------------------------------------------------------------------
// Identity record: the file "identity" in every device directory, written
// once when the device joins a store.

const (
	idOffMagic    = 0   // u32 identityMagic
	idOffVersion  = 4   // u16 formatVersion
	idOffLength   = 6   // u16 identitySize
	idOffDevice   = 8   // [16] this device's UUID
	idOffStore    = 24  // [16] the store's UUID
	idOffPos      = 40  // u16 position in the device list
	idOffData     = 42  // u8 K
	idOffParity   = 43  // u8 M
	idOffUnit     = 44  // u32 stripe unit in bytes
	idOffSector   = 48  // u32 SectorSize
	idOffCreated  = 52  // u64 Unix nanoseconds when the device joined
	idOffGolden   = 60  // [32] SHA-256 of the golden parity (golden.go)
	idOffReserved = 92  // [32] zero
	idOffCRC      = 124 // u32 CRC32C of [0, 124)
	identitySize  = 128

	identityMagic = 0x44495343 // "CSID"
	// formatVersion is the version this build writes: 2, the
	// log-structured store. Version 1 (copy-on-write stripes, a block map
	// per stripe) is read only by Migrate; its shard headers stay valid
	// in a migrated store.
	formatVersion = 2
	formatV1      = 1
)

// identity describes one device of a store.
type identity struct {
	Device  uuid.UUID
	Store   uuid.UUID
	Pos     int
	Geo     Geometry
	Unit    int
	Created int64
	Golden  [32]byte
}

func (id *identity) marshalInto(b []byte) {
	_ = b[identitySize-1]
	clear(b[:identitySize])
	le.PutUint32(b[idOffMagic:], identityMagic)
	le.PutUint16(b[idOffVersion:], formatVersion)
	le.PutUint16(b[idOffLength:], identitySize)
	copy(b[idOffDevice:], id.Device[:])
	copy(b[idOffStore:], id.Store[:])
	le.PutUint16(b[idOffPos:], uint16(id.Pos))
	b[idOffData] = byte(id.Geo.Data)
	b[idOffParity] = byte(id.Geo.Parity)
	le.PutUint32(b[idOffUnit:], uint32(id.Unit))
	le.PutUint32(b[idOffSector:], SectorSize)
	le.PutUint64(b[idOffCreated:], uint64(id.Created))
	copy(b[idOffGolden:], id.Golden[:])
	le.PutUint32(b[idOffCRC:], checksum(b[:idOffCRC]))
}

func (id *identity) encode() []byte {
	b := make([]byte, identitySize)
	id.marshalInto(b)
	return b
}

func decodeIdentity(b []byte) (identity, error) {
	id, v, err := decodeIdentityAny(b)
	if err == nil && v == formatV1 {
		return id, ErrFormatV1
	}
	return id, err
}

// decodeIdentityAny decodes an identity record of either version.
func decodeIdentityAny(b []byte) (identity, int, error) {
	id, err := decodeIdentityBody(b)
	if err != nil {
		return id, 0, err
	}
	return id, int(le.Uint16(b[idOffVersion:])), nil
}

func decodeIdentityBody(b []byte) (identity, error) {
	var id identity
	if len(b) != identitySize {
		return id, corruptf("identity record is %d bytes, want %d", len(b), identitySize)
	}
	if m := le.Uint32(b[idOffMagic:]); m != identityMagic {
		return id, corruptf("identity record magic %#x", m)
	}
	if got, want := le.Uint32(b[idOffCRC:]), checksum(b[:idOffCRC]); got != want {
		return id, corruptf("identity record checksum %#x, computed %#x", got, want)
	}
	if v := le.Uint16(b[idOffVersion:]); v != formatVersion && v != formatV1 {
		return id, corruptf("identity record version %d, this build reads %d", v, formatVersion)
	}
	if n := le.Uint16(b[idOffLength:]); n != identitySize {
		return id, corruptf("identity record says it is %d bytes", n)
	}
	if s := le.Uint32(b[idOffSector:]); s != SectorSize {
		return id, corruptf("identity record sector size %d", s)
	}
	if !allZero(b[idOffReserved:idOffCRC]) {
		return id, corruptf("identity record reserved bytes are not zero")
	}
	copy(id.Device[:], b[idOffDevice:])
	copy(id.Store[:], b[idOffStore:])
	id.Pos = int(le.Uint16(b[idOffPos:]))
	id.Geo = Geometry{Data: int(b[idOffData]), Parity: int(b[idOffParity])}
	id.Unit = int(le.Uint32(b[idOffUnit:]))
	id.Created = int64(le.Uint64(b[idOffCreated:]))
	copy(id.Golden[:], b[idOffGolden:])
	if err := id.Geo.Validate(); err != nil {
		return id, corruptf("identity record: %v", err)
	}
	if id.Pos >= id.Geo.Devices() {
		return id, corruptf("identity record position %d outside %s", id.Pos, id.Geo)
	}
	if err := validUnit(id.Unit); err != nil {
		return id, corruptf("identity record: %v", err)
	}
	return id, nil
}

// ---------------------------------------------------------------------------
// Shard header: the first bytes of every shard slot in a device's shard
// file. It says whose shard this is, so a stale or misplaced shard is never
// mistaken for the expected one, and holds a CRC32C per sector.

const (
	shOffMagic   = 0  // u32 shardMagic
	shOffVersion = 4  // u16 formatVersion
	shOffSectors = 6  // u16 n, the number of sector checksums
	shOffStore   = 8  // [16] store UUID
	shOffOwner   = 24 // u64 volume or chunk owner ID
	shOffIndex   = 32 // u64 stripe index within the owner
	shOffSlot    = 40 // u64 physical stripe slot
	shOffGen     = 48 // u64 write generation of the stripe
	shOffShard   = 56 // u16 shard index (0..K-1 data, K.. parity)
	shOffData    = 58 // u8 K
	shOffParity  = 59 // u8 M
	shOffLength  = 60 // u32 payload length in bytes
	shOffCRCs    = 64 // n × u32 CRC32C of each sector of the payload
	// then u32 CRC32C of [0, 64+4n)

	shardMagic = 0x44485343 // "CSHD"
)

// shardHeaderSize is the encoded size for a payload of length bytes.
func shardHeaderSize(length int) int { return shOffCRCs + 4*sectorsOf(length) + 4 }

func sectorsOf(length int) int { return (length + SectorSize - 1) / SectorSize }

// shardHeader identifies one shard of one stripe. A version 2 header is
// followed, at shardHeaderSize(Length), by the stripe's summary
// (encodeSummary); a version 1 header, written before Migrate, by zeros.
type shardHeader struct {
	Version int
	Store   uuid.UUID
	Owner   uint64
	Index   uint64
	Slot    uint64
	Gen     uint64
	Shard   int
	Geo     Geometry
	Length  int
	CRCs    []uint32 // one per sector of the payload
}

// marshalInto encodes h into b, which must hold shardHeaderSize(h.Length)
// bytes, and returns the encoded length.
func (h *shardHeader) marshalInto(b []byte) int {
	n := len(h.CRCs)
	size := shOffCRCs + 4*n + 4
	_ = b[size-1]
	le.PutUint32(b[shOffMagic:], shardMagic)
	ver := h.Version
	if ver == 0 {
		ver = formatVersion
	}
	le.PutUint16(b[shOffVersion:], uint16(ver))
	le.PutUint16(b[shOffSectors:], uint16(n))
	copy(b[shOffStore:], h.Store[:])
	le.PutUint64(b[shOffOwner:], h.Owner)
	le.PutUint64(b[shOffIndex:], h.Index)
	le.PutUint64(b[shOffSlot:], h.Slot)
	le.PutUint64(b[shOffGen:], h.Gen)
	le.PutUint16(b[shOffShard:], uint16(h.Shard))
	b[shOffData] = byte(h.Geo.Data)
	b[shOffParity] = byte(h.Geo.Parity)
	le.PutUint32(b[shOffLength:], uint32(h.Length))
	for i, c := range h.CRCs {
		le.PutUint32(b[shOffCRCs+4*i:], c)
	}
	le.PutUint32(b[shOffCRCs+4*n:], checksum(b[:shOffCRCs+4*n]))
	return size
}

// decodeShardHeader decodes the header at the front of b. crcs, if it has
// room, receives the sector checksums (to decode without allocating).
func decodeShardHeader(b []byte, crcs []uint32) (shardHeader, error) {
	var h shardHeader
	if len(b) < shOffCRCs+4 {
		return h, corruptf("shard header is %d bytes, want at least %d", len(b), shOffCRCs+4)
	}
	if m := le.Uint32(b[shOffMagic:]); m != shardMagic {
		return h, corruptf("shard header magic %#x", m)
	}
	n := int(le.Uint16(b[shOffSectors:]))
	if n == 0 || n > MaxStripeUnit/SectorSize {
		return h, corruptf("shard header has %d sectors", n)
	}
	if len(b) < shOffCRCs+4*n+4 {
		return h, corruptf("shard header with %d sectors cut at %d bytes", n, len(b))
	}
	end := shOffCRCs + 4*n
	if got, want := le.Uint32(b[end:]), checksum(b[:end]); got != want {
		return h, corruptf("shard header checksum %#x, computed %#x", got, want)
	}
	if v := le.Uint16(b[shOffVersion:]); v != formatVersion && v != formatV1 {
		return h, corruptf("shard header version %d", v)
	}
	h.Version = int(le.Uint16(b[shOffVersion:]))
	copy(h.Store[:], b[shOffStore:])
	h.Owner = le.Uint64(b[shOffOwner:])
	h.Index = le.Uint64(b[shOffIndex:])
	h.Slot = le.Uint64(b[shOffSlot:])
	h.Gen = le.Uint64(b[shOffGen:])
	h.Shard = int(le.Uint16(b[shOffShard:]))
	h.Geo = Geometry{Data: int(b[shOffData]), Parity: int(b[shOffParity])}
	h.Length = int(le.Uint32(b[shOffLength:]))
	if err := h.Geo.Validate(); err != nil {
		return h, corruptf("shard header: %v", err)
	}
	if h.Shard >= h.Geo.Devices() {
		return h, corruptf("shard header shard %d outside %s", h.Shard, h.Geo)
	}
	if h.Length == 0 || sectorsOf(h.Length) != n {
		return h, corruptf("shard header length %d does not match %d sectors", h.Length, n)
	}
	if cap(crcs) >= n {
		h.CRCs = crcs[:n]
	} else {
		h.CRCs = make([]uint32, n)
	}
	for i := range h.CRCs {
		h.CRCs[i] = le.Uint32(b[shOffCRCs+4*i:])
	}
	return h, nil
}

// ---------------------------------------------------------------------------
// Metadata records, stored in bbolt (meta.go). bbolt checksums only its
// meta pages, so every value carries its own CRC32C.

// superblock: bucket "store", key "super". One per replica; Seq orders
// replicas (the highest valid Seq is the current metadata).
const (
	sbOffMagic     = 0  // u32 superMagic
	sbOffVersion   = 4  // u16 formatVersion
	sbOffReserved  = 6  // u16 zero
	sbOffStore     = 8  // [16] store UUID
	sbOffData      = 24 // u8 K
	sbOffParity    = 25 // u8 M
	sbOffDevices   = 26 // u16 K+M
	sbOffUnit      = 28 // u32 stripe unit
	sbOffSeq       = 32 // u64 commit sequence number
	sbOffGenHigh   = 40 // u64 generations below this may have been used
	sbOffNextOwner = 48 // u64 next owner ID
	sbOffLogGen    = 56 // u64 (version 2) every stripe of a later generation was written after this commit's snapshot
	sbOffCRC       = 64 // u32 CRC32C of [0, 64)
	superSize      = 68
	superSizeV1    = 60 // version 1: no LogGen, CRC32C at 56

	superMagic = 0x42535343 // "CSSB"
)

type superblock struct {
	Version   int // formatVersion, or formatV1 read from a store Migrate converts
	Store     uuid.UUID
	Geo       Geometry
	Unit      int
	Seq       uint64
	GenHigh   uint64
	NextOwner uint64
	LogGen    uint64
}

func (s *superblock) encode() []byte {
	b := make([]byte, superSize)
	le.PutUint32(b[sbOffMagic:], superMagic)
	le.PutUint16(b[sbOffVersion:], formatVersion)
	copy(b[sbOffStore:], s.Store[:])
	b[sbOffData] = byte(s.Geo.Data)
	b[sbOffParity] = byte(s.Geo.Parity)
	le.PutUint16(b[sbOffDevices:], uint16(s.Geo.Devices()))
	le.PutUint32(b[sbOffUnit:], uint32(s.Unit))
	le.PutUint64(b[sbOffSeq:], s.Seq)
	le.PutUint64(b[sbOffGenHigh:], s.GenHigh)
	le.PutUint64(b[sbOffNextOwner:], s.NextOwner)
	le.PutUint64(b[sbOffLogGen:], s.LogGen)
	le.PutUint32(b[sbOffCRC:], checksum(b[:sbOffCRC]))
	return b
}

func decodeSuperblock(b []byte) (superblock, error) {
	var s superblock
	if len(b) < sbOffVersion+2 {
		return s, corruptf("superblock is %d bytes", len(b))
	}
	s.Version = int(le.Uint16(b[sbOffVersion:]))
	size, crcOff := superSize, sbOffCRC
	if s.Version == formatV1 {
		size, crcOff = superSizeV1, sbOffLogGen
	}
	if len(b) != size {
		return s, corruptf("superblock is %d bytes, want %d", len(b), size)
	}
	if m := le.Uint32(b[sbOffMagic:]); m != superMagic {
		return s, corruptf("superblock magic %#x", m)
	}
	if got, want := le.Uint32(b[crcOff:]), checksum(b[:crcOff]); got != want {
		return s, corruptf("superblock checksum %#x, computed %#x", got, want)
	}
	if s.Version != formatVersion && s.Version != formatV1 {
		return s, corruptf("superblock version %d", s.Version)
	}
	if le.Uint16(b[sbOffReserved:]) != 0 {
		return s, corruptf("superblock reserved bytes are not zero")
	}
	copy(s.Store[:], b[sbOffStore:])
	s.Geo = Geometry{Data: int(b[sbOffData]), Parity: int(b[sbOffParity])}
	if err := s.Geo.Validate(); err != nil {
		return s, corruptf("superblock: %v", err)
	}
	if n := int(le.Uint16(b[sbOffDevices:])); n != s.Geo.Devices() {
		return s, corruptf("superblock says %d devices for %s", n, s.Geo)
	}
	s.Unit = int(le.Uint32(b[sbOffUnit:]))
	if err := validUnit(s.Unit); err != nil {
		return s, corruptf("superblock: %v", err)
	}
	s.Seq = le.Uint64(b[sbOffSeq:])
	s.GenHigh = le.Uint64(b[sbOffGenHigh:])
	s.NextOwner = le.Uint64(b[sbOffNextOwner:])
	if s.Version == formatVersion {
		s.LogGen = le.Uint64(b[sbOffLogGen:])
	}
	return s, nil
}

// deviceRecord: bucket "devices", key = position (u16 big-endian). Which
// device UUID holds each position, and the progress of a rebuild.
const (
	drOffDevice      = 0  // [16] device UUID
	drOffState       = 16 // u8 deviceHealthy or deviceRebuilding
	drOffReserved    = 17 // [7] zero
	drOffStartGen    = 24 // u64 stripes of this generation or later were written to the new device
	drOffCursorOwner = 32 // u64 rebuild resumes at (owner, index)
	drOffCursorIndex = 40 // u64
	drOffCRC         = 48 // u32 CRC32C of [0, 48)
	deviceRecordSize = 52
)

const (
	recHealthy    = 1
	recRebuilding = 2
)

type deviceRecord struct {
	Device   uuid.UUID
	State    uint8
	StartGen uint64
	Cursor   stripeKey
}

func (r *deviceRecord) encode() []byte {
	b := make([]byte, deviceRecordSize)
	copy(b[drOffDevice:], r.Device[:])
	b[drOffState] = r.State
	le.PutUint64(b[drOffStartGen:], r.StartGen)
	le.PutUint64(b[drOffCursorOwner:], r.Cursor.Owner)
	le.PutUint64(b[drOffCursorIndex:], r.Cursor.Index)
	le.PutUint32(b[drOffCRC:], checksum(b[:drOffCRC]))
	return b
}

func decodeDeviceRecord(b []byte) (deviceRecord, error) {
	var r deviceRecord
	if len(b) != deviceRecordSize {
		return r, corruptf("device record is %d bytes, want %d", len(b), deviceRecordSize)
	}
	if got, want := le.Uint32(b[drOffCRC:]), checksum(b[:drOffCRC]); got != want {
		return r, corruptf("device record checksum %#x, computed %#x", got, want)
	}
	if !allZero(b[drOffReserved:drOffStartGen]) {
		return r, corruptf("device record reserved bytes are not zero")
	}
	copy(r.Device[:], b[drOffDevice:])
	r.State = b[drOffState]
	if r.State != recHealthy && r.State != recRebuilding {
		return r, corruptf("device record state %d", r.State)
	}
	r.StartGen = le.Uint64(b[drOffStartGen:])
	r.Cursor = stripeKey{Owner: le.Uint64(b[drOffCursorOwner:]), Index: le.Uint64(b[drOffCursorIndex:])}
	return r, nil
}

// volumeRecord: bucket "volumes", key = volume name.
const (
	vrOffOwner   = 0  // u64 owner ID of the volume's stripes
	vrOffSize    = 8  // u64 size in bytes
	vrOffCreated = 16 // u64 Unix nanoseconds
	vrOffCRC     = 24 // u32 CRC32C of [0, 24)
	volumeRecSz  = 28
)

type volumeRecord struct {
	Owner   uint64
	Size    int64
	Created int64
}

func (r *volumeRecord) encode() []byte {
	b := make([]byte, volumeRecSz)
	le.PutUint64(b[vrOffOwner:], r.Owner)
	le.PutUint64(b[vrOffSize:], uint64(r.Size))
	le.PutUint64(b[vrOffCreated:], uint64(r.Created))
	le.PutUint32(b[vrOffCRC:], checksum(b[:vrOffCRC]))
	return b
}

func decodeVolumeRecord(b []byte) (volumeRecord, error) {
	var r volumeRecord
	if len(b) != volumeRecSz {
		return r, corruptf("volume record is %d bytes, want %d", len(b), volumeRecSz)
	}
	if got, want := le.Uint32(b[vrOffCRC:]), checksum(b[:vrOffCRC]); got != want {
		return r, corruptf("volume record checksum %#x, computed %#x", got, want)
	}
	r.Owner = le.Uint64(b[vrOffOwner:])
	r.Size = int64(le.Uint64(b[vrOffSize:]))
	r.Created = int64(le.Uint64(b[vrOffCreated:]))
	if r.Size <= 0 || r.Size > MaxVolumeSize {
		return r, corruptf("volume record size %d", r.Size)
	}
	return r, nil
}

// extent: where one stripe lives. It is the value of bucket "map" (key =
// stripeKey) for volumes, and repeated inside a chunk record.
const (
	exOffSlot     = 0  // u64 physical stripe slot
	exOffGen      = 8  // u64 write generation
	exOffMissing  = 16 // u64 mask of device positions holding no valid shard
	exOffShardLen = 24 // u32 shard payload length
	extentBody    = 28
	exOffCRC      = 28 // u32 CRC32C of [0, 28), in a map value only
	extentSize    = 32
)

type extent struct {
	Slot     uint64
	Gen      uint64
	Missing  uint64
	ShardLen int
	// Zero, not on disk (derived from the slot's sector count:
	// Store.zeroShards), marks the data shards, by index, that hold only
	// a short stripe's zero padding: never written, read as zeros.
	Zero uint64
}

func (e *extent) putBody(b []byte) {
	le.PutUint64(b[exOffSlot:], e.Slot)
	le.PutUint64(b[exOffGen:], e.Gen)
	le.PutUint64(b[exOffMissing:], e.Missing)
	le.PutUint32(b[exOffShardLen:], uint32(e.ShardLen))
}

func getExtentBody(b []byte) (extent, error) {
	e := extent{
		Slot:     le.Uint64(b[exOffSlot:]),
		Gen:      le.Uint64(b[exOffGen:]),
		Missing:  le.Uint64(b[exOffMissing:]),
		ShardLen: int(le.Uint32(b[exOffShardLen:])),
	}
	if e.ShardLen == 0 || e.ShardLen > MaxStripeUnit {
		return e, corruptf("extent shard length %d", e.ShardLen)
	}
	return e, nil
}

func (e *extent) encode() []byte {
	b := make([]byte, extentSize)
	e.putBody(b)
	le.PutUint32(b[exOffCRC:], checksum(b[:exOffCRC]))
	return b
}

func decodeExtent(b []byte) (extent, error) {
	if len(b) != extentSize {
		return extent{}, corruptf("extent is %d bytes, want %d", len(b), extentSize)
	}
	if got, want := le.Uint32(b[exOffCRC:]), checksum(b[:exOffCRC]); got != want {
		return extent{}, corruptf("extent checksum %#x, computed %#x", got, want)
	}
	return getExtentBody(b)
}

// chunkRecord: bucket "chunks", key = chunk ID (16 bytes).
const (
	crOffOwner   = 0  // u64 owner ID of this version of the chunk
	crOffLength  = 8  // u64 length in bytes
	crOffCount   = 16 // u32 number of stripes n
	crOffExtents = 20 // n × extentBody
	// then u32 CRC32C of everything before it
)

type chunkRecord struct {
	Owner   uint64
	Length  int64
	Stripes []extent
}

func (r *chunkRecord) encode() []byte {
	n := len(r.Stripes)
	b := make([]byte, crOffExtents+extentBody*n+4)
	le.PutUint64(b[crOffOwner:], r.Owner)
	le.PutUint64(b[crOffLength:], uint64(r.Length))
	le.PutUint32(b[crOffCount:], uint32(n))
	for i := range r.Stripes {
		r.Stripes[i].putBody(b[crOffExtents+extentBody*i:])
	}
	end := crOffExtents + extentBody*n
	le.PutUint32(b[end:], checksum(b[:end]))
	return b
}

func decodeChunkRecord(b []byte) (chunkRecord, error) {
	var r chunkRecord
	if len(b) < crOffExtents+4 {
		return r, corruptf("chunk record is %d bytes", len(b))
	}
	n := int(le.Uint32(b[crOffCount:]))
	if n > MaxChunkSize/SectorSize || len(b) != crOffExtents+extentBody*n+4 {
		return r, corruptf("chunk record of %d bytes claims %d stripes", len(b), n)
	}
	end := crOffExtents + extentBody*n
	if got, want := le.Uint32(b[end:]), checksum(b[:end]); got != want {
		return r, corruptf("chunk record checksum %#x, computed %#x", got, want)
	}
	r.Owner = le.Uint64(b[crOffOwner:])
	r.Length = int64(le.Uint64(b[crOffLength:]))
	if r.Length < 0 || r.Length > MaxChunkSize {
		return r, corruptf("chunk record length %d", r.Length)
	}
	if (r.Length == 0) != (n == 0) {
		return r, corruptf("chunk record of %d bytes has %d stripes", r.Length, n)
	}
	r.Stripes = make([]extent, n)
	for i := range r.Stripes {
		e, err := getExtentBody(b[crOffExtents+extentBody*i:])
		if err != nil {
			return r, err
		}
		r.Stripes[i] = e
	}
	return r, nil
}

// stripeKey names a logical stripe: stripe Index of the volume or chunk
// version Owner. Its encoding is the bbolt key of bucket "map".
type stripeKey struct {
	Owner uint64
	Index uint64
}

const stripeKeySize = 16

func (k stripeKey) encode() []byte {
	b := make([]byte, stripeKeySize)
	binary.BigEndian.PutUint64(b[0:], k.Owner)
	binary.BigEndian.PutUint64(b[8:], k.Index)
	return b
}

func decodeStripeKey(b []byte) (stripeKey, error) {
	if len(b) != stripeKeySize {
		return stripeKey{}, corruptf("stripe key is %d bytes", len(b))
	}
	return stripeKey{Owner: binary.BigEndian.Uint64(b[0:]), Index: binary.BigEndian.Uint64(b[8:])}, nil
}

func (k stripeKey) less(o stripeKey) bool {
	return k.Owner < o.Owner || (k.Owner == o.Owner && k.Index < o.Index)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func validUnit(u int) error {
	if u < SectorSize || u > MaxStripeUnit || u%SectorSize != 0 {
		return fmt.Errorf("%w: stripe unit %d: want a multiple of %d from %d to %d", ErrInvalidOption, u, SectorSize, SectorSize, MaxStripeUnit)
	}
	return nil
}
