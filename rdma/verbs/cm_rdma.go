//go:build rdma && cgo

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

// cmEvent is an rdma_cm event copied out of librdmacm before it was
// acknowledged.
type cmEvent struct {
	typ      uint32
	status   int32
	id       *C.struct_rdma_cm_id
	listenID *C.struct_rdma_cm_id
	private  []byte
	respRes  uint8
	initDep  uint8
}

func (e cmEvent) String() string {
	return C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(e.typ)))
}

// cmHandler receives the events of the ids it registered. handleCM runs
// on the dispatcher goroutine: it must not block, and it must not touch
// the C id, which its owner may be destroying (except a fresh connection
// request's id, which nobody else knows yet).
type cmHandler interface{ handleCM(ev cmEvent) }

// cmDispatcher owns the provider's one rdma_cm event channel. Every id is
// created on it; one goroutine takes the events and hands each to the
// handler registered for its id. The channel lives as long as the process.
type cmDispatcher struct {
	ch  *C.struct_rdma_event_channel
	pfd *pollFD

	mu       sync.Mutex // guards handlers
	handlers map[uintptr]cmHandler
}

var (
	cmOnce   sync.Once
	cmGlobal *cmDispatcher
	cmErr    error
)

// dispatcher returns the provider's event channel, creating it on first use.
func dispatcher() (*cmDispatcher, error) {
	cmOnce.Do(func() {
		if deviceCount() == 0 {
			cmErr = ErrNoDevice
			return
		}
		ch, err := C.rdma_create_event_channel()
		if ch == nil {
			cmErr = fmt.Errorf("%w: %w", ErrNoDevice, errnoErr("rdma_create_event_channel", err))
			return
		}
		pfd, perr := newPollFD(int(ch.fd), "rdma_cm")
		if perr != nil {
			C.rdma_destroy_event_channel(ch)
			cmErr = perr
			return
		}
		cmGlobal = &cmDispatcher{ch: ch, pfd: pfd, handlers: map[uintptr]cmHandler{}}
		go cmGlobal.run()
	})
	return cmGlobal, cmErr
}

func (d *cmDispatcher) run() {
	var ev C.struct_cap_cm_event
	d.pfd.wait(nil, func() bool {
		for {
			if r := C.cap_cm_event(d.ch, &ev); r != 0 {
				return false // EAGAIN: park until the next event
			}
			e := cmEvent{
				typ:      uint32(ev._type),
				status:   int32(ev.status),
				id:       ev.id,
				listenID: ev.listen_id,
				respRes:  uint8(ev.responder_resources),
				initDep:  uint8(ev.initiator_depth),
			}
			if n := int(ev.private_len); n > 0 {
				e.private = C.GoBytes(unsafe.Pointer(&ev.private_data[0]), C.int(n))
			}
			d.dispatch(e)
		}
	})
}

func (d *cmDispatcher) dispatch(e cmEvent) {
	key := ptrKey(e.id)
	if e.typ == C.RDMA_CM_EVENT_CONNECT_REQUEST {
		key = ptrKey(e.listenID)
	}
	d.mu.Lock()
	h := d.handlers[key]
	d.mu.Unlock()
	if h != nil {
		h.handleCM(e)
		return
	}
	if e.typ == C.RDMA_CM_EVENT_CONNECT_REQUEST {
		// The listener is gone: refuse, and free the id the request made.
		C.cap_reject(e.id, nil, 0)
		C.cap_destroy_id(e.id)
	}
}

func (d *cmDispatcher) register(id *C.struct_rdma_cm_id, h cmHandler) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.handlers[ptrKey(id)] = h
}

func (d *cmDispatcher) unregister(id *C.struct_rdma_cm_id) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.handlers, ptrKey(id))
}

// newID creates an id on the provider's event channel.
func (d *cmDispatcher) newID() (*C.struct_rdma_cm_id, error) {
	var id *C.struct_rdma_cm_id
	if r := C.cap_create_id(d.ch, &id); r != 0 {
		return nil, callErr("rdma_create_id", r)
	}
	return id, nil
}

// eventSink is a handler that queues the events of a short-lived id.
type eventSink chan cmEvent

func (s eventSink) handleCM(ev cmEvent) {
	select {
	case s <- ev:
	default:
	}
}

// ---- addresses ----

// resolveHost turns "host:port" (or a bare host, when port is optional)
// into an address and port.
func resolveHost(host string, portOptional bool) (netip.Addr, int, error) {
	h, p, err := net.SplitHostPort(host)
	if err != nil {
		if !portOptional {
			return netip.Addr{}, 0, fmt.Errorf("%w: %q: %v", rdma.ErrInvalidArgument, host, err)
		}
		h, p = host, "0"
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%w: port %q", rdma.ErrInvalidArgument, p)
	}
	if h == "" {
		return netip.IPv4Unspecified(), int(port), nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap(), int(port), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", h)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, 0, fmt.Errorf("%w: resolve %q: %v", rdma.ErrInvalidArgument, h, err)
	}
	return ips[0].Unmap(), int(port), nil
}

// sockaddr is a struct sockaddr_storage in C memory.
type sockaddr struct{ ss *C.struct_sockaddr_storage }

func newSockaddr(a netip.Addr, port int) sockaddr {
	ss := (*C.struct_sockaddr_storage)(C.calloc(1, C.sizeof_struct_sockaddr_storage))
	var zone uint32
	if z := a.Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			zone = uint32(ifi.Index)
		}
	}
	b := a.AsSlice()
	C.cap_fill_sockaddr(ss, (*C.uint8_t)(unsafe.Pointer(&b[0])), C.int(len(b)), C.int(port), C.uint32_t(zone))
	return sockaddr{ss}
}

func (s sockaddr) free() { C.free(unsafe.Pointer(s.ss)) }

// idAddr is the local (peer false) or peer address of id as host:port.
func idAddr(id *C.struct_rdma_cm_id, peer bool) (netip.AddrPort, bool) {
	var ip [16]byte
	var port C.int
	p := C.int(0)
	if peer {
		p = 1
	}
	n := C.cap_id_addr(id, p, (*C.uint8_t)(unsafe.Pointer(&ip[0])), &port)
	switch n {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[:4])), uint16(port)), true
	case 16:
		return netip.AddrPortFrom(netip.AddrFrom16(ip).Unmap(), uint16(port)), true
	}
	return netip.AddrPort{}, false
}

func addrString(id *C.struct_rdma_cm_id, peer bool) string {
	if ap, ok := idAddr(id, peer); ok {
		return ap.String()
	}
	return ""
}

// cmStatusErr turns the status of a failed rdma_cm event into an error.
func cmStatusErr(ev cmEvent) error {
	if ev.status < 0 {
		return fmt.Errorf("verbs: %s: %w", ev, syscall.Errno(-ev.status))
	}
	return fmt.Errorf("verbs: %s (status %d)", ev, ev.status)
}

// ibRejConsumer is the InfiniBand CM reject reason of a reject sent by the
// application (IBA 12.6.7.2, "consumer defined").
const ibRejConsumer = 28

// rejectErr turns RDMA_CM_EVENT_REJECTED into *rdma.RejectError when the
// listener refused with private data, and ErrConnRefused otherwise.
func rejectErr(ev cmEvent, ib bool) error {
	consumer := ev.status == ibRejConsumer || (!ib && len(ev.private) > 0)
	if consumer {
		return &rdma.RejectError{Private: ev.private}
	}
	return fmt.Errorf("%w: %w", rdma.ErrConnRefused, cmStatusErr(ev))
}

// ---- listener ----

// listenBacklog bounds connection requests that wait for Accept; more are
// refused, as a full TCP backlog does.
const listenBacklog = 128

type listener struct {
	d    *cmDispatcher
	id   *C.struct_rdma_cm_id
	addr string
	reqs chan *connReq
	done chan struct{}

	mu     sync.Mutex // guards closed and sends on reqs
	closed bool
}

var _ rdma.Listener = (*listener)(nil)

func listen(ctx context.Context, host string) (rdma.Listener, error) {
	d, err := dispatcher()
	if err != nil {
		return nil, err
	}
	a, port, err := resolveHost(host, false)
	if err != nil {
		return nil, err
	}
	id, err := d.newID()
	if err != nil {
		return nil, err
	}
	sa := newSockaddr(a, port)
	defer sa.free()
	if r := C.cap_bind(id, sa.ss); r != 0 {
		C.cap_destroy_id(id)
		return nil, callErr("rdma_bind_addr", r)
	}
	l := &listener{d: d, id: id, reqs: make(chan *connReq, listenBacklog), done: make(chan struct{})}
	d.register(id, l)
	if r := C.cap_listen(id, listenBacklog); r != 0 {
		d.unregister(id)
		C.cap_destroy_id(id)
		return nil, callErr("rdma_listen", r)
	}
	l.addr = Scheme + "://" + addrString(id, false)
	return l, nil
}

func (l *listener) handleCM(ev cmEvent) {
	if ev.typ != C.RDMA_CM_EVENT_CONNECT_REQUEST {
		return
	}
	r := &connReq{
		d:       l.d,
		id:      ev.id,
		private: ev.private,
		remote:  addrString(ev.id, true),
		respRes: ev.respRes,
		initDep: ev.initDep,
		gone:    make(chan struct{}),
	}
	l.d.register(ev.id, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		select {
		case l.reqs <- r:
			return
		default:
		}
	}
	r.refuse(nil)
}

func (l *listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, rdma.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *listener) Addr() string { return l.addr }

func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	l.d.unregister(l.id)
	C.cap_destroy_id(l.id)
	for {
		select {
		case r := <-l.reqs:
			r.refuse(nil)
		default:
			return nil
		}
	}
}

// ---- connection requests ----

// connReq is RDMA_CM_EVENT_CONNECT_REQUEST: a new id, bound to the device
// the request arrived on, that Accept hands to a QP or Reject destroys.
type connReq struct {
	d        *cmDispatcher
	id       *C.struct_rdma_cm_id
	private  []byte
	remote   string
	respRes  uint8 // the peer's responder resources: our Reads it serves
	initDep  uint8 // the peer's initiator depth: its Reads we serve
	answered atomic.Bool
	gone     chan struct{} // closed when the peer gave up before the answer
	goneOnce sync.Once
}

var _ rdma.ConnRequest = (*connReq)(nil)

// handleCM sees the request id's events until Accept hands it to a QP.
func (r *connReq) handleCM(ev cmEvent) {
	switch ev.typ {
	case C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_CONNECT_ERROR,
		C.RDMA_CM_EVENT_UNREACHABLE, C.RDMA_CM_EVENT_REJECTED, C.RDMA_CM_EVENT_DEVICE_REMOVAL:
		r.goneOnce.Do(func() { close(r.gone) })
	}
}

func (r *connReq) PrivateData() []byte { return r.private }
func (r *connReq) RemoteAddr() string  { return r.remote }

func (r *connReq) Accept(q rdma.QP, private []byte) error {
	vq, ok := q.(*qp)
	if !ok {
		return fmt.Errorf("%w: Accept of a %T", rdma.ErrWrongProvider, q)
	}
	if len(private) > maxPrivateData {
		return fmt.Errorf("%w: %d bytes of private data (at most %d)", rdma.ErrInvalidArgument, len(private), maxPrivateData)
	}
	if C.cap_id_verbs(r.id) != vq.dev.ctx {
		return fmt.Errorf("%w: the QP is on device %s, the request arrived on another", rdma.ErrWrongProvider, vq.dev.name)
	}
	if !r.answered.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: connection request already answered", rdma.ErrInvalidState)
	}
	select {
	case <-r.gone:
		r.refuse(nil)
		return fmt.Errorf("%w: the peer gave up before the accept", ErrUnreachable)
	default:
	}
	return vq.accept(r, private)
}

func (r *connReq) Reject(private []byte) error {
	if len(private) > maxPrivateData {
		return fmt.Errorf("%w: %d bytes of private data (at most %d)", rdma.ErrInvalidArgument, len(private), maxPrivateData)
	}
	if !r.answered.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: connection request already answered", rdma.ErrInvalidState)
	}
	return r.refuse(private)
}

// refuse rejects the request and destroys its id.
func (r *connReq) refuse(private []byte) error {
	r.answered.Store(true)
	r.d.unregister(r.id)
	var p unsafe.Pointer
	if len(private) > 0 {
		p = unsafe.Pointer(unsafe.SliceData(private))
	}
	rc := C.cap_reject(r.id, p, C.int(len(private)))
	C.cap_destroy_id(r.id)
	if rc != 0 {
		return callErr("rdma_reject", rc)
	}
	return nil
}
