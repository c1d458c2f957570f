//go:build rdma && cgo

package verbs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/capsule-storage/capsule/rdma"
)

// The numbers are enum ibv_wc_status of <infiniband/verbs.h>, the ABI.
func TestWCStatusMapping(t *testing.T) {
	for _, c := range []struct {
		ibv  uint32
		name string
		want rdma.WCStatus
	}{
		{0, "SUCCESS", rdma.Success},
		{1, "LOC_LEN_ERR", rdma.LocLenErr},
		{2, "LOC_QP_OP_ERR", rdma.LocQPOpErr},
		{3, "LOC_EEC_OP_ERR", rdma.LocQPOpErr},
		{4, "LOC_PROT_ERR", rdma.LocProtErr},
		{5, "WR_FLUSH_ERR", rdma.WRFlushErr},
		{6, "MW_BIND_ERR", rdma.GeneralErr},
		{7, "BAD_RESP_ERR", rdma.GeneralErr},
		{8, "LOC_ACCESS_ERR", rdma.LocProtErr},
		{9, "REM_INV_REQ_ERR", rdma.RemInvReqErr},
		{10, "REM_ACCESS_ERR", rdma.RemAccessErr},
		{11, "REM_OP_ERR", rdma.RemOpErr},
		{12, "RETRY_EXC_ERR", rdma.RetryExcErr},
		{13, "RNR_RETRY_EXC_ERR", rdma.RNRRetryExcErr},
		{14, "LOC_RDD_VIOL_ERR", rdma.LocProtErr},
		{15, "REM_INV_RD_REQ_ERR", rdma.RemInvReqErr},
		{16, "REM_ABORT_ERR", rdma.RemOpErr},
		{19, "FATAL_ERR", rdma.GeneralErr},
		{20, "RESP_TIMEOUT_ERR", rdma.RetryExcErr},
		{21, "GENERAL_ERR", rdma.GeneralErr},
		{200, "unknown", rdma.GeneralErr},
	} {
		assert.Equal(t, c.want, wcStatus(c.ibv), c.name)
	}
}

// enum ibv_wc_opcode: SEND 0, RDMA_WRITE 1, RDMA_READ 2, COMP_SWAP 3,
// RECV 128 (1<<7), RECV_RDMA_WITH_IMM 129.
func TestWCOpcodeMapping(t *testing.T) {
	for ibv, want := range map[uint32]rdma.WCOpcode{
		0: rdma.WCSend, 1: rdma.WCWrite, 2: rdma.WCRead, 128: rdma.WCRecv, 129: rdma.WCRecvWriteImm,
	} {
		got, ok := wcOpcode(ibv)
		assert.True(t, ok, "opcode %d", ibv)
		assert.Equal(t, want, got, "opcode %d", ibv)
	}
	_, ok := wcOpcode(3)
	assert.False(t, ok, "atomics are not in the API")
}

// enum ibv_wr_opcode: RDMA_WRITE 0, RDMA_WRITE_WITH_IMM 1, SEND 2,
// SEND_WITH_IMM 3, RDMA_READ 4, SEND_WITH_INV 9.
func TestWROpcodeMapping(t *testing.T) {
	for _, c := range []struct {
		op   rdma.Opcode
		ibv  uint32
		wcop rdma.WCOpcode
	}{
		{rdma.OpSend, 2, rdma.WCSend},
		{rdma.OpSendImm, 3, rdma.WCSend},
		{rdma.OpSendInv, 9, rdma.WCSend},
		{rdma.OpWrite, 0, rdma.WCWrite},
		{rdma.OpWriteImm, 1, rdma.WCWrite},
		{rdma.OpRead, 4, rdma.WCRead},
	} {
		ibv, wcop, ok := wrOpcode(c.op)
		assert.True(t, ok, c.op.String())
		assert.Equal(t, c.ibv, ibv, c.op.String())
		assert.Equal(t, c.wcop, wcop, c.op.String())
	}
	_, _, ok := wrOpcode(rdma.Opcode(99))
	assert.False(t, ok)
}

// ibv_send_flags: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8.
// ibv_access_flags: LOCAL_WRITE 1, REMOTE_WRITE 2, REMOTE_READ 4.
// ibv_wc_flags: WITH_IMM 2, WITH_INV 8.
func TestFlagMapping(t *testing.T) {
	assert.Equal(t, uint32(0), sendFlags(0))
	assert.Equal(t, uint32(2), sendFlags(rdma.Signaled))
	assert.Equal(t, uint32(1|2|4|8), sendFlags(rdma.Signaled|rdma.Inline|rdma.Fence|rdma.Solicited))
	assert.Equal(t, 1, int(accessFlags(rdma.AccessLocalWrite)))
	assert.Equal(t, 4, int(accessFlags(rdma.AccessRemoteRead)))
	assert.Equal(t, 7, int(accessFlags(rdma.AccessAll)))
	assert.Equal(t, rdma.WCWithImm, wcFlags(2))
	assert.Equal(t, rdma.WCWithImm|rdma.WCWithInv, wcFlags(2|8|1))
}

func TestRNRTimerEncoding(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		code uint8
	}{
		{0, 1},                         // anything positive rounds up to 0.01ms
		{10 * time.Microsecond, 1},     // exactly 0.01ms
		{time.Millisecond, 14},         // 1.28ms
		{10 * time.Millisecond, 20},    // 10.24ms, the API's default
		{10240 * time.Microsecond, 20}, // exact
		{491 * time.Millisecond, 31},   // 491.52ms
		{500 * time.Millisecond, 0},    // 655.36ms, the longest
		{time.Hour, 0},
	} {
		assert.Equal(t, c.code, rnrTimerCode(c.d), c.d.String())
	}
	assert.Equal(t, 6, rnrRetryCount(7), "7 means forever on InfiniBand")
	assert.Equal(t, 3, rnrRetryCount(3))
}
