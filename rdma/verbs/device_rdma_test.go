//go:build rdma && cgo

package verbs

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// addrEnv names host:port of an address an RDMA device owns; the
// conformance suite reads the same variable.
const addrEnv = "CAPSULE_RDMA_ADDR"

func testAddr() string {
	if a := os.Getenv(addrEnv); a != "" {
		return a
	}
	return "127.0.0.1:0"
}

// requireDevice skips t on machines without an RDMA device.
func requireDevice(t *testing.T) {
	t.Helper()
	if deviceCount() == 0 {
		t.Skip("no RDMA device: ibv_get_device_list found none (needs a NIC or a software device such as rxe or siw, and the rdma_cm module)")
	}
}

func TestNoDeviceIsNotSupported(t *testing.T) {
	if deviceCount() != 0 {
		t.Skip("this machine has an RDMA device")
	}
	_, err := rdma.OpenPD("rdma://127.0.0.1:4420")
	assert.ErrorIs(t, err, ErrNoDevice)
	assert.ErrorIs(t, err, rdma.ErrNotSupported)
	_, err = rdma.Listen(context.Background(), "rdma://127.0.0.1:0")
	assert.ErrorIs(t, err, rdma.ErrNotSupported)
}

// pair is a connected loopback pair with one CQ per side.
type pair struct {
	pd             rdma.PD
	ccq, scq       rdma.CQ
	client, server rdma.QP
	mr             rdma.MR // 64 KiB, AccessAll
}

func newPair(t *testing.T, cfg rdma.QPConfig) *pair {
	t.Helper()
	requireDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pd, err := rdma.OpenPD("rdma://" + testAddr())
	require.NoError(t, err)
	p := &pair{pd: pd}
	p.ccq, err = pd.CreateCQ(256)
	require.NoError(t, err)
	p.scq, err = pd.CreateCQ(256)
	require.NoError(t, err)
	p.mr, err = pd.Alloc(64<<10, rdma.AccessAll)
	require.NoError(t, err)

	l, err := rdma.Listen(ctx, "rdma://"+testAddr())
	require.NoError(t, err)
	defer l.Close()
	require.True(t, strings.HasPrefix(l.Addr(), "rdma://"))

	sc, cc := cfg, cfg
	sc.SendCQ, cc.SendCQ = p.scq, p.ccq
	p.server, err = pd.CreateQP(sc)
	require.NoError(t, err)
	p.client, err = pd.CreateQP(cc)
	require.NoError(t, err)

	accepted := make(chan error, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			accepted <- err
			return
		}
		if !strings.HasPrefix(string(req.PrivateData()), "hello") {
			accepted <- req.Reject([]byte("bad hello"))
			return
		}
		accepted <- req.Accept(p.server, []byte("welcome"))
	}()
	host := strings.TrimPrefix(l.Addr(), "rdma://")
	reply, err := p.client.Connect(ctx, host, []byte("hello"))
	require.NoError(t, err)
	require.NoError(t, <-accepted)
	assert.True(t, strings.HasPrefix(string(reply), "welcome"), "InfiniBand pads private data with zeros")
	assert.Equal(t, rdma.StateRTS, p.client.State())
	assert.Equal(t, rdma.StateRTS, p.server.State())
	t.Cleanup(func() {
		p.client.Close()
		p.server.Close()
		assert.NoError(t, p.ccq.Close())
		assert.NoError(t, p.scq.Close())
		assert.NoError(t, p.mr.Deregister())
		assert.NoError(t, pd.Close())
	})
	return p
}

func waitOne(t *testing.T, cq rdma.CQ) rdma.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]rdma.WC, 1)
	n, err := cq.Wait(ctx, wc)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return wc[0]
}

func TestDeviceSendRecvWriteRead(t *testing.T) {
	p := newPair(t, rdma.QPConfig{SignalAll: true})
	buf := p.mr.Bytes()

	// Send with immediate into a posted Recv.
	require.NoError(t, p.server.PostRecv([]rdma.RecvWR{{ID: 7, SGL: []rdma.SGE{rdma.SGEOf(p.mr, 0, 4096)}}}))
	copy(buf[8192:], "ping")
	require.NoError(t, p.client.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpSendImm, Imm: 0xabcd,
		SGL: []rdma.SGE{rdma.SGEOf(p.mr, 8192, 4)}}}))
	wc := waitOne(t, p.ccq)
	assert.Equal(t, rdma.WC{ID: 1, Status: rdma.Success, Opcode: rdma.WCSend, QPNum: p.client.Num()}, wc)
	wc = waitOne(t, p.scq)
	assert.Equal(t, uint64(7), wc.ID)
	assert.Equal(t, rdma.WCRecv, wc.Opcode)
	assert.Equal(t, uint32(4), wc.ByteLen)
	assert.Equal(t, uint32(0xabcd), wc.Imm)
	assert.Equal(t, rdma.WCWithImm, wc.Flags&rdma.WCWithImm)
	assert.Equal(t, "ping", string(buf[:4]))

	// Write, then Read it back, into another part of the same region.
	copy(buf[16384:], "written")
	require.NoError(t, p.client.PostSend([]rdma.SendWR{
		{ID: 2, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(p.mr, 16384, 7)}, RemoteAddr: p.mr.Addr() + 20000, RKey: p.mr.RKey()},
		{ID: 3, Op: rdma.OpRead, SGL: []rdma.SGE{rdma.SGEOf(p.mr, 30000, 7)}, RemoteAddr: p.mr.Addr() + 20000, RKey: p.mr.RKey()},
	}))
	assert.Equal(t, rdma.WCWrite, waitOne(t, p.ccq).Opcode)
	wc = waitOne(t, p.ccq)
	assert.Equal(t, rdma.WCRead, wc.Opcode)
	assert.Equal(t, rdma.Success, wc.Status)
	assert.Equal(t, "written", string(buf[30000:30007]))
}

func TestDeviceBadRKeyFailsBothSides(t *testing.T) {
	p := newPair(t, rdma.QPConfig{SignalAll: true})
	require.NoError(t, p.client.PostSend([]rdma.SendWR{{ID: 9, Op: rdma.OpRead,
		SGL: []rdma.SGE{rdma.SGEOf(p.mr, 0, 8)}, RemoteAddr: p.mr.Addr(), RKey: p.mr.RKey() ^ 0xff}}))
	wc := waitOne(t, p.ccq)
	assert.Equal(t, uint64(9), wc.ID)
	assert.Equal(t, rdma.RemAccessErr, wc.Status)
	assert.Equal(t, rdma.WCRead, wc.Opcode, "the opcode comes from the ring, not the device")
	<-p.client.Done()
	assert.ErrorIs(t, p.client.Err(), rdma.RemAccessErr)
}

func TestDeviceCloseFlushesOutstandingReceives(t *testing.T) {
	p := newPair(t, rdma.QPConfig{})
	require.NoError(t, p.server.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(p.mr, 0, 64)}}, {ID: 2}}))
	require.NoError(t, p.server.Close())
	for _, want := range []uint64{1, 2} {
		wc := waitOne(t, p.scq)
		assert.Equal(t, want, wc.ID)
		assert.Equal(t, rdma.WRFlushErr, wc.Status)
		assert.Equal(t, rdma.WCRecv, wc.Opcode)
	}
	// The drain markers follow and are not returned.
	n, err := p.scq.Poll(make([]rdma.WC, 4))
	assert.NoError(t, err)
	assert.Zero(t, n)
	assert.ErrorIs(t, p.server.PostRecv([]rdma.RecvWR{{ID: 3}}), rdma.ErrInvalidState)
	<-p.client.Done()
}

func TestDeviceReject(t *testing.T) {
	requireDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pd, err := rdma.OpenPD("rdma://" + testAddr())
	require.NoError(t, err)
	defer pd.Close()
	cq, err := pd.CreateCQ(16)
	require.NoError(t, err)
	defer cq.Close()
	l, err := rdma.Listen(ctx, "rdma://"+testAddr())
	require.NoError(t, err)
	defer l.Close()
	go func() {
		if req, err := l.Accept(ctx); err == nil {
			req.Reject([]byte("no"))
		}
	}()
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
	require.NoError(t, err)
	defer qp.Close()
	_, err = qp.Connect(ctx, strings.TrimPrefix(l.Addr(), "rdma://"), []byte("hello"))
	var rej *rdma.RejectError
	require.True(t, errors.As(err, &rej), "got %v", err)
	assert.True(t, strings.HasPrefix(string(rej.Private), "no"))
	assert.ErrorIs(t, err, rdma.ErrConnRefused)
}
