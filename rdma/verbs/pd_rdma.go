//go:build rdma && cgo

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

// provider is the hardware provider.
type provider struct{}

func (provider) Scheme() string { return Scheme }

func (provider) OpenPD(host string) (rdma.PD, error) { return openPD(host) }

func (provider) Listen(ctx context.Context, host string) (rdma.Listener, error) {
	return listen(ctx, host)
}

// resolveTimeout bounds address resolution in OpenPD.
const resolveTimeout = 2 * time.Second

type pd struct {
	d     *cmDispatcher
	dev   *device
	id    *C.struct_rdma_cm_id // bound to local; holds the device open
	pd    *C.struct_ibv_pd
	local netip.Addr // the source address QPs bind to

	mu     sync.Mutex // guards mrs, qps, closed
	mrs    map[*mr]struct{}
	qps    map[*qp]struct{}
	closed bool
}

var _ rdma.PD = (*pd)(nil)

// openPD finds the device for host: the one that owns it when host is a
// local address (rdma_bind_addr), else the one the routing table reaches
// it through (rdma_resolve_addr).
func openPD(host string) (rdma.PD, error) {
	d, err := dispatcher()
	if err != nil {
		return nil, err
	}
	a, port, err := resolveHost(host, true)
	if err != nil {
		return nil, err
	}
	id, err := d.newID()
	if err != nil {
		return nil, err
	}
	fail := func(err error) (rdma.PD, error) {
		d.unregister(id)
		C.cap_destroy_id(id)
		return nil, err
	}
	sa := newSockaddr(a, 0)
	defer sa.free()
	if r := C.cap_bind(id, sa.ss); r != 0 || C.cap_id_verbs(id) == nil {
		// Not an address of ours: start over with an id that resolves it.
		C.cap_destroy_id(id)
		if id, err = d.newID(); err != nil {
			return nil, err
		}
		sink := make(eventSink, 4)
		d.register(id, sink)
		dst := newSockaddr(a, port)
		defer dst.free()
		if r := C.cap_resolve_addr(id, dst.ss, C.int(resolveTimeout/time.Millisecond)); r != 0 {
			return fail(fmt.Errorf("%w: %s: %w", ErrNoRoute, host, callErr("rdma_resolve_addr", r)))
		}
		ev := <-sink // the connection manager always answers within the timeout
		if ev.typ != C.RDMA_CM_EVENT_ADDR_RESOLVED {
			return fail(fmt.Errorf("%w: %s: %w", ErrNoRoute, host, cmStatusErr(ev)))
		}
		d.unregister(id)
	}
	ctx := C.cap_id_verbs(id)
	if ctx == nil {
		return fail(fmt.Errorf("%w: %s", ErrNoRoute, host))
	}
	local, ok := idAddr(id, false)
	if !ok {
		return fail(fmt.Errorf("%w: %s: no local address", ErrNoRoute, host))
	}
	dev, err := acquireDevice(ctx)
	if err != nil {
		return fail(err)
	}
	p, cerr := C.ibv_alloc_pd(ctx)
	if p == nil {
		dev.release()
		return fail(errnoErr("ibv_alloc_pd", cerr))
	}
	return &pd{
		d: d, dev: dev, id: id, pd: p, local: local.Addr(),
		mrs: map[*mr]struct{}{}, qps: map[*qp]struct{}{},
	}, nil
}

func (p *pd) Scheme() string { return Scheme }

func (p *pd) check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return rdma.ErrClosed
	}
	return nil
}

// Register pins buf with ibv_reg_mr. buf's address goes to C as an
// integer: the kernel keeps the pages pinned, and the Go heap does not
// move objects, so the address stays valid while the region lives. The
// PD keeps buf reachable until Deregister.
func (p *pd) Register(buf []byte, access rdma.Access) (rdma.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", rdma.ErrInvalidArgument)
	}
	return p.register(buf, access, false)
}

// Alloc maps anonymous memory outside the Go heap and registers it.
func (p *pd) Alloc(size int, access rdma.Access) (rdma.MR, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: size %d", rdma.ErrInvalidArgument, size)
	}
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, (size+page-1)/page*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, &CallError{Op: "mmap", Errno: err.(syscall.Errno)}
	}
	m, err := p.register(mem[:size:size], access, true)
	if err != nil {
		syscall.Munmap(mem)
		return nil, err
	}
	m.(*mr).mapped = mem
	return m, nil
}

func (p *pd) register(buf []byte, access rdma.Access, mapped bool) (rdma.MR, error) {
	if access&rdma.AccessRemoteWrite != 0 && access&rdma.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("%w: RemoteWrite needs LocalWrite", rdma.ErrInvalidArgument)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	var e C.int
	m := C.cap_reg_mr(p.pd, C.uintptr_t(addr), C.size_t(len(buf)), accessFlags(access), &e)
	if m == nil {
		return nil, callErr("ibv_reg_mr", e)
	}
	r := &mr{pd: p, mr: m, buf: buf, addr: uint64(addr), lkey: uint32(m.lkey), rkey: uint32(m.rkey), access: access}
	p.mu.Lock()
	p.mrs[r] = struct{}{}
	p.mu.Unlock()
	return r, nil
}

func (p *pd) CreateCQ(depth int) (rdma.CQ, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("%w: CQ depth %d", rdma.ErrInvalidArgument, depth)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return newCQ(p.dev, depth)
}

func (p *pd) CreateQP(cfg rdma.QPConfig) (rdma.QP, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return newQP(p, cfg)
}

func (p *pd) CreateSRQ(depth, maxSGE int) (rdma.SRQ, error) {
	if depth <= 0 || maxSGE <= 0 {
		return nil, fmt.Errorf("%w: SRQ depth %d, max SGE %d", rdma.ErrInvalidArgument, depth, maxSGE)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return newSRQ(p, depth, maxSGE)
}

// Close frees QPs that were closed but whose flushes nobody polled, then
// the PD. Open regions or QPs make it fail with EBUSY.
func (p *pd) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	var lingering []*qp
	for q := range p.qps {
		if q.closed.Load() {
			lingering = append(lingering, q)
		}
	}
	open := len(p.mrs) + len(p.qps) - len(lingering)
	p.mu.Unlock()
	if open > 0 {
		return fmt.Errorf("%w: %d regions or QPs still open", &CallError{Op: "ibv_dealloc_pd", Errno: syscall.EBUSY}, open)
	}
	for _, q := range lingering {
		q.destroy()
	}
	if r := C.ibv_dealloc_pd(p.pd); r != 0 {
		return callErr("ibv_dealloc_pd", r)
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	C.cap_destroy_id(p.id)
	p.dev.release()
	return nil
}

func (p *pd) forgetQP(q *qp) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.qps, q)
}

// mr is an ibv_mr.
type mr struct {
	pd     *pd
	mr     *C.struct_ibv_mr
	buf    []byte
	mapped []byte // the whole mapping, for Alloc
	addr   uint64
	lkey   uint32
	rkey   uint32
	access rdma.Access

	mu   sync.Mutex // guards done
	done bool
}

var _ rdma.MR = (*mr)(nil)

func (m *mr) Bytes() []byte       { return m.buf }
func (m *mr) Addr() uint64        { return m.addr }
func (m *mr) LKey() uint32        { return m.lkey }
func (m *mr) RKey() uint32        { return m.rkey }
func (m *mr) Access() rdma.Access { return m.access }

// Deregister is ibv_dereg_mr: when it returns the device no longer
// touches the memory. Memory from Alloc is unmapped: Bytes must not be
// used after.
func (m *mr) Deregister() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return rdma.ErrClosed
	}
	if r := C.cap_dereg_mr(m.mr); r != 0 {
		return callErr("ibv_dereg_mr", r)
	}
	m.done = true
	m.pd.mu.Lock()
	delete(m.pd.mrs, m)
	m.pd.mu.Unlock()
	if m.mapped != nil {
		if err := syscall.Munmap(m.mapped); err != nil {
			return errnoErr("munmap", err)
		}
	}
	return nil
}
