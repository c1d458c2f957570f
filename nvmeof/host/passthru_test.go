package host

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
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
