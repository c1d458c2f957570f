package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/internal/soft"
)

func init() { rdma.Register(provider{}) }

// Scheme is the URL scheme of this provider.
const Scheme = "shm"

type provider struct{}

var _ rdma.Provider = provider{}

func (provider) Scheme() string { return Scheme }

// OpenPD opens a PD. The host part of the URL is not used: a PD of this
// provider can connect to any listener on the host.
func (provider) OpenPD(host string) (rdma.PD, error) { return openPD() }

func (provider) Listen(ctx context.Context, host string) (rdma.Listener, error) {
	return listen(ctx, host)
}

// pd is a protection domain: a key table in a memfd, the regions in it,
// and the queue pairs created on it.
type pd struct {
	id   uint64 // random; names the key table to peers
	ktFd int
	kt   []byte // the key table mapping, read-write
	keys soft.KeyTable

	serial atomic.Uint64 // last region serial handed out

	// mu guards the maps and closed. Lock order: qp.sqMu, then view.mu,
	// then pd.mu; pd.mu is never held while waiting for a peer.
	mu     sync.Mutex
	mrs    map[uint32]*mr // live regions by key, for fetch requests
	qps    map[*qp]struct{}
	views  map[uint64]*remoteView // peers' key tables by their PD id
	closed bool
}

var _ rdma.PD = (*pd)(nil)

func openPD() (*pd, error) {
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, err
	}
	fd, kt, err := newMemfd("capsule-shm-keys", keyTableSize(KeyTableCapacity))
	if err != nil {
		return nil, err
	}
	putKeyTableHeader(kt, KeyTableCapacity)
	return &pd{
		id:    binary.LittleEndian.Uint64(idb[:]) | 1,
		ktFd:  fd,
		kt:    kt,
		mrs:   map[uint32]*mr{},
		qps:   map[*qp]struct{}{},
		views: map[uint64]*remoteView{},
	}, nil
}

func (p *pd) Scheme() string { return Scheme }

// Register makes buf a region for local use: the local side of Send,
// Recv, Write and Read. A peer cannot map Go memory, so remote access
// rights give rdma.ErrNotSupported; use Alloc for those.
func (p *pd) Register(buf []byte, access rdma.Access) (rdma.MR, error) {
	if access&(rdma.AccessRemoteRead|rdma.AccessRemoteWrite) != 0 {
		return nil, fmt.Errorf("%w: shm: Register with %v (a peer cannot map Go memory; use Alloc)", rdma.ErrNotSupported, access)
	}
	if len(buf) == 0 || access&^rdma.AccessAll != 0 {
		return nil, fmt.Errorf("%w: Register of %d bytes with %v", rdma.ErrInvalidArgument, len(buf), access)
	}
	return p.add(buf, nil, -1, access)
}

// Alloc makes a region in a new memfd, which peers map when they first
// access it.
func (p *pd) Alloc(size int, access rdma.Access) (rdma.MR, error) {
	if size <= 0 || access&^rdma.AccessAll != 0 {
		return nil, fmt.Errorf("%w: Alloc of %d bytes with %v", rdma.ErrInvalidArgument, size, access)
	}
	fd, mem, err := newMemfd("capsule-shm-mr", pageRound(size))
	if err != nil {
		return nil, err
	}
	m, err := p.add(mem[:size:size], mem, fd, access)
	if err != nil {
		unmap(mem)
		unix.Close(fd)
		return nil, err
	}
	return m, nil
}

func (p *pd) add(buf, mem []byte, fd int, access rdma.Access) (*mr, error) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, rdma.ErrClosed
	}
	reg, err := p.keys.Add(buf, access)
	if err != nil {
		return nil, err
	}
	if reg.Key>>8 >= KeyTableCapacity {
		p.keys.Remove(reg)
		return nil, ErrKeyTableFull
	}
	m := &mr{pd: p, reg: reg, mem: mem, fd: fd, access: access}
	if fd >= 0 {
		m.serial = p.serial.Add(1)
	}
	p.mu.Lock()
	p.mrs[reg.Key] = m
	p.mu.Unlock()
	keyTableEntry(p.kt, reg.Key>>8).publish(keyEntry{
		State: reg.Key, Access: access, Base: reg.Base, Length: uint64(len(buf)), Serial: m.serial,
	})
	return m, nil
}

// invalidate stops remote access with key: it clears the key-table entry,
// then waits until no peer holds the key in its hazard word. It reports
// false if the key was not live.
func (p *pd) invalidate(key uint32) bool {
	idx := key >> 8
	if idx == 0 || idx >= KeyTableCapacity {
		return false
	}
	if !keyTableEntry(p.kt, idx).state().CompareAndSwap(key, 0) {
		return false
	}
	p.mu.Lock()
	qps := make([]*qp, 0, len(p.qps))
	for q := range p.qps {
		qps = append(qps, q)
	}
	p.mu.Unlock()
	for _, q := range qps {
		q.waitPeerHazard(key)
	}
	return true
}

// hazardWaitLimit bounds how long Deregister, an invalidation or Close
// waits for a live but unresponsive peer to end an access. Past it the
// connection is declared lost (RetryExcErr).
const hazardWaitLimit = 2 * time.Second

// waitSpin waits for cond with a short spin, then sleeps of growing length,
// until cond is true or limit passed. It reports whether cond became true.
func waitSpin(cond func() bool, limit time.Duration) bool {
	for i := 0; i < 64; i++ {
		if cond() {
			return true
		}
		runtime.Gosched()
	}
	deadline := time.Now().Add(limit)
	d := 20 * time.Microsecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(d)
		if d < time.Millisecond {
			d *= 2
		}
	}
	return true
}

func (p *pd) CreateCQ(depth int) (rdma.CQ, error) {
	c, err := soft.NewCQ(depth)
	if err != nil {
		return nil, fmt.Errorf("%w: CQ depth %d", rdma.ErrInvalidArgument, depth)
	}
	return &cq{c}, nil
}

// cq is a software CQ; the type marks it as this provider's.
type cq struct{ *soft.CQ }

func (p *pd) CreateSRQ(depth, maxSGE int) (rdma.SRQ, error) {
	if depth <= 0 || maxSGE < 0 {
		return nil, fmt.Errorf("%w: SRQ depth %d, max SGE %d", rdma.ErrInvalidArgument, depth, maxSGE)
	}
	if maxSGE == 0 {
		maxSGE = rdma.DefaultMaxSGE
	}
	return newSRQ(p, depth, maxSGE), nil
}

// Close releases the PD. Its regions and QPs must be closed first
// (ErrPDInUse otherwise).
func (p *pd) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return rdma.ErrClosed
	}
	if len(p.mrs) > 0 || len(p.qps) > 0 {
		return fmt.Errorf("%w: %d regions, %d QPs", ErrPDInUse, len(p.mrs), len(p.qps))
	}
	p.closed = true
	unmap(p.kt)
	p.kt = nil
	unix.Close(p.ktFd)
	return nil
}

// serveFetch answers a peer's request for the memfd of the region key.
func (p *pd) serveFetch(q *qp, req ctlMsg) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.mrs[req.Key]
	reply := ctlMsg{Type: ctlFetchReply, Seq: req.Seq, Serial: req.Serial, Status: 1}
	fd := -1
	if m != nil && m.fd >= 0 && m.serial == req.Serial && m.access&(rdma.AccessRemoteRead|rdma.AccessRemoteWrite) != 0 {
		reply.Status, reply.Size, fd = 0, uint64(len(m.mem)), m.fd
	}
	return q.sendCtl(&reply, fd)
}

// mr is a memory region.
type mr struct {
	pd     *pd
	reg    *soft.Region
	mem    []byte // the whole memfd mapping (Alloc), nil for Register
	fd     int    // the memfd, -1 for Register
	serial uint64 // 0 for Register
	access rdma.Access

	mu   sync.Mutex // guards dead
	dead bool
}

var _ rdma.MR = (*mr)(nil)

func (m *mr) Bytes() []byte       { return m.reg.Buf }
func (m *mr) Addr() uint64        { return m.reg.Base }
func (m *mr) LKey() uint32        { return m.reg.Key }
func (m *mr) RKey() uint32        { return m.reg.Key }
func (m *mr) Access() rdma.Access { return m.access }

// Deregister invalidates the key in the shared key table, waits for peer
// accesses in progress (doc.go, "Deregistration") and for local ones,
// then frees the memory of an Alloc'd region.
func (m *mr) Deregister() error {
	m.mu.Lock()
	if m.dead {
		m.mu.Unlock()
		return rdma.ErrClosed
	}
	m.dead = true
	m.mu.Unlock()
	p := m.pd
	p.invalidate(m.reg.Key)
	p.mu.Lock()
	delete(p.mrs, m.reg.Key)
	p.mu.Unlock()
	p.keys.Remove(m.reg)
	if m.fd >= 0 {
		unmap(m.mem)
		unix.Close(m.fd)
	}
	return nil
}
