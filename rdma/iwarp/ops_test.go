package iwarp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>9)
	}
	return b
}

func post(t testing.TB, q rdma.QP, wrs ...rdma.SendWR) {
	t.Helper()
	require.NoError(t, q.PostSend(wrs))
}

func recv(t testing.TB, q rdma.QP, id uint64, sgl ...rdma.SGE) {
	t.Helper()
	require.NoError(t, q.PostRecv([]rdma.RecvWR{{ID: id, SGL: sgl}}))
}

func TestSendVariants(t *testing.T) {
	for _, crc := range []bool{true, false} {
		t.Run(fmt.Sprintf("crc=%v", crc), func(t *testing.T) {
			p, err := New(WithCRC(crc))
			require.NoError(t, err)
			a, b := newPair(t, pairOpts{prov: p})
			msg := pattern(3000, 1)
			copy(a.mr.Bytes()[1<<19:], msg)
			src := rdma.SGEOf(a.mr, 1<<19, len(msg))

			// A region at b that a's Send with Invalidate will invalidate.
			victim, err := b.pd.Alloc(4096, rdma.AccessAll)
			require.NoError(t, err)

			cases := []struct {
				wr    rdma.SendWR
				flags rdma.WCFlags
			}{
				{rdma.SendWR{Op: rdma.OpSend}, 0},
				{rdma.SendWR{Op: rdma.OpSend, Flags: rdma.Solicited}, 0},
				{rdma.SendWR{Op: rdma.OpSendImm, Imm: 0xfeedf00d}, rdma.WCWithImm},
				{rdma.SendWR{Op: rdma.OpSendImm, Imm: 7, Flags: rdma.Solicited}, rdma.WCWithImm},
				{rdma.SendWR{Op: rdma.OpSendInv, InvRKey: victim.RKey(), Flags: rdma.Solicited}, rdma.WCWithInv},
			}
			for i, c := range cases {
				recv(t, b.qp, uint64(100+i), rdma.SGEOf(b.mr, 0, 4096))
				wr := c.wr
				wr.ID, wr.Flags, wr.SGL = uint64(i), wr.Flags|rdma.Signaled, []rdma.SGE{src}
				post(t, a.qp, wr)
				wc := waitWC(t, a.cq)
				assert.Equal(t, rdma.WC{ID: uint64(i), Status: rdma.Success, Opcode: rdma.WCSend, QPNum: a.qp.Num()}, wc)
				wc = waitWC(t, b.cq)
				want := rdma.WC{ID: uint64(100 + i), Status: rdma.Success, Opcode: rdma.WCRecv, Flags: c.flags,
					QPNum: b.qp.Num(), ByteLen: uint32(len(msg))}
				if c.flags&rdma.WCWithImm != 0 {
					want.Imm = wr.Imm
				}
				if c.flags&rdma.WCWithInv != 0 {
					want.InvRKey = victim.RKey()
				}
				assert.Equal(t, want, wc, "case %d (%v)", i, wr.Op)
				assert.Equal(t, msg, b.mr.Bytes()[:len(msg)])
				clear(b.mr.Bytes()[:len(msg)])
			}
			// The invalidated rkey no longer works.
			post(t, a.qp, rdma.SendWR{ID: 9, Op: rdma.OpWrite, SGL: []rdma.SGE{src}, RemoteAddr: victim.Addr(), RKey: victim.RKey()})
			waitDone(t, b.qp)
			assert.Equal(t, rdma.RemAccessErr, b.qp.Err())
			waitDone(t, a.qp)
			assert.Equal(t, rdma.RemAccessErr, a.qp.Err())
		})
	}
}

func TestLargeSendScatter(t *testing.T) {
	a, b := newPair(t, pairOpts{prov: mustProv(t, WithMaxSegment(1000)), mrSize: 1 << 20})
	msg := pattern(300_001, 3)
	copy(a.mr.Bytes(), msg)
	// The Recv scatters over three SGEs, out of order in memory.
	sgl := []rdma.SGE{rdma.SGEOf(b.mr, 500_000, 100_000), rdma.SGEOf(b.mr, 0, 50_001), rdma.SGEOf(b.mr, 200_000, 200_000)}
	recv(t, b.qp, 1, sgl...)
	// The Send gathers from two.
	post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled,
		SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 123_456), rdma.SGEOf(a.mr, 123_456, 300_001-123_456)}})
	assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
	wc := waitWC(t, b.cq)
	require.Equal(t, rdma.Success, wc.Status)
	assert.Equal(t, uint32(len(msg)), wc.ByteLen)
	got := append(append(append([]byte(nil), b.mr.Bytes()[500_000:600_000]...), b.mr.Bytes()[:50_001]...), b.mr.Bytes()[200_000:350_000]...)
	assert.True(t, bytes.Equal(msg, got), "scattered bytes differ")
}

func mustProv(t testing.TB, opts ...Option) *Provider {
	p, err := New(opts...)
	require.NoError(t, err)
	return p
}

func TestWriteReadImm(t *testing.T) {
	a, b := newPair(t, pairOpts{mrSize: 4 << 20})
	data := pattern(1<<20+17, 9)
	copy(a.mr.Bytes(), data)

	// Write with Immediate: the data lands, one Recv completes with the
	// immediate and the Write's length, its buffer untouched.
	copy(b.mr.Bytes()[3<<20:], "untouched")
	recv(t, b.qp, 77, rdma.SGEOf(b.mr, 3<<20, 64))
	post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpWriteImm, Flags: rdma.Signaled, Imm: 0xabcdef01,
		SGL:        []rdma.SGE{rdma.SGEOf(a.mr, 0, 1<<19), rdma.SGEOf(a.mr, 1<<19, len(data)-1<<19)},
		RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
	assert.Equal(t, rdma.WC{ID: 1, Opcode: rdma.WCWrite, QPNum: a.qp.Num()}, waitWC(t, a.cq))
	wc := waitWC(t, b.cq)
	assert.Equal(t, rdma.WC{ID: 77, Opcode: rdma.WCRecvWriteImm, Flags: rdma.WCWithImm, Imm: 0xabcdef01,
		ByteLen: uint32(len(data)), QPNum: b.qp.Num()}, wc)
	assert.True(t, bytes.Equal(data, b.mr.Bytes()[4096:4096+len(data)]))
	assert.Equal(t, "untouched", string(b.mr.Bytes()[3<<20:3<<20+9]))

	// Read it back into two SGEs.
	clear(a.mr.Bytes()[2<<20:])
	post(t, a.qp, rdma.SendWR{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled,
		SGL:        []rdma.SGE{rdma.SGEOf(a.mr, 2<<20, 1000), rdma.SGEOf(a.mr, 2<<20+5000, len(data)-1000)},
		RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
	assert.Equal(t, rdma.WC{ID: 2, Opcode: rdma.WCRead, QPNum: a.qp.Num()}, waitWC(t, a.cq))
	assert.Equal(t, data[:1000], a.mr.Bytes()[2<<20:2<<20+1000])
	assert.True(t, bytes.Equal(data[1000:], a.mr.Bytes()[2<<20+5000:2<<20+5000+len(data)-1000]))

	// A zero-byte Read completes too.
	post(t, a.qp, rdma.SendWR{ID: 3, Op: rdma.OpRead, Flags: rdma.Signaled, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
}

func TestWriteThenSendVisible(t *testing.T) {
	a, b := newPair(t, pairOpts{mrSize: 2 << 20})
	for i := 0; i < 20; i++ {
		data := pattern(256<<10, byte(i))
		copy(a.mr.Bytes(), data)
		recv(t, b.qp, uint64(i), rdma.SGEOf(b.mr, 1<<20, 16))
		post(t, a.qp,
			rdma.SendWR{ID: 1, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, len(data))}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			rdma.SendWR{ID: 2, Op: rdma.OpSend, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 16)}})
		wc := waitWC(t, b.cq)
		require.Equal(t, rdma.Success, wc.Status)
		require.True(t, bytes.Equal(data, b.mr.Bytes()[:len(data)]), "round %d: write not visible at recv completion", i)
	}
	// Unsignaled WRs completed silently: a.cq is empty.
	n, err := a.cq.Poll(make([]rdma.WC, 4))
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestSignalAllAndOrder(t *testing.T) {
	a, b := newPair(t, pairOpts{cfg: rdma.QPConfig{SignalAll: true}, mrSize: 2 << 20})
	recv(t, b.qp, 1, rdma.SGEOf(b.mr, 0, 64))
	// A Read followed by Writes: the Writes are on the wire first, but
	// their completions wait for the Read's.
	post(t, a.qp,
		rdma.SendWR{ID: 1, Op: rdma.OpRead, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 1<<20)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		rdma.SendWR{ID: 2, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 1<<20, 8)}, RemoteAddr: b.mr.Addr() + 1<<20, RKey: b.mr.RKey()},
		rdma.SendWR{ID: 3, Op: rdma.OpSend, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 1<<20, 8)}})
	for id := uint64(1); id <= 3; id++ {
		wc := waitWC(t, a.cq)
		assert.Equal(t, id, wc.ID)
		assert.Equal(t, rdma.Success, wc.Status)
	}
	waitWC(t, b.cq)
}

func TestFence(t *testing.T) {
	a, b := newPair(t, pairOpts{mrSize: 4 << 20})
	copy(b.mr.Bytes(), pattern(2<<20, 5))
	recv(t, b.qp, 1, rdma.SGEOf(b.mr, 3<<20, 64))
	post(t, a.qp,
		rdma.SendWR{ID: 1, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 2<<20)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		rdma.SendWR{ID: 2, Op: rdma.OpSend, Flags: rdma.Fence, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 2<<20, 8)}})
	// The fenced Send left only after the Read completed, so by the time
	// the peer has it the Read's completion is already queued here.
	require.Equal(t, rdma.Success, waitWC(t, b.cq).Status)
	var wc [2]rdma.WC
	n, err := a.cq.Poll(wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, rdma.WC{ID: 1, Opcode: rdma.WCRead, QPNum: a.qp.Num()}, wc[0])
	assert.True(t, bytes.Equal(b.mr.Bytes()[:2<<20], a.mr.Bytes()[:2<<20]))
}

func TestManyReadsBeyondReadDepth(t *testing.T) {
	a, b := newPair(t, pairOpts{cfg: rdma.QPConfig{MaxSendWR: 512}, mrSize: 1 << 20})
	copy(b.mr.Bytes(), pattern(1<<20, 11))
	wrs := make([]rdma.SendWR, 300)
	for i := range wrs {
		// Two SGEs each: 600 Read Requests against a depth of 128.
		wrs[i] = rdma.SendWR{ID: uint64(i), Op: rdma.OpRead, Flags: rdma.Signaled,
			SGL:        []rdma.SGE{rdma.SGEOf(a.mr, i*2048, 1024), rdma.SGEOf(a.mr, i*2048+1024, 1024)},
			RemoteAddr: b.mr.Addr() + uint64(i*2048), RKey: b.mr.RKey()}
	}
	post(t, a.qp, wrs...)
	for i := range wrs {
		wc := waitWC(t, a.cq)
		require.Equal(t, uint64(i), wc.ID)
		require.Equal(t, rdma.Success, wc.Status, "QP error %v, peer error %v", a.qp.Err(), b.qp.Err())
	}
	assert.True(t, bytes.Equal(b.mr.Bytes()[:600*1024], a.mr.Bytes()[:600*1024]))
}

func TestInline(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	// Unregistered Go memory, named by address, as verbs inline data.
	buf := []byte("inline from plain memory")
	sge := rdma.SGE{Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), Length: uint32(len(buf))}
	recv(t, b.qp, 1, rdma.SGEOf(b.mr, 0, 64))
	post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpSend, Flags: rdma.Inline | rdma.Signaled, SGL: []rdma.SGE{sge}})
	copy(buf, "overwritten after the post") // Inline copied at post time
	assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
	wc := waitWC(t, b.cq)
	assert.Equal(t, uint32(len(buf)), wc.ByteLen)
	assert.Equal(t, "inline from plain memory", string(b.mr.Bytes()[:len(buf)]))

	// Inline from a region, as an RDMA Write.
	copy(a.mr.Bytes()[100:], "region inline")
	post(t, a.qp, rdma.SendWR{ID: 2, Op: rdma.OpWrite, Flags: rdma.Inline | rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 100, 13)},
		RemoteAddr: b.mr.Addr() + 500, RKey: b.mr.RKey()})
	assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
	post(t, a.qp, rdma.SendWR{ID: 3, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 200, 13)},
		RemoteAddr: b.mr.Addr() + 500, RKey: b.mr.RKey()})
	assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
	assert.Equal(t, "region inline", string(a.mr.Bytes()[200:213]))
}

func TestPostErrors(t *testing.T) {
	p := mustProv(t)
	pd, err := p.OpenPD("127.0.0.1")
	require.NoError(t, err)
	cq, err := pd.CreateCQ(16)
	require.NoError(t, err)
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, MaxSendWR: 2, MaxRecvWR: 2, MaxSGE: 1, MaxInline: 8})
	require.NoError(t, err)
	defer qp.Close()
	mr, err := pd.Alloc(64, rdma.AccessAll)
	require.NoError(t, err)

	var pe *rdma.PostError
	err = qp.PostSend([]rdma.SendWR{{Op: rdma.OpSend}})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 0, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrInvalidState, "PostSend before RTS")

	err = qp.PostRecv([]rdma.RecvWR{{ID: 1}, {ID: 2}, {ID: 3}})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 2, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrQueueFull)

	qp2, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, MaxSGE: 1})
	require.NoError(t, err)
	defer qp2.Close()
	err = qp2.PostRecv([]rdma.RecvWR{{ID: 1}, {ID: 2, SGL: []rdma.SGE{rdma.SGEOf(mr, 0, 1), rdma.SGEOf(mr, 1, 1)}}})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrTooManySGE)

	_, err = pd.CreateSRQ(16, 1)
	assert.ErrorIs(t, err, rdma.ErrNotSupported)
	_, err = pd.CreateQP(rdma.QPConfig{})
	assert.ErrorIs(t, err, rdma.ErrInvalidArgument)
	_, err = pd.Register(make([]byte, 8), rdma.AccessRemoteWrite)
	assert.ErrorIs(t, err, rdma.ErrInvalidArgument, "remote write without local write")

	require.NoError(t, qp.Close())
	err = qp.PostRecv([]rdma.RecvWR{{ID: 1}})
	assert.ErrorIs(t, err, rdma.ErrInvalidState, "PostRecv after Close")
}

func TestPostSendLimits(t *testing.T) {
	a, b := newPair(t, pairOpts{cfg: rdma.QPConfig{MaxSendWR: 2, MaxSGE: 2, MaxInline: 16}})
	_ = b
	sge := rdma.SGEOf(a.mr, 0, 8)
	var pe *rdma.PostError

	err := a.qp.PostSend([]rdma.SendWR{
		{ID: 1, Op: rdma.OpWrite, SGL: []rdma.SGE{sge}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{ID: 2, Op: rdma.OpWrite, SGL: []rdma.SGE{sge, sge, sge}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrTooManySGE)

	err = a.qp.PostSend([]rdma.SendWR{{ID: 3, Op: rdma.OpWrite, Flags: rdma.Inline, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 17)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	require.ErrorAs(t, err, &pe)
	assert.ErrorIs(t, err, rdma.ErrInlineTooLarge)

	// Three in one batch: the third finds the queue full (the first two
	// cannot have completed before the batch is posted).
	w := rdma.SendWR{Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: []rdma.SGE{sge}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	err = a.qp.PostSend([]rdma.SendWR{w, w, w})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 2, pe.Index)
	assert.ErrorIs(t, err, rdma.ErrQueueFull)
	// The two of this batch that were posted complete.
	for i := 0; i < 2; i++ {
		assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
	}
}

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name   string
		access rdma.Access
		wr     func(a, b *side) rdma.SendWR
	}{
		{"write bad rkey", rdma.AccessAll, func(a, b *side) rdma.SendWR {
			return rdma.SendWR{Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x100}
		}},
		{"write out of bounds", rdma.AccessAll, func(a, b *side) rdma.SendWR {
			return rdma.SendWR{Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 64)}, RemoteAddr: b.mr.Addr() + 1<<20 - 32, RKey: b.mr.RKey()}
		}},
		{"write without remote write", rdma.AccessLocalWrite | rdma.AccessRemoteRead, func(a, b *side) rdma.SendWR {
			return rdma.SendWR{Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
		{"read bad rkey", rdma.AccessAll, func(a, b *side) rdma.SendWR {
			return rdma.SendWR{Op: rdma.OpRead, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 64)}, RemoteAddr: b.mr.Addr(), RKey: 0x7777701}
		}},
		{"read without remote read", rdma.AccessLocalWrite | rdma.AccessRemoteWrite, func(a, b *side) rdma.SendWR {
			return rdma.SendWR{Op: rdma.OpRead, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, pairOpts{access: c.access, preRecv: 2})
			copy(a.mr.Bytes(), pattern(64, 1))
			// A Read that succeeds first, then the faulting WR, then a Send.
			wr := c.wr(a, b)
			wr.ID, wr.Flags = 2, rdma.Signaled
			before := append([]byte(nil), b.mr.Bytes()...)
			post(t, a.qp, wr, rdma.SendWR{ID: 3, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 8)}})
			waitDone(t, a.qp)
			waitDone(t, b.qp)
			assert.Equal(t, rdma.RemAccessErr, a.qp.Err())
			assert.Equal(t, rdma.RemAccessErr, b.qp.Err())
			assert.True(t, bytes.Equal(before, b.mr.Bytes()), "peer memory changed")
			// Posting in StateError completes at once with WRFlushErr.
			post(t, a.qp, rdma.SendWR{ID: 4, Op: rdma.OpSend})
			// a's CQ: WR 2, WR 3 (flushed or, for a Write, the Send that
			// met the error), its two Recvs flushed, and WR 4, in order per queue.
			var sends []rdma.WC
			for i := 0; i < 5; i++ {
				wc := waitWC(t, a.cq)
				if wc.Opcode == rdma.WCRecv {
					assert.Equal(t, rdma.WRFlushErr, wc.Status)
					continue
				}
				wc.QPNum = 0
				sends = append(sends, wc)
			}
			if wr.Op == rdma.OpRead {
				assert.Equal(t, []rdma.WC{
					{ID: 2, Status: rdma.RemAccessErr, Opcode: rdma.WCRead}, // the faulting Read
					{ID: 3, Status: rdma.WRFlushErr, Opcode: rdma.WCSend},
					{ID: 4, Status: rdma.WRFlushErr, Opcode: rdma.WCSend},
				}, sends)
			} else {
				// An iWARP Write completes when handed to TCP, normally
				// before the Terminate comes back; so may the Send behind
				// it. The first WR still outstanding gets RemAccessErr,
				// the rest WRFlushErr.
				require.Len(t, sends, 3)
				assert.Equal(t, []uint64{2, 3, 4}, []uint64{sends[0].ID, sends[1].ID, sends[2].ID})
				k := 0
				for k < len(sends) && sends[k].Status == rdma.Success {
					k++
				}
				require.Less(t, k, 3, "WR 4 was posted in StateError")
				if k < 2 {
					assert.Equal(t, rdma.RemAccessErr, sends[k].Status)
					k++
				}
				for ; k < 3; k++ {
					assert.Equal(t, rdma.WRFlushErr, sends[k].Status)
				}

			}
			// The peer's Recvs are flushed: no Send was delivered after the fault.
			for i := 0; i < 2; i++ {
				wc := waitWC(t, b.cq)
				assert.Equal(t, rdma.WRFlushErr, wc.Status)
			}
		})
	}
}

func TestDeregisterStopsRemoteAccess(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	extra, err := b.pd.Alloc(4096, rdma.AccessAll)
	require.NoError(t, err)
	post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 64)}, RemoteAddr: extra.Addr(), RKey: extra.RKey()})
	require.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
	require.NoError(t, extra.Deregister())
	post(t, a.qp, rdma.SendWR{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 64)}, RemoteAddr: extra.Addr(), RKey: extra.RKey()})
	assert.Equal(t, rdma.RemAccessErr, waitWC(t, a.cq).Status)
	waitDone(t, b.qp)
	assert.Equal(t, rdma.RemAccessErr, b.qp.Err())
}

func TestRNR(t *testing.T) {
	cfg := rdma.QPConfig{RNRRetry: 1, RNRTimeout: 5 * time.Millisecond}
	for _, op := range []rdma.Opcode{rdma.OpSend, rdma.OpWriteImm} {
		t.Run(op.String(), func(t *testing.T) {
			a, b := newPair(t, pairOpts{cfg: cfg})
			post(t, a.qp, rdma.SendWR{ID: 1, Op: op, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status, "handed to TCP before the RNR")
			post(t, a.qp, rdma.SendWR{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			waitDone(t, b.qp)
			waitDone(t, a.qp)
			assert.Equal(t, rdma.RNRRetryExcErr, b.qp.Err())
			assert.Equal(t, rdma.RNRRetryExcErr, a.qp.Err())
			// The Read posted behind the blocked Send never got an answer.
			wc := waitWC(t, a.cq)
			assert.Equal(t, uint64(2), wc.ID)
			assert.Equal(t, rdma.RNRRetryExcErr, wc.Status)
		})
	}
}

func TestRNRThenRecvPosted(t *testing.T) {
	// A generous window: the Recv posted after the Send arrives is used.
	a, b := newPair(t, pairOpts{cfg: rdma.QPConfig{RNRRetry: 100, RNRTimeout: 100 * time.Millisecond}})
	copy(a.mr.Bytes(), "late")
	post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 4)}})
	require.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
	recv(t, b.qp, 5, rdma.SGEOf(b.mr, 0, 64))
	wc := waitWC(t, b.cq)
	assert.Equal(t, rdma.WC{ID: 5, Opcode: rdma.WCRecv, ByteLen: 4, QPNum: b.qp.Num()}, wc)
	assert.Equal(t, "late", string(b.mr.Bytes()[:4]))
	assert.Nil(t, b.qp.Err())
}

func TestRecvTooSmall(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	recv(t, b.qp, 1, rdma.SGEOf(b.mr, 0, 100))
	recv(t, b.qp, 2, rdma.SGEOf(b.mr, 100, 100))
	post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpSend, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 101)}})
	wc := waitWC(t, b.cq)
	assert.Equal(t, rdma.WC{ID: 1, Status: rdma.LocLenErr, Opcode: rdma.WCRecv, QPNum: b.qp.Num()}, wc)
	assert.Equal(t, rdma.WRFlushErr, waitWC(t, b.cq).Status)
	waitDone(t, b.qp)
	waitDone(t, a.qp)
	assert.Equal(t, rdma.LocLenErr, b.qp.Err())
	assert.Equal(t, rdma.RemInvReqErr, a.qp.Err())
}

func TestDisconnectFlushes(t *testing.T) {
	a, b := newPair(t, pairOpts{preRecv: 3})
	require.NoError(t, b.qp.Close())
	waitDone(t, a.qp)
	assert.Equal(t, rdma.RetryExcErr, a.qp.Err())
	for i := 0; i < 3; i++ {
		wc := waitWC(t, a.cq)
		assert.Equal(t, rdma.WRFlushErr, wc.Status)
		assert.Equal(t, uint64(1000+i), wc.ID)
	}
	assert.Equal(t, rdma.StateError, a.qp.State())
	assert.Equal(t, rdma.StateError, b.qp.State())
	assert.Equal(t, rdma.WRFlushErr, b.qp.Err())
}

func TestSetErrorFlushes(t *testing.T) {
	a, b := newPair(t, pairOpts{preRecv: 2})
	// A Read whose response will not come: the peer goes away first.
	b.qp.SetError()
	waitDone(t, b.qp)
	assert.Equal(t, rdma.WRFlushErr, b.qp.Err())
	for i := 0; i < 2; i++ {
		assert.Equal(t, rdma.WRFlushErr, waitWC(t, b.cq).Status)
	}
	waitDone(t, a.qp)
	assert.Equal(t, rdma.RetryExcErr, a.qp.Err())
	// Outstanding WRs never hang: posted in Error, flushed at once.
	post(t, a.qp, rdma.SendWR{ID: 9, Op: rdma.OpRead, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	got := map[uint64]rdma.WCStatus{}
	for i := 0; i < 3; i++ {
		wc := waitWC(t, a.cq)
		got[wc.ID] = wc.Status
	}
	assert.Equal(t, map[uint64]rdma.WCStatus{1000: rdma.WRFlushErr, 1001: rdma.WRFlushErr, 9: rdma.WRFlushErr}, got)
}

func TestOutstandingReadFlushedOnDisconnect(t *testing.T) {
	a, b := newPair(t, pairOpts{mrSize: 8 << 20})
	// Queue many large Reads, then cut the connection under them.
	wrs := make([]rdma.SendWR, 8)
	for i := range wrs {
		wrs[i] = rdma.SendWR{ID: uint64(i), Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, i<<20, 1<<20)},
			RemoteAddr: b.mr.Addr() + uint64(i<<20), RKey: b.mr.RKey()}
	}
	post(t, a.qp, wrs...)
	b.qp.SetError()
	seen := 0
	for seen < len(wrs) {
		wc := waitWC(t, a.cq)
		assert.Equal(t, uint64(seen), wc.ID, "in order")
		assert.Contains(t, []rdma.WCStatus{rdma.Success, rdma.RetryExcErr, rdma.WRFlushErr}, wc.Status)
		seen++
	}
	waitDone(t, a.qp)
}

func TestRejectAndRefuse(t *testing.T) {
	p := mustProv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := p.Listen(ctx, "127.0.0.1:0")
	require.NoError(t, err)
	pd, _ := p.OpenPD("127.0.0.1")
	cq, _ := pd.CreateCQ(8)
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
	require.NoError(t, err)
	defer qp.Close()

	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			return
		}
		if string(req.PrivateData()) == "let me in" {
			_ = req.Reject([]byte{0x01, 0x02, 0x03})
		}
	}()
	_, err = qp.Connect(ctx, trimScheme(l.Addr()), []byte("let me in"))
	var rej *rdma.RejectError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, []byte{1, 2, 3}, rej.Private)
	assert.ErrorIs(t, err, rdma.ErrConnRefused)
	assert.Equal(t, rdma.StateInit, qp.State(), "a refused QP may try again")

	// With the listener gone, nothing listens: ErrConnRefused.
	addr := trimScheme(l.Addr())
	require.NoError(t, l.Close())
	_, err = qp.Connect(ctx, addr, nil)
	assert.ErrorIs(t, err, rdma.ErrConnRefused)
	assert.False(t, errors.As(err, &rej))
}

func TestPrivateDataBothWays(t *testing.T) {
	p := mustProv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := rdma.Listen(ctx, "iwarp://127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	pd, err := rdma.OpenPD("iwarp://127.0.0.1")
	require.NoError(t, err)
	cq, _ := pd.CreateCQ(8)
	big := pattern(rdma.MaxPrivateData, 2)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			return
		}
		qp, _ := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
		if bytes.Equal(req.PrivateData(), big) {
			_ = req.Accept(qp, []byte("welcome"))
		}
		t.Cleanup(func() { qp.Close() })
	}()
	qp, reply, err := rdma.Dial(ctx, l.Addr(), pd, rdma.QPConfig{SendCQ: cq}, big)
	require.NoError(t, err)
	defer qp.Close()
	assert.Equal(t, "welcome", string(reply))
	assert.Equal(t, rdma.StateRTS, qp.State())
	assert.NotEmpty(t, qp.LocalAddr())
	assert.NotEmpty(t, qp.RemoteAddr())
	_, err = qp.Connect(ctx, trimScheme(l.Addr()), append(big, 0))
	assert.ErrorIs(t, err, rdma.ErrInvalidArgument, "513 bytes of private data")
	_ = p
}

func TestCRCNegotiation(t *testing.T) {
	// One side without CRC: CRC is used because the other asks for it.
	off := mustProv(t, WithCRC(false))
	on := mustProv(t)
	for _, c := range []struct{ dial, listen *Provider }{{off, on}, {on, off}, {off, off}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err := c.listen.Listen(ctx, "127.0.0.1:0")
		require.NoError(t, err)
		pdA, _ := c.dial.OpenPD("")
		pdB, _ := c.listen.OpenPD("")
		cqA, _ := pdA.CreateCQ(8)
		cqB, _ := pdB.CreateCQ(8)
		mrA, _ := pdA.Alloc(4096, rdma.AccessAll)
		mrB, _ := pdB.Alloc(4096, rdma.AccessAll)
		qb, _ := pdB.CreateQP(rdma.QPConfig{SendCQ: cqB})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := l.Accept(ctx)
			if err == nil {
				_ = req.Accept(qb, nil)
			}
		}()
		qa, _, err := rdma.Dial(ctx, l.Addr(), pdA, rdma.QPConfig{SendCQ: cqA}, nil)
		require.NoError(t, err)
		wg.Wait()
		require.NoError(t, qb.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(mrB, 0, 64)}}}))
		copy(mrA.Bytes(), "crc?")
		require.NoError(t, qa.PostSend([]rdma.SendWR{{Op: rdma.OpSend, SGL: []rdma.SGE{rdma.SGEOf(mrA, 0, 4)}}}))
		wc := waitWC(t, cqB)
		assert.Equal(t, rdma.Success, wc.Status)
		want := c.dial.cfg.crc || c.listen.cfg.crc
		assert.Equal(t, want, qa.(*qp).crc)
		assert.Equal(t, want, qb.(*qp).crc)
		qa.Close()
		qb.Close()
		l.Close()
		cancel()
	}
}

func Test64QPs(t *testing.T) {
	const n = 64
	p := mustProv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := p.Listen(ctx, "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	server, _ := p.OpenPD("")
	client, _ := p.OpenPD("")
	srvMR, err := server.Alloc(n*8192, rdma.AccessAll)
	require.NoError(t, err)
	cliMR, err := client.Alloc(n*8192, rdma.AccessAll)
	require.NoError(t, err)

	// The server echoes every Send it gets back as an RDMA Write followed
	// by a Send, on each of 64 QPs sharing one CQ.
	srvCQ, _ := server.CreateCQ(n * 8)
	srvQPs := make(map[uint32]rdma.QP)
	var mu sync.Mutex
	go func() {
		for i := 0; i < n; i++ {
			req, err := l.Accept(ctx)
			if err != nil {
				return
			}
			q, _ := server.CreateQP(rdma.QPConfig{SendCQ: srvCQ})
			slot := i
			_ = q.PostRecv([]rdma.RecvWR{{ID: uint64(slot), SGL: []rdma.SGE{rdma.SGEOf(srvMR, slot*8192, 4096)}}})
			mu.Lock()
			srvQPs[q.Num()] = q
			mu.Unlock()
			_ = req.Accept(q, []byte{byte(slot)})
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cq, _ := client.CreateCQ(8)
			q, slotB, err := rdma.Dial(ctx, l.Addr(), client, rdma.QPConfig{SendCQ: cq}, nil)
			if err != nil {
				errs <- err
				return
			}
			defer q.Close()
			slot := int(slotB[0])
			off := i * 8192
			copy(cliMR.Bytes()[off:], fmt.Sprintf("qp %02d says hello", i))
			_ = q.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(cliMR, off+4096, 64)}}})
			// Tell the server where to write back: address and rkey in the message.
			msg := fmt.Sprintf("%016x %08x %02d", cliMR.Addr()+uint64(off+2048), cliMR.RKey(), slot)
			copy(cliMR.Bytes()[off+1024:], msg)
			if err := q.PostSend([]rdma.SendWR{{Op: rdma.OpSend, SGL: []rdma.SGE{rdma.SGEOf(cliMR, off+1024, len(msg))}},
				{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(cliMR, off+3000, 16)},
					RemoteAddr: srvMR.Addr() + uint64(slot*8192), RKey: srvMR.RKey()}}); err != nil {
				errs <- err
				return
			}
			var wc [1]rdma.WC
			got := 0
			for got < 2 {
				k, err := cq.Wait(ctx, wc[:])
				if err != nil {
					errs <- err
					return
				}
				if k == 1 && wc[0].Status != rdma.Success {
					errs <- wc[0].Status
					return
				}
				got += k
			}
			want := fmt.Sprintf("%016x %08x %02d", cliMR.Addr()+uint64(off+2048), cliMR.RKey(), slot)
			if string(cliMR.Bytes()[off+2048:off+2048+len(want)]) != want {
				errs <- fmt.Errorf("qp %d: echo %q", i, cliMR.Bytes()[off+2048:off+2048+len(want)])
			}
			if string(cliMR.Bytes()[off+3000:off+3016]) != msg[:16] {
				errs <- fmt.Errorf("qp %d: read back wrong bytes", i)
			}
		}(i)
	}
	// Server loop: on each Recv, write the message back and Send.
	go func() {
		var wc [16]rdma.WC
		for served := 0; served < n; {
			k, err := srvCQ.Wait(ctx, wc[:])
			if err != nil {
				return
			}
			for _, w := range wc[:k] {
				if w.Opcode != rdma.WCRecv || w.Status != rdma.Success {
					continue
				}
				served++
				mu.Lock()
				q := srvQPs[w.QPNum]
				mu.Unlock()
				slot := int(w.ID)
				var addr uint64
				var rkey uint32
				var s int
				fmt.Sscanf(string(srvMR.Bytes()[slot*8192:slot*8192+int(w.ByteLen)]), "%x %x %d", &addr, &rkey, &s)
				_ = q.PostSend([]rdma.SendWR{
					{Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(srvMR, slot*8192, int(w.ByteLen))}, RemoteAddr: addr, RKey: rkey},
					{Op: rdma.OpSend}})
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	for _, q := range srvQPs {
		q.Close()
	}
	mu.Unlock()
}
