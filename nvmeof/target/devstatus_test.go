package target

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/blockdev/ecvolume"
)

func TestDeviceStatus(t *testing.T) {
	for _, tc := range []struct {
		err         error
		read, write nvmeof.Status
	}{
		{fmt.Errorf("volume: %w", nvmeof.StatusCapacityExceeded.WithDNR()), nvmeof.StatusCapacityExceeded.WithDNR(), nvmeof.StatusCapacityExceeded.WithDNR()},
		{fmt.Errorf("shard: %w", nvmeof.StatusUnrecoveredReadError), nvmeof.StatusUnrecoveredReadError, nvmeof.StatusUnrecoveredReadError},
		{&os.PathError{Op: "write", Path: "disk.img", Err: syscall.ENOSPC}, nvmeof.StatusCapacityExceeded.WithDNR(), nvmeof.StatusCapacityExceeded.WithDNR()},
		{fmt.Errorf("grew: %w", blockdev.ErrOutOfRange), nvmeof.StatusLBAOutOfRange.WithDNR(), nvmeof.StatusLBAOutOfRange.WithDNR()},
		{blockdev.ErrClosed, nvmeof.StatusNamespaceNotReady, nvmeof.StatusNamespaceNotReady},
		{&os.PathError{Op: "read", Path: "disk.img", Err: syscall.EIO}, nvmeof.StatusUnrecoveredReadError, nvmeof.StatusWriteFault},
		// A device that wraps "success" into an error still failed.
		{fmt.Errorf("odd: %w", nvmeof.StatusSuccess), nvmeof.StatusUnrecoveredReadError, nvmeof.StatusWriteFault},
	} {
		assert.Equal(t, tc.read, deviceStatus(tc.err, true), "read: %v", tc.err)
		assert.Equal(t, tc.write, deviceStatus(tc.err, false), "write: %v", tc.err)
	}
}

// TestErasureCodedNamespaceErrors puts a namespace on an erasure-coded
// volume (4+2 on in-memory devices) and takes devices away: with two
// gone, reads and writes succeed; with three, the host gets media errors
// (Unrecovered Read Error, Write Fault), never data.
func TestErasureCodedNamespaceErrors(t *testing.T) {
	var (
		mems []*vfs.MemFS
		devs []vfs.FS
	)
	for i := range chunkstore.DefaultGeometry.Devices() {
		m := vfs.NewMem(vfs.WithHostDir(t.TempDir()), vfs.WithName(fmt.Sprintf("mem%d", i)))
		mems = append(mems, m)
		devs = append(devs, m)
	}
	s, err := chunkstore.Create(devs, chunkstore.WithStripeUnit(4096))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	dev, err := ecvolume.OpenOrCreate(s, "ns2", 4<<20)
	require.NoError(t, err)

	tt := newTestTarget(t, transports()["shm"]())
	_, err = tt.sub.AddNamespace(NamespaceConfig{NSID: 2, Device: dev, BlockSize: 512})
	require.NoError(t, err)
	admin := adminQueue(t, tt.url, testSubNQN, 0)
	io := ioQueue(t, tt.url, admin, 1, 16)

	const n = 64 << 10
	want := randomBytes(11, n)
	copy(io.data.Bytes(), want)
	fua := io.writeCmd(2, 0, n/512, 0, n)
	fua.SetFUA(true)
	require.NoError(t, io.do(fua, nil).cqe.Status.Err())

	for i, m := range mems[:3] {
		m.Vanish()
		clear(io.data.Bytes()[n : 2*n])
		read := io.do(io.readCmd(2, 0, n/512, n, n), nil).cqe.Status
		w := io.writeCmd(2, 256, 16, 0, 8192)
		w.SetFUA(true) // without FUA the store caches a partial stripe
		write := io.do(w, nil).cqe.Status
		if i < 2 {
			require.NoError(t, read.Err(), "%d devices gone", i+1)
			assert.Equal(t, want, io.data.Bytes()[n:2*n])
			require.NoError(t, write.Err(), "%d devices gone", i+1)
			continue
		}
		assert.ErrorIs(t, read, nvmeof.StatusUnrecoveredReadError)
		assert.True(t, read.DNR(), "%v", read)
		assert.ErrorIs(t, write, nvmeof.StatusWriteFault)
		flush := io.do(nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: 2}, nil).cqe.Status
		assert.ErrorIs(t, flush, nvmeof.StatusWriteFault)
	}
}
