package nsdevice

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/nbd"
	"github.com/capsule-storage/capsule/nvmeof/target"
	"github.com/capsule-storage/capsule/rdma/fault"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

const nqn = "nqn.2026-11.io.capsule:nsdevice-test"

// bridge starts a target with a memory namespace in this process, a
// host connected to it over iwarp as a bridge dials (DialOptions), and an NBD server
// of the namespace on loopback; it returns the NBD address and the
// target's device.
func bridge(t *testing.T) (string, *blockdev.Memory) {
	t.Helper()
	addr, dev, _, _ := bridgeAt(t, "iwarp://127.0.0.1:0")
	return addr, dev
}

// bridgeAt is bridge with the target listening at url; it also returns
// the host's controller and the target's address.
func bridgeAt(t testing.TB, url string) (string, *blockdev.Memory, *host.Controller, string) {
	t.Helper()
	tgt, err := target.New(target.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	sub, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: nqn, AllowAnyHost: true})
	require.NoError(t, err)
	dev, err := blockdev.NewMemory(4 << 20)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev, BlockSize: 512})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// iwarp, not shm: the race detector sees the synchronization of TCP
	// sockets, not of shared memory.
	addr, err := tgt.Listen(ctx, url)
	require.NoError(t, err)
	c, err := host.Dial(ctx, addr, append(DialOptions(), host.WithSubsystem(nqn),
		host.WithReconnectDelay(10*time.Millisecond, 100*time.Millisecond))...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	exp, err := Export(ns, "ns1", "test namespace", nbd.DefaultSlots)
	require.NoError(t, err)
	assert.Equal(t, uint32(512), exp.MinBlock)
	assert.True(t, exp.MultiConn)
	s := &nbd.Server{Exports: []nbd.Export{exp}, Slots: nbd.DefaultSlots}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		require.NoError(t, s.Shutdown(context.Background()))
		require.ErrorIs(t, <-served, nbd.ErrServerClosed)
	})
	return l.Addr().String(), dev, c, addr
}

// shmURL names an shm endpoint of its own.
func shmURL() string { return fmt.Sprintf("shm://nsdevice-%d-%d", os.Getpid(), rand.Uint32()) }

// rawClient speaks just enough NBD for these tests: NBD_OPT_EXPORT_NAME
// and simple replies.
type rawClient struct {
	nc   net.Conn
	br   *bufio.Reader
	size uint64
	mu   sync.Mutex // serializes writes of requests
}

func dialRaw(t *testing.T, addr, name string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	c := &rawClient{nc: nc, br: bufio.NewReader(nc)}
	g := make([]byte, nbd.GreetingSize)
	_, err = io.ReadFull(c.br, g)
	require.NoError(t, err)
	h, _ := (&nbd.OptionHeader{Option: nbd.OptExportName, Length: uint32(len(name))}).MarshalBinary()
	msg := append(binary.BigEndian.AppendUint32(nil, nbd.ClientFlagFixedNewstyle|nbd.ClientFlagNoZeroes), h...)
	_, err = nc.Write(append(msg, name...))
	require.NoError(t, err)
	r := make([]byte, nbd.ExportNameReplySize)
	_, err = io.ReadFull(c.br, r)
	require.NoError(t, err)
	c.size = binary.BigEndian.Uint64(r)
	return c
}

func (c *rawClient) send(t *testing.T, typ nbd.Command, flags uint16, cookie, off uint64, n uint32, payload []byte) {
	t.Helper()
	b, _ := (&nbd.Request{Flags: flags, Type: typ, Cookie: cookie, Offset: off, Length: n}).MarshalBinary()
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.nc.Write(append(b, payload...))
	require.NoError(t, err)
}

// reply reads a simple reply and, for a successful read of n bytes, its data.
func (c *rawClient) reply(t *testing.T, n map[uint64]int) (uint64, nbd.Errno, []byte) {
	t.Helper()
	h := make([]byte, nbd.SimpleReplySize)
	_, err := io.ReadFull(c.br, h)
	require.NoError(t, err)
	require.Equal(t, nbd.MagicSimpleReply, binary.BigEndian.Uint32(h))
	cookie, errno := binary.BigEndian.Uint64(h[8:]), nbd.Errno(binary.BigEndian.Uint32(h[4:]))
	var data []byte
	if errno == 0 && n[cookie] > 0 {
		data = make([]byte, n[cookie])
		_, err = io.ReadFull(c.br, data)
		require.NoError(t, err)
	}
	return cookie, errno, data
}

// TestBridgeCommands runs every NBD command through the host library to
// a real target and checks the namespace's bytes.
func TestBridgeCommands(t *testing.T) {
	addr, dev := bridge(t)
	c := dialRaw(t, addr, "ns1")
	require.Equal(t, uint64(4<<20), c.size)
	p := make([]byte, 64<<10)
	for i := range p {
		p[i] = byte(i*7 + 1)
	}
	c.send(t, nbd.CmdWrite, nbd.CmdFlagFUA, 1, 8192, uint32(len(p)), p)
	_, errno, _ := c.reply(t, nil)
	require.Zero(t, errno)
	got := make([]byte, len(p))
	_, err := dev.ReadAt(got, 8192)
	require.NoError(t, err)
	require.Equal(t, p, got, "the write reached the target's device")

	c.send(t, nbd.CmdRead, 0, 2, 8192+512, 1024, nil)
	_, errno, data := c.reply(t, map[uint64]int{2: 1024})
	require.Zero(t, errno)
	require.Equal(t, p[512:1536], data)

	c.send(t, nbd.CmdWriteZeroes, 0, 3, 8192, 4096, nil)
	c.send(t, nbd.CmdTrim, nbd.CmdFlagFUA, 4, 8192+4096, 4096, nil) // FUA trim: durable zeroes
	c.send(t, nbd.CmdFlush, 0, 5, 0, 0, nil)
	for range 3 {
		_, errno, _ := c.reply(t, nil)
		require.Zero(t, errno)
	}
	_, err = dev.ReadAt(got[:8192], 8192)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 8192), got[:8192])

	c.send(t, nbd.CmdRead, 0, 6, 4<<20-512, 1024, nil)
	cookie, errno, _ := c.reply(t, nil)
	assert.Equal(t, uint64(6), cookie)
	assert.Equal(t, nbd.EINVAL, errno, "past the end")
	c.send(t, nbd.CmdWrite, 0, 7, 100, 512, make([]byte, 512))
	_, errno, _ = c.reply(t, nil)
	assert.Equal(t, nbd.EINVAL, errno, "not on a block boundary")
}

// TestBridgeConnectionsAtOnce runs four connections, each with many
// requests in flight, writing disjoint ranges, then reads all back
// through another connection.
func TestBridgeConnectionsAtOnce(t *testing.T) {
	addr, _ := bridge(t)
	const conns, per, bs = 4, 64, 4096
	want := make([]byte, conns*per*bs)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	var wg sync.WaitGroup
	for k := range conns {
		c := dialRaw(t, addr, "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				off := (k*per + i) * bs
				c.send(t, nbd.CmdWrite, 0, uint64(i), uint64(off), bs, want[off:off+bs])
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := map[uint64]bool{}
			for range per {
				cookie, errno, _ := c.reply(t, nil)
				assert.Zero(t, errno)
				assert.False(t, seen[cookie])
				seen[cookie] = true
			}
		}()
	}
	wg.Wait()
	c := dialRaw(t, addr, "")
	c.send(t, nbd.CmdRead, 0, 1, 0, uint32(len(want)), nil)
	_, errno, data := c.reply(t, map[uint64]int{1: len(want)})
	require.Zero(t, errno)
	require.True(t, bytes.Equal(want, data))
}

func TestErrnoMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want nbd.Errno
	}{
		{host.ErrOutOfRange, nbd.EINVAL},
		{fmt.Errorf("x: %w", host.ErrUnaligned), nbd.EINVAL},
		{host.ErrNotSupported, nbd.EINVAL},
		{&host.CommandError{Status: nvmeof.StatusLBAOutOfRange}, nbd.ENOSPC},
		{&host.CommandError{Status: nvmeof.StatusCapacityExceeded}, nbd.ENOSPC},
		{&host.CommandError{Status: nvmeof.StatusLBAOutOfRange.WithDNR()}, nbd.ENOSPC},
		{host.ErrControllerLost, nbd.EIO},
		{io.ErrUnexpectedEOF, nbd.EIO},
	} {
		var e nbd.Errno
		err := errnoError(tc.err)
		require.ErrorAs(t, err, &e)
		assert.Equal(t, tc.want, e, "%v", tc.err)
		assert.ErrorIs(t, err, tc.err, "the cause is kept")
	}
}

// TestFlushAfterLoss cuts the connection to the controller after a write
// was acknowledged and before it was flushed: the next flush must fail
// (the write may have died with the controller's cache), the one after
// it succeed, and writes and flushes after the reconnect work as usual.
func TestFlushAfterLoss(t *testing.T) {
	addr, _, ctrl, tgtURL := bridgeAt(t, "fault+iwarp://127.0.0.1:0")
	c := dialRaw(t, addr, "")
	p := bytes.Repeat([]byte{0x5a}, 4096)
	roundTrip := func(typ nbd.Command, flags uint16, off uint64, n uint32, payload []byte) nbd.Errno {
		t.Helper()
		c.send(t, typ, flags, 1, off, n, payload)
		_, errno, _ := c.reply(t, nil)
		return errno
	}
	require.Zero(t, roundTrip(nbd.CmdWrite, 0, 0, 4096, p))
	require.Zero(t, roundTrip(nbd.CmdFlush, 0, 0, 0, nil), "no loss: the flush covers the write")

	require.Zero(t, roundTrip(nbd.CmdWrite, 0, 4096, 4096, p))
	require.Zero(t, roundTrip(nbd.CmdWrite, nbd.CmdFlagFUA, 8192, 4096, p))
	require.Positive(t, fault.For(strings.TrimPrefix(tgtURL, "fault+iwarp://")).Cut())
	require.Eventually(t, func() bool {
		return ctrl.Stats().Reconnects >= 1 && ctrl.State() == host.StateLive
	}, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, nbd.EIO, roundTrip(nbd.CmdFlush, 0, 0, 0, nil), "a write acknowledged before the loss was never flushed")
	assert.Zero(t, roundTrip(nbd.CmdFlush, 0, 0, 0, nil), "the failure was reported once")
	require.Zero(t, roundTrip(nbd.CmdWrite, nbd.CmdFlagFUA, 8192, 4096, p))
	require.Zero(t, roundTrip(nbd.CmdFlush, 0, 0, 0, nil), "a FUA write needs no flush")
	require.Zero(t, roundTrip(nbd.CmdWrite, 0, 8192, 4096, p))
	require.Zero(t, roundTrip(nbd.CmdFlush, 0, 0, 0, nil), "writes after the reconnect flush as usual")
}
