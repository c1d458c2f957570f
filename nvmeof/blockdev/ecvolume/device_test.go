package ecvolume

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// The stores of these tests: 4+2 with a 4 KiB stripe unit, so a stripe
// holds 16 KiB of data.
const (
	testUnit   = 4096
	testStripe = 4 * testUnit
)

var testGeo = chunkstore.DefaultGeometry

// devices are in-memory devices that crash together and can vanish or
// fail chosen operations: the store's own fault seams.
type devices struct {
	t     testing.TB
	clock *vfs.CrashClock
	mem   []*vfs.MemFS
	inj   []*vfs.InjectFS
}

func newDevices(t testing.TB) *devices {
	d := &devices{t: t, clock: vfs.NewCrashClock()}
	for i := range testGeo.Devices() {
		host, err := os.MkdirTemp(shmOrTemp(t), "ecvolume-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(host) })
		m := vfs.NewMem(vfs.WithCrashClock(d.clock), vfs.WithHostDir(host), vfs.WithName(fmt.Sprintf("mem%d", i)))
		d.mem = append(d.mem, m)
		d.inj = append(d.inj, vfs.NewInjectFS(m))
	}
	return d
}

// shmOrTemp is where bbolt's host files go: tmpfs if there is one, as
// bbolt fsyncs every commit.
func shmOrTemp(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return t.TempDir()
}

func (d *devices) fs() []vfs.FS {
	out := make([]vfs.FS, len(d.inj))
	for i, f := range d.inj {
		out[i] = f
	}
	return out
}

func (d *devices) create() *chunkstore.Store {
	s, err := chunkstore.Create(d.fs(), chunkstore.WithGeometry(testGeo), chunkstore.WithStripeUnit(testUnit))
	require.NoError(d.t, err)
	return s
}

func (d *devices) open() *chunkstore.Store {
	s, err := chunkstore.Open(d.fs(), chunkstore.WithGeometry(testGeo), chunkstore.WithStripeUnit(testUnit))
	require.NoError(d.t, err)
	return s
}

// crash is a power loss of every device while s is open: only what was
// synced survives. s is closed (its devices fail) and the devices are
// replaced by what a machine finds on reboot.
func (d *devices) crash(s *chunkstore.Store) {
	d.clock.Crash()
	_ = s.Close()
	d.clock = vfs.NewCrashClock()
	for i, m := range d.mem {
		d.mem[i] = m.Crash(vfs.WithCrashClock(d.clock))
		d.inj[i] = vfs.NewInjectFS(d.mem[i])
	}
}

func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32() | 1) // never zero, so zeros mean "not written"
	}
	return b
}

// requireStatus checks that err carries want as its NVMe status.
func requireStatus(t *testing.T, err error, want nvmeof.Status) {
	t.Helper()
	require.Error(t, err)
	var st nvmeof.Status
	require.True(t, errors.As(err, &st), "%v carries no NVMe status", err)
	assert.Equal(t, want, st, "%v", err)
	var e *Error
	require.ErrorAs(t, err, &e)
}

func TestOpenOrCreate(t *testing.T) {
	d := newDevices(t)
	s := d.create()
	defer func() { require.NoError(t, s.Close()) }()

	dev, err := OpenOrCreate(s, "vol0", 1<<20)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), dev.Size())
	assert.Equal(t, "vol0", dev.Volume().Name())
	assert.Zero(t, dev.Volume().Info().Allocated, "thin: nothing allocated before a write")

	again, err := OpenOrCreate(s, "vol0", 1<<20)
	require.NoError(t, err, "the same size opens it")
	assert.Same(t, dev.Volume(), again.Volume())

	_, err = OpenOrCreate(s, "vol0", 2<<20)
	require.ErrorIs(t, err, ErrSizeMismatch)
	assert.Contains(t, err.Error(), `volume "vol0" is 1048576 bytes, not 2097152`)
	assert.Equal(t, int64(1<<20), dev.Size(), "a refused size changes nothing")

	_, err = OpenOrCreate(s, "", 1<<20)
	require.ErrorIs(t, err, chunkstore.ErrInvalidArgument)
}

func TestDeviceReadWrite(t *testing.T) {
	const size = 8*testStripe + 4096 // the last stripe is short
	d := newDevices(t)
	s := d.create()
	defer func() { require.NoError(t, s.Close()) }()
	dev, err := OpenOrCreate(s, "vol", size)
	require.NoError(t, err)
	want := make([]byte, size)

	// Unwritten space reads as zeros.
	got := bytes.Repeat([]byte{0xaa}, size)
	n, err := dev.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, size, n)
	require.Equal(t, want, got)

	// Full stripes, a partial one across a stripe boundary, a FUA write.
	for i, w := range []struct{ off, n int64 }{{0, 2 * testStripe}, {3*testStripe - 512, 1024}, {5 * testStripe, 4096}} {
		p := pattern(uint64(i), int(w.n))
		write := dev.WriteAt
		if i == 2 {
			write = dev.WriteAtFUA
		}
		n, err := write(p, w.off)
		require.NoError(t, err)
		require.Equal(t, len(p), n)
		copy(want[w.off:], p)
	}
	require.NoError(t, dev.Sync())
	_, err = dev.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))

	// Zeroes and discard, directly and through blockdev's helpers.
	require.NoError(t, dev.WriteZeroes(512, 1024))
	clear(want[512:1536])
	require.NoError(t, blockdev.Deallocate(dev, testStripe, testStripe+512))
	clear(want[testStripe : 2*testStripe+512])
	require.NoError(t, dev.Discard(3*testStripe-512, 512))
	clear(want[3*testStripe-512 : 3*testStripe])
	_, err = dev.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))

	// io.ReaderAt at the end: the bytes before it and io.EOF itself.
	tail := make([]byte, 8192)
	n, err = dev.ReadAt(tail, size-4096)
	assert.Equal(t, 4096, n)
	assert.Equal(t, io.EOF, err, "io.EOF is passed through unwrapped")

	// Ranges past the end change nothing and say LBA Out of Range.
	_, err = dev.WriteAt(make([]byte, 8192), size-4096)
	requireStatus(t, err, nvmeof.StatusLBAOutOfRange.WithDNR())
	assert.ErrorIs(t, err, blockdev.ErrOutOfRange)
	assert.ErrorIs(t, err, chunkstore.ErrOutOfRange)
	err = dev.WriteZeroes(size-512, 1024)
	assert.ErrorIs(t, err, blockdev.ErrOutOfRange)
	err = dev.Discard(-512, 512)
	assert.ErrorIs(t, err, blockdev.ErrOutOfRange)
	_, err = dev.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
}

// A FUA write is durable when it returns; a plain one after Sync.
func TestFUAAndSyncSurviveCrash(t *testing.T) {
	d := newDevices(t)
	s := d.create()
	dev, err := OpenOrCreate(s, "vol", 1<<20)
	require.NoError(t, err)

	synced, fua := pattern(1, 3000), pattern(2, 700)
	_, err = dev.WriteAt(synced, 10000)
	require.NoError(t, err)
	require.NoError(t, dev.Sync())
	_, err = dev.WriteAtFUA(fua, 200000)
	require.NoError(t, err)
	d.crash(s)

	s = d.open()
	defer func() { require.NoError(t, s.Close()) }()
	dev, err = OpenOrCreate(s, "vol", 1<<20)
	require.NoError(t, err)
	got := make([]byte, len(synced))
	_, err = dev.ReadAt(got, 10000)
	require.NoError(t, err)
	assert.Equal(t, synced, got, "written, then Sync")
	got = make([]byte, len(fua))
	_, err = dev.ReadAt(got, 200000)
	require.NoError(t, err)
	assert.Equal(t, fua, got, "written with FUA")
}

// More than M devices gone: reads and writes fail with media errors and
// no bytes come back; M gone: everything still works.
func TestTooManyDevicesLost(t *testing.T) {
	d := newDevices(t)
	s := d.create()
	defer s.Close()
	dev, err := OpenOrCreate(s, "vol", 1<<20)
	require.NoError(t, err)
	want := pattern(3, 4*testStripe)
	_, err = dev.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, dev.Sync())

	got := make([]byte, len(want))
	for i := range testGeo.Parity {
		d.mem[i].Vanish()
		_, err = dev.ReadAt(got, 0)
		require.NoError(t, err, "%d devices gone", i+1)
		require.Equal(t, want, got)
		_, err = dev.WriteAt(want[:testStripe], 4*testStripe)
		require.NoError(t, err, "%d devices gone", i+1)
	}

	d.mem[testGeo.Parity].Vanish()
	clear(got)
	n, err := dev.ReadAt(got, 0)
	requireStatus(t, err, nvmeof.StatusUnrecoveredReadError.WithDNR())
	assert.True(t, chunkstore.IsUnavailable(err), "%v", err)
	assert.Less(t, n, len(got))
	// p is scratch space for a failed read (io.ReaderAt), but the store
	// never puts wrong bytes there: each is the written one or untouched.
	for i := range got {
		if got[i] != 0 && got[i] != want[i] {
			t.Fatalf("byte %d of a failed read is %#x, neither untouched nor the written %#x", i, got[i], want[i])
		}
	}

	// A write goes to the store's log in memory; the flush that must
	// write it out fails, and from then on writes fail at once.
	_, err = dev.WriteAt(want[:testStripe], 6*testStripe)
	if err == nil {
		err = dev.Sync()
	}
	requireStatus(t, err, nvmeof.StatusWriteFault.WithDNR())
	_, err = dev.WriteAtFUA(want[:512], 0)
	requireStatus(t, err, nvmeof.StatusWriteFault.WithDNR())
	requireStatus(t, dev.Sync(), nvmeof.StatusWriteFault.WithDNR())
}

// A full device fails the write with Capacity Exceeded; what was stored
// stays, and writes work again once there is room.
func TestDeviceFull(t *testing.T) {
	d := newDevices(t)
	s := d.create()
	defer func() { require.NoError(t, s.Close()) }()
	dev, err := OpenOrCreate(s, "vol", 1<<20)
	require.NoError(t, err)
	want := pattern(4, 2*testStripe)
	_, err = dev.WriteAt(want, 0)
	require.NoError(t, err)
	require.NoError(t, dev.Sync())

	remove := d.inj[2].Inject(vfs.Rule{Ops: []vfs.Op{vfs.OpWrite}, Path: "shards", Err: syscall.ENOSPC})
	failed := pattern(5, testStripe)
	_, err = dev.WriteAtFUA(failed, 0)
	requireStatus(t, err, nvmeof.StatusCapacityExceeded.WithDNR())
	assert.True(t, chunkstore.IsNoSpace(err))
	requireStatus(t, dev.Sync(), nvmeof.StatusCapacityExceeded.WithDNR())
	// The write reached the store's log, which keeps what it could not
	// write in memory (NVMe leaves the blocks of a failed write
	// indeterminate): reads see it, and the stored data around it is
	// intact.
	got := make([]byte, len(want))
	_, err = dev.ReadAt(got, 0)
	require.NoError(t, err)
	copy(want, failed)
	require.Equal(t, want, got)

	remove()
	require.NoError(t, dev.Sync(), "the flush writes what waited once there is room")
	p := pattern(6, testStripe)
	_, err = dev.WriteAtFUA(p, 0)
	require.NoError(t, err)
	copy(want, p)
	_, err = dev.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestClosedStore(t *testing.T) {
	d := newDevices(t)
	s := d.create()
	dev, err := OpenOrCreate(s, "vol", 1<<20)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	_, err = dev.ReadAt(make([]byte, 512), 0)
	requireStatus(t, err, nvmeof.StatusNamespaceNotReady)
	assert.ErrorIs(t, err, blockdev.ErrClosed)
	_, err = dev.WriteAt(make([]byte, 512), 0)
	assert.ErrorIs(t, err, blockdev.ErrClosed)
	assert.ErrorIs(t, dev.Sync(), blockdev.ErrClosed)
	assert.Contains(t, dev.Sync().Error(), `flush of volume "vol"`)
}

func TestStatusOf(t *testing.T) {
	wrapped := func(e error) error {
		return &chunkstore.StripeError{Owner: 1, Index: 2, Err: fmt.Errorf("shard 3: %w", e)}
	}
	for _, tc := range []struct {
		err          error
		read, write  nvmeof.Status
		blockdevLike error
	}{
		{wrapped(chunkstore.ErrTooManyFailures), nvmeof.StatusUnrecoveredReadError.WithDNR(), nvmeof.StatusWriteFault.WithDNR(), nil},
		{wrapped(chunkstore.ErrCorrupt), nvmeof.StatusUnrecoveredReadError.WithDNR(), nvmeof.StatusWriteFault.WithDNR(), nil},
		{wrapped(chunkstore.ErrNoSpace), nvmeof.StatusCapacityExceeded.WithDNR(), nvmeof.StatusCapacityExceeded.WithDNR(), nil},
		{&os.PathError{Op: "write", Path: "shards", Err: syscall.ENOSPC}, nvmeof.StatusCapacityExceeded.WithDNR(), nvmeof.StatusCapacityExceeded.WithDNR(), nil},
		{chunkstore.ErrOutOfRange, nvmeof.StatusLBAOutOfRange.WithDNR(), nvmeof.StatusLBAOutOfRange.WithDNR(), blockdev.ErrOutOfRange},
		{chunkstore.ErrClosed, nvmeof.StatusNamespaceNotReady, nvmeof.StatusNamespaceNotReady, blockdev.ErrClosed},
		{wrapped(syscall.EIO), nvmeof.StatusUnrecoveredReadError, nvmeof.StatusWriteFault, nil},
	} {
		st, class := statusOf(tc.err, true)
		assert.Equal(t, tc.read, st, "read: %v", tc.err)
		assert.Equal(t, tc.blockdevLike, class, "%v", tc.err)
		st, _ = statusOf(tc.err, false)
		assert.Equal(t, tc.write, st, "write: %v", tc.err)
	}
}
