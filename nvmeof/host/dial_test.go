package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
)

func dialErr(t *testing.T, url string, opts ...Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, url, append([]Option{WithSubsystem(respNQN), WithQueues(1), WithLogger(testLogger(t))}, opts...)...)
	if err == nil {
		c.Close()
	}
	return err
}

// TestIdentifyChecks refuses each controller a Linux host would refuse.
func TestIdentifyChecks(t *testing.T) {
	for _, tc := range []struct {
		field string
		tweak func(*nvmeof.IdentifyController)
	}{
		{"CNTLID", func(id *nvmeof.IdentifyController) { id.CNTLID++ }},
		{"KAS", func(id *nvmeof.IdentifyController) { id.KAS = 0 }},
		{"IOCCSZ", func(id *nvmeof.IdentifyController) { id.IOCCSZ = 3 }},
		{"IORCSZ", func(id *nvmeof.IdentifyController) { id.IORCSZ = 0 }},
		{"MAXCMD", func(id *nvmeof.IdentifyController) { id.MAXCMD = 0 }},
		{"SGLS", func(id *nvmeof.IdentifyController) { id.SGLS &^= nvmeof.SGLSKeyedDataBlock }},
		{"ICDOFF", func(id *nvmeof.IdentifyController) { id.ICDOFF = 1 }},
		{"SUBNQN", func(id *nvmeof.IdentifyController) { id.SUBNQN = "nqn.2024-01.io.capsule:other" }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
			r.tweak = tc.tweak
			err := dialErr(t, r.url)
			require.ErrorIs(t, err, ErrIncompatibleController)
			var ce *ControllerCheckError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.field, ce.Field)
			// Nothing is left connected: every queue the host opened is gone.
			waitFor(t, 5*time.Second, "the responder's connections to end", func() bool {
				r.mu.Lock()
				defer r.mu.Unlock()
				return len(r.conns) == 0
			})
		})
	}
	t.Run("discovery controllers may have KAS 0", func(t *testing.T) {
		r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
		entries, err := Discover(context.Background(), r.url, WithLogger(testLogger(t)))
		require.NoError(t, err)
		require.Len(t, entries, 1)
	})
}

func TestConnectRefusedHost(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
	r.allow = []string{"nqn.2024-01.io.capsule:allowed"}
	err := dialErr(t, r.url, WithHostNQN("nqn.2024-01.io.capsule:stranger"))
	require.ErrorIs(t, err, nvmeof.StatusConnectInvalidHost)
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, uint16(0), ce.QID)
	assert.Equal(t, "nqn.2024-01.io.capsule:stranger", ce.HostNQN)
	assert.True(t, ce.Status.DNR())

	require.NoError(t, dialErr(t, r.url, WithHostNQN("nqn.2024-01.io.capsule:allowed")))
}

func TestConnectInvalidParameters(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
	err := dialErr(t, r.url, WithSubsystem("nqn.2024-01.io.capsule:absent"))
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, nvmeof.StatusConnectInvalidParameters)
	assert.Equal(t, nvmeof.InvalidParameter{InData: true, Offset: nvmeof.ConnectDataOffsetSUBNQN}, ce.Param)
	assert.Contains(t, err.Error(), "byte 256 of the data")
}

func TestCMReject(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
	r.rejectCM = nvmeof.RDMACMInvalidHSQSIZE
	err := dialErr(t, r.url)
	require.ErrorIs(t, err, nvmeof.RDMACMInvalidHSQSIZE)
	require.ErrorIs(t, err, rdma.ErrConnRefused)
	var rej *rdma.RejectError
	require.ErrorAs(t, err, &rej)
}

func TestQueueNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name             string
		maxQueues        int
		maxcmd, mqes     uint16
		queues, depth    int
		wantQ, wantDepth int
	}{
		{"as asked", 8, 128, 1023, 3, 16, 3, 16},
		{"fewer queues granted", 2, 128, 1023, 4, 16, 2, 16},
		{"MAXCMD", 8, 8, 1023, 1, 128, 1, 7},
		{"MQES", 8, 128, 3, 1, 128, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
			r.maxQueues, r.maxcmd, r.mqes = tc.maxQueues, tc.maxcmd, tc.mqes
			c := dialResponder(t, r, WithQueues(tc.queues), WithQueueDepth(tc.depth))
			info, err := c.Info()
			require.NoError(t, err)
			assert.Equal(t, tc.wantQ, info.Queues)
			assert.Equal(t, tc.wantDepth, info.QueueDepth)
			cm := r.cmRequests()
			require.Len(t, cm, 1+tc.wantQ)
			for _, req := range cm[1:] {
				assert.Equal(t, uint16(tc.wantDepth), req.HSQSize, "SQSIZE: entries-1 = the commands in flight")
				assert.LessOrEqual(t, int(req.HSQSize), int(tc.mqes))
				assert.LessOrEqual(t, int(req.HRQSize), int(tc.maxcmd))
			}
			// The host never exceeds the depth: a burst of requests all
			// complete.
			ns, err := c.Namespace(1)
			require.NoError(t, err)
			runBurst(t, ns, 64)
		})
	}
}

// runBurst submits n 4 KiB reads from one goroutine and waits for all.
func runBurst(t *testing.T, ns *Namespace, n int) {
	t.Helper()
	done := make(chan *Request, n)
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Op: OpRead, Offset: int64(i%16) * 4096, Buf: make([]byte, 4096), Done: func(r *Request) { done <- r }}
		require.NoError(t, ns.Submit(&reqs[i]))
	}
	for range n {
		r := <-done
		require.NoError(t, r.Err)
		require.Equal(t, 4096, r.N)
	}
}

func TestDiscovery(t *testing.T) {
	forEachTransport(t, false, func(t *testing.T, url string) {
		r := newResponder(t, url, 1<<20, 512)
		entries, err := Discover(context.Background(), r.url, WithLogger(testLogger(t)))
		require.NoError(t, err)
		require.Len(t, entries, 1)
		assert.Equal(t, respNQN, entries[0].SUBNQN)
		got, err := EntryURL(entries[0])
		require.NoError(t, err)
		assert.Equal(t, r.url, got)

		// The discovery controller's Connect: its NQN, KATO 0.
		admin := capsulesOf(r.records(), 0)
		require.NotEmpty(t, admin)
		assert.Equal(t, uint32(0), u32(admin[0].capsule, nvmeof.ConnectOffsetKATO))
		assert.Equal(t, nqnBytes(nvmeof.DiscoveryNQN), admin[0].keyed[nvmeof.ConnectDataOffsetSUBNQN:512])

		// Dial without a subsystem takes the first NVM subsystem listed.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := Dial(ctx, r.url, WithQueues(1), WithLogger(testLogger(t)))
		require.NoError(t, err)
		defer c.Close()
		assert.Equal(t, respNQN, c.SubsystemNQN())
	})
}

func TestEntryURL(t *testing.T) {
	e := nvmeof.DiscoveryLogEntry{TRTYPE: nvmeof.TransportRDMA, ADRFAM: nvmeof.AddressFamilyIPv6, TRADDR: "::1", TRSVCID: "4420"}
	e.SetRDMA(nvmeof.RDMATransportAddress{Provider: nvmeof.RDMAProviderRoCEv2})
	u, err := EntryURL(e)
	require.NoError(t, err)
	assert.Equal(t, "rdma://[::1]:4420", u)
	tcp := nvmeof.DiscoveryLogEntry{TRTYPE: nvmeof.TransportTCP, ADRFAM: nvmeof.AddressFamilyIPv6, TRADDR: "::1", TRSVCID: "4420"}
	u, err = EntryURL(tcp)
	require.NoError(t, err)
	assert.Equal(t, "tcp://[::1]:4420", u)
	tcp.TSAS[nvmeof.TSASOffsetTCPSECTYPE] = nvmeof.TCPSecTypeTLS13
	_, err = EntryURL(tcp)
	assert.ErrorIs(t, err, ErrNotSupported, "TLS is not supported")
	e.TRTYPE = nvmeof.TransportFC
	_, err = EntryURL(e)
	assert.ErrorIs(t, err, ErrNotSupported)
	for _, trtype := range []nvmeof.TransportType{nvmeof.TransportRDMA, nvmeof.TransportIntraHost} {
		u, err = EntryURL(nvmeof.DiscoveryLogEntry{TRTYPE: trtype, ADRFAM: nvmeof.AddressFamilyIntraHost, TRADDR: "capsule"})
		require.NoError(t, err)
		assert.Equal(t, "shm://capsule", u)
	}
}

func TestNamespaceNotFound(t *testing.T) {
	r := newResponder(t, listenURLs(false)[0], 1<<20, 512)
	c := dialResponder(t, r, WithQueues(1))
	_, err := c.Namespace(2)
	assert.ErrorIs(t, err, ErrNamespaceNotFound)
	ids, err := c.Namespaces(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []uint32{1}, ids)
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []Option{
		WithQueues(0), WithQueueDepth(0), WithQueueDepth(5000), WithKeepAlive(-1),
		WithCtrlLossTimeout(-time.Second), WithReconnectDelay(time.Second, time.Millisecond),
		WithIOTimeout(time.Millisecond), WithMaxTransfer(100), WithBuffers(-1),
		WithSubsystem(""), WithHostNQN(string(make([]byte, 300))), WithLogger(nil),
	} {
		_, err := Dial(context.Background(), "iwarp://127.0.0.1:1", o)
		assert.ErrorIs(t, err, ErrInvalidOption)
	}
	// Options never write into the caller's values.
	id := [16]byte{1}
	opt := WithHostID(id)
	cfg, err := newConfig([]Option{opt})
	require.NoError(t, err)
	cfg.hostID[0] = 9
	assert.Equal(t, byte(1), id[0])
	assert.True(t, errors.Is(lostError(ErrKeepAliveTimeout), ErrControllerLost))
}
