package iwarp

import (
	"context"
	"sync/atomic"

	"github.com/capsule-storage/capsule/rdma"
)

// Scheme is the URL scheme of this provider: iwarp://host:port.
const Scheme = "iwarp"

// Provider is the userspace iWARP provider. The zero value is not usable;
// use New. The provider registered with rdma.Register uses the defaults.
type Provider struct {
	cfg config
}

var _ rdma.Provider = (*Provider)(nil)

// qpNums numbers QPs of every provider instance, for WC.QPNum.
var qpNums atomic.Uint32

func init() {
	p, _ := New()
	rdma.Register(p)
}

// New returns a provider with the given options applied over the
// defaults. Use it to turn CRC off or change the segment size; objects it
// makes interoperate with those of the registered provider.
func New(opts ...Option) (*Provider, error) {
	p := &Provider{cfg: defaultConfig()}
	for _, o := range opts {
		if err := o(&p.cfg); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Scheme implements rdma.Provider.
func (p *Provider) Scheme() string { return Scheme }

// OpenPD implements rdma.Provider. host is not used: every PD can connect
// anywhere over TCP.
func (p *Provider) OpenPD(host string) (rdma.PD, error) {
	return &pd{prov: p}, nil
}

// Listen implements rdma.Provider: a TCP listener at host ("127.0.0.1:0"
// picks a free port; Addr reports it).
func (p *Provider) Listen(ctx context.Context, host string) (rdma.Listener, error) {
	return listen(ctx, p, host)
}
