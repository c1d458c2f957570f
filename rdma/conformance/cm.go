package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// testConnPrivateData: the connect's private data reaches the listener
// and the accept's comes back from Connect; both QPs are then in RTS.
func testConnPrivateData(t *testing.T, env Env) {
	t.Run("BothWays", func(t *testing.T) {
		privA, privB := pattern(64, 1), pattern(100, 2)
		p := newPair(t, env, pairOptions{privA: privA, privB: privB})
		require.Equal(t, privA, p.reqPriv, "ConnRequest.PrivateData")
		require.Equal(t, privB, p.reply, "the private data Connect returns")
		require.Equal(t, rdma.StateRTS, p.a.State())
		require.Equal(t, rdma.StateRTS, p.b.State())
		require.Nil(t, p.a.Err())
		require.Nil(t, p.b.Err())
		select {
		case <-p.a.Done():
			t.Fatal("Done is closed on a connected QP")
		default:
		}
	})
	t.Run("None", func(t *testing.T) {
		p := newPair(t, env, pairOptions{})
		require.Empty(t, p.reqPriv, "ConnRequest.PrivateData without private data")
		require.Empty(t, p.reply, "Connect's reply without private data")
	})
}

// testConnReject: Reject's private data reaches Connect as a
// *rdma.RejectError; the listener then takes the next connection.
func testConnReject(t *testing.T, env Env) {
	p := setup(t, env, 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	why := []byte("no such subsystem")
	hello := pattern(20, 3)
	seen := make(chan []byte, 1)
	rejected := make(chan error, 1)
	go func() {
		req, err := p.l.Accept(ctx)
		if err != nil {
			seen <- nil
			rejected <- err
			return
		}
		seen <- append([]byte(nil), req.PrivateData()...)
		rejected <- req.Reject(why)
	}()
	qp, err := p.pdA.CreateQP(rdma.QPConfig{SendCQ: p.cqA})
	require.NoError(t, err)
	p.track(qp)
	_, err = qp.Connect(ctx, hostOf(t, p.l.Addr()), hello)
	require.Equal(t, hello, <-seen, "the private data of the rejected request")
	require.NoError(t, <-rejected, "Reject")
	var rej *rdma.RejectError
	require.True(t, errors.As(err, &rej), "Connect after Reject: %v (%T), want *rdma.RejectError", err, err)
	require.Equal(t, why, rej.Private, "RejectError.Private")
	require.ErrorIs(t, err, rdma.ErrConnRefused)
	require.NotEqual(t, rdma.StateRTS, qp.State(), "a rejected QP is not connected")

	p.connect(pairOptions{privA: []byte("again")})
	require.Equal(t, []byte("again"), p.reqPriv)
}

// testConnNothingListening: Connect to an address where nothing listens
// fails with ErrConnRefused.
func testConnNothingListening(t *testing.T, env Env) {
	l := listen(t, env)
	addr := l.Addr()
	pd := openPD(t, addr)
	p := &pair{t: t, pdA: pd}
	t.Cleanup(p.release)
	cq, err := p.newCQ(pd, 16)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
	require.NoError(t, err)
	p.track(qp)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err = qp.Connect(ctx, hostOf(t, addr), []byte("anyone?"))
	require.ErrorIs(t, err, rdma.ErrConnRefused, "Connect to a closed listener's address")
	require.NotEqual(t, rdma.StateRTS, qp.State())
}

// testListenerCloseUnblocksAccept: Close ends an Accept in progress with
// ErrClosed; a canceled context ends one with the context's error.
func testListenerCloseUnblocksAccept(t *testing.T, env Env) {
	t.Run("Close", func(t *testing.T) {
		l := listen(t, env)
		done := make(chan error, 1)
		go func() {
			_, err := l.Accept(context.Background())
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, l.Close())
		select {
		case err := <-done:
			require.ErrorIs(t, err, rdma.ErrClosed, "Accept on a closed listener")
		case <-time.After(waitTimeout):
			t.Fatal("Listener.Close did not end Accept")
		}
		_, err := l.Accept(context.Background())
		require.ErrorIs(t, err, rdma.ErrClosed, "Accept after Close")
	})
	t.Run("Context", func(t *testing.T) {
		l := listen(t, env)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := l.Accept(ctx)
			done <- err
		}()
		time.Sleep(10 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled, "Accept with a canceled context")
		case <-time.After(waitTimeout):
			t.Fatal("canceling the context did not end Accept")
		}
	})
}
