package host

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoAllocationsPerIO checks R8 on the host's hot path: synchronous
// ReadAt and WriteAt, and asynchronous Submit and SubmitBatch with
// caller-owned Requests, allocate nothing in steady state. AllocsPerRun counts the whole
// process, so this runs against the project's target (whose dispatch
// allocates nothing either) rather than the test responder.
func TestNoAllocationsPerIO(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on synchronization")
	}
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 8<<20, 4096, nil)
		c := dialTarget(t, rt, WithQueues(1), WithQueueDepth(8))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		buf := make([]byte, 4096)
		small := make([]byte, 512*2)
		big := make([]byte, 64<<10)
		done := make(chan *Request, 1)
		async := Request{Op: OpRead, Buf: buf, Done: func(r *Request) { done <- r }}
		batchDone := make(chan *Request, 4)
		batch := make([]Request, 4)
		batchPtrs := make([]*Request, len(batch))
		for i := range batch {
			batch[i] = Request{Op: OpRead, Buf: make([]byte, 4096), Done: func(r *Request) { batchDone <- r }}
			batchPtrs[i] = &batch[i]
		}
		var off int64
		for name, io := range map[string]func() error{
			"ReadAt": func() error { _, err := ns.ReadAt(buf, off); return err },
			// 4 KiB writes go in the capsule; 64 KiB ones through a
			// large buffer.
			"WriteAt in-capsule": func() error { _, err := ns.WriteAt(buf, off); return err },
			"WriteAt keyed":      func() error { _, err := ns.WriteAt(big, off); return err },
			"ReadAt unaligned":   func() error { _, err := ns.ReadAt(small, off+100); return err },
			"Submit": func() error {
				async.Offset = off
				if err := ns.Submit(&async); err != nil {
					return err
				}
				return (<-done).Err
			},
			"SubmitBatch": func() error {
				for i := range batch {
					batch[i].Offset = off + int64(i)*4096
				}
				if _, err := ns.SubmitBatch(0, batchPtrs); err != nil {
					return err
				}
				for range batch {
					if r := <-batchDone; r.Err != nil {
						return r.Err
					}
				}
				return nil
			},
		} {
			for range 200 { // warm up pools and provider slots
				require.NoError(t, io())
			}
			allocs := testing.AllocsPerRun(500, func() {
				off = (off + 4096) % (4 << 20)
				if err := io(); err != nil {
					t.Fatal(err)
				}
			})
			require.Zero(t, allocs, "%s allocates", name)
		}
	})
}
