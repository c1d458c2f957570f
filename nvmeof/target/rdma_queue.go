package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
)

// Work request kinds, in the low bits of a WR ID; the slot index is above.
const (
	wrRecv  = 1 // a command capsule arrived
	wrRead  = 2 // the host's data was RDMA-Read
	wrSend  = 3 // the response capsule (and any RDMA Write before it) went out
	wrWrite = 4 // an unsignaled RDMA Write: completes only with an error
	wrShift = 3
)

// rdmaDisconnectGrace is how long a queue deleted by Disconnect waits for
// the host to close the connection before the target closes it: closing
// at once could discard the response still on its way.
const rdmaDisconnectGrace = time.Second

// slotsPerEntry: a queue posts this many receives per queue entry, so
// that a command's receive buffer can stay busy until its response Send
// completes while the host, which has its response already, sends the
// next command into another one.
const slotsPerEntry = 2

// rdmaSlot is a command slot of an RDMA queue: the request, the receive
// buffer its capsule arrives in (reused as the data buffer of transfers
// that fit), its response buffer, and work requests built once.
type rdmaSlot struct {
	req     request
	capsule []byte // capsule buffer, in rdmaQueue.capsules
	capAddr uint64 // its address in the capsule region
	resp    []byte // 16-byte response buffer, in rdmaQueue.responses

	keyed   nvmeof.KeyedSGL // the host's buffer, for a Keyed SGL
	invalid bool            // answer with Send with Invalidate of keyed.Key
	large   *largeBuffer    // the data buffer, when it did not fit the capsule buffer
	dataSGL [1]rdma.SGE     // where r.data is, for the RDMA Read or Write

	recv    [1]rdma.RecvWR
	recvSGE [1]rdma.SGE
	send    [2]rdma.SendWR
	respSGE [1]rdma.SGE
}

// rdmaQueue is one NVMe queue over one RC queue pair.
//
// Its goroutine (run) polls the CQ and does everything but the device I/O
// of blocking namespaces, which it hands to workers; responses are posted
// by whichever goroutine finishes a command (QP.PostSend is safe for
// that). Slots, the large-buffer pool and busy belong to the queue's
// goroutine; a slot handed to a worker or held by the controller belongs
// to that holder until its response is posted.
type rdmaQueue struct {
	core queue
	l    *rdmaListener
	t    *Target
	log  *slog.Logger

	qp        rdma.QP
	cq        rdma.CQ
	capsules  rdma.MR
	responses rdma.MR
	slots     []rdmaSlot
	wcs       []rdma.WC
	policy    nvmeof.SGLPolicy
	large     largePool
	busy      int // slots between capsule and response Send completion
	// batch holds the send WRs (RDMA Reads, responses) the queue's
	// goroutine built while handling one batch of completions; they are
	// posted together, one PostSend (one writev on iwarp) for all, before
	// the goroutine waits again.
	batch []rdma.SendWR

	workers workers[*rdmaSlot] // blocking commands

	// soft ends the poller's wait when a drain is asked for; the target's
	// context ends it for good.
	soft       context.Context
	softCancel context.CancelFunc
	drainAsked chan struct{}
	drainOnce  sync.Once
	// closer closes the connection of a queue deleted by Disconnect if
	// the host does not; set on the queue's goroutine.
	closer *time.Timer
}

var _ queueTransport = (*rdmaQueue)(nil)

// newRDMAQueue allocates a queue's resources: CQ, QP, capsule and response
// buffers, receives posted. entries is the host's HSQSIZE+1.
func newRDMAQueue(l *rdmaListener, qid uint16, entries int) (_ *rdmaQueue, err error) {
	cfg := &l.t.cfg
	nslots := entries * slotsPerEntry
	capSize := cfg.capsuleSize()
	stride := (capSize + 63) &^ 63
	q := &rdmaQueue{
		l:          l,
		t:          l.t,
		log:        l.log.With("qid", qid),
		slots:      make([]rdmaSlot, nslots),
		wcs:        make([]rdma.WC, 64),
		workers:    newWorkers[*rdmaSlot](nslots),
		batch:      make([]rdma.SendWR, 0, 2*nslots),
		drainAsked: make(chan struct{}),
	}
	q.core.init(l.t, q, qid, entries)
	q.core.listener = l.addr
	q.soft, q.softCancel = context.WithCancel(l.t.ctx)
	q.large = largePool{regions: &l.regions, size: cfg.rdmaMaxTransfer, max: cfg.largeBuffersPerQueue,
		waiters: make([]*rdmaSlot, 0, nslots)}
	defer func() {
		if err != nil {
			q.free()
		}
	}()
	if q.cq, err = l.pd.CreateCQ(3*nslots + 16); err != nil {
		return nil, err
	}
	if q.capsules, err = l.regions.get(nslots * stride); err != nil {
		return nil, err
	}
	if q.responses, err = l.regions.get(nslots * nvmeof.CompletionSize); err != nil {
		return nil, err
	}
	if q.qp, err = l.pd.CreateQP(rdma.QPConfig{
		SendCQ:    q.cq,
		RecvCQ:    q.cq,
		MaxSendWR: 2*nslots + 8,
		MaxRecvWR: nslots,
		MaxSGE:    1,
		MaxInline: 64,
	}); err != nil {
		return nil, err
	}
	capBytes, respBytes := q.capsules.Bytes(), q.responses.Bytes()
	for i := range q.slots {
		s := &q.slots[i]
		s.req.index = i
		s.req.q = &q.core
		s.capsule = capBytes[i*stride : i*stride+capSize : i*stride+capSize]
		s.capAddr = q.capsules.Addr() + uint64(i*stride)
		s.resp = respBytes[i*nvmeof.CompletionSize : (i+1)*nvmeof.CompletionSize]
		s.recvSGE[0] = rdma.SGE{Addr: s.capAddr, Length: uint32(capSize), LKey: q.capsules.LKey()}
		s.recv[0] = rdma.RecvWR{ID: slotWRID(i, wrRecv), SGL: s.recvSGE[:]}
		s.respSGE[0] = rdma.SGEOf(q.responses, i*nvmeof.CompletionSize, nvmeof.CompletionSize)
		if err = q.qp.PostRecv(s.recv[:]); err != nil {
			return nil, err
		}
	}
	q.policy = nvmeof.SGLPolicy{Keyed: true, MaxDataBlocks: 1}
	return q, nil
}

func slotWRID(i, kind int) uint64 { return uint64(i)<<wrShift | uint64(kind) }

// free releases what newRDMAQueue allocated. The QP must be in error or
// never connected, and no worker may run.
func (q *rdmaQueue) free() {
	q.softCancel()
	if q.qp != nil {
		q.qp.Close()
	}
	if q.cq != nil {
		q.cq.Close()
	}
	if q.capsules != nil {
		q.l.regions.put(q.capsules)
	}
	if q.responses != nil {
		q.l.regions.put(q.responses)
	}
	q.large.free()
}

// run is the queue's goroutine.
func (q *rdmaQueue) run() {
	defer q.t.wg.Done()
	defer q.teardown()
	ctx := q.soft
	for {
		q.postBatch()
		n, err := q.cq.Wait(ctx, q.wcs)
		if err != nil {
			if ctx == q.soft && q.t.ctx.Err() == nil && q.drainRequested() {
				q.core.draining = true
				ctx = q.t.ctx
				if q.busy == 0 {
					return
				}
				continue
			}
			if !errors.Is(err, context.Canceled) {
				q.log.Warn("completion queue failed", "err", err)
			}
			return
		}
		for i := range n {
			if !q.handle(&q.wcs[i]) {
				return
			}
		}
		if q.core.draining && q.busy == 0 {
			return
		}
	}
}

func (q *rdmaQueue) drainRequested() bool {
	select {
	case <-q.drainAsked:
		return true
	default:
		return false
	}
}

// teardown ends the queue: the connection, the core's view of it, the
// workers, and every resource.
func (q *rdmaQueue) teardown() {
	q.qp.SetError()
	if q.closer != nil {
		q.closer.Stop()
	}
	q.core.closed()
	q.workers.stop()
	q.free()
	q.core.gone()
	q.l.queues.Done()
	q.log.Debug("queue closed", "err", q.qp.Err())
}

// disconnect implements queueTransport.
func (q *rdmaQueue) disconnect() { q.qp.SetError() }

// drain implements queueTransport.
func (q *rdmaQueue) drain() {
	q.drainOnce.Do(func() {
		close(q.drainAsked)
		q.softCancel()
	})
}

// handle processes one completion. It returns false when the queue must
// end: a failed work request means the connection is in error.
func (q *rdmaQueue) handle(wc *rdma.WC) bool {
	i, kind := int(wc.ID>>wrShift), int(wc.ID&(1<<wrShift-1))
	if i >= len(q.slots) {
		q.log.Error("completion for an unknown work request", "id", wc.ID)
		return false
	}
	s := &q.slots[i]
	if wc.Status != rdma.Success {
		switch {
		case wc.Status == rdma.WRFlushErr && hostFailed(q.qp.Err()):
			// The work requests that caused it completed already (an
			// iWARP Write completes once sent), and the host's verdict
			// came later, as the connection's error.
			q.log.Warn("host failed the connection: queue ended", "err", q.qp.Err())
		case wc.Status == rdma.WRFlushErr:
			q.log.Debug("connection ended", "err", q.qp.Err())
		case wc.Status == rdma.RemAccessErr && (kind == wrRead || kind == wrWrite):
			q.log.Warn("host refused its own key: queue ended", "cid", s.req.cmd.CID, "rkey", fmt.Sprintf("%#x", s.keyed.Key))
		default:
			q.log.Warn("work request failed: queue ended", "kind", kind, "status", wc.Status.String())
		}
		return false
	}
	switch kind {
	case wrRecv:
		return q.onCapsule(s, int(wc.ByteLen))
	case wrRead:
		q.execute(s)
	case wrSend:
		return q.onResponseSent(s)
	}
	return true
}

// hostFailed reports whether a connection's error is the host's verdict
// on something the target did (a key it refused, a request it found
// invalid), rather than the connection merely ending.
func hostFailed(err error) bool {
	var st rdma.WCStatus
	if !errors.As(err, &st) {
		return false
	}
	switch st {
	case rdma.RemAccessErr, rdma.RemInvReqErr, rdma.RemOpErr, rdma.LocLenErr, rdma.LocProtErr, rdma.LocQPOpErr, rdma.GeneralErr:
		return true
	}
	return false
}

// onCapsule starts a command that arrived in slot s.
func (q *rdmaQueue) onCapsule(s *rdmaSlot, n int) bool {
	q.busy++
	r := &s.req
	r.reset()
	s.invalid, s.large, s.keyed = false, nil, nvmeof.KeyedSGL{}
	cmd, _, err := nvmeof.ParseCapsule(s.capsule[:n])
	if err != nil {
		// Without an SQE there is no command to answer: a fatal error of
		// the transport.
		q.log.Warn("capsule shorter than a command: queue ended", "bytes", n)
		return false
	}
	r.cmd = cmd
	r.capsuleData = s.capsule[nvmeof.CommandSize:n]
	policy := q.policy
	policy.InCapsuleSize = n - nvmeof.CommandSize
	dp, st := policy.Decode(cmd.DPTR)
	r.sglStatus, r.sglLen = st, dp.Length()
	r.sglInCapsule = dp.Kind == nvmeof.SGLKindInCapsule
	if dp.Kind == nvmeof.SGLKindKeyed {
		s.keyed = dp.Keyed
	}
	switch q.core.begin(r) {
	case actRespond:
		q.reply(s)
		return true
	case actFetch:
		if r.sglInCapsule {
			off := nvmeof.CommandSize + int(dp.InCapsule.Offset)
			r.data = s.capsule[off : off+r.dataLen]
			q.execute(s)
			return true
		}
	}
	if r.dataLen > 0 && !q.assignBuffer(s) {
		return true // waits for a large buffer; proceed runs it
	}
	q.proceed(s)
	return true
}

// assignBuffer gives s a data buffer of r.dataLen bytes: the capsule
// buffer when it fits, else a large buffer. It returns false when s has
// to wait for one (the pool calls proceed when it gets one), or when the
// command was answered because none could be allocated.
func (q *rdmaQueue) assignBuffer(s *rdmaSlot) bool {
	r := &s.req
	// Data to the host goes after any in-capsule payload, which the
	// command may still read.
	base := 0
	if r.dir == nvmeof.ControllerToHost && len(r.capsuleData) > 0 {
		base = nvmeof.CommandSize + len(r.capsuleData)
	}
	if base+r.dataLen <= len(s.capsule) {
		r.data = s.capsule[base : base+r.dataLen]
		s.dataSGL[0] = rdma.SGE{Addr: s.capAddr + uint64(base), Length: uint32(r.dataLen), LKey: q.capsules.LKey()}
		return true
	}
	b, err := q.large.get(s)
	if err != nil {
		q.log.Error("no memory for a data buffer", "bytes", r.dataLen, "err", err)
		r.rsp.Status = nvmeof.StatusInternalError
		q.reply(s)
		return false
	}
	if b == nil {
		return false
	}
	q.useLarge(s, b)
	return true
}

func (q *rdmaQueue) useLarge(s *rdmaSlot, b *largeBuffer) {
	r := &s.req
	s.large = b
	r.data = b.mr.Bytes()[:r.dataLen]
	s.dataSGL[0] = rdma.SGE{Addr: b.mr.Addr(), Length: uint32(r.dataLen), LKey: b.mr.LKey()}
}

// proceed moves a command with its buffer to its data phase: an RDMA
// Read of the host's data, or execution.
func (q *rdmaQueue) proceed(s *rdmaSlot) {
	r := &s.req
	if !r.fetchesData() {
		q.execute(s)
		return
	}
	k := s.keyed
	s.invalid = k.Invalidate
	q.batch = append(q.batch, rdma.SendWR{ID: slotWRID(r.index, wrRead), Op: rdma.OpRead, Flags: rdma.Signaled,
		SGL: s.dataSGL[:], RemoteAddr: k.Address, RKey: k.Key})
}

// execute runs a command whose data (if any) is in place: here, or on a
// worker when its device may block.
func (q *rdmaQueue) execute(s *rdmaSlot) {
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
func (q *rdmaQueue) executeOnWorker(s *rdmaSlot) {
	if q.core.execute(&s.req) {
		q.respond(&s.req)
	}
}

// respond implements queueTransport: it posts the RDMA Write of the data
// (unsignaled) and the Send of the response in one batch. It is for
// goroutines other than the queue's; the queue's own goroutine uses reply.
func (q *rdmaQueue) respond(r *request) {
	s := &q.slots[r.index]
	n := q.buildResponse(s)
	if err := q.qp.PostSend(s.send[:n]); err != nil {
		q.log.Debug("posting a response failed: queue ended", "err", err)
		q.qp.SetError()
	}
}

// reply is respond on the queue's goroutine: the WRs join the batch.
func (q *rdmaQueue) reply(s *rdmaSlot) {
	n := q.buildResponse(s)
	q.batch = append(q.batch, s.send[:n]...)
}

// buildResponse finishes s's request and builds its WRs in s.send: the
// RDMA Write of controller-to-host data, if any, and the response Send.
// It returns how many.
func (q *rdmaQueue) buildResponse(s *rdmaSlot) int {
	r := &s.req
	q.core.finish(r)
	r.rsp.MarshalTo(s.resp)
	n := 0
	if r.sendsData() {
		s.dataSGL[0].Length = uint32(r.dataLen) // a vendor command may send less than SGL1 describes
		s.invalid = s.keyed.Invalidate
		s.send[0] = rdma.SendWR{ID: slotWRID(r.index, wrWrite), Op: rdma.OpWrite,
			SGL: s.dataSGL[:], RemoteAddr: s.keyed.Address, RKey: s.keyed.Key}
		n = 1
	}
	s.send[n] = rdma.SendWR{ID: slotWRID(r.index, wrSend), Op: rdma.OpSend, Flags: rdma.Signaled | rdma.Inline, SGL: s.respSGE[:]}
	if s.invalid {
		s.send[n].Op = rdma.OpSendInv
		s.send[n].InvRKey = s.keyed.Key
	}
	return n + 1
}

// postBatch posts the WRs the queue's goroutine collected.
func (q *rdmaQueue) postBatch() {
	if len(q.batch) == 0 {
		return
	}
	if err := q.qp.PostSend(q.batch); err != nil {
		q.log.Debug("posting work requests failed: queue ended", "err", err)
		q.qp.SetError()
	}
	clear(q.batch) // drop the references to slot arrays
	q.batch = q.batch[:0]
}

// abandon implements queueTransport: the slot is freed unanswered.
func (q *rdmaQueue) abandon(r *request) {
	if !q.onResponseSent(&q.slots[r.index]) {
		q.qp.SetError()
	}
}

// onResponseSent frees slot s once its response went out (or, from
// abandon, without one).
func (q *rdmaQueue) onResponseSent(s *rdmaSlot) bool {
	r := &s.req
	if b := s.large; b != nil {
		s.large = nil
		if w := q.large.put(b); w != nil {
			q.useLarge(w, b)
			q.proceed(w)
		}
	}
	closeQueue := r.closeQueue
	r.data = nil
	q.busy--
	if closeQueue && q.closer == nil {
		q.log.Debug("queue deleted by Disconnect")
		q.closer = time.AfterFunc(rdmaDisconnectGrace, q.disconnect)
	}
	if err := q.qp.PostRecv(s.recv[:]); err != nil {
		q.log.Warn("reposting a receive failed: queue ended", "err", err)
		return false
	}
	return true
}

// largeBuffer is a registered buffer of MaxTransfer bytes.
type largeBuffer struct{ mr rdma.MR }

// largePool hands out a queue's large buffers, taking up to max of them
// from the listener's region cache on demand. It belongs to the queue's
// goroutine.
type largePool struct {
	regions *regionCache
	size    int
	max     int
	all     []*largeBuffer
	idle    []*largeBuffer
	waiters []*rdmaSlot // slots waiting for a buffer, oldest first
}

// get returns a free buffer, or nil after queueing s to get the next one.
func (p *largePool) get(s *rdmaSlot) (*largeBuffer, error) {
	if n := len(p.idle); n > 0 {
		b := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return b, nil
	}
	if len(p.all) < p.max {
		mr, err := p.regions.get(p.size)
		if err != nil {
			return nil, err
		}
		b := &largeBuffer{mr: mr}
		p.all = append(p.all, b)
		return b, nil
	}
	p.waiters = append(p.waiters, s)
	return nil, nil
}

// put returns a buffer. If a slot was waiting it gets the buffer, and put
// returns it for the caller to proceed with.
func (p *largePool) put(b *largeBuffer) *rdmaSlot {
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		copy(p.waiters, p.waiters[1:])
		p.waiters = p.waiters[:len(p.waiters)-1]
		return w
	}
	p.idle = append(p.idle, b)
	return nil
}

// free gives every buffer back to the region cache.
func (p *largePool) free() {
	for _, b := range p.all {
		p.regions.put(b.mr)
	}
	p.all, p.idle, p.waiters = nil, nil, nil
}
