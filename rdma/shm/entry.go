package shm

import (
	"encoding/binary"
	"fmt"
)

// A ring entry is a 32-byte header followed by Len payload bytes, padded
// so that the next entry starts on a 32-byte boundary. All fields are
// little-endian.
//
//	off size field
//	  0    1 type      entSend, entSendImm, entSendInv, entWriteImm, entPad
//	  1    1 flags     entFirst | entLast | entSolicited
//	  2    2 reserved  zero
//	  4    4 len       payload bytes in this entry
//	  8    4 msn       message sequence number, 1, 2, 3, ... (0 in a pad)
//	 12    4 imm       immediate data (SendImm, WriteImm)
//	 16    4 inv       rkey to invalidate (SendInv)
//	 20    4 total     message length: the sum of len over its fragments;
//	                   for WriteImm the length of the Write, reported as
//	                   WC.ByteLen
//	 24    8 reserved  zero
//
// A message is one entry with entFirst|entLast, or a run of fragments:
// the first with entFirst, the last with entLast, all with the same type,
// msn, imm, inv and total. A pad entry fills the ring to its end so the
// next entry starts at offset 0; its len covers the rest of the ring.
const (
	entOffType  = 0
	entOffFlags = 1
	entOffRsvd0 = 2
	entOffLen   = 4
	entOffMSN   = 8
	entOffImm   = 12
	entOffInv   = 16
	entOffTotal = 20
	entOffRsvd1 = 24

	entHdrLen = 32 // header bytes, and the alignment of entries
)

type entryType uint8

const (
	entSend     entryType = 1
	entSendImm  entryType = 2
	entSendInv  entryType = 3
	entWriteImm entryType = 4
	entPad      entryType = 5
)

var entryTypeNames = [...]string{"", "Send", "SendImm", "SendInv", "WriteImm", "Pad"}

func (t entryType) String() string {
	if int(t) < len(entryTypeNames) && t != 0 {
		return entryTypeNames[t]
	}
	return fmt.Sprintf("entryType(%d)", uint8(t))
}

const (
	entFirst     uint8 = 1 << 0
	entLast      uint8 = 1 << 1
	entSolicited uint8 = 1 << 2
	entFlagsMask       = entFirst | entLast | entSolicited
)

// entry is a decoded ring entry header.
type entry struct {
	Type  entryType
	Flags uint8
	Len   uint32
	MSN   uint32
	Imm   uint32
	Inv   uint32
	Total uint32
}

// entrySize is the ring bytes an entry with n payload bytes takes.
func entrySize(n uint32) uint64 { return entHdrLen + alignUp(uint64(n), entHdrLen) }

func alignUp(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }

// putEntry encodes e into b[:entHdrLen]. It allocates nothing; b must hold
// entHdrLen bytes.
func putEntry(b []byte, e entry) {
	_ = b[entHdrLen-1]
	b[entOffType] = byte(e.Type)
	b[entOffFlags] = e.Flags
	binary.LittleEndian.PutUint16(b[entOffRsvd0:], 0)
	binary.LittleEndian.PutUint32(b[entOffLen:], e.Len)
	binary.LittleEndian.PutUint32(b[entOffMSN:], e.MSN)
	binary.LittleEndian.PutUint32(b[entOffImm:], e.Imm)
	binary.LittleEndian.PutUint32(b[entOffInv:], e.Inv)
	binary.LittleEndian.PutUint32(b[entOffTotal:], e.Total)
	binary.LittleEndian.PutUint64(b[entOffRsvd1:], 0)
}

// decodeEntry decodes and checks the header at the start of b. It checks
// what the header says about itself; whether the entry fits the ring and
// the message stream is for ringEntry and rxStream.
func decodeEntry(b []byte) (entry, error) {
	if len(b) < entHdrLen {
		return entry{}, fmt.Errorf("%w: ring entry needs %d bytes, have %d", ErrShortBuffer, entHdrLen, len(b))
	}
	e := entry{
		Type:  entryType(b[entOffType]),
		Flags: b[entOffFlags],
		Len:   binary.LittleEndian.Uint32(b[entOffLen:]),
		MSN:   binary.LittleEndian.Uint32(b[entOffMSN:]),
		Imm:   binary.LittleEndian.Uint32(b[entOffImm:]),
		Inv:   binary.LittleEndian.Uint32(b[entOffInv:]),
		Total: binary.LittleEndian.Uint32(b[entOffTotal:]),
	}
	if binary.LittleEndian.Uint16(b[entOffRsvd0:]) != 0 || binary.LittleEndian.Uint64(b[entOffRsvd1:]) != 0 {
		return entry{}, fmt.Errorf("%w: reserved bytes set", ErrBadEntry)
	}
	if e.Flags&^entFlagsMask != 0 {
		return entry{}, fmt.Errorf("%w: unknown flags %#x", ErrBadEntry, e.Flags)
	}
	switch e.Type {
	case entPad:
		if e.Flags != 0 || e.MSN != 0 || e.Imm != 0 || e.Inv != 0 || e.Total != 0 {
			return entry{}, fmt.Errorf("%w: pad with message fields", ErrBadEntry)
		}
		return e, nil
	case entSend, entSendImm, entSendInv, entWriteImm:
	default:
		return entry{}, fmt.Errorf("%w: unknown type %d", ErrBadEntry, e.Type)
	}
	switch {
	case e.MSN == 0:
		return entry{}, fmt.Errorf("%w: %v with msn 0", ErrBadEntry, e.Type)
	case e.Type != entSendImm && e.Type != entWriteImm && e.Imm != 0:
		return entry{}, fmt.Errorf("%w: %v with immediate data", ErrBadEntry, e.Type)
	case e.Type != entSendInv && e.Inv != 0:
		return entry{}, fmt.Errorf("%w: %v with an rkey to invalidate", ErrBadEntry, e.Type)
	case e.Type == entWriteImm && (e.Len != 0 || e.Flags&(entFirst|entLast) != entFirst|entLast):
		return entry{}, fmt.Errorf("%w: WriteImm must be one entry without payload", ErrBadEntry)
	case e.Type != entWriteImm && e.Len > e.Total:
		return entry{}, fmt.Errorf("%w: fragment of %d bytes in a message of %d", ErrBadEntry, e.Len, e.Total)
	case e.Flags&(entFirst|entLast) == entFirst|entLast && e.Type != entWriteImm && e.Len != e.Total:
		return entry{}, fmt.Errorf("%w: whole message of %d bytes says total %d", ErrBadEntry, e.Len, e.Total)
	}
	return e, nil
}

// ringEntry finds the entry at consumer index head of a ring whose data
// area is data (a power of two bytes) and whose producer index is tail.
// It returns the entry, the offset of its payload in data and the ring
// bytes it takes. ok is false when the ring is empty. A tail or header
// that does not fit the ring is an error: the producer is broken.
func ringEntry(data []byte, head, tail uint64) (e entry, payload int, size uint64, ok bool, err error) {
	ringLen := uint64(len(data))
	avail := tail - head
	switch {
	case avail == 0:
		return entry{}, 0, 0, false, nil
	case avail > ringLen || avail%entHdrLen != 0 || head%entHdrLen != 0:
		return entry{}, 0, 0, false, fmt.Errorf("%w: head %d tail %d in a ring of %d", ErrBadRing, head, tail, ringLen)
	}
	pos := head & (ringLen - 1)
	e, err = decodeEntry(data[pos:])
	if err != nil {
		return entry{}, 0, 0, false, err
	}
	size = entrySize(e.Len)
	if uint64(e.Len) > ringLen || size > avail || pos+size > ringLen {
		return entry{}, 0, 0, false, fmt.Errorf("%w: %v of %d bytes at %d does not fit (%d published, ring %d)", ErrBadEntry, e.Type, e.Len, pos, avail, ringLen)
	}
	if e.Type == entPad && pos+size != ringLen {
		return entry{}, 0, 0, false, fmt.Errorf("%w: pad at %d does not end the ring", ErrBadEntry, pos)
	}
	return e, int(pos) + entHdrLen, size, true, nil
}

// rxStream checks the order of entries of one direction: sequence numbers
// increase by one per message, fragments continue the message they
// belong to, and their lengths add up to its total.
type rxStream struct {
	next uint32 // msn of the next message
	open bool   // a message has begun and not ended
	cur  entry  // first fragment of the open message
	got  uint32 // payload bytes of the open message so far
}

// accept checks e against the stream and advances it. It reports whether
// e begins a message and whether it ends one.
func (s *rxStream) accept(e entry) (first, last bool, err error) {
	if e.Type == entPad {
		return false, false, nil
	}
	if s.next == 0 {
		s.next = 1
	}
	if e.Flags&entFirst != 0 {
		if s.open {
			return false, false, fmt.Errorf("%w: message %d begins inside message %d", ErrBadStream, e.MSN, s.cur.MSN)
		}
		if e.MSN != s.next {
			return false, false, fmt.Errorf("%w: message %d, want %d", ErrBadStream, e.MSN, s.next)
		}
		s.open, s.cur, s.got = true, e, 0
		first = true
	} else {
		c := s.cur
		if !s.open || e.Type != c.Type || e.MSN != c.MSN || e.Imm != c.Imm || e.Inv != c.Inv || e.Total != c.Total || e.Flags&entSolicited != c.Flags&entSolicited {
			return false, false, fmt.Errorf("%w: fragment of message %d does not continue message %d", ErrBadStream, e.MSN, c.MSN)
		}
	}
	if e.Type != entWriteImm {
		if e.Len > s.cur.Total-s.got {
			return false, false, fmt.Errorf("%w: message %d longer than its total %d", ErrBadStream, e.MSN, s.cur.Total)
		}
		s.got += e.Len
	}
	if e.Flags&entLast != 0 {
		if e.Type != entWriteImm && s.got != s.cur.Total {
			return false, false, fmt.Errorf("%w: message %d ends after %d of %d bytes", ErrBadStream, e.MSN, s.got, s.cur.Total)
		}
		s.open = false
		s.next++
		if s.next == 0 {
			s.next = 1
		}
		last = true
	}
	return first, last, nil
}
