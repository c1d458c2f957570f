package iwarp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

func TestSmokeSendWriteRead(t *testing.T) {
	a, b := newPair(t, pairOpts{preRecv: 1})
	copy(a.mr.Bytes()[8192:], "hello")
	require.NoError(t, a.qp.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 8192, 5)}}}))
	wc := waitWC(t, a.cq)
	assert.Equal(t, rdma.Success, wc.Status)
	wc = waitWC(t, b.cq)
	assert.Equal(t, rdma.Success, wc.Status)
	assert.Equal(t, uint32(5), wc.ByteLen)
	assert.Equal(t, "hello", string(b.mr.Bytes()[:5]))

	copy(a.mr.Bytes()[:], "write!")
	require.NoError(t, a.qp.PostSend([]rdma.SendWR{{ID: 2, Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 6)},
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}}))
	wc = waitWC(t, a.cq)
	assert.Equal(t, rdma.Success, wc.Status)

	require.NoError(t, a.qp.PostSend([]rdma.SendWR{{ID: 3, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 500, 6)},
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}}))
	wc = waitWC(t, a.cq)
	assert.Equal(t, rdma.Success, wc.Status)
	assert.Equal(t, rdma.WCRead, wc.Opcode)
	assert.Equal(t, "write!", string(a.mr.Bytes()[500:506]))
}
