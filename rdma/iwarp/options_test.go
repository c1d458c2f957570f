package iwarp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

func TestOptionErrors(t *testing.T) {
	for name, opt := range map[string]Option{
		"segment 0":         WithMaxSegment(0),
		"segment too large": WithMaxSegment(DefaultMaxSegment + 100),
		"handshake 0":       WithHandshakeTimeout(0),
		"socket buffer -1":  WithSocketBuffer(-1),
	} {
		_, err := New(opt)
		assert.ErrorIs(t, err, rdma.ErrInvalidArgument, name)
	}
}

// TestSocketBuffer: a connection works with the kernel's autotuned
// buffers (WithSocketBuffer(0)) as with the default.
func TestSocketBuffer(t *testing.T) {
	for _, n := range []int{0, 64 << 10} {
		a, b := newPair(t, pairOpts{prov: mustProv(t, WithSocketBuffer(n)), mrSize: 1 << 20})
		copy(a.mr.Bytes(), pattern(1<<20, 3))
		post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 1<<20)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		post(t, a.qp, rdma.SendWR{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 1)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		waitWC(t, a.cq)
		waitWC(t, a.cq)
		require.Equal(t, a.mr.Bytes(), b.mr.Bytes())
	}
}
