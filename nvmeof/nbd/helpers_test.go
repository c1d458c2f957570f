package nbd

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memDevice is a Device over a byte slice shared by every connection.
// Ops touching [failOff, failOff+failLen) fail with EIO. With hold set,
// ops wait in held until the test releases them.
type memDevice struct {
	mu      sync.Mutex // guards everything below
	data    []byte
	failOff int64
	failLen int64
	flushes int
	hold    bool
	held    []*Op
	closed  int
}

func (m *memDevice) export(name string, minBlock uint32) Export {
	return Export{Name: name, Description: "memory " + name, Size: int64(len(m.data)), MinBlock: minBlock,
		Trim: true, WriteZeroes: true, MultiConn: true,
		Open: func(int) (Device, error) { return m, nil }}
}

func (m *memDevice) Submit(op *Op) {
	m.mu.Lock()
	if m.hold {
		m.held = append(m.held, op)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.run(op)
}

func (m *memDevice) run(op *Op) {
	m.mu.Lock()
	var err error
	if op.Length > 0 && op.Offset < m.failOff+m.failLen && m.failOff < op.Offset+op.Length {
		err = fmt.Errorf("%w: injected", EIO)
	} else {
		switch op.Cmd {
		case CmdRead:
			copy(op.Buf, m.data[op.Offset:])
		case CmdWrite:
			copy(m.data[op.Offset:], op.Buf)
		case CmdTrim, CmdWriteZeroes:
			clear(m.data[op.Offset : op.Offset+op.Length])
		case CmdFlush:
			m.flushes++
		}
	}
	m.mu.Unlock()
	op.Complete(err)
}

// release runs the held ops in the order given by idx (indexes into the
// held list), or all in reverse order when idx is empty.
func (m *memDevice) release(idx ...int) {
	m.mu.Lock()
	held := m.held
	m.held = nil
	m.hold = false
	m.mu.Unlock()
	if len(idx) == 0 {
		for i := len(held) - 1; i >= 0; i-- {
			m.run(held[i])
		}
		return
	}
	for _, i := range idx {
		m.run(held[i])
	}
}

func (m *memDevice) heldCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held)
}

func (m *memDevice) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed++
	return nil
}

// testServer serves exports on a loopback listener.
func testServer(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, ErrServerClosed)
	})
	return l.Addr().String()
}

// client is a minimal NBD client for the tests: it writes bytes as the
// test says and decodes what the server sends.
type client struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *client) write(b []byte) {
	c.t.Helper()
	_, err := c.nc.Write(b)
	require.NoError(c.t, err)
}

func (c *client) read(n int) []byte {
	c.t.Helper()
	b := make([]byte, n)
	_, err := io.ReadFull(c.br, b)
	require.NoError(c.t, err)
	return b
}

// greet reads the greeting and answers with client flags.
func (c *client) greet(flags uint32) {
	c.t.Helper()
	g := c.read(GreetingSize)
	require.Equal(c.t, MagicNBD, binary.BigEndian.Uint64(g))
	require.Equal(c.t, MagicOption, binary.BigEndian.Uint64(g[8:]))
	require.Equal(c.t, FlagFixedNewstyle|FlagNoZeroes, binary.BigEndian.Uint16(g[16:]))
	c.write(binary.BigEndian.AppendUint32(nil, flags))
}

func (c *client) option(opt Option, data []byte) {
	c.t.Helper()
	h := OptionHeader{Option: opt, Length: uint32(len(data))}
	b, _ := h.MarshalBinary()
	c.write(append(b, data...))
}

type optReply struct {
	opt  Option
	typ  uint32
	data []byte
}

func (c *client) optionReply() optReply {
	c.t.Helper()
	h := c.read(OptionReplyHeaderSize)
	require.Equal(c.t, MagicOptionReply, binary.BigEndian.Uint64(h))
	return optReply{Option(binary.BigEndian.Uint32(h[8:])), binary.BigEndian.Uint32(h[12:]), c.read(int(binary.BigEndian.Uint32(h[16:])))}
}

// optionReplies reads replies up to and including a final one (ACK or
// an error).
func (c *client) optionReplies() []optReply {
	c.t.Helper()
	var rs []optReply
	for {
		r := c.optionReply()
		rs = append(rs, r)
		if r.typ == RepAck || r.typ&(1<<31) != 0 {
			return rs
		}
	}
}

// open greets, optionally asks for structured replies, and sends GO for
// name; it returns the size and transmission flags.
func (c *client) open(name string, structured bool) (uint64, uint16) {
	c.t.Helper()
	c.greet(ClientFlagFixedNewstyle | ClientFlagNoZeroes)
	if structured {
		c.option(OptStructuredReply, nil)
		require.Equal(c.t, RepAck, c.optionReply().typ)
	}
	q := InfoRequest{Name: name, Infos: []uint16{InfoBlockSize}}
	data, _ := q.MarshalBinary()
	c.option(OptGo, data)
	var size uint64
	var flags uint16
	for _, r := range c.optionReplies() {
		require.NotEqual(c.t, uint32(0), r.typ&^(1<<31), "reply %#x", r.typ)
		require.Zero(c.t, r.typ&(1<<31), "GO refused: %#x %s", r.typ, r.data)
		if r.typ == RepInfo && binary.BigEndian.Uint16(r.data) == InfoExport {
			size, flags = binary.BigEndian.Uint64(r.data[2:]), binary.BigEndian.Uint16(r.data[10:])
		}
	}
	return size, flags
}

func (c *client) request(typ Command, flags uint16, cookie, off uint64, length uint32, payload []byte) {
	c.t.Helper()
	r := Request{Flags: flags, Type: typ, Cookie: cookie, Offset: off, Length: length}
	b, _ := r.MarshalBinary()
	c.write(append(b, payload...))
}

// reply is a decoded reply: a simple one, or a structured one gathered
// to its DONE chunk.
type reply struct {
	cookie uint64
	errno  Errno
	data   []byte
	msg    string
}

// simpleReply reads a simple reply; readLen is the data a successful
// read carries.
func (c *client) simpleReply(readLen map[uint64]int) reply {
	c.t.Helper()
	h := c.read(SimpleReplySize)
	require.Equal(c.t, MagicSimpleReply, binary.BigEndian.Uint32(h))
	r := reply{cookie: binary.BigEndian.Uint64(h[8:]), errno: Errno(binary.BigEndian.Uint32(h[4:]))}
	if n := readLen[r.cookie]; n > 0 && r.errno == 0 {
		r.data = c.read(n)
	}
	return r
}

// anyReply reads one reply of either kind (structured ones must come as
// a single chunk, which is what this server sends).
func (c *client) anyReply(readLen map[uint64]int) reply {
	c.t.Helper()
	m, err := c.br.Peek(4)
	require.NoError(c.t, err)
	if binary.BigEndian.Uint32(m) == MagicSimpleReply {
		return c.simpleReply(readLen)
	}
	h := c.read(StructuredReplyHeaderSize)
	require.Equal(c.t, MagicStructuredReply, binary.BigEndian.Uint32(h))
	require.Equal(c.t, ReplyFlagDone, binary.BigEndian.Uint16(h[4:]), "one chunk per reply")
	r := reply{cookie: binary.BigEndian.Uint64(h[8:])}
	p := c.read(int(binary.BigEndian.Uint32(h[16:])))
	switch typ := binary.BigEndian.Uint16(h[6:]); typ {
	case ReplyTypeNone:
	case ReplyTypeOffsetData:
		r.data = p[8:]
	case ReplyTypeError:
		r.errno = Errno(binary.BigEndian.Uint32(p))
		n := binary.BigEndian.Uint16(p[4:])
		require.Equal(c.t, int(n)+6, len(p))
		r.msg = string(p[6:])
	default:
		c.t.Fatalf("chunk type %#x", typ)
	}
	return r
}

// Bounds of require.Eventually in these tests: they wait for goroutines
// of the server to get somewhere, never for a speed.
const (
	defaultWait = 10 * time.Second
	pollEvery   = time.Millisecond
)
