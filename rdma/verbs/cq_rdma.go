//go:build rdma && cgo

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/capsule-storage/capsule/rdma"
)

// cq is an ibv_cq with its own completion channel, whose descriptor the
// Go poller watches for Wait.
type cq struct {
	dev *device
	ch  *C.struct_ibv_comp_channel
	cq  *C.struct_ibv_cq
	pfd *pollFD

	overrun atomic.Bool // set by the device's CQ_ERR event or a failed poll
	closed  atomic.Bool

	mu      sync.Mutex // guards scratch and the ibv_cq against Close; one Poll at a time
	scratch []C.struct_cap_wc
}

var _ rdma.CQ = (*cq)(nil)

func newCQ(dev *device, depth int) (*cq, error) {
	ch, err := C.ibv_create_comp_channel(dev.ctx)
	if ch == nil {
		return nil, errnoErr("ibv_create_comp_channel", err)
	}
	var e C.int
	c := C.cap_create_cq(dev.ctx, C.int(depth), ch, &e)
	if c == nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, callErr("ibv_create_cq", e)
	}
	pfd, perr := newPollFD(int(ch.fd), "ibv-comp-channel")
	if perr != nil {
		C.ibv_destroy_cq(c)
		C.ibv_destroy_comp_channel(ch)
		return nil, perr
	}
	q := &cq{dev: dev, ch: ch, cq: c, pfd: pfd}
	dev.setCQ(q, true)
	return q, nil
}

// Poll moves completions out of the device with one cgo call per batch
// and translates them: the user's WR ID, the opcode the WR had (the
// device reports none for errors), and Err of the QP for error statuses.
// Drain markers of closed QPs are consumed here and never returned.
func (c *cq) Poll(wc []rdma.WC) (int, error) {
	if len(wc) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return 0, rdma.ErrClosed
	}
	if c.overrun.Load() {
		return 0, rdma.ErrCQOverrun
	}
	if cap(c.scratch) < len(wc) {
		c.scratch = make([]C.struct_cap_wc, len(wc))
	}
	s := c.scratch[:len(wc)]
	n := int(C.cap_poll(c.cq, C.int(len(s)), &s[0]))
	if n < 0 {
		c.overrun.Store(true)
		return 0, rdma.ErrCQOverrun
	}
	k := 0
	for i := 0; i < n; i++ {
		if c.dev.translate(&s[i], &wc[k]) {
			k++
		}
	}
	return k, nil
}

// Wait arms the CQ and parks on its completion channel between polls.
func (c *cq) Wait(ctx context.Context, wc []rdma.WC) (int, error) {
	for {
		if n, err := c.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if r := c.arm(); r != 0 {
			return 0, callErr("ibv_req_notify_cq", r)
		}
		// A completion that arrived before the arm raised no event.
		if n, err := c.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		err := c.pfd.wait(ctx, c.takeEvent)
		if err != nil {
			return 0, err
		}
	}
}

// takeEvent consumes one completion channel event; true also once the CQ
// is closed, so that Wait's next Poll reports it. It holds the mutex so
// that Close cannot destroy the channel under it.
func (c *cq) takeEvent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return true
	}
	return C.cap_cq_event(c.ch) == 0
}

func (c *cq) arm() C.int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return 0
	}
	return C.cap_req_notify(c.cq)
}

// Close frees QPs that use the CQ and were closed but not yet drained,
// then the CQ and its channel. It fails with EBUSY while open QPs use it.
func (c *cq) Close() error {
	for _, q := range c.dev.lingeringQPs(c) {
		q.destroy()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil
	}
	if r := C.ibv_destroy_cq(c.cq); r != 0 {
		return callErr("ibv_destroy_cq", r)
	}
	c.closed.Store(true)
	c.dev.setCQ(c, false)
	c.pfd.Close()
	if r := C.ibv_destroy_comp_channel(c.ch); r != 0 {
		return callErr("ibv_destroy_comp_channel", r)
	}
	return nil
}

// lingeringQPs lists closed QPs of the device that still use c.
func (d *device) lingeringQPs(c *cq) []*qp {
	var out []*qp
	for _, q := range *d.qps.Load() {
		if q.closed.Load() && (q.scq == c || q.rcq == c) {
			out = append(out, q)
		}
	}
	return out
}

// translate turns a device completion into the API's, through the QP's
// WR rings. It reports false when the completion is consumed here: a
// drain marker, or a completion of a QP already destroyed.
func (d *device) translate(w *C.struct_cap_wc, out *rdma.WC) bool {
	q := d.lookupQP(uint32(w.qp_num))
	if q == nil {
		return false
	}
	st := wcStatus(uint32(w.status))
	id := uint64(w.wr_id)
	var (
		user  uint64
		op    rdma.WCOpcode
		drain bool
		ok    bool
	)
	switch {
	case id&wrSRQ != 0:
		if q.srq != nil {
			user, ok = q.srq.retire(id)
		}
		op = rdma.WCRecv
	case id&wrRecv != 0:
		user, op, drain, ok = q.rq.retire(id &^ wrRecv)
	default:
		user, op, drain, ok = q.sq.retire(id)
	}
	if !ok {
		return false
	}
	if drain {
		q.drained()
		return false
	}
	if st == rdma.Success {
		if o, known := wcOpcode(uint32(w.opcode)); known {
			op = o
		}
	} else {
		q.fail(st)
	}
	*out = rdma.WC{
		ID:      user,
		Status:  st,
		Opcode:  op,
		Flags:   wcFlags(uint32(w.wc_flags)),
		QPNum:   q.num,
		ByteLen: uint32(w.byte_len),
		Imm:     uint32(w.imm),
		InvRKey: uint32(w.inv_rkey),
	}
	return true
}
