package fault

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

// entry is one send WR the wrapper posted and has not seen complete.
type entry struct {
	user     uint64        // the caller's ID
	op       rdma.WCOpcode // the caller's operation
	signaled bool          // the caller asked for a completion
	stage    rdma.MR       // staging buffer, deregistered at completion
	inline   []byte        // staged inline payload, kept reachable until posted
	readBack func()        // a corrupted Read: scatter the staged bytes to the caller
}

// heldWR is a WR that Delay holds, or that waits behind one.
type heldWR struct {
	wr  rdma.SendWR
	due time.Time
}

// qp wraps a QP. Every send WR is posted to the wrapped QP under a
// sequence number of the wrapper, so that the CQ can translate its
// completion back and the wrapper can finish what a fault started.
type qp struct {
	pd   *pd
	in   rdma.QP
	scq  *cq
	cfg  rdma.QPConfig
	kick chan struct{} // wakes the delay worker

	cutOff atomic.Bool // Cut made the QP fail
	closed atomic.Bool

	// mu guards the fields below. It is held across every PostSend to
	// the wrapped QP, so WRs reach it in the order they were posted here.
	mu       sync.Mutex
	ring     []entry // outstanding send WRs; ring[0] has sequence number base
	base     uint64
	held     []heldWR
	worker   bool // a goroutine is posting held WRs
	flushNow bool // the QP is failing: post held WRs at once, to flush
	inj      *Injector
	side     Side
}

var _ rdma.QP = (*qp)(nil)

func newQP(p *pd, in rdma.QP, scq *cq, cfg rdma.QPConfig) *qp {
	return &qp{pd: p, in: in, scq: scq, cfg: cfg, kick: make(chan struct{}, 1)}
}

func (q *qp) Num() uint32           { return q.in.Num() }
func (q *qp) State() rdma.QPState   { return q.in.State() }
func (q *qp) Done() <-chan struct{} { return q.in.Done() }
func (q *qp) LocalAddr() string     { return q.in.LocalAddr() }
func (q *qp) RemoteAddr() string    { return q.in.RemoteAddr() }

// Err is RetryExcErr for a QP that Cut dropped, as for a lost connection.
func (q *qp) Err() error {
	err := q.in.Err()
	if err != nil && q.cutOff.Load() {
		return rdma.RetryExcErr
	}
	return err
}

func (q *qp) PostRecv(wrs []rdma.RecvWR) error { return q.in.PostRecv(wrs) }

func (q *qp) Connect(ctx context.Context, host string, private []byte) ([]byte, error) {
	inj := For(host)
	if inj.refused() {
		return nil, ErrRefused
	}
	reply, err := q.in.Connect(ctx, host, private)
	if err != nil {
		return nil, err
	}
	q.join(inj, Dialer)
	return reply, nil
}

func (q *qp) join(inj *Injector, s Side) {
	q.mu.Lock()
	q.inj, q.side = inj, s
	q.mu.Unlock()
	inj.attach(q)
}

func (q *qp) SetError() {
	q.in.SetError()
	q.flush()
}

// cut fails the QP as a lost connection does.
func (q *qp) cut() {
	q.cutOff.Store(true)
	q.in.SetError()
	q.flush()
}

// flush has the worker post held WRs now: in StateError they flush.
func (q *qp) flush() {
	q.mu.Lock()
	q.flushNow = true
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Close fails the QP, posts what Delay still holds (it flushes), and
// closes the wrapped QP. Completions that the wrapped QP delivers after
// Close are still translated.
func (q *qp) Close() error {
	if !q.closed.CompareAndSwap(false, true) {
		return nil
	}
	q.in.SetError()
	q.mu.Lock()
	q.flushNow = true
	for len(q.held) > 0 {
		q.postHeldLocked()
	}
	inj := q.inj
	q.mu.Unlock()
	if inj != nil {
		inj.detach(q)
	}
	return q.in.Close()
}

// PostSend runs each WR through the injector's rules, then posts it to
// the wrapped QP at once or, when Delay holds it or an earlier WR, later.
func (q *qp) PostSend(wrs []rdma.SendWR) error {
	if q.closed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var (
		batch []rdma.SendWR
		first int // index in wrs of batch[0]
	)
	post := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := q.in.PostSend(batch)
		if err != nil {
			k, cause := 0, err
			var pe *rdma.PostError
			if errors.As(err, &pe) {
				k, cause = pe.Index, pe.Err
			}
			q.unwindLocked(len(batch) - k)
			return &rdma.PostError{Index: first + k, Err: cause}
		}
		batch = batch[:0]
		return nil
	}
	for i := range wrs {
		w := &wrs[i]
		v := verdict{truncate: -1}
		if q.inj != nil {
			v = q.inj.decide(w.Op, payloadLen(w), q.side)
		}
		if v.cut {
			if err := post(); err != nil {
				return err
			}
			q.cutOff.Store(true)
			q.in.SetError()
			q.flushNow = true
		}
		hold := v.delay > 0 || len(q.held) > 0
		if hold {
			// What came before goes first.
			if err := post(); err != nil {
				return err
			}
		}
		iw, e := q.build(w, v)
		q.ring = append(q.ring, e)
		if hold {
			q.hold(iw, e, time.Now().Add(v.delay))
			continue
		}
		if len(batch) == 0 {
			first = i
		}
		batch = append(batch, iw)
	}
	return post()
}

// unwindLocked forgets the last n ring entries, whose WRs were not posted.
func (q *qp) unwindLocked(n int) {
	for _, e := range q.ring[len(q.ring)-n:] {
		if e.stage != nil {
			e.stage.Deregister()
		}
	}
	q.ring = q.ring[:len(q.ring)-n]
}

// hold queues iw for the worker. Its SGL is the caller's slice unless a
// fault staged it; it is copied, and inline data is copied too, because
// the caller may reuse both once PostSend returns.
func (q *qp) hold(iw rdma.SendWR, e entry, due time.Time) {
	iw.SGL = append([]rdma.SGE(nil), iw.SGL...)
	if iw.Flags&rdma.Inline != 0 && e.inline == nil {
		data := gather(q.pd, iw.SGL, true)
		iw.SGL = inlineSGL(data)
		q.ring[len(q.ring)-1].inline = data
	}
	q.held = append(q.held, heldWR{wr: iw, due: due})
	if !q.worker {
		q.worker = true
		go q.run()
	}
}

// run posts held WRs as they fall due, in order, until none is left.
func (q *qp) run() {
	for {
		q.mu.Lock()
		if len(q.held) == 0 {
			q.worker = false
			q.mu.Unlock()
			return
		}
		wait := time.Until(q.held[0].due)
		if q.flushNow || wait <= 0 {
			q.postHeldLocked()
			q.mu.Unlock()
			continue
		}
		q.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-q.kick:
		case <-q.in.Done():
			q.flush()
		}
		t.Stop()
	}
}

// postHeldLocked posts the held WRs that are due (all of them when the QP
// is failing). A full send queue leaves them held for the next round; a
// WR the wrapped QP refuses otherwise is lost, and the QP is failed so
// that nobody waits for it.
func (q *qp) postHeldLocked() {
	n := 0
	now := time.Now()
	for n < len(q.held) && (q.flushNow || !q.held[n].due.After(now)) {
		n++
	}
	if n == 0 {
		return
	}
	wrs := make([]rdma.SendWR, n)
	for i := range wrs {
		wrs[i] = q.held[i].wr
	}
	err := q.in.PostSend(wrs)
	if err == nil {
		q.held = q.held[n:]
		return
	}
	k := 0
	var pe *rdma.PostError
	if errors.As(err, &pe) {
		k = pe.Index
	}
	q.held = q.held[k:]
	if errors.Is(err, rdma.ErrQueueFull) && !q.flushNow {
		q.mu.Unlock()
		time.Sleep(time.Millisecond)
		q.mu.Lock()
		return
	}
	q.held = q.held[1:]
	if !q.flushNow {
		q.flushNow = true
		q.in.SetError()
	}
}

// payloadLen is the bytes a WR's SGL names.
func payloadLen(w *rdma.SendWR) int {
	n := 0
	for _, g := range w.SGL {
		n += int(g.Length)
	}
	return n
}

var wcOps = [...]rdma.WCOpcode{
	rdma.OpSend: rdma.WCSend, rdma.OpSendImm: rdma.WCSend, rdma.OpSendInv: rdma.WCSend,
	rdma.OpWrite: rdma.WCWrite, rdma.OpWriteImm: rdma.WCWrite, rdma.OpRead: rdma.WCRead,
}

// build turns the caller's WR into the one the wrapped QP gets, under the
// next sequence number, and applies Drop, Truncate and Corrupt.
func (q *qp) build(w *rdma.SendWR, v verdict) (rdma.SendWR, entry) {
	iw := *w
	iw.ID = q.base + uint64(len(q.ring))
	e := entry{user: w.ID, signaled: w.Flags&rdma.Signaled != 0}
	if int(w.Op) < len(wcOps) {
		e.op = wcOps[w.Op]
	}
	switch {
	case v.drop:
		// A zero-length Write completes in order at the sender and does
		// nothing at the peer: no key is checked, no Recv consumed.
		iw = rdma.SendWR{ID: iw.ID, Op: rdma.OpWrite, Flags: w.Flags & (rdma.Signaled | rdma.Fence)}
	case w.Op == rdma.OpRead && v.flips > 0:
		q.stageRead(&iw, &e, w, v)
	case w.Op != rdma.OpRead && (v.flips > 0 || v.truncate >= 0):
		q.stagePayload(&iw, &e, w, v)
	}
	return iw, e
}

// stagePayload copies a Send's or Write's payload, truncated and
// corrupted, into memory of the wrapper and points the WR at it. A WR
// whose SGL the wrapper cannot read passes unchanged, so the wrapped
// provider reports it as it would.
func (q *qp) stagePayload(iw *rdma.SendWR, e *entry, w *rdma.SendWR, v verdict) {
	inline := w.Flags&rdma.Inline != 0
	data := gather(q.pd, w.SGL, inline)
	if data == nil && payloadLen(w) > 0 {
		return
	}
	if v.truncate >= 0 && v.truncate < len(data) {
		data = data[:v.truncate]
	}
	flip(data, v.seeds)
	if inline {
		e.inline = data
		iw.SGL = inlineSGL(data)
		return
	}
	if len(data) == 0 {
		iw.SGL = nil
		return
	}
	st, err := q.pd.stage(len(data))
	if err != nil {
		return
	}
	copy(st.Bytes(), data)
	e.stage = st
	iw.SGL = []rdma.SGE{rdma.SGEOf(st, 0, len(data))}
	iw.Flags |= rdma.Signaled
}

// stageRead points a Read at memory of the wrapper; its completion
// scatters the bytes, corrupted, into the caller's SGL.
func (q *qp) stageRead(iw *rdma.SendWR, e *entry, w *rdma.SendWR, v verdict) {
	n := payloadLen(w)
	dst := make([][]byte, 0, len(w.SGL))
	for _, g := range w.SGL {
		b, ok := q.pd.bytesOf(g, false)
		if !ok {
			return
		}
		dst = append(dst, b)
	}
	if n == 0 {
		return
	}
	st, err := q.pd.stage(n)
	if err != nil {
		return
	}
	e.stage = st
	iw.SGL = []rdma.SGE{rdma.SGEOf(st, 0, n)}
	iw.Flags |= rdma.Signaled
	seeds := v.seeds
	e.readBack = func() {
		data := st.Bytes()[:n]
		flip(data, seeds)
		for _, d := range dst {
			data = data[copy(d, data):]
		}
	}
}

// gather concatenates the memory an SGL names, or returns nil when an
// SGE is not readable.
func gather(p *pd, sgl []rdma.SGE, inline bool) []byte {
	var out []byte
	for _, g := range sgl {
		b, ok := p.bytesOf(g, inline)
		if !ok {
			return nil
		}
		out = append(out, b...)
	}
	if out == nil {
		out = []byte{}
	}
	return out
}

// inlineSGL names data, which Inline WRs may do without an lkey.
func inlineSGL(data []byte) []rdma.SGE {
	if len(data) == 0 {
		return nil
	}
	return []rdma.SGE{{Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(data)))), Length: uint32(len(data))}}
}

// flip inverts one byte per seed, at a position the seed picks.
func flip(data []byte, seeds []int64) {
	if len(data) == 0 {
		return
	}
	for _, s := range seeds {
		data[s%int64(len(data))] ^= 0xff
	}
}

// complete translates the completion of a send WR the wrapper posted. It
// returns false when the caller did not ask for it.
func (q *qp) complete(w *rdma.WC) bool {
	q.mu.Lock()
	if w.ID < q.base || w.ID-q.base >= uint64(len(q.ring)) {
		q.mu.Unlock()
		return true
	}
	idx := int(w.ID - q.base)
	e := q.ring[idx]
	earlier := q.ring[:idx] // completed silently before this one
	var stages []rdma.MR
	for _, x := range earlier {
		if x.stage != nil {
			stages = append(stages, x.stage)
		}
	}
	q.ring = q.ring[idx+1:]
	q.base = w.ID + 1
	empty := len(q.ring) == 0
	q.mu.Unlock()

	if e.readBack != nil && w.Status == rdma.Success {
		e.readBack()
	}
	if e.stage != nil {
		stages = append(stages, e.stage)
	}
	for _, st := range stages {
		st.Deregister()
	}
	if empty && q.closed.Load() {
		q.scq.remove(q)
	}
	w.ID, w.Opcode = e.user, e.op
	return w.Status != rdma.Success || e.signaled || q.cfg.SignalAll
}
