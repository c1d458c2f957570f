package fault

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/capsule-storage/capsule/rdma"
)

// pd wraps a PD. Regions pass through unwrapped; the PD remembers where
// they are so that Corrupt can read a WR's payload safely.
type pd struct {
	p  *provider
	in rdma.PD

	mu      sync.Mutex // guards regions
	regions map[uint32]region
}

// region is where a registered region lives, by lkey.
type region struct{ addr, n uint64 }

var _ rdma.PD = (*pd)(nil)

func newPD(p *provider, in rdma.PD) *pd { return &pd{p: p, in: in, regions: map[uint32]region{}} }

func (p *pd) Scheme() string { return p.p.Scheme() }

func (p *pd) remember(m rdma.MR) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.regions[m.LKey()] = region{addr: m.Addr(), n: uint64(len(m.Bytes()))}
}

// bytesOf returns the local memory an SGE names when its lkey is one of
// this PD's regions and the range lies inside it. Inline SGEs need no
// lkey: their memory is read where it is.
func (p *pd) bytesOf(g rdma.SGE, inline bool) ([]byte, bool) {
	if g.Length == 0 {
		return nil, true
	}
	p.mu.Lock()
	r, ok := p.regions[g.LKey]
	p.mu.Unlock()
	if ok && g.Addr >= r.addr && uint64(g.Length) <= r.n && g.Addr-r.addr <= r.n-uint64(g.Length) {
		return memAt(g.Addr, g.Length), true
	}
	if inline {
		return memAt(g.Addr, g.Length), true
	}
	return nil, false
}

// memAt is the n bytes of this process's memory at virtual address addr,
// which is what an SGE names.
func memAt(addr uint64, n uint32) []byte {
	a := uintptr(addr)
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&a))
	return unsafe.Slice((*byte)(ptr), n)
}

func (p *pd) Register(buf []byte, access rdma.Access) (rdma.MR, error) {
	m, err := p.in.Register(buf, access)
	if err == nil {
		p.remember(m)
	}
	return m, err
}

func (p *pd) Alloc(size int, access rdma.Access) (rdma.MR, error) {
	m, err := p.in.Alloc(size, access)
	if err == nil {
		p.remember(m)
	}
	return m, err
}

func (p *pd) CreateCQ(depth int) (rdma.CQ, error) {
	in, err := p.in.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	return &cq{in: in, qps: map[uint32]*qp{}}, nil
}

func (p *pd) CreateSRQ(depth, maxSGE int) (rdma.SRQ, error) { return p.in.CreateSRQ(depth, maxSGE) }

func (p *pd) CreateQP(cfg rdma.QPConfig) (rdma.QP, error) {
	scq, ok := cfg.SendCQ.(*cq)
	if !ok {
		return nil, fmt.Errorf("%w: SendCQ %T is not from a fault PD", rdma.ErrWrongProvider, cfg.SendCQ)
	}
	rcq := scq
	if cfg.RecvCQ != nil {
		if rcq, ok = cfg.RecvCQ.(*cq); !ok {
			return nil, fmt.Errorf("%w: RecvCQ %T is not from a fault PD", rdma.ErrWrongProvider, cfg.RecvCQ)
		}
	}
	inCfg := cfg
	inCfg.SendCQ, inCfg.RecvCQ = scq.in, rcq.in
	in, err := p.in.CreateQP(inCfg)
	if err != nil {
		return nil, err
	}
	q := newQP(p, in, scq, cfg.WithDefaults())
	scq.add(q)
	return q, nil
}

// Close closes the wrapped PD and forgets its regions.
func (p *pd) Close() error {
	err := p.in.Close()
	if err == nil {
		p.mu.Lock()
		clear(p.regions)
		p.mu.Unlock()
	}
	return err
}

// stage allocates a registered buffer of n bytes for a WR's payload.
func (p *pd) stage(n int) (rdma.MR, error) { return p.in.Alloc(max(n, 1), rdma.AccessLocalWrite) }
