package perftest

import (
	"encoding/binary"
	"fmt"
)

// Op is the operation a client measures.
type Op uint8

const (
	OpWrite Op = 1 + iota
	OpRead
	OpSend
)

var opNames = map[Op]string{OpWrite: "write", OpRead: "read", OpSend: "send"}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ParseOp parses "write", "read" or "send".
func ParseOp(s string) (Op, error) {
	for o, n := range opNames {
		if n == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("%w: operation %q (want write, read or send)", ErrBadParams, s)
}

const (
	helloMagic   = 0x43505246 // "CPRF"
	replyMagic   = 0x43505250 // "CPRP"
	wireVersion  = 1
	MaxSize      = 64 << 20 // largest message a server accepts
	MaxQD        = 1024     // deepest queue a server accepts
	MaxRegion    = 256 << 20
	helloLen     = 16
	replyLen     = 32
	offMagic     = 0  // uint32 big endian
	offVersion   = 4  // uint8
	offOp        = 5  // uint8 (Hello)
	offSize      = 8  // uint32 (Hello)
	offQD        = 12 // uint32 (Hello)
	offRKey      = 8  // uint32 (Reply)
	offAddr      = 16 // uint64 (Reply)
	offRegionLen = 24 // uint64 (Reply)
)

// Hello is the client's connection private data.
//
//	0      4       5   6       8      12    16
//	| magic | ver  | op | rsvd | size | qd  |
type Hello struct {
	Op   Op
	Size uint32
	QD   uint32
}

// Validate checks the limits a server enforces.
func (h Hello) Validate() error {
	switch {
	case h.Op < OpWrite || h.Op > OpSend:
		return fmt.Errorf("%w: op %d", ErrBadParams, h.Op)
	case h.Size == 0 || h.Size > MaxSize:
		return fmt.Errorf("%w: size %d (1..%d)", ErrBadParams, h.Size, MaxSize)
	case h.QD == 0 || h.QD > MaxQD:
		return fmt.Errorf("%w: qd %d (1..%d)", ErrBadParams, h.QD, MaxQD)
	case uint64(h.Size)*uint64(h.QD) > MaxRegion:
		return fmt.Errorf("%w: size*qd over %d", ErrBadParams, MaxRegion)
	}
	return nil
}

// MarshalTo writes h into b, which must hold 16 bytes.
func (h Hello) MarshalTo(b []byte) []byte {
	b = b[:helloLen]
	clear(b)
	binary.BigEndian.PutUint32(b[offMagic:], helloMagic)
	b[offVersion] = wireVersion
	b[offOp] = byte(h.Op)
	binary.BigEndian.PutUint32(b[offSize:], h.Size)
	binary.BigEndian.PutUint32(b[offQD:], h.QD)
	return b
}

// UnmarshalBinary decodes and validates a Hello.
func (h *Hello) UnmarshalBinary(b []byte) error {
	if len(b) < helloLen {
		return fmt.Errorf("%w: hello of %d bytes", ErrBadWire, len(b))
	}
	if binary.BigEndian.Uint32(b[offMagic:]) != helloMagic || b[offVersion] != wireVersion {
		return fmt.Errorf("%w: not a perftest hello", ErrBadWire)
	}
	v := Hello{Op: Op(b[offOp]), Size: binary.BigEndian.Uint32(b[offSize:]), QD: binary.BigEndian.Uint32(b[offQD:])}
	if err := v.Validate(); err != nil {
		return err
	}
	*h = v
	return nil
}

// Reply is the server's accept private data: the region the client may
// Write and Read.
//
//	0      4     5      8      12     16     24       32
//	| magic | ver | rsvd | rkey | rsvd | addr | length |
type Reply struct {
	RKey uint32
	Addr uint64
	Len  uint64
}

// MarshalTo writes r into b, which must hold 32 bytes.
func (r Reply) MarshalTo(b []byte) []byte {
	b = b[:replyLen]
	clear(b)
	binary.BigEndian.PutUint32(b[offMagic:], replyMagic)
	b[offVersion] = wireVersion
	binary.BigEndian.PutUint32(b[offRKey:], r.RKey)
	binary.BigEndian.PutUint64(b[offAddr:], r.Addr)
	binary.BigEndian.PutUint64(b[offRegionLen:], r.Len)
	return b
}

// UnmarshalBinary decodes a Reply.
func (r *Reply) UnmarshalBinary(b []byte) error {
	if len(b) < replyLen {
		return fmt.Errorf("%w: reply of %d bytes", ErrBadWire, len(b))
	}
	if binary.BigEndian.Uint32(b[offMagic:]) != replyMagic || b[offVersion] != wireVersion {
		return fmt.Errorf("%w: not a perftest reply", ErrBadWire)
	}
	*r = Reply{
		RKey: binary.BigEndian.Uint32(b[offRKey:]),
		Addr: binary.BigEndian.Uint64(b[offAddr:]),
		Len:  binary.BigEndian.Uint64(b[offRegionLen:]),
	}
	return nil
}
