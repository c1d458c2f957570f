package host

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/target"
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
	forEachTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 16<<20, 512, nil)
		c := dialTarget(t, rt) // no WithSubsystem: found through discovery
		require.Equal(t, targetNQN, c.SubsystemNQN())
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
