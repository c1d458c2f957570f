package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newVolume makes a map with six nodes and one 4+2 volume "v".
func newVolume(t *testing.T, m *Map) {
	addNodes(t, m, 6)
	_, err := m.CreateVolume(ctxFor(t), Volume{Name: "v", Geometry: "4+2", Size: 1 << 30})
	require.NoError(t, err)
}

func TestHeadExclusive(t *testing.T) {
	m := testMap(t)
	ctx := ctxFor(t)
	newVolume(t, m)
	_, err := m.AcquireHead(ctx, "nope", "n0", HeadOptions{})
	assert.ErrorIs(t, err, ErrNotFound)

	a, err := m.AcquireHead(ctx, "v", "n0", HeadOptions{TTL: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, a.Valid())
	_, err = m.AcquireHead(ctx, "v", "n1", HeadOptions{TTL: 2 * time.Second})
	assert.ErrorIs(t, err, ErrHeld)
	info, err := m.HeadOf(ctx, "v")
	require.NoError(t, err)
	assert.Equal(t, HeadInfo{Node: "n0", Epoch: a.Epoch}, info)

	// Renewals keep the head past its TTL.
	time.Sleep(3 * time.Second)
	require.NoError(t, a.Valid(), "the head lapsed while etcd was reachable")

	// A campaign waits for the release and gets a newer epoch.
	got := make(chan *Head, 1)
	go func() {
		b, err := m.CampaignHead(ctx, "v", "n1", HeadOptions{TTL: 2 * time.Second})
		assert.NoError(t, err)
		got <- b
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("campaign won while the head was held")
	default:
	}
	require.NoError(t, a.Release(ctx))
	assert.ErrorIs(t, a.Valid(), ErrLeaseLost)
	b := <-got
	require.NotNil(t, b)
	assert.Greater(t, b.Epoch, a.Epoch)
	info, err = m.HeadOf(ctx, "v")
	require.NoError(t, err)
	assert.Equal(t, HeadInfo{Node: "n1", Epoch: b.Epoch}, info)

	// A removed head key ends the head at once.
	_, err = m.Client().Delete(ctx, m.headKey("v"))
	require.NoError(t, err)
	select {
	case <-b.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the head kept serving after its key was removed")
	}
	assert.ErrorIs(t, b.Err(), ErrLeaseLost)
	_, err = m.HeadOf(ctx, "v")
	assert.ErrorIs(t, err, ErrNotFound)
}

// TestHeadPartition cuts the head's path to etcd. The head must give
// the volume up before etcd lets another node take it, and the other
// node must get it once the lease expires: no moment has two heads.
func TestHeadPartition(t *testing.T) {
	p := newProxy(t, etcdEndpoints[0])
	mb := testMap(t) // a direct path
	ma := New(testMap(t, p.URL()).Client(), mb.prefix)
	ctx := ctxFor(t)
	newVolume(t, ma)

	a, err := ma.AcquireHead(ctx, "v", "n0", HeadOptions{TTL: 2 * time.Second})
	require.NoError(t, err)
	time.Sleep(time.Second) // a renewal or two through the proxy
	require.NoError(t, a.Valid())

	var lostAt, wonAt atomic.Int64
	start := time.Now()
	lostSeen := make(chan struct{})
	go func() {
		<-a.Lost()
		lostAt.Store(int64(time.Since(start)))
		close(lostSeen)
	}()
	p.Partition()
	b, err := mb.CampaignHead(ctx, "v", "n1", HeadOptions{TTL: 2 * time.Second})
	require.NoError(t, err)
	wonAt.Store(int64(time.Since(start)))
	defer b.Release(context.Background())

	assert.ErrorIs(t, a.Valid(), ErrLeaseLost, "the old head still valid when the new one won")
	select {
	case <-lostSeen:
	case <-time.After(5 * time.Second):
		t.Fatal("the old head was not told it lost the volume")
	}
	assert.Less(t, lostAt.Load(), wonAt.Load(), "the new head won before the old one stopped")
	// Bounded by the TTL: lost within TTL of the partition (the last
	// renewal was at most TTL/3 before it).
	assert.Less(t, time.Duration(lostAt.Load()), 2*time.Second+200*time.Millisecond)
	assert.Greater(t, b.Epoch, a.Epoch)
	t.Logf("old head stopped %v after the partition, new head won at %v",
		time.Duration(lostAt.Load()), time.Duration(wonAt.Load()))
}
