package host

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// TestSubmitOnPicksTheQueue writes through SubmitOn with queue choices
// 0…5 on a controller with 3 I/O queues and checks, in the capsules the
// controller received, that each write ran on queue choice%3 (QID 1 is
// the first I/O queue) and that the data landed.
func TestSubmitOnPicksTheQueue(t *testing.T) {
	forEachTransport(t, false, func(t *testing.T, url string) {
		r := newResponder(t, url, 1<<20, 4096)
		c := dialResponder(t, r, WithQueues(3), WithQueueDepth(8))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		info, err := c.Info()
		require.NoError(t, err)
		require.Equal(t, 3, info.Queues)

		var req Request
		buf := make([]byte, 4096)
		for q := range 6 {
			pattern(buf, int64(q), 0)
			req.Op, req.Offset, req.Buf = OpWrite, int64(q)*4096, buf
			require.NoError(t, ns.SubmitOn(q, &req))
			require.NoError(t, req.Wait())
			assert.Equal(t, buf, r.nsBytes()[q*4096:(q+1)*4096])
		}
		var qids []uint16
		for _, rec := range r.records() {
			cmd, _, err := nvmeof.ParseCapsule(rec.capsule)
			require.NoError(t, err)
			if rec.qid != 0 && cmd.Opcode == nvmeof.IOWrite {
				qids = append(qids, rec.qid)
			}
		}
		assert.Equal(t, []uint16{1, 2, 3, 1, 2, 3}, qids)

		require.ErrorIs(t, ns.SubmitOn(1, &Request{Op: OpWrite, Offset: 1 << 20, Buf: buf}), ErrOutOfRange)
	})
}

// TestSubmitBatch starts windows of writes and then reads with
// SubmitBatch on a real target over every transport, the commands of
// each window held and sent together, and checks the data; a refused
// request stops the batch at its index.
func TestSubmitBatch(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 4<<20, 512, nil)
		c := dialTarget(t, rt, WithQueues(1), WithQueueDepth(16))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		const n = 24 // more than the queue's depth: some wait for a slot
		reqs := make([]Request, n)
		rs := make([]*Request, n)
		bufs := make([][]byte, n)
		for round := range 3 {
			for i := range reqs {
				bufs[i] = make([]byte, 8192)
				pattern(bufs[i], int64(round*n+i), 0)
				reqs[i] = Request{Op: OpWrite, Offset: int64(i) * 8192, Buf: bufs[i]}
				rs[i] = &reqs[i]
			}
			k, err := ns.SubmitBatch(0, rs)
			require.NoError(t, err)
			require.Equal(t, n, k)
			for i := range reqs {
				require.NoError(t, reqs[i].Wait())
			}
			for i := range reqs {
				reqs[i] = Request{Op: OpRead, Offset: int64(i) * 8192, Buf: make([]byte, 8192)}
			}
			_, err = ns.SubmitBatch(0, rs)
			require.NoError(t, err)
			for i := range reqs {
				require.NoError(t, reqs[i].Wait())
				require.Equal(t, bufs[i], reqs[i].Buf, "round %d, request %d", round, i)
			}
		}
		reqs[0] = Request{Op: OpRead, Buf: make([]byte, 512)}
		reqs[1] = Request{Op: OpWrite, Offset: 4 << 20, Buf: make([]byte, 512)}
		k, err := ns.SubmitBatch(0, rs[:2])
		require.ErrorIs(t, err, ErrOutOfRange)
		require.Equal(t, 1, k)
		require.NoError(t, reqs[0].Wait())
	})
}
