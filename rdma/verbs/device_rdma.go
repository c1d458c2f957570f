//go:build rdma && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include "cverbs.h"
*/
import "C"

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

// deviceCount is how many RDMA devices libibverbs finds.
func deviceCount() int { return int(C.cap_device_count()) }

// device is one opened RDMA device (an ibv_context of librdmacm) as long
// as a PD of ours uses it. It maps QP numbers to QPs for the CQs, and CQ,
// QP and SRQ pointers to objects for the device's asynchronous events.
type device struct {
	ctx  *C.struct_ibv_context
	name string
	ib   bool // InfiniBand transport (InfiniBand or RoCE); false for iWARP

	// qps maps QP numbers to QPs. It is replaced, never changed, under mu,
	// so CQ polling reads it without a lock.
	qps atomic.Pointer[map[uint32]*qp]

	mu     sync.Mutex // guards qps (writers), byPtr, cqs, srqs, refs, async
	byPtr  map[uintptr]*qp
	cqs    map[uintptr]*cq
	srqs   map[uintptr]*srq
	refs   int // open PDs
	async  *pollFD
	asyncQ chan struct{} // closed when the async loop has returned
}

var (
	devicesMu sync.Mutex // guards devices; taken before device.mu
	devices   = map[uintptr]*device{}
)

func ptrKey[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }

// acquireDevice returns the device of ctx with one more reference, and
// starts its async event loop with the first.
func acquireDevice(ctx *C.struct_ibv_context) (*device, error) {
	devicesMu.Lock()
	defer devicesMu.Unlock()
	d := devices[ptrKey(ctx)]
	if d == nil {
		d = &device{
			ctx:   ctx,
			name:  C.GoString(C.cap_device_name(ctx)),
			ib:    C.cap_transport_ib(ctx) != 0,
			byPtr: map[uintptr]*qp{},
			cqs:   map[uintptr]*cq{},
			srqs:  map[uintptr]*srq{},
		}
		empty := map[uint32]*qp{}
		d.qps.Store(&empty)
		pfd, err := newPollFD(int(C.cap_async_fd(ctx)), "ibv-async-"+d.name)
		if err != nil {
			return nil, err
		}
		d.async = pfd
		d.asyncQ = make(chan struct{})
		go d.asyncLoop()
		devices[ptrKey(ctx)] = d
	}
	d.mu.Lock()
	d.refs++
	d.mu.Unlock()
	return d, nil
}

// release drops a reference; the last stops the async loop.
func (d *device) release() {
	devicesMu.Lock()
	d.mu.Lock()
	d.refs--
	last := d.refs == 0
	d.mu.Unlock()
	if last {
		delete(devices, ptrKey(d.ctx))
	}
	devicesMu.Unlock()
	if last {
		d.async.Close()
		<-d.asyncQ
	}
}

func (d *device) lookupQP(num uint32) *qp { return (*d.qps.Load())[num] }

func (d *device) addQP(q *qp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.qps.Load()
	m := make(map[uint32]*qp, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[q.num] = q
	d.qps.Store(&m)
	d.byPtr[ptrKey(q.qp)] = q
}

func (d *device) removeQP(q *qp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.qps.Load()
	m := make(map[uint32]*qp, len(old))
	for k, v := range old {
		if v != q {
			m[k] = v
		}
	}
	d.qps.Store(&m)
	delete(d.byPtr, ptrKey(q.qp))
}

func (d *device) setCQ(c *cq, add bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if add {
		d.cqs[ptrKey(c.cq)] = c
	} else {
		delete(d.cqs, ptrKey(c.cq))
	}
}

func (d *device) setSRQ(s *srq, add bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if add {
		d.srqs[ptrKey(s.srq)] = s
	} else {
		delete(d.srqs, ptrKey(s.srq))
	}
}

// asyncLoop reads the device's asynchronous events until release closes
// the descriptor. QP errors move the QP to StateError with the status the
// event stands for; a CQ error marks the CQ overrun.
func (d *device) asyncLoop() {
	defer close(d.asyncQ)
	var (
		typ  C.int
		cqp  *C.struct_ibv_cq
		qpp  *C.struct_ibv_qp
		srqp *C.struct_ibv_srq
	)
	d.async.wait(nil, func() bool {
		for {
			r := C.cap_async_event(d.ctx, &typ, &cqp, &qpp, &srqp)
			if r != 0 {
				return false // EAGAIN: park until the next event
			}
			d.asyncEvent(uint32(typ), ptrKey(cqp), ptrKey(qpp), ptrKey(srqp))
		}
	})
}

func (d *device) asyncEvent(typ uint32, cqk, qpk, srqk uintptr) {
	d.mu.Lock()
	c, q, s := d.cqs[cqk], d.byPtr[qpk], d.srqs[srqk]
	var all []*qp
	if typ == C.IBV_EVENT_DEVICE_FATAL {
		for _, x := range d.byPtr {
			all = append(all, x)
		}
	}
	d.mu.Unlock()
	switch typ {
	case C.IBV_EVENT_CQ_ERR:
		if c != nil {
			c.overrun.Store(true)
		}
	case C.IBV_EVENT_QP_FATAL:
		if q != nil {
			q.fail(rdma.GeneralErr)
		}
	case C.IBV_EVENT_QP_REQ_ERR:
		if q != nil {
			q.fail(rdma.RemInvReqErr)
		}
	case C.IBV_EVENT_QP_ACCESS_ERR:
		// The peer used a bad rkey on us: the API's RemAccessErr on both sides.
		if q != nil {
			q.fail(rdma.RemAccessErr)
		}
	case C.IBV_EVENT_COMM_EST:
		// Data arrived before the connection manager saw the connection
		// established (InfiniBand passive side): tell it.
		if q != nil {
			q.notifyEstablished()
		}
	case C.IBV_EVENT_SRQ_ERR:
		if s != nil {
			s.failed.Store(true)
		}
	case C.IBV_EVENT_DEVICE_FATAL:
		for _, x := range all {
			x.fail(rdma.GeneralErr)
		}
	}
}
