package target

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/rdma"
)

// readLoop drives 4 KiB reads (or writes) of a namespace at a queue depth
// with no allocation of its own, so that an allocation count measures the
// target (and the providers) alone. Like a good initiator it posts the
// commands a batch of completions frees in one PostSend.
type readLoop struct {
	q     *rawQueue
	depth int
	gen   uint16
	sges  []rdma.SGE
	wrs   []rdma.SendWR // the batch being built
}

func newIOLoop(tb testing.TB, q *rawQueue, depth int, op nvmeof.Opcode, nsid uint32) *readLoop {
	l := &readLoop{q: q, depth: depth, sges: make([]rdma.SGE, depth), wrs: make([]rdma.SendWR, 0, depth)}
	for i := range depth {
		c := q.readCmd(nsid, uint64(i*8), 8, i*4096, 4096)
		c.Opcode = op
		_, err := c.MarshalTo(q.cmds.Bytes()[i*q.capSize:])
		require.NoError(tb, err)
		l.sges[i] = rdma.SGEOf(q.cmds, i*q.capSize, nvmeof.CommandSize)
	}
	return l
}

// add puts command slot i, with a fresh CID whose low bits are i, in the
// batch.
func (l *readLoop) add(i int) {
	q := l.q
	l.gen++
	cid := uint16(i) | l.gen<<6
	buf := q.cmds.Bytes()[i*q.capSize:]
	buf[nvmeof.CommandOffsetCID] = byte(cid)
	buf[nvmeof.CommandOffsetCID+1] = byte(cid >> 8)
	l.wrs = append(l.wrs, rdma.SendWR{Op: rdma.OpSend, SGL: l.sges[i : i+1]})
}

func (l *readLoop) flush() {
	if len(l.wrs) == 0 {
		return
	}
	if err := l.q.qp.PostSend(l.wrs); err != nil {
		panic(err)
	}
	l.wrs = l.wrs[:0]
}

// run keeps depth reads in flight until n have completed.
func (l *readLoop) run(n int) {
	q := l.q
	for i := range min(l.depth, n) {
		l.add(i)
	}
	l.flush()
	inflight, done := min(l.depth, n), 0
	for done < n {
		k, err := q.cq.Wait(context.Background(), q.wcs)
		if err != nil {
			panic(err)
		}
		for _, wc := range q.wcs[:k] {
			if wc.Status != rdma.Success {
				panic(wc.Status)
			}
			if wc.Opcode != rdma.WCRecv {
				continue
			}
			rsp := q.rsps.Bytes()[int(wc.ID)*rawRecvSize:]
			var cqe nvmeof.Completion
			if err := cqe.UnmarshalBinary(rsp[:nvmeof.CompletionSize]); err != nil || !cqe.Status.Success() {
				panic("read failed")
			}
			q.recvSGE[0] = rdma.SGEOf(q.rsps, int(wc.ID)*rawRecvSize, rawRecvSize)
			q.recvWR[0] = rdma.RecvWR{ID: wc.ID, SGL: q.recvSGE[:]}
			if err := q.qp.PostRecv(q.recvWR[:]); err != nil {
				panic(err)
			}
			done++
			inflight--
			if done+inflight < n {
				l.add(int(cqe.CID & 63))
				inflight++
			}
		}
		l.flush()
	}
}

// BenchmarkDispatch measures the target's command path: 4 KiB reads and
// writes on a memory namespace at queue depth 1 and 32, over each provider, with
// the initiator allocating nothing, so allocs/op is the target's (and
// the providers'). The baseline is the provider's own ping-pong
// (rdma/conformance, BenchmarkPingPong) and memcpy of 4 KiB.
func BenchmarkDispatch(b *testing.B) {
	for name, listen := range transports() {
		for _, op := range []nvmeof.Opcode{nvmeof.IORead, nvmeof.IOWrite} {
			for _, depth := range []int{1, 32} {
				opName := map[nvmeof.Opcode]string{nvmeof.IORead: "read", nvmeof.IOWrite: "write"}[op]
				b.Run(name+"/"+opName+"/qd"+strconv.Itoa(depth), func(b *testing.B) {
					tt := newTestTarget(b, listen())
					admin := adminQueue(b, tt.url, testSubNQN, 0)
					io := ioQueue(b, tt.url, admin, 1, 64)
					l := newIOLoop(b, io, depth, op, 1)
					l.run(1000) // warm up: every slot and buffer touched
					b.SetBytes(4096)
					b.ReportAllocs()
					b.ResetTimer()
					l.run(b.N)
				})
			}
		}
	}
	b.Run("baseline/memcpy-4KiB", func(b *testing.B) {
		src, dst := make([]byte, 4096), make([]byte, 4096)
		b.SetBytes(4096)
		for b.Loop() {
			copy(dst, src)
		}
	})
}

// TestDispatchAllocatesNothing checks R8 on the target side: in steady
// state 4 KiB reads and writes cost no allocation, over either provider,
// on a memory namespace (run on the queue's goroutine) and a file
// namespace (run on workers).
func TestDispatchAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for name, listen := range transports() {
		t.Run(name, func(t *testing.T) {
			tt := newTestTarget(t, listen())
			f, err := blockdev.OpenFile(filepath.Join(t.TempDir(), "ns.img"), 4<<20)
			require.NoError(t, err)
			_, err = tt.sub.AddNamespace(NamespaceConfig{NSID: 2, Device: f})
			require.NoError(t, err)
			admin := adminQueue(t, tt.url, testSubNQN, 0)
			io := ioQueue(t, tt.url, admin, 1, 64)
			for _, nsid := range []uint32{1, 2} {
				for _, op := range []nvmeof.Opcode{nvmeof.IORead, nvmeof.IOWrite} {
					l := newIOLoop(t, io, 8, op, nsid)
					l.run(2000)
					allocs := testing.AllocsPerRun(20, func() { l.run(100) })
					require.Zero(t, allocs, "allocations per 100 commands, opcode %v, namespace %d", op, nsid)
				}
			}
		})
	}
}
