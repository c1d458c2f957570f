package proto

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
	"github.com/capsule-storage/capsule/nvmeof"
)

var attrHex = `
	0200000000000000 // ino 2
	0100000000000000 // gen 1
	0000000001000000 // size 4 GiB
	0800000000000000 // blocks 8
	00ca9a3b00000000 // atime 1 s
	0094357700000000 // mtime 2 s
	005ed0b200000000 // ctime 3 s
	a4810000         // mode S_IFREG|0644
	01000000         // nlink 1
	e8030000         // uid 1000
	e9030000         // gid 1001
	00000000         // rdev
	00000000         // reserved
`

var attrVal = Attr{Ino: 2, Gen: 1, Size: 4 << 30, Blocks: 8, Atime: 1e9, Mtime: 2e9, Ctime: 3e9,
	Mode: 0o100644, Nlink: 1, UID: 1000, GID: 1001}

func TestAttrWire(t *testing.T) {
	want := hextest.Decode(t, attrHex)
	require.Len(t, want, AttrSize)
	b := make([]byte, AttrSize)
	attrVal.MarshalTo(b)
	assert.Equal(t, want, b)
	var a Attr
	require.NoError(t, a.Unmarshal(want))
	assert.Equal(t, attrVal, a)
	require.ErrorIs(t, a.Unmarshal(want[:AttrSize-1]), ErrShort)
	bad := append([]byte(nil), want...)
	bad[76] = 1
	require.ErrorIs(t, a.Unmarshal(bad), ErrField)
}

func TestSetAttrWire(t *testing.T) {
	want := hextest.Decode(t, `
		2b000000         // valid: mode, uid, size, mtime
		ed010000         // mode 0755
		e8030000         // uid 1000
		00000000         // gid
		0010000000000000 // size 4096
		0000000000000000 // atime
		00ca9a3b00000000 // mtime 1 s
	`)
	s := SetAttr{Valid: SetMode | SetUID | SetSize | SetMtime, Mode: 0o755, UID: 1000, Size: 4096, Mtime: 1e9}
	b := make([]byte, SetAttrSize)
	s.MarshalTo(b)
	assert.Equal(t, want, b)
	var got SetAttr
	require.NoError(t, got.Unmarshal(want))
	assert.Equal(t, s, got)
	require.ErrorIs(t, got.Unmarshal(want[:39]), ErrShort)
	require.ErrorIs(t, got.Unmarshal(append(want, 0)), ErrShort)
	bad := append([]byte(nil), want...)
	bad[1] = 1 // valid bit 8
	require.ErrorIs(t, got.Unmarshal(bad), ErrField)
	bad = append([]byte(nil), want...)
	bad[5] = 0x10 // mode 010755: a type bit
	require.ErrorIs(t, got.Unmarshal(bad), ErrField)
}

func TestStatFSWire(t *testing.T) {
	want := hextest.Decode(t, `
		0001000000000000 // blocks 256
		8000000000000000 // bfree 128
		7f00000000000000 // bavail 127
		0a00000000000000 // files 10
		0500000000000000 // ffree 5
		00100000         // bsize 4096
		00100000         // frsize 4096
		ff000000         // namelen 255
		00000000         // reserved
	`)
	s := StatFS{Blocks: 256, Bfree: 128, Bavail: 127, Files: 10, Ffree: 5, Bsize: 4096, Frsize: 4096, NameLen: 255}
	b := make([]byte, StatFSSize)
	s.MarshalTo(b)
	assert.Equal(t, want, b)
	var got StatFS
	require.NoError(t, got.Unmarshal(want))
	assert.Equal(t, s, got)
	require.ErrorIs(t, got.Unmarshal(want[:10]), ErrShort)
}

func TestDirentsWire(t *testing.T) {
	want := hextest.Decode(t, `
		02000000         // count 2
		01000000         // flags: end of directory
		// entry 1
		0100000000000000 // ino 1
		0100000000000000 // cookie 1
		00400000         // mode S_IFDIR
		0100             // name length 1
		0000             // reserved
		2e00000000000000 // "." and padding
		// entry 2
		0700000000000000 // ino 7
		0900000000000000 // cookie 9
		00800000         // mode S_IFREG
		0900             // name length 9
		0000             // reserved
		68656c6c6f2e7478 // "hello.tx"
		7400000000000000 // "t" and padding
	`)
	buf := make([]byte, 200)
	w := NewDirentWriter(buf, false)
	require.True(t, w.Add(&Dirent{Ino: 1, Cookie: 1, Mode: 0o40000, Name: []byte(".")}))
	require.True(t, w.Add(&Dirent{Ino: 7, Cookie: 9, Mode: 0o100000, Name: []byte("hello.txt")}))
	n := w.Finish(true)
	assert.Equal(t, want, buf[:n])

	var names []string
	eof, err := ParseDirents(want, false, func(e *Dirent) error { names = append(names, string(e.Name)); return nil })
	require.NoError(t, err)
	assert.True(t, eof)
	assert.Equal(t, []string{".", "hello.txt"}, names)

	// A buffer too small for the next entry refuses it.
	w = NewDirentWriter(make([]byte, DirentHeader+DirentSize(1, false)), false)
	require.True(t, w.Add(&Dirent{Ino: 1, Name: []byte("a")}))
	require.False(t, w.Add(&Dirent{Ino: 2, Name: []byte("b")}))

	// Malformed replies.
	for name, mut := range map[string]func(b []byte) []byte{
		"count too high":   func(b []byte) []byte { b[0] = 3; return b },
		"bad flags":        func(b []byte) []byte { b[4] = 3; return b },
		"zero name length": func(b []byte) []byte { b[8+20] = 0; return b },
		"long name length": func(b []byte) []byte { b[8+20] = 0xff; b[8+21] = 0xff; return b },
		"padding":          func(b []byte) []byte { b[8+25] = 'x'; return b },
		"trailing bytes":   func(b []byte) []byte { return append(b, 0) },
		"cut":              func(b []byte) []byte { return b[:len(b)-1] },
	} {
		_, err := ParseDirents(mut(append([]byte(nil), want...)), false, func(*Dirent) error { return nil })
		assert.Error(t, err, name)
	}
}

func TestDirentsPlusRoundTrip(t *testing.T) {
	buf := make([]byte, 4096)
	w := NewDirentWriter(buf, true)
	for i := range 5 {
		require.True(t, w.Add(&Dirent{Ino: uint64(i + 10), Cookie: uint64(i + 3), Mode: 0o100000, Name: []byte("file" + string(rune('a'+i))), Attr: attrVal}))
	}
	n := w.Finish(false)
	var got []Dirent
	eof, err := ParseDirents(buf[:n], true, func(e *Dirent) error {
		c := *e
		c.Name = append([]byte(nil), e.Name...)
		got = append(got, c)
		return nil
	})
	require.NoError(t, err)
	assert.False(t, eof)
	require.Len(t, got, 5)
	assert.Equal(t, attrVal, got[4].Attr)
	assert.Equal(t, "filee", string(got[4].Name))
}

func TestPairAndNames(t *testing.T) {
	b, cdw15 := AppendPair(nil, "old", "newname")
	assert.Equal(t, hextest.Decode(t, `6f6c64 // "old"
		6e65776e616d65 // "newname"`), b)
	assert.Equal(t, uint32(3), cdw15)
	a, c, err := SplitPair(b, cdw15)
	require.NoError(t, err)
	assert.Equal(t, "old", string(a))
	assert.Equal(t, "newname", string(c))
	_, _, err = SplitPair(b, 11)
	require.ErrorIs(t, err, ErrField)
	_, _, err = SplitPair(b, 1<<16)
	require.ErrorIs(t, err, ErrField)

	names, err := ParseNames([]byte("user.a\x00user.bb\x00"))
	require.NoError(t, err)
	assert.Equal(t, []string{"user.a", "user.bb"}, names)
	_, err = ParseNames([]byte("user.a"))
	require.ErrorIs(t, err, ErrField)
	_, err = ParseNames([]byte("\x00"))
	require.ErrorIs(t, err, ErrField)
}

func TestCopyRangeWire(t *testing.T) {
	want := hextest.Decode(t, `
		0700000000000000 // source inode 7
		0010000000000000 // source offset 4096
		0000100000000000 // length 1 MiB
	`)
	r := CopyRange{Ino: 7, Off: 4096, Length: 1 << 20}
	b := make([]byte, CopyRangeSize)
	r.MarshalTo(b)
	assert.Equal(t, want, b)
	var got CopyRange
	require.NoError(t, got.Unmarshal(want))
	assert.Equal(t, r, got)
	require.ErrorIs(t, got.Unmarshal(want[:23]), ErrShort)
	bad := append([]byte(nil), want...)
	bad[15] = 0x80 // offset past int64
	require.ErrorIs(t, got.Unmarshal(bad), ErrField)
	bad = append([]byte(nil), want...)
	bad[20] = 0x01 // length 4 GiB + 1 MiB: more than DW1 can count
	require.ErrorIs(t, got.Unmarshal(bad), ErrField)
}

func TestOpcodeDirections(t *testing.T) {
	want := map[nvmeof.Opcode]nvmeof.DataDirection{
		OpLookup: nvmeof.Bidirectional, OpGetAttr: nvmeof.ControllerToHost, OpSetAttr: nvmeof.Bidirectional,
		OpCreate: nvmeof.Bidirectional, OpMkdir: nvmeof.Bidirectional, OpMknod: nvmeof.Bidirectional,
		OpSymlink: nvmeof.Bidirectional, OpReadlink: nvmeof.ControllerToHost, OpLink: nvmeof.Bidirectional,
		OpUnlink: nvmeof.HostToController, OpRmdir: nvmeof.HostToController, OpRename: nvmeof.HostToController,
		OpOpen: nvmeof.ControllerToHost, OpRelease: nvmeof.NoData, OpRead: nvmeof.ControllerToHost,
		OpWrite: nvmeof.HostToController, OpFsync: nvmeof.NoData, OpReadDir: nvmeof.ControllerToHost,
		OpReadDirPlus: nvmeof.ControllerToHost, OpStatFS: nvmeof.ControllerToHost, OpFallocate: nvmeof.NoData,
		OpGetXattr: nvmeof.Bidirectional, OpSetXattr: nvmeof.HostToController, OpListXattr: nvmeof.ControllerToHost,
		OpRemoveXattr: nvmeof.HostToController, OpCred: nvmeof.HostToController, OpAccess: nvmeof.NoData,
		OpCopyRange: nvmeof.HostToController,
	}
	for op, dir := range want {
		assert.Equal(t, dir, op.Direction(), OpName(op))
		assert.GreaterOrEqual(t, uint8(op), uint8(0x80))
		assert.NotEmpty(t, OpName(op))
	}
	assert.Empty(t, OpName(0x80))
}

// TestCommandLayout spells out two commands as they travel: a READ (all
// arguments in CDW10-15) and a RENAME (two names, the first's length in
// CDW15).
func TestCommandLayout(t *testing.T) {
	read := nvmeof.Command{Opcode: OpRead, CID: 0x1234, NSID: 2, CDW14: 4096}
	SetArgs(&read, 0x1_0000_0007, 5<<30)
	read.DPTR, _ = nvmeof.KeyedSGL{Address: 0x7f0000001000, Length: 4096, Key: 0xabcd}.Descriptor()
	read.SetPSDT(nvmeof.PSDTSGLBuffer)
	b, err := read.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, hextest.Decode(t, `
		ba               // opcode READ: vendor specific, 10b controller to host
		40               // PSDT 01b: SGLs
		3412             // CID
		02000000         // NSID: the file namespace
		00000000 00000000 // CDW2, CDW3: reserved
		0000000000000000 // MPTR
		0010000000 7f0000 // SGL1: address 7f0000001000
		001000           //   length 4096
		cdab0000         //   key
		40               //   Keyed SGL Data Block
		07000000 01000000 // CDW10-11: inode 0x100000007
		00000040 01000000 // CDW12-13: offset 5 GiB
		00100000         // CDW14: length 4096
		00000000         // CDW15: reserved
	`), b)
	assert.Equal(t, uint64(0x1_0000_0007), Arg0(&read))
	assert.Equal(t, uint64(5<<30), Arg1(&read))

	payload, cdw15 := AppendPair(nil, "a", "bc")
	ren := nvmeof.Command{Opcode: OpRename, NSID: 2, CDW14: RenameNoRepl, CDW15: cdw15}
	SetArgs(&ren, 1, 9)
	ren.DPTR = nvmeof.InCapsuleSGL{Length: uint32(len(payload))}.Descriptor()
	b, err = ren.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, hextest.Decode(t, `
		ad               // opcode RENAME: 01b host to controller
		00 0000          // flags, CID
		02000000         // NSID
		00000000 00000000 // CDW2, CDW3
		0000000000000000 // MPTR
		0000000000000000 // SGL1: offset 0 in the capsule
		03000000         //   length 3: "a" then "bc"
		000000           //   reserved
		01               //   Data Block, offset subtype
		01000000 00000000 // CDW10-11: the directory (the root)
		09000000 00000000 // CDW12-13: the new directory
		01000000         // CDW14: RENAME_NOREPLACE
		01000000         // CDW15: the first name is 1 byte
	`), b)
	assert.Equal(t, []byte("abc"), payload)
}

func TestCredWire(t *testing.T) {
	want := hextest.Decode(t, `
		e8030000 // uid 1000
		e9030000 // gid 1001
		02000000 // 2 groups
		00000000 // reserved
		04000000 // group 4
		1b000000 // group 27
	`)
	c := Cred{UID: 1000, GID: 1001, Groups: []uint32{4, 27}}
	require.Equal(t, len(want), c.Size())
	b := make([]byte, c.Size())
	c.MarshalTo(b)
	assert.Equal(t, want, b)
	var d Cred
	require.NoError(t, d.Unmarshal(want))
	assert.Equal(t, c, d)
	assert.Equal(t, c.ID(), d.ID())
	assert.NotEqual(t, uint64(RootCredID), c.ID())
	assert.Equal(t, uint64(RootCredID), (&Cred{}).ID())
	assert.NotEqual(t, uint64(RootCredID), (&Cred{Groups: []uint32{0}}).ID())
	assert.NotEqual(t, c.ID(), (&Cred{UID: 1000, GID: 1001, Groups: []uint32{4}}).ID())

	require.ErrorIs(t, d.Unmarshal(want[:CredFixed-1]), ErrShort)
	require.ErrorIs(t, d.Unmarshal(want[:len(want)-4]), ErrField, "a group count past the bytes")
	require.ErrorIs(t, d.Unmarshal(append(append([]byte(nil), want...), 0, 0, 0, 0)), ErrField, "bytes after the groups")
	bad := append([]byte(nil), want...)
	bad[12] = 1
	require.ErrorIs(t, d.Unmarshal(bad), ErrField, "reserved")
	bad = make([]byte, CredFixed)
	le.PutUint32(bad[8:], MaxGroups+1)
	require.ErrorIs(t, d.Unmarshal(bad), ErrField, "too many groups")
}
