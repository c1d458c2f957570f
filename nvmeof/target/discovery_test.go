package target

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

func TestDiscoveryEntry(t *testing.T) {
	for _, tc := range []struct {
		url     string
		adrfam  nvmeof.AddressFamily
		traddr  string
		trsvcid string
		prtype  uint8
	}{
		{"iwarp://127.0.0.1:4420", nvmeof.AddressFamilyIPv4, "127.0.0.1", "4420", nvmeof.RDMAProviderIWARP},
		{"iwarp://[::1]:4420", nvmeof.AddressFamilyIPv6, "::1", "4420", nvmeof.RDMAProviderIWARP},
		{"rdma://10.0.0.1:4421", nvmeof.AddressFamilyIPv4, "10.0.0.1", "4421", nvmeof.RDMAProviderNone},
		{"fault+iwarp://127.0.0.1:9", nvmeof.AddressFamilyIPv4, "127.0.0.1", "9", nvmeof.RDMAProviderIWARP},
		{"iwarp://target.example:4420", nvmeof.AddressFamilyIPv4, "target.example", "4420", nvmeof.RDMAProviderIWARP},
		{"shm://capsule", nvmeof.AddressFamilyIntraHost, "capsule", "", nvmeof.RDMAProviderNone},
	} {
		t.Run(tc.url, func(t *testing.T) {
			e, err := discoveryEntry(tc.url, 3)
			require.NoError(t, err)
			assert.Equal(t, nvmeof.TransportRDMA, e.TRTYPE)
			assert.Equal(t, tc.adrfam, e.ADRFAM)
			assert.Equal(t, tc.traddr, e.TRADDR)
			assert.Equal(t, tc.trsvcid, e.TRSVCID)
			assert.Equal(t, uint16(3), e.PORTID)
			assert.Equal(t, nvmeof.CNTLIDDynamic, e.CNTLID)
			assert.Equal(t, uint16(AdminQueueEntries), e.ASQSZ)
			assert.Equal(t, nvmeof.RDMATransportAddress{QPType: nvmeof.RDMAQPTypeReliableConnected, Provider: tc.prtype,
				CMS: nvmeof.RDMACMSRDMACM}, e.RDMA())
		})
	}
	for _, bad := range []string{"iwarp://nohost", "udp://127.0.0.1:4420", "nourl", "iwarp://1.2.3.4:99999", "tcp://127.0.0.1:port"} {
		_, err := discoveryEntry(bad, 1)
		assert.Error(t, err, bad)
	}
}

// TestDiscovery connects to the discovery subsystem over each of two
// listeners and reads the log: every subsystem the host may use, on every
// listener.
func TestDiscovery(t *testing.T) {
	tg, err := New(WithLogger(testLogger(t)))
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	open, err := tg.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.capsule:open", AllowAnyHost: true})
	require.NoError(t, err)
	_, err = tg.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.capsule:mine", Hosts: []string{testHostNQN}})
	require.NoError(t, err)
	_, err = tg.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.capsule:theirs", Hosts: []string{otherHost}})
	require.NoError(t, err)
	iw, err := tg.Listen(context.Background(), transports()["iwarp"]())
	require.NoError(t, err)
	shm, err := tg.Listen(context.Background(), transports()["shm"]())
	require.NoError(t, err)
	assert.Equal(t, []string{iw, shm}, tg.Listeners())

	for _, url := range []string{iw, shm} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			q := adminQueue(t, url, nvmeof.DiscoveryNQN, 0)
			var id nvmeof.IdentifyController
			require.NoError(t, id.UnmarshalBinary(q.identify(nvmeof.CNSController, 0)))
			assert.Equal(t, nvmeof.ControllerTypeDiscovery, id.CNTRLTYPE)
			assert.Equal(t, q.cntlid, id.CNTLID)
			assert.Equal(t, nvmeof.DiscoveryNQN, id.SUBNQN)
			assert.NotZero(t, id.KAS, "the discovery controller supports keep-alive")
			assert.Zero(t, id.NN)
			assert.Equal(t, oaesDiscoveryLogChange, id.OAES)

			// The host reads the header, then the whole page.
			h, err := nvmeof.ParseDiscoveryLogHeader(q.getLogPage(nvmeof.LogDiscovery, 0, 0, 1024))
			require.NoError(t, err)
			require.Equal(t, uint64(2+2*2), h.NumRec, "the discovery subsystem and two NVM subsystems, on two listeners")
			size := uint64(nvmeof.DiscoveryLogSize(int(h.NumRec)))
			var log nvmeof.DiscoveryLog
			require.NoError(t, log.UnmarshalBinary(q.getLogPage(nvmeof.LogDiscovery, 0, 0, size)))
			assert.Equal(t, h.GenCtr, log.GenCtr)
			type key struct{ nqn, addr string }
			got := map[key]nvmeof.DiscoveryLogEntry{}
			for _, e := range log.Entries {
				got[key{e.SUBNQN, e.TRADDR}] = e
			}
			for _, nqn := range []string{nvmeof.DiscoveryNQN, "nqn.2026-11.io.capsule:open", "nqn.2026-11.io.capsule:mine"} {
				e, ok := got[key{nqn, "127.0.0.1"}]
				require.True(t, ok, "%s on iwarp", nqn)
				assert.Equal(t, nvmeof.TransportRDMA, e.TRTYPE)
				assert.Equal(t, nvmeof.AddressFamilyIPv4, e.ADRFAM)
				assert.Equal(t, strings.TrimPrefix(iw, "iwarp://127.0.0.1:"), e.TRSVCID)
				assert.Equal(t, nvmeof.RDMAProviderIWARP, e.RDMA().Provider)
				assert.Equal(t, uint16(1), e.PORTID)
				e, ok = got[key{nqn, strings.TrimPrefix(shm, "shm://")}]
				require.True(t, ok, "%s on shm", nqn)
				assert.Equal(t, nvmeof.TransportRDMA, e.TRTYPE)
				assert.Equal(t, nvmeof.AddressFamilyIntraHost, e.ADRFAM)
				assert.Equal(t, uint16(2), e.PORTID)
				want := nvmeof.SubsystemNVMe
				if nqn == nvmeof.DiscoveryNQN {
					want = nvmeof.SubsystemCurrentDiscovery
				}
				assert.Equal(t, want, e.SUBTYPE)
			}
			// A page read in two pieces at an offset is the same page.
			first := q.getLogPage(nvmeof.LogDiscovery, 0, 0, 2048)
			rest := q.getLogPage(nvmeof.LogDiscovery, 0, 2048, size-2048)
			whole, _ := log.MarshalBinary()
			assert.Equal(t, whole, append(first, rest...))

			// Keep-alive, and the log change event.
			require.NoError(t, q.setFeature(nvmeof.FeatureKeepAliveTimer, 30000).cqe.Status.Err())
			require.NoError(t, q.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive}, nil).cqe.Status.Err())
			// A notice a discovery controller never sends is taken (as SPDK
			// takes it) and never reported.
			require.NoError(t, q.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECNamespaceAttribute)).cqe.Status.Err())
			require.NoError(t, q.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECDiscoveryLogPageChange)).cqe.Status.Err())
			aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: q.cid()}
			q.submit(&aer, nil)
			// Any change to what the log says; each subtest makes one
			// (setting what is already set changes nothing).
			if slices.Contains(open.Hosts(), otherHost) {
				open.DisallowHost(otherHost)
			} else {
				require.NoError(t, open.AllowHost(otherHost))
			}
			ev := nvmeof.ParseAsyncEvent(q.wait(aer.CID).cqe.DW0)
			assert.Equal(t, nvmeof.NoticeDiscoveryLogPageChange, ev.Info)
			assert.Equal(t, nvmeof.LogDiscovery, ev.LogPage)
			h2, err := nvmeof.ParseDiscoveryLogHeader(q.getLogPage(nvmeof.LogDiscovery, 0, 0, 1024))
			require.NoError(t, err)
			assert.Greater(t, h2.GenCtr, h.GenCtr)

			// What a discovery controller does not have.
			requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.do(q.identifyCmd(nvmeof.CNSNamespace, 1), nil))
			requireStatus(t, nvmeof.StatusInvalidLogPage.WithDNR(), q.do(q.getLogPageCmd(nvmeof.LogSMARTHealth, 0, 0, 512), nil))
			requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.setFeature(nvmeof.FeatureNumberOfQueues, 0))
		})
	}
}

func TestDiscoveryKeepAliveDefault(t *testing.T) {
	tt := newTestTarget(t, transports()["shm"]())
	q := adminQueue(t, tt.url, nvmeof.DiscoveryNQN, 0)
	c := nvmeof.Command{Opcode: nvmeof.AdminGetFeatures}
	c.CDW10 = uint32(nvmeof.FeatureKeepAliveTimer)
	r := q.do(c, nil)
	require.NoError(t, r.cqe.Status.Err())
	assert.Equal(t, uint32(DiscoveryKATO/time.Millisecond), r.cqe.DW0, "a discovery controller without KATO gets one")
}

// TestDiscoveryRemoteEntries: entries for other targets' listeners follow
// the target's own, a referral as SUBTYPE 1, an NVM subsystem this target
// also serves only to the hosts it allows; setting them tells the
// discovery controllers, and setting the same ones again does not.
func TestDiscoveryRemoteEntries(t *testing.T) {
	tg, err := New(WithLogger(testLogger(t)))
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	_, err = tg.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.capsule:theirs", Hosts: []string{otherHost}})
	require.NoError(t, err)
	url, err := tg.Listen(context.Background(), transports()["iwarp"]())
	require.NoError(t, err)
	q := adminQueue(t, url, nvmeof.DiscoveryNQN, 0)
	require.NoError(t, q.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECDiscoveryLogPageChange)).cqe.Status.Err())
	aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: q.cid()}
	q.submit(&aer, nil)

	remote := []RemoteEntry{
		{NQN: "nqn.2026-11.io.capsule:vol", URL: "tcp://10.0.0.2:4420", PortID: 0x201},
		{NQN: "nqn.2026-11.io.capsule:theirs", URL: "tcp://10.0.0.2:4420", PortID: 0x201},
		{NQN: nvmeof.DiscoveryNQN, URL: "tcp://[fd00::3]:4420", PortID: 0x301},
	}
	require.NoError(t, tg.SetRemoteEntries(remote))
	ev := nvmeof.ParseAsyncEvent(q.wait(aer.CID).cqe.DW0)
	assert.Equal(t, nvmeof.NoticeDiscoveryLogPageChange, ev.Info)

	var log nvmeof.DiscoveryLog
	require.NoError(t, log.UnmarshalBinary(q.getLogPage(nvmeof.LogDiscovery, 0, 0, uint64(nvmeof.DiscoveryLogSize(3)))))
	require.Len(t, log.Entries, 3, "this discovery subsystem, the volume on 10.0.0.2, the referral; not theirs")
	assert.Equal(t, nvmeof.SubsystemCurrentDiscovery, log.Entries[0].SUBTYPE)
	vol := log.Entries[1]
	assert.Equal(t, nvmeof.SubsystemNVMe, vol.SUBTYPE)
	assert.Equal(t, "nqn.2026-11.io.capsule:vol", vol.SUBNQN)
	assert.Equal(t, nvmeof.TransportTCP, vol.TRTYPE)
	assert.Equal(t, "10.0.0.2", vol.TRADDR)
	assert.Equal(t, "4420", vol.TRSVCID)
	assert.Equal(t, uint16(0x201), vol.PORTID)
	ref := log.Entries[2]
	assert.Equal(t, nvmeof.SubsystemReferral, ref.SUBTYPE)
	assert.Equal(t, nvmeof.DiscoveryNQN, ref.SUBNQN)
	assert.Equal(t, nvmeof.AddressFamilyIPv6, ref.ADRFAM)
	assert.Equal(t, "fd00::3", ref.TRADDR)

	gen := log.GenCtr
	require.NoError(t, tg.SetRemoteEntries(remote))
	theirs := tg.Subsystem("nqn.2026-11.io.capsule:theirs")
	require.NoError(t, theirs.AllowHost(otherHost)) // allowed already
	theirs.DisallowHost(testHostNQN)                // never allowed
	theirs.SetAllowAnyHost(false)                   // so already
	h, err := nvmeof.ParseDiscoveryLogHeader(q.getLogPage(nvmeof.LogDiscovery, 0, 0, 1024))
	require.NoError(t, err)
	assert.Equal(t, gen, h.GenCtr, "the same entries, hosts and setting again change nothing")

	assert.Error(t, tg.SetRemoteEntries([]RemoteEntry{{NQN: "nqn.2026-11.io.capsule:vol", URL: "smoke://x"}}))
	assert.Error(t, tg.SetRemoteEntries([]RemoteEntry{{NQN: "", URL: "tcp://10.0.0.2:4420"}}))
}
