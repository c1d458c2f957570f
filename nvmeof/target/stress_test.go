package target

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/rdma"
)

// lane is the part of a namespace one command slot of one queue owns in
// the stress test, so that commands in flight never overlap, with the
// shadow copy of what it must hold.
type lane struct {
	first  uint64 // first block
	shadow []byte
}

const (
	stressQueues = 4
	stressDepth  = 16
	laneBlocks   = 256 // 128 KiB lanes of 512-byte blocks
	stressOps    = 400 // per queue
)

// TestStressRandomIO runs random reads, writes, write-zeroes and
// deallocates at queue depth 16 on 4 I/O queues at once, against a memory
// namespace (run on the queue goroutines) and a file namespace (run on
// workers), and checks every read and the final contents against a
// shadow copy.
func TestStressRandomIO(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		f, err := blockdev.OpenFile(filepath.Join(t.TempDir(), "stress.img"), 16<<20)
		require.NoError(t, err)
		_, err = tt.sub.AddNamespace(NamespaceConfig{NSID: 2, Device: f})
		require.NoError(t, err)
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		for _, nsid := range []uint32{1, 2} {
			t.Run(fmt.Sprintf("nsid%d", nsid), func(t *testing.T) {
				var queues []*rawQueue
				for qid := uint16(1); qid <= stressQueues; qid++ {
					queues = append(queues, ioQueue(t, tt.url, admin, qid, 2*stressDepth))
				}
				t.Run("queues", func(t *testing.T) {
					for i, q := range queues {
						t.Run(fmt.Sprint(i+1), func(t *testing.T) {
							t.Parallel()
							q.t = t
							stressQueue(t, q, nsid, uint64(i*stressDepth*laneBlocks), uint64(i))
						})
					}
				})
				for _, q := range queues {
					q.close()
				}
				// The target sees the connections end on its own time;
				// the next subtest reuses the QIDs.
				require.Eventually(t, func() bool { return ioQueueCount(tt, admin.cntlid) == 0 }, rawTimeout, time.Millisecond)
			})
		}
	})
}

// stressQueue drives one queue: stressDepth slots, each in its own lane.
func stressQueue(t *testing.T, q *rawQueue, nsid uint32, firstBlock, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	lanes := make([]lane, stressDepth)
	for i := range lanes {
		lanes[i] = lane{first: firstBlock + uint64(i*laneBlocks), shadow: make([]byte, laneBlocks*512)}
		// Start from zeros, whatever an earlier run left.
		c := nvmeof.Command{Opcode: nvmeof.IOWriteZeroes, NSID: nsid, CID: uint16(i)}
		c.SetSLBA(lanes[i].first)
		require.NoError(t, c.SetBlocks(laneBlocks))
		q.submit(&c, nil)
		require.NoError(t, q.wait(uint16(i)).cqe.Status.Err())
	}
	type op struct {
		kind      int // 0 read, 1 write, 2 write zeroes, 3 deallocate
		slba, nlb uint64
	}
	pending := make([]op, stressDepth)
	gen := make([]uint16, stressDepth)
	issue := func(i int) {
		l := &lanes[i]
		nlb := uint64(1 + rng.IntN(64))
		off := uint64(rng.IntN(laneBlocks - int(nlb) + 1))
		o := op{kind: rng.IntN(4), slba: l.first + off, nlb: nlb}
		if o.kind >= 2 && rng.IntN(2) == 0 {
			o.kind = 1 // writes are the most useful
		}
		pending[i] = o
		gen[i]++
		cid := uint16(i) | gen[i]<<6 // CID%64 picks the capsule buffer
		n := int(nlb) * 512
		buf := i * 65536 // the slot's part of the data region
		var c nvmeof.Command
		switch o.kind {
		case 0:
			c = q.readCmd(nsid, o.slba, uint32(nlb), buf, n)
		case 1:
			copy(q.data.Bytes()[buf:buf+n], randomBytes(uint64(cid)<<8|seed, n))
			copy(l.shadow[off*512:], q.data.Bytes()[buf:buf+n])
			c = q.writeCmd(nsid, o.slba, uint32(nlb), buf, n)
		default:
			clear(l.shadow[off*512 : off*512+uint64(n)])
			if o.kind == 2 {
				c = nvmeof.Command{Opcode: nvmeof.IOWriteZeroes, NSID: nsid}
				c.SetSLBA(o.slba)
				require.NoError(t, c.SetBlocks(uint32(nlb)))
			} else {
				c = nvmeof.Command{Opcode: nvmeof.IODatasetManagement, NSID: nsid, CDW11: uint32(nvmeof.DSMDeallocate)}
				require.NoError(t, c.SetDSMRanges(1))
				r := make([]byte, 16)
				_, err := nvmeof.MarshalDSMRanges(r, []nvmeof.DSMRange{{Length: uint32(nlb), SLBA: o.slba}})
				require.NoError(t, err)
				copy(q.data.Bytes()[buf:], r)
				c.DPTR = q.keyed(buf, 16, false)
			}
		}
		c.CID = cid
		q.submit(&c, nil)
	}
	for i := range stressDepth {
		issue(i)
	}
	for done := 0; done < stressOps; done++ {
		r := q.next()
		require.NoError(t, r.cqe.Status.Err())
		i := int(r.cqe.CID & 63)
		if o := pending[i]; o.kind == 0 {
			l := &lanes[i]
			n := int(o.nlb) * 512
			off := (o.slba - l.first) * 512
			if !bytes.Equal(l.shadow[off:off+uint64(n)], q.data.Bytes()[i*65536:i*65536+n]) {
				t.Fatalf("nsid %d lane %d: read of %d blocks at %d differs from the shadow", nsid, i, o.nlb, o.slba)
			}
		}
		if done+stressDepth < stressOps {
			issue(i)
		}
	}
	for i := range lanes {
		assert.Equal(t, lanes[i].shadow, q.readBack(nsid, int64(lanes[i].first*512), laneBlocks*512), "lane %d", i)
	}
}

// next returns the next response to arrive, whatever its CID.
func (q *rawQueue) next() rawResponse {
	for {
		for cid, r := range q.got {
			delete(q.got, cid)
			return r
		}
		ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
		n, err := q.cq.Wait(ctx, q.wcs)
		cancel()
		require.NoError(q.t, err, "no response (QP %v, err %v)", q.qp.State(), q.qp.Err())
		for _, wc := range q.wcs[:n] {
			require.Equal(q.t, rdma.Success, wc.Status, "completion %v", wc.Opcode)
			if wc.Opcode == rdma.WCRecv {
				q.take(wc)
			}
		}
	}
}
