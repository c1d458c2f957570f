package devsvc

import (
	"bytes"
	"encoding/binary"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/internal/hextest"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// TestOpcodes: bits 1:0 of each opcode are its data direction.
func TestOpcodes(t *testing.T) {
	for op, dir := range map[nvmeof.Opcode]nvmeof.DataDirection{
		OpOpen: nvmeof.Bidirectional, OpClose: nvmeof.NoData, OpRead: nvmeof.ControllerToHost,
		OpWrite: nvmeof.HostToController, OpSync: nvmeof.NoData, OpFstat: nvmeof.ControllerToHost,
		OpTruncate: nvmeof.NoData, OpPunch: nvmeof.NoData, OpRename: nvmeof.HostToController,
		OpRemove: nvmeof.HostToController, OpMkdirAll: nvmeof.HostToController,
		OpSyncDir: nvmeof.HostToController, OpStat: nvmeof.Bidirectional, OpList: nvmeof.Bidirectional,
	} {
		assert.Equal(t, dir, op.Direction(), OpName(op))
		assert.GreaterOrEqual(t, uint8(op), uint8(0x80), OpName(op))
	}
}

func TestInfoWire(t *testing.T) {
	wire := hextest.Decode(t, `
		00 10 00 00 00 00 00 00  # size 4096
		a4 81 00 00              # mode 0100644: regular, rw-r--r--
		00 00 00 00              # reserved
		00 ca 9a 3b 00 00 00 00  # mtime 1,000,000,000 ns
		00 00 00 00 00 00 00 00  # reserved
	`)
	var i Info
	require.NoError(t, i.Unmarshal(wire))
	assert.Equal(t, Info{Size: 4096, Mode: 0o100644, Mtime: 1e9}, i)
	b := make([]byte, InfoSize)
	i.MarshalTo(b)
	assert.Equal(t, wire, b)

	fi := fileInfo{name: "x", i: i}
	assert.False(t, fi.IsDir())
	assert.Equal(t, os.FileMode(0o644), fi.Mode())

	bad := bytes.Clone(wire)
	bad[12] = 1 // reserved
	assert.ErrorIs(t, i.Unmarshal(bad), ErrProtocol)
	bad = bytes.Clone(wire)
	bad[9] = 0x21 // 020644: a character device
	assert.ErrorIs(t, i.Unmarshal(bad), ErrProtocol)
	assert.ErrorIs(t, i.Unmarshal(wire[:31]), ErrProtocol)
}

func TestNamesWire(t *testing.T) {
	got, err := parseNames(hextest.Decode(t, `
		69 64 00        # "id", NUL
		73 68 61 72 64 73 00  # "shards", NUL
	`))
	require.NoError(t, err)
	assert.Equal(t, []string{"id", "shards"}, got)
	for _, bad := range []string{"6100 62", "00", "6100 00"} {
		_, err := parseNames(hextest.Decode(t, bad))
		assert.ErrorIs(t, err, ErrProtocol, bad)
	}
	a, b, err := splitPair([]byte("v/av/b"), 3)
	require.NoError(t, err)
	assert.Equal(t, []string{"v/a", "v/b"}, []string{a, b})
	_, _, err = splitPair([]byte("v/a"), 4)
	assert.ErrorIs(t, err, ErrProtocol)
	_, _, err = splitPair([]byte("v/a"), 1<<16|1)
	assert.ErrorIs(t, err, ErrProtocol)
}

func FuzzInfo(f *testing.F) {
	f.Add(make([]byte, InfoSize))
	f.Add(hextest.MustDecode("0010000000000000 a4810000 00000000 00ca9a3b00000000 0000000000000000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var i Info
		if i.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, InfoSize)
		i.MarshalTo(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip: % x -> % x", b, out)
		}
	})
}

func FuzzNames(f *testing.F) {
	f.Add([]byte("id\x00shards\x00"), uint32(2))
	f.Add([]byte("\x00"), uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, cdw15 uint32) {
		if names, err := parseNames(b); err == nil {
			var out []byte
			for _, n := range names {
				out = append(append(out, n...), 0)
			}
			if !bytes.Equal(out, b) {
				t.Fatalf("round trip: %q -> %q", b, out)
			}
		}
		if a, c, err := splitPair(b, cdw15); err == nil && a+c != string(b) {
			t.Fatalf("split %q into %q and %q", b, a, c)
		}
	})
}

func FuzzRanges(f *testing.F) {
	f.Add(AppendRanges(nil, []Range{{Off: 0, Len: 512}, {Off: 8704, Len: 4096}}))
	f.Add(hextest.MustDecode("0010000000000000 00100000 00000000")) // 4096 bytes at 4096
	f.Add(hextest.MustDecode("0000000000000000 00100000 01000000")) // reserved bytes set: refused
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ParseRanges(nil, b)
		if err != nil {
			return
		}
		if out := AppendRanges(nil, rs); !bytes.Equal(out, b) {
			t.Fatalf("round trip: % x -> % x", b, out)
		}
	})
}

// FuzzServer sends any command to a server on an in-memory device: no
// panic, and nothing lands outside a volume's directory or in the fence
// directory except the fence records.
func FuzzServer(f *testing.F) {
	f.Add(uint8(OpOpen), uint32(FlagWrite|FlagCreate), uint32(0), uint32(0), uint32(0), uint64(1), []byte("v/a"), 64)
	f.Add(uint8(OpMkdirAll), uint32(0), uint32(0), uint32(0), uint32(0), uint64(3), []byte("v/d/e"), 0)
	f.Add(uint8(OpRename), uint32(0), uint32(0), uint32(0), uint32(3), uint64(3), []byte("v/av/b"), 0)
	f.Add(uint8(OpStat), uint32(0), uint32(0), uint32(0), uint32(0), uint64(0), []byte("../x"), 32)
	f.Add(uint8(OpRead), uint32(1), uint32(0), uint32(4096), uint32(0), uint64(0), []byte{}, 4096)
	f.Add(uint8(OpList), uint32(0), uint32(0), uint32(0), uint32(0), uint64(0), []byte("v"), 3)
	f.Add(uint8(OpReadRanges), uint32(1), uint32(0), uint32(0), uint32(0), uint64(0),
		AppendRanges(nil, []Range{{Off: 0, Len: 16}, {Off: 4096, Len: 100}}), 116)
	f.Fuzz(func(t *testing.T, op uint8, cdw10, cdw12, cdw14, cdw15 uint32, epoch uint64, in []byte, outLen int) {
		mem := vfs.NewMem()
		if err := mem.MkdirAll("v"); err != nil {
			t.Fatal(err)
		}
		s := NewServer(mem, nil)
		defer s.Close()
		outLen = min(max(outLen, 0), 1<<16)
		// A file to work on first, then the fuzzed command.
		run := func(cmd *nvmeof.Command, payload, data []byte) *target.VendorCommand {
			dataLen, payloadLen := len(data), 0
			if cmd.Opcode.Direction() == nvmeof.Bidirectional {
				payloadLen = len(payload)
			}
			if !s.PrepareVendor(cmd, dataLen, payloadLen).Success() {
				return nil
			}
			c := &target.VendorCommand{Cmd: cmd, Payload: payload, Data: data}
			s.ExecuteVendor(c)
			if c.N > len(data) || c.N < 0 {
				t.Fatalf("%s: N %d of %d", OpName(cmd.Opcode), c.N, len(data))
			}
			return c
		}
		open := &nvmeof.Command{Opcode: OpOpen, CDW12: FlagWrite | FlagCreate}
		c := run(open, []byte("v/f"), make([]byte, OpenReplySize))
		if c == nil || c.DW0 != 0 {
			t.Fatalf("setup open failed")
		}
		cmd := &nvmeof.Command{Opcode: nvmeof.Opcode(op), CDW10: cdw10, CDW12: cdw12, CDW14: cdw14, CDW15: cdw15}
		if cdw10 == 1 {
			// The open file's handle.
			h := binary.LittleEndian.Uint64(c.Data)
			cmd.CDW10, cmd.CDW11 = lo(h), hi(h)
		}
		cmd.CDW2, cmd.CDW3 = lo(epoch), hi(epoch)
		var payload, data []byte
		switch cmd.Opcode.Direction() {
		case nvmeof.Bidirectional:
			payload, data = in, make([]byte, outLen)
		case nvmeof.HostToController:
			data = in
		case nvmeof.ControllerToHost:
			data = make([]byte, outLen)
		}
		if c := run(cmd, payload, data); c != nil && c.DW0 != 0 && syscall.Errno(c.DW0) == 0 {
			t.Fatal("unreachable")
		}
		// Nothing outside "v" and ".fence", which holds only records.
		names, err := mem.List(".")
		if err != nil {
			return
		}
		for _, n := range names {
			if n == fenceDir {
				recs, _ := mem.List(fenceDir)
				for _, r := range recs {
					if b, err := vfs.ReadFile(mem, fenceDir+"/"+r); err == nil && len(b) != 8 {
						t.Fatalf("fence record %s of %d bytes", r, len(b))
					}
				}
				continue
			}
			st, err := mem.Stat(n)
			if err != nil || !st.IsDir() {
				t.Fatalf("a file at the device's root: %s", n)
			}
		}
	})
}
