package conformance

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// testBatch1000: 1000 Recvs in one PostRecv, 1000 Sends in one PostSend,
// then 1000 Writes in one PostSend; every completion in order, every byte
// in place.
func testBatch1000(t *testing.T, env Env) {
	const n, slot = 1000, 64
	p := setup(t, env, 4096)
	src := p.allocA(n*slot, rdma.AccessLocalWrite, 1)
	dst := p.allocB(n*slot, rdma.AccessLocalWrite, 2)
	remote := p.allocB(n*slot, rdma.AccessAll, 3)
	sink := p.allocA(n*slot, rdma.AccessLocalWrite, 4)
	cfg := rdma.QPConfig{MaxSendWR: n, MaxRecvWR: n}
	p.connect(pairOptions{cfgA: cfg, cfgB: cfg, primeB: func(qp rdma.QP) error {
		wrs := make([]rdma.RecvWR, n)
		for i := range wrs {
			wrs[i] = rdma.RecvWR{ID: uint64(i), SGL: sgl(dst, piece{i * slot, slot})}
		}
		return qp.PostRecv(wrs)
	}})

	// Message i is i%slot+1 bytes from slot i of src.
	length := func(i int) int { return i%slot + 1 }
	wantDst := bytes.Clone(dst.Bytes())
	sends := make([]rdma.SendWR, n)
	for i := range sends {
		copy(wantDst[i*slot:], src.Bytes()[i*slot:i*slot+length(i)])
		sends[i] = rdma.SendWR{ID: uint64(i), Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(src, piece{i * slot, length(i)})}
	}
	postSend(t, p.a, sends...)
	for i, wc := range waitWC(t, p.cqB, n) {
		requireWC(t, wc, uint64(i), rdma.WCRecv, rdma.Success)
		require.Equal(t, uint32(length(i)), wc.ByteLen, "receive %d", i)
	}
	for i, wc := range waitWC(t, p.cqA, n) {
		requireWC(t, wc, uint64(i), rdma.WCSend, rdma.Success)
	}
	requireBytes(t, wantDst, dst.Bytes(), "1000 receive buffers")

	// Write i puts length(i) bytes at an odd offset of slot i.
	wantR := bytes.Clone(remote.Bytes())
	writes := make([]rdma.SendWR, n)
	for i := range writes {
		off := i*slot + (slot-length(i))/2
		copy(wantR[off:], src.Bytes()[i*slot:i*slot+length(i)])
		writes[i] = rdma.SendWR{ID: uint64(n + i), Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: sgl(src, piece{i * slot, length(i)}),
			RemoteAddr: remote.Addr() + uint64(off), RKey: remote.RKey()}
	}
	postSend(t, p.a, writes...)
	for i, wc := range waitWC(t, p.cqA, n) {
		requireWC(t, wc, uint64(n+i), rdma.WCWrite, rdma.Success)
	}
	postSend(t, p.a, rdma.SendWR{ID: 1, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sgl(sink, piece{0, n * slot}),
		RemoteAddr: remote.Addr(), RKey: remote.RKey()})
	requireWC(t, waitWC(t, p.cqA, 1)[0], 1, rdma.WCRead, rdma.Success)
	requireBytes(t, wantR, remote.Bytes(), "target after 1000 Writes")
	requireBytes(t, wantR, sink.Bytes(), "Read of 1000 Writes")
}

// testQueueFull: posting past MaxRecvWR or MaxSendWR outstanding WRs
// fails with ErrQueueFull at the first WR that does not fit.
func testQueueFull(t *testing.T, env Env) {
	const limit = 16
	t.Run("Recv", func(t *testing.T) {
		p := setup(t, env, 0)
		buf := p.allocA(64, rdma.AccessLocalWrite, 1)
		qp, err := p.pdA.CreateQP(rdma.QPConfig{SendCQ: p.cqA, MaxRecvWR: limit})
		require.NoError(t, err)
		p.track(qp)
		wrs := make([]rdma.RecvWR, limit+5)
		for i := range wrs {
			wrs[i] = rdma.RecvWR{ID: uint64(i), SGL: sgl(buf, piece{0, 64})}
		}
		// A QP in Init takes receives and cannot complete them, so
		// exactly limit fit.
		require.Equal(t, limit, postErrorIndex(t, qp.PostRecv(wrs), rdma.ErrQueueFull))
		require.Equal(t, 0, postErrorIndex(t, qp.PostRecv(wrs[:1]), rdma.ErrQueueFull))
	})
	t.Run("Send", func(t *testing.T) {
		const batch = 200
		p := setup(t, env, 0)
		src := p.allocA(64, rdma.AccessLocalWrite, 1)
		dst := p.allocB(batch*64, rdma.AccessLocalWrite, 2)
		// The peer has no Recv posted, so no Send can be acknowledged
		// while the batch is posted; the RNR window is wide enough for
		// the Recvs posted after it to rescue every Send.
		cfgA := rdma.QPConfig{MaxSendWR: limit, SignalAll: true, RNRRetry: 7, RNRTimeout: time.Second}
		cfgB := rdma.QPConfig{MaxRecvWR: batch, RNRRetry: 7, RNRTimeout: time.Second}
		p.connect(pairOptions{cfgA: cfgA, cfgB: cfgB})
		wrs := make([]rdma.SendWR, batch)
		for i := range wrs {
			wrs[i] = rdma.SendWR{ID: uint64(i), Op: rdma.OpSend, SGL: sgl(src, piece{0, 64})}
		}
		// A provider may retire WRs while the batch is posted (an iWARP
		// Send once handed to the transport), so more than limit may
		// fit, but not all of a batch whose Sends no Recv has taken, and
		// never fewer than limit on an empty queue.
		idx := postErrorIndex(t, p.a.PostSend(wrs), rdma.ErrQueueFull)
		require.GreaterOrEqual(t, idx, limit, "WRs posted before the queue was full")
		require.Less(t, idx, batch)
		require.NoError(t, recvSlots(dst, batch, 64, 0)(p.b))
		for i, wc := range waitWC(t, p.cqA, idx) {
			requireWC(t, wc, uint64(i), rdma.WCSend, rdma.Success)
		}
		requireSuccess(t, waitWC(t, p.cqB, idx))
		requireEmpty(t, p.cqA)
		// Drained, the queue takes limit WRs again.
		postSend(t, p.a, wrs[:limit]...)
		requireSuccess(t, waitWC(t, p.cqA, limit))
		requireSuccess(t, waitWC(t, p.cqB, limit))
	})
}

// testPostErrors: PostSend before the connection and anything after
// Close fail with ErrInvalidState, as a *PostError.
func testPostErrors(t *testing.T, env Env) {
	p := setup(t, env, 0)
	buf := p.allocA(64, rdma.AccessLocalWrite, 1)
	qp, err := p.pdA.CreateQP(rdma.QPConfig{SendCQ: p.cqA})
	require.NoError(t, err)
	p.track(qp)
	send := rdma.SendWR{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(buf, piece{0, 8})}
	recv := rdma.RecvWR{ID: 2, SGL: sgl(buf, piece{0, 64})}
	require.Equal(t, 0, postErrorIndex(t, qp.PostSend([]rdma.SendWR{send}), rdma.ErrInvalidState), "PostSend in Init")

	p.connect(pairOptions{})
	require.NoError(t, p.a.Close())
	require.Equal(t, 0, postErrorIndex(t, p.a.PostSend([]rdma.SendWR{send}), rdma.ErrInvalidState), "PostSend after Close")
	require.Equal(t, 0, postErrorIndex(t, p.a.PostRecv([]rdma.RecvWR{recv}), rdma.ErrInvalidState), "PostRecv after Close")
	require.Error(t, waitDone(t, p.b, "peer of a closed QP"), "the peer of a closed QP says why it is in Error")
}

// testUnsignaled: unsignaled WRs complete silently; a signaled WR after
// them gives the one completion, and by then all their work is done.
func testUnsignaled(t *testing.T, env Env) {
	const writes, sends, slot = 200, 50, 1000
	p := setup(t, env, 0)
	src := p.allocA(writes*slot, rdma.AccessLocalWrite, 1)
	remote := p.allocB(writes*slot, rdma.AccessAll, 2)
	sink := p.allocA(writes*slot, rdma.AccessLocalWrite, 3)
	dst := p.allocB(sends*slot, rdma.AccessLocalWrite, 4)
	p.connect(pairOptions{cfgA: rdma.QPConfig{MaxSendWR: 256}, primeB: recvSlots(dst, sends, slot, 0)})

	wrs := make([]rdma.SendWR, 0, writes+1)
	for i := range writes {
		wrs = append(wrs, rdma.SendWR{ID: uint64(i), Op: rdma.OpWrite, SGL: sgl(src, piece{i * slot, slot}),
			RemoteAddr: remote.Addr() + uint64(i*slot), RKey: remote.RKey()})
	}
	wrs = append(wrs, rdma.SendWR{ID: 1000, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sgl(sink, piece{0, writes * slot}),
		RemoteAddr: remote.Addr(), RKey: remote.RKey()})
	postSend(t, p.a, wrs...)
	requireWC(t, waitWC(t, p.cqA, 1)[0], 1000, rdma.WCRead, rdma.Success)
	requireBytes(t, src.Bytes(), remote.Bytes(), "target of %d unsignaled Writes", writes)
	requireBytes(t, src.Bytes(), sink.Bytes(), "a signaled Read after %d unsignaled Writes", writes)

	wrs = wrs[:0]
	for i := range sends {
		flags := rdma.SendFlags(0)
		if i == sends-1 {
			flags = rdma.Signaled
		}
		wrs = append(wrs, rdma.SendWR{ID: uint64(2000 + i), Op: rdma.OpSend, Flags: flags, SGL: sgl(src, piece{i * slot, slot})})
	}
	postSend(t, p.a, wrs...)
	requireWC(t, waitWC(t, p.cqA, 1)[0], uint64(2000+sends-1), rdma.WCSend, rdma.Success)
	for i, wc := range waitWC(t, p.cqB, sends) {
		requireWC(t, wc, uint64(i), rdma.WCRecv, rdma.Success)
	}
	requireBytes(t, src.Bytes()[:sends*slot], dst.Bytes(), "receives of unsignaled Sends")

	// Nothing else completes: the next completion is the next signaled WR.
	postSend(t, p.a, rdma.SendWR{ID: 3000, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sgl(sink, piece{0, 8}),
		RemoteAddr: remote.Addr(), RKey: remote.RKey()})
	requireWC(t, waitWC(t, p.cqA, 1)[0], 3000, rdma.WCRead, rdma.Success)
	requireEmpty(t, p.cqA)
}
