package target

import "github.com/capsule-storage/capsule/nvmeof"

// handler is one command's implementation. The tables below map opcodes
// to handlers, one table per command set and controller type; a command
// with no entry is refused with Invalid Command Opcode.
type handler struct {
	name string
	// prepare checks the command's fields against the controller and the
	// namespace and sets r.dir and r.dataLen. It runs on the queue's
	// goroutine and does no I/O. A nil prepare means no data and nothing
	// to check.
	prepare func(r *request) nvmeof.Status
	// execute does the work and returns the status to complete with, or
	// statusHeld. It fills r.data for controller-to-host data and may set
	// r.rsp.DW0 and DW1.
	execute func(r *request) nvmeof.Status
	// ready: refuse with Command Sequence Error unless the controller is
	// enabled and ready (CC.EN=1, CSTS.RDY=1, no shutdown).
	ready bool
	// device: execute does I/O on a namespace's device and may block.
	device bool
	// longerSGL: SGL1 may describe more bytes than the command moves
	// (Dataset Management), not just exactly as many.
	longerSGL bool
	// counted: the namespace counts the command under kind (stats.go).
	counted bool
	kind    IOKind
}

// Handler tables, indexed by opcode. They are filled in init (the handler
// functions refer back to the queue, so the tables cannot be initialized
// statically without an initialization cycle).
var (
	adminHandlers     [256]*handler // admin queue of an I/O controller
	discoveryHandlers [256]*handler // admin queue of a discovery controller
	ioHandlers        [256]*handler // I/O queues
)

// Fabrics command handlers, by FCTYPE.
var (
	connectHandler     = &handler{name: "Connect", prepare: prepareConnect, execute: executeConnect}
	propertyGetHandler = &handler{name: "Property Get", prepare: preparePropertyGet, execute: executePropertyGet}
	propertySetHandler = &handler{name: "Property Set", prepare: preparePropertySet, execute: executePropertySet}
	disconnectHandler  = &handler{name: "Disconnect", prepare: prepareDisconnect, execute: executeDisconnect}
)

func init() {
	identify := &handler{name: "Identify", prepare: prepareIdentify, execute: executeIdentify, ready: true}
	getLogPage := &handler{name: "Get Log Page", prepare: prepareGetLogPage, execute: executeGetLogPage, ready: true}
	setFeatures := &handler{name: "Set Features", prepare: prepareFeatures, execute: executeSetFeatures, ready: true}
	getFeatures := &handler{name: "Get Features", prepare: prepareFeatures, execute: executeGetFeatures, ready: true}
	aer := &handler{name: "Asynchronous Event Request", prepare: prepareNoData, execute: executeAsyncEventRequest, ready: true}
	keepAlive := &handler{name: "Keep Alive", prepare: prepareNoData, execute: executeKeepAlive, ready: true}
	abort := &handler{name: "Abort", prepare: prepareNoData, execute: executeAbort, ready: true}

	for _, tab := range []*[256]*handler{&adminHandlers, &discoveryHandlers} {
		tab[nvmeof.AdminIdentify] = identify
		tab[nvmeof.AdminGetLogPage] = getLogPage
		tab[nvmeof.AdminSetFeatures] = setFeatures
		tab[nvmeof.AdminGetFeatures] = getFeatures
		tab[nvmeof.AdminAsyncEventRequest] = aer
		tab[nvmeof.AdminKeepAlive] = keepAlive
		tab[nvmeof.AdminAbort] = abort
	}

	ioHandlers[nvmeof.IORead] = &handler{name: "Read", prepare: prepareRead, execute: executeRead, ready: true, device: true,
		counted: true, kind: IORead}
	ioHandlers[nvmeof.IOWrite] = &handler{name: "Write", prepare: prepareWrite, execute: executeWrite, ready: true, device: true,
		counted: true, kind: IOWrite}
	ioHandlers[nvmeof.IOFlush] = &handler{name: "Flush", prepare: prepareFlush, execute: executeFlush, ready: true, device: true,
		counted: true, kind: IOFlush}
	ioHandlers[nvmeof.IOWriteZeroes] = &handler{name: "Write Zeroes", prepare: prepareWriteZeroes, execute: executeWriteZeroes, ready: true, device: true,
		counted: true, kind: IOWriteZeroes}
	ioHandlers[nvmeof.IODatasetManagement] = &handler{name: "Dataset Management", prepare: prepareDatasetManagement,
		execute: executeDatasetManagement, ready: true, device: true, longerSGL: true, counted: true, kind: IODatasetMgmt}
	reservation := &handler{name: "Reservation", prepare: prepareReservation, execute: executeReservation, ready: true}
	for _, op := range []nvmeof.Opcode{nvmeof.IOReservationRegister, nvmeof.IOReservationReport,
		nvmeof.IOReservationAcquire, nvmeof.IOReservationRelease} {
		ioHandlers[op] = reservation
	}
	vendor := &handler{name: "Vendor Specific", prepare: prepareVendor, execute: executeVendor, ready: true, device: true,
		counted: true, kind: IOVendor}
	for op := 0x80; op <= 0xff; op++ {
		ioHandlers[op] = vendor
	}
}

// fabricsHandler returns the handler of a Fabrics command on q, or nil.
// An unconnected queue takes only Connect; Property Get and Set are admin
// queue commands; Disconnect is answered on either (with Invalid Queue
// Type on the admin queue).
func fabricsHandler(q *queue, t nvmeof.FabricsType) *handler {
	switch t {
	case nvmeof.FabricsConnect:
		return connectHandler
	case nvmeof.FabricsPropertyGet, nvmeof.FabricsPropertySet:
		if !q.connected || q.qid != 0 {
			return nil
		}
		if t == nvmeof.FabricsPropertyGet {
			return propertyGetHandler
		}
		return propertySetHandler
	case nvmeof.FabricsDisconnect:
		if !q.connected {
			return nil
		}
		return disconnectHandler
	}
	return nil
}

// prepareNoData is the prepare of commands that move no data.
func prepareNoData(r *request) nvmeof.Status { return nvmeof.StatusSuccess }
