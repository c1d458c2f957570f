package iwarp

import (
	"encoding/binary"
	"net"
	"sync"
	"syscall"

	"github.com/capsule-storage/capsule/internal/crc32c"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

const (
	// batchBytes is how many payload bytes one writev carries by
	// reference before it goes out: with the default segment size 16
	// segments, so a 1 MiB Write leaves in about one system call while a
	// Read Response can still slip in between batches.
	batchBytes = 960 << 10
	// fpduBatch is how many segments of a Read Response go out per hold
	// of the source region (one batch with the default segment size).
	fpduBatch = 16
	// batchVecs bounds the writev vector (IOV_MAX is 1024).
	batchVecs = 1024
	// arenaSize is the scratch of one batch for FPDU headers, trailers and
	// the payloads of small FPDUs, which are copied there so that a run
	// of small FPDUs is one contiguous piece of the vector.
	arenaSize = 64 << 10
	// smallPayload is the largest payload copied into the arena instead
	// of being referenced in place.
	smallPayload = 256
	// hdrStride is the most header bytes one FPDU needs: ULPDU_Length,
	// the DDP header and an RDMAP body (Read Request, Immediate Data or
	// Terminate).
	hdrStride = 80
	trlStride = 8
	// fpduArena is the arena room one FPDU may need.
	fpduArena = hdrStride + smallPayload + trlStride
)

// txPath is the write side of a connection. Everything that goes on the
// wire goes through it, one batch at a time under mu: the SQ drainer
// (Sends, Writes, Read Requests, Immediate Data), the responder (Read
// Responses) and the Terminate sender. A batch gathers the FPDUs of as
// many WRs as the drainer found posted, so one writev carries many small
// messages; between batches the lock is released, so a long Write and a
// Read Response interleave at FPDU boundaries.
type txPath struct {
	mu   sync.Mutex // guards every field below and the conn's write side
	conn *net.TCPConn
	raw  syscall.RawConn // for raceRelease
	crc  bool
	// arena holds headers, trailers and small payloads of the batch;
	// bufs is the backing array of nb, the writev vector.
	arena []byte
	used  int // arena bytes in use
	// open is set when nb's last entry is arena[openAt:used], so that
	// arena bytes queued next extend it instead of taking a new entry.
	open   bool
	openAt int
	bufs   [][]byte
	nb     net.Buffers
	nf     int   // FPDUs in the current batch
	bytes  int   // payload bytes referenced (not copied) by the batch
	room   int   // vector slots one FPDU may need
	err    error // sticky write error
}

func (t *txPath) init(maxSGE int) {
	t.arena = make([]byte, arenaSize)
	t.room = maxSGE + 3
	t.bufs = make([][]byte, 0, batchVecs)
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

// queueArena adds arena[from:to] to the vector, extending the last entry
// when it ends at from.
func (t *txPath) queueArena(from, to int) {
	if t.open && t.used == from {
		t.nb[len(t.nb)-1] = t.arena[t.openAt:to]
	} else {
		t.nb = append(t.nb, t.arena[from:to])
		t.open, t.openAt = true, from
	}
	t.used = to
}

// fpdu queues one FPDU: header h, then body (an RDMAP header that follows
// the DDP header), then n payload bytes from c. The caller holds mu. It
// writes the batch out when it is full, so nf is 0 afterwards exactly
// when a batch went out.
func (t *txPath) fpdu(h *wire.Header, body []byte, c *cursor, n int) {
	p := t.used
	hb := t.arena[p:]
	hl := wire.ULPDULenSize + h.MarshalTo(hb[wire.ULPDULenSize:])
	hl += copy(hb[hl:], body)
	ulen := hl - wire.ULPDULenSize + n
	binary.BigEndian.PutUint16(hb, uint16(ulen))
	var sum uint32
	if n <= smallPayload {
		// Copy the payload after the header: the FPDU is one piece.
		e := hl
		for e < hl+n {
			q := c.next(hl + n - e)
			if len(q) == 0 {
				panic("iwarp: gather list shorter than its length")
			}
			e += copy(hb[e:], q)
		}
		if t.crc {
			sum = crc32c.Update(0, hb[:e])
		}
		e += wire.PutTrailer(hb[e:], ulen, sum, t.crc)
		t.queueArena(p, p+e)
	} else {
		t.queueArena(p, p+hl)
		if t.crc {
			sum = crc32c.Update(0, hb[:hl])
		}
		for rem := n; rem > 0; {
			q := c.next(rem)
			if len(q) == 0 {
				panic("iwarp: gather list shorter than its length")
			}
			t.nb = append(t.nb, q)
			if t.crc {
				sum = crc32c.Update(sum, q)
			}
			rem -= len(q)
		}
		t.open = false
		t.bytes += n
		p = t.used
		k := wire.PutTrailer(t.arena[p:], ulen, sum, t.crc)
		if k > 0 {
			t.queueArena(p, p+k)
		}
	}
	t.nf++
	if t.bytes >= batchBytes || len(t.arena)-t.used < fpduArena || cap(t.nb)-len(t.nb) < t.room {
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
	t.nf, t.bytes, t.used, t.open = 0, 0, 0, false
}
