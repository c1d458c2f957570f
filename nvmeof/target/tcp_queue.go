package target

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

const (
	// tcpICReqTimeout bounds the wait for a new connection's ICReq.
	tcpICReqTimeout = 10 * time.Second
	// tcpAdminCapsuleData is the in-capsule data a command may carry on
	// the admin queue of an NVMe/TCP controller: 8 KiB, what Linux hosts
	// assume; I/O queues take the configured size (IOCCSZ), if larger.
	tcpAdminCapsuleData = 8192
	// tcpReadBuffer is the buffer of a queue's reader: small PDUs (the
	// 72-byte commands) come in batches from one read; large payloads
	// bypass it and land in the slot's buffer.
	tcpReadBuffer = 32 << 10
	// tcpTermLinger is how long a connection that sent a TermReq keeps
	// reading (and discarding) before it closes, so that the peer sees
	// the TermReq rather than a reset.
	tcpTermLinger = time.Second
	// tcpC2HHeadMax is the most bytes before a C2HData's data: the
	// header, its digest and the padding to HPDA (at most 128).
	tcpC2HHeadMax = 128
)

// tcpSlot is a command slot of an NVMe/TCP queue: the request, its
// in-capsule data, the buffer its transfer goes through, and the PDU
// headers its response is built from.
type tcpSlot struct {
	req request
	// capsule holds the in-capsule data of the command.
	capsule []byte
	// data is the buffer of data moved by R2T/H2CData or C2HData:
	// allocated on first use, of the capsule size or MDTS, then kept.
	data []byte

	// State of an R2T transfer, the reader's.
	wantData bool   // an R2T is out: H2CData PDUs are expected
	got      uint32 // bytes of it received
	badData  bool   // a data digest did not match

	// Response PDUs, built by whoever responds.
	head [tcpC2HHeadMax]byte // C2HData header, digest, padding
	// tail: the data digest, then the CapsuleResp and its digest.
	tail [nvmeof.TCPDigestSize + nvmeof.TCPCapsuleRespHeaderSize + nvmeof.TCPDigestSize]byte
	r2t  [nvmeof.TCPDataHeaderSize + nvmeof.TCPDigestSize]byte
	vec  [3][]byte
	n    int // parts of vec in use
	bufs net.Buffers
}

// tcpQueue is one NVMe queue over one TCP connection.
//
// Its goroutine (run) reads PDUs, starts commands, sends R2Ts and runs
// the commands of non-blocking namespaces; workers run the others.
// Responses (C2HData and CapsuleResp together) are written under wmu: the
// reader's own in one writev per batch of PDUs read (reply,
// flushReplies), the others' at once, one writev each (respond). A slot
// belongs to the reader from the command's arrival, then to whoever
// executes or holds the command, until its response is written and the
// slot goes back to free.
type tcpQueue struct {
	core queue
	l    *tcpListener
	t    *Target
	log  *slog.Logger

	conn net.Conn
	br   *bufio.Reader
	// Negotiated by ICReq/ICResp; written by the reader before the first
	// command, read by responders after it.
	recv         nvmeof.TCPReceiver
	hpda         int
	hdgst, ddgst bool
	maxH2C       int
	policy       nvmeof.SGLPolicy

	rhdr [nvmeof.TCPICReqSize + nvmeof.TCPDigestSize]byte // the PDU header being read
	rdig [nvmeof.TCPDigestSize]byte                       // a data digest being read
	term [nvmeof.TCPTermReqHeaderSize + nvmeof.TCPTermReqMaxData]byte

	slots []tcpSlot
	free  chan *tcpSlot
	busy  atomic.Int32 // slots taken from free and not yet returned
	// pend holds the responses the reader built while handling the PDUs
	// of one read; flushReplies writes them with one writev (pvec).
	pend  []*tcpSlot
	pvec  net.Buffers
	pbufs net.Buffers

	// wmu serializes writes to conn (and guards out).
	wmu sync.Mutex
	out [nvmeof.TCPICRespSize]byte

	workers workers[*tcpSlot] // blocking commands

	drainAsked atomic.Bool
	closeOnce  sync.Once
	closerOnce sync.Once
	closer     atomic.Pointer[time.Timer]
	stopCtx    func() bool
}

var _ queueTransport = (*tcpQueue)(nil)

func newTCPQueue(l *tcpListener, c net.Conn) *tcpQueue {
	cfg := &l.t.cfg
	entries := max(AdminQueueEntries, cfg.maxQueueEntries)
	nslots := entries * slotsPerEntry
	icd := max(cfg.inCapsuleDataSize, tcpAdminCapsuleData)
	q := &tcpQueue{
		l:       l,
		t:       l.t,
		log:     l.log.With("peer", c.RemoteAddr().String()),
		conn:    c,
		br:      bufio.NewReaderSize(c, tcpReadBuffer),
		maxH2C:  cfg.maxTransfer,
		slots:   make([]tcpSlot, nslots),
		free:    make(chan *tcpSlot, nslots),
		workers: newWorkers[*tcpSlot](nslots),
		pend:    make([]*tcpSlot, 0, nslots),
		pvec:    make(net.Buffers, 0, 3*nslots),
	}
	if cfg.tcpMaxH2CData != 0 {
		q.maxH2C = cfg.tcpMaxH2CData
	}
	q.core.init(l.t, q, 0, entries)
	q.core.listener = l.addr
	q.core.qidFromConnect = true
	q.recv = nvmeof.TCPReceiver{Controller: true, MaxCapsuleData: icd, MaxH2CData: q.maxH2C}
	q.policy = nvmeof.SGLPolicy{Transport: true, MaxDataBlocks: 1}
	for i := range q.slots {
		s := &q.slots[i]
		s.req.index = i
		s.req.q = &q.core
		q.free <- s
	}
	return q
}

// run is the queue's goroutine: it reads PDUs until the connection ends.
func (q *tcpQueue) run() {
	defer q.t.wg.Done()
	defer q.teardown()
	q.stopCtx = context.AfterFunc(q.t.ctx, q.disconnect)
	q.conn.SetReadDeadline(time.Now().Add(tcpICReqTimeout))
	for {
		err := q.readPDU()
		if err == nil && !q.pduBuffered() {
			q.flushReplies()
		}
		if err != nil {
			var fe *nvmeof.TCPFatalError
			switch {
			case errors.As(err, &fe):
				q.log.Warn("NVMe/TCP fatal error: connection terminated", "fes", fe.FES.String(), "fei", fe.FEI, "err", fe.Why)
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
				q.log.Debug("connection closed", "err", err)
			default:
				q.log.Debug("connection ended", "err", err)
			}
			return
		}
	}
}

// teardown ends the queue: the connection, the core's view of it, the
// workers.
func (q *tcpQueue) teardown() {
	q.disconnect()
	if q.stopCtx != nil {
		q.stopCtx()
	}
	if t := q.closer.Load(); t != nil {
		t.Stop()
	}
	q.core.closed()
	q.workers.stop()
	q.core.gone()
}

// disconnect implements queueTransport.
func (q *tcpQueue) disconnect() {
	q.closeOnce.Do(func() { q.conn.Close() })
}

// drain implements queueTransport: new commands are answered with
// Command Aborted due to SQ Deletion, and the connection closes once no
// command is in flight.
func (q *tcpQueue) drain() {
	q.drainAsked.Store(true)
	if q.busy.Load() == 0 {
		q.disconnect()
	}
}

// readPDU reads and handles one PDU. An error ends the queue.
func (q *tcpQueue) readPDU() error {
	hdr := q.rhdr[:]
	if _, err := io.ReadFull(q.br, hdr[:nvmeof.TCPCommonHeaderSize]); err != nil {
		return err
	}
	h, _ := nvmeof.ParseTCPHeader(hdr)
	l, fe := q.recv.Check(h)
	if fe != nil {
		return q.terminate(fe, hdr[:nvmeof.TCPCommonHeaderSize])
	}
	if _, err := io.ReadFull(q.br, hdr[nvmeof.TCPCommonHeaderSize:l.Header]); err != nil {
		return err
	}
	if l.Header > int(h.HLEN) {
		crc := nvmeof.TCPDigest(hdr[:h.HLEN])
		if !nvmeof.TCPDigestMatches(hdr[h.HLEN:], crc) {
			return q.terminate(&nvmeof.TCPFatalError{FES: nvmeof.TCPFESHeaderDigestError,
				Why: fmt.Sprintf("header digest of a %v", h.Type)}, hdr[:l.Header])
		}
	}
	switch h.Type {
	case nvmeof.TCPPDUICReq:
		return q.onICReq(hdr[:nvmeof.TCPICReqSize])
	case nvmeof.TCPPDUH2CTermReq:
		data := q.term[:l.Data]
		if _, err := io.ReadFull(q.br, data); err != nil {
			return err
		}
		fes := nvmeof.TCPFES(uint16(hdr[nvmeof.TCPTermOffsetFES]) | uint16(hdr[nvmeof.TCPTermOffsetFES+1])<<8)
		return fmt.Errorf("the host ended the connection with an H2CTermReq: %v", fes)
	case nvmeof.TCPPDUCapsuleCmd:
		return q.onCommand(l)
	case nvmeof.TCPPDUH2CData:
		return q.onH2CData(h, l)
	}
	// Check lets no other type through.
	return fmt.Errorf("unexpected %v", h.Type)
}

// terminate answers a fatal error with a C2HTermReq carrying the header
// in error, stops sending, and reads what the host still sends for a
// moment before the connection closes.
func (q *tcpQueue) terminate(fe *nvmeof.TCPFatalError, header []byte) error {
	q.flushReplies() // the commands before the error are answered
	p := nvmeof.TCPTermReq{Type: nvmeof.TCPPDUC2HTermReq, FES: fe.FES, FEI: fe.FEI, Data: header}
	q.wmu.Lock()
	n, _ := p.MarshalTo(q.term[:])
	q.conn.SetWriteDeadline(time.Now().Add(tcpTermLinger))
	_, err := q.conn.Write(q.term[:n])
	q.wmu.Unlock()
	if tc, ok := tcpConnOf(q.conn); ok && err == nil {
		tc.CloseWrite()
		q.conn.SetReadDeadline(time.Now().Add(tcpTermLinger))
		io.Copy(io.Discard, q.br)
	}
	return fe
}

// onICReq answers the connection's ICReq with an ICResp: PFV 0, CPDA 0,
// the digests the host asked for (both are supported), MAXH2CDATA the
// largest transfer.
func (q *tcpQueue) onICReq(b []byte) error {
	var ic nvmeof.TCPICReq
	if err := ic.UnmarshalBinary(b); err != nil {
		var fe *nvmeof.TCPFatalError
		if errors.As(err, &fe) {
			return q.terminate(fe, b)
		}
		return err
	}
	if fe := ic.Check(); fe != nil {
		return q.terminate(fe, b)
	}
	q.hpda = int(ic.HPDA)
	q.hdgst = ic.Digest&nvmeof.TCPHeaderDigest != 0
	q.ddgst = ic.Digest&nvmeof.TCPDataDigest != 0
	q.recv.Initialized = true
	q.recv.HeaderDigest, q.recv.DataDigest = q.hdgst, q.ddgst
	resp := nvmeof.TCPICResp{Digest: ic.Digest & (nvmeof.TCPHeaderDigest | nvmeof.TCPDataDigest), MAXH2CDATA: uint32(q.maxH2C)}
	q.wmu.Lock()
	n, _ := resp.MarshalTo(q.out[:])
	_, err := q.conn.Write(q.out[:n])
	q.wmu.Unlock()
	if err != nil {
		return err
	}
	q.log.Debug("connection initialized", "hpda", ic.HPDA, "header_digest", q.hdgst, "data_digest", q.ddgst, "maxr2t", ic.MAXR2T)
	return q.conn.SetReadDeadline(time.Time{})
}

// readData reads the padding, n bytes of data into b and, when
// negotiated, the data digest; ok is false when the digest does not
// match.
func (q *tcpQueue) readData(l nvmeof.TCPLayout, b []byte) (ok bool, err error) {
	if l.Pad > 0 {
		if _, err := q.br.Discard(l.Pad); err != nil {
			return false, err
		}
	}
	if _, err := io.ReadFull(q.br, b); err != nil {
		return false, err
	}
	if !l.DataDigest {
		return true, nil
	}
	if _, err := io.ReadFull(q.br, q.rdig[:]); err != nil {
		return false, err
	}
	return nvmeof.TCPDigestMatches(q.rdig[:], nvmeof.TCPDigest(b)), nil
}

// takeSlot returns a free slot, waiting for one if every slot is busy
// (the host has more commands in flight than the queue allows: the core
// refuses the excess, and their responses free slots). The responses
// the reader holds go out first.
func (q *tcpQueue) takeSlot() *tcpSlot {
	var s *tcpSlot
	select {
	case s = <-q.free:
	default:
		q.flushReplies()
		s = <-q.free
	}
	q.busy.Add(1)
	return s
}

// pduBuffered reports whether a whole PDU waits in the read buffer, so
// the reader can handle it before it writes the responses it holds.
func (q *tcpQueue) pduBuffered() bool {
	n := q.br.Buffered()
	if n < nvmeof.TCPCommonHeaderSize {
		return false
	}
	b, _ := q.br.Peek(nvmeof.TCPCommonHeaderSize)
	h, _ := nvmeof.ParseTCPHeader(b)
	return int64(h.PLEN) <= int64(n)
}

// releaseSlot returns a slot whose response went out.
func (q *tcpQueue) releaseSlot(s *tcpSlot) {
	q.free <- s
	if q.busy.Add(-1) == 0 && q.drainAsked.Load() {
		q.disconnect()
	}
}

// onCommand starts the command of a CapsuleCmd whose header is in rhdr.
func (q *tcpQueue) onCommand(l nvmeof.TCPLayout) error {
	s := q.takeSlot()
	r := &s.req
	r.reset()
	s.wantData, s.got, s.badData = false, 0, false
	if err := r.cmd.UnmarshalBinary(q.rhdr[nvmeof.TCPCommonHeaderSize:nvmeof.TCPCapsuleCmdHeaderSize]); err != nil {
		q.releaseSlot(s)
		return err
	}
	if s.capsule == nil {
		s.capsule = make([]byte, q.recv.MaxCapsuleData)
	}
	in := s.capsule[:l.Data]
	if l.Data > 0 {
		ok, err := q.readData(l, in)
		if err != nil {
			q.releaseSlot(s)
			return err
		}
		if !ok {
			// A data digest error is not fatal: the command completes
			// with Transient Transport Error and does not run.
			q.log.Warn("data digest error in a command capsule", "cid", r.cmd.CID)
			q.core.outstanding.Add(1)
			r.rsp.Status = nvmeof.StatusTransientTransportError
			q.reply(s)
			return nil
		}
	}
	// Bidirectional vendor commands read their payload from the capsule
	// while the data to the host goes through s.data.
	r.capsuleData = in
	policy := q.policy
	policy.InCapsuleSize = l.Data
	dp, st := policy.Decode(r.cmd.DPTR)
	r.sglStatus, r.sglLen = st, dp.Length()
	r.sglInCapsule = dp.Kind == nvmeof.SGLKindInCapsule
	if q.drainAsked.Load() {
		q.core.draining = true
	}
	switch q.core.begin(r) {
	case actRespond:
		q.reply(s)
	case actFetch:
		if r.sglInCapsule {
			off := int(dp.InCapsule.Offset)
			r.data = in[off : off+r.dataLen]
			q.execute(s)
			return nil
		}
		// A Transport SGL Data Block: ask for the data with one R2T.
		r.data = q.dataBuffer(s, r.dataLen)
		s.wantData = true
		return q.sendR2T(s)
	case actExecute:
		if r.dataLen > 0 {
			r.data = q.dataBuffer(s, r.dataLen)
		}
		q.execute(s)
	}
	return nil
}

// dataBuffer returns s's data buffer cut to n bytes, allocating it the
// first time a command of the slot moves data.
func (q *tcpQueue) dataBuffer(s *tcpSlot, n int) []byte {
	if cap(s.data) < n {
		size := q.recv.MaxCapsuleData
		if n > size {
			size = q.t.cfg.maxTransfer
		}
		s.data = make([]byte, max(size, n))
	}
	return s.data[:n]
}

// sendR2T asks the host for all of a command's data: R2TO 0, R2TL the
// length, TTAG the slot index.
func (q *tcpQueue) sendR2T(s *tcpSlot) error {
	r := &s.req
	p := nvmeof.TCPDataPDU{Type: nvmeof.TCPPDUR2T, CCCID: r.cmd.CID, TTAG: uint16(r.index), DATAL: uint32(r.dataLen)}
	plen := nvmeof.TCPDataHeaderSize
	if q.hdgst {
		p.Flags = nvmeof.TCPFlagHDGSTF
		plen += nvmeof.TCPDigestSize
	}
	p.MarshalTo(s.r2t[:], 0, uint32(plen))
	if q.hdgst {
		nvmeof.PutTCPDigest(s.r2t[nvmeof.TCPDataHeaderSize:], s.r2t[:nvmeof.TCPDataHeaderSize])
	}
	q.wmu.Lock()
	_, err := q.conn.Write(s.r2t[:plen])
	q.wmu.Unlock()
	return err
}

// onH2CData places the data of an H2CData PDU and runs its command once
// all of it is in.
//
//   - DATAL other than the data the PDU carries: Invalid PDU Header
//     Field at DATAL;
//   - a CCCID with no R2T outstanding: Invalid PDU Header Field at
//     CCCID; the right command but another TTAG: at TTAG;
//   - data not where the transfer stands (DATAO) or past the R2T:
//     Data Transfer Out of Range;
//   - LAST_PDU on other than the PDU that ends the R2T, or missing from
//     it: Invalid PDU Header Field at FLAGS.
func (q *tcpQueue) onH2CData(h nvmeof.TCPHeader, l nvmeof.TCPLayout) error {
	hdr := q.rhdr[:l.Header]
	p, _ := nvmeof.ParseTCPDataPDU(hdr)
	fail := func(fes nvmeof.TCPFES, fei int, why string) error {
		return q.terminate(&nvmeof.TCPFatalError{FES: fes, FEI: uint32(fei), Why: why}, hdr)
	}
	if int(p.DATAL) != l.Data {
		return fail(nvmeof.TCPFESInvalidHeaderField, nvmeof.TCPDataOffsetDATAL,
			fmt.Sprintf("DATAL %d in an H2CData of %d data bytes", p.DATAL, l.Data))
	}
	i := int(p.TTAG)
	if i >= len(q.slots) || !q.slots[i].wantData || q.slots[i].req.cmd.CID != p.CCCID {
		for j := range q.slots {
			if q.slots[j].wantData && q.slots[j].req.cmd.CID == p.CCCID {
				return fail(nvmeof.TCPFESInvalidHeaderField, nvmeof.TCPDataOffsetTTAG,
					fmt.Sprintf("TTAG %d for CCCID %#04x", p.TTAG, p.CCCID))
			}
		}
		return fail(nvmeof.TCPFESInvalidHeaderField, nvmeof.TCPDataOffsetCCCID,
			fmt.Sprintf("H2CData for CCCID %#04x, which has no R2T outstanding", p.CCCID))
	}
	s := &q.slots[i]
	r := &s.req
	if p.DATAO != s.got {
		return fail(nvmeof.TCPFESDataOutOfRange, nvmeof.TCPDataOffsetDATAO,
			fmt.Sprintf("DATAO %d where %d bytes of the R2T are in", p.DATAO, s.got))
	}
	end := uint64(p.DATAO) + uint64(p.DATAL)
	if end > uint64(r.dataLen) {
		return fail(nvmeof.TCPFESDataOutOfRange, nvmeof.TCPDataOffsetDATAL,
			fmt.Sprintf("data to %d past the R2T's %d bytes", end, r.dataLen))
	}
	last := end == uint64(r.dataLen)
	if last != (h.Flags&nvmeof.TCPFlagLastPDU != 0) {
		return fail(nvmeof.TCPFESInvalidHeaderField, nvmeof.TCPOffsetFLAGS,
			fmt.Sprintf("LAST_PDU %v on data to %d of %d", !last, end, r.dataLen))
	}
	ok, err := q.readData(l, r.data[p.DATAO:end])
	if err != nil {
		return err
	}
	if !ok {
		q.log.Warn("data digest error in H2CData", "cid", r.cmd.CID, "datao", p.DATAO)
		s.badData = true
	}
	s.got = uint32(end)
	if !last {
		return nil
	}
	s.wantData = false
	if s.badData {
		r.rsp.Status = nvmeof.StatusTransientTransportError
		q.reply(s)
		return nil
	}
	q.execute(s)
	return nil
}

// execute runs a command whose data (if any) is in place: here, or on a
// worker when its device may block.
func (q *tcpQueue) execute(s *tcpSlot) {
	r := &s.req
	if r.blocking() {
		if !q.workers.started {
			q.workers.start(q.t.cfg.ioWorkersPerQueue, q.executeOnWorker)
		}
		q.workers.work <- s
		return
	}
	if q.core.execute(r) {
		q.reply(s)
	}
}

// executeOnWorker runs a blocking command on a worker.
func (q *tcpQueue) executeOnWorker(s *tcpSlot) {
	if q.core.execute(&s.req) {
		q.respond(&s.req)
	}
}

// respond implements queueTransport: the controller-to-host data in one
// C2HData PDU (LAST_PDU; SUCCESS, and no CapsuleResp, when SQ flow
// control is disabled and the completion has nothing but a successful
// status to say), then the CapsuleResp, in one writev. For goroutines
// other than the reader, which uses reply.
func (q *tcpQueue) respond(r *request) {
	s := &q.slots[r.index]
	q.buildResponse(s)
	q.wmu.Lock()
	s.bufs = s.vec[:s.n]
	_, err := s.bufs.WriteTo(q.conn)
	q.wmu.Unlock()
	q.responded(s, err)
}

// abandon implements queueTransport: the slot goes back unanswered.
func (q *tcpQueue) abandon(r *request) {
	s := &q.slots[r.index]
	r.data = nil
	q.releaseSlot(s)
}

// reply is respond on the reader: the response waits in pend and goes
// out with the others of the batch (flushReplies), one writev for all.
func (q *tcpQueue) reply(s *tcpSlot) {
	q.buildResponse(s)
	q.pend = append(q.pend, s)
}

// flushReplies writes the responses the reader collected.
func (q *tcpQueue) flushReplies() {
	if len(q.pend) == 0 {
		return
	}
	vec := q.pvec[:0]
	for _, s := range q.pend {
		vec = append(vec, s.vec[:s.n]...)
	}
	q.wmu.Lock()
	q.pbufs = vec
	_, err := q.pbufs.WriteTo(q.conn)
	q.wmu.Unlock()
	clear(vec)
	q.pvec = vec[:0]
	for i, s := range q.pend {
		q.pend[i] = nil
		q.responded(s, err)
	}
	q.pend = q.pend[:0]
}

// buildResponse finishes s's request and builds its PDUs in s.vec[:s.n].
func (q *tcpQueue) buildResponse(s *tcpSlot) {
	r := &s.req
	q.core.finish(r)
	hd, dd := 0, 0
	var hflag, dflag nvmeof.TCPFlags
	if q.hdgst {
		hd, hflag = nvmeof.TCPDigestSize, nvmeof.TCPFlagHDGSTF
	}
	if q.ddgst {
		dd, dflag = nvmeof.TCPDigestSize, nvmeof.TCPFlagDDGSTF
	}
	n, tail, withResp := 0, 0, true
	if r.sendsData() {
		data := r.data[:r.dataLen]
		flags := nvmeof.TCPFlagLastPDU | hflag | dflag
		if q.core.sqFlowOff && r.rsp.DW0 == 0 && r.rsp.DW1 == 0 {
			flags |= nvmeof.TCPFlagSuccess
			withResp = false
		}
		pdo := nvmeof.TCPDataOffset(nvmeof.TCPDataHeaderSize+hd, q.hpda)
		head := s.head[:pdo]
		p := nvmeof.TCPDataPDU{Type: nvmeof.TCPPDUC2HData, Flags: flags, CCCID: r.cmd.CID, DATAL: uint32(len(data))}
		p.MarshalTo(head, uint8(pdo), uint32(pdo+len(data)+dd))
		if hd > 0 {
			nvmeof.PutTCPDigest(head[nvmeof.TCPDataHeaderSize:], head[:nvmeof.TCPDataHeaderSize])
		}
		clear(head[nvmeof.TCPDataHeaderSize+hd:])
		s.vec[0], s.vec[1] = head, data
		n = 2
		if dd > 0 {
			nvmeof.PutTCPDigest(s.tail[:], data)
			tail = dd
		}
	}
	if withResp {
		b := s.tail[tail : tail+nvmeof.TCPCapsuleRespHeaderSize+hd]
		nvmeof.PutTCPCapsuleHeader(b, nvmeof.TCPPDUCapsuleResp, hflag, 0, uint32(len(b)))
		r.rsp.MarshalTo(b[nvmeof.TCPCommonHeaderSize:])
		if hd > 0 {
			nvmeof.PutTCPDigest(b[nvmeof.TCPCapsuleRespHeaderSize:], b[:nvmeof.TCPCapsuleRespHeaderSize])
		}
		tail += len(b)
	}
	if tail > 0 {
		s.vec[n] = s.tail[:tail]
		n++
	}
	s.n = n
}

// responded frees s once its response is written (or failed to be).
func (q *tcpQueue) responded(s *tcpSlot, err error) {
	r := &s.req
	closeQueue := r.closeQueue
	clear(s.vec[:])
	r.data = nil
	q.releaseSlot(s)
	if err != nil {
		q.log.Debug("writing a response failed: queue ended", "err", err)
		q.disconnect()
		return
	}
	if closeQueue {
		q.closerOnce.Do(func() {
			q.log.Debug("queue deleted by Disconnect")
			q.closer.Store(time.AfterFunc(rdmaDisconnectGrace, q.disconnect))
		})
	}
}
