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
