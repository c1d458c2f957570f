package host

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof/target"
)

// WirecheckTCPPortEnv names the loopback port scripts/wirecheck.sh
// captures NVMe/TCP traffic on.
const WirecheckTCPPortEnv = "CAPSULE_TCP_WIRECHECK_PORT"

// TestWirecheckTCPTraffic puts every PDU type of an NVMe/TCP session on
// the wire of one port, once without and once with header and data
// digests: ICReq and ICResp, CapsuleCmd with and without in-capsule data,
// CapsuleResp, R2T, H2CData (several per R2T), C2HData, and the discovery
// log read. It asserts the results; scripts/wirecheck.sh judges the bytes
// with tshark.
func TestWirecheckTCPTraffic(t *testing.T) {
	port := os.Getenv(WirecheckTCPPortEnv)
	if port == "" {
		t.Skip("set " + WirecheckTCPPortEnv + " (scripts/wirecheck.sh does)")
	}
	rt := newTarget(t, "tcp://127.0.0.1:"+port, 8<<20, 4096, nil, target.WithTCPMaxH2CData(128<<10))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	entries, err := Discover(ctx, rt.addr, WithLogger(testLogger(t)))
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	for _, digests := range []bool{false, true} {
		// 256 KiB commands (MDTS): the target asks for the data with one
		// R2T, and MAXH2CDATA (128 KiB here) makes the host answer with
		// two H2CData PDUs.
		c := dialTarget(t, rt, WithSubsystem(targetNQN), WithQueues(1), WithTCPDigests(digests, digests),
			WithMaxTransfer(512<<10))
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		for i, size := range []int{4096, 8192, 64 << 10, 512 << 10} {
			off := int64(i) << 20
			w := make([]byte, size)
			pattern(w, int64(size), off)
			_, err := ns.WriteAt(w, off)
			require.NoError(t, err)
			r := make([]byte, size)
			_, err = ns.ReadAt(r, off)
			require.NoError(t, err)
			require.True(t, bytes.Equal(w, r), "read back %d bytes", size)
		}
		require.NoError(t, ns.Flush())
		require.NoError(t, ns.WriteZeroes(0, 4096))
		require.Zero(t, c.Stats().Losses)
		require.NoError(t, c.Close())
	}
}
