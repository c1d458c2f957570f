package shm

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
	"github.com/capsule-storage/capsule/rdma"
)

// unhex decodes field-annotated hex.
var unhex = hextest.Decode

func TestEntryHex(t *testing.T) {
	cases := []struct {
		name string
		hex  string
		want entry
	}{
		{"SendImmWhole", `
			02                       // type SendImm
			03                       // flags First|Last
			0000                     // reserved
			10000000                 // len 16
			07000000                 // msn 7
			efbeadde                 // imm 0xdeadbeef
			00000000                 // inv
			10000000                 // total 16
			0000000000000000         // reserved
		`, entry{Type: entSendImm, Flags: entFirst | entLast, Len: 16, MSN: 7, Imm: 0xdeadbeef, Total: 16}},
		{"SendInvFirstFragment", `
			03 05 0000               // SendInv, First|Solicited
			00000100                 // len 65536
			01000000                 // msn 1
			00000000                 // imm
			01020000                 // inv 0x0201
			00000300                 // total 196608
			0000000000000000
		`, entry{Type: entSendInv, Flags: entFirst | entSolicited, Len: 65536, MSN: 1, Inv: 0x201, Total: 196608}},
		{"WriteImm", `
			04 03 0000               // WriteImm, First|Last
			00000000                 // no payload
			ffffffff                 // msn 2^32-1
			2a000000                 // imm 42
			00000000
			00001000                 // total: 1 MiB written
			0000000000000000
		`, entry{Type: entWriteImm, Flags: entFirst | entLast, MSN: 0xffffffff, Imm: 42, Total: 1 << 20}},
		{"Pad", `
			05 00 0000               // Pad
			e0000000                 // len 224: up to the end of the ring
			00000000 00000000 00000000 00000000
			0000000000000000
		`, entry{Type: entPad, Len: 224}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := unhex(t, c.hex)
			got, err := decodeEntry(b)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			out := make([]byte, entHdrLen)
			putEntry(out, got)
			assert.Equal(t, b, out)
		})
	}
}

func TestEntryHexInvalid(t *testing.T) {
	cases := map[string]string{
		"short":           `01 03 0000 00000000`,
		"unknown type":    `09 03 0000 00000000 01000000 00000000 00000000 00000000 0000000000000000`,
		"reserved":        `01 03 0100 00000000 01000000 00000000 00000000 00000000 0000000000000000`,
		"reserved tail":   `01 03 0000 00000000 01000000 00000000 00000000 00000000 0000000000000001`,
		"unknown flag":    `01 13 0000 00000000 01000000 00000000 00000000 00000000 0000000000000000`,
		"msn 0":           `01 03 0000 00000000 00000000 00000000 00000000 00000000 0000000000000000`,
		"Send with imm":   `01 03 0000 00000000 01000000 01000000 00000000 00000000 0000000000000000`,
		"imm with inv":    `02 03 0000 00000000 01000000 00000000 01000000 00000000 0000000000000000`,
		"len over total":  `01 01 0000 09000000 01000000 00000000 00000000 08000000 0000000000000000`,
		"whole not total": `01 03 0000 04000000 01000000 00000000 00000000 08000000 0000000000000000`,
		"WriteImm data":   `04 03 0000 04000000 01000000 00000000 00000000 04000000 0000000000000000`,
		"WriteImm frag":   `04 01 0000 00000000 01000000 00000000 00000000 00000000 0000000000000000`,
		"pad with msn":    `05 00 0000 00000000 01000000 00000000 00000000 00000000 0000000000000000`,
	}
	for name, h := range cases {
		_, err := decodeEntry(unhex(t, h))
		assert.Error(t, err, name)
	}
}

func TestRingEntry(t *testing.T) {
	data := make([]byte, 256)
	putEntry(data[0:], entry{Type: entSend, Flags: entFirst | entLast, Len: 40, MSN: 1, Total: 40})
	putEntry(data[96:], entry{Type: entPad, Len: 256 - 96 - entHdrLen})
	e, off, size, ok, err := ringEntry(data, 256*3, 256*3+96+160)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, uint32(40), e.Len)
	assert.Equal(t, entHdrLen, off)
	assert.Equal(t, uint64(96), size, "32 header bytes and 40 payload bytes padded to 64")
	e, _, size, ok, err = ringEntry(data, 96, 256)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, entPad, e.Type)
	assert.Equal(t, uint64(160), size)
	_, _, _, ok, err = ringEntry(data, 96, 96)
	assert.NoError(t, err)
	assert.False(t, ok, "empty")
	_, _, _, _, err = ringEntry(data, 0, 64)
	assert.ErrorIs(t, err, ErrBadEntry, "published less than the entry")
	_, _, _, _, err = ringEntry(data, 0, 512)
	assert.ErrorIs(t, err, ErrBadRing, "tail ahead by more than the ring")
	_, _, _, _, err = ringEntry(data, 0, 33)
	assert.ErrorIs(t, err, ErrBadRing, "misaligned")
}

func TestStream(t *testing.T) {
	var s rxStream
	step := func(e entry) (bool, bool, error) { return s.accept(e) }
	f, l, err := step(entry{Type: entSend, Flags: entFirst, Len: 10, MSN: 1, Total: 15})
	require.NoError(t, err)
	assert.True(t, f)
	assert.False(t, l)
	_, _, err = step(entry{Type: entSend, Flags: entFirst, Len: 5, MSN: 2, Total: 5})
	assert.ErrorIs(t, err, ErrBadStream, "a message inside a message")
	s = rxStream{}
	step(entry{Type: entSend, Flags: entFirst, Len: 10, MSN: 1, Total: 15})
	_, _, err = step(entry{Type: entSend, Flags: entLast, Len: 4, MSN: 1, Total: 15})
	assert.ErrorIs(t, err, ErrBadStream, "short by a byte")
	s = rxStream{}
	step(entry{Type: entSend, Flags: entFirst, Len: 10, MSN: 1, Total: 15})
	f, l, err = step(entry{Type: entSend, Flags: entLast, Len: 5, MSN: 1, Total: 15})
	require.NoError(t, err)
	assert.False(t, f)
	assert.True(t, l)
	_, _, err = step(entry{Type: entSend, Flags: entFirst | entLast, MSN: 3})
	assert.ErrorIs(t, err, ErrBadStream, "message 2 skipped")
}

func TestKeyEntryHex(t *testing.T) {
	b := unhex(t, `
		01050000                 // state: key 0x501 (index 5, generation 1)
		07000000                 // access LocalWrite|RemoteRead|RemoteWrite
		0000a0f7ff7f0000         // base 0x7ffff7a00000
		0000100000000000         // length 1 MiB
		0300000000000000         // serial 3
	`)
	e, err := decodeKeyEntry(b)
	require.NoError(t, err)
	want := keyEntry{State: 0x501, Access: rdma.AccessAll, Base: 0x7ffff7a00000, Length: 1 << 20, Serial: 3}
	assert.Equal(t, want, e)
	out := make([]byte, keLen)
	putKeyEntry(out, e)
	assert.Equal(t, b, out)
	assert.True(t, e.allows(0x7ffff7a00000+(1<<20)-8, 8, rdma.AccessRemoteWrite))
	assert.False(t, e.allows(0x7ffff7a00000+(1<<20)-8, 9, rdma.AccessRemoteWrite))
	assert.False(t, e.allows(0x7ffff7a00000-1, 1, rdma.AccessRemoteRead))

	for name, h := range map[string]string{
		"generation 0": `00050000 07000000 0000a0f7ff7f0000 0000100000000000 0300000000000000`,
		"access bits":  `01050000 08000000 0000a0f7ff7f0000 0000100000000000 0300000000000000`,
		"empty":        `01050000 07000000 0000a0f7ff7f0000 0000000000000000 0300000000000000`,
		"wraps":        `01050000 07000000 00f0ffffffffffff 0000100000000000 0300000000000000`,
		"short":        `01050000 07000000`,
	} {
		_, err := decodeKeyEntry(unhex(t, h))
		assert.Error(t, err, name)
	}
	free, err := decodeKeyEntry(unhex(t, `00000000 ffffffff ffffffffffffffff ffffffffffffffff 0000000000000000`))
	require.NoError(t, err, "a free entry is valid whatever it holds")
	assert.Zero(t, free.State)
}

func TestKeyTableHeader(t *testing.T) {
	mem := make([]byte, keyTableSize(4))
	copy(mem, unhex(t, `
		43534b54                 // magic "CSKT"
		01000000                 // version 1
		04000000                 // capacity 4
		20000000                 // entry size 32
	`))
	c, err := checkKeyTable(mem)
	require.NoError(t, err)
	assert.Equal(t, uint32(4), c)
	_, err = checkKeyTable(mem[:len(mem)-1])
	assert.ErrorIs(t, err, ErrBadTable, "too short for its capacity")
	putKeyTableHeader(mem, 4)
	_, err = checkKeyTable(mem)
	assert.NoError(t, err)
}

func TestCtlMsgHex(t *testing.T) {
	cases := []struct {
		name string
		hex  string
		want ctlMsg
	}{
		{"ConnReq", `
			01 01 0000               // ConnReq, version 1
			29000000                 // body 41 bytes
			0800000000000000         // pdid 8
			03000000                 // qpnum 3
			39300000                 // pid 12345
			00000400                 // ring 256 KiB
			07000000                 // rnr retry 7
			8096980000000000         // rnr timeout 10ms
			05000000                 // 5 bytes of private data
			68656c6c6f               // "hello"
		`, ctlMsg{Type: ctlConnReq, PDID: 8, QPNum: 3, PID: 12345, RingSize: 256 << 10, RNRRetry: 7, RNRTimeout: 10 * time.Millisecond, Private: []byte("hello")}},
		{"Reject", `
			03 01 0000 06000000      // Reject, body 6
			02000000 6e6f            // "no"
		`, ctlMsg{Type: ctlReject, Private: []byte("no")}},
		{"FetchReq", `
			04 01 0000 10000000      // FetchReq, body 16
			09000000                 // seq 9
			01050000                 // key 0x501
			0300000000000000         // serial 3
		`, ctlMsg{Type: ctlFetchReq, Seq: 9, Key: 0x501, Serial: 3}},
		{"FetchReply", `
			05 01 0000 18000000      // FetchReply, body 24
			09000000                 // seq 9
			00000000                 // status ok
			0300000000000000         // serial 3
			0000100000000000         // size 1 MiB
		`, ctlMsg{Type: ctlFetchReply, Seq: 9, Serial: 3, Size: 1 << 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := unhex(t, c.hex)
			got, err := decodeCtlMsg(b)
			require.NoError(t, err)
			if len(got.Private) == 0 {
				got.Private = c.want.Private
			}
			assert.Equal(t, c.want, got)
			out := make([]byte, ctlMaxLen)
			n, err := got.marshalInto(out)
			require.NoError(t, err)
			assert.Equal(t, b, out[:n])
		})
	}
	for name, h := range map[string]string{
		"version":       `04 02 0000 10000000 09000000 01050000 0300000000000000`,
		"body length":   `04 01 0000 11000000 09000000 01050000 0300000000000000`,
		"private len":   `03 01 0000 06000000 03000000 6e6f`,
		"private > 512": `03 01 0000 04000000 01020000`,
		"fetch status":  `05 01 0000 18000000 09000000 02000000 0300000000000000 0000100000000000`,
		"unknown type":  `07 01 0000 00000000`,
		"short":         `04 01 00`,
	} {
		_, err := decodeCtlMsg(unhex(t, h))
		assert.Error(t, err, name)
	}
}

func FuzzEntry(f *testing.F) {
	seed := make([]byte, entHdrLen)
	for _, e := range []entry{
		{Type: entSend, Flags: entFirst | entLast, Len: 16, MSN: 1, Total: 16},
		{Type: entSendInv, Flags: entFirst, Len: 8, MSN: 2, Inv: 0x101, Total: 64},
		{Type: entWriteImm, Flags: entFirst | entLast, MSN: 3, Imm: 9, Total: 4096},
		{Type: entPad, Len: 96},
	} {
		putEntry(seed, e)
		f.Add(bytes.Clone(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			return
		}
		out := make([]byte, entHdrLen)
		putEntry(out, e)
		e2, err := decodeEntry(out)
		require.NoError(t, err)
		require.Equal(t, e, e2)
		require.Equal(t, b[:entHdrLen], out)
	})
}

// FuzzRing feeds arbitrary ring contents and producer indexes to the
// consumer's parsing: it must never read outside the ring or accept a
// malformed message stream.
func FuzzRing(f *testing.F) {
	data := make([]byte, 256)
	putEntry(data[0:], entry{Type: entSend, Flags: entFirst, Len: 40, MSN: 1, Total: 50})
	putEntry(data[96:], entry{Type: entSend, Flags: entLast, Len: 10, MSN: 1, Total: 50})
	putEntry(data[160:], entry{Type: entPad, Len: 64})
	f.Add(bytes.Clone(data), uint64(0), uint64(256))
	f.Add(bytes.Clone(data), uint64(96), uint64(512))
	f.Fuzz(func(t *testing.T, data []byte, head, tail uint64) {
		if len(data) < entHdrLen {
			return
		}
		n := 1
		for n*2 <= len(data) {
			n *= 2
		}
		data = data[:n]
		var s rxStream
		var got uint64
		for i := 0; i < 64; i++ {
			e, off, size, ok, err := ringEntry(data, head, tail)
			if err != nil || !ok {
				return
			}
			require.LessOrEqual(t, off+int(e.Len), len(data), "payload inside the ring")
			require.LessOrEqual(t, size, tail-head)
			_, last, err := s.accept(e)
			if err != nil {
				return
			}
			if e.Type != entPad && e.Type != entWriteImm {
				got += uint64(e.Len)
			}
			if last && e.Type != entWriteImm {
				require.Equal(t, uint64(e.Total), got, "a message ends with its total")
			}
			if last {
				got = 0
			}
			head += size
		}
	})
}

func FuzzKeyEntry(f *testing.F) {
	b := make([]byte, keLen)
	putKeyEntry(b, keyEntry{State: 0x501, Access: rdma.AccessAll, Base: 0x7f0000000000, Length: 4096, Serial: 1})
	f.Add(bytes.Clone(b))
	putKeyEntry(b, keyEntry{})
	f.Add(bytes.Clone(b))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeKeyEntry(b)
		if err != nil {
			return
		}
		out := make([]byte, keLen)
		putKeyEntry(out, e)
		require.Equal(t, b[:keLen], out)
		if e.State != 0 && e.allows(e.Base, e.Length, e.Access) {
			require.False(t, e.allows(e.Base+1, e.Length, e.Access), "one byte past the end")
		}
	})
}

func FuzzCtlMsg(f *testing.F) {
	out := make([]byte, ctlMaxLen)
	for _, m := range []ctlMsg{
		{Type: ctlConnReq, PDID: 1, QPNum: 2, PID: 3, RingSize: 4096, RNRRetry: 7, RNRTimeout: time.Millisecond, Private: []byte("x")},
		{Type: ctlAccept, PDID: 1, Private: make([]byte, rdma.MaxPrivateData)},
		{Type: ctlReject},
		{Type: ctlFetchReq, Seq: 1, Key: 0x101, Serial: 1},
		{Type: ctlFetchReply, Seq: 1, Status: 1},
	} {
		n, err := m.marshalInto(out)
		require.NoError(f, err)
		f.Add(bytes.Clone(out[:n]))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeCtlMsg(b)
		if err != nil {
			return
		}
		n, err := m.marshalInto(out)
		require.NoError(t, err)
		require.Equal(t, b, out[:n])
	})
}

func TestBlockHeaderHex(t *testing.T) {
	mem := make([]byte, blockSize(minRingSize))
	copy(mem, unhex(t, `
		43535142                 // magic "CSQB"
		01000000                 // version 1
		00100000                 // ring size 4096
	`))
	require.NoError(t, checkBlock(mem, minRingSize))
	assert.ErrorIs(t, checkBlock(mem, 2*minRingSize), ErrBadTable, "not the announced ring size")
	assert.ErrorIs(t, checkBlock(mem[:len(mem)-1], minRingSize), ErrBadTable, "too short for its rings")
	out := make([]byte, blkHdrLen)
	putBlockHeader(out, minRingSize)
	assert.Equal(t, mem[:blkHdrLen], out)
}

// FuzzSharedHeaders checks the headers of the two tables a peer hands
// over: a key table and a QP block.
func FuzzSharedHeaders(f *testing.F) {
	kt := make([]byte, keyTableSize(2))
	putKeyTableHeader(kt, 2)
	f.Add(kt, uint32(0))
	blk := make([]byte, blockSize(minRingSize))
	putBlockHeader(blk, minRingSize)
	f.Add(blk, uint32(minRingSize))
	f.Fuzz(func(t *testing.T, mem []byte, ringSize uint32) {
		if c, err := checkKeyTable(mem); err == nil {
			require.LessOrEqual(t, keyTableSize(c), len(mem))
			out := make([]byte, ktHdrLen)
			putKeyTableHeader(out, c)
			require.Equal(t, mem[:16], out[:16])
		}
		if err := checkBlock(mem, ringSize); err == nil {
			require.LessOrEqual(t, blockSize(ringSize), len(mem))
			out := make([]byte, blkHdrLen)
			putBlockHeader(out, ringSize)
			require.Equal(t, mem[:12], out[:12])
			blockEndpoint(mem, 1, ringSize) // in bounds
		}
	})
}
