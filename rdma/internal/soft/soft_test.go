package soft

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

func TestCQOrderAndBatch(t *testing.T) {
	cq, err := NewCQ(4)
	require.NoError(t, err)
	for i := range 3 {
		require.True(t, cq.Push(rdma.WC{ID: uint64(i)}))
	}
	wcs := make([]rdma.WC, 2)
	n, err := cq.Poll(wcs)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	assert.Equal(t, []uint64{0, 1}, []uint64{wcs[0].ID, wcs[1].ID})
	// The ring wraps: push past the end of the backing array.
	for i := 3; i < 6; i++ {
		require.True(t, cq.Push(rdma.WC{ID: uint64(i)}))
	}
	got := make([]rdma.WC, 8)
	n, err = cq.Poll(got)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	for i, wc := range got[:n] {
		assert.Equal(t, uint64(i+2), wc.ID)
	}
	n, err = cq.Poll(got)
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestCQOverrunIsSticky(t *testing.T) {
	cq, err := NewCQ(2)
	require.NoError(t, err)
	require.True(t, cq.Push(rdma.WC{ID: 1}))
	require.True(t, cq.Push(rdma.WC{ID: 2}))
	require.False(t, cq.Push(rdma.WC{ID: 3}), "a full CQ refuses")
	_, err = cq.Poll(make([]rdma.WC, 4))
	require.ErrorIs(t, err, rdma.ErrCQOverrun)
	_, err = cq.Wait(context.Background(), make([]rdma.WC, 4))
	require.ErrorIs(t, err, rdma.ErrCQOverrun, "Wait does not hang on an overrun CQ")
	require.False(t, cq.Push(rdma.WC{ID: 4}))
}

func TestCQWait(t *testing.T) {
	cq, err := NewCQ(8)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cq.Wait(ctx, make([]rdma.WC, 1))
		done <- err
	}()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	go func() {
		wcs := make([]rdma.WC, 1)
		n, err := cq.Wait(context.Background(), wcs)
		if err == nil && (n != 1 || wcs[0].ID != 42) {
			err = assert.AnError
		}
		done <- err
	}()
	time.Sleep(time.Millisecond) // let Wait reach its sleep; correctness does not depend on it
	require.True(t, cq.Push(rdma.WC{ID: 42}))
	require.NoError(t, <-done)

	go func() {
		_, err := cq.Wait(context.Background(), make([]rdma.WC, 1))
		done <- err
	}()
	require.NoError(t, cq.Close())
	require.ErrorIs(t, <-done, rdma.ErrClosed, "Close wakes a waiter")
	require.False(t, cq.Push(rdma.WC{}))
	_, err = NewCQ(0)
	require.ErrorIs(t, err, rdma.ErrInvalidArgument)
}

// TestCQWaitWithoutSpin: with SetSpin(0) Wait sleeps at once when the CQ
// is empty; every completion pushed from another goroutine still
// arrives, in order, and one already queued returns without sleeping.
func TestCQWaitWithoutSpin(t *testing.T) {
	cq, err := NewCQ(64)
	require.NoError(t, err)
	cq.SetSpin(0)
	require.True(t, cq.Push(rdma.WC{ID: 7}))
	wcs := make([]rdma.WC, 4)
	n, err := cq.Wait(context.Background(), wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, uint64(7), wcs[0].ID)

	const total = 10000
	credits := make(chan struct{}, 32) // keeps the producer within the CQ's depth
	go func() {
		for i := range total {
			credits <- struct{}{}
			if !cq.Push(rdma.WC{ID: uint64(i)}) {
				t.Error("push refused")
				return
			}
			if i%64 == 0 {
				time.Sleep(time.Microsecond) // let the consumer reach its sleep now and then
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next := uint64(0)
	for next < total {
		n, err := cq.Wait(ctx, wcs)
		require.NoError(t, err)
		for _, wc := range wcs[:n] {
			require.Equal(t, next, wc.ID)
			next++
			<-credits
		}
	}
}

func TestKeyTableAcquire(t *testing.T) {
	var kt KeyTable
	buf := make([]byte, 100)
	r, err := kt.Add(buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
	require.NoError(t, err)
	require.NotZero(t, r.Key>>8, "index 0 is never used")
	require.NotZero(t, r.Key&0xff, "generation 0 is never used")
	require.Same(t, r, kt.Lookup(r.Key))

	for _, c := range []struct {
		name    string
		key     uint32
		addr, n uint64
		want    rdma.Access
		ok      bool
	}{
		{"whole", r.Key, r.Base, 100, rdma.AccessRemoteRead, true},
		{"tail", r.Key, r.Base + 99, 1, rdma.AccessRemoteRead, true},
		{"empty at end", r.Key, r.Base + 100, 0, rdma.AccessRemoteRead, true},
		{"one past end", r.Key, r.Base + 100, 1, rdma.AccessRemoteRead, false},
		{"before base", r.Key, r.Base - 1, 1, rdma.AccessRemoteRead, false},
		{"too long", r.Key, r.Base, 101, rdma.AccessRemoteRead, false},
		{"wrapping length", r.Key, r.Base + 1, ^uint64(0), rdma.AccessRemoteRead, false},
		{"missing right", r.Key, r.Base, 1, rdma.AccessRemoteWrite, false},
		{"wrong generation", r.Key ^ 1, r.Base, 1, rdma.AccessRemoteRead, false},
		{"unknown index", r.Key + 0x100, r.Base, 1, rdma.AccessRemoteRead, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg, b, ok := kt.Acquire(c.key, c.addr, c.n, c.want)
			require.Equal(t, c.ok, ok)
			if ok {
				require.Len(t, b, int(c.n))
				reg.Release()
			}
		})
	}
}

func TestKeyTableRemoveInvalidatesAndReuses(t *testing.T) {
	var kt KeyTable
	r, err := kt.Add(make([]byte, 8), rdma.AccessAll)
	require.NoError(t, err)
	old := r.Key
	kt.Remove(r)
	kt.Remove(r) // twice is harmless
	assert.Nil(t, kt.Lookup(old))
	_, _, ok := kt.Acquire(old, r.Base, 1, rdma.AccessRemoteRead)
	assert.False(t, ok)

	r2, err := kt.Add(make([]byte, 8), rdma.AccessAll)
	require.NoError(t, err)
	assert.Equal(t, old>>8, r2.Key>>8, "the slot is reused")
	assert.NotEqual(t, old, r2.Key, "with a new generation")
	assert.Nil(t, kt.Lookup(old), "the old key stays dead")
}

// Remove waits for an access in progress, and no access starts after it.
func TestKeyTableRemoveWaitsForAccess(t *testing.T) {
	var kt KeyTable
	r, err := kt.Add(make([]byte, 8), rdma.AccessAll)
	require.NoError(t, err)
	reg, b, ok := kt.Acquire(r.Key, r.Base, 8, rdma.AccessRemoteWrite)
	require.True(t, ok)

	removed := make(chan struct{})
	go func() {
		kt.Remove(r)
		close(removed)
	}()
	select {
	case <-removed:
		t.Fatal("Remove returned while an access was in progress")
	case <-time.After(20 * time.Millisecond):
	}
	copy(b, "in use!!") // still safe: the access holds the region
	reg.Release()
	<-removed
	_, _, ok = kt.Acquire(r.Key, r.Base, 8, rdma.AccessRemoteWrite)
	assert.False(t, ok)
}

func TestKeyTableConcurrent(t *testing.T) {
	var kt KeyTable
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				r, err := kt.Add(make([]byte, 16), rdma.AccessAll)
				if !assert.NoError(t, err) {
					return
				}
				if reg, _, ok := kt.Acquire(r.Key, r.Base, 16, rdma.AccessRemoteRead); assert.True(t, ok) {
					reg.Release()
				}
				kt.Remove(r)
			}
		}()
	}
	wg.Wait()
}
