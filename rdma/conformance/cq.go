package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// testCQPollBatch: Poll and Wait hand over several completions in one
// call when several are queued, in posting order.
func testCQPollBatch(t *testing.T, env Env) {
	const n = 16
	p := setup(t, env, 0)
	src := p.allocA(n*64, rdma.AccessLocalWrite, 1)
	remote := p.allocB(n*64, rdma.AccessAll, 2)
	p.connect(pairOptions{})

	var none [4]rdma.WC
	k, err := p.cqA.Poll(none[:])
	require.NoError(t, err)
	require.Zero(t, k, "Poll of an empty CQ")
	k, err = p.cqA.Poll(nil)
	require.NoError(t, err)
	require.Zero(t, k, "Poll into an empty slice")

	wrs := make([]rdma.SendWR, n)
	for i := range wrs {
		wrs[i] = rdma.SendWR{ID: uint64(i), Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: sgl(src, piece{i * 64, 64}),
			RemoteAddr: remote.Addr() + uint64(i*64), RKey: remote.RKey()}
	}
	// Completions may trickle in one at a time while they are polled, so
	// try a few rounds, giving them longer to pile up each time; one
	// round that hands over more than one completion at once suffices.
	batched := false
	for round := 0; round < 10 && !batched; round++ {
		postSend(t, p.a, wrs...)
		time.Sleep(time.Duration(round) * 5 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		got := make([]rdma.WC, 0, n)
		buf := make([]rdma.WC, 2*n)
		for len(got) < n {
			k, err := p.cqA.Wait(ctx, buf)
			require.NoError(t, err, "Wait after %d of %d completions", len(got), n)
			require.LessOrEqual(t, len(got)+k, n, "more completions than WRs: %v", append(got, buf[:k]...))
			batched = batched || k > 1
			got = append(got, buf[:k]...)
		}
		cancel()
		for i, wc := range got {
			requireWC(t, wc, uint64(i), rdma.WCWrite, rdma.Success)
		}
	}
	require.True(t, batched, "no Wait returned more than one completion")
	requireEmpty(t, p.cqA)
}

// testCQWaitCancel: Wait returns with the context's error when the
// context ends, and with a completion when one arrives while it waits.
func testCQWaitCancel(t *testing.T, env Env) {
	p := setup(t, env, 0)
	src := p.allocA(64, rdma.AccessLocalWrite, 1)
	remote := p.allocB(64, rdma.AccessAll, 2)
	p.connect(pairOptions{})
	wc := make([]rdma.WC, 4)

	t.Run("Canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(10 * time.Millisecond)
			cancel()
		}()
		k, err := p.cqA.Wait(ctx, wc)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, k)
	})
	t.Run("AlreadyCanceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		k, err := p.cqA.Wait(ctx, wc)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, k)
	})
	t.Run("Deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		k, err := p.cqA.Wait(ctx, wc)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, k)
	})
	t.Run("Woken", func(t *testing.T) {
		type result struct {
			wc  []rdma.WC
			err error
		}
		done := make(chan result, 1)
		go func() {
			wcs, err := collectWC(p.cqA, 1)
			done <- result{wcs, err}
		}()
		time.Sleep(10 * time.Millisecond)
		postSend(t, p.a, rdma.SendWR{ID: 7, Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: sgl(src, piece{0, 64}),
			RemoteAddr: remote.Addr(), RKey: remote.RKey()})
		r := <-done
		require.NoError(t, r.err)
		requireWC(t, r.wc[0], 7, rdma.WCWrite, rdma.Success)
	})
	requireEmpty(t, p.cqA)
}
