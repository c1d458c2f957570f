package fault

import (
	"context"
	"sync"

	"github.com/capsule-storage/capsule/rdma"
)

// cq wraps a CQ. Completions pass through; those of send WRs, which the
// wrapper posts under its own IDs, are translated back (ID, opcode), and
// the ones the caller did not ask for are consumed.
type cq struct {
	in rdma.CQ

	mu  sync.RWMutex // guards qps
	qps map[uint32]*qp
}

var _ rdma.CQ = (*cq)(nil)

func (c *cq) add(q *qp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.qps[q.in.Num()] = q
}

func (c *cq) remove(q *qp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.qps[q.in.Num()] == q {
		delete(c.qps, q.in.Num())
	}
}

func (c *cq) Poll(wc []rdma.WC) (int, error) {
	n, err := c.in.Poll(wc)
	return c.translate(wc[:n]), err
}

func (c *cq) Wait(ctx context.Context, wc []rdma.WC) (int, error) {
	for {
		n, err := c.in.Wait(ctx, wc)
		if k := c.translate(wc[:n]); k > 0 || err != nil {
			return k, err
		}
	}
}

func (c *cq) Close() error { return c.in.Close() }

// translate rewrites send completions in place and drops the consumed
// ones; it returns how many remain.
func (c *cq) translate(wc []rdma.WC) int {
	k := 0
	for i := range wc {
		w := wc[i]
		if w.Opcode == rdma.WCSend || w.Opcode == rdma.WCWrite || w.Opcode == rdma.WCRead {
			c.mu.RLock()
			q := c.qps[w.QPNum]
			c.mu.RUnlock()
			if q != nil && !q.complete(&w) {
				continue
			}
		}
		wc[k] = w
		k++
	}
	return k
}
