package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
)

// The NVMe/RDMA binding (NVMe RDMA Transport Specification 1.0): one RC
// queue pair per NVMe queue, set up through the connection manager with
// the RDMA_CM private data, command capsules by Send, data by RDMA Read
// and Write against the host's Keyed SGL, response capsules by Send (with
// Invalidate when the SGL asks). rdma_listener.go accepts connections;
// rdma_queue.go runs a queue.

// rdmaListener accepts NVMe/RDMA connections at one address.
type rdmaListener struct {
	t      *Target
	ln     rdma.Listener
	pd     rdma.PD
	addr   string
	disc   nvmeof.DiscoveryLogEntry
	log    *slog.Logger
	queues sync.WaitGroup // queues accepted here, so the PD outlives them
	// regions keeps the registered memory of queues that ended for the
	// queues that come next.
	regions regionCache

	closeOnce sync.Once
	closeErr  error
}

var _ listener = (*rdmaListener)(nil)

// listenRDMA starts an RDMA listener and its accept loop.
func listenRDMA(ctx context.Context, t *Target, url string, portID uint16) (*rdmaListener, error) {
	pd, err := rdma.OpenPD(url)
	if err != nil {
		return nil, fmt.Errorf("target: listen on %s: %w", url, err)
	}
	ln, err := rdma.Listen(ctx, url)
	if err != nil {
		pd.Close()
		return nil, fmt.Errorf("target: listen on %s: %w", url, err)
	}
	addr := ln.Addr()
	disc, err := discoveryEntry(addr, portID)
	if err != nil {
		ln.Close()
		pd.Close()
		return nil, err
	}
	l := &rdmaListener{t: t, ln: ln, pd: pd, addr: addr, disc: disc, log: t.log.With("listener", addr)}
	l.regions = regionCache{pd: pd, limit: regionCacheLimit, bySize: map[int][]rdma.MR{}}
	t.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *rdmaListener) url() string                     { return l.addr }
func (l *rdmaListener) entry() nvmeof.DiscoveryLogEntry { return l.disc }

// close stops accepting. The PD is released by the accept loop once the
// queues accepted here are gone.
func (l *rdmaListener) close() error {
	l.closeOnce.Do(func() { l.closeErr = l.ln.Close() })
	return l.closeErr
}

func (l *rdmaListener) acceptLoop() {
	defer l.t.wg.Done()
	defer func() {
		l.queues.Wait()
		l.regions.release()
		l.pd.Close()
	}()
	for {
		req, err := l.ln.Accept(l.t.ctx)
		if err != nil {
			if !errors.Is(err, rdma.ErrClosed) && l.t.ctx.Err() == nil {
				l.log.Error("accept failed; listener stopped", "err", err)
			}
			l.close()
			return
		}
		l.queues.Add(1)
		l.t.wg.Add(1)
		go func() {
			defer l.t.wg.Done()
			if !l.setUp(req) {
				l.queues.Done()
			}
		}()
	}
}

// reject refuses a connection with an RDMA_CM_REJECT status.
func (l *rdmaListener) reject(req rdma.ConnRequest, st nvmeof.RDMACMStatus, why error) {
	l.log.Warn("connection refused", "peer", req.RemoteAddr(), "status", st.String(), "err", why)
	rej := nvmeof.RDMACMReject{Status: st}
	b, _ := rej.MarshalBinary()
	req.Reject(b)
}

// setUp checks a connection request, builds its queue and accepts it.
// It returns whether a queue now runs (and owns a count in l.queues).
func (l *rdmaListener) setUp(req rdma.ConnRequest) bool {
	var cm nvmeof.RDMACMRequest
	if err := cm.UnmarshalBinary(req.PrivateData()); err != nil {
		l.reject(req, nvmeof.RDMACMStatusOf(err), err)
		return false
	}
	cfg := &l.t.cfg
	maxEntries := cfg.maxQueueEntries
	if cm.QID == 0 {
		maxEntries = AdminQueueEntries
	} else if int(cm.QID) > cfg.maxIOQueues {
		l.reject(req, nvmeof.RDMACMInvalidQID, fmt.Errorf("QID %d of at most %d", cm.QID, cfg.maxIOQueues))
		return false
	}
	if st := cm.CheckQueueSizes(maxEntries); st != 0 {
		l.reject(req, st, fmt.Errorf("HSQSIZE %d, HRQSIZE %d; at most %d entries", cm.HSQSize, cm.HRQSize, maxEntries))
		return false
	}
	q, err := newRDMAQueue(l, cm.QID, int(cm.HSQSize)+1)
	if err != nil {
		l.reject(req, nvmeof.RDMACMNoResources, err)
		return false
	}
	accept := nvmeof.RDMACMAccept{CRQSize: cm.HSQSize + 1}
	b, _ := accept.MarshalBinary()
	if err := req.Accept(q.qp, b); err != nil {
		l.log.Warn("accept failed", "peer", req.RemoteAddr(), "err", err)
		q.free()
		return false
	}
	if err := l.t.registerQueue(&q.core); err != nil {
		q.qp.SetError()
		q.free()
		return false
	}
	q.log.Debug("queue connected", "hrqsize", cm.HRQSize)
	l.t.wg.Add(1)
	go q.run()
	return true
}

// regionCacheLimit bounds the registered memory a listener keeps for
// queues to come.
const regionCacheLimit = 64 << 20

// regionCache holds registered regions (all with AccessLocalWrite) that
// queues no longer use, by size, so that new queues, above all the burst
// of them after hosts reconnect, reuse memory instead of registering it
// again. A region is put back only once its QP is closed, when no
// transfer can touch it any more. Its bytes are stale, never shown to a
// host: receives overwrite capsule buffers, and every byte of a data
// buffer a command sends was written by the command.
type regionCache struct {
	pd    rdma.PD
	limit int

	mu     sync.Mutex // guards bySize and bytes; taken alone
	bySize map[int][]rdma.MR
	bytes  int
}

// get returns a cached region of size bytes, or registers a new one.
func (c *regionCache) get(size int) (rdma.MR, error) {
	c.mu.Lock()
	if list := c.bySize[size]; len(list) > 0 {
		mr := list[len(list)-1]
		c.bySize[size] = list[:len(list)-1]
		c.bytes -= size
		c.mu.Unlock()
		return mr, nil
	}
	c.mu.Unlock()
	return c.pd.Alloc(size, rdma.AccessLocalWrite)
}

// put keeps a region for later, or deregisters it when the cache is full.
func (c *regionCache) put(mr rdma.MR) {
	size := len(mr.Bytes())
	c.mu.Lock()
	if c.bytes+size <= c.limit {
		c.bySize[size] = append(c.bySize[size], mr)
		c.bytes += size
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	mr.Deregister()
}

// release deregisters every cached region.
func (c *regionCache) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for size, list := range c.bySize {
		for _, mr := range list {
			mr.Deregister()
		}
		delete(c.bySize, size)
	}
	c.bytes = 0
}
