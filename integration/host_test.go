package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// TestHostLibrary runs `target serve` in its own process and the host
// library in this one, over iwarp, shm and NVMe/TCP: it finds the subsystem through
// discovery, writes 256 MiB in extents of 4 KiB to 1 MiB at random
// offsets of a 512 MiB memory namespace with 64 requests in flight over
// two queues, reads every extent back at the same depth in another random
// order, and checks every byte.
func TestHostLibrary(t *testing.T) {
	const (
		nsSize    = 512 << 20
		writeSize = 256 << 20
		qd        = 64
	)
	shm := fmt.Sprintf("shm://host-it-%d", os.Getpid())
	nqn := "nqn.2026-11.io.capsule:host-integration"
	d := startDaemon(t, "capsule target ready", "serve", "--listen", "iwarp://127.0.0.1:0", "--listen", shm,
		"--listen", "tcp://127.0.0.1:0", "--namespace", "mem:512MiB", "--data", t.TempDir(), "--nqn", nqn)
	listeners := strings.Split(field(d.ready, "listeners"), ",")
	require.Len(t, listeners, 3, d.ready)

	for i, url := range listeners {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			entries, err := host.Discover(ctx, url)
			require.NoError(t, err)
			var found []string
			for _, e := range entries {
				if e.SUBTYPE == nvmeof.SubsystemNVMe && e.SUBNQN == nqn {
					u, err := host.EntryURL(e)
					require.NoError(t, err)
					found = append(found, u)
				}
			}
			assert.ElementsMatch(t, listeners, found, "the discovery log names every listener")

			c, err := host.Dial(ctx, url, host.WithQueues(2), host.WithQueueDepth(qd))
			require.NoError(t, err, "Dial without a subsystem finds it through discovery")
			defer c.Close()
			require.Equal(t, nqn, c.SubsystemNQN())
			ns, err := c.Namespace(1)
			require.NoError(t, err)
			require.Equal(t, int64(nsSize), ns.Size())

			extents := randomExtents(uint64(i+1), nsSize, writeSize)
			seed := int64(i + 1)
			runExtents(t, ns, host.OpWrite, extents, seed, qd)
			rand.New(rand.NewPCG(uint64(i), 7)).Shuffle(len(extents), func(a, b int) { extents[a], extents[b] = extents[b], extents[a] })
			runExtents(t, ns, host.OpRead, extents, seed, qd)
			st := c.Stats()
			assert.Zero(t, st.Losses, "no connection loss: %v", st.LastLoss)
		})
	}
	d.stop(t)
}

type extent struct{ off, n int64 }

// randomExtents places extents at random, non-overlapping, 4 KiB-aligned
// offsets of a namespace of size bytes, each in its own 1 MiB slot, until
// they cover total bytes: a quarter of them small (4 to 64 KiB), the rest
// 512 KiB to 1 MiB, so that single commands, in-capsule writes, splits at
// MDTS and several buffers are all exercised.
func randomExtents(seed uint64, size, total int64) []extent {
	rng := rand.New(rand.NewPCG(seed, seed*31))
	const slot = 1 << 20
	var out []extent
	var sum int64
	for _, s := range rng.Perm(int(size / slot)) {
		if sum == total {
			return out
		}
		blocks := 128 + rng.Int64N(129) // 512 KiB .. 1 MiB
		if rng.IntN(4) == 0 {
			blocks = 1 + rng.Int64N(16) // 4 .. 64 KiB
		}
		n := min(blocks*4096, total-sum)
		off := int64(s)*slot + rng.Int64N((slot-n)/4096+1)*4096
		out = append(out, extent{off, n})
		sum += n
	}
	panic(fmt.Sprintf("a namespace of %d bytes cannot hold %d bytes of extents", size, total))
}

// fill writes the bytes an extent holds: a function of the seed and the
// byte's offset in the namespace, so a misplaced block is caught.
func fill(b []byte, seed, off int64) {
	for i := 0; i < len(b); i += 8 {
		x := uint64(seed)<<56 ^ uint64(off+int64(i))*0x9e3779b97f4a7c15
		for k := 0; k < 8 && i+k < len(b); k++ {
			b[i+k] = byte(x >> (8 * k))
		}
	}
}

// runExtents writes or reads (and checks) every extent with qd requests
// in flight from one goroutine.
func runExtents(t *testing.T, ns *host.Namespace, op host.Op, extents []extent, seed int64, qd int) {
	t.Helper()
	var (
		mu   sync.Mutex
		next int
		errs []error
	)
	idle := make(chan struct{}, qd)
	reqs := make([]host.Request, qd)
	want := make([][]byte, qd)
	start := func(r *host.Request) bool {
		mu.Lock()
		if next == len(extents) || len(errs) > 0 {
			mu.Unlock()
			return false
		}
		e := extents[next]
		next++
		mu.Unlock()
		r.Op, r.Offset, r.Buf = op, e.off, r.Buf[:cap(r.Buf)][:e.n]
		if op == host.OpWrite {
			fill(r.Buf, seed, e.off)
		} else {
			clear(r.Buf)
		}
		if err := ns.Submit(r); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			return false
		}
		return true
	}
	for i := range reqs {
		want[i] = make([]byte, 1<<20)
		reqs[i].Buf = make([]byte, 1<<20)
		reqs[i].Tag = uint64(i)
		reqs[i].Done = func(r *host.Request) {
			var err error
			switch {
			case r.Err != nil:
				err = fmt.Errorf("%v of %d bytes at %d: %w", r.Op, len(r.Buf), r.Offset, r.Err)
			case op == host.OpRead:
				w := want[r.Tag][:len(r.Buf)]
				fill(w, seed, r.Offset)
				if !bytes.Equal(w, r.Buf) {
					i := 0
					for i < len(w) && w[i] == r.Buf[i] {
						i++
					}
					err = fmt.Errorf("read of %d bytes at %d: byte %d differs", len(r.Buf), r.Offset, r.Offset+int64(i))
				}
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			if !start(r) {
				idle <- struct{}{}
			}
		}
	}
	for i := range reqs {
		if !start(&reqs[i]) {
			idle <- struct{}{}
		}
	}
	timeout := time.After(2 * time.Minute)
	for range qd {
		select {
		case <-idle:
		case <-timeout:
			t.Fatalf("%v: requests still in flight after 2 minutes", op)
		}
	}
	require.Empty(t, errs)
}
