package shm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// A QP block is the memfd one connection's two QPs share. The dialer
// creates it and passes it in its connection request. Side 0 is the
// dialer, side 1 the acceptor. Every word a side writes is on a cache line
// of its own.
//
//	off                    size     what
//	0                      64       header: magic "CSQB" (0x42515343), version 1, ringsize, 52 reserved bytes
//	blkOffEP + side*epLen  epLen    endpoint of side: the words below
//	blkOffRings + side*ringsize     the ring of messages side receives
//
// Endpoint of side s (offsets within it):
//
//	epOffDoorbell   u32  1 while s's provider goroutine sleeps (futex word)
//	epOffHead       u64  consumer index of s's ring (s writes)
//	epOffTail       u64  producer index of s's ring (the peer writes)
//	epOffSpaceWait  u32  1 while the peer waits for room in s's ring (peer sets, s clears)
//	epOffAck        u32  msn of the last message s has delivered (s writes)
//	epOffTermMSN    u32  the message s's error is about, 0 if none (s writes, before epOffTerm)
//	epOffTerm       u32  the rdma.WCStatus the peer should take when s errors the connection (s writes)
//	epOffHazard     u32  the rkey s is accessing in the peer's key table, 0 if none (s writes)
//
// Ring indexes are byte counts that only grow; the position in the ring is
// index mod ringsize. Both are multiples of entHdrLen.
const (
	blkOffMagic    = 0
	blkOffVersion  = 4
	blkOffRingSize = 8
	blkHdrLen      = 64

	blkOffEP = 512
	epLen    = 512

	epOffDoorbell  = 0
	epOffHead      = 64
	epOffTail      = 128
	epOffSpaceWait = 192
	epOffAck       = 256
	epOffTermMSN   = 320
	epOffTerm      = 324
	epOffHazard    = 384

	blkOffRings = 4096

	blkMagic   = 0x42515343 // "CSQB"
	blkVersion = 1

	// defaultRingSize is the bytes of each direction's ring.
	defaultRingSize = 256 << 10
	minRingSize     = 4096
	maxRingSize     = 64 << 20
)

// blockSize is the memfd size of a QP block with rings of ringSize bytes.
func blockSize(ringSize uint32) int { return blkOffRings + 2*int(ringSize) }

func putBlockHeader(mem []byte, ringSize uint32) {
	binary.LittleEndian.PutUint32(mem[blkOffMagic:], blkMagic)
	binary.LittleEndian.PutUint32(mem[blkOffVersion:], blkVersion)
	binary.LittleEndian.PutUint32(mem[blkOffRingSize:], ringSize)
}

// checkBlock validates the header of a mapped QP block against the ring
// size the connection request announced.
func checkBlock(mem []byte, ringSize uint32) error {
	if len(mem) < blkHdrLen {
		return fmt.Errorf("%w: QP block of %d bytes", ErrBadTable, len(mem))
	}
	switch {
	case binary.LittleEndian.Uint32(mem[blkOffMagic:]) != blkMagic,
		binary.LittleEndian.Uint32(mem[blkOffVersion:]) != blkVersion:
		return fmt.Errorf("%w: QP block header %x", ErrBadTable, mem[:12])
	case binary.LittleEndian.Uint32(mem[blkOffRingSize:]) != ringSize,
		ringSize < minRingSize || ringSize > maxRingSize || ringSize&(ringSize-1) != 0,
		len(mem) < blockSize(ringSize):
		return fmt.Errorf("%w: QP block of %d bytes with rings of %d", ErrBadTable, len(mem), ringSize)
	}
	return nil
}

// endpoint is one side's words in a mapped QP block.
type endpoint struct {
	doorbell  *atomic.Uint32
	head      *atomic.Uint64
	tail      *atomic.Uint64
	spaceWait *atomic.Uint32
	ack       *atomic.Uint32
	termMSN   *atomic.Uint32
	term      *atomic.Uint32
	hazard    *atomic.Uint32
	ring      []byte // the data of the ring this side receives
}

func blockEndpoint(mem []byte, side int, ringSize uint32) endpoint {
	base := blkOffEP + side*epLen
	p := unsafe.Pointer(&mem[base : base+epLen][0])
	r := blkOffRings + side*int(ringSize)
	return endpoint{
		doorbell:  (*atomic.Uint32)(unsafe.Add(p, epOffDoorbell)),
		head:      (*atomic.Uint64)(unsafe.Add(p, epOffHead)),
		tail:      (*atomic.Uint64)(unsafe.Add(p, epOffTail)),
		spaceWait: (*atomic.Uint32)(unsafe.Add(p, epOffSpaceWait)),
		ack:       (*atomic.Uint32)(unsafe.Add(p, epOffAck)),
		termMSN:   (*atomic.Uint32)(unsafe.Add(p, epOffTermMSN)),
		term:      (*atomic.Uint32)(unsafe.Add(p, epOffTerm)),
		hazard:    (*atomic.Uint32)(unsafe.Add(p, epOffHazard)),
		ring:      mem[r : r+int(ringSize) : r+int(ringSize)],
	}
}
