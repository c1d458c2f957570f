package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Head is a node's right to serve one volume: the volume's head key in
// etcd, under a lease this node renews. Epoch numbers the tenure: it is
// the etcd revision that created the key, so every later head of the
// volume has a larger one.
//
// # The fencing rule
//
// etcd expires a lease no sooner than its TTL after the last renewal it
// received, and only then can another node create the head key. The
// holder sends a renewal at t0 and, when the answer grants TTL seconds,
// knows the lease lives until at least t0 + TTL (the server received the
// renewal after t0). It treats the lease as held until t0 + TTL − margin
// and no longer: past that, Valid fails and Lost is closed, whether or
// not etcd could be reached. So the old head stops before a new one can
// start, as long as the two machines' clocks run at about the same rate
// (margin absorbs the difference and the time a check takes to act);
// no clock needs to agree with another's time of day. Epoch is for the
// devices: a write that carries it can be refused by a device that has
// seen a newer one, which covers a head that paused for longer than its
// margin between checking Valid and writing.
type Head struct {
	Volume string
	Node   string
	Epoch  int64

	m      *Map
	lease  clientv3.LeaseID
	ttl    time.Duration
	margin time.Duration

	base     time.Time    // monotonic origin of deadline
	deadline atomic.Int64 // ns after base; the lease is held before it

	timer    *time.Timer   // calls expire at the deadline
	lost     chan struct{} // closed once, by lose
	loseOnce sync.Once
	errMu    sync.Mutex // guards err
	err      error
	stop     context.CancelFunc
	done     chan struct{} // closed when the renewal loop ends
}

// HeadOptions tune a head's lease.
type HeadOptions struct {
	// TTL of the lease (etcd counts whole seconds, and raises a TTL below
	// its minimum, 2 s with default settings). Default 10 s.
	TTL time.Duration
	// Margin: how long before the lease's earliest expiry the holder
	// gives it up. Default TTL/5.
	Margin time.Duration
}

func (o HeadOptions) withDefaults() HeadOptions {
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	return o
}

// AcquireHead makes node the head of volume if no node is; ErrHeld
// (wrapped, naming the holder) if one is.
func (m *Map) AcquireHead(ctx context.Context, volume, node string, o HeadOptions) (*Head, error) {
	o = o.withDefaults()
	if _, _, err := m.Volume(ctx, volume); err != nil {
		return nil, err
	}
	t0 := time.Now()
	g, err := m.cli.Grant(ctx, ttlSeconds(o.TTL))
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(g.TTL) * time.Second
	margin := o.Margin
	if margin <= 0 {
		margin = ttl / 5
	}
	k := m.headKey(volume)
	r, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, mustJSON(HeadInfo{Node: node}), clientv3.WithLease(g.ID))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		m.revoke(g.ID)
		return nil, err
	}
	if !r.Succeeded {
		m.revoke(g.ID)
		holder := "another node"
		if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			holder = string(kvs[0].Value)
		}
		return nil, fmt.Errorf("%w: volume %s: %s", ErrHeld, volume, holder)
	}
	h := &Head{
		Volume: volume, Node: node, Epoch: r.Header.Revision,
		m: m, lease: g.ID, ttl: ttl, margin: margin,
		base: t0, lost: make(chan struct{}), done: make(chan struct{}),
	}
	h.extend(t0, ttl)
	h.timer = time.AfterFunc(h.untilDeadline(), h.expire)
	lctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go h.renew(lctx)
	return h, nil
}

// CampaignHead waits until node can become the head of volume, or ctx
// ends.
func (m *Map) CampaignHead(ctx context.Context, volume, node string, o HeadOptions) (*Head, error) {
	for {
		h, err := m.AcquireHead(ctx, volume, node, o)
		if !errors.Is(err, ErrHeld) {
			return h, err
		}
		// Wait for the key to go, from the revision just read on.
		r, err := m.cli.Get(ctx, m.headKey(volume))
		if err != nil {
			return nil, err
		}
		if len(r.Kvs) == 0 {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		for wr := range m.cli.Watch(wctx, m.headKey(volume), clientv3.WithRev(r.Header.Revision+1)) {
			if wr.Err() != nil || slicesHasDelete(wr.Events) {
				break
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func slicesHasDelete(evs []*clientv3.Event) bool {
	for _, e := range evs {
		if e.Type == clientv3.EventTypeDelete {
			return true
		}
	}
	return false
}

func (m *Map) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m.cli.Revoke(ctx, id) //nolint:errcheck // the lease expires by itself anyway
}

// extend moves the deadline to sent + granted − margin, never back.
func (h *Head) extend(sent time.Time, granted time.Duration) {
	d := int64(sent.Sub(h.base) + granted - h.margin)
	for {
		old := h.deadline.Load()
		if d <= old || h.deadline.CompareAndSwap(old, d) {
			return
		}
	}
}

// expire runs at the deadline: it closes Lost, unless a renewal moved
// the deadline on meanwhile, when it waits for the new one.
func (h *Head) expire() {
	if h.Valid() == nil {
		h.timer.Reset(h.untilDeadline())
	}
}

// Valid returns nil while the lease is known to be held, and the reason
// otherwise (ErrLeaseLost). It is cheap: call it before each write.
func (h *Head) Valid() error {
	select {
	case <-h.lost:
		return h.Err()
	default:
	}
	if time.Since(h.base) >= time.Duration(h.deadline.Load()) {
		h.lose(fmt.Errorf("%w: volume %s: not renewed in time", ErrLeaseLost, h.Volume))
		return h.Err()
	}
	return nil
}

// Lost is closed when the head must stop serving: the lease's deadline
// passed without a renewal, etcd said the lease is gone, the head key
// was removed, or Release ran.
func (h *Head) Lost() <-chan struct{} { return h.lost }

// Err says why Lost was closed; nil before.
func (h *Head) Err() error {
	h.errMu.Lock()
	defer h.errMu.Unlock()
	return h.err
}

func (h *Head) lose(err error) {
	h.loseOnce.Do(func() {
		h.errMu.Lock()
		h.err = err
		h.errMu.Unlock()
		close(h.lost)
	})
}

// Release gives the volume up at once: the renewals stop, Lost closes,
// and the lease is revoked so that another node can take over without
// waiting for the TTL.
func (h *Head) Release(ctx context.Context) error {
	h.lose(fmt.Errorf("%w: volume %s: released", ErrLeaseLost, h.Volume))
	h.timer.Stop()
	h.stop()
	<-h.done
	_, err := h.m.cli.Revoke(ctx, h.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		err = nil
	}
	return err
}

// renew renews the lease every TTL/3 with its own KeepAliveOnce calls,
// timing each from before it was sent, and watches the head key. It
// may wait on etcd for a while; the deadline's timer closes Lost on
// time whatever it does.
func (h *Head) renew(ctx context.Context) {
	defer close(h.done)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := h.m.cli.Watch(wctx, h.m.headKey(h.Volume), clientv3.WithRev(h.Epoch+1))
	every := h.ttl / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.lost:
			return
		case wr, ok := <-watch:
			if !ok {
				// Cancelled, or the client closed: renewals decide.
				watch = nil
				continue
			}
			if slicesHasDelete(wr.Events) {
				h.lose(fmt.Errorf("%w: volume %s: head key removed", ErrLeaseLost, h.Volume))
				return
			}
			if wr.Err() != nil {
				watch = h.m.cli.Watch(wctx, h.m.headKey(h.Volume), clientv3.WithRev(h.Epoch+1))
			}
		case <-tick.C:
			t0 := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, every)
			r, err := h.m.cli.KeepAliveOnce(rctx, h.lease)
			rcancel()
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				h.lose(fmt.Errorf("%w: volume %s: lease expired in etcd", ErrLeaseLost, h.Volume))
				return
			case err != nil:
				// etcd unreachable: keep trying until the deadline.
			case r.TTL <= 0:
				h.lose(fmt.Errorf("%w: volume %s: lease expired in etcd", ErrLeaseLost, h.Volume))
				return
			default:
				h.extend(t0, time.Duration(r.TTL)*time.Second)
			}
		}
	}
}

func (h *Head) untilDeadline() time.Duration {
	return max(time.Duration(h.deadline.Load())-time.Since(h.base), 0)
}

// Report puts v (as JSON) in the map as what the head says of its volume
// now (its store's health, a rebuild's progress), under the head's lease:
// it goes when the head does. Any node can read it (Reports), so an
// operator asking any node sees it. A nil v removes it.
func (h *Head) Report(ctx context.Context, v any) error {
	if err := h.Valid(); err != nil {
		return err
	}
	k := h.m.reportKey(h.Volume)
	if v == nil {
		_, err := h.m.cli.Delete(ctx, k)
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = h.m.cli.Put(ctx, k, string(b), clientv3.WithLease(h.lease))
	return err
}

// Reports returns what the heads reported of their volumes (Head.Report),
// by volume.
func (m *Map) Reports(ctx context.Context) (map[string]json.RawMessage, error) {
	r, err := m.cli.Get(ctx, m.prefix+"reports/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(r.Kvs))
	for _, kv := range r.Kvs {
		out[strings.TrimPrefix(string(kv.Key), m.prefix+"reports/")] = json.RawMessage(kv.Value)
	}
	return out, nil
}

func (m *Map) reportKey(volume string) string { return m.prefix + "reports/" + volume }
