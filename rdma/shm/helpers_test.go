package shm

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// hangLimit only keeps a broken test from hanging the run; no test
// asserts anything about time.
const hangLimit = 30 * time.Second

var nameSeq atomic.Uint32

// freshName is a listener name no other test uses.
func freshName() string { return fmt.Sprintf("test-%d-%d", os.Getpid(), nameSeq.Add(1)) }

// pair is two connected QPs in this process, each on its own PD and CQ.
type pair struct {
	t        testing.TB
	l        rdma.Listener
	pdA, pdB rdma.PD
	cqA, cqB rdma.CQ
	a, b     rdma.QP
	reply    []byte
}

type pairOpts struct {
	cfgA, cfgB     rdma.QPConfig
	primeA, primeB func(rdma.QP)
	privA, privB   []byte
	pdB            rdma.PD // reuse a PD for side B
	pdA            rdma.PD
	l              rdma.Listener
}

func newPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	p := &pair{t: t}
	if o.l != nil {
		p.l = o.l
	} else {
		l, err := rdma.Listen(context.Background(), "shm://"+freshName())
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		p.l = l
	}
	p.pdA, p.pdB = o.pdA, o.pdB
	if p.pdA == nil {
		p.pdA = openTestPD(t)
	}
	if p.pdB == nil {
		p.pdB = openTestPD(t)
	}
	var err error
	p.cqA, err = p.pdA.CreateCQ(4096)
	require.NoError(t, err)
	p.cqB, err = p.pdB.CreateCQ(4096)
	require.NoError(t, err)
	cfgA, cfgB := o.cfgA, o.cfgB
	cfgA.SendCQ, cfgA.RecvCQ = p.cqA, p.cqA
	cfgB.SendCQ, cfgB.RecvCQ = p.cqB, p.cqB
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	type res struct {
		qp  rdma.QP
		err error
	}
	ch := make(chan res, 1)
	go func() {
		req, err := p.l.Accept(ctx)
		if err != nil {
			ch <- res{err: err}
			return
		}
		qp, err := p.pdB.CreateQP(cfgB)
		if err != nil {
			req.Reject(nil)
			ch <- res{err: err}
			return
		}
		if o.primeB != nil {
			o.primeB(qp)
		}
		ch <- res{qp: qp, err: req.Accept(qp, o.privB)}
	}()
	a, err := p.pdA.CreateQP(cfgA)
	require.NoError(t, err)
	if o.primeA != nil {
		o.primeA(a)
	}
	p.reply, err = a.Connect(ctx, hostOf(p.l), o.privA)
	r := <-ch
	require.NoError(t, err)
	require.NoError(t, r.err)
	p.a, p.b = a, r.qp
	t.Cleanup(func() {
		p.a.Close()
		p.b.Close()
		p.cqA.Close()
		p.cqB.Close()
	})
	return p
}

func hostOf(l rdma.Listener) string { return l.Addr()[len("shm://"):] }

func openTestPD(t testing.TB) rdma.PD {
	t.Helper()
	pd, err := rdma.OpenPD("shm://local")
	require.NoError(t, err)
	t.Cleanup(func() { pd.Close() })
	return pd
}

func alloc(t testing.TB, pd rdma.PD, n int, access rdma.Access) rdma.MR {
	t.Helper()
	mr, err := pd.Alloc(n, access)
	require.NoError(t, err)
	t.Cleanup(func() { mr.Deregister() })
	return mr
}

func register(t testing.TB, pd rdma.PD, buf []byte, access rdma.Access) rdma.MR {
	t.Helper()
	mr, err := pd.Register(buf, access)
	require.NoError(t, err)
	t.Cleanup(func() { mr.Deregister() })
	return mr
}

// waitWC waits for n completions.
func waitWC(t testing.TB, cq rdma.CQ, n int) []rdma.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	out := make([]rdma.WC, 0, n)
	buf := make([]rdma.WC, n)
	for len(out) < n {
		k, err := cq.Wait(ctx, buf[:n-len(out)])
		require.NoError(t, err, "waiting for %d completions, have %v", n, out)
		out = append(out, buf[:k]...)
	}
	return out
}

// waitDone waits for qp to enter StateError.
func waitDone(t testing.TB, qp rdma.QP) {
	t.Helper()
	select {
	case <-qp.Done():
	case <-time.After(hangLimit):
		t.Fatalf("QP %d did not enter Error", qp.Num())
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func sge(mr rdma.MR, off, n int) []rdma.SGE { return []rdma.SGE{rdma.SGEOf(mr, off, n)} }

// rawSGE names buf by address, without a key, for Inline WRs.
func rawSGE(buf []byte) rdma.SGE {
	return rdma.SGE{Addr: addrOf(buf), Length: uint32(len(buf))}
}

// qpState describes a QP's send queue and shared words, for failure
// messages of tests that hang.
func qpState(qi rdma.QP) string {
	q := qi.(*qp)
	if !q.connected.Load() {
		return "not connected"
	}
	q.sqMu.Lock()
	sq := q.sq
	q.sqMu.Unlock()
	return fmt.Sprintf("state %v err %v | sq head %d tail %d push %d msn %d pushed %d acked %d rtail %d | me: db %d head %d tail %d sw %d ack %d term %d | peer: db %d head %d tail %d sw %d ack %d term %d | sendWait %v rnrWait %v kick %d",
		q.State(), q.Err(), sq.head, sq.tail, sq.push, sq.msn, sq.pushedMSN, sq.ackedMSN, sq.rtail,
		q.me.doorbell.Load(), q.me.head.Load(), q.me.tail.Load(), q.me.spaceWait.Load(), q.me.ack.Load(), q.me.term.Load(),
		q.peer.doorbell.Load(), q.peer.head.Load(), q.peer.tail.Load(), q.peer.spaceWait.Load(), q.peer.ack.Load(), q.peer.term.Load(),
		q.sendWait.Load(), q.rnrWait.Load(), q.kick.Load())
}
