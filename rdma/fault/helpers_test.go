package fault

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
	_ "github.com/capsule-storage/capsule/rdma/iwarp"
	_ "github.com/capsule-storage/capsule/rdma/shm"
)

// end is one side of a test connection through the fault provider.
type end struct {
	pd rdma.PD
	cq rdma.CQ
	qp rdma.QP
	mr rdma.MR // 64 KiB, AccessAll
}

// conn is a loopback connection over fault+iwarp: the dialer, the
// acceptor, and the injector of the listener's address.
type conn struct {
	dial, acc *end
	inj       *Injector
	addr      string
}

const recvSize = 1024

// wrapped lists the providers the tests run over.
var wrapped = []string{"iwarp", "shm"}

// eachProvider runs test once per wrapped provider.
func eachProvider(t *testing.T, test func(t *testing.T, p string)) {
	for _, p := range wrapped {
		t.Run(p, func(t *testing.T) { test(t, p) })
	}
}

var shmNames atomic.Uint64

// urls returns the listen URL and the OpenPD URL of a fresh endpoint of p.
func urls(p string) (listen, open string) {
	if p == "shm" {
		u := fmt.Sprintf("fault+shm://fault-test-%d-%d", os.Getpid(), shmNames.Add(1))
		return u, u
	}
	return "fault+" + p + "://127.0.0.1:0", "fault+" + p + "://127.0.0.1"
}

// newConn connects two QPs and posts recvs Recvs of recvSize bytes on
// each side, at offsets 0, recvSize, ... of its region.
func newConn(t *testing.T, p string, cfg rdma.QPConfig, recvs int) *conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lu, ou := urls(p)
	l, err := rdma.Listen(ctx, lu)
	require.NoError(t, err)
	defer l.Close()
	prefix := "fault+" + p + "://"
	require.True(t, strings.HasPrefix(l.Addr(), prefix), l.Addr())
	mk := func() *end {
		e := &end{}
		e.pd, err = rdma.OpenPD(ou)
		require.NoError(t, err)
		e.cq, err = e.pd.CreateCQ(1024)
		require.NoError(t, err)
		c := cfg
		c.SendCQ = e.cq
		e.qp, err = e.pd.CreateQP(c)
		require.NoError(t, err)
		e.mr, err = e.pd.Alloc(64<<10, rdma.AccessAll)
		require.NoError(t, err)
		for i := range recvs {
			require.NoError(t, e.qp.PostRecv([]rdma.RecvWR{{ID: uint64(1000 + i), SGL: []rdma.SGE{rdma.SGEOf(e.mr, i*recvSize, recvSize)}}}))
		}
		t.Cleanup(func() {
			e.qp.Close()
			e.cq.Close()
			e.mr.Deregister()
			e.pd.Close()
		})
		return e
	}
	c := &conn{dial: mk(), acc: mk(), addr: strings.TrimPrefix(l.Addr(), prefix)}
	errc := make(chan error, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			errc <- err
			return
		}
		errc <- req.Accept(c.acc.qp, nil)
	}()
	_, err = c.dial.qp.Connect(ctx, c.addr, nil)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	c.inj = For(l.Addr())
	require.Equal(t, c.addr, c.inj.Addr())
	require.Equal(t, 2, c.inj.Conns())
	return c
}

// waitWC waits for one completion.
func waitWC(t *testing.T, cq rdma.CQ) rdma.WC {
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
func waitDone(t *testing.T, q rdma.QP) {
	t.Helper()
	select {
	case <-q.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("QP %d did not enter StateError", q.Num())
	}
}

// send posts a signaled Send of msg, staged at offset off of e's region,
// and waits for its completion.
func (e *end) send(t *testing.T, id uint64, off int, msg string) rdma.WC {
	t.Helper()
	copy(e.mr.Bytes()[off:], msg)
	require.NoError(t, e.qp.PostSend([]rdma.SendWR{{ID: id, Op: rdma.OpSend, Flags: rdma.Signaled,
		SGL: []rdma.SGE{rdma.SGEOf(e.mr, off, len(msg))}}}))
	return waitWC(t, e.cq)
}

// recv waits for a receive completion and returns what it carried.
func (e *end) recv(t *testing.T) (rdma.WC, string) {
	t.Helper()
	wc := waitWC(t, e.cq)
	require.Equal(t, rdma.Success, wc.Status)
	require.Equal(t, rdma.WCRecv, wc.Opcode)
	off := int(wc.ID-1000) * recvSize
	return wc, string(e.mr.Bytes()[off : off+int(wc.ByteLen)])
}
