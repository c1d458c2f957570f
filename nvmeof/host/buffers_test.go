package host

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// clearHostData zeroes the data areas of c's I/O queue slots and its
// large buffers (Connect's data is in a slot's), with no I/O in flight.
func clearHostData(c *Controller) {
	for _, q := range c.live.Load().io {
		for i := range q.slots {
			clear(q.slots[i].capsule[nvmeof.CommandSize:])
		}
		clear(q.bufMem)
	}
}

// hostDataUntouched reports whether the data areas of c's I/O queue
// slots and its large buffers are all zero: no read or write data passed
// through the host's own memory.
func hostDataUntouched(c *Controller) bool {
	for _, q := range c.live.Load().io {
		for i := range q.slots {
			for _, b := range q.slots[i].capsule[nvmeof.CommandSize:] {
				if b != 0 {
					return false
				}
			}
		}
		for _, b := range q.bufMem {
			if b != 0 {
				return false
			}
		}
	}
	return true
}

// TestAllocBufferNoCopy: reads and writes from memory of AllocBuffer,
// in-capsule and through a keyed SGL or R2T, never pass through the
// host's slots or large buffers, so nothing copies them; the same I/O
// from ordinary memory does (the check sees a copy). Steady state
// allocates nothing.
func TestAllocBufferNoCopy(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 8<<20, 4096, nil)
		c := dialTarget(t, rt, WithQueues(1), WithQueueDepth(8), WithMaxTransfer(64<<10), WithBuffers(2))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		info, err := c.Info()
		require.NoError(t, err)
		require.GreaterOrEqual(t, info.InCapsule, 4096, "4 KiB writes travel in the capsule")

		mem, err := c.AllocBuffer(256 << 10)
		require.NoError(t, err)
		clearHostData(c)
		small, big := mem[:4096], mem[64<<10:128<<10]
		pattern(small, 1, 0)
		pattern(big, 2, 0)
		_, err = ns.WriteAt(small, 0) // in-capsule
		require.NoError(t, err)
		_, err = ns.WriteAt(big, 1<<20) // keyed SGL / R2T
		require.NoError(t, err)
		back := mem[128<<10 : 192<<10]
		_, err = ns.ReadAt(back[:4096], 0)
		require.NoError(t, err)
		assert.Equal(t, small, back[:4096])
		_, err = ns.ReadAt(back, 1<<20)
		require.NoError(t, err)
		assert.Equal(t, big, back)
		assert.True(t, hostDataUntouched(c), "registered memory's data passed through the host's own buffers")

		if !raceEnabled {
			var off int64
			io := func() {
				off = (off + 64<<10) % (4 << 20)
				if _, err := ns.WriteAt(big, off); err != nil {
					t.Fatal(err)
				}
				if _, err := ns.ReadAt(back, off); err != nil {
					t.Fatal(err)
				}
			}
			for range 200 { // the target's slots take their buffers on first use
				io()
			}
			assert.Zero(t, testing.AllocsPerRun(200, io))
			assert.True(t, hostDataUntouched(c))
		}

		// Ordinary memory is copied through them: the check above sees
		// a copy when there is one.
		plain := make([]byte, 64<<10)
		pattern(plain, 3, 0)
		_, err = ns.WriteAt(plain, 2<<20)
		require.NoError(t, err)
		_, err = ns.ReadAt(plain, 2<<20)
		require.NoError(t, err)
		assert.False(t, hostDataUntouched(c), "ordinary memory is copied")

		require.NoError(t, c.FreeBuffer(mem))
		require.ErrorIs(t, c.FreeBuffer(mem), ErrInvalidOption, "freed twice")
		_, err = c.AllocBuffer(0)
		require.ErrorIs(t, err, ErrInvalidOption)
		// Close frees what is left.
		_, err = c.AllocBuffer(4096)
		require.NoError(t, err)
		require.NoError(t, c.Close())
		_, err = c.AllocBuffer(4096)
		require.ErrorIs(t, err, ErrClosed)
	})
}

// TestAllocBufferAcrossCut: writes and reads in registered memory that
// are in flight when the connection is cut are sent again from and into
// the same memory over the new association (the registration belongs to
// the controller's PD, not to a connection), and the data is right.
func TestAllocBufferAcrossCut(t *testing.T) {
	forEachTargetTransport(t, true, func(t *testing.T, url string) {
		rt := newTarget(t, url, 8<<20, 4096, nil)
		cut, cuts := cutterFor(t, rt.addr)
		c := dialTarget(t, rt, WithQueues(1), WithQueueDepth(16), WithReconnectDelay(10*time.Millisecond, 200*time.Millisecond))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		const size = 4 << 20
		mem, err := c.AllocBuffer(2 * size)
		require.NoError(t, err)
		src, dst := mem[:size], mem[size:]
		pattern(src, 9, 0)
		for i, chunk := range []int{4096, 64 << 10} { // in-capsule, keyed SGL / R2T
			for _, op := range []Op{OpWrite, OpRead} {
				buf := src
				if op == OpRead {
					buf = dst
					clear(dst)
				}
				reqs := make([]Request, size/chunk)
				for k := range reqs {
					reqs[k] = Request{Op: op, Offset: int64(k * chunk), Buf: buf[k*chunk : (k+1)*chunk]}
					require.NoError(t, ns.Submit(&reqs[k]))
				}
				cut()
				for k := range reqs {
					require.NoError(t, reqs[k].Wait(), "%v %d at %d", op, chunk, reqs[k].Offset)
				}
			}
			require.True(t, bytes.Equal(src, dst), "round %d: the data read back differs", i)
		}
		assert.GreaterOrEqual(t, cuts(), 4)
		assert.Positive(t, c.Stats().Resubmitted, "requests in flight at the cuts were sent again")
	})
}
