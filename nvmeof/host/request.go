package host

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
)

// Op is what a Request does.
type Op uint8

// Request operations.
const (
	// OpRead reads len(Buf) bytes at Offset into Buf. Offset and length
	// need not be block-aligned: the blocks that cover them are read and
	// the bytes asked for copied out.
	OpRead Op = iota + 1
	// OpWrite writes Buf at Offset; both block-aligned.
	OpWrite
	// OpFlush commits the namespace's volatile write cache (a no-op
	// request, answered at once, when the controller has none).
	OpFlush
	// OpWriteZeroes zeroes Length bytes at Offset; both block-aligned.
	OpWriteZeroes
	// OpDiscard deallocates Length bytes at Offset (Dataset Management,
	// Attribute Deallocate); both block-aligned. What a later read
	// returns is the namespace's DLFEAT.
	OpDiscard

	// opRaw is an admin or Fabrics command of the host itself.
	opRaw
	// opPassthru is a vendor-specific I/O command (passthru.go).
	opPassthru
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFlush:
		return "flush"
	case OpWriteZeroes:
		return "write-zeroes"
	case OpDiscard:
		return "discard"
	case opRaw:
		return "admin"
	case opPassthru:
		return "passthru"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Request is one asynchronous I/O on a namespace, for Namespace.Submit.
// The caller owns it: fill in the fields, Submit it, and reuse it once it
// has completed, so that steady-state I/O allocates nothing. One goroutine
// can keep many Requests in flight.
//
// A Request is split into as many NVMe commands as the controller's MDTS
// and the host's buffers require; they run on one I/O queue. Data moves
// through the host's registered buffers: a write copies Buf into them when
// each command is issued, a read copies out of them into Buf when each
// command completes; unless Buf lies in memory of Controller.AllocBuffer,
// which the data moves straight from and into, with no copy. The host
// reads Buf (writes) or writes it (reads) only between Submit and
// completion.
type Request struct {
	// Op is the operation.
	Op Op
	// Offset is the byte offset in the namespace.
	Offset int64
	// Buf is the data of OpRead and OpWrite.
	Buf []byte
	// Length is the byte count of OpWriteZeroes and OpDiscard.
	Length int64
	// FUA sets Force Unit Access on reads, writes and write-zeroes: the
	// data is on non-volatile media before the command completes.
	FUA bool
	// FailFast makes the request fail with ErrControllerLost as soon as
	// the connection is lost, rather than wait for a reconnect and be
	// resubmitted; Submit fails it at once while the controller
	// reconnects. On a MultipathNamespace it means: do not wait for a
	// usable path (ErrNoPath at once when there is none).
	FailFast bool
	// Done, if set, is called once the request has completed, on one of
	// the host's queue goroutines. It must not block for long: the queue
	// handles no other completion meanwhile. It may Submit (this Request
	// too: it is no longer in flight when Done runs). Without Done, call
	// Wait.
	Done func(*Request)
	// Tag is the caller's; the host does not touch it.
	Tag uint64

	// Err is the outcome, set before Done is called: nil, a
	// *CommandError carrying the NVMe status, or an error wrapping
	// ErrControllerLost or ErrClosed.
	Err error
	// N is the number of bytes of Buf transferred: len(Buf) on success,
	// and on failure the bytes before the first command that failed.
	N int

	// The fields below are the host's. They are guarded by the mutex of
	// the queue (or of the controller, while parked) that holds the
	// request; see queue.mu.
	ns    *Namespace
	ctrl  *Controller
	queue int   // index of the I/O queue the request runs on
	start int64 // device byte range covered: [start, end), block-aligned
	end   int64
	// cursor is the next device byte (or, for single-command requests,
	// unit) to issue; retry holds ranges to issue again first.
	cursor      int64
	retry       []chunk
	outstanding int   // commands posted and not answered
	errAt       int64 // device byte where the first failure is, or end
	err         error
	retries     int  // controller losses survived while in flight
	inflight    bool // had a command posted when the last loss came
	next        *Request
	queued      bool // on a pending or parked list
	state       atomic.Uint32
	wake        chan struct{}
	raw         *rawCommand
	pt          *Passthru

	// Multipath (multipath.go): the namespace r was submitted to, the
	// caller's Done and FailFast while the multipath's own are set, the
	// sends in this round, when it began waiting for a path, the last
	// path's error, the next request waiting. mpBusy is set from the
	// multipath's Submit to its completion.
	mp         *MultipathNamespace
	mpDone     func(*Request)
	mpFailFast bool
	mpTries    int
	mpSince    time.Time
	mpErr      error
	mpNext     *Request
	mpBusy     atomic.Bool
}

// Request states.
const (
	reqIdle uint32 = iota
	reqBusy
)

// chunk is a range of a request to issue as one command: a device byte
// range, or one unit for single-command requests.
type chunk struct {
	off int64
	n   int64
}

// rawCommand is an admin or Fabrics command with its data.
type rawCommand struct {
	sqe nvmeof.Command
	// data is sent (host to controller) or filled (controller to host).
	data []byte
	dir  nvmeof.DataDirection
	// mr holds data behind a keyed SGL with invalidate, for commands whose
	// data is not in the capsule.
	mr        rdma.MR
	inCapsule bool
	cqe       nvmeof.Completion
}

// Wait blocks until r, submitted without Done, has completed, and returns
// r.Err. Call it once per Submit, and only when Submit returned nil.
func (r *Request) Wait() error {
	<-r.wake
	return r.Err
}

// singleCommand reports whether the request is one command with no range.
func (r *Request) singleCommand() bool { return r.Op == OpFlush || r.Op == opRaw || r.Op == opPassthru }

// hasMore reports whether chunks remain to be issued.
func (r *Request) hasMore() bool { return len(r.retry) > 0 || r.cursor < r.end }

// complete reports whether every chunk was issued and answered.
func (r *Request) complete() bool { return r.outstanding == 0 && !r.hasMore() }

// noteError records the failure of the chunk at device offset off.
func (r *Request) noteError(off int64, err error) {
	if r.singleCommand() {
		off = r.start
	}
	if r.err == nil || off < r.errAt {
		r.errAt = off
		r.err = err
	}
}

// failRest fails every chunk not yet issued or waiting to be reissued.
func (r *Request) failRest(err error) {
	if len(r.retry) > 0 {
		r.noteError(r.retry[0].off, err)
		for _, c := range r.retry[1:] {
			r.noteError(c.off, err)
		}
		r.retry = r.retry[:0]
	}
	if r.cursor < r.end {
		r.noteError(r.cursor, err)
		r.cursor = r.end
	}
}

// finish sets Err and N and hands the request back to its owner.
func (r *Request) finish() {
	r.Err = r.err
	switch {
	case r.Op != OpRead && r.Op != OpWrite:
	case r.err == nil:
		r.N = len(r.Buf)
	default:
		n := r.errAt - r.Offset
		if n < 0 {
			n = 0
		}
		r.N = int(n)
	}
	if c := r.ctrl; c != nil && r.raw == nil {
		c.requestDone()
	}
	r.state.Store(reqIdle)
	if r.Done != nil {
		r.Done(r)
		return
	}
	r.wake <- struct{}{}
}

// reset prepares r for a new submission.
func (r *Request) reset(start, end int64) {
	r.Err, r.N = nil, 0
	r.start, r.end, r.cursor = start, end, start
	r.retry = r.retry[:0]
	r.outstanding = 0
	r.errAt = end
	r.err = nil
	r.retries = 0
	r.inflight = false
	r.next = nil
	r.queued = false
	if r.Done == nil && r.wake == nil {
		r.wake = make(chan struct{}, 1)
	}
}
