package shm

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// Deregister does not return while a peer holds the key in its hazard
// word, that is, while an access that began before it is in progress.
func TestDeregisterWaitsForAccessInProgress(t *testing.T) {
	p := newPair(t, pairOpts{})
	mr, err := p.pdB.Alloc(4096, rdma.AccessAll)
	require.NoError(t, err)
	a := p.a.(*qp)
	entry := keyTableEntry(p.pdB.(*pd).kt, mr.RKey()>>8)

	a.me.hazard.Store(mr.RKey()) // A is mid-copy into the region
	done := make(chan struct{})
	go func() {
		mr.Deregister()
		close(done)
	}()
	for entry.state().Load() != 0 {
		runtime.Gosched()
	}
	// The key is dead for new accesses, yet Deregister still waits.
	select {
	case <-done:
		t.Fatal("Deregister returned while an access was in progress")
	default:
	}
	a.me.hazard.Store(0) // the copy ends
	<-done
	assert.Equal(t, rdma.StateRTS, p.a.State())

	// A new access with the dead key is refused.
	local := alloc(t, p.pdA, 64, rdma.AccessLocalWrite)
	require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpRead, SGL: sge(local, 0, 8), RemoteAddr: mr.Addr(), RKey: mr.RKey()}}))
	assert.Equal(t, rdma.RemAccessErr, waitWC(t, p.cqA, 1)[0].Status)
}

// A peer that died in the middle of an access does not hold up Deregister.
func TestDeregisterPeerGone(t *testing.T) {
	p := newPair(t, pairOpts{})
	mr, err := p.pdB.Alloc(4096, rdma.AccessAll)
	require.NoError(t, err)
	p.a.(*qp).me.hazard.Store(mr.RKey())
	p.b.(*qp).gone.Store(true) // what B's control goroutine records at EOF
	require.NoError(t, mr.Deregister())
	p.a.(*qp).me.hazard.Store(0)
}

// A hostile ring entry errors its QP and the peer's, and nothing else.
func TestHostileEntry(t *testing.T) {
	l := newPair(t, pairOpts{}).l
	p1 := newPair(t, pairOpts{l: l})
	pdB := p1.pdB
	p2 := newPair(t, pairOpts{l: l, pdA: p1.pdA, pdB: pdB})
	require.NoError(t, p1.b.PostRecv([]rdma.RecvWR{{ID: 1}}))

	a := p1.a.(*qp)
	a.sqMu.Lock()
	pos := a.sq.rtail & a.ringMask
	putEntry(a.peer.ring[pos:], entry{Type: entSend, Flags: entFirst | entLast, MSN: 1, Len: 1 << 30, Total: 1 << 30})
	a.sq.rtail += entHdrLen
	a.peer.tail.Store(a.sq.rtail)
	ring(a.peer.doorbell)
	a.sqMu.Unlock()

	waitDone(t, p1.b)
	assert.ErrorIs(t, p1.b.Err(), rdma.RemInvReqErr)
	waitDone(t, p1.a)
	assert.ErrorIs(t, p1.a.Err(), rdma.RemInvReqErr)
	assert.Equal(t, rdma.WRFlushErr, waitWC(t, p1.cqB, 1)[0].Status)

	// The other connection between the same PDs still works.
	require.NoError(t, p2.b.PostRecv([]rdma.RecvWR{{ID: 2}}))
	require.NoError(t, p2.a.PostSend([]rdma.SendWR{{ID: 3, Op: rdma.OpSend}}))
	assert.Equal(t, rdma.WC{ID: 2, Opcode: rdma.WCRecv, QPNum: p2.b.Num()}, waitWC(t, p2.cqB, 1)[0])
}

// An ack for a message never sent is a protocol error of the peer.
func TestHostileAck(t *testing.T) {
	p := newPair(t, pairOpts{})
	b := p.b.(*qp)
	b.me.ack.Store(77)
	ring(b.peer.doorbell)
	waitDone(t, p.a)
	assert.ErrorIs(t, p.a.Err(), rdma.RemInvReqErr)
}

func TestSRQ(t *testing.T) {
	pdB := openTestPD(t)
	s, err := pdB.CreateSRQ(8, 1)
	require.NoError(t, err)
	l := newPair(t, pairOpts{}).l
	p1 := newPair(t, pairOpts{l: l, pdB: pdB, cfgB: rdma.QPConfig{SRQ: s}})
	p2 := newPair(t, pairOpts{l: l, pdB: pdB, cfgB: rdma.QPConfig{SRQ: s}})
	assert.ErrorIs(t, p1.b.PostRecv([]rdma.RecvWR{{ID: 1}}), rdma.ErrInvalidArgument, "a QP with an SRQ has no RQ")
	assert.ErrorIs(t, s.PostRecv([]rdma.RecvWR{{ID: 1, SGL: make([]rdma.SGE, 2)}}), rdma.ErrTooManySGE)
	require.NoError(t, s.PostRecv([]rdma.RecvWR{{ID: 21}, {ID: 22}}))
	require.NoError(t, p1.a.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpSendImm, Imm: 1}}))
	w1 := waitWC(t, p1.cqB, 1)[0]
	require.NoError(t, p2.a.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpSendImm, Imm: 2}}))
	w2 := waitWC(t, p2.cqB, 1)[0]
	assert.Equal(t, []uint64{21, 22}, []uint64{w1.ID, w2.ID})
	assert.Equal(t, []uint32{p1.b.Num(), p2.b.Num()}, []uint32{w1.QPNum, w2.QPNum})
	assert.Error(t, s.Close(), "QPs still use it")
	require.NoError(t, p1.b.Close())
	require.NoError(t, p2.b.Close())
	require.NoError(t, s.Close())
}

// Steady-state Writes and Reads allocate nothing.
func TestWriteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p := newPair(t, pairOpts{})
	remote := alloc(t, p.pdB, 1<<16, rdma.AccessAll)
	local := alloc(t, p.pdA, 1<<16, rdma.AccessAll)
	wrs := []rdma.SendWR{
		{ID: 1, Op: rdma.OpWrite, SGL: sge(local, 0, 4096), RemoteAddr: remote.Addr(), RKey: remote.RKey()},
		{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sge(local, 4096, 4096), RemoteAddr: remote.Addr(), RKey: remote.RKey()},
	}
	wc := make([]rdma.WC, 4)
	run := func() {
		if err := p.a.PostSend(wrs); err != nil {
			panic(err)
		}
		for n := 0; n == 0; {
			n, _ = p.cqA.Poll(wc)
		}
	}
	run() // the first access maps the peer's region
	assert.Zero(t, testing.AllocsPerRun(100, run))
}

// An ack is rung for only when no message carried it: ackWait lets the
// RX goroutine sleep up to ackDelay while the peer sleeps, then rings;
// a peer awake, or a message rung since, needs no ring.
func TestAckWait(t *testing.T) {
	var mine, peers [2]atomic.Uint32 // ack, doorbell
	q := &qp{}
	q.me.ack, q.peer.doorbell = &mine[0], &peers[1]

	// Nothing new to ack.
	_, wait := q.ackWait()
	assert.False(t, wait)

	// A new ack, the peer asleep: wait, and do not ring yet.
	mine[0].Store(5)
	peers[1].Store(1)
	d, wait := q.ackWait()
	require.True(t, wait)
	assert.Greater(t, d, time.Duration(0))
	assert.LessOrEqual(t, d, ackDelay)
	assert.Equal(t, uint32(1), peers[1].Load(), "rang before ackDelay")

	// A message rang the peer since (pumpLocked): nothing left to do.
	q.ackRung.Store(5)
	_, wait = q.ackWait()
	assert.False(t, wait)
	assert.True(t, q.rx.ackDue.IsZero())

	// The peer awake: it sees the ack before it sleeps.
	mine[0].Store(6)
	peers[1].Store(0)
	_, wait = q.ackWait()
	assert.False(t, wait)
	assert.Equal(t, uint32(6), q.ackRung.Load())

	// Asleep, and ackDelay spent: ring (the doorbell goes to 0).
	mine[0].Store(7)
	peers[1].Store(1)
	_, wait = q.ackWait()
	require.True(t, wait)
	q.rx.ackDue = time.Now().Add(-time.Microsecond)
	_, wait = q.ackWait()
	assert.False(t, wait)
	assert.Equal(t, uint32(0), peers[1].Load())
	assert.Equal(t, uint32(7), q.ackRung.Load())
}

// A Send nobody answers still completes: the receiver rings for its ack
// alone, once ackDelay has passed, and both sides may sleep meanwhile.
func TestAckWithoutAnswer(t *testing.T) {
	p := newPair(t, pairOpts{})
	src := alloc(t, p.pdA, 64, rdma.AccessLocalWrite)
	dst := alloc(t, p.pdB, 64, rdma.AccessLocalWrite)
	for i := range 3 {
		require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: sge(dst, 0, 64)}}))
		require.NoError(t, p.a.PostSend([]rdma.SendWR{{ID: uint64(i), Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sge(src, 0, 64)}}))
		assert.Equal(t, uint64(i), waitWC(t, p.cqB, 1)[0].ID)
		wc := waitWC(t, p.cqA, 1)[0]
		assert.Equal(t, uint64(i), wc.ID)
		assert.Equal(t, rdma.WCSend, wc.Opcode)
		time.Sleep(3 * ackDelay) // both RX goroutines go to sleep
	}
}
