package host

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/netfault"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/target"
	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/fault"
)

const targetNQN = "nqn.2024-01.io.capsule:host-test"

// realTarget is the project's target in this process, with one memory
// namespace.
type realTarget struct {
	tgt  *target.Target
	sub  *target.Subsystem
	addr string
}

// newTarget starts a target listening at url with a memory namespace of
// size bytes in blocks of bs.
func newTarget(t testing.TB, url string, size int64, bs int, hosts []string, opts ...target.Option) *realTarget {
	t.Helper()
	cut := false
	if rest, ok := strings.CutPrefix(url, "fault+tcp://"); ok {
		// A TCP listener whose connections tests cut: netfault wraps it.
		url, cut = "tcp://"+rest, true
		opts = append(opts, target.WithListenerWrapper(netfault.Wrapper))
	}
	tgt, err := target.New(append([]target.Option{target.WithLogger(testLogger(t))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	sub, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: targetNQN, AllowAnyHost: hosts == nil, Hosts: hosts})
	require.NoError(t, err)
	dev, err := blockdev.NewMemory(size)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev, BlockSize: bs})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := tgt.Listen(ctx, url)
	require.NoError(t, err)
	if cut {
		addr = "fault+" + addr
	}
	return &realTarget{tgt: tgt, sub: sub, addr: addr}
}

// dialTarget connects a host to the target with test defaults and opts.
func dialTarget(t testing.TB, rt *realTarget, opts ...Option) *Controller {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := []Option{WithQueues(2), WithQueueDepth(32), WithLogger(testLogger(t))}
	c, err := Dial(ctx, rt.addr, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTargetReadWrite(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 16<<20, 512, nil)
		c := dialTarget(t, rt, WithQueues(queuesFor(url, 2))) // no WithSubsystem: found through discovery
		require.Equal(t, targetNQN, c.SubsystemNQN())
		entries, err := Discover(context.Background(), rt.addr, WithLogger(testLogger(t)))
		require.NoError(t, err)
		var urls []string
		for _, e := range entries {
			if e.SUBTYPE == nvmeof.SubsystemNVMe {
				u, err := EntryURL(e)
				require.NoError(t, err)
				urls = append(urls, u)
			}
		}
		require.Equal(t, []string{rt.addr}, urls, "the discovery log names the listener")
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		require.Equal(t, int64(16<<20), ns.Size())
		for i, size := range []int{512, 4096, 8192, 8704, 65536, 300 << 10, 1 << 20} {
			off := int64(i) * (1 << 20)
			w := make([]byte, size)
			pattern(w, int64(i+1), off)
			_, err := ns.WriteAt(w, off)
			require.NoError(t, err, "write %d", size)
			got := make([]byte, size)
			_, err = ns.ReadAt(got, off)
			require.NoError(t, err, "read %d", size)
			require.Equal(t, w, got, "read back %d", size)
		}
		require.NoError(t, ns.WriteZeroes(0, 1<<20))
		require.NoError(t, ns.Discard(1<<20, 1<<20))
		require.NoError(t, ns.Flush())
	})
}

// queuesFor returns n, or 1 for tcp in a race-detector build. A TCP
// socket carries bytes through the kernel, so the race detector cannot
// see the happens-before edge a PDU carries: a write the target made on
// one queue's goroutine and a read it makes on another's, ordered only
// through the host, is reported as a race inside the target's memory
// device. With one I/O queue every target access runs on one goroutine.
// (The shm provider supplies those edges itself under -race; builds
// without -race use n everywhere.)
func queuesFor(url string, n int) int {
	if raceEnabled && strings.Contains(url, "tcp://") {
		return 1
	}
	return n
}

// stressRequests is the size of the stress runs: smaller under the race
// detector, which slows every access tenfold.
func stressRequests(n int) int {
	if raceEnabled {
		return n / 5
	}
	return n
}

func TestTargetStress(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		for _, bs := range []int{512, 4096} {
			t.Run(fmt.Sprintf("bs%d", bs), func(t *testing.T) {
				rt := newTarget(t, url, 32<<20, bs, nil)
				c := dialTarget(t, rt, WithQueues(queuesFor(url, 4)), WithQueueDepth(128))
				ns, err := c.Namespace(1)
				require.NoError(t, err)
				seed := uint64(time.Now().UnixNano())
				t.Logf("seed %d", seed)
				s := newStress(t, ns, seed, stressRequests(20000), 1<<20)
				s.run(128)
				s.verify()
				t.Log(s.report())
			})
		}
	})
}

// TestTargetReconnectAfterCut cuts the connection again and again while
// the stress runs: every request is resubmitted and completes, and the
// data matches the shadow afterwards.
func TestTargetReconnectAfterCut(t *testing.T) {
	forEachTargetTransport(t, true, func(t *testing.T, url string) {
		rt := newTarget(t, url, 16<<20, 4096, nil)
		cut, _ := cutterFor(t, rt.addr)
		// Cuts come every 40 ms, and a large request may be in flight
		// across several of them in a slow (-race) run: it must survive
		// them all here (TestMaxRetries checks the limit).
		c := dialTarget(t, rt, WithQueues(queuesFor(url, 4)), WithQueueDepth(64),
			WithReconnectDelay(5*time.Millisecond, 50*time.Millisecond), WithMaxRetries(1000))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		stop := make(chan struct{})
		cutter := make(chan int)
		go func() {
			n := 0
			defer func() { cutter <- n }()
			for {
				select {
				case <-stop:
					return
				case <-time.After(40 * time.Millisecond):
				}
				if c.State() == StateLive {
					cut()
					n++
				}
			}
		}()
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		s := newStress(t, ns, seed, stressRequests(8000), 256<<10)
		s.run(64)
		close(stop)
		cuts := <-cutter
		s.verify()
		st := c.Stats()
		t.Logf("%s; %d cuts, %d losses, %d reconnects, %d requests resubmitted", s.report(), cuts, st.Losses, st.Reconnects, st.Resubmitted)
		require.Positive(t, st.Reconnects)
		require.Zero(t, st.FailedOnLoss)
	})
}

func TestTargetAllowList(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		const allowed = "nqn.2024-01.io.capsule:allowed-host"
		rt := newTarget(t, url, 1<<20, 512, []string{allowed})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := Dial(ctx, rt.addr, WithSubsystem(targetNQN), WithHostNQN("nqn.2024-01.io.capsule:stranger"),
			WithQueues(1), WithLogger(testLogger(t)))
		require.ErrorIs(t, err, nvmeof.StatusConnectInvalidHost)
		var ce *ConnectError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, uint16(0), ce.QID)
		assert.Zero(t, rt.sub.Controllers())

		c, err := Dial(ctx, rt.addr, WithSubsystem(targetNQN), WithHostNQN(allowed), WithQueues(1), WithLogger(testLogger(t)))
		require.NoError(t, err)
		assert.Equal(t, 1, rt.sub.Controllers())
		require.NoError(t, c.Close())
	})
}

// TestTargetKeepAliveExpiry drops the host's Sends, keep-alives
// included (on TCP the target stops reading: a stall), so the target's
// keep-alive timer ends the association (its controller goes away and the
// connection with it) before the host's own, longer, deadline; the host
// reconnects once the Sends flow again.
func TestTargetKeepAliveExpiry(t *testing.T) {
	forEachTargetTransport(t, true, func(t *testing.T, url string) {
		rt := newTarget(t, url, 1<<20, 512, nil)
		// KATO 1 s: the target ends a silent association within 2 s, the
		// host would give up on it after 3 s.
		c := dialTarget(t, rt, WithQueues(1), WithKeepAlive(time.Second),
			WithConnectTimeout(300*time.Millisecond), WithReconnectDelay(20*time.Millisecond, 100*time.Millisecond))
		require.Equal(t, 1, rt.sub.Controllers())
		waitFor(t, 10*time.Second, "a keep-alive", func() bool { return c.Stats().KeepAlives > 0 })
		var resume func()
		if strings.HasPrefix(rt.addr, "fault+tcp://") {
			inj := netfault.For(rt.addr)
			inj.Stall()
			resume = inj.Resume
		} else {
			rule := fault.For(rt.addr).Drop(fault.Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: fault.Dialer})
			resume = rule.Remove
		}
		waitFor(t, 10*time.Second, "the target to drop the controller", func() bool { return c.Stats().Losses > 0 })
		st := c.Stats()
		assert.NotErrorIs(t, st.LastLoss, ErrKeepAliveTimeout, "the target, not the host, ended it: %v", st.LastLoss)
		resume()
		waitFor(t, 10*time.Second, "the reconnect", func() bool { return c.State() == StateLive })
		assert.Equal(t, 1, rt.sub.Controllers(), "the old controller is gone, the new one live")
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		_, err = ns.WriteAt(make([]byte, 512), 0)
		require.NoError(t, err)
	})
}
