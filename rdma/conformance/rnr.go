package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// testRNRExceeded: a Send or WriteImm that finds no Recv posted, for
// longer than the RNR bound, ends the connection: both QPs enter Error
// with RNRRetryExcErr, and the sender's WR completes with RNRRetryExcErr
// (or, under Env.CompleteOnHandoff, may already have succeeded).
func testRNRExceeded(t *testing.T, env Env) {
	for _, op := range []rdma.Opcode{rdma.OpSend, rdma.OpWriteImm} {
		t.Run(op.String(), func(t *testing.T) {
			p := setup(t, env, 0)
			src := p.allocA(16, rdma.AccessLocalWrite, 1)
			remote := p.allocB(16, rdma.AccessAll, 2)
			cfg := rdma.QPConfig{RNRRetry: 1, RNRTimeout: 10 * time.Millisecond}
			p.connect(pairOptions{cfgA: cfg, cfgB: cfg})

			postSend(t, p.a, rdma.SendWR{ID: 1, Op: op, Flags: rdma.Signaled, SGL: sgl(src, piece{0, 16}),
				RemoteAddr: remote.Addr(), RKey: remote.RKey()})
			wc := waitWC(t, p.cqA, 1)[0]
			require.Equal(t, uint64(1), wc.ID)
			if !(env.CompleteOnHandoff && wc.Status == rdma.Success) {
				require.Equal(t, rdma.RNRRetryExcErr, wc.Status, "a %v that no Recv met: %+v", op, wc)
			}
			require.ErrorIs(t, waitDone(t, p.a, "sender"), rdma.RNRRetryExcErr, "sender QP.Err")
			require.ErrorIs(t, waitDone(t, p.b, "receiver"), rdma.RNRRetryExcErr, "receiver QP.Err")
		})
	}
}

// testRNRRescued: a Recv posted while a Send waits for one, within the
// RNR bound, takes the Send; the connection stays up.
func testRNRRescued(t *testing.T, env Env) {
	p := setup(t, env, 0)
	src := p.allocA(100, rdma.AccessLocalWrite, 1)
	dst := p.allocB(100, rdma.AccessLocalWrite, 2)
	// A window of seconds, so that a loaded machine does not close it
	// before the Recv is posted.
	cfg := rdma.QPConfig{RNRRetry: 7, RNRTimeout: 500 * time.Millisecond}
	p.connect(pairOptions{cfgA: cfg, cfgB: cfg})

	postSend(t, p.a, rdma.SendWR{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(src, piece{0, 100})})
	// Give the Send time to arrive and wait; the check does not depend on it.
	time.Sleep(20 * time.Millisecond)
	postRecv(t, p.b, rdma.RecvWR{ID: 2, SGL: sgl(dst, piece{0, 100})})
	rwc := waitWC(t, p.cqB, 1)[0]
	requireWC(t, rwc, 2, rdma.WCRecv, rdma.Success)
	require.Equal(t, uint32(100), rwc.ByteLen)
	requireBytes(t, src.Bytes(), dst.Bytes(), "a Send rescued by a late Recv")
	requireWC(t, waitWC(t, p.cqA, 1)[0], 1, rdma.WCSend, rdma.Success)
	require.Equal(t, rdma.StateRTS, p.a.State())
	require.Equal(t, rdma.StateRTS, p.b.State())
}
