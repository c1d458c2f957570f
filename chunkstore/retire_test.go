package chunkstore

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// TestRetireAndMove moves a healthy device's position to another device:
// Retire, then Rebuild onto the new one, with the store serving
// throughout; the store opens on the new set with every byte.
func TestRetireAndMove(t *testing.T) {
	g := Geometry{Data: 2, Parity: 1}
	td := newTestDevices(t, g.Devices())
	opts := testOpts(g, 4096)
	s := mustCreate(t, td, opts...)
	r := rand.New(rand.NewPCG(3, 4))
	v, err := s.CreateVolume("vol", 2<<20)
	require.NoError(t, err)
	want := randBytes(r, 2<<20)
	_, err = v.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, s.Sync())

	require.NoError(t, s.Retire(1))
	assert.Equal(t, DeviceFailed, s.Info().Devices[1].State)
	assert.ErrorIs(t, s.Retire(0), ErrTooManyFailures, "2+1 loses no second device")
	// Writes go on, degraded.
	_, err = v.WriteAt(want[:8192], 0)
	require.NoError(t, err)

	moved := vfs.NewMem(vfs.WithHostDir(t.TempDir()))
	rep, err := s.Rebuild(context.Background(), 1, RebuildOptions{FS: moved})
	require.NoError(t, err)
	assert.Zero(t, rep.Unrecoverable)
	assert.Equal(t, DeviceHealthy, s.Info().Devices[1].State)
	require.NoError(t, s.Close())

	devs := td.fs()
	devs[1] = moved
	s, err = Open(devs, opts...)
	require.NoError(t, err)
	v, err = s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, len(want))
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	requireClean(t, s)
	require.NoError(t, s.Close())
}
