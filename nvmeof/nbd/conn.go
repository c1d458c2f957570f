package nbd

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"sync"
	"time"
)

// conn is one client connection.
type conn struct {
	s          *Server
	nc         net.Conn
	id         int
	br         *bufio.Reader // the reader goroutine's
	bw         *bufio.Writer // the writer goroutine's
	structured bool

	exp   *Export
	dev   Device
	flags uint16 // transmission flags sent
	ops   []Op
	free  chan *Op // ops not in flight
	done  chan *Op // completed ops waiting for their reply

	// mu guards inflight, the bytes of data buffers held by ops in
	// flight; room is signalled when they shrink.
	mu       sync.Mutex
	room     *sync.Cond
	inflight int

	readStop sync.Once
}

// stopReading makes the reader goroutine stop at the next request; the
// requests in flight are still answered.
func (c *conn) stopReading() {
	c.readStop.Do(func() { c.nc.SetReadDeadline(time.Now()) })
}

// transmit runs the transmission phase: this goroutine reads and submits
// requests, another writes the replies in the order the device completes
// them.
func (c *conn) transmit(exp *Export, dev Device) error {
	c.exp, c.dev = exp, dev
	c.flags = exp.transmissionFlags(c.structured)
	n := c.s.Slots
	c.ops = make([]Op, n)
	c.free = make(chan *Op, n)
	c.done = make(chan *Op, n)
	c.room = sync.NewCond(&c.mu)
	for i := range c.ops {
		c.ops[i].Slot, c.ops[i].c = i, c
		c.free <- &c.ops[i]
	}
	writerDone := make(chan error, 1)
	go func() { writerDone <- c.writeReplies() }()

	rerr := c.readRequests()
	// Wait for every op to come back: each is answered (or its reply
	// dropped if the connection broke) before its slot is freed.
	for range n {
		<-c.free
	}
	close(c.done)
	werr := <-writerDone
	cerr := dev.Close()
	if rerr == nil {
		rerr = werr
	}
	if rerr == nil && cerr != nil {
		rerr = fmt.Errorf("nbd: closing the device: %w", cerr)
	}
	return rerr
}

// readRequests reads requests until NBD_CMD_DISC, the end of the stream,
// stopReading, or a request it cannot frame (bad magic). It returns nil
// for the first three.
func (c *conn) readRequests() error {
	var hdr [RequestSize]byte
	for {
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			var ne net.Error
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (errors.As(err, &ne) && ne.Timeout()) {
				return nil
			}
			return err
		}
		var req Request
		if err := req.UnmarshalBinary(hdr[:]); err != nil {
			return err
		}
		if req.Type == CmdDisc {
			return nil
		}
		op := <-c.free
		op.cookie, op.flags, op.err = req.Cookie, req.Flags, nil
		op.Cmd, op.FUA, op.NoHole = req.Type, req.Flags&CmdFlagFUA != 0, req.Flags&CmdFlagNoHole != 0
		op.Offset, op.Length, op.Buf = int64(req.Offset), int64(req.Length), nil
		errno := c.check(&req)
		hasData := req.Type == CmdRead || req.Type == CmdWrite
		if errno != 0 || !hasData || req.Length == 0 {
			if req.Type == CmdWrite {
				if _, err := io.CopyN(io.Discard, c.br, int64(req.Length)); err != nil {
					op.Complete(EIO)
					return err
				}
			}
			if errno != 0 {
				op.Complete(errno)
				continue
			}
			if hasData || (req.Length == 0 && req.Type != CmdFlush) {
				op.Complete(nil) // nothing to do
				continue
			}
			c.dev.Submit(op)
			continue
		}
		c.acquire(op, int(req.Length))
		if req.Type == CmdWrite {
			if _, err := io.ReadFull(c.br, op.Buf); err != nil {
				op.Complete(EIO)
				return err
			}
		}
		c.dev.Submit(op)
	}
}

// check validates a request against the export before anything is done
// with it; 0 means it may run.
func (c *conn) check(r *Request) Errno {
	e := c.exp
	allowed := CmdFlagFUA
	switch r.Type {
	case CmdRead:
		if c.structured {
			allowed |= CmdFlagDF
		}
	case CmdWrite, CmdFlush:
	case CmdTrim:
		if !e.Trim {
			return EINVAL
		}
	case CmdWriteZeroes:
		if !e.WriteZeroes {
			return EINVAL
		}
		allowed |= CmdFlagNoHole
	default:
		return EINVAL
	}
	if r.Flags&^allowed != 0 {
		return EINVAL
	}
	if r.Type == CmdFlush {
		if r.Offset != 0 || r.Length != 0 {
			return EINVAL
		}
		return 0
	}
	if (r.Type == CmdRead || r.Type == CmdWrite) && r.Length > e.MaxPayload {
		return EINVAL
	}
	size := uint64(e.Size)
	if r.Offset > size || uint64(r.Length) > size-r.Offset {
		if r.Type == CmdWrite || r.Type == CmdWriteZeroes {
			return ENOSPC
		}
		return EINVAL
	}
	if (r.Offset|uint64(r.Length))&uint64(e.MinBlock-1) != 0 {
		return EINVAL
	}
	return 0
}

// acquire waits until n more bytes of buffers fit the connection's
// budget (or nothing else is in flight) and gives op a buffer of n bytes.
func (c *conn) acquire(op *Op, n int) {
	c.mu.Lock()
	for c.inflight > 0 && c.inflight+n > c.s.InFlightBytes {
		c.room.Wait()
	}
	c.inflight += n
	c.mu.Unlock()
	op.bufp = getBuffer(n)
	op.Buf = (*op.bufp)[:n]
}

// release returns op's buffer.
func (c *conn) release(op *Op) {
	if op.bufp == nil {
		return
	}
	n := len(op.Buf)
	putBuffer(op.bufp)
	op.bufp, op.Buf = nil, nil
	c.mu.Lock()
	c.inflight -= n
	c.mu.Unlock()
	c.room.Signal()
}

// writeReplies sends a reply for every completed op and frees its slot.
// Replies are flushed whenever no other completion is waiting. After a
// write error the remaining replies are dropped (the client is gone) and
// the reader is stopped.
func (c *conn) writeReplies() error {
	var werr error
	var hdr [StructuredReplyHeaderSize + 8]byte
	for op := range c.done {
		if werr == nil {
			werr = c.reply(op, hdr[:])
			if werr == nil && len(c.done) == 0 {
				werr = c.bw.Flush()
			}
			if werr != nil {
				c.nc.Close()
			}
		}
		c.release(op)
		c.free <- op
	}
	return werr
}

// reply writes op's reply.
func (c *conn) reply(op *Op, hdr []byte) error {
	errno := errnoOf(op.err)
	if op.Cmd != CmdRead || !c.structured {
		putSimpleReply(hdr, errno, op.cookie)
		if _, err := c.bw.Write(hdr[:SimpleReplySize]); err != nil {
			return err
		}
		if op.Cmd == CmdRead && errno == 0 && len(op.Buf) > 0 {
			_, err := c.bw.Write(op.Buf)
			return err
		}
		return nil
	}
	switch {
	case errno != 0:
		msg := op.err.Error()
		if len(msg) > 512 {
			msg = msg[:512]
		}
		putChunkHeader(hdr, ReplyFlagDone, ReplyTypeError, op.cookie, uint32(6+len(msg)))
		binary.BigEndian.PutUint32(hdr[StructuredReplyHeaderSize:], uint32(errno))
		binary.BigEndian.PutUint16(hdr[StructuredReplyHeaderSize+4:], uint16(len(msg)))
		if _, err := c.bw.Write(hdr[:StructuredReplyHeaderSize+6]); err != nil {
			return err
		}
		_, err := c.bw.WriteString(msg)
		return err
	case len(op.Buf) == 0:
		putChunkHeader(hdr, ReplyFlagDone, ReplyTypeNone, op.cookie, 0)
		_, err := c.bw.Write(hdr[:StructuredReplyHeaderSize])
		return err
	}
	putChunkHeader(hdr, ReplyFlagDone, ReplyTypeOffsetData, op.cookie, uint32(8+len(op.Buf)))
	binary.BigEndian.PutUint64(hdr[StructuredReplyHeaderSize:], uint64(op.Offset))
	if _, err := c.bw.Write(hdr); err != nil {
		return err
	}
	_, err := c.bw.Write(op.Buf)
	return err
}

// Data buffers are pooled by power-of-two size class, from 4 KiB up, so
// that steady-state requests allocate nothing.
const minBufferShift = 12

var bufferPools [bits.UintSize]sync.Pool

func sizeClass(n int) int {
	if n <= 1<<minBufferShift {
		return minBufferShift
	}
	return bits.Len(uint(n - 1))
}

func getBuffer(n int) *[]byte {
	k := sizeClass(n)
	if p, ok := bufferPools[k].Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, 1<<k)
	return &b
}

func putBuffer(p *[]byte) {
	bufferPools[sizeClass(cap(*p))].Put(p)
}
