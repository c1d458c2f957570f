package devsvc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/chunkstore/vfs/vfstest"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/target"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

const testNQN = "nqn.2026-12.io.capsule:devsvc-test"

// device is a target exporting one device directory as NSID 1.
type device struct {
	dir  string
	addr string
	srv  *Server
	tgt  *target.Target
}

// startDevice serves dir at url (a free port when it ends in :0).
func startDevice(t *testing.T, dir, url string) *device {
	t.Helper()
	srv := NewServer(vfs.NewOS(dir), nil)
	tgt, err := target.New()
	require.NoError(t, err)
	sub, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: testNQN, AllowAnyHost: true})
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Vendor: srv})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := tgt.Listen(ctx, url)
	require.NoError(t, err)
	d := &device{dir: dir, addr: addr, srv: srv, tgt: tgt}
	t.Cleanup(d.stop)
	return d
}

func (d *device) stop() {
	if d.tgt != nil {
		d.tgt.Close()
		d.tgt = nil
	}
}

func dial(t *testing.T, addr string, opts ...host.Option) *host.Controller {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts = append([]host.Option{host.WithSubsystem(testNQN), host.WithCtrlLossTimeout(20 * time.Second),
		host.WithReconnectDelay(50*time.Millisecond, 200*time.Millisecond)}, opts...)
	c, err := host.Dial(ctx, addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

var volSeq atomic.Int64

// TestConformance runs vfs's conformance suite on a remote device, over
// every transport.
func TestConformance(t *testing.T) {
	for _, url := range []string{"tcp://127.0.0.1:0", fmt.Sprintf("shm://devsvc-test-%d", os.Getpid()), "iwarp://127.0.0.1:0"} {
		t.Run(url[:3], func(t *testing.T) {
			d := startDevice(t, t.TempDir(), url)
			ctrl := dial(t, d.addr)
			vfstest.Conformance(t, func(t *testing.T) vfs.FS {
				f, err := New(ctrl, 1, fmt.Sprintf("vol%d", volSeq.Add(1)))
				require.NoError(t, err)
				require.NoError(t, f.MkdirAll("."))
				return f
			})
		})
	}
}

// TestLocal: NewLocal's FS passes the conformance suite on a server in
// this process, and a local head's changes meet the fence as a remote
// one's do: a newer epoch through the network refuses the older local
// one.
func TestLocal(t *testing.T) {
	dir := t.TempDir()
	srv := NewServer(vfs.NewOS(dir), nil)
	t.Cleanup(func() { srv.Close() })
	vfstest.Conformance(t, func(t *testing.T) vfs.FS {
		f, err := NewLocal(srv, fmt.Sprintf("vol%d", volSeq.Add(1)))
		require.NoError(t, err)
		require.NoError(t, f.MkdirAll("."))
		return f
	})

	var old atomic.Uint64
	old.Store(5)
	a, err := NewLocal(srv, "fenced", WithEpoch(old.Load))
	require.NoError(t, err)
	require.NoError(t, a.MkdirAll("."))
	fa, err := a.OpenFile("f", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	defer fa.Close()
	_, err = fa.WriteAt([]byte("old"), 0)
	require.NoError(t, err)
	b, err := NewLocal(srv, "fenced", WithEpoch(func() uint64 { return 7 }))
	require.NoError(t, err)
	require.NoError(t, b.MkdirAll("."))
	_, err = fa.WriteAt([]byte("late"), 0)
	require.ErrorIs(t, err, ErrStaleEpoch)
	got := make([]byte, 3)
	require.NoError(t, vfs.ReadFull(fa, got, 0), "reads are not fenced")
	assert.Equal(t, "old", string(got))
	assert.Contains(t, a.String(), "local")
}

// TestLargeIO: reads and writes larger than one command are split, and a
// read past the end is short with io.EOF.
func TestLargeIO(t *testing.T) {
	d := startDevice(t, t.TempDir(), "tcp://127.0.0.1:0")
	fsys, err := New(dial(t, d.addr), 1, "v")
	require.NoError(t, err)
	require.NoError(t, fsys.MkdirAll("."))
	f, err := fsys.OpenFile("big", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	defer f.Close()
	data := make([]byte, 3*fsys.maxIO+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	n, err := f.WriteAt(data, 100)
	require.NoError(t, err)
	assert.Equal(t, len(data), n)
	got := make([]byte, len(data)+500)
	n, err = f.ReadAt(got, 100)
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, len(data), n)
	assert.Equal(t, data, got[:n])
	require.NoError(t, f.(vfs.Puncher).Punch(4096, 8192))
	require.NoError(t, vfs.ReadFull(f, got[:100], 4096))
	assert.Equal(t, make([]byte, 100), got[:100])
	// The file is where the device keeps it: under the volume's directory.
	st, err := os.Stat(d.dir + "/v/big")
	require.NoError(t, err)
	assert.EqualValues(t, len(data)+100, st.Size())
}

// TestVectors: a shard's header and data gathered into one WRITE, and
// ranges read back in one READRANGES (counted as one read), a range past
// the end of the file cut short with io.EOF; more ranges than one
// command takes fall back to a READ each.
func TestVectors(t *testing.T) {
	d := startDevice(t, t.TempDir(), "tcp://127.0.0.1:0")
	fsys, err := New(dial(t, d.addr), 1, "v")
	require.NoError(t, err)
	require.NoError(t, fsys.MkdirAll("."))
	f, err := fsys.OpenFile("shard", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	defer f.Close()
	hdr, body := bytes.Repeat([]byte{0xAB}, 512), make([]byte, 64<<10)
	for i := range body {
		body[i] = byte(i * 13)
	}
	before := fsys.Stats()[KindWrite].Ops
	n, err := f.WriteAtv([][]byte{hdr, body}, 0)
	require.NoError(t, err)
	require.Equal(t, len(hdr)+len(body), n)
	assert.Equal(t, before+1, fsys.Stats()[KindWrite].Ops, "one WRITE for both buffers")

	rr := f.(vfs.RangeReader)
	a, b := make([]byte, 16), make([]byte, 4096)
	reads := fsys.Stats()[KindRead].Ops
	n, err = rr.ReadRanges([][]byte{a, b}, []int64{0, 512 + 8192})
	require.NoError(t, err)
	assert.Equal(t, 16+4096, n)
	assert.Equal(t, hdr[:16], a)
	assert.Equal(t, body[8192:8192+4096], b)
	assert.Equal(t, reads+1, fsys.Stats()[KindRead].Ops, "one command for both ranges")

	c := make([]byte, 1000)
	n, err = rr.ReadRanges([][]byte{a, c}, []int64{0, int64(len(hdr) + len(body) - 100)})
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, 16+100, n)
	assert.Equal(t, body[len(body)-100:], c[:100])

	many, offs := make([][]byte, MaxRanges+1), make([]int64, MaxRanges+1)
	for i := range many {
		many[i], offs[i] = make([]byte, 8), int64(512+i*8)
	}
	n, err = rr.ReadRanges(many, offs)
	require.NoError(t, err)
	assert.Equal(t, 8*len(many), n)
	assert.Equal(t, body[8*MaxRanges:8*MaxRanges+8], many[MaxRanges])
}

// TestFence: once a newer head wrote, an older head's changes are
// refused, before and after the device restarts; reads are not fenced.
func TestFence(t *testing.T) {
	dir := t.TempDir()
	d := startDevice(t, dir, "tcp://127.0.0.1:0")
	ctrl := dial(t, d.addr)
	var epochA, epochB atomic.Uint64
	epochA.Store(5)
	epochB.Store(7)
	a, err := New(ctrl, 1, "vol", WithEpoch(epochA.Load))
	require.NoError(t, err)
	b, err := New(ctrl, 1, "vol", WithEpoch(epochB.Load))
	require.NoError(t, err)
	require.NoError(t, a.MkdirAll("."))
	fa, err := a.OpenFile("shards", os.O_RDWR|os.O_CREATE)
	require.NoError(t, err)
	_, err = fa.WriteAt([]byte("old head"), 0)
	require.NoError(t, err)

	// The new head writes: from now on the old one is refused.
	require.NoError(t, vfs.WriteFile(b, "identity", []byte("new head")))
	_, err = fa.WriteAt([]byte("late"), 0)
	assert.ErrorIs(t, err, ErrStaleEpoch)
	assert.ErrorIs(t, fa.Sync(), ErrStaleEpoch)
	assert.ErrorIs(t, a.Remove("identity"), ErrStaleEpoch)
	assert.ErrorIs(t, a.Rename("identity", "x"), ErrStaleEpoch)
	_, err = a.OpenFile("new", os.O_RDWR|os.O_CREATE)
	assert.ErrorIs(t, err, ErrStaleEpoch, "a creating open changes the device")
	buf := make([]byte, 8)
	require.NoError(t, vfs.ReadFull(fa, buf, 0), "reads are not fenced")
	assert.Equal(t, "old head", string(buf))
	// Another volume on the same device has its own epoch.
	c, err := New(ctrl, 1, "other", WithEpoch(epochA.Load))
	require.NoError(t, err)
	require.NoError(t, c.MkdirAll("."))

	// The device remembers across a restart, at the same address.
	addr := d.addr
	d.stop()
	d = startDevice(t, dir, addr)
	_, err = fa.WriteAt([]byte("late"), 0)
	assert.ErrorIs(t, err, ErrStaleEpoch, "the restarted device forgot the epoch")
	// The new head's handle outlives the restart (ESTALE, then reopened).
	fb, err := b.OpenFile("identity", os.O_RDWR)
	require.NoError(t, err)
	d.stop()
	d = startDevice(t, dir, addr)
	_, err = fb.WriteAt([]byte("NEW"), 0)
	require.NoError(t, err)
	require.NoError(t, fb.Sync())
	got, err := vfs.ReadFile(b, "identity")
	require.NoError(t, err)
	assert.Equal(t, "NEW head", string(got))
	require.NoError(t, fb.Close())
}

// TestNames: the device refuses names outside a volume, and the fence
// directory is unreachable.
func TestNames(t *testing.T) {
	d := startDevice(t, t.TempDir(), "tcp://127.0.0.1:0")
	ctrl := dial(t, d.addr)
	_, err := New(ctrl, 1, ".fence")
	assert.ErrorIs(t, err, vfs.ErrInvalidName)
	_, err = New(ctrl, 1, "a/b")
	assert.ErrorIs(t, err, vfs.ErrInvalidName)
	fsys, err := New(ctrl, 1, "v")
	require.NoError(t, err)
	_, err = fsys.Stat("../.fence")
	assert.ErrorIs(t, err, vfs.ErrInvalidName)
	// Straight on the wire, past the client's checks.
	for _, name := range []string{".fence/v", "..", "/etc", "v/../../x", "."} {
		_, err := fsys.do(&call{op: OpStat, in: []byte(name), out: make([]byte, InfoSize)})
		assert.ErrorIs(t, err, syscall.EINVAL, "%q", name)
	}
}
