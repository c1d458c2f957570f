package target

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// TestKeepAliveExpiry: a controller that hears nothing for KATO is torn
// down with every queue, and its CNTLID and QIDs are free again.
func TestKeepAliveExpiry(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		admin := adminQueue(t, tt.url, testSubNQN, 300)
		io := ioQueue(t, tt.url, admin, 1, 16)
		require.Equal(t, 1, tt.sub.Controllers())
		// Silence: both connections end, the controller is gone.
		<-admin.qp.Done()
		<-io.qp.Done()
		require.Eventually(t, func() bool { return tt.Controllers() == 0 }, rawTimeout, time.Millisecond)
		require.Eventually(t, func() bool { return tt.queueCount() == 0 }, rawTimeout, time.Millisecond)
		// The host reconnects.
		admin = adminQueue(t, tt.url, testSubNQN, 0)
		ioQueue(t, tt.url, admin, 1, 16)
		assert.Equal(t, 1, tt.Controllers())
		assert.Equal(t, []HostStats{{HostNQN: testHostNQN, Connects: 2, KeepAliveExpiries: 1}}, tt.sub.HostStats())
	})
}

// TestKeepAliveTraffic: Keep Alive commands, or any other command, keep a
// controller alive past several KATO periods.
func TestKeepAliveTraffic(t *testing.T) {
	tt := newTestTarget(t, transports()["shm"]())
	admin := adminQueue(t, tt.url, testSubNQN, 1000)
	io := ioQueue(t, tt.url, admin, 1, 16)
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if i%2 == 0 {
			require.NoError(t, admin.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive}, nil).cqe.Status.Err())
		} else {
			require.NoError(t, io.do(io.readCmd(1, 0, 1, 0, 512), nil).cqe.Status.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.Equal(t, 1, tt.Controllers())
}

func (t *Target) queueCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queues)
}

// TestShutdownDrains: Shutdown lets the commands the target has finish
// and answers them, then closes every connection, syncs and closes the
// devices: a write that was answered with success is in the file.
func TestShutdownDrains(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen(), WithIOWorkersPerQueue(1))
		path := t.TempDir() + "/ns.img"
		f, err := blockdev.OpenFile(path, 8<<20)
		require.NoError(t, err)
		_, err = tt.sub.AddNamespace(NamespaceConfig{NSID: 2, Device: f})
		require.NoError(t, err)
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 32)
		want := randomBytes(8, 1<<20)
		copy(io.data.Bytes(), want)
		var cids []uint16
		for i := range 16 {
			c := io.writeCmd(2, uint64(i*128), 128, i*65536, 65536)
			io.submit(&c, nil)
			cids = append(cids, c.CID)
		}
		first := io.wait(cids[0])
		require.NoError(t, first.cqe.Status.Err())
		require.NoError(t, tt.Shutdown(context.Background()))

		// Every command the target took was answered: done, or aborted if
		// it came after the drain began. A capsule still on the wire when
		// the connection closed gets no answer, as on any lost connection.
		done := []int{0}
		for i, cid := range cids[1:] {
			r, ok := io.poll(cid, rawTimeout)
			if !ok {
				continue
			}
			if err := r.cqe.Status.Err(); err != nil {
				requireStatus(t, nvmeof.StatusAbortedSQDeletion, r)
				continue
			}
			done = append(done, i+1)
		}
		<-io.qp.Done()
		<-admin.qp.Done()
		assert.Zero(t, tt.Controllers())
		assert.Zero(t, tt.queueCount())
		_, err = f.ReadAt(make([]byte, 1), 0)
		assert.ErrorIs(t, err, blockdev.ErrClosed, "Shutdown closed the device")

		// What was answered with success is in the file.
		f, err = blockdev.OpenFile(path, 0)
		require.NoError(t, err)
		defer f.Close()
		for _, i := range done {
			assert.Equal(t, want[i*65536:(i+1)*65536], deviceBytes(t, f, int64(i*65536), 65536), "write %d", i)
		}

		assert.ErrorIs(t, tt.Shutdown(context.Background()), ErrClosed)
		_, err = tt.Listen(context.Background(), listen())
		assert.ErrorIs(t, err, ErrClosed)
		_, err = tt.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.capsule:late"})
		assert.ErrorIs(t, err, ErrClosed)
	})
}

// TestShutdownCutsOff: a drain that outlives its context is cut short.
func TestShutdownCutsOff(t *testing.T) {
	tt := newTestTarget(t, transports()["iwarp"]())
	admin := adminQueue(t, tt.url, testSubNQN, 0)
	io := ioQueue(t, tt.url, admin, 1, 16)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, tt.Shutdown(ctx))
	<-io.qp.Done()
	<-admin.qp.Done()
	assert.Zero(t, tt.queueCount())
}

func TestConfiguration(t *testing.T) {
	for _, opt := range []Option{
		WithMaxQueueEntries(1), WithMaxQueueEntries(5000), WithMaxIOQueues(0), WithMaxTransfer(4096),
		WithMaxTransfer(100000), WithMaxTransfer(16 << 20), WithInCapsuleDataSize(512), WithInCapsuleDataSize(1030),
		WithLargeBuffersPerQueue(0), WithIOWorkersPerQueue(0), WithDrainTimeout(-1), WithModelNumber(""),
		WithModelNumber("é"), WithFirmwareRevision("123456789"), WithLogger(nil),
		WithTCPMaxH2CData(2048), WithTCPMaxH2CData(4098),
	} {
		_, err := New(opt)
		assert.ErrorIs(t, err, ErrInvalidOption)
	}

	tg, err := New(WithLogger(testLogger(t)), WithMaxTransfer(1<<20), WithInCapsuleDataSize(4096))
	require.NoError(t, err)
	defer tg.Close()
	assert.Equal(t, uint8(8), mdts(tg.cfg.maxTransfer))
	assert.Equal(t, uint8(8), mdts(tg.cfg.rdmaMaxTransfer))

	_, err = tg.AddSubsystem(SubsystemConfig{NQN: ""})
	assert.ErrorIs(t, err, ErrInvalidNQN)
	_, err = tg.AddSubsystem(SubsystemConfig{NQN: nvmeof.DiscoveryNQN})
	assert.ErrorIs(t, err, ErrInvalidNQN)
	_, err = tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, Hosts: []string{"bad\x00host"}})
	assert.ErrorIs(t, err, ErrInvalidNQN)
	_, err = tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, SerialNumber: "way too long for the twenty bytes"})
	assert.ErrorIs(t, err, ErrInvalidOption)
	sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, SerialNumber: "SN1"})
	require.NoError(t, err)
	assert.Equal(t, "SN1", sub.SerialNumber())
	_, err = tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN})
	assert.ErrorIs(t, err, ErrSubsystemExists)
	assert.Same(t, sub, tg.Subsystem(testSubNQN))
	assert.Equal(t, []*Subsystem{sub}, tg.Subsystems())
	assert.Equal(t, nvmeof.DiscoveryNQN, tg.DiscoverySubsystem().NQN())

	assert.False(t, sub.HostAllowed(testHostNQN))
	require.NoError(t, sub.AllowHost(testHostNQN))
	assert.True(t, sub.HostAllowed(testHostNQN))
	sub.DisallowHost(testHostNQN)
	assert.False(t, sub.HostAllowed(testHostNQN))
	sub.SetAllowAnyHost(true)
	assert.True(t, sub.HostAllowed(otherHost))
	assert.ErrorIs(t, sub.AllowHost(""), ErrInvalidNQN)

	dev, _ := blockdev.NewMemory(1 << 20)
	tiny, _ := blockdev.NewMemory(100)
	for _, cfg := range []NamespaceConfig{
		{Device: nil},
		{Device: dev, BlockSize: 1024},
		{Device: tiny},
		{Device: dev, NSID: MaxNamespaces + 1},
	} {
		_, err := sub.AddNamespace(cfg)
		assert.ErrorIs(t, err, ErrInvalidNamespace)
	}
	ns, err := sub.AddNamespace(NamespaceConfig{NSID: 3, Device: dev, BlockSize: 4096})
	require.NoError(t, err)
	assert.Equal(t, uint64(256), ns.Blocks())
	assert.Equal(t, 4096, ns.BlockSize())
	assert.Same(t, blockdev.Device(dev), ns.Device())
	_, err = sub.AddNamespace(NamespaceConfig{NSID: 3, Device: dev})
	assert.ErrorIs(t, err, ErrNamespaceExists)
	_, err = tg.DiscoverySubsystem().AddNamespace(NamespaceConfig{Device: dev})
	assert.ErrorIs(t, err, ErrInvalidNamespace)
	assert.Equal(t, []*Namespace{ns}, sub.Namespaces())
	got, err := sub.RemoveNamespace(3)
	require.NoError(t, err)
	assert.Same(t, ns, got)
	_, err = sub.RemoveNamespace(3)
	assert.ErrorIs(t, err, ErrNoNamespace)
	assert.Nil(t, sub.Namespace(3))

	_, err = tg.Listen(context.Background(), "udp://127.0.0.1:0")
	assert.Error(t, err, "no binding for udp")
	url, err := tg.Listen(context.Background(), transports()["shm"]())
	require.NoError(t, err)
	_, err = tg.Listen(context.Background(), url)
	assert.ErrorIs(t, err, ErrListenerExists)
}

// TestRegionsReused: the registered memory of queues that ended serves
// the next ones (a reconnect does not register it again), within the
// cache's limit, and Shutdown releases it.
func TestRegionsReused(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		l := tt.listeners[0].(*rdmaListener)
		cached := func() int {
			l.regions.mu.Lock()
			defer l.regions.mu.Unlock()
			return l.regions.bytes
		}
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 32)
		require.NoError(t, io.do(io.readCmd(1, 0, 256, 0, 128<<10), nil).cqe.Status.Err()) // a large buffer
		assert.Zero(t, cached())
		admin.close()
		io.close()
		require.Eventually(t, func() bool { return tt.queueCount() == 0 }, rawTimeout, time.Millisecond)
		held := cached()
		assert.Greater(t, held, DefaultMaxTransfer, "capsule, response and large buffers of both queues")

		admin = adminQueue(t, tt.url, testSubNQN, 0)
		io = ioQueue(t, tt.url, admin, 1, 32)
		require.NoError(t, io.do(io.readCmd(1, 0, 256, 0, 128<<10), nil).cqe.Status.Err())
		assert.Zero(t, cached(), "the same queues again take every region back")
		require.NoError(t, tt.Close())
		assert.Zero(t, cached())
	})
}

// TestCNTLIDRange: a subsystem gives out only the controller IDs its
// configuration allows, and a Connect beyond them fails.
func TestCNTLIDRange(t *testing.T) {
	tg, err := New(WithLogger(testLogger(t)))
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	for _, r := range [][2]uint16{{5, 4}, {1, nvmeof.MaxCNTLID + 1}} {
		_, err := tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowAnyHost: true, MinCNTLID: r[0], MaxCNTLID: r[1]})
		assert.ErrorIs(t, err, ErrInvalidOption, "%d to %d", r[0], r[1])
	}
	_, err = tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowAnyHost: true, MinCNTLID: 0x1001, MaxCNTLID: 0x1002})
	require.NoError(t, err)
	url, err := tg.Listen(context.Background(), transports()["shm"]())
	require.NoError(t, err)
	var got []uint16
	for range 2 {
		got = append(got, adminQueue(t, url, testSubNQN, 0).cntlid)
	}
	assert.ElementsMatch(t, []uint16{0x1001, 0x1002}, got)
	q, err := dialRaw(t, url, rawDialConfig{qid: 0, hsqsize: 31, hrqsize: 32})
	require.NoError(t, err)
	r := q.connect(31, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), false)
	assert.Error(t, r.cqe.Status.Err(), "every controller ID of the range is taken")
}
