package conformance

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// requireRefused posts an RDMA Write or Read of n bytes at (raddr, rkey)
// that the peer must refuse, and checks what rdma/doc.go promises: nothing
// is written at the peer (every region in watch keeps its bytes) nor read
// into the local sink; the WR completes with RemAccessErr, or a Write with
// Success first under Env.CompleteOnHandoff, in which case the signaled
// Read posted after it must not succeed; and both QPs enter StateError
// with Err() RemAccessErr.
func requireRefused(t *testing.T, p *pair, env Env, op rdma.Opcode, rkey uint32, raddr uint64, n int, watch ...rdma.MR) {
	t.Helper()
	before := make([][]byte, len(watch))
	for i, mr := range watch {
		before[i] = bytes.Clone(mr.Bytes())
	}
	local := p.allocA(max(n, 1), rdma.AccessLocalWrite, 0xbad)
	localBefore := bytes.Clone(local.Bytes())
	good := p.allocB(64, rdma.AccessAll, 0x600d)
	goodBefore := bytes.Clone(good.Bytes())
	probe := p.allocA(64, rdma.AccessLocalWrite, 0x9)

	bad := rdma.SendWR{ID: 1, Op: op, Flags: rdma.Signaled, SGL: sgl(local, piece{0, n}), RemoteAddr: raddr, RKey: rkey}
	after := rdma.SendWR{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sgl(probe, piece{0, 64}), RemoteAddr: good.Addr(), RKey: good.RKey()}
	postSend(t, p.a, bad, after)
	wcs := waitWC(t, p.cqA, 2)
	require.Equal(t, uint64(1), wcs[0].ID, "completions out of order: %v", wcs)
	require.Equal(t, uint64(2), wcs[1].ID, "completions out of order: %v", wcs)
	if op == rdma.OpWrite && env.CompleteOnHandoff && wcs[0].Status == rdma.Success {
		// The Write was handed to the transport; the Terminate follows.
	} else {
		require.Equal(t, rdma.RemAccessErr, wcs[0].Status, "the refused %v: %+v", op, wcs[0])
	}
	require.NotEqual(t, rdma.Success, wcs[1].Status, "a Read posted after a refused %v must not succeed: %+v", op, wcs[1])

	require.ErrorIs(t, waitDone(t, p.a, "initiator"), rdma.RemAccessErr, "initiator QP.Err after a refused %v", op)
	require.ErrorIs(t, waitDone(t, p.b, "target"), rdma.RemAccessErr, "target QP.Err after refusing a %v", op)

	for i, mr := range watch {
		requireBytes(t, before[i], mr.Bytes(), "target region %d after a refused %v", i, op)
	}
	requireBytes(t, goodBefore, good.Bytes(), "an unrelated target region after a refused %v", op)
	if op == rdma.OpRead {
		requireBytes(t, localBefore, local.Bytes(), "the local sink of a refused Read")
	}
}

// refusedCase is one refused access on a fresh connection. target makes
// the region on the passive side and returns the rkey, address and length
// to use, and the regions whose bytes must not change.
type refusedCase struct {
	name   string
	op     rdma.Opcode
	target func(t *testing.T, p *pair) (rkey uint32, raddr uint64, n int, watch []rdma.MR)
}

func runRefused(t *testing.T, env Env, cases []refusedCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, env, pairOptions{})
			rkey, raddr, n, watch := c.target(t, p)
			requireRefused(t, p, env, c.op, rkey, raddr, n, watch...)
		})
	}
}

// testAccessWrongRKey: an rkey the peer never gave out.
func testAccessWrongRKey(t *testing.T, env Env) {
	wrong := func(t *testing.T, p *pair) (uint32, uint64, int, []rdma.MR) {
		mr := p.allocB(4096, rdma.AccessAll, 1)
		return mr.RKey() ^ 0x8000_0000, mr.Addr() + 1, 100, []rdma.MR{mr}
	}
	runRefused(t, env, []refusedCase{
		{"Write", rdma.OpWrite, wrong},
		{"Read", rdma.OpRead, wrong},
	})
}

// testAccessOutOfBounds: a range that starts or ends outside the region.
func testAccessOutOfBounds(t *testing.T, env Env) {
	pastEnd := func(t *testing.T, p *pair) (uint32, uint64, int, []rdma.MR) {
		mr := p.allocB(4096, rdma.AccessAll, 1)
		return mr.RKey(), mr.Addr() + 4096 - 10, 11, []rdma.MR{mr}
	}
	beforeStart := func(t *testing.T, p *pair) (uint32, uint64, int, []rdma.MR) {
		mr := p.allocB(4096, rdma.AccessAll, 1)
		return mr.RKey(), mr.Addr() - 1, 10, []rdma.MR{mr}
	}
	tooLong := func(t *testing.T, p *pair) (uint32, uint64, int, []rdma.MR) {
		mr := p.allocB(4096, rdma.AccessAll, 1)
		return mr.RKey(), mr.Addr(), 4097, []rdma.MR{mr}
	}
	runRefused(t, env, []refusedCase{
		{"WritePastEnd", rdma.OpWrite, pastEnd},
		{"WriteBeforeStart", rdma.OpWrite, beforeStart},
		{"WriteTooLong", rdma.OpWrite, tooLong},
		{"ReadPastEnd", rdma.OpRead, pastEnd},
		{"ReadBeforeStart", rdma.OpRead, beforeStart},
	})
}

// testAccessMissingRight: a Write to a region that allows only remote
// reads, a Read from one that allows only remote writes.
func testAccessMissingRight(t *testing.T, env Env) {
	runRefused(t, env, []refusedCase{
		{"WriteToReadOnly", rdma.OpWrite, func(t *testing.T, p *pair) (uint32, uint64, int, []rdma.MR) {
			mr := p.allocB(4096, rdma.AccessLocalWrite|rdma.AccessRemoteRead, 1)
			return mr.RKey(), mr.Addr() + 3, 1000, []rdma.MR{mr}
		}},
		{"ReadFromWriteOnly", rdma.OpRead, func(t *testing.T, p *pair) (uint32, uint64, int, []rdma.MR) {
			mr := p.allocB(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 1)
			return mr.RKey(), mr.Addr() + 3, 1000, []rdma.MR{mr}
		}},
	})
}

// testAccessAfterDeregister: the rkey of a deregistered region, while a
// new region (which may reuse the slot, the key index or the memory) is
// registered in its place.
func testAccessAfterDeregister(t *testing.T, env Env) {
	gone := func(t *testing.T, p *pair) (uint32, uint64, int, []rdma.MR) {
		old := p.allocB(4096, rdma.AccessAll, 1)
		rkey, addr := old.RKey(), old.Addr()
		p.free(old)
		fresh := p.allocB(4096, rdma.AccessAll, 2)
		return rkey, addr, 4096, []rdma.MR{fresh}
	}
	runRefused(t, env, []refusedCase{
		{"Write", rdma.OpWrite, gone},
		{"Read", rdma.OpRead, gone},
	})
}
