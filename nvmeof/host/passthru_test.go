package host

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
	"github.com/capsule-storage/capsule/rdma/fault"
)

// echoVendor is a VendorHandler for the passthrough tests:
//
//	80h (no data)   DW0 = CDW10+1
//	81h (to ctrl)   DW0 = CRC32C of the data, DW1 = its length
//	82h (to host)   fills CDW10 bytes of the pattern seeded by CDW11
//	83h (bidi)      returns the payload reversed, DW0 = CRC32C of it
type echoVendor struct{}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (echoVendor) PrepareVendor(cmd *nvmeof.Command, dataLen, payloadLen int) nvmeof.Status {
	if cmd.Opcode > 0x83 {
		return nvmeof.StatusInvalidOpcode
	}
	if cmd.Opcode == 0x82 && int(cmd.CDW10) > dataLen {
		return nvmeof.StatusInvalidField
	}
	return nvmeof.StatusSuccess
}

func (echoVendor) ExecuteVendor(c *target.VendorCommand) nvmeof.Status {
	switch c.Cmd.Opcode {
	case 0x80:
		c.DW0 = c.Cmd.CDW10 + 1
	case 0x81:
		c.DW0, c.DW1 = crc32.Checksum(c.Data, castagnoli), uint32(len(c.Data))
	case 0x82:
		pattern(c.Data[:c.Cmd.CDW10], int64(c.Cmd.CDW11), 0)
		c.N, c.DW1 = int(c.Cmd.CDW10), c.Cmd.CDW10
	case 0x83:
		for i, b := range c.Payload {
			c.Data[len(c.Payload)-1-i] = b
		}
		c.N, c.DW0, c.DW1 = len(c.Payload), crc32.Checksum(c.Payload, castagnoli), uint32(len(c.Payload))
	}
	return nvmeof.StatusSuccess
}

func (echoVendor) Sync() error { return nil }

func TestPassthru(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 1<<20, 512, nil)
		_, err := rt.sub.AddNamespace(target.NamespaceConfig{NSID: 2, Vendor: echoVendor{}})
		require.NoError(t, err)
		c := dialTarget(t, rt, WithSubsystem(targetNQN))
		info, err := c.Info()
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()

		p := &Passthru{Cmd: nvmeof.Command{Opcode: 0x80, NSID: 2, CDW10: 41}}
		require.NoError(t, c.Exec(ctx, p))
		require.Equal(t, uint32(42), p.CQE.DW0)

		for _, n := range []int{1, 100, info.InCapsule, info.InCapsule + 1, 5000, info.MaxTransfer} {
			data := make([]byte, n)
			pattern(data, int64(n), 0)
			p = &Passthru{Cmd: nvmeof.Command{Opcode: 0x81, NSID: 2}, Data: data}
			require.NoError(t, c.Exec(ctx, p), "write %d", n)
			require.Equal(t, crc32.Checksum(data, castagnoli), p.CQE.DW0, "write %d", n)
			require.Equal(t, uint32(n), p.CQE.DW1)

			// A reply shorter than the buffer: only DW1 bytes are copied.
			buf := make([]byte, n+7)
			for i := range buf {
				buf[i] = 0xee
			}
			p = &Passthru{Cmd: nvmeof.Command{Opcode: 0x82, NSID: 2, CDW10: uint32(n), CDW11: 9}, Data: buf, ReplyLenInDW1: n+7 <= info.MaxTransfer}
			if n+7 > info.MaxTransfer {
				require.ErrorIs(t, c.Exec(ctx, p), ErrInvalidRequest)
				continue
			}
			require.NoError(t, c.Exec(ctx, p), "read %d", n)
			want := make([]byte, n)
			pattern(want, 9, 0)
			require.Equal(t, want, buf[:n])
			require.Equal(t, n, p.N)
			require.Equal(t, []byte{0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee}, buf[n:], "bytes past DW1 untouched")
		}

		// Bidirectional: payload in the capsule, reply through the keyed
		// buffer, in the slot's area and in a large buffer.
		for _, pl := range []int{1, 255, info.InCapsule} {
			for _, reply := range []int{pl, info.MaxTransfer} {
				payload := make([]byte, pl)
				pattern(payload, int64(pl), 3)
				out := make([]byte, reply)
				p = &Passthru{Cmd: nvmeof.Command{Opcode: 0x83, NSID: 2}, Payload: payload, Data: out, ReplyLenInDW1: true, Idempotent: true}
				require.NoError(t, c.Exec(ctx, p))
				require.Equal(t, crc32.Checksum(payload, castagnoli), p.CQE.DW0)
				require.Equal(t, pl, p.N)
				for i := range payload {
					require.Equal(t, payload[i], out[pl-1-i])
				}
			}
		}

		// Refusals: the handler's status, a vendor opcode on a block
		// namespace, a payload on a command that is not bidirectional.
		p = &Passthru{Cmd: nvmeof.Command{Opcode: 0x82, NSID: 2, CDW10: 100}, Data: make([]byte, 10)}
		err = c.Exec(ctx, p)
		require.ErrorIs(t, err, nvmeof.StatusInvalidField.WithDNR())
		p = &Passthru{Cmd: nvmeof.Command{Opcode: 0x80, NSID: 1}}
		require.ErrorIs(t, c.Exec(ctx, p), nvmeof.StatusInvalidOpcode.WithDNR())
		p = &Passthru{Cmd: nvmeof.Command{Opcode: 0x84, NSID: 2}}
		require.ErrorIs(t, c.Exec(ctx, p), nvmeof.StatusInvalidOpcode.WithDNR())
		p = &Passthru{Cmd: nvmeof.Command{Opcode: 0x81, NSID: 2}, Payload: []byte{1}, Data: []byte{1}}
		require.ErrorIs(t, c.Exec(ctx, p), ErrInvalidRequest)
		p = &Passthru{Cmd: nvmeof.Command{Opcode: nvmeof.IORead, NSID: 1}}
		require.ErrorIs(t, c.Exec(ctx, p), ErrInvalidRequest)

		// The block namespace still works beside it.
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		b := make([]byte, 512)
		binary.LittleEndian.PutUint32(b, 7)
		_, err = ns.WriteAt(b, 0)
		require.NoError(t, err)
	})
}

// TestPassthruNoCopy: passthrough data in memory of AllocBuffer moves
// without passing through the host's slots or large buffers, in both
// directions and as the reply of a bidirectional command; data small
// enough for the capsule is still sent in it.
func TestPassthruNoCopy(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 1<<20, 512, nil)
		_, err := rt.sub.AddNamespace(target.NamespaceConfig{NSID: 2, Vendor: echoVendor{}})
		require.NoError(t, err)
		c := dialTarget(t, rt, WithSubsystem(targetNQN), WithQueues(1))
		info, err := c.Info()
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		mem, err := c.AllocBuffer(2 * info.MaxTransfer)
		require.NoError(t, err)
		clearHostData(c)

		for _, n := range []int{1, 5000, info.InCapsule + 1, info.MaxTransfer} {
			if n > info.InCapsule { // smaller writes travel in the capsule
				data := mem[:n]
				pattern(data, int64(n), 0)
				p := &Passthru{Cmd: nvmeof.Command{Opcode: 0x81, NSID: 2}, Data: data}
				require.NoError(t, c.Exec(ctx, p), "write %d", n)
				require.Equal(t, crc32.Checksum(data, castagnoli), p.CQE.DW0, "write %d", n)
			}

			buf := mem[info.MaxTransfer : info.MaxTransfer+n]
			clear(buf)
			p := &Passthru{Cmd: nvmeof.Command{Opcode: 0x82, NSID: 2, CDW10: uint32(n), CDW11: 9}, Data: buf, ReplyLenInDW1: true}
			require.NoError(t, c.Exec(ctx, p), "read %d", n)
			want := make([]byte, n)
			pattern(want, 9, 0)
			require.Equal(t, want, buf)
			require.Equal(t, n, p.N)
		}
		assert.True(t, hostDataUntouched(c), "registered memory's data passed through the host's own buffers")

		// Bidirectional: the payload travels in the capsule, the reply
		// straight into the registered memory.
		payload := []byte("payload")
		out := mem[:info.MaxTransfer]
		p := &Passthru{Cmd: nvmeof.Command{Opcode: 0x83, NSID: 2}, Payload: payload, Data: out, ReplyLenInDW1: true}
		require.NoError(t, c.Exec(ctx, p))
		require.Equal(t, []byte("daolyap"), out[:p.N])
		for _, q := range c.live.Load().io {
			assert.Equal(t, make([]byte, len(q.bufMem)), q.bufMem, "a large buffer was used")
		}

		// In-capsule data is copied into the capsule (the check sees it).
		small := mem[:16]
		pattern(small, 5, 0)
		p = &Passthru{Cmd: nvmeof.Command{Opcode: 0x81, NSID: 2}, Data: small}
		require.NoError(t, c.Exec(ctx, p))
		require.Equal(t, crc32.Checksum(small, castagnoli), p.CQE.DW0)
		assert.False(t, hostDataUntouched(c), "in-capsule data goes in the capsule")
	})
}

// gateVendor is echoVendor whose 80h commands with CDW11=1 wait for the
// gate to open, so a test can have them in flight at a connection loss.
type gateVendor struct {
	echoVendor
	entered chan struct{}
	gate    chan struct{}
}

func (g *gateVendor) ExecuteVendor(c *target.VendorCommand) nvmeof.Status {
	if c.Cmd.Opcode == 0x80 && c.Cmd.CDW11 == 1 {
		g.entered <- struct{}{}
		<-g.gate
	}
	return g.echoVendor.ExecuteVendor(c)
}

// TestPassthruAcrossLoss: after a loss, a command that was in flight is
// sent again only if it is idempotent; one that is not fails with
// ErrControllerLost (it may have run); one not yet sent waits and runs.
func TestPassthruAcrossLoss(t *testing.T) {
	url := listenURLs(true)[0]
	rt := newTarget(t, url, 1<<20, 512, nil)
	inj := fault.For(rt.addr)
	g := &gateVendor{entered: make(chan struct{}, 2), gate: make(chan struct{})}
	_, err := rt.sub.AddNamespace(target.NamespaceConfig{NSID: 2, Vendor: g})
	require.NoError(t, err)
	c := dialTarget(t, rt, WithSubsystem(targetNQN), WithReconnectDelay(10*time.Millisecond, 100*time.Millisecond))
	ctx := context.Background()

	results := make(chan error, 2)
	idem := &Passthru{Cmd: nvmeof.Command{Opcode: 0x80, NSID: 2, CDW10: 1, CDW11: 1}, Idempotent: true}
	once := &Passthru{Cmd: nvmeof.Command{Opcode: 0x80, NSID: 2, CDW10: 2, CDW11: 1}}
	go func() { results <- c.Exec(ctx, idem) }()
	go func() { results <- c.Exec(ctx, once) }()
	<-g.entered
	<-g.entered
	inj.Cut()
	close(g.gate)
	waitFor(t, 10*time.Second, "the reconnect", func() bool { return c.Stats().Reconnects > 0 && c.State() == StateLive })
	var lost, ok int
	for range 2 {
		if err := <-results; err != nil {
			require.ErrorIs(t, err, ErrControllerLost)
			lost++
		} else {
			ok++
		}
	}
	require.Equal(t, 1, lost, "the command that is not idempotent fails")
	require.Equal(t, 1, ok, "the idempotent one is sent again")
	require.Equal(t, uint32(2), idem.CQE.DW0)

	// Not idempotent, but not yet sent when the loss came: it waits.
	inj.Refuse(true)
	inj.Cut()
	waitFor(t, 5*time.Second, "the loss to be noticed", func() bool { return c.State() == StateConnecting })
	later := &Passthru{Cmd: nvmeof.Command{Opcode: 0x80, NSID: 2, CDW10: 9}}
	go func() { results <- c.Exec(ctx, later) }()
	time.Sleep(50 * time.Millisecond)
	inj.Refuse(false)
	require.NoError(t, <-results)
	require.Equal(t, uint32(10), later.CQE.DW0)
}
