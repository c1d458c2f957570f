package devsvc

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Opcodes: 80h | n<<2 | direction, as in package fs's protocol (doc.go
// has the table).
const (
	OpOpen     nvmeof.Opcode = 0x83 // in+out: name → OpenReply
	OpClose    nvmeof.Opcode = 0x84 // none
	OpRead     nvmeof.Opcode = 0x8A // out: data
	OpWrite    nvmeof.Opcode = 0x8D // in: data
	OpSync     nvmeof.Opcode = 0x90 // none
	OpFstat    nvmeof.Opcode = 0x96 // out: Info
	OpTruncate nvmeof.Opcode = 0x98 // none
	OpPunch    nvmeof.Opcode = 0x9C // none
	OpRename   nvmeof.Opcode = 0xA1 // in: old name, new name
	OpRemove   nvmeof.Opcode = 0xA5 // in: name
	OpMkdirAll nvmeof.Opcode = 0xA9 // in: name
	OpSyncDir  nvmeof.Opcode = 0xAD // in: name
	OpStat     nvmeof.Opcode = 0xB3 // in+out: name → Info
	OpList     nvmeof.Opcode = 0xB7 // in+out: name → names
	// OpReadRanges reads several ranges of an open file in one command:
	// in+out, ranges → their data.
	OpReadRanges nvmeof.Opcode = 0xBB
)

// READRANGES' request is RangeSize bytes per range: the offset (u64) and
// the length (u32) in little endian, and four reserved zero bytes. One
// command reads at most MaxRanges ranges, each at most MaxRangeLen
// bytes; the reply is their data one after the other.
const (
	RangeSize   = 16
	MaxRanges   = 64
	MaxRangeLen = 1 << 30
)

// Range is one range of a READRANGES command.
type Range struct {
	Off int64
	Len int
}

// AppendRanges appends the request bytes of rs to b.
func AppendRanges(b []byte, rs []Range) []byte {
	for _, r := range rs {
		b = appendRange(b, r.Off, r.Len)
	}
	return b
}

func appendRange(b []byte, off int64, n int) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	return binary.LittleEndian.AppendUint32(b, 0)
}

// ParseRanges reads a READRANGES request, appending its ranges to dst:
// whole ranges, at least one and at most MaxRanges, each with an offset
// below 2^62, a length of at most MaxRangeLen and its reserved bytes zero.
func ParseRanges(dst []Range, b []byte) ([]Range, error) {
	if len(b) == 0 || len(b)%RangeSize != 0 || len(b)/RangeSize > MaxRanges {
		return nil, fmt.Errorf("devsvc: a READRANGES request of %d bytes", len(b))
	}
	out := dst
	for ; len(b) > 0; b = b[RangeSize:] {
		off := binary.LittleEndian.Uint64(b)
		n := binary.LittleEndian.Uint32(b[8:])
		if off > 1<<62 || n > MaxRangeLen || binary.LittleEndian.Uint32(b[12:]) != 0 {
			return nil, fmt.Errorf("devsvc: READRANGES range at %d of %d bytes (reserved %08x)", off, n, binary.LittleEndian.Uint32(b[12:]))
		}
		out = append(out, Range{Off: int64(off), Len: int(n)})
	}
	return out, nil
}

// OpName names an opcode for messages.
func OpName(op nvmeof.Opcode) string {
	switch op {
	case OpOpen:
		return "OPEN"
	case OpClose:
		return "CLOSE"
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	case OpSync:
		return "SYNC"
	case OpFstat:
		return "FSTAT"
	case OpTruncate:
		return "TRUNCATE"
	case OpPunch:
		return "PUNCH"
	case OpRename:
		return "RENAME"
	case OpRemove:
		return "REMOVE"
	case OpMkdirAll:
		return "MKDIRALL"
	case OpSyncDir:
		return "SYNCDIR"
	case OpStat:
		return "STAT"
	case OpList:
		return "LIST"
	case OpReadRanges:
		return "READRANGES"
	}
	return fmt.Sprintf("opcode %02Xh", uint8(op))
}

// mutating reports whether op changes the device: those carry the
// head's epoch and are fenced.
func mutating(op nvmeof.Opcode) bool {
	switch op {
	case OpWrite, OpSync, OpTruncate, OpPunch, OpRename, OpRemove, OpMkdirAll, OpSyncDir:
		return true
	}
	return false
}

// Open flags (OPEN CDW12), Linux's values whatever the platform.
const (
	FlagWrite  = 0x2   // O_RDWR
	FlagCreate = 0x40  // O_CREAT
	FlagExcl   = 0x80  // O_EXCL
	FlagTrunc  = 0x200 // O_TRUNC
	flagsKnown = FlagWrite | FlagCreate | FlagExcl | FlagTrunc
)

// Mode bits of Info: the file type as in Linux's st_mode.
const (
	modeDir  = 0o040000
	modeReg  = 0o100000
	modeType = 0o170000
)

// InfoSize is the size of an Info record:
//
//	0   u64  size in bytes
//	8   u32  mode: type (S_IFDIR 040000, S_IFREG 100000) and permissions
//	12  u32  reserved, zero
//	16  i64  modification time, nanoseconds since 1970 UTC
//	24  u64  reserved, zero
const InfoSize = 32

// Info is what STAT and FSTAT return, and OPEN after the handle.
type Info struct {
	Size  uint64
	Mode  uint32
	Mtime int64
}

// MarshalTo writes i into b[:InfoSize].
func (i *Info) MarshalTo(b []byte) {
	_ = b[InfoSize-1]
	binary.LittleEndian.PutUint64(b[0:], i.Size)
	binary.LittleEndian.PutUint32(b[8:], i.Mode)
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], uint64(i.Mtime))
	binary.LittleEndian.PutUint64(b[24:], 0)
}

// Unmarshal reads an Info record; reserved bytes must be zero and the
// type one of the two.
func (i *Info) Unmarshal(b []byte) error {
	if len(b) != InfoSize {
		return fmt.Errorf("%w: info record of %d bytes, want %d", ErrProtocol, len(b), InfoSize)
	}
	if binary.LittleEndian.Uint32(b[12:]) != 0 || binary.LittleEndian.Uint64(b[24:]) != 0 {
		return fmt.Errorf("%w: info record: reserved bytes set", ErrProtocol)
	}
	i.Size = binary.LittleEndian.Uint64(b[0:])
	i.Mode = binary.LittleEndian.Uint32(b[8:])
	i.Mtime = int64(binary.LittleEndian.Uint64(b[16:]))
	if t := i.Mode & modeType; t != modeDir && t != modeReg {
		return fmt.Errorf("%w: info record: file type %o", ErrProtocol, t)
	}
	if i.Size > 1<<62 {
		return fmt.Errorf("%w: info record: size %d", ErrProtocol, i.Size)
	}
	return nil
}

// infoOf describes a host file.
func infoOf(st fs.FileInfo) Info {
	mode := uint32(st.Mode().Perm())
	if st.IsDir() {
		mode |= modeDir
	} else {
		mode |= modeReg
	}
	return Info{Size: uint64(max(st.Size(), 0)), Mode: mode, Mtime: st.ModTime().UnixNano()}
}

// OpenReplySize is the size of OPEN's reply: the handle (u64) at 0, then
// the file's Info at 8.
const OpenReplySize = 8 + InfoSize

// fileInfo is Info as an fs.FileInfo.
type fileInfo struct {
	name string
	i    Info
}

func (f fileInfo) Name() string { return f.name }
func (f fileInfo) Size() int64  { return int64(f.i.Size) }
func (f fileInfo) Mode() fs.FileMode {
	m := fs.FileMode(f.i.Mode & 0o777)
	if f.i.Mode&modeType == modeDir {
		m |= fs.ModeDir
	}
	return m
}
func (f fileInfo) ModTime() time.Time { return time.Unix(0, f.i.Mtime) }
func (f fileInfo) IsDir() bool        { return f.i.Mode&modeType == modeDir }
func (f fileInfo) Sys() any           { return nil }

// MaxName bounds a name (a path relative to the device's root).
const MaxName = 1024

// splitPair splits RENAME's request bytes: the first name is CDW15 bits
// 15:0 bytes long, the second is the rest.
func splitPair(b []byte, cdw15 uint32) (string, string, error) {
	n := int(cdw15 & 0xFFFF)
	if cdw15>>16 != 0 || n > len(b) {
		return "", "", fmt.Errorf("%w: first name of %d bytes in %d", ErrProtocol, n, len(b))
	}
	return string(b[:n]), string(b[n:]), nil
}

// parseNames reads LIST's reply: names, each followed by a NUL.
func parseNames(b []byte) ([]string, error) {
	var out []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i == len(b) {
			return nil, fmt.Errorf("%w: name list not NUL-terminated", ErrProtocol)
		}
		if i == 0 {
			return nil, fmt.Errorf("%w: empty name in list", ErrProtocol)
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
	return out, nil
}

func lo(v uint64) uint32               { return uint32(v) }
func hi(v uint64) uint32               { return uint32(v >> 32) }
func join(l, h uint32) uint64          { return uint64(l) | uint64(h)<<32 }
func arg0(c *nvmeof.Command) uint64    { return join(c.CDW10, c.CDW11) }
func arg1(c *nvmeof.Command) uint64    { return join(c.CDW12, c.CDW13) }
func epochOf(c *nvmeof.Command) uint64 { return join(c.CDW2, c.CDW3) }
