package soft

import (
	"context"
	"sync"

	"github.com/capsule-storage/capsule/rdma"
)

// CQ is a software completion queue. It implements rdma.CQ.
type CQ struct {
	notify chan struct{} // one token when completions were pushed to an empty queue
	spin   int           // polls Wait makes before it sleeps; set before use

	mu      sync.Mutex // guards the fields below
	ring    []rdma.WC
	head    int // next to poll
	n       int // queued
	overrun bool
	closed  bool
}

var _ rdma.CQ = (*CQ)(nil)

// NewCQ returns a CQ that holds depth completions.
func NewCQ(depth int) (*CQ, error) {
	if depth <= 0 {
		return nil, rdma.ErrInvalidArgument
	}
	return &CQ{ring: make([]rdma.WC, depth), notify: make(chan struct{}, 1), spin: DefaultSpin}, nil
}

// DefaultSpin is how many times Wait polls an empty CQ before it sleeps,
// unless SetSpin changed it.
const DefaultSpin = 64

// SetSpin sets how many times Wait polls an empty CQ before it sleeps. A
// provider whose completions come from a goroutine that the consumer's
// spinning would keep off the processor sets it low. Call it before the
// CQ is used.
func (c *CQ) SetSpin(n int) { c.spin = max(n, 0) }

// Push queues one completion. It returns false (and the CQ enters the
// overrun state) when the ring is full, or when the CQ is closed.
func (c *CQ) Push(wc rdma.WC) bool {
	c.mu.Lock()
	if c.closed || c.overrun {
		c.mu.Unlock()
		return false
	}
	if c.n == len(c.ring) {
		c.overrun = true
		c.mu.Unlock()
		c.wake()
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = wc
	c.n++
	c.mu.Unlock()
	c.wake()
	return true
}

func (c *CQ) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Poll implements rdma.CQ.
func (c *CQ) Poll(wc []rdma.WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, rdma.ErrClosed
	}
	if c.overrun {
		return 0, rdma.ErrCQOverrun
	}
	k := 0
	for k < len(wc) && c.n > 0 {
		wc[k] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	return k, nil
}

// Wait implements rdma.CQ. It spins briefly before it sleeps, which keeps
// latency low when completions follow each other closely.
func (c *CQ) Wait(ctx context.Context, wc []rdma.WC) (int, error) {
	for spin := 0; ; spin++ {
		n, err := c.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if spin < c.spin {
			continue
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Close implements rdma.CQ.
func (c *CQ) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wake()
	return nil
}
