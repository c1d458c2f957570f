package target

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// TestLiveChanges: a listener stopped and a subsystem removed while hosts
// are connected are told to discovery controllers by a Discovery Log
// Page Change event, the log no longer lists them, and the removed
// subsystem's controllers are gone.
func TestLiveChanges(t *testing.T) {
	tg := newTestTarget(t, transports()["iwarp"]())
	second, err := tg.Listen(context.Background(), transports()["iwarp"]())
	require.NoError(t, err)
	other, err := tg.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.capsule:other", AllowAnyHost: true})
	require.NoError(t, err)

	disc := adminQueue(t, tg.url, nvmeof.DiscoveryNQN, 0)
	require.NoError(t, disc.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECDiscoveryLogPageChange)).cqe.Status.Err())
	entries := func() map[string]int {
		h, err := nvmeof.ParseDiscoveryLogHeader(disc.getLogPage(nvmeof.LogDiscovery, 0, 0, 1024))
		require.NoError(t, err)
		var log nvmeof.DiscoveryLog
		require.NoError(t, log.UnmarshalBinary(disc.getLogPage(nvmeof.LogDiscovery, 0, 0, uint64(nvmeof.DiscoveryLogSize(int(h.NumRec))))))
		n := map[string]int{}
		for _, e := range log.Entries {
			n[e.SUBNQN]++
		}
		return n
	}
	awaitChange := func(change func()) {
		t.Helper()
		aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: disc.cid()}
		disc.submit(&aer, nil)
		change()
		ev := nvmeof.ParseAsyncEvent(disc.wait(aer.CID).cqe.DW0)
		assert.Equal(t, nvmeof.NoticeDiscoveryLogPageChange, ev.Info)
	}
	assert.Equal(t, map[string]int{nvmeof.DiscoveryNQN: 2, testSubNQN: 2, other.NQN(): 2}, entries())

	awaitChange(func() { require.NoError(t, tg.StopListening(second)) })
	assert.Equal(t, map[string]int{nvmeof.DiscoveryNQN: 1, testSubNQN: 1, other.NQN(): 1}, entries())
	assert.Equal(t, []string{tg.url}, tg.Listeners())
	require.ErrorIs(t, tg.StopListening(second), ErrNoListener)

	ctrl := adminQueue(t, tg.url, other.NQN(), 0)
	require.Equal(t, 1, other.Controllers())
	infos := other.ControllerInfos()
	require.Len(t, infos, 1)
	assert.Equal(t, ctrl.cntlid, infos[0].CNTLID)
	assert.Equal(t, testHostNQN, infos[0].HostNQN)

	awaitChange(func() {
		ns, err := tg.RemoveSubsystem(other.NQN())
		require.NoError(t, err)
		assert.Empty(t, ns)
	})
	assert.Equal(t, map[string]int{nvmeof.DiscoveryNQN: 1, testSubNQN: 1}, entries())
	assert.Nil(t, tg.Subsystem(other.NQN()))
	assert.Zero(t, other.Controllers(), "the removed subsystem's controllers are destroyed")
	_, err = tg.RemoveSubsystem(other.NQN())
	require.ErrorIs(t, err, ErrNoSubsystem)

	// DisconnectHost ends the host's controllers of one subsystem only.
	adminQueue(t, tg.url, testSubNQN, 0)
	require.Eventually(t, func() bool { return tg.sub.Controllers() == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 0, tg.sub.DisconnectHost("nqn.2026-11.io.capsule:nobody"))
	assert.Equal(t, 1, tg.sub.DisconnectHost(testHostNQN))
	assert.Zero(t, tg.sub.Controllers())
}

// TestOwnListeners: a subsystem made with OwnListeners is served, and
// listed in the discovery log, only on the listeners it names; allowing
// another is a discovery log change.
func TestOwnListeners(t *testing.T) {
	tg := newTestTarget(t, transports()["iwarp"]())
	other, err := tg.Listen(context.Background(), transports()["iwarp"]())
	require.NoError(t, err)
	own, err := tg.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.capsule:own", AllowAnyHost: true, OwnListeners: true,
		Listeners: []string{tg.url}})
	require.NoError(t, err)
	assert.True(t, own.ListenerAllowed(tg.url))
	assert.False(t, own.ListenerAllowed(other))
	assert.True(t, tg.sub.ListenerAllowed(other), "a subsystem without OwnListeners is served everywhere")

	adminQueue(t, tg.url, own.NQN(), 0) // served here
	q, err := dialRaw(t, other, rawDialConfig{qid: 0, hsqsize: 31, hrqsize: 32})
	require.NoError(t, err)
	r := q.connect(31, 0, hostData(own.NQN(), nvmeof.CNTLIDDynamic), false)
	requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)
	assert.Equal(t, nvmeof.InvalidParameter{InData: true, Offset: nvmeof.ConnectDataOffsetSUBNQN}.DW0(), r.cqe.DW0)
	q.close()

	disc := adminQueue(t, other, nvmeof.DiscoveryNQN, 0)
	listed := func() []string {
		h, err := nvmeof.ParseDiscoveryLogHeader(disc.getLogPage(nvmeof.LogDiscovery, 0, 0, 1024))
		require.NoError(t, err)
		var log nvmeof.DiscoveryLog
		require.NoError(t, log.UnmarshalBinary(disc.getLogPage(nvmeof.LogDiscovery, 0, 0, uint64(nvmeof.DiscoveryLogSize(int(h.NumRec))))))
		var ports []string
		for _, e := range log.Entries {
			if e.SUBNQN == own.NQN() {
				ports = append(ports, e.TRSVCID)
			}
		}
		return ports
	}
	port := func(url string) string { return url[strings.LastIndexByte(url, ':')+1:] }
	assert.Equal(t, []string{port(tg.url)}, listed())

	require.NoError(t, disc.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECDiscoveryLogPageChange)).cqe.Status.Err())
	aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: disc.cid()}
	disc.submit(&aer, nil)
	own.AllowListener(other)
	assert.Equal(t, nvmeof.NoticeDiscoveryLogPageChange, nvmeof.ParseAsyncEvent(disc.wait(aer.CID).cqe.DW0).Info)
	assert.ElementsMatch(t, []string{port(tg.url), port(other)}, listed())
	adminQueue(t, other, own.NQN(), 0)
	own.DisallowListener(tg.url)
	assert.Equal(t, []string{port(other)}, listed())
}
