package shm

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

func TestRegistered(t *testing.T) {
	assert.Contains(t, rdma.Schemes(), "shm")
}

func TestSendRecvSGL(t *testing.T) {
	p := newPair(t, pairOpts{privA: []byte("hello"), privB: []byte("welcome")})
	assert.Equal(t, []byte("welcome"), p.reply)
	srcMR := alloc(t, p.pdA, 8192, rdma.AccessLocalWrite)
	copy(srcMR.Bytes(), pattern(8192, 1))
	dst := make([]byte, 8192)
	dstMR := register(t, p.pdB, dst, rdma.AccessLocalWrite)

	// Two Recvs with three SGEs each, filled by two Sends with two SGEs.
	require.NoError(t, p.b.PostRecv([]rdma.RecvWR{
		{ID: 10, SGL: []rdma.SGE{rdma.SGEOf(dstMR, 0, 100), rdma.SGEOf(dstMR, 100, 1000), rdma.SGEOf(dstMR, 1100, 2996)}},
		{ID: 11, SGL: []rdma.SGE{rdma.SGEOf(dstMR, 4096, 4096)}},
	}))
	require.NoError(t, p.a.PostSend([]rdma.SendWR{
		{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(srcMR, 0, 3000), rdma.SGEOf(srcMR, 3000, 1000)}},
		{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(srcMR, 4096, 10), rdma.SGEOf(srcMR, 4106, 20)}},
	}))
	wcs := waitWC(t, p.cqB, 2)
	assert.Equal(t, rdma.WC{ID: 10, Status: rdma.Success, Opcode: rdma.WCRecv, QPNum: p.b.Num(), ByteLen: 4000}, wcs[0])
	assert.Equal(t, rdma.WC{ID: 11, Status: rdma.Success, Opcode: rdma.WCRecv, QPNum: p.b.Num(), ByteLen: 30}, wcs[1])
	assert.Equal(t, pattern(8192, 1)[:4000], dst[:4000])
	assert.Equal(t, pattern(8192, 1)[4096:4126], dst[4096:4126])
	sw := waitWC(t, p.cqA, 2)
	assert.Equal(t, uint64(1), sw[0].ID)
	assert.Equal(t, rdma.WCSend, sw[0].Opcode)
	assert.Equal(t, uint64(2), sw[1].ID)
	assert.NoError(t, sw[1].Status.Err())
}

// A message larger than the ring travels in fragments.
func TestSendLarge(t *testing.T) {
	p := newPair(t, pairOpts{})
	const n = 3<<20 + 123
	src := alloc(t, p.pdA, n, rdma.AccessLocalWrite)
	copy(src.Bytes(), pattern(n, 3))
	dst := alloc(t, p.pdB, n, rdma.AccessLocalWrite)
	for round := 0; round < 3; round++ {
		clear(dst.Bytes())
		require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 1, SGL: sge(dst, 0, n)}}))
		require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sge(src, 0, n)}}))
		wc := waitWC(t, p.cqB, 1)[0]
		require.NoError(t, wc.Status.Err())
		assert.Equal(t, uint32(n), wc.ByteLen)
		require.True(t, string(src.Bytes()) == string(dst.Bytes()), "payload differs")
		require.NoError(t, waitWC(t, p.cqA, 1)[0].Status.Err())
	}
}

func TestSendZeroLength(t *testing.T) {
	p := newPair(t, pairOpts{})
	require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 5}}))
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 6, Op: rdma.OpSend, Flags: rdma.Signaled}}))
	wc := waitWC(t, p.cqB, 1)[0]
	assert.Equal(t, rdma.WC{ID: 5, Opcode: rdma.WCRecv, QPNum: p.b.Num()}, wc)
	assert.Equal(t, uint64(6), waitWC(t, p.cqA, 1)[0].ID)
}

func TestInlineUnregistered(t *testing.T) {
	p := newPair(t, pairOpts{})
	dst := alloc(t, p.pdB, 4096, rdma.AccessAll)
	require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 1, SGL: sge(dst, 0, 256)}}))
	a, b := []byte("inline "), []byte("bytes")
	require.NoError(t, p.a.PostSend([]rdma.SendWR{
		{ID: 2, Op: rdma.OpSend, Flags: rdma.Inline | rdma.Signaled, SGL: []rdma.SGE{rawSGE(a), rawSGE(b)}},
		{ID: 3, Op: rdma.OpWrite, Flags: rdma.Inline | rdma.Signaled, SGL: []rdma.SGE{rawSGE(b)}, RemoteAddr: dst.Addr() + 1000, RKey: dst.RKey()},
	}))
	// The buffers may be reused at once.
	copy(a, "XXXXXXX")
	copy(b, "YYYYY")
	wc := waitWC(t, p.cqB, 1)[0]
	require.NoError(t, wc.Status.Err())
	assert.Equal(t, "inline bytes", string(dst.Bytes()[:wc.ByteLen]))
	sw := waitWC(t, p.cqA, 2)
	assert.NoError(t, sw[1].Status.Err())
	assert.Equal(t, "bytes", string(dst.Bytes()[1000:1005]))
}

func TestPostErrors(t *testing.T) {
	pd := openTestPD(t)
	cq, err := pd.CreateCQ(16)
	require.NoError(t, err)
	defer cq.Close()
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, MaxSendWR: 2, MaxRecvWR: 2, MaxSGE: 1, MaxInline: 8})
	require.NoError(t, err)
	defer qp.Close()
	var pe *rdma.PostError

	err = qp.PostSend([]rdma.SendWR{{Op: rdma.OpSend}})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 0, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrInvalidState, "PostSend before RTS")

	err = qp.PostRecv([]rdma.RecvWR{{ID: 1}, {ID: 2, SGL: make([]rdma.SGE, 2)}})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrTooManySGE)
	err = qp.PostRecv([]rdma.RecvWR{{ID: 3}, {ID: 4}})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrQueueFull)

	p := newPair(t, pairOpts{cfgA: rdma.QPConfig{MaxSGE: 1, MaxInline: 8}})
	buf := make([]byte, 16)
	err = p.a.PostSend([]rdma.SendWR{{Op: rdma.OpSend, Flags: rdma.Inline, SGL: []rdma.SGE{rawSGE(buf)}}})
	assert.ErrorIs(t, err, rdma.ErrInlineTooLarge)
	err = p.a.PostSend([]rdma.SendWR{{Op: rdma.OpSend, SGL: make([]rdma.SGE, 2)}})
	assert.ErrorIs(t, err, rdma.ErrTooManySGE)
	assert.Equal(t, rdma.StateRTS, p.a.State(), "post errors leave the QP alone")

	// After Close, posting is an invalid state.
	require.NoError(t, qp.Close())
	assert.ErrorIs(t, qp.PostRecv([]rdma.RecvWR{{ID: 9}}), rdma.ErrInvalidState)
	assert.ErrorIs(t, qp.Close(), rdma.ErrClosed)
	// The two Recvs posted before were flushed.
	wcs := waitWC(t, cq, 2)
	assert.Equal(t, rdma.WRFlushErr, wcs[0].Status)
	assert.Equal(t, uint64(1), wcs[0].ID)
	assert.Equal(t, uint64(3), wcs[1].ID)
}

func TestSendQueueFull(t *testing.T) {
	// No Recvs at B: Sends wait there, so their slots stay taken.
	p := newPair(t, pairOpts{cfgA: rdma.QPConfig{MaxSendWR: 4}, cfgB: rdma.QPConfig{RNRRetry: 1000, RNRTimeout: hangLimit}})
	wrs := make([]rdma.SendWR, 6)
	for i := range wrs {
		wrs[i] = rdma.SendWR{ID: uint64(i), Op: rdma.OpSend, Flags: rdma.Signaled}
	}
	err := p.a.PostSend(wrs)
	var pe *rdma.PostError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 4, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrQueueFull)
	// Recvs let them through.
	recvs := make([]rdma.RecvWR, 4)
	require.NoError(t, p.b.PostRecv(recvs))
	for i, wc := range waitWC(t, p.cqA, 4) {
		assert.Equal(t, uint64(i), wc.ID)
		assert.NoError(t, wc.Status.Err())
	}
	require.NoError(t, p.a.PostSend(wrs[4:5]))
	require.NoError(t, p.b.PostRecv(recvs[:1]))
	assert.Equal(t, uint64(4), waitWC(t, p.cqA, 1)[0].ID)
}

func TestImmediateAndInvalidate(t *testing.T) {
	p := newPair(t, pairOpts{})
	mrB := alloc(t, p.pdB, 4096, rdma.AccessAll)
	mrA := alloc(t, p.pdA, 4096, rdma.AccessAll)
	copy(mrA.Bytes(), "written with imm")
	require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 1, SGL: sge(mrB, 0, 64)}, {ID: 2, SGL: sge(mrB, 64, 64)}, {ID: 3, SGL: sge(mrB, 128, 64)}}))
	require.NoError(t, p.a.PostSend([]rdma.SendWR{
		{ID: 11, Op: rdma.OpSendImm, Imm: 0xfeedf00d, SGL: sge(mrA, 0, 7)},
		{ID: 12, Op: rdma.OpWriteImm, Imm: 42, SGL: sge(mrA, 0, 16), RemoteAddr: mrB.Addr() + 1024, RKey: mrB.RKey()},
		{ID: 13, Op: rdma.OpSendInv, InvRKey: mrB.RKey(), Flags: rdma.Signaled},
	}))
	wcs := waitWC(t, p.cqB, 3)
	assert.Equal(t, rdma.WC{ID: 1, Opcode: rdma.WCRecv, Flags: rdma.WCWithImm, Imm: 0xfeedf00d, ByteLen: 7, QPNum: p.b.Num()}, wcs[0])
	assert.Equal(t, rdma.WC{ID: 2, Opcode: rdma.WCRecvWriteImm, Flags: rdma.WCWithImm, Imm: 42, ByteLen: 16, QPNum: p.b.Num()}, wcs[1])
	assert.Equal(t, rdma.WC{ID: 3, Opcode: rdma.WCRecv, Flags: rdma.WCWithInv, InvRKey: mrB.RKey(), QPNum: p.b.Num()}, wcs[2])
	assert.Equal(t, "written with imm", string(mrB.Bytes()[1024:1040]), "WriteImm data is visible with its completion")
	assert.Equal(t, make([]byte, 64), mrB.Bytes()[64:128], "the Recv of a WriteImm is untouched")
	assert.Equal(t, uint64(13), waitWC(t, p.cqA, 1)[0].ID)

	// The rkey is invalid now: a Write with it fails, both sides go to Error.
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 14, Op: rdma.OpWrite, SGL: sge(mrA, 0, 8), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}}))
	wc := waitWC(t, p.cqA, 1)[0]
	assert.Equal(t, rdma.RemAccessErr, wc.Status)
	waitDone(t, p.b)
	assert.ErrorIs(t, p.b.Err(), rdma.RemAccessErr)
}

func TestSendInvUnknownKey(t *testing.T) {
	p := newPair(t, pairOpts{})
	require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 1}}))
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 2, Op: rdma.OpSendInv, InvRKey: 0x12345601}}))
	assert.Equal(t, rdma.RemInvReqErr, waitWC(t, p.cqA, 1)[0].Status)
	assert.Equal(t, rdma.RemInvReqErr, waitWC(t, p.cqB, 1)[0].Status)
	assert.ErrorIs(t, p.a.Err(), rdma.RemInvReqErr)
	assert.ErrorIs(t, p.b.Err(), rdma.RemInvReqErr)
}

func TestWriteReadOrder(t *testing.T) {
	p := newPair(t, pairOpts{cfgA: rdma.QPConfig{MaxSGE: 3}})
	const n = 1 << 20
	remote := alloc(t, p.pdB, n, rdma.AccessAll)
	src := alloc(t, p.pdA, n, rdma.AccessLocalWrite)
	copy(src.Bytes(), pattern(n, 9))
	sink := make([]byte, n)
	sinkMR := register(t, p.pdA, sink, rdma.AccessLocalWrite)
	note := alloc(t, p.pdB, 64, rdma.AccessLocalWrite)
	require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 1, SGL: sge(note, 0, 64)}}))
	require.NoError(t, p.a.PostSend([]rdma.SendWR{
		{ID: 1, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(src, 0, 1000), rdma.SGEOf(src, 1000, n-1000)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()},
		{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(sinkMR, 0, 5), rdma.SGEOf(sinkMR, 5, n-5)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()},
		{ID: 3, Op: rdma.OpSend, Flags: rdma.Signaled | rdma.Fence},
	}))
	wcs := waitWC(t, p.cqA, 2)
	assert.Equal(t, rdma.WC{ID: 2, Opcode: rdma.WCRead, QPNum: p.a.Num(), ByteLen: n}, wcs[0])
	assert.Equal(t, uint64(3), wcs[1].ID)
	require.True(t, string(sink) == string(src.Bytes()), "a Read after a Write sees it")
	waitWC(t, p.cqB, 1)
	require.True(t, string(remote.Bytes()) == string(src.Bytes()), "a Write is visible when the following Send arrives")
}

func TestUnsignaled(t *testing.T) {
	p := newPair(t, pairOpts{cfgA: rdma.QPConfig{MaxSendWR: 8}})
	remote := alloc(t, p.pdB, 4096, rdma.AccessAll)
	src := alloc(t, p.pdA, 4096, rdma.AccessAll)
	for i := 0; i < 100; i++ {
		flags := rdma.SendFlags(0)
		if i%10 == 9 {
			flags = rdma.Signaled
		}
		require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: uint64(i), Op: rdma.OpWrite, Flags: flags, SGL: sge(src, 0, 64), RemoteAddr: remote.Addr(), RKey: remote.RKey()}}))
	}
	wcs := waitWC(t, p.cqA, 10)
	for i, wc := range wcs {
		assert.Equal(t, uint64(i*10+9), wc.ID)
	}
	n, err := p.cqA.Poll(make([]rdma.WC, 4))
	require.NoError(t, err)
	assert.Zero(t, n, "unsignaled WRs complete silently")
}

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name   string
		op     rdma.Opcode
		access rdma.Access
		rkey   func(rdma.MR) uint32
		off    int
		n      int
	}{
		{"WriteWrongKey", rdma.OpWrite, rdma.AccessAll, func(m rdma.MR) uint32 { return m.RKey() ^ 0x100 }, 0, 8},
		{"ReadWrongGeneration", rdma.OpRead, rdma.AccessAll, func(m rdma.MR) uint32 { return m.RKey() + 1 }, 0, 8},
		{"WriteOutOfBounds", rdma.OpWrite, rdma.AccessAll, rdma.MR.RKey, 4000, 97},
		{"ReadBeforeRegion", rdma.OpRead, rdma.AccessAll, rdma.MR.RKey, -1, 8},
		{"WriteWithoutRight", rdma.OpWrite, rdma.AccessLocalWrite | rdma.AccessRemoteRead, rdma.MR.RKey, 0, 8},
		{"ReadWithoutRight", rdma.OpRead, rdma.AccessLocalWrite | rdma.AccessRemoteWrite, rdma.MR.RKey, 0, 8},
		{"WriteImmWithoutRight", rdma.OpWriteImm, rdma.AccessLocalWrite, rdma.MR.RKey, 0, 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			remote := alloc(t, p.pdB, 4096, c.access)
			copy(remote.Bytes(), pattern(4096, 5))
			local := alloc(t, p.pdA, 4096, rdma.AccessLocalWrite)
			copy(local.Bytes(), pattern(4096, 6))
			require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 1}}))
			require.NoError(t, p.a.PostSend([]rdma.SendWR{
				{ID: 7, Op: c.op, SGL: sge(local, 0, c.n), RemoteAddr: uint64(int64(remote.Addr()) + int64(c.off)), RKey: c.rkey(remote)},
				{ID: 8, Op: rdma.OpSend, Flags: rdma.Signaled},
			}))
			wcs := waitWC(t, p.cqA, 2)
			assert.Equal(t, rdma.RemAccessErr, wcs[0].Status)
			assert.Equal(t, uint64(7), wcs[0].ID)
			assert.Equal(t, rdma.WRFlushErr, wcs[1].Status)
			assert.ErrorIs(t, p.a.Err(), rdma.RemAccessErr)
			waitDone(t, p.b)
			assert.ErrorIs(t, p.b.Err(), rdma.RemAccessErr)
			assert.Equal(t, pattern(4096, 5), remote.Bytes(), "nothing written at the peer")
			assert.Equal(t, pattern(4096, 6), local.Bytes(), "nothing read from the peer")
			assert.Equal(t, rdma.WRFlushErr, waitWC(t, p.cqB, 1)[0].Status, "B's Recv is flushed")
		})
	}
}

func TestLocalProtection(t *testing.T) {
	p := newPair(t, pairOpts{})
	remote := alloc(t, p.pdB, 4096, rdma.AccessAll)
	ro := alloc(t, p.pdA, 4096, 0)
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpRead, SGL: sge(ro, 0, 8), RemoteAddr: remote.Addr(), RKey: remote.RKey()}}))
	assert.Equal(t, rdma.LocProtErr, waitWC(t, p.cqA, 1)[0].Status, "a Read sink needs LocalWrite")
	waitDone(t, p.b)
	assert.ErrorIs(t, p.b.Err(), rdma.WRFlushErr)
}

func TestRecvTooSmall(t *testing.T) {
	p := newPair(t, pairOpts{})
	src := alloc(t, p.pdA, 4096, rdma.AccessAll)
	dst := alloc(t, p.pdB, 4096, rdma.AccessAll)
	require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 1, SGL: sge(dst, 0, 100)}, {ID: 2, SGL: sge(dst, 100, 100)}}))
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 3, Op: rdma.OpSend, SGL: sge(src, 0, 101)}}))
	wcs := waitWC(t, p.cqB, 2)
	assert.Equal(t, rdma.LocLenErr, wcs[0].Status)
	assert.Equal(t, rdma.WRFlushErr, wcs[1].Status)
	assert.Equal(t, rdma.RemInvReqErr, waitWC(t, p.cqA, 1)[0].Status)
	assert.ErrorIs(t, p.a.Err(), rdma.RemInvReqErr)
	assert.ErrorIs(t, p.b.Err(), rdma.LocLenErr)
}

func TestRNRExceeded(t *testing.T) {
	cfg := rdma.QPConfig{RNRRetry: 1, RNRTimeout: 1e6}
	p := newPair(t, pairOpts{cfgA: cfg, cfgB: cfg})
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpSend}, {ID: 2, Op: rdma.OpSend}}))
	wcs := waitWC(t, p.cqA, 2)
	assert.Equal(t, rdma.RNRRetryExcErr, wcs[0].Status)
	assert.Equal(t, rdma.WRFlushErr, wcs[1].Status)
	assert.ErrorIs(t, p.a.Err(), rdma.RNRRetryExcErr)
	waitDone(t, p.b)
	assert.ErrorIs(t, p.b.Err(), rdma.RNRRetryExcErr)
}

func TestRNRRescued(t *testing.T) {
	cfg := rdma.QPConfig{RNRRetry: 1000, RNRTimeout: hangLimit}
	p := newPair(t, pairOpts{cfgA: cfg, cfgB: cfg})
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpSendImm, Imm: 3, Flags: rdma.Signaled}}))
	q := p.b.(*qp)
	// Wait until B's provider goroutine is waiting for a Recv.
	for !q.rnrWait.Load() {
		runtime.Gosched()
	}
	require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: 9}}))
	wc := waitWC(t, p.cqB, 1)[0]
	assert.Equal(t, uint64(9), wc.ID)
	assert.Equal(t, uint32(3), wc.Imm)
	assert.NoError(t, waitWC(t, p.cqA, 1)[0].Status.Err())
}

func TestSetErrorFlushes(t *testing.T) {
	cfg := rdma.QPConfig{RNRRetry: 1000, RNRTimeout: hangLimit}
	p := newPair(t, pairOpts{cfgA: cfg, cfgB: cfg})
	require.NoError(t, p.a.PostRecv([]rdma.RecvWR{{ID: 100}, {ID: 101}}))
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpSend}, {ID: 2, Op: rdma.OpSend}}))
	p.a.SetError()
	assert.Equal(t, rdma.StateError, p.a.State())
	wcs := waitWC(t, p.cqA, 4)
	ids := map[uint64]rdma.WCStatus{}
	for _, wc := range wcs {
		ids[wc.ID] = wc.Status
	}
	assert.Equal(t, map[uint64]rdma.WCStatus{1: rdma.WRFlushErr, 2: rdma.WRFlushErr, 100: rdma.WRFlushErr, 101: rdma.WRFlushErr}, ids)
	assert.ErrorIs(t, p.a.Err(), rdma.WRFlushErr)
	waitDone(t, p.b)
	assert.ErrorIs(t, p.b.Err(), rdma.WRFlushErr)
	// Later WRs are flushed too.
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 3, Op: rdma.OpSend}}))
	require.NoError(t, p.a.PostRecv([]rdma.RecvWR{{ID: 102}}))
	wcs = waitWC(t, p.cqA, 2)
	for _, wc := range wcs {
		assert.Equal(t, rdma.WRFlushErr, wc.Status)
	}
}

func TestConnReject(t *testing.T) {
	l, err := rdma.Listen(context.Background(), "shm://"+freshName())
	require.NoError(t, err)
	defer l.Close()
	go func() {
		req, err := l.Accept(context.Background())
		if err == nil {
			req.Reject([]byte("no room"))
		}
	}()
	pd := openTestPD(t)
	cq, err := pd.CreateCQ(8)
	require.NoError(t, err)
	defer cq.Close()
	_, _, err = rdma.Dial(context.Background(), l.Addr(), pd, rdma.QPConfig{SendCQ: cq}, []byte("let me in"))
	var rej *rdma.RejectError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, []byte("no room"), rej.Private)
	assert.ErrorIs(t, err, rdma.ErrConnRefused)

	_, _, err = rdma.Dial(context.Background(), "shm://"+freshName(), pd, rdma.QPConfig{SendCQ: cq}, nil)
	assert.ErrorIs(t, err, rdma.ErrConnRefused, "nothing listening")
	assert.False(t, errors.As(err, &rej))
}

func TestListenerCloseUnblocksAccept(t *testing.T) {
	l, err := rdma.Listen(context.Background(), "shm://"+freshName())
	require.NoError(t, err)
	errc := make(chan error)
	go func() {
		_, err := l.Accept(context.Background())
		errc <- err
	}()
	require.NoError(t, l.Close())
	assert.ErrorIs(t, <-errc, rdma.ErrClosed)
	_, err = rdma.Listen(context.Background(), l.Addr())
	assert.NoError(t, err, "the name is free again")
}

func TestRegisterRemoteNotSupported(t *testing.T) {
	pd := openTestPD(t)
	_, err := pd.Register(make([]byte, 64), rdma.AccessRemoteWrite|rdma.AccessLocalWrite)
	assert.ErrorIs(t, err, rdma.ErrNotSupported)
	mr, err := pd.Register(make([]byte, 64), rdma.AccessLocalWrite)
	require.NoError(t, err)
	assert.ErrorIs(t, pd.Close(), ErrPDInUse)
	require.NoError(t, mr.Deregister())
	assert.ErrorIs(t, mr.Deregister(), rdma.ErrClosed)
}

func TestManyQPs(t *testing.T) {
	l, err := rdma.Listen(context.Background(), "shm://"+freshName())
	require.NoError(t, err)
	defer l.Close()
	pdA, pdB := openTestPD(t), openTestPD(t)
	remote := alloc(t, pdB, 64<<10, rdma.AccessAll)
	local := alloc(t, pdA, 64<<10, rdma.AccessAll)
	const n = 64
	pairs := make([]*pair, n)
	for i := range pairs {
		pairs[i] = newPair(t, pairOpts{l: l, pdA: pdA, pdB: pdB})
	}
	for i, p := range pairs {
		copy(local.Bytes()[i*1024:], pattern(1024, byte(i)))
		require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: uint64(i)}}))
		require.NoError(t, p.a.PostSend([]rdma.SendWR{
			{ID: 1, Op: rdma.OpWrite, SGL: sge(local, i*1024, 1024), RemoteAddr: remote.Addr() + uint64(i*1024), RKey: remote.RKey()},
			{ID: 2, Op: rdma.OpSendImm, Imm: uint32(i), Flags: rdma.Signaled},
		}))
	}
	for i, p := range pairs {
		wc := waitWC(t, p.cqB, 1)[0]
		require.NoError(t, wc.Status.Err())
		assert.Equal(t, uint32(i), wc.Imm)
		assert.Equal(t, pattern(1024, byte(i)), remote.Bytes()[i*1024:(i+1)*1024])
		assert.Equal(t, uint64(2), waitWC(t, p.cqA, 1)[0].ID)
	}
	assert.Len(t, pdA.(*pd).views, 1, "QPs of one PD share the view of the peer PD")
}

// A dialer that never sends its request does not hold up Listener.Close.
func TestListenerCloseWithSilentDialer(t *testing.T) {
	l, err := rdma.Listen(context.Background(), "shm://"+freshName())
	require.NoError(t, err)
	c, err := net.Dial("unixpacket", socketName(hostOf(l)))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, l.Close())
	// The listener hung up on the silent dialer.
	_, err = c.Read(make([]byte, 8))
	assert.Error(t, err)
}
