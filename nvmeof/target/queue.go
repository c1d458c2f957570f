package target

import (
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// queueTransport is what a transport binding does for the core on one
// queue. The RDMA binding (rdma_queue.go) implements it; an NVMe/TCP
// binding implements the same three methods.
type queueTransport interface {
	// respond delivers r's response capsule, preceded by its
	// controller-to-host data when r.sendsData(). It calls queue.finish
	// first. Safe from any goroutine.
	respond(r *request)
	// disconnect ends the queue's connection now; the binding tears the
	// queue down on its own goroutine and calls queue.closed. Safe from
	// any goroutine, any number of times.
	disconnect()
	// drain stops the queue taking new commands (they are answered with
	// Command Aborted due to SQ Deletion), lets the commands in flight
	// finish and deliver their responses, and then disconnects. Safe from
	// any goroutine.
	drain()
	// abandon frees r's slot without a response: the host reused the CID
	// of a held AER (controller.takeHeldAER). On the queue's goroutine.
	abandon(r *request)
}

// action is what a binding does with a command after queue.begin.
type action uint8

const (
	// actRespond: r.rsp.Status is final; call respond.
	actRespond action = iota
	// actFetch: move r.dataLen bytes of host data into r.data, then call
	// queue.execute.
	actFetch
	// actExecute: call queue.execute (on a worker if r.blocking()).
	actExecute
)

// queue is the transport-neutral state of one NVMe queue (a submission
// and completion queue pair): which controller it belongs to, its size,
// the CIDs in use and the commands outstanding.
//
// Fields set by Connect (ctrl, entries, sqFlowOff, connected) are written
// on the queue's goroutine while it runs the Connect, before any other
// command of the queue is dispatched, and only read afterwards; workers
// and the controller see them through the handoff of a request, which
// orders the accesses.
type queue struct {
	t  *Target
	tr queueTransport

	// qid is the queue ID the transport's connection asked for; Connect
	// must name the same.
	qid uint16
	// maxEntries is the most entries the transport can hold for this
	// queue (RDMA: HSQSIZE+1 of the connection request).
	maxEntries int
	// qidFromConnect: the transport's connection does not name the queue
	// (NVMe/TCP), so the Connect command sets qid.
	qidFromConnect bool
	// listener is the URL of the listener the connection came through.
	listener string

	// draining is set on the queue's goroutine when the binding starts a
	// drain: new commands are answered with Command Aborted due to SQ
	// Deletion.
	draining bool

	ctrl      *controller
	entries   int  // SQSIZE+1 of the Connect
	sqFlowOff bool // the host disabled SQ flow control: SQHD is FFFFh
	connected bool
	// disconnected: a Disconnect deleted the queue; the connection waits
	// for the host to close it, and commands are out of sequence.
	disconnected bool

	sqhd        atomic.Uint32 // SQ head pointer reported in responses
	outstanding atomic.Int32  // commands received and not yet answered
	cids        [65536 / 64]atomic.Uint64
}

func (q *queue) init(t *Target, tr queueTransport, qid uint16, maxEntries int) {
	q.t, q.tr, q.qid, q.maxEntries = t, tr, qid, maxEntries
}

// limit is how many commands may be outstanding: SQSIZE, the 0's based
// size. A submission queue of SQSIZE+1 entries is full with SQSIZE
// commands in it, and SQHD advances only as commands complete, so a host
// that follows SQ flow control never has more (Linux hosts size their tag
// sets to SQSIZE for this reason).
func (q *queue) limit() int32 {
	if q.connected {
		return int32(q.entries - 1)
	}
	return int32(q.maxEntries - 1)
}

// begin checks a received command (r.cmd, and the SGL fields the binding
// filled in) and decides what happens next. It runs on the queue's
// goroutine. On actRespond r.rsp.Status holds the outcome.
func (q *queue) begin(r *request) action {
	cid := r.cmd.CID
	w, bit := &q.cids[cid>>6], uint64(1)<<(cid&63)
	if w.Or(bit)&bit != 0 && !q.abandonHeldAER(cid) {
		q.outstanding.Add(1)
		r.rsp.Status = nvmeof.StatusCommandIDConflict.WithDNR()
		r.errLoc = nvmeof.CommandOffsetCID
		return actRespond
	}
	r.cidHeld = true
	if q.draining {
		q.outstanding.Add(1)
		r.rsp.Status = nvmeof.StatusAbortedSQDeletion
		return actRespond
	}
	if q.outstanding.Add(1) > q.limit() {
		r.rsp.Status = nvmeof.StatusCommandSequenceError.WithDNR()
		return actRespond
	}
	if st := q.dispatch(r); !st.Success() {
		r.rsp.Status = st
		return actRespond
	}
	if r.fetchesData() {
		return actFetch
	}
	return actExecute
}

// abandonHeldAER frees a held Asynchronous Event Request with command ID
// cid, on the admin queue, so that a new command may take the CID. The
// AER's place in the queue is given back (SQHD moves past it, as if it
// had completed) and the CID stays in use, now by the new command.
func (q *queue) abandonHeldAER(cid uint16) bool {
	if q.qid != 0 || q.ctrl == nil {
		return false
	}
	old := q.ctrl.takeHeldAER(cid)
	if old == nil {
		return false
	}
	q.ctrl.log.Debug("a held Asynchronous Event Request abandoned: its CID was reused", "cid", cid)
	old.cidHeld = false
	if !q.sqFlowOff {
		q.advanceSQHD()
	}
	q.outstanding.Add(-1)
	q.tr.abandon(old)
	return true
}

// dispatch finds the handler, runs its checks and prepare, and checks the
// data pointer against what the command moves.
func (q *queue) dispatch(r *request) nvmeof.Status {
	c := &r.cmd
	ctrl := q.ctrl
	if ctrl != nil && !ctrl.traffic.Load() {
		ctrl.traffic.Store(true)
	}
	var h *handler
	switch {
	case q.disconnected:
		return r.fail(nvmeof.StatusCommandSequenceError.WithDNR(), nvmeof.CommandOffsetOpcode)
	case c.Opcode == nvmeof.OpFabrics:
		h = fabricsHandler(q, c.FabricsType())
	case !q.connected:
		// Only Connect is accepted on a queue that is not connected.
	case q.qid != 0:
		h = ioHandlers[c.Opcode]
	case ctrl.sub.discovery:
		h = discoveryHandlers[c.Opcode]
	default:
		h = adminHandlers[c.Opcode]
	}
	if h == nil {
		off := nvmeof.CommandOffsetOpcode
		if c.Opcode == nvmeof.OpFabrics {
			off = nvmeof.CommandOffsetFCTYPE
		}
		return r.fail(nvmeof.StatusInvalidOpcode.WithDNR(), off)
	}
	r.h = h
	if h.counted {
		r.start = time.Now()
	}
	if h.ready && !ctrl.ready.Load() {
		return r.fail(nvmeof.StatusCommandSequenceError.WithDNR(), nvmeof.CommandOffsetOpcode)
	}
	if st := h.prepare(r); !st.Success() {
		return st
	}
	if r.dataLen == 0 {
		// A command with no data to move completes whatever SGL1 holds:
		// SPDK's nvmf_tgt ignores SGL1 of a command without data, Linux
		// nvmet one of length 0 (a Write Zeroes with a Data Block of
		// length 0 is what one Linux-style host sends).
		return nvmeof.StatusSuccess
	}
	if !r.sglStatus.Success() {
		return r.fail(r.sglStatus.WithDNR(), nvmeof.CommandOffsetDPTR)
	}
	if r.sglInCapsule && r.dir != nvmeof.HostToController && r.sglLen > 0 {
		// In-capsule data only carries data to the controller.
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetDPTR)
	}
	if int64(r.sglLen) != int64(r.dataLen) && !(h.longerSGL && int64(r.sglLen) > int64(r.dataLen)) {
		return r.fail(nvmeof.StatusDataSGLLengthInvalid.WithDNR(), nvmeof.CommandOffsetDPTR)
	}
	return nvmeof.StatusSuccess
}

// execute runs the command. It returns false when the command is held
// (it will be answered later); otherwise r.rsp.Status is final and the
// binding calls respond. It runs on the queue's goroutine or, for
// r.blocking() requests, on a worker.
func (q *queue) execute(r *request) bool {
	st := r.h.execute(r)
	if st == statusHeld {
		return false
	}
	r.rsp.Status = st
	return true
}

// finish completes the response entry of r and releases what r held in
// the queue: its CID and its place among the outstanding commands. The
// binding calls it just before it sends the response. Any goroutine.
func (q *queue) finish(r *request) {
	r.rsp.CID = r.cmd.CID
	r.rsp.SQID = 0 // reserved in a Fabrics completion
	r.rsp.Phase = false
	if q.sqFlowOff {
		r.rsp.SQHD = nvmeof.SQHDFlowControlDisabled
	} else {
		r.rsp.SQHD = q.advanceSQHD()
	}
	if r.cidHeld {
		r.cidHeld = false
		cid := r.cmd.CID
		q.cids[cid>>6].And(^(uint64(1) << (cid & 63)))
	}
	r.countIO()
	q.outstanding.Add(-1)
	if !r.rsp.Status.Success() && q.ctrl != nil {
		q.ctrl.logError(q, r)
	}
}

// advanceSQHD moves the SQ head pointer past one entry and returns it.
func (q *queue) advanceSQHD() uint16 {
	n := uint32(q.entries)
	if n == 0 {
		n = uint32(max(q.maxEntries, 1))
	}
	for {
		old := q.sqhd.Load()
		next := (old + 1) % n
		if q.sqhd.CompareAndSwap(old, next) {
			return uint16(next)
		}
	}
}

// transportType is the NVMe transport type of q's binding, for the
// error log.
func (q *queue) transportType() nvmeof.TransportType {
	if _, tcp := q.tr.(*tcpQueue); tcp {
		return nvmeof.TransportTCP
	}
	return nvmeof.TransportRDMA
}

// maxTransfer is the largest data transfer of one command on q's
// binding.
func (q *queue) maxTransfer() int { return q.t.cfg.transferLimit(q.transportType()) }

// closed tells the core that the binding is tearing the queue down: the
// controller forgets it, and losing the admin queue ends the controller.
// The binding calls it once, on the queue's goroutine, before it stops the
// queue's workers and frees its buffers.
func (q *queue) closed() {
	if c := q.ctrl; c != nil {
		if q.qid == 0 {
			c.destroy("admin queue disconnected")
		} else {
			c.removeIOQueue(q)
		}
	}
}

// gone tells the target the queue holds nothing any more: its workers have
// stopped and its buffers are freed (or back in the listener's cache). The
// binding calls it once, last, after closed.
func (q *queue) gone() { q.t.forgetQueue(q) }
