package devsvc

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// TestStoreOnRemoteDevices runs a 2+1 chunk store whose three devices
// are device services of three targets: data, parity, journal and the
// metadata (meta.log, since a remote device has no host path) all go
// through the commands. It reopens from them, reads with one device
// stopped, and a head with an older epoch cannot write.
func TestStoreOnRemoteDevices(t *testing.T) {
	var devices []*device
	var fss []vfs.FS
	epoch := uint64(3)
	for range 3 {
		d := startDevice(t, t.TempDir(), "tcp://127.0.0.1:0")
		devices = append(devices, d)
		// A device that stops is given up after a second, as a head
		// would, so that the store reads around it.
		f, err := New(dial(t, d.addr, host.WithCtrlLossTimeout(time.Second)), 1, "vol0", WithEpoch(func() uint64 { return epoch }))
		require.NoError(t, err)
		require.NoError(t, f.MkdirAll("."))
		fss = append(fss, f)
	}
	opts := []chunkstore.Option{chunkstore.WithGeometry(chunkstore.Geometry{Data: 2, Parity: 1}), chunkstore.WithStripeUnit(16 << 10)}
	s, err := chunkstore.Create(fss, opts...)
	require.NoError(t, err)
	v, err := s.CreateVolume("ns1", 8<<20)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 8<<20)
	for i := range 300 {
		n := 4096 * (1 + r.IntN(16))
		off := int64(r.IntN(len(want)-n)) &^ 4095
		b := want[off : off+int64(n)]
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		_, err := v.WriteAt(b, off)
		require.NoError(t, err, "write %d", i)
	}
	require.NoError(t, s.Sync())
	require.NoError(t, s.Close())
	for _, d := range devices {
		for _, name := range []string{"identity", "shards", "journal", "meta.log"} {
			assert.FileExists(t, d.dir+"/vol0/"+name)
		}
	}

	s, err = chunkstore.Open(fss, opts...)
	require.NoError(t, err)
	v, err = s.OpenVolume("ns1")
	require.NoError(t, err)
	got := make([]byte, len(want))
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the volume reads back different bytes")

	// One device gone: reads reconstruct from the other two.
	devices[1].stop()
	clear(got)
	_, err = v.ReadAt(got[:1<<20], 3<<20)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want[3<<20:4<<20], got[:1<<20]), "a degraded read returned different bytes")
	s.Close()

	// A newer head fenced the devices: the store of the old epoch
	// cannot change them any more.
	newer, err := New(dial(t, devices[0].addr), 1, "vol0", WithEpoch(func() uint64 { return epoch + 1 }))
	require.NoError(t, err)
	require.NoError(t, newer.SyncDir("."))
	f, err := fss[0].OpenFile("shards", os.O_RDWR)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("stale"), 0)
	assert.ErrorIs(t, err, ErrStaleEpoch)
	f.Close()
}
