package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/capsule-storage/capsule/nvmeof"
)

var le = binary.LittleEndian

// Opcodes (protocol.go has the table).
const (
	OpLookup      nvmeof.Opcode = 0x83
	OpGetAttr     nvmeof.Opcode = 0x86
	OpSetAttr     nvmeof.Opcode = 0x8b
	OpCreate      nvmeof.Opcode = 0x8f
	OpMkdir       nvmeof.Opcode = 0x93
	OpMknod       nvmeof.Opcode = 0x97
	OpSymlink     nvmeof.Opcode = 0x9b
	OpReadlink    nvmeof.Opcode = 0x9e
	OpLink        nvmeof.Opcode = 0xa3
	OpUnlink      nvmeof.Opcode = 0xa5
	OpRmdir       nvmeof.Opcode = 0xa9
	OpRename      nvmeof.Opcode = 0xad
	OpOpen        nvmeof.Opcode = 0xb2
	OpRelease     nvmeof.Opcode = 0xb4
	OpRead        nvmeof.Opcode = 0xba
	OpWrite       nvmeof.Opcode = 0xbd
	OpFsync       nvmeof.Opcode = 0xc0
	OpReadDir     nvmeof.Opcode = 0xc6
	OpReadDirPlus nvmeof.Opcode = 0xca
	OpStatFS      nvmeof.Opcode = 0xce
	OpFallocate   nvmeof.Opcode = 0xd0
	OpGetXattr    nvmeof.Opcode = 0xd7
	OpSetXattr    nvmeof.Opcode = 0xd9
	OpListXattr   nvmeof.Opcode = 0xde
	OpRemoveXattr nvmeof.Opcode = 0xe1
	OpCred        nvmeof.Opcode = 0xe5
	OpAccess      nvmeof.Opcode = 0xe8
	OpCopyRange   nvmeof.Opcode = 0xed
)

// OpName names an opcode of the table, "" for others.
func OpName(op nvmeof.Opcode) string {
	switch op {
	case OpLookup:
		return "LOOKUP"
	case OpGetAttr:
		return "GETATTR"
	case OpSetAttr:
		return "SETATTR"
	case OpCreate:
		return "CREATE"
	case OpMkdir:
		return "MKDIR"
	case OpMknod:
		return "MKNOD"
	case OpSymlink:
		return "SYMLINK"
	case OpReadlink:
		return "READLINK"
	case OpLink:
		return "LINK"
	case OpUnlink:
		return "UNLINK"
	case OpRmdir:
		return "RMDIR"
	case OpRename:
		return "RENAME"
	case OpOpen:
		return "OPEN"
	case OpRelease:
		return "RELEASE"
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	case OpFsync:
		return "FSYNC"
	case OpReadDir:
		return "READDIR"
	case OpReadDirPlus:
		return "READDIRPLUS"
	case OpStatFS:
		return "STATFS"
	case OpFallocate:
		return "FALLOCATE"
	case OpGetXattr:
		return "GETXATTR"
	case OpSetXattr:
		return "SETXATTR"
	case OpListXattr:
		return "LISTXATTR"
	case OpRemoveXattr:
		return "REMOVEXATTR"
	case OpCred:
		return "CRED"
	case OpAccess:
		return "ACCESS"
	case OpCopyRange:
		return "COPYRANGE"
	}
	return ""
}

// Flag values.
const (
	WriteAppend    = 1 // WRITE CDW14
	FsyncData      = 1 // FSYNC CDW14
	RenameNoRepl   = 1 // RENAME CDW14
	RenameExch     = 2
	XattrCreate    = 1 // SETXATTR CDW14
	XattrReplace   = 2
	FallocKeep     = 0x01 // FALLOCATE CDW14: Linux's FALLOC_FL_* values
	FallocPunch    = 0x02
	FallocCollapse = 0x08
	FallocZero     = 0x10
	FallocInsert   = 0x20
)

// Limits.
const (
	MaxName        = 255
	MaxSymlink     = 4095
	MaxXattrName   = 255
	MaxXattrValue  = 64 << 10
	DirentsEOF     = 1 // Dirents header flag
	CookieDot      = 1
	CookieDotDot   = 2
	FirstCookie    = 3
	DirentHeader   = 8
	direntFixed    = 24
	HandleSize     = 8
	CreateReplyLen = AttrSize + HandleSize
	OpenReplyLen   = HandleSize + AttrSize
)

// HasRequestID reports whether an operation carries a request ID in
// CDW2-3 (protocol.go): those that are not idempotent.
func HasRequestID(op nvmeof.Opcode) bool {
	switch op {
	case OpCreate, OpMkdir, OpMknod, OpSymlink, OpLink, OpUnlink, OpRmdir, OpRename, OpOpen, OpRelease,
		OpWrite, OpSetXattr, OpRemoveXattr:
		return true
	}
	return false
}

// Ino splits and joins the 64-bit fields of CDW10-11 and CDW12-13.
func Lo(v uint64) uint32            { return uint32(v) }
func Hi(v uint64) uint32            { return uint32(v >> 32) }
func Join(lo, hi uint32) uint64     { return uint64(lo) | uint64(hi)<<32 }
func Arg0(c *nvmeof.Command) uint64 { return Join(c.CDW10, c.CDW11) }
func Arg1(c *nvmeof.Command) uint64 { return Join(c.CDW12, c.CDW13) }

// SetArgs sets CDW10-11 and CDW12-13.
func SetArgs(c *nvmeof.Command, a0, a1 uint64) {
	c.CDW10, c.CDW11, c.CDW12, c.CDW13 = Lo(a0), Hi(a0), Lo(a1), Hi(a1)
}

// ErrShort and ErrField are the decoders' errors.
var (
	ErrShort = errors.New("proto: record too short")
	ErrField = errors.New("proto: invalid field")
)

// Attr is the Attr record.
type Attr struct {
	Ino, Gen, Size, Blocks      uint64
	Atime, Mtime, Ctime         int64
	Mode, Nlink, UID, GID, Rdev uint32
}

// Attr record offsets.
const (
	AttrSize        = 80
	attrOffIno      = 0
	attrOffGen      = 8
	attrOffSize     = 16
	attrOffBlocks   = 24
	attrOffAtime    = 32
	attrOffMtime    = 40
	attrOffCtime    = 48
	attrOffMode     = 56
	attrOffNlink    = 60
	attrOffUID      = 64
	attrOffGID      = 68
	attrOffRdev     = 72
	attrOffReserved = 76
)

// MarshalTo encodes a into b, which holds AttrSize bytes.
func (a *Attr) MarshalTo(b []byte) {
	_ = b[AttrSize-1]
	le.PutUint64(b[attrOffIno:], a.Ino)
	le.PutUint64(b[attrOffGen:], a.Gen)
	le.PutUint64(b[attrOffSize:], a.Size)
	le.PutUint64(b[attrOffBlocks:], a.Blocks)
	le.PutUint64(b[attrOffAtime:], uint64(a.Atime))
	le.PutUint64(b[attrOffMtime:], uint64(a.Mtime))
	le.PutUint64(b[attrOffCtime:], uint64(a.Ctime))
	le.PutUint32(b[attrOffMode:], a.Mode)
	le.PutUint32(b[attrOffNlink:], a.Nlink)
	le.PutUint32(b[attrOffUID:], a.UID)
	le.PutUint32(b[attrOffGID:], a.GID)
	le.PutUint32(b[attrOffRdev:], a.Rdev)
	le.PutUint32(b[attrOffReserved:], 0)
}

// Unmarshal decodes an Attr record from the first AttrSize bytes of b.
func (a *Attr) Unmarshal(b []byte) error {
	if len(b) < AttrSize {
		return fmt.Errorf("%w: Attr of %d bytes", ErrShort, len(b))
	}
	if le.Uint32(b[attrOffReserved:]) != 0 {
		return fmt.Errorf("%w: Attr reserved bytes", ErrField)
	}
	*a = Attr{
		Ino: le.Uint64(b[attrOffIno:]), Gen: le.Uint64(b[attrOffGen:]),
		Size: le.Uint64(b[attrOffSize:]), Blocks: le.Uint64(b[attrOffBlocks:]),
		Atime: int64(le.Uint64(b[attrOffAtime:])), Mtime: int64(le.Uint64(b[attrOffMtime:])),
		Ctime: int64(le.Uint64(b[attrOffCtime:])),
		Mode:  le.Uint32(b[attrOffMode:]), Nlink: le.Uint32(b[attrOffNlink:]),
		UID: le.Uint32(b[attrOffUID:]), GID: le.Uint32(b[attrOffGID:]), Rdev: le.Uint32(b[attrOffRdev:]),
	}
	return nil
}

// SetAttr valid bits.
const (
	SetMode     = 0x01
	SetUID      = 0x02
	SetGID      = 0x04
	SetSize     = 0x08
	SetAtime    = 0x10
	SetMtime    = 0x20
	SetAtimeNow = 0x40
	SetMtimeNow = 0x80
	setAll      = 0xff
)

// SetAttr is the SetAttr record.
type SetAttr struct {
	Valid, Mode, UID, GID uint32
	Size                  uint64
	Atime, Mtime          int64
}

// SetAttr record offsets.
const (
	SetAttrSize     = 40
	setAttrOffValid = 0
	setAttrOffMode  = 4
	setAttrOffUID   = 8
	setAttrOffGID   = 12
	setAttrOffSize  = 16
	setAttrOffAtime = 24
	setAttrOffMtime = 32
)

// MarshalTo encodes s into b, which holds SetAttrSize bytes.
func (s *SetAttr) MarshalTo(b []byte) {
	_ = b[SetAttrSize-1]
	le.PutUint32(b[setAttrOffValid:], s.Valid)
	le.PutUint32(b[setAttrOffMode:], s.Mode)
	le.PutUint32(b[setAttrOffUID:], s.UID)
	le.PutUint32(b[setAttrOffGID:], s.GID)
	le.PutUint64(b[setAttrOffSize:], s.Size)
	le.PutUint64(b[setAttrOffAtime:], uint64(s.Atime))
	le.PutUint64(b[setAttrOffMtime:], uint64(s.Mtime))
}

// Unmarshal decodes a SetAttr record: exactly SetAttrSize bytes, no
// reserved valid bit, mode within 07777.
func (s *SetAttr) Unmarshal(b []byte) error {
	if len(b) != SetAttrSize {
		return fmt.Errorf("%w: SetAttr of %d bytes", ErrShort, len(b))
	}
	*s = SetAttr{
		Valid: le.Uint32(b[setAttrOffValid:]), Mode: le.Uint32(b[setAttrOffMode:]),
		UID: le.Uint32(b[setAttrOffUID:]), GID: le.Uint32(b[setAttrOffGID:]),
		Size:  le.Uint64(b[setAttrOffSize:]),
		Atime: int64(le.Uint64(b[setAttrOffAtime:])), Mtime: int64(le.Uint64(b[setAttrOffMtime:])),
	}
	if s.Valid&^setAll != 0 {
		return fmt.Errorf("%w: SetAttr valid bits %#x", ErrField, s.Valid)
	}
	if s.Mode&^0o7777 != 0 {
		return fmt.Errorf("%w: SetAttr mode %#o", ErrField, s.Mode)
	}
	return nil
}

// CopyRange is the CopyRange record: the source of a COPYRANGE.
type CopyRange struct {
	Ino, Off, Length uint64
}

// CopyRange record offsets.
const (
	CopyRangeSize      = 24
	copyRangeOffIno    = 0
	copyRangeOffOff    = 8
	copyRangeOffLength = 16
	// MaxCopyRange is the most bytes one COPYRANGE copies: the count
	// travels in DW1.
	MaxCopyRange = 1 << 30
)

// MarshalTo encodes r into b, which holds CopyRangeSize bytes.
func (r *CopyRange) MarshalTo(b []byte) {
	_ = b[CopyRangeSize-1]
	le.PutUint64(b[copyRangeOffIno:], r.Ino)
	le.PutUint64(b[copyRangeOffOff:], r.Off)
	le.PutUint64(b[copyRangeOffLength:], r.Length)
}

// Unmarshal decodes a CopyRange record: exactly CopyRangeSize bytes, an
// offset and length that fit an int64, and a length of at most
// MaxCopyRange.
func (r *CopyRange) Unmarshal(b []byte) error {
	if len(b) != CopyRangeSize {
		return fmt.Errorf("%w: CopyRange of %d bytes", ErrShort, len(b))
	}
	*r = CopyRange{Ino: le.Uint64(b[copyRangeOffIno:]), Off: le.Uint64(b[copyRangeOffOff:]), Length: le.Uint64(b[copyRangeOffLength:])}
	if r.Off > math.MaxInt64 || r.Length > MaxCopyRange {
		return fmt.Errorf("%w: CopyRange offset %d length %d", ErrField, r.Off, r.Length)
	}
	return nil
}

// StatFS is the StatFS record.
type StatFS struct {
	Blocks, Bfree, Bavail, Files, Ffree uint64
	Bsize, Frsize, NameLen              uint32
}

// StatFS record offsets.
const (
	StatFSSize      = 56
	statOffBlocks   = 0
	statOffBfree    = 8
	statOffBavail   = 16
	statOffFiles    = 24
	statOffFfree    = 32
	statOffBsize    = 40
	statOffFrsize   = 44
	statOffNameLen  = 48
	statOffReserved = 52
)

// MarshalTo encodes s into b, which holds StatFSSize bytes.
func (s *StatFS) MarshalTo(b []byte) {
	_ = b[StatFSSize-1]
	le.PutUint64(b[statOffBlocks:], s.Blocks)
	le.PutUint64(b[statOffBfree:], s.Bfree)
	le.PutUint64(b[statOffBavail:], s.Bavail)
	le.PutUint64(b[statOffFiles:], s.Files)
	le.PutUint64(b[statOffFfree:], s.Ffree)
	le.PutUint32(b[statOffBsize:], s.Bsize)
	le.PutUint32(b[statOffFrsize:], s.Frsize)
	le.PutUint32(b[statOffNameLen:], s.NameLen)
	le.PutUint32(b[statOffReserved:], 0)
}

// Unmarshal decodes a StatFS record.
func (s *StatFS) Unmarshal(b []byte) error {
	if len(b) < StatFSSize {
		return fmt.Errorf("%w: StatFS of %d bytes", ErrShort, len(b))
	}
	if le.Uint32(b[statOffReserved:]) != 0 {
		return fmt.Errorf("%w: StatFS reserved bytes", ErrField)
	}
	*s = StatFS{
		Blocks: le.Uint64(b[statOffBlocks:]), Bfree: le.Uint64(b[statOffBfree:]),
		Bavail: le.Uint64(b[statOffBavail:]), Files: le.Uint64(b[statOffFiles:]),
		Ffree: le.Uint64(b[statOffFfree:]), Bsize: le.Uint32(b[statOffBsize:]),
		Frsize: le.Uint32(b[statOffFrsize:]), NameLen: le.Uint32(b[statOffNameLen:]),
	}
	return nil
}

// Dirent is one entry of a Dirents reply.
type Dirent struct {
	Ino    uint64
	Cookie uint64
	Mode   uint32
	Name   []byte
	Attr   Attr // READDIRPLUS only
}

// DirentSize is the encoded size of an entry with a name of n bytes.
func DirentSize(n int, plus bool) int {
	s := direntFixed + (n+7)&^7
	if plus {
		s += AttrSize
	}
	return s
}

// DirentWriter fills a reply buffer with Dirents.
type DirentWriter struct {
	buf   []byte
	n     int
	count uint32
	plus  bool
}

// NewDirentWriter starts a Dirents reply in buf (at least DirentHeader
// bytes).
func NewDirentWriter(buf []byte, plus bool) *DirentWriter {
	return &DirentWriter{buf: buf, n: DirentHeader, plus: plus}
}

// Add appends e and reports whether it fitted.
func (w *DirentWriter) Add(e *Dirent) bool {
	size := DirentSize(len(e.Name), w.plus)
	if len(e.Name) > MaxName || w.n+size > len(w.buf) {
		return false
	}
	b := w.buf[w.n : w.n+size]
	le.PutUint64(b[0:], e.Ino)
	le.PutUint64(b[8:], e.Cookie)
	le.PutUint32(b[16:], e.Mode)
	le.PutUint16(b[20:], uint16(len(e.Name)))
	le.PutUint16(b[22:], 0)
	pad := (len(e.Name) + 7) &^ 7
	copy(b[direntFixed:], e.Name)
	clear(b[direntFixed+len(e.Name) : direntFixed+pad])
	if w.plus {
		e.Attr.MarshalTo(b[direntFixed+pad:])
	}
	w.n += size
	w.count++
	return true
}

// Count is the number of entries added.
func (w *DirentWriter) Count() int { return int(w.count) }

// Finish writes the header and returns the reply length.
func (w *DirentWriter) Finish(eof bool) int {
	le.PutUint32(w.buf[0:], w.count)
	var flags uint32
	if eof {
		flags = DirentsEOF
	}
	le.PutUint32(w.buf[4:], flags)
	return w.n
}

// ParseDirents decodes a Dirents reply of exactly len(b) bytes, calling
// fn for each entry (Name aliases b). It checks every length before use:
// the count against the bytes, each name length, padding and reserved
// bytes, and that no bytes follow the last entry.
func ParseDirents(b []byte, plus bool, fn func(*Dirent) error) (eof bool, err error) {
	if len(b) < DirentHeader {
		return false, fmt.Errorf("%w: Dirents of %d bytes", ErrShort, len(b))
	}
	count, flags := le.Uint32(b[0:]), le.Uint32(b[4:])
	if flags&^DirentsEOF != 0 {
		return false, fmt.Errorf("%w: Dirents flags %#x", ErrField, flags)
	}
	off := DirentHeader
	var e Dirent
	for i := uint32(0); i < count; i++ {
		if len(b)-off < direntFixed {
			return false, fmt.Errorf("%w: entry %d of %d", ErrShort, i, count)
		}
		h := b[off:]
		nl := int(le.Uint16(h[20:]))
		if nl == 0 || nl > MaxName || le.Uint16(h[22:]) != 0 {
			return false, fmt.Errorf("%w: entry %d: name length %d", ErrField, i, nl)
		}
		size := DirentSize(nl, plus)
		if len(b)-off < size {
			return false, fmt.Errorf("%w: entry %d of %d bytes", ErrShort, i, size)
		}
		pad := (nl + 7) &^ 7
		for _, c := range h[direntFixed+nl : direntFixed+pad] {
			if c != 0 {
				return false, fmt.Errorf("%w: entry %d: padding", ErrField, i)
			}
		}
		e = Dirent{Ino: le.Uint64(h[0:]), Cookie: le.Uint64(h[8:]), Mode: le.Uint32(h[16:]), Name: h[direntFixed : direntFixed+nl]}
		if plus {
			if err := e.Attr.Unmarshal(h[direntFixed+pad:]); err != nil {
				return false, fmt.Errorf("entry %d: %w", i, err)
			}
		}
		if err := fn(&e); err != nil {
			return false, err
		}
		off += size
	}
	if off != len(b) {
		return false, fmt.Errorf("%w: %d bytes after %d entries", ErrField, len(b)-off, count)
	}
	return flags&DirentsEOF != 0, nil
}

// SplitPair splits request bytes holding two strings, the first of
// firstLen bytes (CDW15 bits 15:0). CDW15 bits 31:16 are reserved.
func SplitPair(b []byte, cdw15 uint32) (first, second []byte, err error) {
	if cdw15>>16 != 0 {
		return nil, nil, fmt.Errorf("%w: CDW15 bits 31:16", ErrField)
	}
	n := int(cdw15 & 0xffff)
	if n > len(b) {
		return nil, nil, fmt.Errorf("%w: first string of %d bytes in %d", ErrField, n, len(b))
	}
	return b[:n], b[n:], nil
}

// AppendPair builds the request bytes of two strings and the CDW15 that
// goes with them.
func AppendPair(dst []byte, first, second string) ([]byte, uint32) {
	dst = append(dst, first...)
	dst = append(dst, second...)
	return dst, uint32(len(first))
}

// ParseNames splits a LISTXATTR reply into its names.
func ParseNames(b []byte) ([]string, error) {
	var out []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i == len(b) {
			return nil, fmt.Errorf("%w: name without its NUL", ErrField)
		}
		if i == 0 {
			return nil, fmt.Errorf("%w: empty name", ErrField)
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
	return out, nil
}

// Cred is the Cred record: the caller a command runs for (protocol.go,
// "Credentials").
type Cred struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups
}

// Cred record offsets and limits.
const (
	CredFixed       = 16
	credOffUID      = 0
	credOffGID      = 4
	credOffNGroups  = 8
	credOffReserved = 12
	// MaxGroups is the most supplementary groups a Cred carries.
	MaxGroups = 1024
)

// Size is the encoded size of c.
func (c *Cred) Size() int { return CredFixed + 4*len(c.Groups) }

// MarshalTo encodes c into b, which holds c.Size() bytes.
func (c *Cred) MarshalTo(b []byte) {
	_ = b[c.Size()-1]
	le.PutUint32(b[credOffUID:], c.UID)
	le.PutUint32(b[credOffGID:], c.GID)
	le.PutUint32(b[credOffNGroups:], uint32(len(c.Groups)))
	le.PutUint32(b[credOffReserved:], 0)
	for i, g := range c.Groups {
		le.PutUint32(b[CredFixed+4*i:], g)
	}
}

// Unmarshal decodes a Cred record of exactly len(b) bytes: the group
// count must match the bytes and stay within MaxGroups.
func (c *Cred) Unmarshal(b []byte) error {
	if len(b) < CredFixed {
		return fmt.Errorf("%w: Cred of %d bytes", ErrShort, len(b))
	}
	n := le.Uint32(b[credOffNGroups:])
	switch {
	case le.Uint32(b[credOffReserved:]) != 0:
		return fmt.Errorf("%w: Cred reserved bytes", ErrField)
	case n > MaxGroups:
		return fmt.Errorf("%w: Cred of %d groups", ErrField, n)
	case len(b) != CredFixed+4*int(n):
		return fmt.Errorf("%w: Cred of %d groups in %d bytes", ErrField, n, len(b))
	}
	*c = Cred{UID: le.Uint32(b[credOffUID:]), GID: le.Uint32(b[credOffGID:])}
	if n > 0 {
		c.Groups = make([]uint32, n)
		for i := range c.Groups {
			c.Groups[i] = le.Uint32(b[CredFixed+4*i:])
		}
	}
	return nil
}

// RootCredID is the credential ID of uid 0, gid 0 and no supplementary
// groups; it is never registered.
const RootCredID = 0

// ID is the credential ID of c: FNV-1a (64 bits) of its encoding, never
// zero, except RootCredID for root without supplementary groups. The ID
// is content-addressed, so one credential has one ID on every client,
// and registering it again changes nothing. Callers that want equal
// sets of groups to share an ID sort them first (the client does).
func (c *Cred) ID() uint64 {
	if c.UID == 0 && c.GID == 0 && len(c.Groups) == 0 {
		return RootCredID
	}
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	var b [4]byte
	word := func(v uint32) {
		le.PutUint32(b[:], v)
		for _, x := range b {
			h = (h ^ uint64(x)) * prime
		}
	}
	word(c.UID)
	word(c.GID)
	word(uint32(len(c.Groups)))
	word(0)
	for _, g := range c.Groups {
		word(g)
	}
	if h == RootCredID {
		h = 1
	}
	return h
}

// Access masks (ACCESS CDW14), as access(2).
const (
	AccessExec  = 1
	AccessWrite = 2
	AccessRead  = 4
)
