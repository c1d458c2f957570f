package fault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

const srcOff = 32 << 10 // where tests stage outgoing bytes, past the Recv buffers

func TestSchemesRegistered(t *testing.T) {
	for _, s := range []string{"fault+iwarp", "fault+shm", "fault+rdma"} {
		assert.Contains(t, rdma.Schemes(), s)
	}
}

func TestForNormalisesURLs(t *testing.T) {
	a := For("fault+iwarp://127.0.0.1:9")
	assert.Same(t, a, For("127.0.0.1:9"))
	assert.Same(t, a, For("iwarp://127.0.0.1:9"))
	assert.NotSame(t, a, For("127.0.0.1:10"))
}

func TestPassThrough(t *testing.T) { eachProvider(t, testPassThrough) }

func testPassThrough(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 2)
	// An unsignaled Write, then a signaled Send: one completion, with the
	// caller's ID and opcode.
	copy(c.dial.mr.Bytes()[srcOff:], "written")
	copy(c.dial.mr.Bytes()[srcOff+100:], "sent")
	require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{
		{ID: 77, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, srcOff, 7)},
			RemoteAddr: c.acc.mr.Addr() + 40000, RKey: c.acc.mr.RKey()},
		{ID: 78, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, srcOff+100, 4)}},
	}))
	wc := waitWC(t, c.dial.cq)
	assert.Equal(t, rdma.WC{ID: 78, Status: rdma.Success, Opcode: rdma.WCSend, QPNum: c.dial.qp.Num()}, sendWC(wc))
	_, got := c.acc.recv(t)
	assert.Equal(t, "sent", got)
	assert.Equal(t, "written", string(c.acc.mr.Bytes()[40000:40007]))

	// A Read back.
	require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{{ID: 79, Op: rdma.OpRead, Flags: rdma.Signaled,
		SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, srcOff+200, 7)}, RemoteAddr: c.acc.mr.Addr() + 40000, RKey: c.acc.mr.RKey()}}))
	wc = waitWC(t, c.dial.cq)
	assert.Equal(t, uint64(79), wc.ID)
	assert.Equal(t, rdma.WCRead, wc.Opcode)
	assert.Equal(t, "written", string(c.dial.mr.Bytes()[srcOff+200:srcOff+207]))
	for k := Kind(0); k < numKinds; k++ {
		assert.Zero(t, c.inj.Count(k), k.String())
	}
}

func TestDropSendVanishesAndTheConnectionStays(t *testing.T) {
	eachProvider(t, testDropSendVanishesAndTheConnectionStays)
}

func testDropSendVanishesAndTheConnectionStays(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 4)
	r := c.inj.Drop(Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: Dialer, After: 1, Times: 1})
	for i, msg := range []string{"one", "two", "three"} {
		wc := c.dial.send(t, uint64(i), srcOff, msg)
		assert.Equal(t, rdma.WC{ID: uint64(i), Status: rdma.Success, Opcode: rdma.WCSend, QPNum: c.dial.qp.Num()}, sendWC(wc),
			"a dropped Send completes at the sender as sent")
	}
	// The peer saw the first and the third, in the Recvs in order.
	_, got := c.acc.recv(t)
	assert.Equal(t, "one", got)
	wc, got := c.acc.recv(t)
	assert.Equal(t, "three", got)
	assert.Equal(t, uint64(1001), wc.ID, "the dropped Send consumed no Recv")
	assert.Equal(t, 1, r.Hits())
	assert.Equal(t, 1, c.inj.Count(Drop))
	assert.Equal(t, rdma.StateRTS, c.dial.qp.State())
	assert.Equal(t, rdma.StateRTS, c.acc.qp.State())

	// The acceptor's Sends are not the rule's: they arrive.
	c.acc.send(t, 5, srcOff, "back")
	_, got = c.dial.recv(t)
	assert.Equal(t, "back", got)
}

func TestDropWriteLeavesThePeerUntouched(t *testing.T) {
	eachProvider(t, testDropWriteLeavesThePeerUntouched)
}

func testDropWriteLeavesThePeerUntouched(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{SignalAll: true}, 1)
	c.inj.Drop(Match{Ops: []rdma.Opcode{rdma.OpWrite}})
	copy(c.dial.mr.Bytes()[srcOff:], "secret")
	require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, srcOff, 6)},
		RemoteAddr: c.acc.mr.Addr() + 50000, RKey: c.acc.mr.RKey()}}))
	wc := waitWC(t, c.dial.cq)
	assert.Equal(t, rdma.WC{ID: 1, Status: rdma.Success, Opcode: rdma.WCWrite, QPNum: c.dial.qp.Num()}, sendWC(wc))
	// A Send after a Write makes the Write visible at the peer when it
	// lands, had the Write been sent.
	c.dial.send(t, 2, srcOff+100, "after")
	_, got := c.acc.recv(t)
	assert.Equal(t, "after", got)
	assert.Equal(t, make([]byte, 6), c.acc.mr.Bytes()[50000:50006])
	assert.Equal(t, 1, c.inj.Count(Drop))
}

func TestEveryNth(t *testing.T) { eachProvider(t, testEveryNth) }

func testEveryNth(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 8)
	c.inj.Drop(Match{Ops: []rdma.Opcode{rdma.OpSend}, Every: 3})
	for i := 1; i <= 6; i++ {
		c.dial.send(t, uint64(i), srcOff, fmt.Sprint(i))
	}
	c.dial.send(t, 7, srcOff, "end") // the 7th match: not a multiple of 3
	var got []string
	for {
		_, s := c.acc.recv(t)
		got = append(got, s)
		if s == "end" {
			break
		}
	}
	assert.Equal(t, []string{"1", "2", "4", "5", "end"}, got)
	assert.Equal(t, 2, c.inj.Count(Drop))
}

// dropPattern sends n Sends through a fresh connection whose injector
// drops with probability p from seed, and returns which arrived.
func dropPattern(t *testing.T, p string, seed int64, n int, prob float64) []bool {
	c := newConn(t, p, rdma.QPConfig{}, n+1)
	c.inj.Seed(seed)
	c.inj.Drop(Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: Dialer, Prob: prob})
	for i := range n {
		c.dial.send(t, uint64(i), srcOff, fmt.Sprint(i))
	}
	c.inj.Reset()
	c.dial.send(t, 99, srcOff, "end")
	arrived := make([]bool, n)
	for {
		_, s := c.acc.recv(t)
		if s == "end" {
			break
		}
		var i int
		fmt.Sscan(s, &i)
		arrived[i] = true
	}
	return arrived
}

func TestProbabilityIsSeeded(t *testing.T) { eachProvider(t, testProbabilityIsSeeded) }

func testProbabilityIsSeeded(t *testing.T, p string) {
	a := dropPattern(t, p, 42, 20, 0.5)
	b := dropPattern(t, p, 42, 20, 0.5)
	assert.Equal(t, a, b, "the same seed drops the same WRs")
	kept := 0
	for _, x := range a {
		if x {
			kept++
		}
	}
	assert.Greater(t, kept, 0)
	assert.Less(t, kept, 20)
}

func TestDelayKeepsOrder(t *testing.T) { eachProvider(t, testDelayKeepsOrder) }

func testDelayKeepsOrder(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 6)
	r := c.inj.Delay(Match{Ops: []rdma.Opcode{rdma.OpSend}, Times: 1}, 30*time.Millisecond)
	for i := range 5 {
		// Separate posts, from a buffer reused at once: held WRs keep
		// their own SGL, and Inline data is copied when posted here.
		msg := fmt.Sprint("m", i)
		copy(c.dial.mr.Bytes()[srcOff+i*16:], msg)
		require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{{ID: uint64(i), Op: rdma.OpSend, Flags: rdma.Signaled | rdma.Inline,
			SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, srcOff+i*16, len(msg))}}}))
	}
	copy(c.dial.mr.Bytes()[srcOff:], "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX")
	for i := range 5 {
		wc := waitWC(t, c.dial.cq)
		assert.Equal(t, uint64(i), wc.ID, "completions in posting order")
	}
	for i := range 5 {
		_, got := c.acc.recv(t)
		assert.Equal(t, fmt.Sprint("m", i), got)
	}
	assert.Equal(t, 1, r.Hits())
	assert.Equal(t, 1, c.inj.Count(Delay))
}

func TestTruncateSend(t *testing.T) { eachProvider(t, testTruncateSend) }

func testTruncateSend(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 2)
	c.inj.Truncate(Match{Ops: []rdma.Opcode{rdma.OpSend}}, 3)
	wc := c.dial.send(t, 1, srcOff, "hello world")
	assert.Equal(t, rdma.Success, wc.Status)
	rwc, got := c.acc.recv(t)
	assert.Equal(t, uint32(3), rwc.ByteLen)
	assert.Equal(t, "hel", got)
	assert.Equal(t, "hello world", string(c.dial.mr.Bytes()[srcOff:srcOff+11]), "the caller's buffer is untouched")
	// Short enough already: passes, and is not counted.
	c.dial.send(t, 2, srcOff, "hi")
	_, got = c.acc.recv(t)
	assert.Equal(t, "hi", got)
	assert.Equal(t, 1, c.inj.Count(Truncate))
}

// sendWC clears ByteLen, which the API defines for receive completions
// only: shm reports a send's length there, iwarp zero.
func sendWC(wc rdma.WC) rdma.WC {
	wc.ByteLen = 0
	return wc
}

// diff counts the bytes in which a and b differ.
func diff(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func TestCorruptSend(t *testing.T) { eachProvider(t, testCorruptSend) }

func testCorruptSend(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 1)
	c.inj.Corrupt(Match{Ops: []rdma.Opcode{rdma.OpSend}}, 1)
	msg := strings.Repeat("abcdefgh", 64)
	c.dial.send(t, 1, srcOff, msg)
	_, got := c.acc.recv(t)
	require.Len(t, got, len(msg))
	assert.Equal(t, 1, diff([]byte(msg), []byte(got)))
	assert.Equal(t, msg, string(c.dial.mr.Bytes()[srcOff:srcOff+len(msg)]), "the caller's buffer is untouched")
	assert.Equal(t, 1, c.inj.Count(Corrupt))
}

func TestCorruptWriteAndRead(t *testing.T) { eachProvider(t, testCorruptWriteAndRead) }

func testCorruptWriteAndRead(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{SignalAll: true}, 0)
	c.inj.Corrupt(Match{Ops: []rdma.Opcode{rdma.OpWrite, rdma.OpRead}, Times: 2}, 1)
	src := bytes.Repeat([]byte{0x5a}, 4096)
	copy(c.dial.mr.Bytes()[srcOff:], src)

	// Write: the peer's region gets one flipped byte, the source keeps its own.
	require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpWrite, SGL: []rdma.SGE{
		rdma.SGEOf(c.dial.mr, srcOff, 1000), rdma.SGEOf(c.dial.mr, srcOff+1000, 3096)},
		RemoteAddr: c.acc.mr.Addr(), RKey: c.acc.mr.RKey()}}))
	assert.Equal(t, rdma.WC{ID: 1, Status: rdma.Success, Opcode: rdma.WCWrite, QPNum: c.dial.qp.Num()}, sendWC(waitWC(t, c.dial.cq)))
	// A Read after a Write sees the Write's bytes: read them back through
	// the second corruption, into two SGEs.
	require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{{ID: 2, Op: rdma.OpRead, SGL: []rdma.SGE{
		rdma.SGEOf(c.dial.mr, 0, 2048), rdma.SGEOf(c.dial.mr, 2048, 2048)},
		RemoteAddr: c.acc.mr.Addr(), RKey: c.acc.mr.RKey()}}))
	assert.Equal(t, rdma.WC{ID: 2, Status: rdma.Success, Opcode: rdma.WCRead, QPNum: c.dial.qp.Num()}, sendWC(waitWC(t, c.dial.cq)))
	assert.Equal(t, src, c.dial.mr.Bytes()[srcOff:srcOff+4096], "the Write's source is untouched")
	peer := c.acc.mr.Bytes()[:4096]
	assert.Equal(t, 1, diff(src, peer), "the Write landed with one byte flipped")
	read := c.dial.mr.Bytes()[:4096]
	assert.Equal(t, 1, diff(peer, read), "the Read landed with one byte flipped")
	assert.Equal(t, 2, c.inj.Count(Corrupt))
}

func TestCutDropsBothEnds(t *testing.T) { eachProvider(t, testCutDropsBothEnds) }

func testCutDropsBothEnds(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 3)
	assert.Equal(t, 2, c.inj.Cut())
	waitDone(t, c.dial.qp)
	waitDone(t, c.acc.qp)
	assert.ErrorIs(t, c.dial.qp.Err(), rdma.RetryExcErr)
	assert.ErrorIs(t, c.acc.qp.Err(), rdma.RetryExcErr)
	// The posted Recvs flush, so nobody waits for them.
	for _, e := range []*end{c.dial, c.acc} {
		for range 3 {
			wc := waitWC(t, e.cq)
			assert.Equal(t, rdma.WRFlushErr, wc.Status)
			assert.Equal(t, rdma.WCRecv, wc.Opcode)
		}
	}
	assert.Equal(t, 2, c.inj.Count(Cut))
}

func TestCutOnTheThirdSend(t *testing.T) { eachProvider(t, testCutOnTheThirdSend) }

func testCutOnTheThirdSend(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 3)
	c.inj.CutOn(Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: Dialer, After: 2})
	c.dial.send(t, 1, srcOff, "a")
	c.dial.send(t, 2, srcOff, "b")
	copy(c.dial.mr.Bytes()[srcOff:], "c")
	require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{{ID: 3, Op: rdma.OpSend, Flags: rdma.Signaled,
		SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, srcOff, 1)}}}))
	// The dialer's own Recvs flush too; find the Send among them.
	wc := waitWC(t, c.dial.cq)
	for wc.Opcode == rdma.WCRecv {
		assert.Equal(t, rdma.WRFlushErr, wc.Status)
		wc = waitWC(t, c.dial.cq)
	}
	assert.Equal(t, uint64(3), wc.ID)
	assert.Equal(t, rdma.WRFlushErr, wc.Status)
	assert.Equal(t, rdma.WCSend, wc.Opcode)
	waitDone(t, c.dial.qp)
	waitDone(t, c.acc.qp)
	assert.ErrorIs(t, c.dial.qp.Err(), rdma.RetryExcErr)
	_, got := c.acc.recv(t)
	assert.Equal(t, "a", got)
	_, got = c.acc.recv(t)
	assert.Equal(t, "b", got)
	assert.Equal(t, 1, c.inj.Count(Cut))
}

func TestRefuse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := rdma.Listen(ctx, "fault+iwarp://127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	inj := For(l.Addr())
	inj.Refuse(true)

	pd, err := rdma.OpenPD("fault+iwarp://127.0.0.1")
	require.NoError(t, err)
	defer pd.Close()
	cq, err := pd.CreateCQ(16)
	require.NoError(t, err)
	defer cq.Close()
	_, _, err = rdma.Dial(ctx, l.Addr(), pd, rdma.QPConfig{SendCQ: cq}, nil)
	assert.ErrorIs(t, err, ErrRefused)
	assert.ErrorIs(t, err, rdma.ErrConnRefused)

	// A dialer that does not go through the wrapper is rejected by the
	// wrapped listener.
	plain, err := rdma.OpenPD("iwarp://127.0.0.1")
	require.NoError(t, err)
	defer plain.Close()
	pcq, err := plain.CreateCQ(16)
	require.NoError(t, err)
	defer pcq.Close()
	actx, acancel := context.WithCancel(ctx)
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept(actx)
		accepted <- err
	}()
	_, _, err = rdma.Dial(ctx, strings.Replace(l.Addr(), "fault+", "", 1), plain, rdma.QPConfig{SendCQ: pcq}, nil)
	assert.ErrorIs(t, err, rdma.ErrConnRefused)
	acancel()
	assert.True(t, errors.Is(<-accepted, context.Canceled), "Accept returned no refused request")
	assert.Equal(t, 2, inj.Count(Refuse))

	inj.Refuse(false)
	go func() {
		req, err := l.Accept(ctx)
		if err == nil {
			qp, _ := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
			req.Accept(qp, nil)
			t.Cleanup(func() { qp.Close() })
		}
	}()
	qp, _, err := rdma.Dial(ctx, l.Addr(), pd, rdma.QPConfig{SendCQ: cq}, nil)
	require.NoError(t, err)
	qp.Close()
}

func TestInjectorsOfOtherAddressesDoNotInterfere(t *testing.T) {
	eachProvider(t, testInjectorsOfOtherAddressesDoNotInterfere)
}

func testInjectorsOfOtherAddressesDoNotInterfere(t *testing.T, p string) {
	a := newConn(t, p, rdma.QPConfig{}, 1)
	b := newConn(t, p, rdma.QPConfig{}, 1)
	require.NotSame(t, a.inj, b.inj)
	a.inj.Drop(Match{})
	a.inj.Cut()
	waitDone(t, a.dial.qp)
	b.dial.send(t, 1, srcOff, "fine")
	_, got := b.acc.recv(t)
	assert.Equal(t, "fine", got)
	assert.Equal(t, rdma.StateRTS, b.dial.qp.State())
	assert.Zero(t, b.inj.Count(Cut))
}

func TestRemovedRuleStops(t *testing.T) { eachProvider(t, testRemovedRuleStops) }

func testRemovedRuleStops(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 2)
	r := c.inj.Drop(Match{Ops: []rdma.Opcode{rdma.OpSend}})
	c.dial.send(t, 1, srcOff, "lost")
	r.Remove()
	c.dial.send(t, 2, srcOff, "kept")
	_, got := c.acc.recv(t)
	assert.Equal(t, "kept", got)
	assert.Equal(t, 1, r.Hits())
}

func TestHeldWRsFlushWhenTheQPFails(t *testing.T) { eachProvider(t, testHeldWRsFlushWhenTheQPFails) }

func testHeldWRsFlushWhenTheQPFails(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{}, 0)
	c.inj.Delay(Match{Ops: []rdma.Opcode{rdma.OpSend}}, time.Hour)
	c.dial.mr.Bytes()[srcOff] = 'x'
	require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{
		{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, srcOff, 1)}},
		{ID: 2, Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, srcOff, 1)},
			RemoteAddr: c.acc.mr.Addr(), RKey: c.acc.mr.RKey()},
	}))
	// Nothing would complete for an hour; failing the QP flushes both, in order.
	c.dial.qp.SetError()
	for _, id := range []uint64{1, 2} {
		wc := waitWC(t, c.dial.cq)
		assert.Equal(t, id, wc.ID)
		assert.Equal(t, rdma.WRFlushErr, wc.Status)
	}
	assert.Zero(t, c.acc.mr.Bytes()[0], "the held Write never reached the peer")
	assert.Equal(t, 1, c.inj.Count(Delay), "only the Send matched; the Write waited behind it")
}

func TestDropRead(t *testing.T) { eachProvider(t, testDropRead) }

func testDropRead(t *testing.T, p string) {
	c := newConn(t, p, rdma.QPConfig{SignalAll: true}, 0)
	copy(c.acc.mr.Bytes(), "remote")
	c.inj.Drop(Match{Ops: []rdma.Opcode{rdma.OpRead}})
	require.NoError(t, c.dial.qp.PostSend([]rdma.SendWR{{ID: 3, Op: rdma.OpRead,
		SGL: []rdma.SGE{rdma.SGEOf(c.dial.mr, 0, 6)}, RemoteAddr: c.acc.mr.Addr(), RKey: c.acc.mr.RKey()}}))
	wc := sendWC(waitWC(t, c.dial.cq))
	assert.Equal(t, rdma.WC{ID: 3, Status: rdma.Success, Opcode: rdma.WCRead, QPNum: c.dial.qp.Num()}, wc)
	assert.Equal(t, make([]byte, 6), c.dial.mr.Bytes()[:6], "a dropped Read leaves its sink untouched")
}
