package fault

import (
	"context"
	"fmt"

	"github.com/capsule-storage/capsule/rdma"
)

// listener wraps a Listener; its QPs join the injector of its address.
type listener struct {
	p   *provider
	in  rdma.Listener
	inj *Injector
}

var _ rdma.Listener = (*listener)(nil)

// Accept rejects requests while the injector refuses connections.
func (l *listener) Accept(ctx context.Context) (rdma.ConnRequest, error) {
	for {
		r, err := l.in.Accept(ctx)
		if err != nil {
			return nil, err
		}
		if l.inj.refused() {
			r.Reject(nil)
			continue
		}
		return &connReq{in: r, inj: l.inj}, nil
	}
}

// Addr is the wrapped listener's address under the fault scheme, so that
// dialling it goes through the wrapper too.
func (l *listener) Addr() string { return Prefix + l.in.Addr() }

func (l *listener) Close() error { return l.in.Close() }

type connReq struct {
	in  rdma.ConnRequest
	inj *Injector
}

var _ rdma.ConnRequest = (*connReq)(nil)

func (r *connReq) PrivateData() []byte         { return r.in.PrivateData() }
func (r *connReq) RemoteAddr() string          { return r.in.RemoteAddr() }
func (r *connReq) Reject(private []byte) error { return r.in.Reject(private) }

// Accept hands the wrapped QP to the wrapped request.
func (r *connReq) Accept(q rdma.QP, private []byte) error {
	fq, ok := q.(*qp)
	if !ok {
		return fmt.Errorf("%w: Accept of a %T on a fault listener", rdma.ErrWrongProvider, q)
	}
	if err := r.in.Accept(fq.in, private); err != nil {
		return err
	}
	fq.join(r.inj, Acceptor)
	return nil
}
