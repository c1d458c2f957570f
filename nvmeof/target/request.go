package target

import (
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// statusHeld is what a handler returns to keep its command and complete
// it later (an Asynchronous Event Request). It lies outside the 15 bits of
// a wire status, so it never reaches a host.
const statusHeld nvmeof.Status = 0x8000

// noErrorLocation marks a request whose refused parameter is not known.
const noErrorLocation = -1

// request is one command in a command slot. A transport binding owns the
// slot and the buffers; the core fills in the rest. A request belongs to
// one goroutine at a time: the queue's, a worker's, or (held) the
// controller's, under its lock.
type request struct {
	cmd nvmeof.Command
	rsp nvmeof.Completion

	q  *queue
	h  *handler
	ns *Namespace

	// What the command moves, decided by the handler's prepare: the
	// direction and the number of bytes.
	dir     nvmeof.DataDirection
	dataLen int
	// data is the buffer the bytes go through, set by the binding: the
	// host's data once fetched (host to controller), or where execute
	// puts the data to send (controller to host).
	data []byte

	// The data pointer, decoded by the binding before begin.
	sglStatus    nvmeof.Status // status to refuse SGL1 with, success if usable
	sglLen       uint32        // bytes SGL1 describes
	sglInCapsule bool          // SGL1 points into the capsule
	// capsuleData is every byte of the capsule after the SQE, set by the
	// binding and kept intact until the response is sent: the payload of
	// bidirectional vendor-specific commands (vendor.go).
	capsuleData []byte

	// errLoc is the byte offset in the SQE of the parameter a refusal is
	// about (the Parameter Error Location of the error log), or
	// noErrorLocation.
	errLoc int
	// cidHeld: the request holds its CID in the queue's table.
	cidHeld bool
	// closeQueue: end the queue once the response is delivered (Disconnect).
	closeQueue bool

	// start is when an I/O command a namespace counts (handler.counted)
	// was dispatched; zero for other commands.
	start time.Time

	// index is the binding's slot number.
	index int

	// vc is what executeVendor hands a VendorHandler: kept here, so that
	// passing it to the interface costs no allocation per command.
	vc VendorCommand
}

// reset clears what a previous command left, keeping the binding's index.
func (r *request) reset() {
	idx, q := r.index, r.q
	*r = request{index: idx, q: q, errLoc: noErrorLocation}
}

// fail sets the error location and returns st, for handlers.
func (r *request) fail(st nvmeof.Status, errLoc int) nvmeof.Status {
	r.errLoc = errLoc
	return st
}

// blocking reports whether executing r may block on a device, so a
// binding runs it on a worker rather than the queue's goroutine.
func (r *request) blocking() bool {
	if r.vendorInline() {
		return false
	}
	return r.h != nil && r.h.device && !r.nonBlockingDevice()
}

func (r *request) nonBlockingDevice() bool {
	if r.ns != nil {
		return r.ns.nonBlocking
	}
	// Flush of every namespace: blocking unless all of them are memory.
	if r.q.ctrl == nil {
		return true
	}
	for _, ns := range r.q.ctrl.sub.ns.Load().byID {
		if !ns.nonBlocking {
			return false
		}
	}
	return true
}

// sendsData reports whether the response carries controller-to-host data.
func (r *request) sendsData() bool {
	return r.dir == nvmeof.ControllerToHost && r.dataLen > 0 && r.rsp.Status.Success()
}

// fetchesData reports whether the command needs host-to-controller data
// before it executes.
func (r *request) fetchesData() bool {
	return r.dir == nvmeof.HostToController && r.dataLen > 0
}
