package shm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

// A key table is one memfd per PD, mapped read-write by its owner and
// read-only by every peer that connects to a QP of the PD. It is a 64-byte
// header and KeyTableCapacity entries of 32 bytes; entry i describes the
// region whose key has index i (key = index<<8 | generation). Fields are
// little-endian and, in a live table, read and written with atomic loads
// and stores.
//
// Header:
//
//	off size field
//	  0    4 magic     "CSKT" (0x544b5343)
//	  4    4 version   1
//	  8    4 capacity  entries
//	 12    4 entsize   32
//	 16   48 reserved  zero
//
// Entry:
//
//	off size field
//	  0    4 state     the region's key while remote access may start; 0 once
//	                   deregistered or invalidated
//	  4    4 access    rdma.Access bits
//	  8    8 base      the owner's virtual address of the region's first byte
//	 16    8 length    region bytes
//	 24    8 serial    the region's memfd, as named in a fetch request; 0 for
//	                   registered Go memory, which a peer cannot map
//
// The owner writes access, base, length and serial before it stores the
// key in state, and changes them only after state is 0 and no peer
// holds the key in its hazard word (see doc.go, "Deregistration").
const (
	ktOffMagic    = 0
	ktOffVersion  = 4
	ktOffCapacity = 8
	ktOffEntSize  = 12
	ktHdrLen      = 64

	keOffState  = 0
	keOffAccess = 4
	keOffBase   = 8
	keOffLength = 16
	keOffSerial = 24
	keLen       = 32

	ktMagic   = 0x544b5343 // "CSKT"
	ktVersion = 1
)

// KeyTableCapacity is how many regions a PD can hold at once.
const KeyTableCapacity = 1 << 16

// keyTableSize is the memfd size of a table of capacity entries.
func keyTableSize(capacity uint32) int { return ktHdrLen + int(capacity)*keLen }

// keyEntry is a decoded key-table entry.
type keyEntry struct {
	State  uint32
	Access rdma.Access
	Base   uint64
	Length uint64
	Serial uint64
}

// putKeyEntry encodes e into b[:keLen] without allocating.
func putKeyEntry(b []byte, e keyEntry) {
	_ = b[keLen-1]
	binary.LittleEndian.PutUint32(b[keOffState:], e.State)
	binary.LittleEndian.PutUint32(b[keOffAccess:], uint32(e.Access))
	binary.LittleEndian.PutUint64(b[keOffBase:], e.Base)
	binary.LittleEndian.PutUint64(b[keOffLength:], e.Length)
	binary.LittleEndian.PutUint64(b[keOffSerial:], e.Serial)
}

// decodeKeyEntry decodes and checks a key-table entry.
func decodeKeyEntry(b []byte) (keyEntry, error) {
	if len(b) < keLen {
		return keyEntry{}, fmt.Errorf("%w: key entry needs %d bytes, have %d", ErrShortBuffer, keLen, len(b))
	}
	e := keyEntry{
		State:  binary.LittleEndian.Uint32(b[keOffState:]),
		Access: rdma.Access(binary.LittleEndian.Uint32(b[keOffAccess:])),
		Base:   binary.LittleEndian.Uint64(b[keOffBase:]),
		Length: binary.LittleEndian.Uint64(b[keOffLength:]),
		Serial: binary.LittleEndian.Uint64(b[keOffSerial:]),
	}
	return e, e.check()
}

// check validates an entry. An entry with state 0 is free and valid
// whatever its other fields say.
func (e keyEntry) check() error {
	switch {
	case e.State == 0:
		return nil
	case e.State&0xff == 0:
		return fmt.Errorf("%w: key %#x has generation 0", ErrBadKeyEntry, e.State)
	case e.Access&^rdma.AccessAll != 0:
		return fmt.Errorf("%w: unknown access bits %#x", ErrBadKeyEntry, uint32(e.Access))
	case e.Length == 0:
		return fmt.Errorf("%w: empty region", ErrBadKeyEntry)
	case e.Base+e.Length < e.Base:
		return fmt.Errorf("%w: region wraps the address space", ErrBadKeyEntry)
	}
	return nil
}

// allows reports whether [addr, addr+n) lies in the region and the region
// grants want. The entry must be live (State != 0) and checked.
func (e keyEntry) allows(addr, n uint64, want rdma.Access) bool {
	return e.Access&want == want && addr >= e.Base && n <= e.Length && addr-e.Base <= e.Length-n
}

// keyTableHeader checks the header of a mapped key table.
func checkKeyTable(mem []byte) (capacity uint32, err error) {
	if len(mem) < ktHdrLen {
		return 0, fmt.Errorf("%w: key table of %d bytes", ErrBadTable, len(mem))
	}
	magic := binary.LittleEndian.Uint32(mem[ktOffMagic:])
	version := binary.LittleEndian.Uint32(mem[ktOffVersion:])
	capacity = binary.LittleEndian.Uint32(mem[ktOffCapacity:])
	entSize := binary.LittleEndian.Uint32(mem[ktOffEntSize:])
	switch {
	case magic != ktMagic || version != ktVersion || entSize != keLen:
		return 0, fmt.Errorf("%w: key table header %x", ErrBadTable, mem[:16])
	case capacity == 0 || capacity > 1<<24 || keyTableSize(capacity) > len(mem):
		return 0, fmt.Errorf("%w: key table capacity %d in %d bytes", ErrBadTable, capacity, len(mem))
	}
	return capacity, nil
}

func putKeyTableHeader(mem []byte, capacity uint32) {
	binary.LittleEndian.PutUint32(mem[ktOffMagic:], ktMagic)
	binary.LittleEndian.PutUint32(mem[ktOffVersion:], ktVersion)
	binary.LittleEndian.PutUint32(mem[ktOffCapacity:], capacity)
	binary.LittleEndian.PutUint32(mem[ktOffEntSize:], keLen)
}

// liveEntry is entry i of a mapped key table, read and written with
// atomics. i must be below the table's checked capacity.
type liveEntry struct{ p unsafe.Pointer }

func keyTableEntry(mem []byte, i uint32) liveEntry {
	off := ktHdrLen + int(i)*keLen
	return liveEntry{unsafe.Pointer(&mem[off : off+keLen][0])}
}

func (l liveEntry) state() *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Add(l.p, keOffState)) }

// load reads the entry with atomic loads, state first. The other fields
// are stable while the reader's hazard word holds the key (doc.go).
func (l liveEntry) load() keyEntry {
	return keyEntry{
		State:  (*atomic.Uint32)(unsafe.Add(l.p, keOffState)).Load(),
		Access: rdma.Access((*atomic.Uint32)(unsafe.Add(l.p, keOffAccess)).Load()),
		Base:   (*atomic.Uint64)(unsafe.Add(l.p, keOffBase)).Load(),
		Length: (*atomic.Uint64)(unsafe.Add(l.p, keOffLength)).Load(),
		Serial: (*atomic.Uint64)(unsafe.Add(l.p, keOffSerial)).Load(),
	}
}

// publish writes the fields of e and then stores its state, which makes
// the key usable by peers.
func (l liveEntry) publish(e keyEntry) {
	(*atomic.Uint32)(unsafe.Add(l.p, keOffAccess)).Store(uint32(e.Access))
	(*atomic.Uint64)(unsafe.Add(l.p, keOffBase)).Store(e.Base)
	(*atomic.Uint64)(unsafe.Add(l.p, keOffLength)).Store(e.Length)
	(*atomic.Uint64)(unsafe.Add(l.p, keOffSerial)).Store(e.Serial)
	l.state().Store(e.State)
}
