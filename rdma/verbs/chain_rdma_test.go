//go:build rdma && cgo

package verbs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

func TestSendChainAsTheDeviceReadsIt(t *testing.T) {
	ch, err := newChain(4, 2, true)
	require.NoError(t, err)
	defer ch.free()
	wrs := []rdma.SendWR{
		{ID: 1, Op: rdma.OpSendImm, Flags: rdma.Signaled | rdma.Solicited, Imm: 0x11223344,
			SGL: []rdma.SGE{{Addr: 0x1000, Length: 16, LKey: 7}, {Addr: 0x2000, Length: 8, LKey: 8}}},
		{ID: 2, Op: rdma.OpWrite, RemoteAddr: 0xdead0000, RKey: 0x55,
			SGL: []rdma.SGE{{Addr: 0x3000, Length: 4096, LKey: 9}}},
		{ID: 3, Op: rdma.OpSendInv, InvRKey: 0x77, Flags: rdma.Fence},
		{ID: 4, Op: rdma.OpRead, RemoteAddr: 0xbeef, RKey: 0x66, Flags: rdma.Signaled,
			SGL: []rdma.SGE{{Addr: 0x4000, Length: 512, LKey: 10}}},
	}
	require.Equal(t, 4, ch.fillSend(wrs, 100))
	got := ch.linkSend(4)

	// WR 0: SEND_WITH_IMM (3), SIGNALED|SOLICITED (2|4), imm round-trips
	// through network order, two SGEs from offset 0.
	assert.Equal(t, sendView{WRID: 100, Next: 1, Opcode: 3, Flags: 6, Imm: 0x11223344,
		SGL: []rdma.SGE{{Addr: 0x1000, Length: 16, LKey: 7}, {Addr: 0x2000, Length: 8, LKey: 8}}}, got[0])
	// WR 1: RDMA_WRITE (0), remote address and rkey in wr.rdma.
	assert.Equal(t, sendView{WRID: 101, Next: 2, Opcode: 0, RemoteAddr: 0xdead0000, RKey: 0x55,
		SGL: []rdma.SGE{{Addr: 0x3000, Length: 4096, LKey: 9}}}, got[1])
	// WR 2: SEND_WITH_INV (9), FENCE (1), the rkey to invalidate, no SGE.
	assert.Equal(t, sendView{WRID: 102, Next: 3, Opcode: 9, Flags: 1, InvRKey: 0x77}, got[2])
	// WR 3: RDMA_READ (4), the end of the chain.
	assert.Equal(t, sendView{WRID: 103, Next: -1, Opcode: 4, Flags: 2, RemoteAddr: 0xbeef, RKey: 0x66,
		SGL: []rdma.SGE{{Addr: 0x4000, Length: 512, LKey: 10}}}, got[3])
}

func TestSendChainStopsAtWhatItCannotHold(t *testing.T) {
	ch, err := newChain(2, 1, true)
	require.NoError(t, err)
	defer ch.free()
	two := []rdma.SGE{{Addr: 1, Length: 1}, {Addr: 2, Length: 1}}
	assert.Equal(t, 1, ch.fillSend([]rdma.SendWR{{Op: rdma.OpSend}, {Op: rdma.OpSend, SGL: two}}, 0))
	assert.Equal(t, 0, ch.fillSend([]rdma.SendWR{{Op: rdma.Opcode(42)}}, 0))
	assert.Equal(t, 2, ch.fillSend([]rdma.SendWR{{Op: rdma.OpSend}, {Op: rdma.OpSend}, {Op: rdma.OpSend}}, 0))
}

func TestRecvChainFill(t *testing.T) {
	ch, err := newChain(3, 2, false)
	require.NoError(t, err)
	defer ch.free()
	wrs := []rdma.RecvWR{
		{ID: 5, SGL: []rdma.SGE{{Addr: 0x10, Length: 64, LKey: 1}}},
		{ID: 6, SGL: []rdma.SGE{{Addr: 0x20, Length: 32, LKey: 2}, {Addr: 0x40, Length: 32, LKey: 2}}},
		{ID: 7, SGL: []rdma.SGE{{}, {}, {}}},
	}
	var users []uint64
	n, err := fillRecv(ch, wrs, 2, func(k int, user uint64) (uint64, error) {
		users = append(users, user)
		return uint64(k) | wrRecv, nil
	})
	assert.Equal(t, 2, n)
	assert.ErrorIs(t, err, rdma.ErrTooManySGE)
	assert.Equal(t, []uint64{5, 6}, users)
	assert.Equal(t, wrRecv|1, uint64(ch.rwr[1].wr_id))
	assert.Equal(t, 2, int(ch.rwr[1].num_sge))
	assert.Equal(t, uint64(0x40), uint64(ch.sge[2].addr), "SGEs of WR 1 follow WR 0's")

	n, err = fillRecv(ch, wrs[:1], 2, func(int, uint64) (uint64, error) { return 0, rdma.ErrQueueFull })
	assert.Equal(t, 0, n)
	assert.ErrorIs(t, err, rdma.ErrQueueFull)
}
