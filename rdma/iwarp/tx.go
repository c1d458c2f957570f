package iwarp

import (
	"encoding/binary"
	"net"
	"sync"
	"syscall"

	"github.com/capsule-storage/capsule/rdma/iwarp/internal/crc32c"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

const (
	// fpduBatch is how many FPDUs one writev carries at most: with the
	// default segment size about 1 MiB, so a 1 MiB Write leaves in two
	// system calls while a Read Response can still slip in between.
	fpduBatch = 16
	// hdrStride is the scratch space per FPDU for ULPDU_Length, the DDP
	// header and an RDMAP body (Read Request, Immediate Data or Terminate).
	hdrStride = 80
	trlStride = 8
)

// txPath is the write side of a connection. Everything that goes on the
// wire goes through it, one batch at a time under mu: the SQ drainer
// (Sends, Writes, Read Requests, Immediate Data), the responder (Read
// Responses) and the Terminate sender. Between batches the lock is
// released, so a long Write and a Read Response interleave at FPDU
// boundaries.
type txPath struct {
	mu   sync.Mutex // guards every field below and the conn's write side
	conn *net.TCPConn
	raw  syscall.RawConn // for raceRelease
	crc  bool
	// hdr and trl are pre-allocated header and trailer scratch for one
	// batch; bufs is the backing array of nb, the writev vector.
	hdr  []byte
	trl  []byte
	bufs [][]byte
	nb   net.Buffers
	nf   int   // FPDUs in the current batch
	room int   // vector slots one FPDU may need
	err  error // sticky write error
}

func (t *txPath) init(maxSGE int) {
	t.hdr = make([]byte, fpduBatch*hdrStride)
	t.trl = make([]byte, fpduBatch*trlStride)
	t.room = maxSGE + 3
	t.bufs = make([][]byte, 0, fpduBatch*t.room)
	t.nb = t.bufs[:0]
}

// cursor walks a gather list.
type cursor struct {
	segs [][]byte
	i    int
	off  int
}

func (c *cursor) reset(segs [][]byte) { c.segs, c.i, c.off = segs, 0, 0 }

// next returns the next contiguous piece of at most max bytes.
func (c *cursor) next(max int) []byte {
	for c.i < len(c.segs) && c.off == len(c.segs[c.i]) {
		c.i++
		c.off = 0
	}
	if c.i == len(c.segs) {
		return nil
	}
	s := c.segs[c.i][c.off:]
	if len(s) > max {
		s = s[:max]
	}
	c.off += len(s)
	return s
}

// fpdu queues one FPDU: header h, then body (an RDMAP header that follows
// the DDP header), then n payload bytes from c. The caller holds mu. It
// writes the batch out when it is full.
func (t *txPath) fpdu(h *wire.Header, body []byte, c *cursor, n int) {
	hb := t.hdr[t.nf*hdrStride : (t.nf+1)*hdrStride]
	hl := wire.ULPDULenSize + h.MarshalTo(hb[wire.ULPDULenSize:])
	hl += copy(hb[hl:], body)
	ulen := hl - wire.ULPDULenSize + n
	binary.BigEndian.PutUint16(hb, uint16(ulen))
	t.nb = append(t.nb, hb[:hl])
	var sum uint32
	if t.crc {
		sum = crc32c.Update(0, hb[:hl])
	}
	for rem := n; rem > 0; {
		p := c.next(rem)
		if len(p) == 0 {
			panic("iwarp: gather list shorter than its length")
		}
		t.nb = append(t.nb, p)
		if t.crc {
			sum = crc32c.Update(sum, p)
		}
		rem -= len(p)
	}
	tb := t.trl[t.nf*trlStride : (t.nf+1)*trlStride]
	if k := wire.PutTrailer(tb, ulen, sum, t.crc); k > 0 {
		t.nb = append(t.nb, tb[:k])
	}
	t.nf++
	if t.nf == fpduBatch || cap(t.nb)-len(t.nb) < t.room {
		t.flush()
	}
}

// flush writes the batch with one writev. The caller holds mu.
func (t *txPath) flush() {
	used := len(t.nb) // WriteTo consumes nb
	if used > 0 && t.err == nil {
		if raceEnabled {
			t.raceRelease()
		}
		_, t.err = t.nb.WriteTo(t.conn)
	}
	// Drop the references to registered memory, in the slots used.
	clear(t.bufs[:used])
	t.nb = t.bufs[:0]
	t.nf = 0
}
