package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/fault"
)

// writeRound writes size bytes from offset 0 in requests of chunk bytes,
// qd of them in flight from one goroutine, each block with the pattern of
// seed. after(n) runs (on a queue goroutine) after the n-th completion.
// It returns the requests' errors.
func writeRound(t testing.TB, ns *Namespace, size int64, chunk, qd int, seed int64, failFast bool, after func(n int64)) []error {
	t.Helper()
	var (
		next, completed atomic.Int64
		mu              sync.Mutex
		errs            []error
	)
	idle := make(chan struct{}, qd)
	chunks := size / int64(chunk)
	reqs := make([]Request, qd)
	start := func(rq *Request) bool {
		i := next.Add(1) - 1
		if i >= chunks {
			return false
		}
		rq.Op, rq.Offset, rq.FailFast = OpWrite, i*int64(chunk), failFast
		if len(rq.Buf) != chunk {
			rq.Buf = make([]byte, chunk)
		}
		pattern(rq.Buf, seed, rq.Offset)
		if err := ns.Submit(rq); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			return false
		}
		return true
	}
	for i := range reqs {
		reqs[i].Done = func(rq *Request) {
			if rq.Err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("write at %d: %w", rq.Offset, rq.Err))
				mu.Unlock()
			}
			if after != nil {
				after(completed.Add(1))
			}
			if !start(rq) {
				idle <- struct{}{}
			}
		}
	}
	for i := range reqs {
		if !start(&reqs[i]) {
			idle <- struct{}{}
		}
	}
	timeout := time.After(2 * time.Minute)
	for range qd {
		select {
		case <-idle:
		case <-timeout:
			t.Fatalf("requests still in flight after 2 minutes (%d of %d done)", completed.Load(), chunks)
		}
	}
	return errs
}

// checkRound reads size bytes back and compares them with the pattern of
// seed.
func checkRound(t testing.TB, ns *Namespace, size int64, seed int64) {
	t.Helper()
	got := make([]byte, size)
	_, err := ns.ReadAt(got, 0)
	require.NoError(t, err)
	want := make([]byte, size)
	pattern(want, seed, 0)
	for off := int64(0); off < size; off += 4096 {
		if !bytes.Equal(got[off:off+4096], want[off:off+4096]) {
			t.Fatalf("block at %d differs from the last write", off)
		}
	}
}

// cutAt returns a hook that cuts the injector's connections once, after
// the n-th completion, from another goroutine.
func cutAt(inj *fault.Injector, n int64) func(int64) {
	var once sync.Once
	return func(k int64) {
		if k == n {
			once.Do(func() { go inj.Cut() })
		}
	}
}

func TestReconnectAfterCut(t *testing.T) {
	forEachTransport(t, true, func(t *testing.T, url string) {
		r := newResponder(t, url, 4<<20, 4096)
		inj := fault.For(r.url)
		c := dialResponder(t, r, WithQueues(2), WithQueueDepth(16), WithReconnectDelay(10*time.Millisecond, 200*time.Millisecond))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		// Three rounds through the three data paths: in the capsule (8
		// KiB), the slot areas (4 KiB), large buffers (64 KiB); each is
		// cut in the middle.
		for i, chunk := range []int{8192, 4096, 64 << 10} {
			losses := c.Stats().Losses
			errs := writeRound(t, ns, 4<<20, chunk, 32, int64(i+1), false, cutAt(inj, 40))
			require.Empty(t, errs, "every request survives the cut")
			checkRound(t, ns, 4<<20, int64(i+1))
			st := c.Stats()
			assert.Greater(t, st.Losses, losses, "round %d: the cut was noticed", i)
		}
		st := c.Stats()
		assert.GreaterOrEqual(t, st.Reconnects, uint64(3))
		assert.Positive(t, st.Resubmitted, "requests in flight at the cuts were sent again")
		assert.Zero(t, st.FailedOnLoss)
		assert.Equal(t, StateLive, c.State())
		assert.GreaterOrEqual(t, inj.Count(fault.Cut), 3)
	})
}

func TestFailFastOnCut(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 4<<20, 4096)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithQueues(2), WithReconnectDelay(10*time.Millisecond, 100*time.Millisecond))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	errs := writeRound(t, ns, 4<<20, 4096, 32, 1, true, cutAt(inj, 50))
	require.NotEmpty(t, errs, "requests in flight at the cut fail fast")
	for _, err := range errs {
		require.ErrorIs(t, err, ErrControllerLost)
	}
	// The controller comes back for the others.
	waitFor(t, 10*time.Second, "the reconnect", func() bool { return c.State() == StateLive })
	require.Empty(t, writeRound(t, ns, 1<<20, 4096, 8, 2, false, nil))
	assert.Positive(t, c.Stats().FailedOnLoss)
}

func TestControllerLossTimeout(t *testing.T) {
	forEachTransport(t, true, func(t *testing.T, url string) {
		r := newResponder(t, url, 4<<20, 4096)
		inj := fault.For(r.url)
		c := dialResponder(t, r, WithQueues(2), WithCtrlLossTimeout(400*time.Millisecond),
			WithReconnectDelay(20*time.Millisecond, 50*time.Millisecond))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		errs := writeRound(t, ns, 4<<20, 4096, 32, 1, false, func(n int64) {
			if n == 30 {
				inj.Refuse(true)
				go inj.Cut()
			}
		})
		require.NotEmpty(t, errs, "requests waiting when the controller-loss timeout ran out")
		for _, err := range errs {
			require.ErrorIs(t, err, ErrControllerLost)
		}
		assert.Equal(t, StateDead, c.State())
		_, err = ns.ReadAt(make([]byte, 4096), 0)
		assert.ErrorIs(t, err, ErrControllerLost, "a dead controller refuses new requests")
		assert.NoError(t, c.Close())
		assert.Equal(t, StateClosed, c.State())
	})
}

// TestMaxRetries: with no retries allowed, requests in flight at a cut
// fail, and the controller comes back for the rest.
func TestMaxRetries(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 4<<20, 4096)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithMaxRetries(0), WithReconnectDelay(10*time.Millisecond, 50*time.Millisecond))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	errs := writeRound(t, ns, 4<<20, 4096, 32, 1, false, cutAt(inj, 50))
	require.NotEmpty(t, errs)
	for _, err := range errs {
		require.ErrorIs(t, err, ErrControllerLost)
		require.ErrorContains(t, err, "in flight during 1 losses")
	}
	assert.Less(t, len(errs), 1024, "requests not in flight at the cut waited for the reconnect")
	assert.Equal(t, StateLive, c.State())
}

func TestReconnectOffFailsAtOnce(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 4<<20, 4096)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithCtrlLossTimeout(0))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	errs := writeRound(t, ns, 4<<20, 4096, 16, 1, false, cutAt(inj, 20))
	require.NotEmpty(t, errs)
	for _, err := range errs {
		require.ErrorIs(t, err, ErrControllerLost)
	}
	assert.Equal(t, StateDead, c.State())
}

func TestCloseWhileReconnecting(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 4<<20, 4096)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithReconnectDelay(20*time.Millisecond, 50*time.Millisecond))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	inj.Refuse(true)
	inj.Cut()
	waitFor(t, 5*time.Second, "the loss to be noticed", func() bool { return c.State() == StateConnecting })
	done := make(chan error, 4)
	reqs := make([]Request, 4)
	for i := range reqs {
		reqs[i] = Request{Op: OpRead, Buf: make([]byte, 4096), Done: func(rq *Request) { done <- rq.Err }}
		require.NoError(t, ns.Submit(&reqs[i]), "requests wait for the reconnect")
	}
	require.NoError(t, c.Close())
	for range reqs {
		assert.ErrorIs(t, <-done, ErrClosed)
	}
	assert.ErrorIs(t, ns.Submit(&reqs[0]), ErrClosed)
}

func TestKeepAlive(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
	c := dialResponder(t, r, WithKeepAlive(200*time.Millisecond))
	waitFor(t, 10*time.Second, "three keep-alives", func() bool { return r.keepAlives.Load() >= 3 })
	assert.GreaterOrEqual(t, c.Stats().KeepAlives, uint64(2))
	var ka []byte
	for _, rec := range capsulesOf(r.records(), 0) {
		if rec.capsule[0] == byte(nvmeof.AdminKeepAlive) {
			ka = rec.capsule
		}
	}
	requireBytes(t, `
		18 40 ???? 00000000   # Keep Alive, PSDT 01b, NSID 0
		0000000000000000 0000000000000000
		0000000000000000 000000 00000000 40  # no data
		00000000 00000000 00000000 00000000 00000000 00000000
	`, ka, "Keep Alive")
}

func TestKeepAliveTimeout(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 1<<20, 512)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithKeepAlive(200*time.Millisecond), WithConnectTimeout(300*time.Millisecond),
		WithReconnectDelay(20*time.Millisecond, 100*time.Millisecond))
	// The responder has no keep-alive timer: the host finds the silence.
	rule := inj.Drop(fault.Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: fault.Dialer})
	waitFor(t, 10*time.Second, "the keep-alive timeout", func() bool { return c.Stats().Losses > 0 })
	assert.ErrorIs(t, c.Stats().LastLoss, ErrKeepAliveTimeout)
	rule.Remove()
	waitFor(t, 10*time.Second, "the reconnect", func() bool { return c.State() == StateLive })
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	_, err = ns.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err)
}

func TestIOTimeout(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 1<<20, 512)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithKeepAlive(0), WithIOTimeout(time.Second), WithConnectTimeout(300*time.Millisecond),
		WithReconnectDelay(20*time.Millisecond, 100*time.Millisecond))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	want := make([]byte, 4096)
	pattern(want, 5, 0)
	copy(r.nsBytes(), want)
	rule := inj.Drop(fault.Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: fault.Dialer, Times: 1})
	got := make([]byte, 4096)
	_, err = ns.ReadAt(got, 0) // its capsule vanishes; the timeout reconnects and resubmits it
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, 1, rule.Hits())
	assert.ErrorIs(t, c.Stats().LastLoss, ErrCommandTimeout)
}

func TestProtocolViolationReconnects(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 1<<20, 512)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithReconnectDelay(10*time.Millisecond, 50*time.Millisecond))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	// A response capsule cut to 8 bytes breaks the binding (IORCSZ 1).
	rule := inj.Truncate(fault.Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: fault.Acceptor, Times: 1}, 8)
	_, err = ns.WriteAt(make([]byte, 512), 0)
	require.NoError(t, err, "the write is sent again after the reconnect")
	assert.Equal(t, 1, rule.Hits())
	assert.ErrorIs(t, c.Stats().LastLoss, ErrProtocol)
}

// TestRequestsNeverHang cuts connections at random while a mix of
// operations runs, with reconnects refused part of the time; every
// request completes, successfully or with ErrControllerLost.
func TestRequestsNeverHang(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 4<<20, 4096)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithQueues(2), WithCtrlLossTimeout(300*time.Millisecond),
		WithReconnectDelay(10*time.Millisecond, 50*time.Millisecond), WithMaxRetries(1))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			time.Sleep(15 * time.Millisecond)
			inj.Refuse(i%5 == 4)
			inj.Cut()
		}
	}()
	var ok, lost atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			buf := make([]byte, 16<<10)
			for i := range 40 {
				off := int64((w*40+i)%200) * 16 << 10
				var err error
				if i%2 == 0 {
					_, err = ns.WriteAt(buf, off)
				} else {
					_, err = ns.ReadAt(buf, off)
				}
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrControllerLost):
					lost.Add(1)
				default:
					t.Errorf("unexpected error: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	cancel()
	t.Logf("%d requests succeeded, %d failed with the controller lost", ok.Load(), lost.Load())
	assert.Equal(t, int64(160), ok.Load()+lost.Load())
}

// TestReconnectAssociationDiesDuringSetup: during a reconnect the new
// controller's admin queue is cut after its Connect and setup succeeded
// and before the I/O queues connect, so the responder, having torn that
// controller down, refuses the I/O queue's Connect with Connect Invalid
// Parameters (CNTLID) and DNR. That refusal is one failed attempt: the
// host tries again, and the requests that were in flight complete.
func TestReconnectAssociationDiesDuringSetup(t *testing.T) {
	forEachTransport(t, true, func(t *testing.T, url string) {
		r := newResponder(t, url, 4<<20, 4096)
		inj := fault.For(r.url)
		c := dialResponder(t, r, WithQueues(2), WithQueueDepth(16), WithCtrlLossTimeout(20*time.Second),
			WithReconnectDelay(10*time.Millisecond, 100*time.Millisecond))
		info, err := c.Info()
		require.NoError(t, err)
		first := info.CNTLID
		var killed atomic.Int64
		r.mu.Lock()
		r.ioConnect = func(qid, cntlid uint16) {
			// Called with r.mu held. Once, on the first I/O queue of
			// the first association made by a reconnect.
			if cntlid == first || killed.Load() > 0 {
				return
			}
			killed.Add(1)
			for conn := range r.conns {
				if conn.qid == 0 && conn.ctrl != nil && conn.ctrl.cntlid == cntlid {
					conn.qp.SetError()
				}
			}
			delete(r.ctrls, cntlid)
		}
		r.mu.Unlock()
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		errs := writeRound(t, ns, 4<<20, 4096, 32, 1, false, cutAt(inj, 40))
		if len(errs) > 0 {
			t.Fatalf("%d requests failed; every one should survive the cut and the failed attempt; the first: %v", len(errs), errs[0])
		}
		checkRound(t, ns, 4<<20, 1)
		assert.Equal(t, int64(1), killed.Load(), "a reconnect's new association was torn down during its setup")
		assert.Equal(t, StateLive, c.State())
		st := c.Stats()
		assert.Equal(t, uint64(1), st.Losses)
		assert.Equal(t, uint64(1), st.Reconnects, "the attempt after the failed one succeeded")
		assert.Positive(t, st.Resubmitted)
		assert.Zero(t, st.FailedOnLoss)
	})
}

// TestReconnectRefusedForGood: after a loss the subsystem no longer
// allows the host; its admin queue's Connect is refused with Connect
// Invalid Host and DNR, which retrying cannot change, and the host gives
// up at once instead of at the controller-loss timeout.
func TestReconnectRefusedForGood(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 1<<20, 512)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithCtrlLossTimeout(time.Hour), WithReconnectDelay(10*time.Millisecond, 50*time.Millisecond))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	r.mu.Lock()
	r.allow = []string{"nqn.2024-01.io.capsule:someone-else"}
	r.mu.Unlock()
	inj.Cut()
	waitFor(t, 10*time.Second, "the host to give up", func() bool { return c.State() == StateDead })
	_, err = ns.ReadAt(make([]byte, 512), 0)
	require.ErrorIs(t, err, ErrControllerLost)
	require.ErrorIs(t, err, nvmeof.StatusConnectInvalidHost)
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	assert.Zero(t, ce.QID, "refused on the admin queue")
}

// TestReconnectIOQueueRefusedForGood: after a loss an I/O queue's Connect
// is refused with DNR while the controller that refused it is alive (its
// admin queue still answers): a refusal another attempt would get again,
// so the host gives up at once, as it does when the admin queue's Connect
// is refused.
func TestReconnectIOQueueRefusedForGood(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 1<<20, 512)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithCtrlLossTimeout(time.Hour), WithReconnectDelay(10*time.Millisecond, 50*time.Millisecond))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	r.mu.Lock()
	r.ioConnect = func(qid, cntlid uint16) {
		// Called with r.mu held: the I/O queue names a controller the
		// responder no longer knows, and its admin queue stays up.
		delete(r.ctrls, cntlid)
	}
	r.mu.Unlock()
	inj.Cut()
	waitFor(t, 10*time.Second, "the host to give up", func() bool { return c.State() == StateDead })
	_, err = ns.ReadAt(make([]byte, 512), 0)
	require.ErrorIs(t, err, ErrControllerLost)
	require.ErrorIs(t, err, nvmeof.StatusConnectInvalidParameters)
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, uint16(1), ce.QID)
	var lost *setupLostError
	assert.False(t, errors.As(err, &lost), "the controller was alive when it refused")
}
