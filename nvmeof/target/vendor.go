package target

import (
	"io"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// Vendor-specific I/O commands (opcodes 80h to FFh) on a namespace with a
// VendorHandler: the file service of package fs is one.
//
// The data direction is the opcode's bits 1:0, as NVMe defines them, and
// the core moves the data exactly as it does for NVM commands:
//
//	00b  no data; SGL1 describes nothing
//	01b  host to controller: SGL1 describes the data (in the capsule, or a
//	     keyed buffer the binding reads), handed to the handler as Data
//	10b  controller to host: SGL1 describes the host's buffer; the handler
//	     fills Data (as many bytes as SGL1 describes at most) and says how
//	     many in N; only those move
//	11b  bidirectional: the in-capsule data (every capsule byte after the
//	     SQE, not described by SGL1) is the Payload, and SGL1 describes the
//	     host's buffer for the controller-to-host part, as for 10b
//
// A binding hands the capsule bytes after the SQE to the core in
// request.capsuleData and keeps them intact until the response is sent.

// VendorHandler serves the vendor-specific I/O commands of a namespace.
// Its methods are called concurrently, from queue goroutines and
// workers. ExecuteVendor runs on a worker unless the handler is also a
// VendorInliner that says the command may run inline.
type VendorHandler interface {
	// PrepareVendor checks a command before any data moves: on the queue
	// goroutine, doing no I/O. dataLen is what SGL1 describes and
	// payloadLen the in-capsule payload of a bidirectional command. It
	// returns success, or the status to refuse the command with (with
	// DNR; an opcode it does not serve gets Invalid Command Opcode).
	PrepareVendor(cmd *nvmeof.Command, dataLen, payloadLen int) nvmeof.Status
	// ExecuteVendor runs the command on a worker (it may block), or on
	// the queue goroutine when VendorInliner allows it. It returns
	// the status to complete with and sets c.DW0, c.DW1 and, for data to
	// the host, c.N.
	ExecuteVendor(c *VendorCommand) nvmeof.Status
	// Sync makes what completed commands did durable (Flush).
	Sync() error
}

// VendorInliner is an optional interface of a VendorHandler. InlineVendor
// reports whether ExecuteVendor of a prepared command is short enough to
// run on the queue's goroutine rather than on a worker: it does no more
// than read memory or the page cache and never waits for another command
// of the same queue. It is called on the queue goroutine, after
// PrepareVendor accepted the command; dataLen is what SGL1 describes.
// Running a short command inline saves the hand-off to a worker and back,
// which for a 4 KiB read costs more than the read.
type VendorInliner interface {
	InlineVendor(cmd *nvmeof.Command, dataLen int) bool
}

// VendorCommand is one vendor-specific command as a VendorHandler sees it.
// It and its slices belong to the core: the handler must not keep them
// after ExecuteVendor returns.
type VendorCommand struct {
	// Cmd is the command.
	Cmd *nvmeof.Command
	// Payload is the in-capsule data of a bidirectional command.
	Payload []byte
	// Data is the host's data (01b) or the buffer for data to the host
	// (10b, 11b), as long as SGL1 describes.
	Data []byte
	// N is set by the handler: the bytes of Data to send to the host.
	N int
	// DW0 and DW1 are the completion's command-specific dwords.
	DW0, DW1 uint32
}

// prepareVendor routes a vendor-specific opcode to the namespace's
// handler: only namespaces with one serve them.
func prepareVendor(r *request) nvmeof.Status {
	ns, st := namespaceOf(r)
	if !st.Success() {
		return st
	}
	if ns.vendor == nil {
		return r.fail(nvmeof.StatusInvalidOpcode.WithDNR(), nvmeof.CommandOffsetOpcode)
	}
	dir := r.cmd.Opcode.Direction()
	n := int(r.sglLen)
	payload := 0
	switch dir {
	case nvmeof.NoData:
		n = 0
	case nvmeof.Bidirectional:
		payload = len(r.capsuleData)
		dir = nvmeof.ControllerToHost
	}
	if n > r.q.maxTransfer() {
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetDPTR)
	}
	if st := ns.vendor.PrepareVendor(&r.cmd, n, payload); !st.Success() {
		if st.Code() == nvmeof.StatusInvalidOpcode {
			r.errLoc = nvmeof.CommandOffsetOpcode
		}
		return st.WithDNR()
	}
	r.dir, r.dataLen = dir, n
	return nvmeof.StatusSuccess
}

// vendorInline reports whether r is a vendor-specific command that its
// namespace's handler lets the queue goroutine run (see VendorInliner).
func (r *request) vendorInline() bool {
	if r.cmd.Opcode < 0x80 || r.h != ioHandlers[r.cmd.Opcode] || r.ns == nil || r.ns.vendor == nil {
		return false
	}
	in, ok := r.ns.vendor.(VendorInliner)
	return ok && in.InlineVendor(&r.cmd, r.dataLen)
}

// executeVendor runs a vendor-specific command on the namespace's handler.
// Data to the host is cut to the bytes the handler filled.
func executeVendor(r *request) nvmeof.Status {
	vc := &r.vc // in the request: a local would escape to the heap through the interface
	*vc = VendorCommand{Cmd: &r.cmd}
	if r.cmd.Opcode.Direction() == nvmeof.Bidirectional {
		vc.Payload = r.capsuleData
	}
	if r.dataLen > 0 {
		vc.Data = r.data[:r.dataLen]
	}
	st := r.ns.vendor.ExecuteVendor(vc)
	r.rsp.DW0, r.rsp.DW1 = vc.DW0, vc.DW1
	if r.dir == nvmeof.ControllerToHost {
		r.dataLen = min(max(vc.N, 0), r.dataLen)
	}
	*vc = VendorCommand{} // drop the references to the buffers
	return st
}

// vendorDevice is the device of a namespace that has a VendorHandler and
// no blocks: reads and writes are out of range, Sync is the handler's and
// Close closes the handler if it is an io.Closer.
type vendorDevice struct{ h VendorHandler }

func (d vendorDevice) ReadAt(p []byte, off int64) (int, error)  { return 0, blockdev.ErrOutOfRange }
func (d vendorDevice) WriteAt(p []byte, off int64) (int, error) { return 0, blockdev.ErrOutOfRange }
func (d vendorDevice) Sync() error                              { return d.h.Sync() }
func (d vendorDevice) Size() int64                              { return 0 }

func (d vendorDevice) Close() error {
	if c, ok := d.h.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
