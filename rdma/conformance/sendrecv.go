package conformance

import (
	"bytes"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// piece is n bytes at offset off of a region.
type piece struct{ off, n int }

// sgl returns the SGL naming pieces of mr.
func sgl(mr rdma.MR, pieces ...piece) []rdma.SGE {
	s := make([]rdma.SGE, len(pieces))
	for i, p := range pieces {
		s[i] = rdma.SGEOf(mr, p.off, p.n)
	}
	return s
}

// gather concatenates pieces of b.
func gather(b []byte, pieces ...piece) []byte {
	var out []byte
	for _, p := range pieces {
		out = append(out, b[p.off:p.off+p.n]...)
	}
	return out
}

// scatter copies msg into pieces of b in order, as a receive does, and
// returns how many bytes it placed.
func scatter(b, msg []byte, pieces ...piece) int {
	placed := 0
	for _, p := range pieces {
		if len(msg) == 0 {
			break
		}
		k := copy(b[p.off:p.off+p.n], msg)
		msg = msg[k:]
		placed += k
	}
	return placed
}

// sendRecvCase sends the gather list of src from one QP and receives it
// into the scatter list of dst on the other, then checks both completions
// and every byte of dst.
func sendRecvCase(t *testing.T, from, to rdma.QP, fromCQ, toCQ rdma.CQ, src, dst rdma.MR, g, s []piece, id uint64) {
	t.Helper()
	want := bytes.Clone(dst.Bytes())
	msg := gather(src.Bytes(), g...)
	require.Equal(t, len(msg), scatter(want, msg, s...), "test bug: the scatter list is too short")

	postRecv(t, to, rdma.RecvWR{ID: id, SGL: sgl(dst, s...)})
	postSend(t, from, rdma.SendWR{ID: id + 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(src, g...)})

	rwc := waitWC(t, toCQ, 1)[0]
	requireWC(t, rwc, id, rdma.WCRecv, rdma.Success)
	require.Equal(t, uint32(len(msg)), rwc.ByteLen, "WC.ByteLen of the receive")
	require.Equal(t, to.Num(), rwc.QPNum, "WC.QPNum of the receive")
	require.Zero(t, rwc.Flags, "WC.Flags of a plain Send's receive")
	swc := waitWC(t, fromCQ, 1)[0]
	requireWC(t, swc, id+1, rdma.WCSend, rdma.Success)
	require.Equal(t, from.Num(), swc.QPNum, "WC.QPNum of the send")
	requireBytes(t, want, dst.Bytes(), "receive buffer (scattered pieces and the bytes around them)")
}

// testSendRecvSGL: a Send gathered from several SGEs lands scattered over
// several SGEs of the Recv, in both directions, and nothing outside the
// scatter list changes.
func testSendRecvSGL(t *testing.T, env Env) {
	cfg := rdma.QPConfig{MaxSGE: 4}
	p := newPair(t, env, pairOptions{cfgA: cfg, cfgB: cfg})
	srcA := p.allocA(16384, rdma.AccessLocalWrite, 1)
	dstA := p.allocA(16384, rdma.AccessLocalWrite, 2)
	srcB := p.allocB(16384, rdma.AccessLocalWrite, 3)
	dstB := p.allocB(16384, rdma.AccessLocalWrite, 4)

	t.Run("AtoB", func(t *testing.T) {
		// 5100 bytes from three pieces into 6001 bytes of room: the last
		// piece is filled in part.
		g := []piece{{3, 7}, {100, 4093}, {5001, 1000}}
		s := []piece{{1, 1}, {17, 4000}, {9001, 2000}}
		sendRecvCase(t, p.a, p.b, p.cqA, p.cqB, srcA, dstB, g, s, 10)
	})
	t.Run("BtoA", func(t *testing.T) {
		// Four pieces into four, the message fills the scatter list exactly.
		g := []piece{{0, 1}, {4095, 4097}, {12000, 3}, {13001, 999}}
		s := []piece{{16383, 1}, {5, 3000}, {7001, 2099}, {11111, 1}}
		sendRecvCase(t, p.b, p.a, p.cqB, p.cqA, srcB, dstA, g, s, 20)
	})
	t.Run("TooManySGE", func(t *testing.T) {
		five := []piece{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}}
		err := p.a.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(srcA, five...)}})
		require.Equal(t, 0, postErrorIndex(t, err, rdma.ErrTooManySGE))
		err = p.a.PostRecv([]rdma.RecvWR{{ID: 2, SGL: sgl(dstA, five...)}})
		require.Equal(t, 0, postErrorIndex(t, err, rdma.ErrTooManySGE))
		requireEmpty(t, p.cqA)
		// The QP still works.
		sendRecvCase(t, p.a, p.b, p.cqA, p.cqB, srcA, dstB, []piece{{0, 10}}, []piece{{50, 10}}, 30)
	})
}

// testSendZeroLength: a Send with no SGEs consumes a Recv and completes it
// with ByteLen 0, leaving its buffer alone.
func testSendZeroLength(t *testing.T, env Env) {
	p := newPair(t, env, pairOptions{})
	dst := p.allocB(64, rdma.AccessLocalWrite, 1)
	orig := bytes.Clone(dst.Bytes())
	postRecv(t, p.b, rdma.RecvWR{ID: 1, SGL: sgl(dst, piece{0, 64})})
	postSend(t, p.a, rdma.SendWR{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled})
	rwc := waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 1, rdma.WCRecv, rdma.Success)
	require.Zero(t, rwc.ByteLen, "WC.ByteLen of an empty Send")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 2, rdma.WCSend, rdma.Success)
	requireBytes(t, orig, dst.Bytes(), "receive buffer after an empty Send")
}

// testRecvTooSmall: a Send longer than the Recv completes the Recv with
// LocLenErr and writes nothing beyond the Recv's buffer.
func testRecvTooSmall(t *testing.T, env Env) {
	p := newPair(t, env, pairOptions{})
	src := p.allocA(200, rdma.AccessLocalWrite, 1)
	dst := p.allocB(300, rdma.AccessLocalWrite, 2)
	orig := bytes.Clone(dst.Bytes())
	postRecv(t, p.b, rdma.RecvWR{ID: 1, SGL: sgl(dst, piece{50, 100})})
	postSend(t, p.a, rdma.SendWR{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(src, piece{0, 200})})
	rwc := waitWC(t, p.cqB, 1)[0]
	require.Equal(t, uint64(1), rwc.ID)
	require.Equal(t, rdma.LocLenErr, rwc.Status, "a receive too small for the message")
	swc := waitWC(t, p.cqA, 1)[0]
	require.Equal(t, uint64(2), swc.ID)
	if !env.CompleteOnHandoff {
		require.NotEqual(t, rdma.Success, swc.Status, "a Send that did not fit the peer's receive")
	}
	requireBytes(t, orig[:50], dst.Bytes()[:50], "bytes before the receive buffer")
	requireBytes(t, orig[150:], dst.Bytes()[150:], "bytes after the receive buffer")
}

// testInline: an Inline Send and Write take their bytes at post time: the
// source is overwritten as soon as PostSend returns, and the peer still
// gets the bytes as they were.
func testInline(t *testing.T, env Env) {
	p := setup(t, env, 0)
	const n = rdma.DefaultMaxInline
	src := p.allocA(2*n, rdma.AccessLocalWrite, 1)
	dst := p.allocB(n, rdma.AccessLocalWrite, 2)
	target := p.allocB(4*n, rdma.AccessAll, 3)
	sink := p.allocA(4*n, rdma.AccessLocalWrite, 4)
	p.connect(pairOptions{primeB: recvSlots(dst, 1, n, 1)})

	// Send: two pieces, n bytes in all, the most MaxInline allows.
	g := []piece{{1, 100}, {n + 3, n - 100}}
	want := gather(src.Bytes(), g...)
	postSend(t, p.a, rdma.SendWR{ID: 10, Op: rdma.OpSend, Flags: rdma.Signaled | rdma.Inline, SGL: sgl(src, g...)})
	fill(src.Bytes(), 99) // reuse the buffer at once
	rwc := waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 1, rdma.WCRecv, rdma.Success)
	require.Equal(t, uint32(n), rwc.ByteLen)
	requireBytes(t, want, dst.Bytes(), "inline Send: receive buffer")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 10, rdma.WCSend, rdma.Success)

	// Write at an odd offset, then a Read to see it landed.
	wantT := bytes.Clone(target.Bytes())
	copy(wantT[5:], src.Bytes()[7:7+n])
	postSend(t, p.a,
		rdma.SendWR{ID: 11, Op: rdma.OpWrite, Flags: rdma.Signaled | rdma.Inline, SGL: sgl(src, piece{7, n}),
			RemoteAddr: target.Addr() + 5, RKey: target.RKey()})
	fill(src.Bytes(), 98)
	postSend(t, p.a, rdma.SendWR{ID: 12, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sgl(sink, piece{0, 4 * n}),
		RemoteAddr: target.Addr(), RKey: target.RKey()})
	wcs := waitWC(t, p.cqA, 2)
	requireWC(t, wcs[0], 11, rdma.WCWrite, rdma.Success)
	requireWC(t, wcs[1], 12, rdma.WCRead, rdma.Success)
	requireBytes(t, wantT, target.Bytes(), "inline Write: target region")
	requireBytes(t, wantT, sink.Bytes(), "Read after an inline Write")
}

// testInlineUnregistered: inline data needs no lkey, so a plain Go buffer
// that no MR covers can be sent.
func testInlineUnregistered(t *testing.T, env Env) {
	p := setup(t, env, 0)
	dst := p.allocB(128, rdma.AccessLocalWrite, 1)
	p.connect(pairOptions{primeB: recvSlots(dst, 1, 128, 1)})

	buf := pattern(100, 7)
	want := bytes.Clone(buf)
	sge := rdma.SGE{Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), Length: uint32(len(buf))}
	postSend(t, p.a, rdma.SendWR{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled | rdma.Inline, SGL: []rdma.SGE{sge}})
	fill(buf, 8)
	runtime.KeepAlive(buf)
	rwc := waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 1, rdma.WCRecv, rdma.Success)
	require.Equal(t, uint32(100), rwc.ByteLen)
	requireBytes(t, want, dst.Bytes()[:100], "inline Send from unregistered memory")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 2, rdma.WCSend, rdma.Success)
}

// testInlineTooLarge: an Inline WR over MaxInline fails to post with
// ErrInlineTooLarge at its index; the WRs before it go, the QP stays up.
func testInlineTooLarge(t *testing.T, env Env) {
	p := setup(t, env, 0)
	const limit = 64
	src := p.allocA(256, rdma.AccessLocalWrite, 1)
	dst := p.allocB(512, rdma.AccessLocalWrite, 2)
	cfg := rdma.QPConfig{MaxInline: limit}
	p.connect(pairOptions{cfgA: cfg, cfgB: cfg, primeB: recvSlots(dst, 2, 256, 1)})

	err := p.a.PostSend([]rdma.SendWR{
		{ID: 10, Op: rdma.OpSend, Flags: rdma.Signaled | rdma.Inline, SGL: sgl(src, piece{0, limit})},
		{ID: 11, Op: rdma.OpSend, Flags: rdma.Signaled | rdma.Inline, SGL: sgl(src, piece{0, limit - 10}, piece{100, 11})},
		{ID: 12, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(src, piece{0, 8})},
	})
	require.Equal(t, 1, postErrorIndex(t, err, rdma.ErrInlineTooLarge))

	rwc := waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 1, rdma.WCRecv, rdma.Success)
	require.Equal(t, uint32(limit), rwc.ByteLen)
	requireBytes(t, src.Bytes()[:limit], dst.Bytes()[:limit], "the inline Send before the one too large")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 10, rdma.WCSend, rdma.Success)

	// Not posted means not sent: the next Send takes the second Recv.
	postSend(t, p.a, rdma.SendWR{ID: 13, Op: rdma.OpSend, Flags: rdma.Signaled | rdma.Inline, SGL: sgl(src, piece{200, 5})})
	rwc = waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 2, rdma.WCRecv, rdma.Success)
	require.Equal(t, uint32(5), rwc.ByteLen, "the WRs after the failed one were posted")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 13, rdma.WCSend, rdma.Success)
	requireEmpty(t, p.cqA)
}

// testSendImm: SendImm delivers its immediate data with the receive.
func testSendImm(t *testing.T, env Env) {
	p := setup(t, env, 0)
	src := p.allocA(100, rdma.AccessLocalWrite, 1)
	dst := p.allocB(128, rdma.AccessLocalWrite, 2)
	p.connect(pairOptions{primeB: recvSlots(dst, 1, 128, 1)})

	const imm = 0xdeadbeef
	postSend(t, p.a, rdma.SendWR{ID: 2, Op: rdma.OpSendImm, Flags: rdma.Signaled, Imm: imm, SGL: sgl(src, piece{0, 100})})
	rwc := waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 1, rdma.WCRecv, rdma.Success)
	require.Equal(t, rdma.WCWithImm, rwc.Flags&rdma.WCWithImm, "WC.Flags has WCWithImm")
	require.Equal(t, uint32(imm), rwc.Imm, "WC.Imm")
	require.Equal(t, uint32(100), rwc.ByteLen)
	requireBytes(t, src.Bytes(), dst.Bytes()[:100], "SendImm payload")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 2, rdma.WCSend, rdma.Success)
}

// testWriteImm: WriteImm places its bytes and then completes a Recv as
// WCRecvWriteImm with the immediate data, leaving the Recv's buffer alone.
func testWriteImm(t *testing.T, env Env) {
	p := setup(t, env, 0)
	src := p.allocA(8192, rdma.AccessLocalWrite, 1)
	target := p.allocB(8192, rdma.AccessAll, 2)
	dst := p.allocB(64, rdma.AccessLocalWrite, 3)
	origDst := bytes.Clone(dst.Bytes())
	p.connect(pairOptions{primeB: recvSlots(dst, 1, 64, 1)})

	const imm = 0x01020304
	want := bytes.Clone(target.Bytes())
	copy(want[11:11+4097], src.Bytes()[3:])
	postSend(t, p.a, rdma.SendWR{ID: 2, Op: rdma.OpWriteImm, Flags: rdma.Signaled, Imm: imm,
		SGL: sgl(src, piece{3, 4097}), RemoteAddr: target.Addr() + 11, RKey: target.RKey()})
	rwc := waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 1, rdma.WCRecvWriteImm, rdma.Success)
	require.Equal(t, rdma.WCWithImm, rwc.Flags&rdma.WCWithImm, "WC.Flags has WCWithImm")
	require.Equal(t, uint32(imm), rwc.Imm, "WC.Imm")
	require.Equal(t, p.b.Num(), rwc.QPNum)
	requireBytes(t, want, target.Bytes(), "WriteImm target when its receive completes")
	requireBytes(t, origDst, dst.Bytes(), "the receive buffer a WriteImm consumed")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 2, rdma.WCWrite, rdma.Success)
}

// testSendInv: SendInv invalidates the peer's rkey before the peer sees
// the receive, which reports it; the rkey then no longer works.
func testSendInv(t *testing.T, env Env) {
	p := setup(t, env, 0)
	src := p.allocA(32, rdma.AccessLocalWrite, 1)
	dst := p.allocB(32, rdma.AccessLocalWrite, 2)
	target := p.allocB(4096, rdma.AccessAll, 3)
	p.connect(pairOptions{primeB: recvSlots(dst, 1, 32, 1)})

	postSend(t, p.a, rdma.SendWR{ID: 2, Op: rdma.OpSendInv, Flags: rdma.Signaled, InvRKey: target.RKey(), SGL: sgl(src, piece{0, 32})})
	rwc := waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 1, rdma.WCRecv, rdma.Success)
	require.Equal(t, rdma.WCWithInv, rwc.Flags&rdma.WCWithInv, "WC.Flags has WCWithInv")
	require.Equal(t, target.RKey(), rwc.InvRKey, "WC.InvRKey")
	requireBytes(t, src.Bytes(), dst.Bytes(), "SendInv payload")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 2, rdma.WCSend, rdma.Success)

	requireRefused(t, p, env, rdma.OpWrite, target.RKey(), target.Addr()+100, 1000, target)
}
