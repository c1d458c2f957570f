package host

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// twoPaths is a target serving its subsystem on two listeners.
type twoPaths struct {
	*realTarget
	// listen are the target's names of the listeners (Listen's URLs, what
	// SetANAState takes); dial the host's (fault+tcp:// for TCP).
	listen, dial [2]string
}

// newTwoPaths starts the target with an 8 MiB namespace in a file: a
// write through one connection and a read of the same block through the
// other are ordered by the host alone, through the kernel's sockets,
// which the race detector cannot see in a memory namespace (see
// queuesFor) and does not look into in pread and pwrite.
func newTwoPaths(t *testing.T, url string) *twoPaths {
	rt := newTarget(t, url, 4096, 512, nil)
	dev, err := blockdev.OpenFile(filepath.Join(t.TempDir(), "ns.img"), 8<<20)
	require.NoError(t, err)
	_, err = rt.sub.RemoveNamespace(1)
	require.NoError(t, err)
	_, err = rt.sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev, BlockSize: 512})
	require.NoError(t, err)
	tp := &twoPaths{realTarget: rt}
	tp.dial[0] = rt.addr
	tp.listen[0] = strings.TrimPrefix(rt.addr, "fault+")
	if !strings.HasPrefix(url, "fault+tcp://") {
		tp.listen[0] = rt.addr // an RDMA fault listener keeps its name
	}
	second := url
	if rest, ok := strings.CutPrefix(url, "fault+tcp://"); ok {
		second = "tcp://" + rest // wrapped by the target's netfault wrapper
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := rt.tgt.Listen(ctx, second)
	require.NoError(t, err)
	tp.listen[1], tp.dial[1] = addr, addr
	if strings.HasPrefix(url, "fault+tcp://") {
		tp.dial[1] = "fault+" + addr
	}
	return tp
}

// setANA sets the state of namespace 1's group (1) on listener i.
func (tp *twoPaths) setANA(t *testing.T, i int, s nvmeof.ANAState) {
	t.Helper()
	require.NoError(t, tp.sub.SetANAState(tp.listen[i], 1, s))
}

func dialMultipath(t *testing.T, urls []string, opts ...Option) *Multipath {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := []Option{WithQueues(queuesFor(urls[0], 2)), WithQueueDepth(32), WithLogger(testLogger(t)),
		WithReconnectDelay(10*time.Millisecond, 100*time.Millisecond), WithConnectTimeout(time.Second)}
	m, err := DialMultipath(ctx, urls, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// ioLoad writes and reads back blocks of a namespace until stopped; any
// error or mismatch is recorded.
type ioLoad struct {
	mn     *MultipathNamespace
	stop   chan struct{}
	wg     sync.WaitGroup
	ops    atomic.Int64
	mu     sync.Mutex // guards errs
	errs   []error
	blocks int64
}

func startLoad(mn *MultipathNamespace, workers int) *ioLoad {
	l := &ioLoad{mn: mn, stop: make(chan struct{}), blocks: mn.Size() / 4096}
	for w := range workers {
		l.wg.Go(func() {
			buf, got := make([]byte, 4096), make([]byte, 4096)
			for i := int64(0); ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				// Each worker owns the blocks w, w+workers, ...: its
				// writes and reads of one block are in order.
				blk := (int64(w) + i*int64(workers)) % l.blocks
				off := blk * 4096
				pattern(buf, i, off)
				if _, err := mn.WriteAt(buf, off); err != nil {
					l.fail(err)
					return
				}
				if _, err := mn.ReadAt(got, off); err != nil {
					l.fail(err)
					return
				}
				if string(got) != string(buf) {
					l.fail(errors.New("read back other bytes than written"))
					return
				}
				l.ops.Add(2)
			}
		})
	}
	return l
}

func (l *ioLoad) fail(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// progress waits until n more operations have completed.
func (l *ioLoad) progress(t *testing.T, n int64, what string) {
	t.Helper()
	start := l.ops.Load()
	waitFor(t, 20*time.Second, what, func() bool { return l.ops.Load() >= start+n || l.failed() })
	require.False(t, l.failed(), "an error reached the caller: %v", l.errors())
}

func (l *ioLoad) failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs) > 0
}

func (l *ioLoad) errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func (l *ioLoad) end(t *testing.T) {
	close(l.stop)
	l.wg.Wait()
	require.Empty(t, l.errors(), "no error reaches the caller")
}

// TestMultipathFailover: one subsystem, two listeners. The host's I/O
// goes to the optimized path and moves when the states change; one
// listener set Inaccessible, then closed (its connections cut, its
// address gone), and the I/O goes on through the other with no error
// reaching the caller.
func TestMultipathFailover(t *testing.T) {
	for _, url := range []string{"fault+tcp://127.0.0.1:0", "fault+iwarp://127.0.0.1:0"} {
		t.Run(schemeOf(url), func(t *testing.T) {
			tp := newTwoPaths(t, url)
			tp.setANA(t, 1, nvmeof.ANANonOptimized)
			m := dialMultipath(t, tp.dial[:])
			assert.Equal(t, targetNQN, m.SubsystemNQN(), "found through discovery")
			for _, p := range m.Paths() {
				require.Equal(t, StateLive, p.State, p.URL)
			}
			mn, err := m.Namespace(1)
			require.NoError(t, err)
			assert.Equal(t, int64(8<<20), mn.Size())
			cur, ok := mn.CurrentPath()
			require.True(t, ok)
			assert.Equal(t, tp.dial[0], cur, "the optimized path")

			load := startLoad(mn, 4)
			load.progress(t, 200, "I/O on path 0")

			// Path 1 becomes the optimized one: the host hears of it (ANA
			// Change) and moves.
			tp.setANA(t, 1, nvmeof.ANAOptimized)
			tp.setANA(t, 0, nvmeof.ANANonOptimized)
			waitFor(t, 10*time.Second, "I/O to move to path 1", func() bool { cur, _ := mn.CurrentPath(); return cur == tp.dial[1] })
			load.progress(t, 200, "I/O on path 1")
			st, reported := m.Paths()[1].Controller.ANAState(1)
			assert.True(t, reported)
			assert.Equal(t, nvmeof.ANAOptimized, st)

			// Path 1 goes Inaccessible under load: commands in flight there
			// get the ANA status and are sent again through path 0.
			tp.setANA(t, 1, nvmeof.ANAInaccessible)
			waitFor(t, 10*time.Second, "I/O to move to path 0", func() bool { cur, _ := mn.CurrentPath(); return cur == tp.dial[0] })
			load.progress(t, 200, "I/O on path 0, non-optimized")

			// Then path 1 goes away: its listener closed, its connections
			// cut.
			cut, _ := cutterFor(t, tp.dial[1])
			require.NoError(t, tp.tgt.StopListening(tp.listen[1]))
			cut()
			waitFor(t, 10*time.Second, "path 1 to be lost", func() bool { return m.Paths()[1].State != StateLive })
			load.progress(t, 400, "I/O with path 1 gone")
			load.end(t)
			cur, ok = mn.CurrentPath()
			assert.True(t, ok)
			assert.Equal(t, tp.dial[0], cur)
			assert.NoError(t, mn.Flush())
		})
	}
}

// TestMultipathANAStatusRetried: a path turned Inaccessible while
// commands are in flight answers them with the ANA status before the
// host has read the new state; those commands are retried on the other
// path, and the caller sees none of it. The target's error counters show
// that the status was met.
func TestMultipathANAStatusRetried(t *testing.T) {
	url := "tcp://127.0.0.1:0"
	tp := newTwoPaths(t, url)
	m := dialMultipath(t, tp.dial[:], WithQueueDepth(64))
	mn, err := m.Namespace(1)
	require.NoError(t, err)
	load := startLoad(mn, 16)
	ns := tp.sub.Namespace(1)
	refused := func() uint64 {
		return ns.IOStats(target.IORead).Errors + ns.IOStats(target.IOWrite).Errors
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; refused() == 0; i++ {
		require.True(t, time.Now().Before(deadline), "no command met an ANA status")
		cur, _ := mn.CurrentPath()
		busy := 0
		if cur == tp.dial[1] {
			busy = 1
		}
		tp.setANA(t, busy, nvmeof.ANAInaccessible)
		tp.setANA(t, 1-busy, nvmeof.ANAOptimized)
		load.progress(t, 50, "I/O after a switch")
		tp.setANA(t, busy, nvmeof.ANAOptimized)
	}
	load.progress(t, 100, "I/O after the refusals")
	load.end(t)
	t.Logf("%d commands refused with an ANA status, all retried", refused())
}

// TestMultipathNoPath: with every path Inaccessible a request waits, and
// completes once a path is usable again; with FailFast it fails at once
// with ErrNoPath. A path that is not up at DialMultipath is dialed in the
// background and used once it is.
func TestMultipathNoPath(t *testing.T) {
	tp := newTwoPaths(t, "tcp://127.0.0.1:0")
	// A third address that nothing listens on yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	third := "tcp://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	m := dialMultipath(t, []string{tp.dial[0], tp.dial[1], third})
	paths := m.Paths()
	require.Equal(t, StateConnecting, paths[2].State)
	require.Error(t, paths[2].Err, "not up")
	mn, err := m.Namespace(1)
	require.NoError(t, err)

	tp.setANA(t, 0, nvmeof.ANAInaccessible)
	tp.setANA(t, 1, nvmeof.ANAPersistentLoss)
	waitFor(t, 10*time.Second, "no usable path", func() bool { _, ok := mn.CurrentPath(); return !ok })

	fast := &Request{Op: OpWrite, Buf: make([]byte, 512), FailFast: true}
	require.NoError(t, mn.Submit(fast))
	require.ErrorIs(t, fast.Wait(), ErrNoPath)
	assert.ErrorContains(t, fast.Err, tp.dial[0]+": inaccessible; "+tp.dial[1]+": persistent loss; "+third+": not connected")

	w := make([]byte, 4096)
	pattern(w, 7, 0)
	done := make(chan error, 1)
	go func() { _, err := mn.WriteAt(w, 0); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("a write with no usable path completed: %v", err)
	case <-time.After(200 * time.Millisecond):
	}

	// The third address comes up, Optimized (a new listener starts so):
	// the waiting write goes there.
	_, err = tp.tgt.Listen(context.Background(), third)
	require.NoError(t, err)
	require.NoError(t, <-done)
	cur, ok := mn.CurrentPath()
	require.True(t, ok)
	assert.Equal(t, third, cur)
	got := make([]byte, 4096)
	_, err = mn.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, w, got)

	// Invalid requests are refused at Submit, as by Namespace.
	require.ErrorIs(t, mn.Submit(&Request{Op: OpWrite, Buf: make([]byte, 100)}), ErrUnaligned)
	busy := &Request{Op: OpRead, Buf: make([]byte, 512), Done: func(*Request) {}}
	tp.setANA(t, 0, nvmeof.ANAInaccessible)
	require.NoError(t, m.Close())
	require.ErrorIs(t, mn.Submit(busy), ErrClosed)
	_, err = m.Namespace(1)
	require.ErrorIs(t, err, ErrClosed)
}

// TestANAEvent: a controller told of an ANA change reads the log page
// (the event's ANA), and ANAState and ANALog give the new state.
func TestANAEvent(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 1<<20, 512, nil)
		events := make(chan AsyncEvent, 4)
		c := dialTarget(t, rt, WithSubsystem(targetNQN), WithAsyncEvents(func(ev AsyncEvent) { events <- ev }))
		st, reported := c.ANAState(1)
		require.True(t, reported, "the target reports ANA")
		assert.Equal(t, nvmeof.ANAOptimized, st)

		listen := strings.TrimPrefix(rt.addr, "fault+")
		require.NoError(t, rt.sub.SetANAState(listen, 1, nvmeof.ANAInaccessible))
		var ev AsyncEvent
		select {
		case ev = <-events:
		case <-time.After(10 * time.Second):
			t.Fatal("no ANA Change event")
		}
		assert.Equal(t, nvmeof.AsyncEventNotice, ev.Type)
		assert.Equal(t, nvmeof.NoticeANAChange, ev.Info)
		assert.Equal(t, nvmeof.LogANA, ev.LogPage)
		require.NoError(t, ev.Err)
		require.NotNil(t, ev.ANA)
		require.Len(t, ev.ANA.Groups, 1)
		assert.Equal(t, nvmeof.ANAGroupDescriptor{ANAGRPID: 1, ChangeCount: 1, State: nvmeof.ANAInaccessible, NSIDs: []uint32{1}},
			ev.ANA.Groups[0])
		st, _ = c.ANAState(1)
		assert.Equal(t, nvmeof.ANAInaccessible, st)

		// I/O through this controller alone gets the status.
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		_, err = ns.ReadAt(make([]byte, 512), 0)
		require.ErrorIs(t, err, nvmeof.StatusANAInaccessible)

		// Read again, the page says the same; a second change is told too
		// (the first read cleared the event).
		l, err := c.ANALog(context.Background())
		require.NoError(t, err)
		assert.Equal(t, *ev.ANA, l)
		require.NoError(t, rt.sub.SetANAState(listen, 0, nvmeof.ANAOptimized))
		select {
		case ev = <-events:
		case <-time.After(10 * time.Second):
			t.Fatal("no second ANA Change event")
		}
		require.NotNil(t, ev.ANA)
		assert.Equal(t, nvmeof.ANAOptimized, ev.ANA.Groups[0].State)
		_, err = ns.ReadAt(make([]byte, 512), 0)
		require.NoError(t, err)
	})
}

// TestMultipathPathRevived: a path whose controller gave up (its
// listener gone past the controller-loss timeout) is dialed again, and
// used once its listener is back.
func TestMultipathPathRevived(t *testing.T) {
	tp := newTwoPaths(t, "fault+tcp://127.0.0.1:0")
	m := dialMultipath(t, tp.dial[:], WithCtrlLossTimeout(300*time.Millisecond))
	mn, err := m.Namespace(1)
	require.NoError(t, err)
	load := startLoad(mn, 2)
	load.progress(t, 100, "I/O")

	cut, _ := cutterFor(t, tp.dial[0])
	require.NoError(t, tp.tgt.StopListening(tp.listen[0]))
	cut()
	load.progress(t, 100, "I/O on path 1 alone")
	waitFor(t, 10*time.Second, "path 0 to give up and be dialed again", func() bool {
		p := m.Paths()[0]
		return p.Controller == nil && p.Err != nil
	})
	_, err = tp.tgt.Listen(context.Background(), tp.listen[0])
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "path 0 back", func() bool { return m.Paths()[0].State == StateLive })
	// Path 1 goes Inaccessible: the I/O moves back to path 0.
	tp.setANA(t, 1, nvmeof.ANAInaccessible)
	waitFor(t, 10*time.Second, "I/O on path 0 again", func() bool { cur, _ := mn.CurrentPath(); return cur == tp.dial[0] })
	load.progress(t, 100, "I/O on the revived path")
	load.end(t)
}

// TestMultipathNoAllocationsPerIO: a Multipath adds no allocation to the
// I/O path (R8): ReadAt, WriteAt and Submit with a caller's Request.
func TestMultipathNoAllocationsPerIO(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on synchronization")
	}
	tp := newTwoPaths(t, "tcp://127.0.0.1:0")
	m := dialMultipath(t, tp.dial[:], WithQueues(1), WithQueueDepth(8))
	mn, err := m.Namespace(1)
	require.NoError(t, err)
	buf := make([]byte, 4096)
	done := make(chan *Request, 1)
	async := Request{Op: OpRead, Buf: buf, Done: func(r *Request) { done <- r }}
	var off int64
	for name, io := range map[string]func() error{
		"ReadAt":  func() error { _, err := mn.ReadAt(buf, off); return err },
		"WriteAt": func() error { _, err := mn.WriteAt(buf, off); return err },
		"Submit": func() error {
			async.Offset = off
			if err := mn.Submit(&async); err != nil {
				return err
			}
			return (<-done).Err
		},
	} {
		for range 200 {
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
}

// TestMultipathNamespaceAdded: a namespace added after the paths read
// their ANA log pages is in none of the groups they know; its first
// request makes them read the page again, and runs.
func TestMultipathNamespaceAdded(t *testing.T) {
	tp := newTwoPaths(t, "tcp://127.0.0.1:0")
	m := dialMultipath(t, tp.dial[:])
	dev, err := blockdev.OpenFile(filepath.Join(t.TempDir(), "ns2.img"), 1<<20)
	require.NoError(t, err)
	_, err = tp.sub.AddNamespace(target.NamespaceConfig{NSID: 2, Device: dev, BlockSize: 512})
	require.NoError(t, err)
	mn, err := m.Namespace(2)
	require.NoError(t, err)
	w := make([]byte, 4096)
	pattern(w, 2, 0)
	_, err = mn.WriteAt(w, 0)
	require.NoError(t, err)
	got := make([]byte, 4096)
	_, err = mn.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, w, got)
	// The I/O may have gone through one path alone; the other reads the
	// page again (in the background) when it is first asked.
	for i, p := range m.Paths() {
		require.Eventually(t, func() bool {
			st, _ := p.Controller.ANAState(2)
			return st == nvmeof.ANAOptimized
		}, 10*time.Second, 5*time.Millisecond, "path %d", i)
	}
}
