package iwarp

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// WirecheckPortEnv names the environment variable that makes
// TestWirecheckTraffic run, listening on that loopback port, for
// scripts/wirecheck.sh to capture and decode with Wireshark.
const WirecheckPortEnv = "CAPSULE_IWARP_WIRECHECK_PORT"

// TestWirecheckTraffic puts every message type this provider sends on the
// wire of one port: Send, Send with SE, Send with Invalidate, Send with SE
// and Invalidate, RDMA Write, Read Request and Response, Immediate Data
// (Write and Send with Immediate), multi-segment messages, and a
// Terminate (a Write with a bad rkey on a second connection). It asserts
// the operations' results; scripts/wirecheck.sh judges the bytes.
func TestWirecheckTraffic(t *testing.T) {
	port := os.Getenv(WirecheckPortEnv)
	if port == "" {
		t.Skip("set " + WirecheckPortEnv + " (scripts/wirecheck.sh does)")
	}
	p := mustProv(t, WithMaxSegment(8000)) // several segments per message, small TCP windows
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := p.Listen(ctx, net.JoinHostPort("127.0.0.1", port))
	require.NoError(t, err)
	defer l.Close()

	pdA, _ := p.OpenPD("")
	pdB, _ := p.OpenPD("")
	connect := func() (a, b *side) {
		a, b = &side{pd: pdA}, &side{pd: pdB}
		a.cq, _ = pdA.CreateCQ(256)
		b.cq, _ = pdB.CreateCQ(256)
		a.mr, _ = pdA.Alloc(1<<20, rdma.AccessAll)
		b.mr, _ = pdB.Alloc(1<<20, rdma.AccessAll)
		b.qp, _ = pdB.CreateQP(rdma.QPConfig{SendCQ: b.cq})
		done := make(chan error, 1)
		go func() {
			req, err := l.Accept(ctx)
			if err == nil {
				err = req.Accept(b.qp, []byte("capsule wirecheck accept"))
			}
			done <- err
		}()
		a.qp, _, err = rdma.Dial(ctx, l.Addr(), pdA, rdma.QPConfig{SendCQ: a.cq}, []byte("capsule wirecheck request"))
		require.NoError(t, err)
		require.NoError(t, <-done)
		return a, b
	}
	a, b := connect()
	copy(a.mr.Bytes(), pattern(1<<20, 1))
	inv1, _ := pdB.Alloc(4096, rdma.AccessAll)
	inv2, _ := pdB.Alloc(4096, rdma.AccessAll)
	sends := []rdma.SendWR{
		{Op: rdma.OpSend},
		{Op: rdma.OpSend, Flags: rdma.Solicited},
		{Op: rdma.OpSendInv, InvRKey: inv1.RKey()},
		{Op: rdma.OpSendInv, InvRKey: inv2.RKey(), Flags: rdma.Solicited},
		{Op: rdma.OpSendImm, Imm: 0x5eed},
	}
	for i, wr := range sends {
		recv(t, b.qp, uint64(i), rdma.SGEOf(b.mr, 0, 65536))
		wr.ID, wr.Flags = uint64(i), wr.Flags|rdma.Signaled
		wr.SGL = []rdma.SGE{rdma.SGEOf(a.mr, 0, 20000+i)}
		post(t, a.qp, wr)
		assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
		assert.Equal(t, rdma.Success, waitWC(t, b.cq).Status)
	}
	recv(t, b.qp, 10, rdma.SGEOf(b.mr, 0, 16))
	post(t, a.qp,
		rdma.SendWR{ID: 20, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 30001)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()},
		rdma.SendWR{ID: 21, Op: rdma.OpWriteImm, Imm: 42, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 5)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		rdma.SendWR{ID: 22, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 500000, 24002), rdma.SGEOf(a.mr, 600000, 3)},
			RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
	assert.Equal(t, rdma.WC{ID: 22, Opcode: rdma.WCRead, QPNum: a.qp.Num()}, waitWC(t, a.cq))
	wc := waitWC(t, b.cq)
	assert.Equal(t, rdma.WCRecvWriteImm, wc.Opcode)
	assert.Equal(t, uint32(42), wc.Imm)
	// RDMA Writes and small inline Sends posted together, as an NVMe-oF
	// target answers reads: one batch, several FPDUs per TCP segment.
	batch := make([]rdma.SendWR, 0, 16)
	for i := range 8 {
		recv(t, b.qp, uint64(100+i), rdma.SGEOf(b.mr, 65536+i*64, 64))
		batch = append(batch,
			rdma.SendWR{ID: uint64(200 + i), Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(a.mr, i*4096, 4096)},
				RemoteAddr: b.mr.Addr() + 131072 + uint64(i*4096), RKey: b.mr.RKey()},
			rdma.SendWR{ID: uint64(300 + i), Op: rdma.OpSend, Flags: rdma.Inline | rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, i*16, 16)}})
	}
	post(t, a.qp, batch...)
	for i := range 8 {
		assert.Equal(t, rdma.WC{ID: uint64(300 + i), Opcode: rdma.WCSend, QPNum: a.qp.Num()}, waitWC(t, a.cq))
		assert.Equal(t, rdma.WC{ID: uint64(100 + i), Opcode: rdma.WCRecv, ByteLen: 16, QPNum: b.qp.Num()}, waitWC(t, b.cq))
	}
	assert.Equal(t, a.mr.Bytes()[:8*4096], b.mr.Bytes()[131072:131072+8*4096])
	// Both ends close with nothing left unread: FIN, no reset.
	require.NoError(t, a.qp.Close())
	waitDone(t, b.qp)
	require.NoError(t, b.qp.Close())

	// A Write through a bad rkey: the peer answers with a Terminate.
	a, b = connect()
	post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 1})
	waitDone(t, a.qp)
	waitDone(t, b.qp)
	assert.Equal(t, rdma.RemAccessErr, a.qp.Err())
	require.NoError(t, a.qp.Close())
	require.NoError(t, b.qp.Close())
}
