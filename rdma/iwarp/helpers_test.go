package iwarp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// side is one end of a test connection.
type side struct {
	pd rdma.PD
	cq rdma.CQ
	qp rdma.QP
	mr rdma.MR
}

// pairOpts configures newPair.
type pairOpts struct {
	cfg      rdma.QPConfig
	prov     *Provider
	mrSize   int
	access   rdma.Access
	preRecv  int // Recvs posted on each side before connecting, of 4 KiB each at the MR start
	private  []byte
	acceptPD []byte
}

// newPair connects two QPs over loopback and registers cleanup.
func newPair(t testing.TB, o pairOpts) (a, b *side) {
	t.Helper()
	if o.prov == nil {
		var err error
		o.prov, err = New()
		require.NoError(t, err)
	}
	if o.mrSize == 0 {
		o.mrSize = 1 << 20
	}
	if o.access == 0 {
		o.access = rdma.AccessAll
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := o.prov.Listen(ctx, "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	mk := func() *side {
		s := &side{}
		s.pd, err = o.prov.OpenPD("127.0.0.1")
		require.NoError(t, err)
		s.cq, err = s.pd.CreateCQ(4096)
		require.NoError(t, err)
		cfg := o.cfg
		cfg.SendCQ = s.cq
		s.qp, err = s.pd.CreateQP(cfg)
		require.NoError(t, err)
		s.mr, err = s.pd.Alloc(o.mrSize, o.access)
		require.NoError(t, err)
		for i := 0; i < o.preRecv; i++ {
			require.NoError(t, s.qp.PostRecv([]rdma.RecvWR{{ID: uint64(1000 + i), SGL: []rdma.SGE{rdma.SGEOf(s.mr, 0, 4096)}}}))
		}
		t.Cleanup(func() {
			s.qp.Close()
			s.cq.Close()
			s.pd.Close()
		})
		return s
	}
	a, b = mk(), mk()
	errc := make(chan error, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			errc <- err
			return
		}
		errc <- req.Accept(b.qp, o.acceptPD)
	}()
	_, err = a.qp.Connect(ctx, trimScheme(l.Addr()), o.private)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	return a, b
}

func trimScheme(u string) string { return u[len(Scheme+"://"):] }

// waitWC waits for one completion.
func waitWC(t testing.TB, cq rdma.CQ) rdma.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]rdma.WC
	n, err := cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return wc[0]
}

// waitDone waits for a QP to enter StateError.
func waitDone(t testing.TB, q rdma.QP) {
	t.Helper()
	select {
	case <-q.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("QP %d did not enter StateError", q.Num())
	}
}
