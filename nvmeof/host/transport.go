package host

import (
	"context"

	"github.com/capsule-storage/capsule/nvmeof"
)

// queueTransport is what a transport binding does for one queue: the
// NVMe/RDMA binding (rdma_queue.go) and the NVMe/TCP binding
// (tcp_queue.go). The queue (queue.go) keeps the slots, the requests and
// their chunks, the free lists and the failure handling; the transport
// moves capsules and data and delivers responses to queue.responseSlot
// and queue.gotResponse on the queue goroutine (run).
type queueTransport interface {
	// init prepares the transport once the queue's slots exist (RDMA:
	// post the receives).
	init() error
	// connect opens the connection of the queue to host (cntlid names the
	// controller of an I/O queue) and returns the most commands the
	// controller takes at once, 0 for no limit beyond the queue's own.
	connect(ctx context.Context, host string, cntlid uint16) (int, error)
	// run is the queue goroutine: it receives until q.ctx ends, and calls
	// q.fail when the connection fails.
	run()
	// send sends the capsule of slot s: its first capLen bytes, or, when
	// s.icData is set, the SQE and then s.icData as in-capsule data. It sets
	// s.waitSend when the slot must not complete before the transport
	// reports the capsule sent, and s.live before the capsule can be
	// answered. Any goroutine; inside a batch (q.batchOn) it may hold
	// the capsule until flush.
	send(s *slot, capLen int)
	// flush sends what send held during a batch. Queue goroutine.
	flush()
	// readsInPlace reports whether read data may land in the caller's
	// buffer directly (s.xfer pointed there), with no copy from the slot.
	readsInPlace() bool
	// nullSGL returns SGL1 of a command without data, in the form Linux
	// hosts send on the transport.
	nullSGL() nvmeof.SGLDescriptor
	// dataSGL returns SGL1 for n bytes at off of the slot's data memory
	// (s.xfer is that memory).
	dataSGL(s *slot, off int, n int64) nvmeof.SGLDescriptor
	// directSGL returns SGL1 for a read or write chunk whose data lies in
	// the caller's registered memory (s.direct, s.dmr, s.doff; s.xfer is
	// s.direct): the data moves straight from or into it.
	directSGL(s *slot) nvmeof.SGLDescriptor
	// rawStart prepares the data of an admin or Fabrics command that is
	// not in the capsule; rawSGL returns its SGL1 when it is issued from
	// slot s; rawEnd copies controller-to-host data back into raw.data
	// when ok and releases what rawStart took.
	rawStart(raw *rawCommand) error
	rawSGL(s *slot, raw *rawCommand) nvmeof.SGLDescriptor
	rawEnd(raw *rawCommand, ok bool)
	// setError drops the connection now: run sees it fail. Any
	// goroutine, any number of times.
	setError()
	// release frees the connection and memory; run has returned or never
	// ran.
	release()
}
