package target

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/rdma"
)

// badInputFixture is a target whose namespace holds a known pattern in
// its first 256 KiB, with an admin and an I/O queue connected.
type badInputFixture struct {
	tt    *testTarget
	admin *rawQueue
	io    *rawQueue
	want  []byte
}

const patternBytes = 256 << 10

func newBadInputFixture(t *testing.T, listen string, opts ...Option) *badInputFixture {
	tt := newTestTarget(t, listen, opts...)
	admin := adminQueue(t, tt.url, testSubNQN, 0)
	io := ioQueue(t, tt.url, admin, 1, 16)
	want := randomBytes(42, patternBytes)
	copy(io.data.Bytes(), want)
	require.NoError(t, io.do(io.writeCmd(1, 0, patternBytes/512, 0, patternBytes), nil).cqe.Status.Err())
	return &badInputFixture{tt: tt, admin: admin, io: io, want: want}
}

// refused checks the status of a refused command, that the queue still
// works (a good command on it succeeds) and that the stored data did not
// change.
func (f *badInputFixture) refused(t *testing.T, q *rawQueue, want nvmeof.Status, r rawResponse) {
	t.Helper()
	requireStatus(t, want, r)
	require.NoError(t, q.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive}, nil).cqe.Status.Err(), "the connection survives")
	assert.Equal(t, f.want, f.io.readBack(1, 0, patternBytes), "stored data untouched")
}

// refusedIO is refused for commands on the I/O queue, checked with a Flush.
func (f *badInputFixture) refusedIO(t *testing.T, want nvmeof.Status, r rawResponse) {
	t.Helper()
	requireStatus(t, want, r)
	require.NoError(t, f.io.do(nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: 1}, nil).cqe.Status.Err(), "the connection survives")
	assert.Equal(t, f.want, f.io.readBack(1, 0, patternBytes), "stored data untouched")
}

// TestBadInput sends every kind of bad command the issue lists and checks
// each gets its NVMe status, the connection survives, and the data is
// untouched. The fatal cases (a bad rkey, a runt capsule) are in
// TestBadInputFatal; the refusals of Connect in TestConnectRefusals and
// TestConnectIOQueue.
func TestBadInput(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		f := newBadInputFixture(t, listen())
		io, admin := f.io, f.admin
		blocks := f.tt.ns.Blocks()

		t.Run("invalid opcode", func(t *testing.T) {
			for _, op := range []nvmeof.Opcode{0x05, 0x7e, 0x80, 0xff} {
				c := io.writeCmd(1, 0, 1, 0, 512)
				c.Opcode = op
				f.refusedIO(t, nvmeof.StatusInvalidOpcode.WithDNR(), io.do(c, nil))
			}
			for _, op := range []nvmeof.Opcode{0x01, 0x04, 0x10, 0xff} { // SQ/CQ management has no place on fabrics
				f.refused(t, admin, nvmeof.StatusInvalidOpcode.WithDNR(), admin.do(nvmeof.Command{Opcode: op}, nil))
			}
			// An unknown Fabrics command type, and Property Get on an I/O queue.
			c := nvmeof.Command{}
			c.SetFabricsType(0x7c)
			f.refused(t, admin, nvmeof.StatusInvalidOpcode.WithDNR(), admin.do(c, nil))
			pg := nvmeof.PropertyGet{Size: nvmeof.PropertySize8, Offset: nvmeof.PropertyCAP}
			f.refusedIO(t, nvmeof.StatusInvalidOpcode.WithDNR(), io.do(pg.Command(), nil))
		})

		t.Run("invalid field", func(t *testing.T) {
			f.refused(t, admin, nvmeof.StatusInvalidField.WithDNR(), admin.do(admin.identifyCmd(0x55, 0), nil))
			c := nvmeof.Command{Opcode: nvmeof.AdminGetFeatures}
			c.CDW10 = 0x7e
			f.refused(t, admin, nvmeof.StatusInvalidField.WithDNR(), admin.do(c, nil))
			// In-capsule data for a Read, which moves data the other way.
			c = io.readCmd(1, 0, 1, 0, 512)
			c.DPTR = nvmeof.InCapsuleSGL{Length: 512}.Descriptor()
			f.refusedIO(t, nvmeof.StatusInvalidField.WithDNR(), io.do(c, make([]byte, 512)))
		})

		t.Run("unknown NSID", func(t *testing.T) {
			for _, nsid := range []uint32{0, 2, 9, nvmeof.NSIDAll} {
				f.refusedIO(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), io.do(io.writeCmd(nsid, 0, 1, 0, 512), nil))
				f.refusedIO(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), io.do(io.readCmd(nsid, 0, 1, 0, 512), nil))
			}
			f.refusedIO(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), io.do(nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: 3}, nil))
		})

		t.Run("LBA out of range", func(t *testing.T) {
			f.refusedIO(t, nvmeof.StatusLBAOutOfRange.WithDNR(), io.do(io.writeCmd(1, blocks-1, 2, 0, 1024), nil))
			f.refusedIO(t, nvmeof.StatusLBAOutOfRange.WithDNR(), io.do(io.readCmd(1, blocks, 1, 0, 512), nil))
			f.refusedIO(t, nvmeof.StatusLBAOutOfRange.WithDNR(), io.do(io.writeCmd(1, 1<<63, 1, 0, 512), nil))
			wz := nvmeof.Command{Opcode: nvmeof.IOWriteZeroes, NSID: 1}
			wz.SetSLBA(blocks - 10)
			require.NoError(t, wz.SetBlocks(11))
			f.refusedIO(t, nvmeof.StatusLBAOutOfRange.WithDNR(), io.do(wz, nil))
			// A Dataset Management with one good and one bad range
			// deallocates neither.
			ranges := make([]byte, 32)
			_, err := nvmeof.MarshalDSMRanges(ranges, []nvmeof.DSMRange{{Length: 8, SLBA: 0}, {Length: 8, SLBA: blocks - 4}})
			require.NoError(t, err)
			dsm := nvmeof.Command{Opcode: nvmeof.IODatasetManagement, NSID: 1, CDW11: uint32(nvmeof.DSMDeallocate)}
			require.NoError(t, dsm.SetDSMRanges(2))
			dsm.DPTR = nvmeof.InCapsuleSGL{Length: 32}.Descriptor()
			f.refusedIO(t, nvmeof.StatusLBAOutOfRange.WithDNR(), io.do(dsm, ranges))
		})

		t.Run("SGL length does not match NLB", func(t *testing.T) {
			f.refusedIO(t, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), io.do(io.writeCmd(1, 0, 1, 0, 1024), nil))
			f.refusedIO(t, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), io.do(io.writeCmd(1, 0, 2, 0, 512), nil))
			f.refusedIO(t, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), io.do(io.readCmd(1, 0, 1, 0, 256), nil))
			c := io.writeCmd(1, 0, 2, 0, 1024)
			c.DPTR = nvmeof.InCapsuleSGL{Length: 512}.Descriptor()
			f.refusedIO(t, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), io.do(c, make([]byte, 512)))
			c.DPTR = nvmeof.SGLDescriptor{} // the NULL descriptor: no data at all
			f.refusedIO(t, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), io.do(c, nil))
		})

		t.Run("transfer over MDTS", func(t *testing.T) {
			n := DefaultRDMAMaxTransfer/512 + 1
			f.refusedIO(t, nvmeof.StatusInvalidField.WithDNR(), io.do(io.readCmd(1, 0, uint32(n), 0, n*512), nil))
			f.refusedIO(t, nvmeof.StatusInvalidField.WithDNR(), io.do(io.writeCmd(1, 0, uint32(n), 0, n*512), nil))
		})

		t.Run("unsupported SGL type", func(t *testing.T) {
			for _, id := range []byte{
				0x00, // Data Block with a memory address
				0x10, // Bit Bucket
				0x20, // Segment
				0x30, // Last Segment with an address
				0x31, // Last Segment in the capsule, but MSDBD is 1
				0x41, // Keyed Data Block with a reserved subtype
				0x5a, // Transport Data Block: NVMe/TCP's
				0xf0, // vendor specific
			} {
				c := io.writeCmd(1, 0, 1, 0, 512)
				c.DPTR[nvmeof.SGLOffsetIdentifier] = id
				c.DPTR[nvmeof.SGLOffsetLength] = 16
				f.refusedIO(t, nvmeof.StatusSGLDescriptorTypeInvalid.WithDNR(), io.do(c, make([]byte, 512)))
			}
			// In-capsule data past the capsule.
			c := io.writeCmd(1, 0, 1, 0, 512)
			c.DPTR = nvmeof.InCapsuleSGL{Offset: 600, Length: 512}.Descriptor()
			f.refusedIO(t, nvmeof.StatusSGLOffsetInvalid.WithDNR(), io.do(c, make([]byte, 512)))
			c.DPTR = nvmeof.InCapsuleSGL{Offset: 256, Length: 512}.Descriptor()
			f.refusedIO(t, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), io.do(c, make([]byte, 512)))
		})

		t.Run("a held AER's CID reused", func(t *testing.T) {
			// A host that stopped waiting for an AER and reuses its CID
			// (SPDK's does, for its shutdown) gets the new command run,
			// as SPDK's nvmf_tgt runs it; the AER is never answered.
			aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: 0x7777}
			admin.submit(&aer, nil)
			require.NoError(t, admin.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive, CID: 0x7777}, nil).cqe.Status.Err())
			// A namespace change now completes the next AER, not the
			// abandoned one.
			require.NoError(t, admin.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECNamespaceAttribute)).cqe.Status.Err())
			aer.CID = 0x7778
			admin.submit(&aer, nil)
			dev, _ := blockdev.NewMemory(1 << 20)
			_, err := f.tt.sub.AddNamespace(NamespaceConfig{NSID: 5, Device: dev})
			require.NoError(t, err)
			r := admin.wait(0x7778)
			require.NoError(t, r.cqe.Status.Err())
			assert.Equal(t, nvmeof.AsyncEventNotice, nvmeof.ParseAsyncEvent(r.cqe.DW0).Type)
			_, late := admin.poll(0x7777, 100*time.Millisecond)
			assert.False(t, late, "the abandoned AER got a completion")
			admin.getLogPage(nvmeof.LogChangedNamespaceList, 0, 0, 4096)
		})
	})
}

func TestBadInputBeforeEnable(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		admin, err := dialRaw(t, tt.url, rawDialConfig{hsqsize: 31, hrqsize: 32})
		require.NoError(t, err)
		r := admin.connect(31, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), false)
		require.NoError(t, r.cqe.Status.Err())
		admin.cntlid = uint16(r.cqe.DW0)
		// An I/O queue may be connected before CC.EN=1, but I/O on it, and
		// admin commands other than Fabrics ones, are out of sequence.
		io := ioQueue(t, tt.url, admin, 1, 16)
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), io.do(io.readCmd(1, 0, 1, 0, 512), nil))
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), io.do(io.writeCmd(1, 0, 1, 0, 512), nil))
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), admin.do(admin.identifyCmd(nvmeof.CNSController, 0), nil))
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), admin.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive}, nil))
		// Both connections survive: after the enable, the same queues work.
		admin.enable()
		require.NoError(t, io.do(io.readCmd(1, 0, 1, 0, 512), nil).cqe.Status.Err())
		require.NoError(t, admin.do(admin.identifyCmd(nvmeof.CNSController, 0), nil).cqe.Status.Err())
	})
}

func TestBadInputTooManyOutstanding(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		// An admin queue of SQSIZE 3 (4 entries, so 3 commands fill it);
		// the host posts more receives than that so that it can take the
		// refusal.
		q, err := dialRaw(t, tt.url, rawDialConfig{hsqsize: 3, hrqsize: 4, nrecv: 16})
		require.NoError(t, err)
		r := q.connect(3, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), false)
		require.NoError(t, r.cqe.Status.Err())
		q.enable()
		require.NoError(t, q.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECNamespaceAttribute)).cqe.Status.Err())
		// Three AERs stay outstanding: the queue is full.
		var cids []uint16
		for range 3 {
			c := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: q.cid()}
			q.submit(&c, nil)
			cids = append(cids, c.CID)
		}
		_, answered := q.poll(cids[0], 50*time.Millisecond)
		require.False(t, answered)
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), q.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive}, nil))
		// An event completes one AER; there is room again.
		dev, _ := blockdev.NewMemory(1 << 20)
		_, err = tt.sub.AddNamespace(NamespaceConfig{NSID: 2, Device: dev})
		require.NoError(t, err)
		require.NoError(t, q.wait(cids[0]).cqe.Status.Err())
		require.NoError(t, q.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive}, nil).cqe.Status.Err())
	})
}

// TestBadInputFatal covers what the binding makes fatal to the
// connection: a key the host's own RDMA device refuses, and a capsule too
// short to hold a command. The queue ends, with a warning that says why,
// the host reconnects, and the stored data is unchanged.
func TestBadInputFatal(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		rec := &logRecorder{next: slog.NewTextHandler(io.Discard, nil)}
		f := newBadInputFixture(t, listen(), WithLogger(slog.New(rec)))
		tt, admin := f.tt, f.admin
		reconnect := func() *rawQueue {
			require.Eventually(t, func() bool { return ioQueueCount(tt, admin.cntlid) == 0 }, rawTimeout, time.Millisecond)
			f.io = ioQueue(t, tt.url, admin, 1, 16)
			return f.io
		}
		// logged checks that the queue's end was logged with its reason
		// at Info or above, since n records.
		logged := func(t *testing.T, n int) {
			require.Eventually(t, func() bool { return len(rec.since(n)) > 0 }, rawTimeout, time.Millisecond,
				"the queue ended with nothing in the log; last records:\n%s", strings.Join(rec.last(8), "\n"))
		}

		t.Run("bad rkey on a write", func(t *testing.T) {
			io, n := f.io, rec.count()
			copy(io.data.Bytes(), randomBytes(1, 4096))
			c := io.writeCmd(1, 0, 8, 0, 4096)
			c.DPTR, _ = nvmeof.KeyedSGL{Address: io.data.Addr(), Length: 4096, Key: io.data.RKey() ^ 0x5a5a00}.Descriptor()
			io.submit(&c, nil)
			_, answered := io.poll(c.CID, rawTimeout)
			assert.False(t, answered)
			<-io.qp.Done()
			assert.ErrorIs(t, io.qp.Err(), rdma.RemAccessErr)
			logged(t, n)
			io = reconnect()
			assert.Equal(t, f.want, io.readBack(1, 0, patternBytes), "stored data untouched")
			require.NoError(t, admin.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive}, nil).cqe.Status.Err(), "the admin queue is unaffected")
		})

		t.Run("bad rkey on a read", func(t *testing.T) {
			io, n := f.io, rec.count()
			c := io.readCmd(1, 0, 8, 0, 4096)
			c.DPTR, _ = nvmeof.KeyedSGL{Address: io.data.Addr(), Length: 4096, Key: io.data.RKey() + 0x100}.Descriptor()
			io.submit(&c, nil)
			<-io.qp.Done()
			assert.ErrorIs(t, io.qp.Err(), rdma.RemAccessErr)
			logged(t, n)
			io = reconnect()
			assert.Equal(t, f.want, io.readBack(1, 0, patternBytes))
		})

		t.Run("capsule shorter than an SQE", func(t *testing.T) {
			io, n := f.io, rec.count()
			io.sendSGE[0] = rdma.SGEOf(io.cmds, 0, 40)
			io.sendWR[0] = rdma.SendWR{Op: rdma.OpSend, SGL: io.sendSGE[:]}
			require.NoError(t, io.qp.PostSend(io.sendWR[:]))
			<-io.qp.Done()
			logged(t, n)
			io = reconnect()
			assert.Equal(t, f.want, io.readBack(1, 0, patternBytes))
		})
	})
}
