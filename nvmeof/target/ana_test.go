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

// anaLog reads the ANA log page on q (RAE clear), RGO as asked.
func (q *rawQueue) anaLog(rgo bool) nvmeof.ANALog {
	q.t.Helper()
	c := q.getLogPageCmd(nvmeof.LogANA, 0, 0, 4096)
	if rgo {
		c.CDW10 |= uint32(nvmeof.LSPANAReturnGroupsOnly) << 8
	}
	r := q.do(c, nil)
	require.NoError(q.t, r.cqe.Status.Err())
	var l nvmeof.ANALog
	_, err := l.UnmarshalPrefix(q.data.Bytes()[:4096])
	require.NoError(q.t, err)
	return l
}

func TestANA(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		other, err := tt.Listen(context.Background(), listen())
		require.NoError(t, err)
		for _, cfg := range []NamespaceConfig{{NSID: 2, ANAGroupID: 1}, {NSID: 3}} {
			cfg.Device, err = blockdev.NewMemory(1 << 20)
			require.NoError(t, err)
			_, err = tt.sub.AddNamespace(cfg)
			require.NoError(t, err)
		}
		assert.Equal(t, uint32(1), tt.sub.Namespace(2).ANAGroupID(), "a group given")
		assert.Equal(t, uint32(3), tt.sub.Namespace(3).ANAGroupID(), "the NSID's group")

		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 8)
		require.NoError(t, admin.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECANAChange)).cqe.Status.Err())

		// Every group starts Optimized on every listener.
		l := admin.anaLog(false)
		assert.Equal(t, nvmeof.ANALog{Groups: []nvmeof.ANAGroupDescriptor{
			{ANAGRPID: 1, State: nvmeof.ANAOptimized, NSIDs: []uint32{1, 2}},
			{ANAGRPID: 3, State: nvmeof.ANAOptimized, NSIDs: []uint32{3}},
		}}, l)
		var id nvmeof.IdentifyNamespace
		require.NoError(t, id.UnmarshalBinary(admin.identify(nvmeof.CNSNamespace, 3)))
		assert.Equal(t, uint32(3), id.ANAGRPID)
		assert.Equal(t, id.NSZE, id.NUSE)
		var ind nvmeof.IdentifyNamespaceIndependent
		require.NoError(t, ind.UnmarshalBinary(admin.identify(nvmeof.CNSNamespaceIndependent, 2)))
		assert.Equal(t, uint32(1), ind.ANAGRPID)

		// Group 3 goes Inaccessible on this listener: the held AER
		// completes with an ANA Change notice, and the log says so.
		aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: 0x5000}
		admin.submit(&aer, nil)
		require.NoError(t, tt.sub.SetANAState(tt.url, 3, nvmeof.ANAInaccessible))
		r := admin.wait(0x5000)
		require.NoError(t, r.cqe.Status.Err())
		assert.Equal(t, nvmeof.AsyncEvent{Type: nvmeof.AsyncEventNotice, Info: nvmeof.NoticeANAChange, LogPage: nvmeof.LogANA},
			nvmeof.ParseAsyncEvent(r.cqe.DW0))
		assert.Equal(t, nvmeof.ANAInaccessible, tt.sub.ANAState(tt.url, 3))
		assert.Equal(t, nvmeof.ANAOptimized, tt.sub.ANAState(other, 3), "other listeners keep theirs")
		l = admin.anaLog(false)
		assert.Equal(t, nvmeof.ANALog{ChangeCount: 1, Groups: []nvmeof.ANAGroupDescriptor{
			{ANAGRPID: 1, State: nvmeof.ANAOptimized, NSIDs: []uint32{1, 2}},
			{ANAGRPID: 3, ChangeCount: 1, State: nvmeof.ANAInaccessible, NSIDs: []uint32{3}},
		}}, l)
		assert.Equal(t, nvmeof.ANALog{ChangeCount: 1, Groups: []nvmeof.ANAGroupDescriptor{
			{ANAGRPID: 1, State: nvmeof.ANAOptimized},
			{ANAGRPID: 3, ChangeCount: 1, State: nvmeof.ANAInaccessible},
		}}, admin.anaLog(true), "RGO: groups only")

		// I/O to the group fails with the path status, without DNR (the
		// host tries another path); the other group's runs.
		requireStatus(t, nvmeof.StatusANAInaccessible, io.do(io.readCmd(3, 0, 1, 0, 512), nil))
		requireStatus(t, nvmeof.StatusANAInaccessible, io.do(io.writeCmd(3, 0, 1, 0, 512), nil))
		requireStatus(t, nvmeof.StatusSuccess, io.do(io.readCmd(2, 0, 1, 0, 512), nil))
		require.NoError(t, id.UnmarshalBinary(admin.identify(nvmeof.CNSNamespace, 3)))
		assert.Zero(t, id.NUSE, "no blocks usable through this path")
		assert.NotZero(t, id.NSZE)

		// Through the other listener all is Optimized.
		admin2 := adminQueue(t, other, testSubNQN, 0)
		io2 := ioQueue(t, other, admin2, 1, 8)
		assert.Equal(t, nvmeof.ANAOptimized, admin2.anaLog(false).Groups[1].State)
		requireStatus(t, nvmeof.StatusSuccess, io2.do(io2.readCmd(3, 0, 1, 0, 512), nil))

		// Every group in Change, then Persistent Loss for group 1: the
		// statuses follow; an unchanged state changes nothing.
		aer.CID = 0x5001
		admin.submit(&aer, nil)
		require.NoError(t, tt.sub.SetANAState(tt.url, 0, nvmeof.ANAChange))
		require.NoError(t, admin.wait(0x5001).cqe.Status.Err())
		requireStatus(t, nvmeof.StatusANATransition, io.do(io.readCmd(1, 0, 1, 0, 512), nil))
		requireStatus(t, nvmeof.StatusANATransition, io.do(io.readCmd(3, 0, 1, 0, 512), nil))
		require.NoError(t, tt.sub.SetANAState(tt.url, 1, nvmeof.ANAPersistentLoss))
		requireStatus(t, nvmeof.StatusANAPersistentLoss, io.do(io.readCmd(2, 0, 1, 0, 512), nil))
		require.NoError(t, tt.sub.SetANAState(tt.url, 1, nvmeof.ANAPersistentLoss))
		l = admin.anaLog(false)
		assert.Equal(t, uint64(3), l.ChangeCount, "the repeated state counted nothing")
		assert.Equal(t, uint64(3), l.Groups[0].ChangeCount)
		assert.Equal(t, uint64(2), l.Groups[1].ChangeCount)

		// Non-Optimized is usable.
		require.NoError(t, tt.sub.SetANAState(tt.url, 0, nvmeof.ANANonOptimized))
		requireStatus(t, nvmeof.StatusSuccess, io.do(io.readCmd(1, 0, 1, 0, 512), nil))
		requireStatus(t, nvmeof.StatusSuccess, io.do(io.readCmd(3, 0, 1, 0, 512), nil))

		// Refused: a listener that is not one, a state or group that is
		// not one, the discovery subsystem.
		assert.ErrorIs(t, tt.sub.SetANAState("tcp://127.0.0.1:1", 1, nvmeof.ANAOptimized), ErrNoListener)
		assert.ErrorIs(t, tt.sub.SetANAState(tt.url, 1, 0), ErrInvalidANA)
		assert.ErrorIs(t, tt.sub.SetANAState(tt.url, MaxANAGroups+1, nvmeof.ANAOptimized), ErrInvalidANA)
		assert.ErrorIs(t, tt.DiscoverySubsystem().SetANAState(tt.url, 1, nvmeof.ANAOptimized), ErrInvalidANA)
		dev, err := blockdev.NewMemory(1 << 20)
		require.NoError(t, err)
		_, err = tt.sub.AddNamespace(NamespaceConfig{NSID: 9, Device: dev, ANAGroupID: MaxANAGroups + 1})
		assert.ErrorIs(t, err, ErrInvalidNamespace)
	})
}

// TestANAEventMasked checks that an ANA Change event, once reported, is
// not reported again until the host reads the log page with RAE clear,
// and that a host that did not enable it gets none.
func TestANAEventMasked(t *testing.T) {
	tt := newTestTarget(t, transports()["shm"]())
	admin := adminQueue(t, tt.url, testSubNQN, 0)
	quiet := adminQueue(t, tt.url, testSubNQN, 0)
	require.NoError(t, admin.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECANAChange)).cqe.Status.Err())

	aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: 0x5000}
	admin.submit(&aer, nil)
	quietAER := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: 0x5000}
	quiet.submit(&quietAER, nil)
	require.NoError(t, tt.sub.SetANAState(tt.url, 1, nvmeof.ANAInaccessible))
	require.NoError(t, admin.wait(0x5000).cqe.Status.Err())

	// Masked: the next change is not reported while the page is unread,
	// nor after a read with RAE set.
	aer.CID = 0x5001
	admin.submit(&aer, nil)
	require.NoError(t, tt.sub.SetANAState(tt.url, 1, nvmeof.ANAOptimized))
	_, ok := admin.poll(0x5001, 200*time.Millisecond)
	assert.False(t, ok, "masked until the log page is read")
	c := admin.getLogPageCmd(nvmeof.LogANA, 0, 0, 4096)
	c.CDW10 |= 1 << 15 // RAE
	require.NoError(t, admin.do(c, nil).cqe.Status.Err())
	_, ok = admin.poll(0x5001, 200*time.Millisecond)
	assert.False(t, ok, "RAE retains the mask")
	// Read with RAE clear: the pending event goes out.
	admin.anaLog(false)
	require.NoError(t, admin.wait(0x5001).cqe.Status.Err())

	_, ok = quiet.poll(0x5000, 100*time.Millisecond)
	assert.False(t, ok, "no ANA events without AEC bit 11")

	// LSP bits other than RGO are ignored: the whole page.
	c = admin.getLogPageCmd(nvmeof.LogANA, 0, 0, 4096)
	c.CDW10 |= 0x7e << 8
	require.NoError(t, admin.do(c, nil).cqe.Status.Err())
	var l nvmeof.ANALog
	_, err := l.UnmarshalPrefix(admin.data.Bytes()[:4096])
	require.NoError(t, err)
	assert.Equal(t, []uint32{1}, l.Groups[0].NSIDs)

	// Past what the page holds, zeros up to the largest page Identify
	// allows (a host with a small MDTS reads it in pieces); past that,
	// refused.
	size := uint64(nvmeof.ANALogHeaderSize + nvmeof.ANAGroupDescriptorSize + 4)
	assert.Equal(t, make([]byte, 8), admin.getLogPage(nvmeof.LogANA, 0, size, 8))
	assert.Equal(t, make([]byte, 4), admin.getLogPage(nvmeof.LogANA, 0, 4096, 4))
	maxSize := nvmeof.MaxANALogSize(MaxANAGroups, MaxNamespaces)
	requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), admin.do(admin.getLogPageCmd(nvmeof.LogANA, 0, maxSize+4, 4), nil))
	// The discovery controller has no ANA log page.
	disc := adminQueue(t, tt.url, nvmeof.DiscoveryNQN, 0)
	requireStatus(t, nvmeof.StatusInvalidLogPage.WithDNR(), disc.do(disc.getLogPageCmd(nvmeof.LogANA, 0, 0, 4096), nil))
}

// TestANAOwnListeners checks that a subsystem served on its own
// listeners takes ANA states for those alone, and that a listener
// disallowed and allowed again starts Optimized.
func TestANAOwnListeners(t *testing.T) {
	tg, err := New(WithLogger(testLogger(t)))
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	a, err := tg.Listen(context.Background(), transports()["shm"]())
	require.NoError(t, err)
	b, err := tg.Listen(context.Background(), transports()["shm"]())
	require.NoError(t, err)
	sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowAnyHost: true, OwnListeners: true, Listeners: []string{a}})
	require.NoError(t, err)
	assert.ErrorIs(t, sub.SetANAState(b, 1, nvmeof.ANAInaccessible), ErrNoListener, "b does not serve it")
	require.NoError(t, sub.SetANAState(a, 1, nvmeof.ANAInaccessible))
	sub.DisallowListener(a)
	sub.AllowListener(a)
	assert.Equal(t, nvmeof.ANAOptimized, sub.ANAState(a, 1))
}
