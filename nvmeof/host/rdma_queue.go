package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
)

// The NVMe/RDMA binding of a queue: one reliable-connected QP and its CQ,
// the response Recvs, capsules by Send, data through keyed SGLs into the
// queue's registered memory.

const (
	// maxInline is the largest capsule sent with an inline Send.
	maxInline = 256

	// Work request IDs: receives carry wrRecv and their index; Sends
	// carry the command's CID, and wrQuiet when they were signaled only to
	// retire send-queue entries.
	wrRecv  uint64 = 1 << 63
	wrQuiet uint64 = 1 << 62
)

// rdmaTransport is a queue's RDMA connection.
type rdmaTransport struct {
	q *queue

	qp     rdma.QP
	cq     rdma.CQ
	respMR rdma.MR // entries × 16-byte responses
	slotMR rdma.MR // slots × (SQE + area)
	bufMR  rdma.MR // buffers × bufSize; nil without buffers

	recvs []rdma.RecvWR
	wrs   []rdma.SendWR // one per slot
	sges  []rdma.SGE    // two per slot: the capsule, and in-capsule data sent from the caller's registered memory

	signalEvery uint32
	sends       atomic.Uint32 // inline Sends posted, for periodic signaling

	// batch holds the Sends issued during a batch of completions; guarded
	// by q.mu.
	batch []rdma.SendWR
	// posting is a copy of batch, posted without q.mu; flushMu guards it
	// (the queue goroutine and a SubmitBatch may flush at once).
	flushMu sync.Mutex
	posting []rdma.SendWR
}

var _ queueTransport = (*rdmaTransport)(nil)

// newRDMATransport creates the QP, CQ and registered memory of q and
// sets q.slotMem and q.bufMem.
func newRDMATransport(q *queue, pd rdma.PD) (_ *rdmaTransport, err error) {
	qc := q.cfg
	depth := qc.entries - 1
	t := &rdmaTransport{q: q}
	defer func() {
		if err != nil {
			t.release()
		}
	}()
	maxSend := 2*depth + 2
	t.signalEvery = uint32(max(1, depth/2))
	if t.cq, err = pd.CreateCQ(qc.entries + maxSend + 16); err != nil {
		return nil, err
	}
	t.qp, err = pd.CreateQP(rdma.QPConfig{
		SendCQ: t.cq, RecvCQ: t.cq,
		MaxSendWR: maxSend, MaxRecvWR: qc.entries, MaxSGE: 2, MaxInline: maxInline,
	})
	if err != nil {
		return nil, err
	}
	if t.respMR, err = pd.Alloc(qc.entries*nvmeof.CompletionSize, rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	slotAccess := rdma.AccessLocalWrite
	if qc.area > 0 {
		slotAccess = rdma.AccessAll
	}
	if t.slotMR, err = pd.Alloc(depth*q.stride, slotAccess); err != nil {
		return nil, err
	}
	q.slotMem = t.slotMR.Bytes()
	if qc.buffers > 0 {
		if t.bufMR, err = pd.Alloc(qc.buffers*qc.bufSize, rdma.AccessAll); err != nil {
			return nil, err
		}
		q.bufMem = t.bufMR.Bytes()
	}
	t.recvs = make([]rdma.RecvWR, qc.entries)
	sges := make([]rdma.SGE, qc.entries)
	for i := range t.recvs {
		sges[i] = rdma.SGEOf(t.respMR, i*nvmeof.CompletionSize, nvmeof.CompletionSize)
		t.recvs[i] = rdma.RecvWR{ID: wrRecv | uint64(i), SGL: sges[i : i+1]}
	}
	t.wrs = make([]rdma.SendWR, depth)
	t.sges = make([]rdma.SGE, 2*depth)
	for i := range t.wrs {
		t.sges[2*i] = rdma.SGEOf(t.slotMR, i*q.stride, nvmeof.CommandSize)
		t.wrs[i] = rdma.SendWR{Op: rdma.OpSend, SGL: t.sges[2*i : 2*i+1]}
	}
	t.batch = make([]rdma.SendWR, 0, depth)
	t.posting = make([]rdma.SendWR, 0, depth)
	return t, nil
}

func (t *rdmaTransport) init() error { return t.qp.PostRecv(t.recvs) }

// connect establishes the RDMA connection with the NVMe RDMA_CM private
// data. cntlid is the controller of an I/O queue (0 for the admin queue,
// where the field is reserved). It returns CRQSIZE.
func (t *rdmaTransport) connect(ctx context.Context, host string, cntlid uint16) (int, error) {
	q := t.q
	req := nvmeof.RDMACMRequest{
		QID:     q.qid,
		HRQSize: uint16(q.cfg.entries),
		HSQSize: uint16(q.cfg.entries - 1),
		CNTLID:  cntlid,
	}
	var priv [nvmeof.RDMACMRequestSize]byte
	if _, err := req.MarshalTo(priv[:]); err != nil {
		return 0, err
	}
	reply, err := t.qp.Connect(ctx, host, priv[:])
	if err != nil {
		var rej *rdma.RejectError
		if errors.As(err, &rej) && len(rej.Private) > 0 {
			var j nvmeof.RDMACMReject
			if jerr := j.UnmarshalBinary(rej.Private); jerr == nil {
				return 0, fmt.Errorf("nvmeof/host: queue %d: controller rejected the connection: %w: %w", q.qid, j.Status, err)
			}
		}
		return 0, fmt.Errorf("nvmeof/host: queue %d: connect to %s: %w", q.qid, host, err)
	}
	var acc nvmeof.RDMACMAccept
	if err := acc.UnmarshalBinary(reply); err != nil {
		return 0, fmt.Errorf("%w: queue %d: accept private data: %w", ErrProtocol, q.qid, err)
	}
	if acc.CRQSize == 0 {
		return 0, fmt.Errorf("%w: queue %d: controller receive queue size 0", ErrProtocol, q.qid)
	}
	return int(acc.CRQSize), nil
}

// run reaps completions until the queue is closed.
func (t *rdmaTransport) run() {
	q := t.q
	wcs := make([]rdma.WC, 64)
	for {
		n, err := t.cq.Wait(q.ctx, wcs)
		if err != nil {
			if q.ctx.Err() != nil {
				return
			}
			q.fail(fmt.Errorf("nvmeof/host: queue %d: completion queue: %w", q.qid, err))
			<-q.ctx.Done()
			return
		}
		q.startBatch()
		for i := range wcs[:n] {
			t.handle(&wcs[i])
		}
		q.endBatch()
	}
}

// flush posts the Sends held during a batch.
func (t *rdmaTransport) flush() {
	q := t.q
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	q.mu.Lock()
	t.posting = append(t.posting[:0], t.batch...)
	t.batch = t.batch[:0]
	q.mu.Unlock()
	if len(t.posting) > 0 {
		t.post(t.posting)
	}
}

// post posts Sends of command capsules; a failure drops the queue.
func (t *rdmaTransport) post(wrs []rdma.SendWR) {
	if err := t.qp.PostSend(wrs); err != nil {
		t.q.log.Warn("nvmeof/host: posting commands failed; dropping the queue", "err", err)
		t.qp.SetError()
	}
}

// send posts the capsule of slot s: inline and unsignaled up to maxInline
// bytes (every signalEvery-th signaled), else signaled, with the slot
// kept until the Send completes.
func (t *rdmaTransport) send(s *slot, capLen int) {
	q := t.q
	wr := &t.wrs[s.idx]
	i := 2 * int(s.idx)
	if s.icData != nil && capLen <= maxInline {
		// Inline copies anyway: from the capsule, in one SGE.
		copy(s.capsule[nvmeof.CommandSize:capLen], s.icData)
		s.icData = nil
	}
	if s.icData != nil {
		// The SQE from the slot, the data from the caller's registered
		// memory.
		t.sges[i].Length = nvmeof.CommandSize
		t.sges[i+1] = rdma.SGEOf(s.dmr, s.doff, len(s.icData))
		wr.SGL = t.sges[i : i+2]
	} else {
		t.sges[i].Length = uint32(capLen)
		wr.SGL = t.sges[i : i+1]
	}
	if capLen <= maxInline {
		wr.Flags = rdma.Inline
		wr.ID = wrQuiet | uint64(s.idx)
		if t.sends.Add(1)%t.signalEvery == 0 {
			wr.Flags |= rdma.Signaled
		}
		s.waitSend = false
	} else {
		wr.Flags = rdma.Signaled
		wr.ID = uint64(s.cid())
		s.waitSend = true
	}
	s.live.Store(uint32(s.cid()) + 1)
	if q.batchOn.Load() {
		q.mu.Lock()
		if q.holdingSends() {
			t.batch = append(t.batch, *wr)
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
	t.post(t.wrs[s.idx : s.idx+1])
}

// handle processes one work completion.
func (t *rdmaTransport) handle(wc *rdma.WC) {
	q := t.q
	if wc.Status != rdma.Success {
		if !q.failed {
			err := wc.Status.Err()
			if qerr := t.qp.Err(); qerr != nil && !errors.Is(qerr, rdma.WRFlushErr) {
				err = qerr
			}
			q.fail(fmt.Errorf("nvmeof/host: queue %d: %v: %w", q.qid, wc.Opcode, err))
		}
		return
	}
	if q.failed {
		return
	}
	switch {
	case wc.ID&wrRecv != 0:
		t.response(int(wc.ID&^wrRecv), wc)
	case wc.ID&wrQuiet != 0:
		// An inline Send signaled only to retire send-queue entries.
	default:
		cid := uint16(wc.ID)
		idx := int(cid & cidIndexMask)
		if idx >= len(q.slots) {
			q.fail(fmt.Errorf("%w: queue %d: send completion for slot %d", ErrProtocol, q.qid, idx))
			return
		}
		s := &q.slots[idx]
		if s.live.Load() != uint32(cid)+1 || !s.waitSend {
			q.fail(fmt.Errorf("%w: queue %d: send completion for CID %#04x, not outstanding", ErrProtocol, q.qid, cid))
			return
		}
		s.waitSend = false
		if s.gotResp {
			q.complete(s)
		}
	}
}

// response handles the response capsule in receive buffer i.
func (t *rdmaTransport) response(i int, wc *rdma.WC) {
	q := t.q
	if i >= len(t.recvs) {
		q.fail(fmt.Errorf("%w: queue %d: receive %d", ErrProtocol, q.qid, i))
		return
	}
	if wc.ByteLen < nvmeof.CompletionSize {
		q.fail(fmt.Errorf("%w: queue %d: response capsule of %d bytes", ErrProtocol, q.qid, wc.ByteLen))
		return
	}
	var cqe nvmeof.Completion
	off := i * nvmeof.CompletionSize
	if err := cqe.UnmarshalBinary(t.respMR.Bytes()[off : off+nvmeof.CompletionSize]); err != nil {
		q.fail(fmt.Errorf("%w: queue %d: %w", ErrProtocol, q.qid, err))
		return
	}
	if err := t.qp.PostRecv(t.recvs[i : i+1]); err != nil {
		q.fail(fmt.Errorf("nvmeof/host: queue %d: repost receive: %w", q.qid, err))
		return
	}
	s := q.responseSlot(cqe.CID)
	if s == nil {
		return
	}
	if wc.Flags&rdma.WCWithInv != 0 {
		raw := s.req.raw
		if raw == nil || raw.mr == nil || raw.mr.RKey() != wc.InvRKey {
			q.fail(fmt.Errorf("%w: queue %d: response to CID %#04x invalidated rkey %#x, which the command did not offer",
				ErrProtocol, q.qid, cqe.CID, wc.InvRKey))
			return
		}
	}
	q.gotResponse(s, cqe)
}

// rdmaNullSGL is SGL1 of a command without data, in the form Linux hosts
// send: a Keyed SGL Data Block with address, length and key zero.
var rdmaNullSGL, _ = nvmeof.KeyedSGL{}.Descriptor()

func (t *rdmaTransport) nullSGL() nvmeof.SGLDescriptor { return rdmaNullSGL }

// readsInPlace: RDMA Writes land only in registered memory, never in the
// caller's buffer.
func (t *rdmaTransport) readsInPlace() bool { return false }

// dataSGL returns a keyed SGL (40h) for n bytes at off of the slot's data
// memory: its large buffer or its area in the slot region.
func (t *rdmaTransport) dataSGL(s *slot, off int, n int64) nvmeof.SGLDescriptor {
	q := t.q
	k := nvmeof.KeyedSGL{Length: uint32(n)}
	if s.buf >= 0 {
		k.Address = t.bufMR.Addr() + uint64(s.buf*q.cfg.bufSize+off)
		k.Key = t.bufMR.RKey()
	} else {
		k.Address = t.slotMR.Addr() + uint64(s.capOff+nvmeof.CommandSize+off)
		k.Key = t.slotMR.RKey()
	}
	d, _ := k.Descriptor() // lengths are below 2^24 by construction
	return d
}

// directSGL returns a keyed SGL (40h) for the chunk's bytes in the
// caller's registered memory.
func (t *rdmaTransport) directSGL(s *slot) nvmeof.SGLDescriptor {
	d, _ := nvmeof.KeyedSGL{Address: s.dmr.Addr() + uint64(s.doff), Length: uint32(len(s.direct)), Key: s.dmr.RKey()}.Descriptor()
	return d
}

// rawStart registers a region for the command's data alone.
func (t *rdmaTransport) rawStart(raw *rawCommand) error {
	access := rdma.AccessRemoteRead
	if raw.dir == nvmeof.ControllerToHost {
		access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite
	}
	mr, err := t.q.ctrl.pd.Alloc(len(raw.data), access)
	if err != nil {
		return err
	}
	if raw.dir == nvmeof.HostToController {
		copy(mr.Bytes(), raw.data)
	}
	raw.mr = mr
	return nil
}

// rawSGL offers the command's region with a keyed SGL that asks for
// invalidation (4Fh).
func (t *rdmaTransport) rawSGL(s *slot, raw *rawCommand) nvmeof.SGLDescriptor {
	d, _ := nvmeof.KeyedSGL{Address: raw.mr.Addr(), Length: uint32(len(raw.data)), Key: raw.mr.RKey(), Invalidate: true}.Descriptor()
	return d
}

func (t *rdmaTransport) rawEnd(raw *rawCommand, ok bool) {
	if raw.mr == nil {
		return
	}
	if raw.dir == nvmeof.ControllerToHost && ok {
		copy(raw.data, raw.mr.Bytes())
	}
	raw.mr.Deregister()
}

func (t *rdmaTransport) setError() { t.qp.SetError() }

// release frees the QP, CQ and memory regions.
func (t *rdmaTransport) release() {
	if t.qp != nil {
		t.qp.Close()
		t.qp = nil
	}
	for _, mr := range []rdma.MR{t.respMR, t.slotMR, t.bufMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	t.respMR, t.slotMR, t.bufMR = nil, nil, nil
	if t.cq != nil {
		t.cq.Close()
		t.cq = nil
	}
}
