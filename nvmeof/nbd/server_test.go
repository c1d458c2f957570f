package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newMem(size int) *memDevice { return &memDevice{data: make([]byte, size)} }

func TestHandshakeOptions(t *testing.T) {
	mem, other := newMem(1<<20), newMem(64<<10)
	s := &Server{Exports: []Export{mem.export("vol", 512), other.export("small", 4096)}}
	addr := testServer(t, s)
	c := dial(t, addr)
	c.greet(ClientFlagFixedNewstyle | ClientFlagNoZeroes)

	c.option(OptList, nil)
	rs := c.optionReplies()
	require.Len(t, rs, 3)
	for i, name := range []string{"vol", "small"} {
		assert.Equal(t, OptList, rs[i].opt)
		assert.Equal(t, RepServer, rs[i].typ)
		assert.Equal(t, uint32(len(name)), binary.BigEndian.Uint32(rs[i].data))
		assert.Equal(t, name+"memory "+name, string(rs[i].data[4:]), "name, then the description")
	}
	assert.Equal(t, RepAck, rs[2].typ)

	c.option(OptList, []byte{1})
	assert.Equal(t, RepErrInvalid, c.optionReply().typ, "LIST with data")

	q, _ := (&InfoRequest{Name: "small", Infos: []uint16{InfoName, InfoDescription}}).MarshalBinary()
	c.option(OptInfo, q)
	infos := map[uint16][]byte{}
	rs = c.optionReplies()
	for _, r := range rs[:len(rs)-1] {
		require.Equal(t, RepInfo, r.typ)
		infos[binary.BigEndian.Uint16(r.data)] = r.data[2:]
	}
	require.Equal(t, RepAck, rs[len(rs)-1].typ)
	assert.Equal(t, uint64(64<<10), binary.BigEndian.Uint64(infos[InfoExport]))
	flags := binary.BigEndian.Uint16(infos[InfoExport][8:])
	assert.Equal(t, FlagHasFlags|FlagSendFlush|FlagSendFUA|FlagSendTrim|FlagSendWriteZeroes|FlagCanMultiConn, flags)
	assert.Equal(t, []byte("small"), infos[InfoName])
	assert.Equal(t, []byte("memory small"), infos[InfoDescription])
	assert.Equal(t, hexBlockSizes(4096, 4096, DefaultMaxPayload), infos[InfoBlockSize])

	q, _ = (&InfoRequest{Name: "nope"}).MarshalBinary()
	c.option(OptGo, q)
	assert.Equal(t, RepErrUnknown, c.optionReply().typ)
	c.option(OptGo, []byte{0, 0, 0, 9})
	assert.Equal(t, RepErrInvalid, c.optionReply().typ, "malformed GO")
	c.option(OptStartTLS, nil)
	assert.Equal(t, RepErrUnsup, c.optionReply().typ)
	c.option(Option(0x7777), make([]byte, maxOptionLength+1))
	assert.Equal(t, RepErrTooBig, c.optionReply().typ)

	c.option(OptStructuredReply, nil)
	require.Equal(t, RepAck, c.optionReply().typ)
	q, _ = (&InfoRequest{}).MarshalBinary()
	c.option(OptGo, q)
	rs = c.optionReplies()
	require.Equal(t, RepAck, rs[len(rs)-1].typ)
	assert.Equal(t, uint64(1<<20), binary.BigEndian.Uint64(rs[0].data[2:]), "the empty name is the first export")
	assert.Equal(t, FlagSendDF, binary.BigEndian.Uint16(rs[0].data[10:])&FlagSendDF, "DF with structured replies")

	// Transmission works after all that.
	c.request(CmdRead, 0, 1, 0, 512, nil)
	r := c.anyReply(map[uint64]int{1: 512})
	assert.Equal(t, reply{cookie: 1, data: make([]byte, 512)}, r)
}

func hexBlockSizes(min, pref, max uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, min)
	b = binary.BigEndian.AppendUint32(b, pref)
	return binary.BigEndian.AppendUint32(b, max)
}

func TestHandshakeEndings(t *testing.T) {
	mem := newMem(1 << 20)
	s := &Server{Exports: []Export{mem.export("vol", 512)}}
	addr := testServer(t, s)

	t.Run("abort", func(t *testing.T) {
		c := dial(t, addr)
		c.greet(ClientFlagFixedNewstyle)
		c.option(OptAbort, nil)
		assert.Equal(t, RepAck, c.optionReply().typ)
		_, err := c.br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "the server closes after ABORT")
	})
	t.Run("export name with zeroes", func(t *testing.T) {
		c := dial(t, addr)
		c.greet(ClientFlagFixedNewstyle)
		c.option(OptExportName, []byte("vol"))
		b := c.read(ExportNameReplySize + ExportNameZeroes)
		assert.Equal(t, uint64(1<<20), binary.BigEndian.Uint64(b))
		assert.Equal(t, FlagHasFlags|FlagSendFlush|FlagSendFUA|FlagSendTrim|FlagSendWriteZeroes|FlagCanMultiConn, binary.BigEndian.Uint16(b[8:]))
		assert.Equal(t, make([]byte, ExportNameZeroes), b[ExportNameReplySize:])
		c.request(CmdFlush, 0, 9, 0, 0, nil)
		assert.Equal(t, reply{cookie: 9}, c.simpleReply(nil))
	})
	t.Run("export name unknown", func(t *testing.T) {
		c := dial(t, addr)
		c.greet(ClientFlagFixedNewstyle | ClientFlagNoZeroes)
		c.option(OptExportName, []byte("nope"))
		_, err := c.br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "the protocol has no error reply for EXPORT_NAME")
	})
	t.Run("unknown client flags", func(t *testing.T) {
		c := dial(t, addr)
		c.greet(ClientFlagFixedNewstyle | 1<<5)
		_, err := c.br.ReadByte()
		assert.ErrorIs(t, err, io.EOF)
	})
	t.Run("bad option magic", func(t *testing.T) {
		c := dial(t, addr)
		c.greet(ClientFlagFixedNewstyle)
		c.write(make([]byte, OptionHeaderSize))
		_, err := c.br.ReadByte()
		assert.ErrorIs(t, err, io.EOF)
	})
}

// TestTransmission runs every command, with simple and structured
// replies, and the refusals that must not end the session.
func TestTransmission(t *testing.T) {
	for _, structured := range []bool{false, true} {
		name := "simple"
		if structured {
			name = "structured"
		}
		t.Run(name, func(t *testing.T) {
			mem := newMem(1 << 20)
			mem.failOff, mem.failLen = 512<<10, 4096
			s := &Server{Exports: []Export{mem.export("", 512)}}
			c := dial(t, testServer(t, s))
			size, _ := c.open("", structured)
			require.Equal(t, uint64(1<<20), size)
			rnd := rand.New(rand.NewPCG(1, 2))
			p := make([]byte, 8192)
			for i := range p {
				p[i] = byte(rnd.Uint32())
			}
			read := func(cookie, off uint64, n uint32) reply {
				t.Helper()
				c.request(CmdRead, 0, cookie, off, n, nil)
				if structured {
					return c.anyReply(nil)
				}
				return c.simpleReply(map[uint64]int{cookie: int(n)})
			}

			c.request(CmdWrite, CmdFlagFUA, 1, 4096, 8192, p)
			assert.Equal(t, reply{cookie: 1}, c.simpleReply(nil))
			assert.Equal(t, p, mem.data[4096:4096+8192])
			assert.Equal(t, p[512:1024], read(2, 4096+512, 512).data)
			c.request(CmdFlush, 0, 3, 0, 0, nil)
			assert.Equal(t, reply{cookie: 3}, c.simpleReply(nil))
			assert.Equal(t, 1, mem.flushes)
			c.request(CmdWriteZeroes, CmdFlagNoHole|CmdFlagFUA, 4, 4096, 1024, nil)
			assert.Equal(t, reply{cookie: 4}, c.simpleReply(nil))
			c.request(CmdTrim, 0, 5, 4096+1024, 1024, nil)
			assert.Equal(t, reply{cookie: 5}, c.simpleReply(nil))
			assert.Equal(t, make([]byte, 2048), mem.data[4096:4096+2048])
			assert.Equal(t, p[2048:], mem.data[4096+2048:4096+8192])

			// Refusals, each its own reply; the session goes on.
			for _, bad := range []struct {
				what  string
				typ   Command
				flags uint16
				off   uint64
				n     uint32
				want  Errno
			}{
				{"read past the end", CmdRead, 0, 1<<20 - 512, 1024, EINVAL},
				{"read at an offset that overflows", CmdRead, 0, 1<<64 - 512, 1024, EINVAL},
				{"write past the end", CmdWrite, 0, 1 << 20, 512, ENOSPC},
				{"write-zeroes past the end", CmdWriteZeroes, 0, 1<<20 - 512, 1024, ENOSPC},
				{"trim past the end", CmdTrim, 0, 1 << 21, 512, EINVAL},
				{"unaligned read", CmdRead, 0, 100, 512, EINVAL},
				{"unaligned write length", CmdWrite, 0, 0, 100, EINVAL},
				{"read over the payload limit", CmdRead, 0, 0, DefaultMaxPayload + 512, EINVAL},
				{"flush with a range", CmdFlush, 0, 512, 0, EINVAL},
				{"unknown command", Command(42), 0, 0, 0, EINVAL},
				{"block status not negotiated", CmdBlockStatus, 0, 0, 512, EINVAL},
				{"unknown flag", CmdWrite, 1 << 9, 0, 512, EINVAL},
				{"fast zero not offered", CmdWriteZeroes, CmdFlagFastZero, 0, 512, EINVAL},
				{"no-hole on a write", CmdWrite, CmdFlagNoHole, 0, 512, EINVAL},
				{"device error", CmdWrite, 0, 512 << 10, 4096, EIO},
			} {
				var payload []byte
				if bad.typ == CmdWrite {
					payload = bytes.Repeat([]byte{0xee}, int(bad.n)) // read and thrown away
				}
				c.request(bad.typ, bad.flags, 77, bad.off, bad.n, payload)
				r := c.anyReply(nil) // refused reads are structured when agreed
				assert.Equal(t, bad.want, r.errno, bad.what)
				assert.Equal(t, uint64(77), r.cookie, bad.what)
			}
			r := read(78, 512<<10, 4096)
			assert.Equal(t, EIO, r.errno, "a failed read is answered without data")
			if structured {
				assert.Contains(t, r.msg, "injected", "structured errors carry the text")
			}
			assert.Equal(t, p[2048:2560], read(79, 4096+2048, 512).data, "the session survived every refusal")
			assert.False(t, bytes.Contains(mem.data, bytes.Repeat([]byte{0xee}, 100)), "no refused write touched the device")

			// Zero-length requests succeed without touching the device.
			c.request(CmdWrite, 0, 80, 0, 0, nil)
			assert.Equal(t, reply{cookie: 80}, c.simpleReply(nil))
			r = read(81, 0, 0)
			assert.Equal(t, uint64(81), r.cookie)
			assert.Zero(t, r.errno)
			assert.Empty(t, r.data)

			c.request(CmdDisc, 0, 82, 0, 0, nil)
			_, err := c.br.ReadByte()
			assert.ErrorIs(t, err, io.EOF, "no reply to DISC; the server closes")
		})
	}
}

// TestRepliesFollowCompletion holds the device's ops, releases them in an
// order of its choosing, and checks that the replies arrive in that
// order, each only after its op completed, with its own cookie and data.
func TestRepliesFollowCompletion(t *testing.T) {
	mem := newMem(1 << 20)
	for i := range mem.data {
		mem.data[i] = byte(i / 4096)
	}
	s := &Server{Exports: []Export{mem.export("", 4096)}}
	c := dial(t, testServer(t, s))
	c.open("", true)
	mem.mu.Lock()
	mem.hold = true
	mem.mu.Unlock()
	const n = 16
	for i := range n {
		c.request(CmdRead, 0, uint64(100+i), uint64(i)*4096, 4096, nil)
	}
	c.request(CmdDisc, 0, 0, 0, 0, nil)
	for mem.heldCount() < n {
		// The reader submits the ops as it decodes them; DISC is read
		// after all of them, and the held ops keep the session open.
		require.Eventually(t, func() bool { return mem.heldCount() == n }, defaultWait, pollEvery)
	}
	order := rand.New(rand.NewPCG(3, 4)).Perm(n)
	mem.release(order...)
	for _, i := range order {
		r := c.anyReply(nil)
		require.Equal(t, uint64(100+i), r.cookie)
		require.Equal(t, bytes.Repeat([]byte{byte(i)}, 4096), r.data)
	}
	_, err := c.br.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "DISC closes once the held ops are answered")
	require.Eventually(t, func() bool { mem.mu.Lock(); defer mem.mu.Unlock(); return mem.closed == 1 }, defaultWait, pollEvery)
}

// TestPipelinedWrites keeps many writes of many sizes in flight from one
// connection and reads everything back.
func TestPipelinedWrites(t *testing.T) {
	mem := newMem(8 << 20)
	s := &Server{Exports: []Export{mem.export("", 512)}, Slots: 8, InFlightBytes: 256 << 10}
	c := dial(t, testServer(t, s))
	c.open("", false)
	rnd := rand.New(rand.NewPCG(5, 6))
	want := make([]byte, len(mem.data))
	const n = 200
	go func() {
		for i := range n {
			blocks := 1 + rnd.IntN(256)
			off := rnd.IntN(len(want)/512-blocks) * 512
			p := make([]byte, blocks*512)
			for j := range p {
				p[j] = byte(i + j)
			}
			copy(want[off:], p) // replies are checked after all: last write wins in order of sending, since each waits for the slot
			c.request(CmdWrite, 0, uint64(i), uint64(off), uint32(len(p)), p)
		}
	}()
	seen := map[uint64]bool{}
	for range n {
		r := c.simpleReply(nil)
		require.Zero(t, r.errno)
		require.False(t, seen[r.cookie])
		seen[r.cookie] = true
	}
	// Overlapping writes in flight together have no order; compare only
	// through the server, read in one request per MiB.
	for off := 0; off < len(want); off += 1 << 20 {
		c.request(CmdRead, 0, 1, uint64(off), 1<<20, nil)
		r := c.simpleReply(map[uint64]int{1: 1 << 20})
		require.Equal(t, mem.data[off:off+1<<20], r.data)
	}
}

// TestShutdownAnswersInFlight checks that Shutdown waits for held ops,
// answers them, and closes the connection.
func TestShutdownAnswersInFlight(t *testing.T) {
	mem := newMem(1 << 20)
	s := &Server{Exports: []Export{mem.export("", 512)}}
	c := dial(t, testServer(t, s))
	c.open("", false)
	mem.mu.Lock()
	mem.hold = true
	mem.mu.Unlock()
	c.request(CmdWrite, 0, 5, 0, 512, bytes.Repeat([]byte{1}, 512))
	require.Eventually(t, func() bool { return mem.heldCount() == 1 }, defaultWait, pollEvery)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	mem.release()
	assert.Equal(t, reply{cookie: 5}, c.simpleReply(nil))
	require.NoError(t, <-done)
	_, err := c.br.ReadByte()
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, byte(1), mem.data[0])
}

func TestExportValidation(t *testing.T) {
	open := func(int) (Device, error) { return newMem(0), nil }
	for _, e := range []Export{
		{Size: 4096, MinBlock: 3, Open: open},
		{Size: 4096, MinBlock: 1 << 17, Open: open},
		{Size: 1000, MinBlock: 512, Open: open},
		{Size: 4096, MaxPayload: 100, Open: open},
		{Size: 4096},
	} {
		s := &Server{Exports: []Export{e}}
		assert.Error(t, s.Serve(nil), "%+v", e)
	}
	assert.Error(t, (&Server{}).Serve(nil), "no exports")
}
