package iwarp

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// TestSteadyStateAllocs checks PERFORMANCE.md R8: posting, transmitting,
// receiving, placing and completing allocate nothing once a QP runs. The
// count is process-wide, so it covers the provider's goroutines too.
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	a, b := newPair(t, pairOpts{mrSize: 1 << 20})
	ctx := context.Background()
	wc := make([]rdma.WC, 1)
	wait := func(cq rdma.CQ) rdma.WCStatus {
		n, err := cq.Wait(ctx, wc)
		if err != nil || n != 1 {
			t.Fatalf("wait: %d %v", n, err)
		}
		return wc[0].Status
	}
	recvWR := []rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(b.mr, 0, 256<<10)}}}
	sendWR := []rdma.SendWR{{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 4096)}}}
	writeWR := []rdma.SendWR{{ID: 3, Op: rdma.OpWriteImm, Flags: rdma.Signaled, Imm: 9, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 200<<10)},
		RemoteAddr: b.mr.Addr() + 300<<10, RKey: b.mr.RKey()}}
	readWR := []rdma.SendWR{{ID: 4, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 600<<10, 200<<10)},
		RemoteAddr: b.mr.Addr() + 300<<10, RKey: b.mr.RKey()}}
	round := func() {
		if err := b.qp.PostRecv(recvWR); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(sendWR); err != nil {
			t.Fatal(err)
		}
		if wait(a.cq) != rdma.Success || wait(b.cq) != rdma.Success {
			t.Fatal("send failed")
		}
		if err := b.qp.PostRecv(recvWR); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(writeWR); err != nil {
			t.Fatal(err)
		}
		if wait(a.cq) != rdma.Success || wait(b.cq) != rdma.Success {
			t.Fatal("write with immediate failed")
		}
		if err := a.qp.PostSend(readWR); err != nil {
			t.Fatal(err)
		}
		if wait(a.cq) != rdma.Success {
			t.Fatal("read failed")
		}
	}
	for i := 0; i < 20; i++ {
		round() // warm up: goroutine stacks, timers, poller
	}
	allocs := testing.AllocsPerRun(100, round)
	assert.Zero(t, allocs, "allocations per Send + Write with Immediate + Read round")
	require.Nil(t, a.qp.Err())
}
