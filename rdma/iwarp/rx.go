package iwarp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/capsule-storage/capsule/internal/crc32c"
	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

const (
	// rxBufSize is the receive buffer: one read(2) takes in as many
	// FPDUs as have arrived, up to this much, and the receiver parses
	// them from it, copying payloads to their destination.
	rxBufSize = 128 << 10
	// directMin is the shortest rest of a payload read from the socket
	// straight into its destination instead of through the buffer.
	directMin = 16 << 10
	// rxLookahead is how much of the stream after such a payload the
	// same readv(2) takes into the buffer: the trailer, the next header
	// and the start of what follows.
	rxLookahead = 2 << 10
)

// rxReader reads FPDUs through a receive buffer. Headers, trailers and
// small payloads are parsed or copied out of it; the rest of a payload
// of at least directMin bytes goes straight from the socket into its
// destination.
type rxReader struct {
	readvState
	conn *net.TCPConn
	raw  syscall.RawConn // for raceAcquire
	buf  []byte          // rxBufSize bytes, allocated when the QP connects
	r, w int
	// large is set while large payloads arrive (the last one was read
	// directly): fill then reads at most rxLookahead bytes, so that the
	// next payload is not pulled through the buffer either.
	large bool
}

// fill makes at least n bytes available at buf[r:], reading as much as
// the socket has and the buffer holds.
func (d *rxReader) fill(n int) error {
	if d.w-d.r >= n {
		return nil
	}
	if d.r == d.w || d.r+n > len(d.buf) || len(d.buf)-d.w < rxLookahead {
		d.w = copy(d.buf, d.buf[d.r:d.w])
		d.r = 0
	}
	end := len(d.buf)
	if d.large {
		end = min(end, d.w+max(n, rxLookahead))
	}
	for d.w-d.r < n {
		k, err := d.conn.Read(d.buf[d.w:end])
		d.w += k
		if err != nil && d.w-d.r < n {
			return err
		}
	}
	return nil
}

// take returns the next n bytes, which fill made available. They alias
// the buffer until the next fill.
func (d *rxReader) take(n int) []byte {
	b := d.buf[d.r : d.r+n]
	d.r += n
	return b
}

// readInto fills p: first from the buffer, then, for a long rest, from
// the socket directly, else through the buffer.
func (d *rxReader) readInto(p []byte) error {
	d.large = len(p) >= directMin
	k := copy(p, d.buf[d.r:d.w])
	d.r += k
	p = p[k:]
	if len(p) >= directMin {
		if raceEnabled {
			// Plain reads, which the detector sees, after an acquire.
			d.raceAcquire()
			d.r, d.w = 0, 0
			_, err := io.ReadFull(d.conn, p)
			return err
		}
		return d.readvInto(p)
	}
	for len(p) > 0 {
		if err := d.fill(1); err != nil {
			return err
		}
		k := copy(p, d.buf[d.r:d.w])
		d.r += k
		p = p[k:]
	}
	return nil
}

// rxState is the receiver goroutine's state of the inbound stream.
type rxState struct {
	rd   rxReader
	h    wire.Header
	raw  [wire.ULPDULenSize + wire.UntaggedHeaderLen]byte // the current FPDU's length field and DDP header
	hlen int                                              // DDP header length
	ulen int                                              // ULPDU_Length
	sum  uint32                                           // running CRC32C of the FPDU

	msn [3]uint32 // next expected MSN per untagged queue

	// Queue 0 message in progress.
	inMsg   bool
	msgOp   wire.Opcode
	mo      uint32
	pending bool // an Immediate Data of kind Send waits for its Send
	imm     uint32

	writeLen     uint64 // bytes of the RDMA Write message in progress
	lastWriteLen uint64 // bytes of the last complete RDMA Write message

	body  [wire.TerminateMaxLen]byte
	timer *time.Timer
}

func (x *rxState) init() {
	x.msn = [3]uint32{1, 1, 1}
}

// rxFail is how the receive path reports that the QP must fail: with st
// as QP.Err and, when term is set, a Terminate to the peer.
type rxFail struct {
	st   rdma.WCStatus
	term *termMsg
}

func (e *rxFail) Error() string { return "iwarp: receive failed: " + e.st.String() }

// errStop ends the receiver without failing the QP (someone else does).
var errStop = errors.New("iwarp: receiver stopped")

// receiver is the receiving goroutine of a connected QP.
func (q *qp) receiver() {
	defer q.wg.Done()
	var err error
	for err == nil {
		if q.State() != rdma.StateRTS {
			break
		}
		err = q.rxOne()
	}
	var f *rxFail
	switch {
	case errors.As(err, &f):
		q.fail(f.st, f.term)
	case err != nil && err != errStop:
		// EOF, reset, or the socket closed under us: the transport is gone.
		q.fail(rdma.RetryExcErr, nil)
	}
	q.mu.Lock()
	linger, conn := q.lingering, q.conn
	q.mu.Unlock()
	if linger {
		// Wait for the peer to close after our Terminate (or the deadline
		// fail set), so unread data does not turn our close into a reset.
		_, _ = io.Copy(io.Discard, conn)
	}
	_ = conn.Close()
}

// term builds the Terminate for the current FPDU with cause c, copying
// its DDP header when ddp is set and rr (a Read Request header) if given.
func (x *rxState) term(c wire.TermCause, ddp bool, rr []byte) *termMsg {
	t := &termMsg{cause: c}
	if ddp {
		t.segLen = uint16(x.ulen)
		t.ddpLen = copy(t.ddp[:], x.raw[wire.ULPDULenSize:wire.ULPDULenSize+x.hlen])
	}
	t.rdmaLen = copy(t.rdma[:], rr)
	return t
}

func protoFail(c wire.TermCause, t *termMsg) *rxFail { return &rxFail{st: statusOf(c), term: t} }

func (q *qp) crcUpdate(b []byte) {
	if q.crc {
		q.rx.sum = crc32c.Update(q.rx.sum, b)
	}
}

// rxOne reads and acts on one FPDU.
func (q *qp) rxOne() error {
	x, d := &q.rx, &q.rx.rd
	if err := d.fill(wire.ULPDULenSize + wire.TaggedHeaderLen); err != nil {
		return err
	}
	x.ulen = int(binary.BigEndian.Uint16(d.buf[d.r:]))
	x.hlen = wire.HeaderLenOf(d.buf[d.r+wire.ULPDULenSize])
	if x.ulen < x.hlen {
		c := wire.TermCause{Layer: wire.LayerLLP, EType: wire.ETypeMPA, Code: wire.CodeMPALength}
		return protoFail(c, x.term(c, false, nil))
	}
	if err := d.fill(wire.ULPDULenSize + x.hlen); err != nil {
		return err
	}
	raw := d.take(wire.ULPDULenSize + x.hlen)
	copy(x.raw[:], raw)
	x.sum = 0
	q.crcUpdate(raw)
	if _, err := x.h.Unmarshal(raw[wire.ULPDULenSize:]); err != nil {
		var he *wire.HeaderError
		if !errors.As(err, &he) {
			return err
		}
		// The header is not understood: copy it only when its layout is
		// (a bad queue number), as RFC 5040 section 4.8 suggests.
		withHdr := he.Cause.Code == wire.CodeDDPInvalidQN && he.Cause.EType == wire.ETypeDDPUntagged
		return protoFail(he.Cause, x.term(he.Cause, withHdr, nil))
	}
	n := x.ulen - x.hlen
	switch x.h.Opcode {
	case wire.OpWrite:
		return q.rxWrite(n)
	case wire.OpReadResponse:
		return q.rxReadResponse(n)
	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		return q.rxSend(n)
	case wire.OpImmediateData, wire.OpImmediateDataSE:
		return q.rxImm(n)
	case wire.OpReadRequest:
		return q.rxReadRequest(n)
	case wire.OpTerminate:
		return q.rxTerminate(n)
	}
	c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteOperation, Code: wire.CodeUnexpectedOpcode}
	return protoFail(c, x.term(c, false, nil))
}

// trailer reads and checks pad and CRC of the current FPDU.
func (q *qp) trailer() error {
	x, d := &q.rx, &q.rx.rd
	tl := wire.TrailerLen(x.ulen, q.crc)
	if err := d.fill(tl); err != nil {
		return err
	}
	if err := wire.CheckTrailer(d.take(tl), x.ulen, x.sum, q.crc); err != nil {
		c := wire.TermCause{Layer: wire.LayerLLP, EType: wire.ETypeMPA, Code: wire.CodeMPACRC}
		return protoFail(c, x.term(c, false, nil))
	}
	return nil
}

// remoteCause says why keys.Acquire refused a peer's access.
func (q *qp) remoteCause(key uint32, addr, n uint64, want rdma.Access) wire.TermCause {
	c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteProtection, Code: wire.CodeBaseBounds}
	r := q.pd.keys.Lookup(key)
	switch {
	case r == nil:
		c.Code = wire.CodeInvalidSTag
	case r.Access&want != want:
		c.Code = wire.CodeAccessRights
	}
	return c
}

// rxWrite places an RDMA Write segment into the region its STag names.
func (q *qp) rxWrite(n int) error {
	x := &q.rx
	if n > 0 {
		r, b, ok := q.pd.keys.Acquire(x.h.STag, x.h.TO, uint64(n), rdma.AccessRemoteWrite)
		if !ok {
			c := q.remoteCause(x.h.STag, x.h.TO, uint64(n), rdma.AccessRemoteWrite)
			return protoFail(c, x.term(c, true, nil))
		}
		err := x.rd.readInto(b)
		q.crcUpdate(b)
		r.Release()
		if err != nil {
			return err
		}
	}
	if err := q.trailer(); err != nil {
		return err
	}
	x.writeLen += uint64(n)
	if x.h.Last {
		x.lastWriteLen, x.writeLen = x.writeLen, 0
	}
	return nil
}

// rxReadResponse places a Read Response segment for the oldest
// outstanding Read Request, and completes the Read when its last
// response is in.
func (q *qp) rxReadResponse(n int) error {
	x := &q.rx
	s := &q.sq
	s.mu.Lock()
	if s.orqLen() == 0 {
		s.mu.Unlock()
		c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteOperation, Code: wire.CodeUnexpectedOpcode}
		return protoFail(c, x.term(c, true, nil))
	}
	e := s.orq[s.orqHead%ReadDepth]
	s.mu.Unlock()
	if x.h.STag != e.sinkKey {
		c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPTagged, Code: wire.CodeDDPTaggedNotAssociated}
		return protoFail(c, x.term(c, true, nil))
	}
	end := uint64(e.placed) + uint64(n)
	if x.h.TO != e.sinkAddr+uint64(e.placed) || end > uint64(e.size) || x.h.Last != (end == uint64(e.size)) {
		c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPTagged, Code: wire.CodeDDPTaggedBaseBounds}
		return protoFail(c, x.term(c, true, nil))
	}
	if n > 0 {
		r, b, ok := q.pd.keys.Acquire(e.sinkKey, x.h.TO, uint64(n), rdma.AccessLocalWrite)
		if !ok {
			// The sink was deregistered under the Read: a local error.
			c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPLocalCatastrophic, Code: wire.CodeUnspecified}
			return &rxFail{st: rdma.LocProtErr, term: x.term(c, false, nil)}
		}
		err := x.rd.readInto(b)
		q.crcUpdate(b)
		r.Release()
		if err != nil {
			return err
		}
	}
	if err := q.trailer(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flushed {
		return nil
	}
	p := &s.orq[s.orqHead%ReadDepth]
	p.placed = uint32(end)
	if !x.h.Last {
		return nil
	}
	s.orqHead++
	w := s.slot(p.seq)
	if w.readsLeft--; w.readsLeft == 0 {
		w.done = true
		q.retireLocked()
	}
	if s.next != s.tail {
		q.kick() // a Fence or ORD wait may be over
	}
	return nil
}

// startQ0 checks the MSN/MO of a queue 0 segment and, for the first
// segment of a message, waits for a Recv (RNR) when need is set.
func (q *qp) startQ0(n int) error {
	x := &q.rx
	if x.inMsg {
		if x.h.MSN != x.msn[wire.QNSend] || x.h.Opcode != x.msgOp {
			c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPUntagged, Code: wire.CodeDDPMSNRange}
			return protoFail(c, x.term(c, true, nil))
		}
		if x.h.MO != x.mo {
			c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPUntagged, Code: wire.CodeDDPInvalidMO}
			return protoFail(c, x.term(c, true, nil))
		}
		return nil
	}
	if x.h.MSN != x.msn[wire.QNSend] {
		c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPUntagged, Code: wire.CodeDDPMSNRange}
		return protoFail(c, x.term(c, true, nil))
	}
	if x.h.MO != 0 {
		c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPUntagged, Code: wire.CodeDDPInvalidMO}
		return protoFail(c, x.term(c, true, nil))
	}
	x.inMsg, x.msgOp, x.mo = true, x.h.Opcode, 0
	return nil
}

// waitRecv waits for a posted Recv: RNRRetry+1 times RNRTimeout, with the
// stream not read meanwhile. It returns the RNR failure when none came.
func (q *qp) waitRecv() error {
	r := &q.rq
	for first := true; ; first = false {
		r.mu.Lock()
		ok, flushed := r.head != r.tail, r.flushed
		r.mu.Unlock()
		if ok {
			return nil
		}
		if flushed {
			return errStop
		}
		x := &q.rx
		if first {
			wait := time.Duration(q.cfg.RNRRetry+1) * q.cfg.RNRTimeout
			if x.timer == nil {
				x.timer = time.NewTimer(wait)
			} else {
				x.timer.Reset(wait)
			}
		}
		select {
		case <-r.avail:
			continue
		case <-q.done:
			x.timer.Stop()
			return errStop
		case <-x.timer.C:
			c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPUntagged, Code: wire.CodeDDPNoBuffer}
			return protoFail(c, x.term(c, true, nil))
		}
	}
}

// rxSend places a Send segment into the head Recv.
func (q *qp) rxSend(n int) error {
	x := &q.rx
	if err := q.startQ0(n); err != nil {
		return err
	}
	if x.mo == 0 {
		if err := q.waitRecv(); err != nil {
			return err
		}
		if x.timer != nil {
			x.timer.Stop()
		}
	}
	rv := q.headRecv()
	if rv == nil {
		return errStop // flushed meanwhile: SetError or Close completed the Recvs
	}
	if uint64(x.mo)+uint64(n) > rv.total {
		c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPUntagged, Code: wire.CodeDDPTooLong}
		q.completeRecv(rdma.WC{Status: rdma.LocLenErr, Opcode: rdma.WCRecv})
		return &rxFail{st: rdma.LocLenErr, term: x.term(c, true, nil)}
	}
	// Scatter [mo, mo+n) over the Recv's SGL.
	off := uint64(x.mo)
	left := uint64(n)
	for _, g := range rv.sgl {
		if left == 0 {
			break
		}
		gl := uint64(g.Length)
		if off >= gl {
			off -= gl
			continue
		}
		k := min(gl-off, left)
		r, b, ok := q.pd.keys.Acquire(g.LKey, g.Addr+off, k, rdma.AccessLocalWrite)
		if !ok {
			q.completeRecv(rdma.WC{Status: rdma.LocProtErr, Opcode: rdma.WCRecv})
			c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPLocalCatastrophic, Code: wire.CodeUnspecified}
			return &rxFail{st: rdma.LocProtErr, term: x.term(c, false, nil)}
		}
		err := x.rd.readInto(b)
		q.crcUpdate(b)
		r.Release()
		if err != nil {
			return err
		}
		left -= k
		off = 0
	}
	if err := q.trailer(); err != nil {
		return err
	}
	x.mo += uint32(n)
	if !x.h.Last {
		return nil
	}
	wc := rdma.WC{Status: rdma.Success, Opcode: rdma.WCRecv, ByteLen: x.mo}
	if x.h.Opcode == wire.OpSendInv || x.h.Opcode == wire.OpSendSEInv {
		r := q.pd.keys.Lookup(x.h.RsvdULP)
		if r == nil {
			c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteProtection, Code: wire.CodeSTagNotInvalidated}
			return protoFail(c, x.term(c, true, nil))
		}
		q.pd.keys.Remove(r)
		wc.Flags |= rdma.WCWithInv
		wc.InvRKey = x.h.RsvdULP
	}
	if x.pending {
		wc.Flags |= rdma.WCWithImm
		wc.Imm = x.imm
		x.pending = false
	}
	x.inMsg = false
	x.msn[wire.QNSend]++
	if !q.completeRecv(wc) {
		return errStop
	}
	return nil
}

// rxImm handles an RFC 7306 Immediate Data message.
func (q *qp) rxImm(n int) error {
	x := &q.rx
	if err := q.startQ0(n); err != nil {
		return err
	}
	if n != wire.ImmDataLen || !x.h.Last || x.pending {
		c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteOperation, Code: wire.CodeUnspecified}
		return protoFail(c, x.term(c, true, nil))
	}
	b := x.body[:wire.ImmDataLen]
	if err := x.rd.readInto(b); err != nil {
		return err
	}
	q.crcUpdate(b)
	var d wire.ImmData
	derr := d.Unmarshal(b)
	if err := q.trailer(); err != nil {
		return err
	}
	if derr != nil {
		c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteOperation, Code: wire.CodeUnspecified}
		return protoFail(c, x.term(c, true, nil))
	}
	x.inMsg = false
	x.msn[wire.QNSend]++
	if d.Kind == wire.ImmKindSend {
		x.pending, x.imm = true, d.Value
		return nil
	}
	if err := q.waitRecv(); err != nil {
		return err
	}
	if x.timer != nil {
		x.timer.Stop()
	}
	wc := rdma.WC{Status: rdma.Success, Opcode: rdma.WCRecvWriteImm, Flags: rdma.WCWithImm, Imm: d.Value,
		ByteLen: uint32(x.lastWriteLen)}
	if !q.completeRecv(wc) {
		return errStop
	}
	return nil
}

// rxReadRequest queues an inbound Read Request for the responder. A
// request that fails the STag, bounds or access check is queued too, as
// bad, so that its Terminate follows the responses to earlier requests;
// the receiver then stops reading.
func (q *qp) rxReadRequest(n int) error {
	x := &q.rx
	if n != wire.ReadRequestLen || !x.h.Last || x.h.MO != 0 || x.h.MSN != x.msn[wire.QNReadRequest] {
		c := wire.TermCause{Layer: wire.LayerDDP, EType: wire.ETypeDDPUntagged, Code: wire.CodeDDPMSNRange}
		if x.h.MO != 0 {
			c.Code = wire.CodeDDPInvalidMO
		}
		return protoFail(c, x.term(c, true, nil))
	}
	b := x.body[:wire.ReadRequestLen]
	if err := x.rd.readInto(b); err != nil {
		return err
	}
	q.crcUpdate(b)
	if err := q.trailer(); err != nil {
		return err
	}
	x.msn[wire.QNReadRequest]++
	e := q.irq.slotForPush()
	if e == nil {
		c := wire.TermCause{Layer: wire.LayerRDMAP, EType: wire.ETypeRDMAPRemoteOperation, Code: wire.CodeCatastrophicStream}
		return protoFail(c, x.term(c, true, b))
	}
	_ = e.rr.Unmarshal(b)
	e.bad = false
	r, _, ok := q.pd.keys.Acquire(e.rr.SrcSTag, e.rr.SrcTO, uint64(e.rr.Size), rdma.AccessRemoteRead)
	if ok {
		r.Release()
	} else {
		e.bad = true
		e.term = *x.term(q.remoteCause(e.rr.SrcSTag, e.rr.SrcTO, uint64(e.rr.Size), rdma.AccessRemoteRead), true, b)
	}
	q.irq.commit()
	q.kick()
	if e.bad {
		<-q.done
		return errStop
	}
	return nil
}

// rxTerminate handles the peer's Terminate: the QP fails with the status
// its cause maps to.
func (q *qp) rxTerminate(n int) error {
	x := &q.rx
	if n > wire.TerminateMaxLen || !x.h.Last || x.h.MO != 0 {
		return &rxFail{st: rdma.RemOpErr}
	}
	b := x.body[:n]
	if err := x.rd.readInto(b); err != nil {
		return err
	}
	q.crcUpdate(b)
	if err := q.trailer(); err != nil {
		return &rxFail{st: rdma.RemOpErr}
	}
	var t wire.Terminate
	if err := t.Unmarshal(b); err != nil {
		return &rxFail{st: rdma.RemOpErr}
	}
	return &rxFail{st: statusOf(t.Cause)}
}
