package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// The NVMe/TCP binding of a queue: one TCP connection opened with
// ICReq/ICResp; capsules in CapsuleCmd PDUs (in-capsule data after the
// header and CPDA padding), host data in H2CData PDUs the controller asks
// for with R2T, controller data in C2HData PDUs read straight into the
// slot's memory, responses in CapsuleResp PDUs.

const (
	// tcpAdminCapsuleData is the in-capsule data of the admin queue, as
	// the NVMe/TCP transport fixes it (8 KiB).
	tcpAdminCapsuleData = 8192
	// tcpMaxC2HData bounds the data of one C2HData PDU the host accepts
	// before it looks at the command (each PDU is then checked against
	// the command's own buffer).
	tcpMaxC2HData = 16 << 20
	// tcpReadBuffer is the reader's buffer: many small PDUs per read,
	// large data straight into the slot.
	tcpReadBuffer = 32 << 10
)

// tcpSlotPDU holds the parts of one slot's CapsuleCmd PDU (the common
// header, the header digest and padding, the data digest; the SQE and
// in-capsule data are the slot's capsule) and the headers of the H2CData
// PDUs that answer an R2T for it.
type tcpSlotPDU struct {
	ch  [nvmeof.TCPCommonHeaderSize]byte
	mid [nvmeof.TCPDigestSize + 128]byte
	dd  [nvmeof.TCPDigestSize]byte
	vec [5][]byte
	n   int // parts of vec in use

	// h2c holds, per H2CData PDU of the R2T being answered, its header
	// (with digest and padding) and its data digest; grown on first use.
	h2c [][tcpH2CHeadMax + nvmeof.TCPDigestSize]byte
}

// tcpH2CHeadMax is the most bytes before an H2CData's data: header,
// digest and CPDA padding.
const tcpH2CHeadMax = 128

// tcpSend is a PDU the writer goroutine sends for the reader: a capsule
// issued while the reader handled responses, or the H2CData PDUs an R2T
// asked for.
type tcpSend struct {
	s        *slot
	r2t      bool
	ttag     uint16
	off, end uint32
}

// tcpTransport is a queue's NVMe/TCP connection.
type tcpTransport struct {
	q      *queue
	digest nvmeof.TCPDigestTypes // asked for in ICReq

	conn net.Conn
	br   *bufio.Reader
	// Negotiated by ICReq/ICResp, before the queue goroutine starts.
	hdgst, ddgst bool
	cpda         int
	maxH2C       int
	recv         nvmeof.TCPReceiver

	// wmu serializes writes to conn and guards dvec.
	wmu  sync.Mutex
	pdus []tcpSlotPDU // one per slot, the issuer's
	// dvec is the vector of a capsule written at once. It is not the
	// slot's: writev consumes its vector as it goes, and the command can
	// be answered, its slot reused and refilled before the call returns.
	dvec    net.Buffers
	dvecArr [5][]byte

	// The reader never writes: a write can wait for the controller to
	// read, and the controller may be waiting to write to us. What it
	// has to send goes to the writer goroutine through pend.
	pmu     sync.Mutex // guards pend
	pend    []tcpSend
	writing []tcpSend // the writer's copy of pend
	wake    chan struct{}
	wdone   chan struct{}
	wvec    net.Buffers // the writer's vector, reused
	wbufs   net.Buffers

	// The reader's buffers.
	hdr  [nvmeof.TCPICRespSize + nvmeof.TCPDigestSize]byte
	dig  [nvmeof.TCPDigestSize]byte
	term [nvmeof.TCPTermReqHeaderSize + nvmeof.TCPTermReqMaxData]byte
	// ddErr holds, per slot, the CID+1 of the command whose C2HData
	// failed its data digest, 0 when none: the command completes with
	// Transient Transport Error. The reader's.
	ddErr []uint32

	closeOnce sync.Once
}

var _ queueTransport = (*tcpTransport)(nil)

// newTCPTransport allocates q's memory (plain memory: nothing is
// registered on TCP).
func newTCPTransport(q *queue) *tcpTransport {
	depth := q.cfg.entries - 1
	q.slotMem = make([]byte, depth*q.stride)
	if q.cfg.buffers > 0 {
		q.bufMem = make([]byte, q.cfg.buffers*q.cfg.bufSize)
	}
	return &tcpTransport{q: q, digest: q.ctrl.cfg.tcpDigest, pdus: make([]tcpSlotPDU, depth),
		pend: make([]tcpSend, 0, 2*depth), writing: make([]tcpSend, 0, 2*depth),
		wake: make(chan struct{}, 1), wdone: make(chan struct{}), wvec: make(net.Buffers, 0, 8*depth),
		ddErr: make([]uint32, depth)}
}

func (t *tcpTransport) init() error { return nil }

// connect dials host (HOST:PORT) and exchanges ICReq/ICResp: PFV 0,
// HPDA 0, the digests of WithTCPDigests, MAXR2T 0 (one R2T per command at
// a time). The ICResp is checked as a Linux host checks it, and may
// enable only digests the host asked for.
func (t *tcpTransport) connect(ctx context.Context, host string, cntlid uint16) (int, error) {
	q := t.q
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return 0, fmt.Errorf("nvmeof/host: queue %d: connect to %s: %w", q.qid, host, err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	t.conn = c
	t.br = bufio.NewReaderSize(c, tcpReadBuffer)
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := nvmeof.TCPICReq{Digest: t.digest}
	var b [nvmeof.TCPICRespSize]byte
	req.MarshalTo(b[:])
	if _, err := c.Write(b[:]); err != nil {
		return 0, fmt.Errorf("nvmeof/host: queue %d: ICReq: %w", q.qid, err)
	}
	if _, err := io.ReadFull(t.br, b[:]); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return 0, fmt.Errorf("nvmeof/host: queue %d: ICResp: %w", q.qid, err)
	}
	if b[nvmeof.TCPOffsetPDUType] == byte(nvmeof.TCPPDUC2HTermReq) {
		return 0, fmt.Errorf("%w: queue %d: the controller refused the ICReq with a C2HTermReq", ErrProtocol, q.qid)
	}
	var resp nvmeof.TCPICResp
	if err := resp.UnmarshalBinary(b[:]); err != nil {
		return 0, fmt.Errorf("%w: queue %d: ICResp: %w", ErrProtocol, q.qid, err)
	}
	if resp.Digest&^t.digest != 0 {
		return 0, fmt.Errorf("%w: queue %d: ICResp enables digests %#x, the host asked for %#x", ErrProtocol, q.qid, resp.Digest, t.digest)
	}
	t.hdgst = resp.Digest&nvmeof.TCPHeaderDigest != 0
	t.ddgst = resp.Digest&nvmeof.TCPDataDigest != 0
	t.cpda = int(resp.CPDA)
	t.maxH2C = int(resp.MAXH2CDATA)
	t.recv = nvmeof.TCPReceiver{Initialized: true, HeaderDigest: t.hdgst, DataDigest: t.ddgst, MaxC2HData: tcpMaxC2HData}
	c.SetDeadline(time.Time{})
	return 0, nil
}

// run reads PDUs until the connection ends, with the writer goroutine
// beside it. PDUs already buffered are handled as one batch: the capsules
// and H2CData they cause go out in one writev.
func (t *tcpTransport) run() {
	q := t.q
	go t.writeLoop()
	defer func() { <-t.wdone }()
	for {
		// Wait outside the batch: commands issued meanwhile go out at once.
		_, err := t.br.Peek(nvmeof.TCPCommonHeaderSize)
		q.startBatch()
		for err == nil {
			if err = t.readPDU(); err != nil || !t.pduBuffered() {
				break
			}
		}
		q.endBatch()
		if err != nil {
			if q.ctx.Err() != nil {
				return
			}
			if !q.failed {
				q.fail(fmt.Errorf("nvmeof/host: queue %d: %w", q.qid, err))
			}
			<-q.ctx.Done()
			return
		}
	}
}

// pduBuffered reports whether a whole PDU waits in the read buffer.
func (t *tcpTransport) pduBuffered() bool {
	n := t.br.Buffered()
	if n < nvmeof.TCPCommonHeaderSize {
		return false
	}
	b, _ := t.br.Peek(nvmeof.TCPCommonHeaderSize)
	h, _ := nvmeof.ParseTCPHeader(b)
	return int64(h.PLEN) <= int64(n)
}

// queueSend hands a PDU to the writer; flush (at the batch's end) wakes it.
func (t *tcpTransport) queueSend(x tcpSend) {
	t.pmu.Lock()
	t.pend = append(t.pend, x)
	t.pmu.Unlock()
}

// flush wakes the writer if the batch queued anything.
func (t *tcpTransport) flush() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// writeLoop is the writer goroutine: it sends what the reader queued, all
// of it in one writev, until the queue ends.
func (t *tcpTransport) writeLoop() {
	q := t.q
	defer close(t.wdone)
	for {
		select {
		case <-q.ctx.Done():
			return
		case <-t.wake:
		}
		t.pmu.Lock()
		t.writing, t.pend = t.pend, t.writing[:0]
		t.pmu.Unlock()
		vec := t.wvec[:0]
		for _, x := range t.writing {
			if x.r2t {
				vec = t.appendH2C(vec, x)
			} else {
				b := &t.pdus[x.s.idx]
				vec = append(vec, b.vec[:b.n]...)
			}
		}
		clear(t.writing)
		if len(vec) == 0 {
			continue
		}
		t.wmu.Lock()
		t.wbufs = vec
		_, err := t.wbufs.WriteTo(t.conn)
		t.wmu.Unlock()
		clear(vec)
		t.wvec = vec[:0]
		if err != nil {
			q.log.Debug("nvmeof/host: writing failed; dropping the queue", "err", err)
			t.setError()
		}
	}
}

// readPDU reads and handles one PDU from the controller.
func (t *tcpTransport) readPDU() error {
	q := t.q
	hdr := t.hdr[:]
	if _, err := io.ReadFull(t.br, hdr[:nvmeof.TCPCommonHeaderSize]); err != nil {
		return err
	}
	h, _ := nvmeof.ParseTCPHeader(hdr)
	l, fe := t.recv.Check(h)
	if fe != nil {
		return t.terminate(fe, hdr[:nvmeof.TCPCommonHeaderSize])
	}
	if _, err := io.ReadFull(t.br, hdr[nvmeof.TCPCommonHeaderSize:l.Header]); err != nil {
		return err
	}
	if l.Header > int(h.HLEN) && !nvmeof.TCPDigestMatches(hdr[h.HLEN:], nvmeof.TCPDigest(hdr[:h.HLEN])) {
		return t.terminate(&nvmeof.TCPFatalError{FES: nvmeof.TCPFESHeaderDigestError, Why: fmt.Sprintf("header digest of a %v", h.Type)}, hdr[:l.Header])
	}
	if q.failed {
		return errors.New("queue failed")
	}
	switch h.Type {
	case nvmeof.TCPPDUCapsuleResp:
		var cqe nvmeof.Completion
		if err := cqe.UnmarshalBinary(hdr[nvmeof.TCPCommonHeaderSize:nvmeof.TCPCapsuleRespHeaderSize]); err != nil {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		if s := q.responseSlot(cqe.CID); s != nil {
			q.gotResponse(s, t.digestStatus(s, cqe))
		}
		return nil
	case nvmeof.TCPPDUC2HData:
		return t.onC2HData(h, l)
	case nvmeof.TCPPDUR2T:
		return t.onR2T()
	case nvmeof.TCPPDUC2HTermReq:
		data := t.term[:l.Data]
		if _, err := io.ReadFull(t.br, data); err != nil {
			return err
		}
		var term nvmeof.TCPTermReq
		all := append(t.hdr[:nvmeof.TCPTermReqHeaderSize:nvmeof.TCPTermReqHeaderSize], data...)
		if err := term.UnmarshalBinary(all); err != nil {
			return fmt.Errorf("%w: C2HTermReq: %w", ErrProtocol, err)
		}
		return fmt.Errorf("%w: the controller ended the connection: C2HTermReq %v, FEI %d", ErrProtocol, term.FES, term.FEI)
	}
	return fmt.Errorf("%w: unexpected %v", ErrProtocol, h.Type)
}

// terminate answers a fatal error in a PDU from the controller with an
// H2CTermReq and ends the connection.
func (t *tcpTransport) terminate(fe *nvmeof.TCPFatalError, header []byte) error {
	p := nvmeof.TCPTermReq{Type: nvmeof.TCPPDUH2CTermReq, FES: fe.FES, FEI: fe.FEI, Data: header}
	var b [nvmeof.TCPTermReqHeaderSize + nvmeof.TCPTermReqMaxData]byte
	n, _ := p.MarshalTo(b[:])
	t.wmu.Lock()
	t.conn.Write(b[:n])
	t.wmu.Unlock()
	t.setError()
	return fmt.Errorf("%w: %w", ErrProtocol, fe)
}

// xferSlot finds the slot of a data PDU's CCCID: a command outstanding,
// not yet answered, whose data moves outside the capsule.
func (t *tcpTransport) xferSlot(cid uint16, what string) (*slot, error) {
	q := t.q
	idx := int(cid & cidIndexMask)
	if idx >= len(q.slots) || q.slots[idx].live.Load() != uint32(cid)+1 || q.slots[idx].gotResp || q.slots[idx].xfer == nil {
		return nil, fmt.Errorf("%w: %s for CID %#04x, which has no data transfer outstanding", ErrProtocol, what, cid)
	}
	return &q.slots[idx], nil
}

// onC2HData reads the data of a C2HData PDU into its command's memory.
// With SUCCESS, the command is complete: no CapsuleResp follows. A data
// digest that does not match is not fatal: the bytes already read stay
// where they landed, the command is marked to fail (digestStatus) and the
// connection goes on.
func (t *tcpTransport) onC2HData(h nvmeof.TCPHeader, l nvmeof.TCPLayout) error {
	q := t.q
	p, _ := nvmeof.ParseTCPDataPDU(t.hdr[:nvmeof.TCPDataHeaderSize])
	if int(p.DATAL) != l.Data {
		return fmt.Errorf("%w: C2HData DATAL %d with %d bytes of data", ErrProtocol, p.DATAL, l.Data)
	}
	s, err := t.xferSlot(p.CCCID, "C2HData")
	if err != nil {
		return err
	}
	end := uint64(p.DATAO) + uint64(p.DATAL)
	if end > uint64(len(s.xfer)) {
		return fmt.Errorf("%w: C2HData for CID %#04x to byte %d of a %d-byte transfer", ErrProtocol, p.CCCID, end, len(s.xfer))
	}
	if l.Pad > 0 {
		if _, err := t.br.Discard(l.Pad); err != nil {
			return err
		}
	}
	data := s.xfer[p.DATAO:end]
	if _, err := io.ReadFull(t.br, data); err != nil {
		return err
	}
	if l.DataDigest {
		if _, err := io.ReadFull(t.br, t.dig[:]); err != nil {
			return err
		}
		if !nvmeof.TCPDigestMatches(t.dig[:], nvmeof.TCPDigest(data)) {
			q.log.Warn("nvmeof/host: data digest error in C2HData; the command fails", "cid", p.CCCID, "datao", p.DATAO, "datal", p.DATAL)
			t.ddErr[s.idx] = uint32(p.CCCID) + 1
		}
	}
	if h.Flags&nvmeof.TCPFlagSuccess != 0 {
		q.gotResponse(s, t.digestStatus(s, nvmeof.Completion{CID: p.CCCID}))
	}
	return nil
}

// digestStatus returns the completion of slot s's command as the host
// reports it: a successful one becomes Transient Transport Error if one of
// the command's C2HData PDUs failed its data digest (an error status the
// controller sent stands). It clears the slot's mark.
func (t *tcpTransport) digestStatus(s *slot, cqe nvmeof.Completion) nvmeof.Completion {
	bad := t.ddErr[s.idx]
	if bad == 0 {
		return cqe
	}
	t.ddErr[s.idx] = 0
	if bad == uint32(cqe.CID)+1 && cqe.Status.Success() {
		cqe.Status = nvmeof.StatusTransientTransportError
	}
	return cqe
}

// onR2T sends the data an R2T asks for, in H2CData PDUs of at most
// MAXH2CDATA bytes, the last with LAST_PDU.
func (t *tcpTransport) onR2T() error {
	p, _ := nvmeof.ParseTCPDataPDU(t.hdr[:nvmeof.TCPDataHeaderSize])
	s, err := t.xferSlot(p.CCCID, "R2T")
	if err != nil {
		return err
	}
	end := uint64(p.DATAO) + uint64(p.DATAL)
	if p.DATAL == 0 || end > uint64(len(s.xfer)) {
		return fmt.Errorf("%w: R2T for CID %#04x asks for bytes %d to %d of a %d-byte transfer", ErrProtocol, p.CCCID, p.DATAO, end, len(s.xfer))
	}
	t.queueSend(tcpSend{s: s, r2t: true, ttag: p.TTAG, off: p.DATAO, end: uint32(end)})
	return nil
}

// appendH2C appends the H2CData PDUs of an R2T to vec: chunks of at most
// MAXH2CDATA bytes, the last with LAST_PDU. The writer's.
func (t *tcpTransport) appendH2C(vec net.Buffers, x tcpSend) net.Buffers {
	s := x.s
	b := &t.pdus[s.idx]
	hd, dd := 0, 0
	var flags nvmeof.TCPFlags
	if t.hdgst {
		hd, flags = nvmeof.TCPDigestSize, flags|nvmeof.TCPFlagHDGSTF
	}
	if t.ddgst {
		dd, flags = nvmeof.TCPDigestSize, flags|nvmeof.TCPFlagDDGSTF
	}
	pdo := nvmeof.TCPDataOffset(nvmeof.TCPDataHeaderSize+hd, t.cpda)
	chunks := int((x.end - x.off + uint32(t.maxH2C) - 1) / uint32(t.maxH2C))
	if len(b.h2c) < chunks {
		b.h2c = make([][tcpH2CHeadMax + nvmeof.TCPDigestSize]byte, chunks)
	}
	cid := s.cid()
	for i, off := 0, x.off; off < x.end; i++ {
		n := min(x.end-off, uint32(t.maxH2C))
		f := flags
		if off+n == x.end {
			f |= nvmeof.TCPFlagLastPDU
		}
		hb := &b.h2c[i]
		head := hb[:pdo]
		d := nvmeof.TCPDataPDU{Type: nvmeof.TCPPDUH2CData, Flags: f, CCCID: cid, TTAG: x.ttag, DATAO: off, DATAL: n}
		d.MarshalTo(head, uint8(pdo), uint32(pdo+int(n)+dd))
		if hd > 0 {
			nvmeof.PutTCPDigest(head[nvmeof.TCPDataHeaderSize:], head[:nvmeof.TCPDataHeaderSize])
		}
		clear(head[nvmeof.TCPDataHeaderSize+hd:])
		data := s.xfer[off : off+n]
		vec = append(vec, head, data)
		if dd > 0 {
			dg := hb[tcpH2CHeadMax:]
			nvmeof.PutTCPDigest(dg, data)
			vec = append(vec, dg)
		}
		off += n
	}
	return vec
}

// send writes the CapsuleCmd of slot s in one writev: common header, SQE,
// header digest and padding, in-capsule data and its digest.
func (t *tcpTransport) send(s *slot, capLen int) {
	b := &t.pdus[s.idx]
	hd, dd := 0, 0
	var flags nvmeof.TCPFlags
	if t.hdgst {
		hd, flags = nvmeof.TCPDigestSize, nvmeof.TCPFlagHDGSTF
	}
	data := s.capsule[nvmeof.CommandSize:capLen]
	if s.icData != nil {
		data = s.icData
	}
	plen, pdo := nvmeof.TCPCapsuleCmdHeaderSize+hd, 0
	if len(data) > 0 {
		pdo = nvmeof.TCPDataOffset(plen, t.cpda)
		plen = pdo + len(data)
		if t.ddgst {
			dd, flags = nvmeof.TCPDigestSize, flags|nvmeof.TCPFlagDDGSTF
			plen += dd
		}
	}
	nvmeof.PutTCPCapsuleHeader(b.ch[:], nvmeof.TCPPDUCapsuleCmd, flags, uint8(pdo), uint32(plen))
	mid := b.mid[:0]
	if hd > 0 {
		crc := nvmeof.TCPDigestUpdate(nvmeof.TCPDigest(b.ch[:]), s.capsule[:nvmeof.CommandSize])
		mid = b.mid[:hd]
		mid[0], mid[1], mid[2], mid[3] = byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24)
	}
	if pdo > 0 {
		pad := pdo - (nvmeof.TCPCapsuleCmdHeaderSize + hd)
		clear(b.mid[hd : hd+pad])
		mid = b.mid[:hd+pad]
	}
	b.vec[0], b.vec[1] = b.ch[:], s.capsule[:nvmeof.CommandSize]
	k := 2
	if len(mid) > 0 {
		b.vec[k] = mid
		k++
	}
	if len(data) > 0 {
		b.vec[k] = data
		k++
		if dd > 0 {
			nvmeof.PutTCPDigest(b.dd[:], data)
			b.vec[k] = b.dd[:]
			k++
		}
	}
	b.n = k
	s.waitSend = false
	s.live.Store(uint32(s.cid()) + 1)
	q := t.q
	if q.batchOn.Load() {
		q.mu.Lock()
		if q.holdingSends() {
			// Issued while the reader handles responses: the writer
			// sends it.
			t.queueSend(tcpSend{s: s})
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
	t.wmu.Lock()
	t.dvec = append(t.dvecArr[:0], b.vec[:k]...)
	_, err := t.dvec.WriteTo(t.conn)
	clear(t.dvecArr[:])
	t.wmu.Unlock()
	if err != nil {
		q.log.Debug("nvmeof/host: sending a command failed; dropping the queue", "err", err)
		t.setError()
	}
}

// tcpNullSGL is SGL1 of a command without data, as Linux hosts send it on
// TCP: a Transport SGL Data Block of length 0.
var tcpNullSGL = nvmeof.TransportSGL{}.Descriptor()

func (t *tcpTransport) nullSGL() nvmeof.SGLDescriptor { return tcpNullSGL }

// readsInPlace: C2HData is read from the socket straight into the
// caller's buffer when a read's chunk lies wholly in it.
func (t *tcpTransport) readsInPlace() bool { return true }

// dataSGL returns a Transport SGL Data Block (5Ah): the data moves in
// R2T/H2CData or C2HData PDUs through s.xfer.
func (t *tcpTransport) dataSGL(s *slot, off int, n int64) nvmeof.SGLDescriptor {
	return nvmeof.TransportSGL{Length: uint32(n)}.Descriptor()
}

// directSGL returns a Transport SGL Data Block: H2CData is written from,
// and C2HData read into, the caller's memory (s.xfer).
func (t *tcpTransport) directSGL(s *slot) nvmeof.SGLDescriptor {
	return nvmeof.TransportSGL{Length: uint32(len(s.direct))}.Descriptor()
}

// rawStart: an admin command's data moves straight from and into
// raw.data.
func (t *tcpTransport) rawStart(raw *rawCommand) error { return nil }

func (t *tcpTransport) rawSGL(s *slot, raw *rawCommand) nvmeof.SGLDescriptor {
	s.xfer = raw.data
	return nvmeof.TransportSGL{Length: uint32(len(raw.data))}.Descriptor()
}

func (t *tcpTransport) rawEnd(raw *rawCommand, ok bool) {}

func (t *tcpTransport) setError() {
	if t.conn == nil {
		return
	}
	t.closeOnce.Do(func() { t.conn.Close() })
}

func (t *tcpTransport) release() { t.setError() }
