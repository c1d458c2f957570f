package host

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// TestTCPDigestsStress runs the data-integrity stress over NVMe/TCP with
// header and data digests on every PDU.
func TestTCPDigestsStress(t *testing.T) {
	rt := newTarget(t, "tcp://127.0.0.1:0", 32<<20, 4096, nil)
	c := dialTarget(t, rt, WithQueues(queuesFor(rt.addr, 4)), WithQueueDepth(64), WithTCPDigests(true, true))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	s := newStress(t, ns, seed, stressRequests(10000), 1<<20)
	s.run(64)
	s.verify()
	t.Log(s.report())
	assert.Zero(t, c.Stats().Losses)
}

// TestTCPFileNamespaceStress runs the stress on a file-backed namespace,
// whose commands the target runs on its workers: their responses are
// written by the workers, beside those the queue's own goroutine batches.
func TestTCPFileNamespaceStress(t *testing.T) {
	tgt, err := target.New(target.WithLogger(testLogger(t)))
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	sub, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: targetNQN, AllowAnyHost: true})
	require.NoError(t, err)
	dev, err := blockdev.OpenFile(filepath.Join(t.TempDir(), "ns.img"), 16<<20)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev, BlockSize: 4096})
	require.NoError(t, err)
	addr, err := tgt.Listen(context.Background(), "tcp://127.0.0.1:0")
	require.NoError(t, err)
	c := dialTarget(t, &realTarget{tgt: tgt, sub: sub, addr: addr}, WithQueues(queuesFor(addr, 2)), WithQueueDepth(32))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	s := newStress(t, ns, seed, stressRequests(5000), 256<<10)
	s.run(32)
	s.verify()
	t.Log(s.report())
}

// TestTCPDigestsAllocateNothing checks R8 with digests on: computing and
// checking CRC32C allocates nothing either.
func TestTCPDigestsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on synchronization")
	}
	rt := newTarget(t, "tcp://127.0.0.1:0", 8<<20, 4096, nil)
	c := dialTarget(t, rt, WithQueues(1), WithQueueDepth(8), WithTCPDigests(true, true))
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	small, big := make([]byte, 4096), make([]byte, 64<<10)
	var off int64
	for name, io := range map[string]func() error{
		"ReadAt":             func() error { _, err := ns.ReadAt(big, off); return err },
		"WriteAt in-capsule": func() error { _, err := ns.WriteAt(small, off); return err },
		"WriteAt R2T":        func() error { _, err := ns.WriteAt(big, off); return err },
	} {
		for range 200 {
			require.NoError(t, io())
		}
		allocs := testing.AllocsPerRun(300, func() {
			off = (off + 64<<10) % (4 << 20)
			if err := io(); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, "%s allocates", name)
	}
}

// TestTCPMalformedPDUFromController answers the host's first command
// with a CapsuleResp whose HLEN is wrong: the host sends an H2CTermReq
// (Invalid PDU Header Field, FEI 2, the header in error) and drops the
// connection, and Dial fails with ErrProtocol.
func TestTCPMalformedPDUFromController(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		b := make([]byte, nvmeof.TCPICReqSize)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		resp, _ := (&nvmeof.TCPICResp{MAXH2CDATA: 65536}).MarshalBinary()
		c.Write(resp)
		// The Connect capsule: header, SQE, 1024 bytes in the capsule.
		cmd := make([]byte, 72+1024)
		if _, err := io.ReadFull(c, cmd); err != nil {
			return
		}
		c.Write(hextest.MustDecode(`
			05          # CapsuleResp
			00          # FLAGS
			20          # HLEN 32: wrong, a CapsuleResp has 24
			00          # PDO
			20000000    # PLEN 32
		` + strings.Repeat("00", 24)))
		term, _ := io.ReadAll(c)
		got <- term
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Dial(ctx, "tcp://"+ln.Addr().String(), WithSubsystem(targetNQN), WithLogger(testLogger(t)))
	require.ErrorIs(t, err, ErrProtocol)
	var term nvmeof.TCPTermReq
	require.NoError(t, term.UnmarshalBinary(<-got))
	assert.Equal(t, nvmeof.TCPPDUH2CTermReq, term.Type)
	assert.Equal(t, nvmeof.TCPFESInvalidHeaderField, term.FES)
	assert.EqualValues(t, nvmeof.TCPOffsetHLEN, term.FEI)
	assert.Equal(t, hextest.MustDecode(`05 00 20 00 20000000`), term.Data)
}
