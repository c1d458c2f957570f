package target

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// MaxNamespaces is the highest NSID a subsystem serves (NN of Identify
// Controller): one active namespace list holds them all.
const MaxNamespaces = 1024

// NamespaceConfig describes a namespace for Subsystem.AddNamespace.
type NamespaceConfig struct {
	// NSID is the namespace ID, 1 to MaxNamespaces; 0 takes the lowest
	// free one.
	NSID uint32
	// Device holds the data. The subsystem owns it from now on: Close of
	// the target syncs it and closes it if it is an io.Closer.
	Device blockdev.Device
	// BlockSize is the logical block size, 512 or 4096; 0 means 512.
	// The namespace holds Device.Size()/BlockSize blocks.
	BlockSize int
	// UUID and NGUID identify the namespace to hosts. Zero values are
	// derived from the subsystem NQN and the NSID (DeriveNamespaceIDs),
	// so they are the same every time the namespace is configured alike;
	// set them to keep identifiers that were stored elsewhere.
	UUID  [16]byte
	NGUID [16]byte
	// Vendor serves the vendor-specific I/O commands (opcodes 80h to
	// FFh) on the namespace (vendor.go); without it they are refused with
	// Invalid Command Opcode. A namespace with a Vendor handler and no
	// Device has no blocks (NSZE 0): Flush syncs the handler, and Close
	// of the target closes it if it is an io.Closer.
	Vendor VendorHandler
	// Reservations keeps the namespace's reservations across restarts
	// when a host asks for Persist Through Power Loss (ptpl.go); without
	// it they are in memory only and RESCAP does not claim PTPL.
	Reservations ReservationStore
	// ANAGroupID is the namespace's ANA group (ana.go), 1 to
	// MaxANAGroups; 0 puts it in the group of its NSID, as SPDK does.
	// Namespaces may share a group: its state on a listener is theirs.
	ANAGroupID uint32
}

// Namespace is a namespace of a subsystem: a block device seen in blocks.
// Its methods are safe for concurrent use.
type Namespace struct {
	sub         *Subsystem
	nsid        uint32
	dev         blockdev.Device
	blockSize   int
	blockShift  uint
	blocks      uint64
	uuid        [16]byte
	nguid       [16]byte
	nonBlocking bool
	vendor      VendorHandler
	anaGroup    uint32 // ANAGRPID

	// res is the namespace's reservation (reservation.go).
	res reservation

	// Counters for the SMART / Health log.
	readCommands  atomic.Uint64
	writeCommands atomic.Uint64
	bytesRead     atomic.Uint64
	bytesWritten  atomic.Uint64
	// Counters by kind of command, for metrics (stats.go).
	io [NumIOKinds]ioCounters
}

func newNamespace(sub *Subsystem, cfg NamespaceConfig) (*Namespace, error) {
	bs := cfg.BlockSize
	if bs == 0 {
		bs = 512
	}
	if bs != 512 && bs != 4096 {
		return nil, fmt.Errorf("%w: block size %d: want 512 or 4096", ErrInvalidNamespace, bs)
	}
	if cfg.Device == nil && cfg.Vendor != nil {
		cfg.Device = vendorDevice{cfg.Vendor}
	}
	if cfg.Device == nil {
		return nil, fmt.Errorf("%w: no device", ErrInvalidNamespace)
	}
	if cfg.ANAGroupID > MaxANAGroups {
		return nil, fmt.Errorf("%w: ANA group %d: want 1 to %d, or 0 for the NSID's", ErrInvalidNamespace, cfg.ANAGroupID, MaxANAGroups)
	}
	if cfg.ANAGroupID == 0 {
		cfg.ANAGroupID = cfg.NSID
	}
	blocks := cfg.Device.Size() / int64(bs)
	if blocks < 1 && cfg.Vendor == nil {
		return nil, fmt.Errorf("%w: device of %d bytes holds no %d-byte block", ErrInvalidNamespace, cfg.Device.Size(), bs)
	}
	ns := &Namespace{
		sub:         sub,
		nsid:        cfg.NSID,
		dev:         cfg.Device,
		blockSize:   bs,
		blockShift:  uint(bits.TrailingZeros(uint(bs))),
		blocks:      uint64(blocks),
		uuid:        cfg.UUID,
		nguid:       cfg.NGUID,
		nonBlocking: blockdev.IsNonBlocking(cfg.Device),
		vendor:      cfg.Vendor,
		anaGroup:    cfg.ANAGroupID,
		res:         reservation{store: cfg.Reservations},
	}
	uuid, nguid := DeriveNamespaceIDs(sub.nqn, cfg.NSID)
	if ns.uuid == [16]byte{} {
		ns.uuid = uuid
	}
	if ns.nguid == [16]byte{} {
		ns.nguid = nguid
	}
	return ns, nil
}

// NamespaceStats are a namespace's I/O counters since it was added (the
// SMART / Health log reports them too).
type NamespaceStats struct {
	ReadCommands, WriteCommands uint64
	BytesRead, BytesWritten     uint64
}

// Stats returns the namespace's I/O counters.
func (ns *Namespace) Stats() NamespaceStats {
	return NamespaceStats{
		ReadCommands:  ns.readCommands.Load(),
		WriteCommands: ns.writeCommands.Load(),
		BytesRead:     ns.bytesRead.Load(),
		BytesWritten:  ns.bytesWritten.Load(),
	}
}

// NSID returns the namespace ID.
func (ns *Namespace) NSID() uint32 { return ns.nsid }

// BlockSize returns the logical block size in bytes.
func (ns *Namespace) BlockSize() int { return ns.blockSize }

// Blocks returns the namespace size in logical blocks (NSZE).
func (ns *Namespace) Blocks() uint64 { return ns.blocks }

// UUID returns the namespace UUID.
func (ns *Namespace) UUID() [16]byte { return ns.uuid }

// NGUID returns the namespace globally unique identifier.
func (ns *Namespace) NGUID() [16]byte { return ns.nguid }

// Device returns the device the namespace sits on.
func (ns *Namespace) Device() blockdev.Device { return ns.dev }

// capsuleNamespaceUUIDSpace is the name space UUID under which namespace
// UUIDs are derived (RFC 9562 version 5): a fixed random UUID of capsule's.
var capsuleNamespaceUUIDSpace = [16]byte{
	0x6b, 0x1c, 0x3e, 0x52, 0x0f, 0x8d, 0x4a, 0x27, 0x9e, 0x41, 0x5d, 0x33, 0xc8, 0x70, 0x12, 0xa9,
}

// DeriveNamespaceIDs returns the UUID and NGUID a namespace gets when its
// configuration sets none: the UUID is a name-based (version 5, SHA-1)
// UUID of "<subsystem NQN>/<NSID>" under a fixed name space of capsule's,
// the NGUID the first 16 bytes of SHA-256 of the same name. Both are
// stable across restarts and distinct for distinct names.
func DeriveNamespaceIDs(subNQN string, nsid uint32) (uuid, nguid [16]byte) {
	name := fmt.Appendf(nil, "%s/%d", subNQN, nsid)
	h := sha1.New()
	h.Write(capsuleNamespaceUUIDSpace[:])
	h.Write(name)
	copy(uuid[:], h.Sum(nil))
	uuid[6] = uuid[6]&0x0f | 0x50 // version 5
	uuid[8] = uuid[8]&0x3f | 0x80 // RFC 9562 variant
	sum := sha256.Sum256(append([]byte("capsule NGUID "), name...))
	copy(nguid[:], sum[:16])
	return uuid, nguid
}

// deriveSerialNumber returns the SN a subsystem gets when none is set: 20
// hexadecimal digits of SHA-256 of its NQN.
func deriveSerialNumber(nqn string) string {
	sum := sha256.Sum256([]byte("capsule SN " + nqn))
	return fmt.Sprintf("%016x%04x", binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint16(sum[8:10]))
}

// rangeOK reports whether blocks [slba, slba+n) lie in the namespace.
func (ns *Namespace) rangeOK(slba, n uint64) bool {
	return slba < ns.blocks && n <= ns.blocks-slba
}
