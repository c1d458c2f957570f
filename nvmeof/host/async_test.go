package host

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/fault"
)

// TestAsyncFromOneGoroutine keeps 64 requests in flight from one
// goroutine: each Done resubmits its request at a new offset until the
// writes are all done, then the reads check them.
func TestAsyncFromOneGoroutine(t *testing.T) {
	forEachTransport(t, false, func(t *testing.T, url string) {
		r := newResponder(t, url, 4<<20, 4096)
		c := dialResponder(t, r, WithQueues(2), WithQueueDepth(16))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		const qd, blocks = 64, 1024
		data := make([]byte, blocks*4096)
		pattern(data, 11, 0)

		for _, op := range []Op{OpWrite, OpRead} {
			var next atomic.Int64
			finished := make(chan error, qd)
			got := make([]byte, len(data))
			reqs := make([]Request, qd)
			for i := range reqs {
				reqs[i].Op = op
				reqs[i].Done = func(rq *Request) {
					if rq.Err != nil {
						finished <- rq.Err
						return
					}
					b := next.Add(1) - 1
					if b >= blocks {
						finished <- nil
						return
					}
					rq.Offset = b * 4096
					rq.Buf = data[b*4096 : (b+1)*4096]
					if op == OpRead {
						rq.Buf = got[b*4096 : (b+1)*4096]
					}
					if err := ns.Submit(rq); err != nil {
						finished <- err
					}
				}
			}
			for i := range reqs {
				b := next.Add(1) - 1
				reqs[i].Offset = b * 4096
				reqs[i].Buf = data[b*4096 : (b+1)*4096]
				if op == OpRead {
					reqs[i].Buf = got[b*4096 : (b+1)*4096]
				}
				require.NoError(t, ns.Submit(&reqs[i]))
			}
			for range qd {
				require.NoError(t, <-finished)
			}
			if op == OpRead {
				require.True(t, bytes.Equal(data, got), "read back")
			}
		}
		assert.Equal(t, data, r.nsBytes())
	})
}

func TestSubmitRefusals(t *testing.T) {
	r := newResponder(t, listenURLs(true)[0], 1<<20, 512)
	inj := fault.For(r.url)
	c := dialResponder(t, r, WithQueues(1))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	called := false
	done := func(*Request) { called = true }
	for _, rq := range []*Request{
		{Op: 0, Done: done},
		{Op: OpRead, Done: done},
		{Op: OpWrite, Buf: make([]byte, 512), Length: 512, Done: done},
		{Op: OpWriteZeroes, Done: done},
		{Op: OpFlush, Offset: 512, Done: done},
	} {
		assert.ErrorIs(t, ns.Submit(rq), ErrInvalidRequest, "%v", rq.Op)
	}
	assert.False(t, called, "Done is not called when Submit refuses")

	// Hold the responses so that the request stays in flight.
	rule := inj.Delay(fault.Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: fault.Acceptor}, 300*time.Millisecond)
	finished := make(chan error, 1)
	rq := Request{Op: OpRead, Buf: make([]byte, 512), Done: func(r *Request) { finished <- r.Err }}
	require.NoError(t, ns.Submit(&rq))
	assert.ErrorIs(t, ns.Submit(&rq), ErrRequestBusy, "a request in flight cannot be submitted again")
	rule.Remove()
	require.NoError(t, <-finished)
	require.NoError(t, ns.Submit(&rq), "a completed request can be submitted again")
	require.NoError(t, <-finished)
}
