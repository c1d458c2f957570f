package fault

import (
	"context"
	"fmt"
	"sync"

	"github.com/capsule-storage/capsule/rdma"
)

// Prefix starts the scheme of every fault provider: fault+iwarp wraps
// iwarp.
const Prefix = "fault+"

// Wrapped lists the schemes this package registers a fault provider for.
var Wrapped = []string{"iwarp", "shm", "rdma"}

func init() {
	for _, s := range Wrapped {
		rdma.Register(&provider{inner: s})
	}
}

// provider wraps the provider registered for inner, found at first use so
// that the order of package initialisation does not matter.
type provider struct {
	inner string

	mu sync.Mutex // guards p
	p  rdma.Provider
}

var _ rdma.Provider = (*provider)(nil)

func (p *provider) Scheme() string { return Prefix + p.inner }

func (p *provider) innerProvider() (rdma.Provider, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p != nil {
		return p.p, nil
	}
	ip, _, err := rdma.ParseURL(p.inner + "://lookup")
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoInner, p.inner, err)
	}
	p.p = ip
	return ip, nil
}

func (p *provider) OpenPD(host string) (rdma.PD, error) {
	ip, err := p.innerProvider()
	if err != nil {
		return nil, err
	}
	in, err := ip.OpenPD(host)
	if err != nil {
		return nil, err
	}
	return newPD(p, in), nil
}

func (p *provider) Listen(ctx context.Context, host string) (rdma.Listener, error) {
	ip, err := p.innerProvider()
	if err != nil {
		return nil, err
	}
	in, err := ip.Listen(ctx, host)
	if err != nil {
		return nil, err
	}
	return &listener{p: p, in: in, inj: For(in.Addr())}, nil
}
