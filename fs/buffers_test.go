package fs_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/fs/internal/fstest"
	"github.com/capsule-storage/capsule/fs/server"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// TestBuffers: reads into and writes from the client's registered
// buffers move the right bytes; at most 16 are out at once; and a
// buffer out when the client closes stays valid, its controller open,
// until it is released.
func TestBuffers(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c *capfs.Client) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(3, 4))
		a, h, err := c.Create(ctx, capfs.RootIno, "f", 0o644, uid, gid, syscall.O_RDWR)
		require.NoError(t, err)
		want := randBytes(r, capfs.BufferSize+5000)

		b := c.Buffer()
		require.NotNil(t, b)
		require.Len(t, b.Bytes(), capfs.BufferSize)
		copy(b.Bytes(), want)
		n, err := c.Write(ctx, a.Ino, h, b.Bytes(), 0) // split into commands, each in the buffer
		require.NoError(t, err)
		require.Equal(t, capfs.BufferSize, n)
		_, err = c.Write(ctx, a.Ino, h, want[capfs.BufferSize:], capfs.BufferSize)
		require.NoError(t, err)
		clear(b.Bytes())
		n, err = c.Read(ctx, a.Ino, h, b.Bytes(), 3000)
		require.NoError(t, err)
		require.Equal(t, capfs.BufferSize, n)
		require.True(t, bytes.Equal(want[3000:3000+capfs.BufferSize], b.Bytes()))
		b.Release()

		// The bound: 16 out, then none until one comes back.
		var out []*capfs.Buffer
		for b := c.Buffer(); b != nil; b = c.Buffer() {
			out = append(out, b)
		}
		assert.Len(t, out, 16)
		out[0].Release()
		b = c.Buffer()
		require.NotNil(t, b, "a released buffer is handed out again")
		out[0] = b

		// Close with buffers out: the controller stays up, and the
		// memory valid, until the last one is released.
		ctrl := c.Controller()
		require.NoError(t, c.Close())
		assert.Nil(t, c.Buffer(), "none after Close")
		assert.Equal(t, host.StateLive, ctrl.State())
		for _, b := range out {
			b.Bytes()[0] = 1 // mapped still
		}
		for _, b := range out[1:] {
			b.Release()
		}
		assert.Equal(t, host.StateLive, ctrl.State(), "one buffer is still out")
		out[0].Release()
		assert.Equal(t, host.StateClosed, ctrl.State(), "the last buffer back closes the controller")
	})
}
