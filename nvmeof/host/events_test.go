package host

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// TestAsyncEvents: with WithAsyncEvents, a namespace added to and removed
// from the subsystem while the host is connected is reported with its
// NSID; the added one reads and writes at once; the removed one's handle
// fails with ErrNamespaceChanged; and events still come after a
// reconnect.
func TestAsyncEvents(t *testing.T) {
	forEachTargetTransport(t, true, func(t *testing.T, url string) {
		rt := newTarget(t, url, 1<<20, 512, nil)
		events := make(chan AsyncEvent, 16)
		c := dialTarget(t, rt, WithAsyncEvents(func(ev AsyncEvent) { events <- ev }),
			WithReconnectDelay(5*time.Millisecond, 50*time.Millisecond))
		next := func() AsyncEvent {
			t.Helper()
			select {
			case ev := <-events:
				require.NoError(t, ev.Err)
				assert.Equal(t, nvmeof.AsyncEventNotice, ev.Type)
				assert.Equal(t, nvmeof.NoticeNamespaceAttributeChanged, ev.Info)
				return ev
			case <-time.After(10 * time.Second):
				t.Fatal("no asynchronous event")
				return AsyncEvent{}
			}
		}
		add := func(nsid uint32, size int64) {
			dev, err := blockdev.NewMemory(size)
			require.NoError(t, err)
			_, err = rt.sub.AddNamespace(target.NamespaceConfig{NSID: nsid, Device: dev, BlockSize: 512})
			require.NoError(t, err)
		}

		add(5, 2<<20)
		assert.Equal(t, []uint32{5}, next().ChangedNamespaces)
		ns, err := c.Namespace(5)
		require.NoError(t, err)
		assert.Equal(t, int64(2<<20), ns.Size())
		buf := []byte("a namespace that came while the host was connected")
		_, err = ns.WriteAt(append(buf, make([]byte, 512-len(buf))...), 4096)
		require.NoError(t, err)
		got := make([]byte, len(buf))
		_, err = ns.ReadAt(got, 4096)
		require.NoError(t, err)
		assert.Equal(t, buf, got)

		_, err = rt.sub.RemoveNamespace(5)
		require.NoError(t, err)
		assert.Equal(t, []uint32{5}, next().ChangedNamespaces)
		_, err = ns.ReadAt(got, 0)
		require.ErrorIs(t, err, ErrNamespaceChanged)
		_, err = c.Namespace(5)
		require.ErrorIs(t, err, ErrNamespaceNotFound)

		cut, _ := cutterFor(t, rt.addr)
		cut()
		require.Eventually(t, func() bool { return c.Stats().Reconnects > 0 && c.State() == StateLive }, 20*time.Second, 5*time.Millisecond)
		add(6, 1<<20)
		assert.Equal(t, []uint32{6}, next().ChangedNamespaces)
	})
}
