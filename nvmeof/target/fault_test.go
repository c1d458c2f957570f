package target

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/fault"
)

// TestConnectionCutMidIO cuts every connection of a host while writes are
// in flight, on a memory and a file namespace, through the fault wrapper:
// the target tears the controller and its queues down (workers included),
// and the host reconnects and finds every write that was answered.
func TestConnectionCutMidIO(t *testing.T) {
	for name, listen := range map[string]string{"iwarp": "fault+iwarp://127.0.0.1:0", "shm": "fault+" + transports()["shm"]()} {
		t.Run(name, func(t *testing.T) {
			tt := newTestTarget(t, listen, WithIOWorkersPerQueue(2))
			f, err := blockdev.OpenFile(filepath.Join(t.TempDir(), "ns.img"), 8<<20)
			require.NoError(t, err)
			_, err = tt.sub.AddNamespace(NamespaceConfig{NSID: 2, Device: f})
			require.NoError(t, err)
			inj := fault.For(tt.url)
			t.Cleanup(inj.Reset)

			admin := adminQueue(t, tt.url, testSubNQN, 0)
			io := ioQueue(t, tt.url, admin, 1, 32)
			// Cut the connections when the target posts its fifth response.
			inj.CutOn(fault.Match{Ops: []rdma.Opcode{rdma.OpSend}, Side: fault.Acceptor, After: 4, Times: 1})
			want := map[uint32][]byte{1: randomBytes(1, 1<<20), 2: randomBytes(2, 1<<20)}
			var cids []uint16
			nsOf := map[uint16]uint32{}
			for i := range 16 {
				nsid := uint32(1 + i%2)
				copy(io.data.Bytes()[i*65536:], want[nsid][i*65536:(i+1)*65536])
				c := io.writeCmd(nsid, uint64(i*128), 128, i*65536, 65536)
				io.submit(&c, nil)
				cids = append(cids, c.CID)
				nsOf[c.CID] = nsid
			}
			answered := map[int]uint32{}
			for i, cid := range cids {
				if r, ok := io.poll(cid, rawTimeout); ok && r.cqe.Status.Success() {
					answered[i] = nsOf[cid]
				}
			}
			<-io.qp.Done()
			assert.Equal(t, 1, inj.Count(fault.Cut))
			assert.Less(t, len(answered), 16, "the cut came before every write was answered")
			// The I/O queue is gone; the admin queue too once its own
			// connection is cut, and with it the controller.
			inj.Cut()
			<-admin.qp.Done()
			require.Eventually(t, func() bool { return tt.Controllers() == 0 && tt.queueCount() == 0 }, rawTimeout, time.Millisecond)

			// Reconnect: every answered write is there.
			inj.Reset()
			admin = adminQueue(t, tt.url, testSubNQN, 0)
			io = ioQueue(t, tt.url, admin, 1, 32)
			for i, nsid := range answered {
				clear(io.data.Bytes()[:65536])
				require.NoError(t, io.do(io.readCmd(nsid, uint64(i*128), 128, 0, 65536), nil).cqe.Status.Err())
				assert.Equal(t, want[nsid][i*65536:(i+1)*65536], io.data.Bytes()[:65536], "write %d", i)
			}
			require.NoError(t, io.do(nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: nvmeof.NSIDAll}, nil).cqe.Status.Err())
		})
	}
}
