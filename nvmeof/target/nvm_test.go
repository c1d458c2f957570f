package target

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/rdma"
)

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// deviceBytes reads n bytes at off of a device directly. Only for devices
// whose memory the test does not share with the target (files): over shm
// the target's writes reach the test through shared memory mapped twice,
// an ordering the race detector cannot see, so memory devices are read
// back through the target with readBack.
func deviceBytes(t testing.TB, dev blockdev.Device, off int64, n int) []byte {
	b := make([]byte, n)
	_, err := dev.ReadAt(b, off)
	require.NoError(t, err)
	return b
}

// readBack reads n bytes at byte offset off of a 512-byte-block namespace
// with Read commands, through the upper half of the data region.
func (q *rawQueue) readBack(nsid uint32, off int64, n int) []byte {
	const stage, chunk = rawDataSize / 2, DefaultMaxTransfer
	out := make([]byte, 0, n)
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		r := q.do(q.readCmd(nsid, uint64(off+int64(done))/512, uint32(k/512), stage, k), nil)
		require.NoError(q.t, r.cqe.Status.Err())
		out = append(out, q.data.Bytes()[stage:stage+k]...)
	}
	return out
}

func TestReadWrite(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 32)

		// Sizes from one block to MDTS: in the capsule buffer and in large
		// buffers.
		for i, blocks := range []uint32{1, 8, 16, 17, 64, 256, 512, 2048} {
			n := int(blocks) * 512
			want := randomBytes(uint64(i), n)
			copy(io.data.Bytes(), want)
			slba := uint64(1000 * i)
			r := io.do(io.writeCmd(1, slba, blocks, 0, n), nil)
			require.NoError(t, r.cqe.Status.Err(), "write of %d blocks", blocks)
			assert.Equal(t, want, io.readBack(1, int64(slba*512), n))
			clear(io.data.Bytes()[:n])
			r = io.do(io.readCmd(1, slba, blocks, 4096, n), nil)
			require.NoError(t, r.cqe.Status.Err(), "read of %d blocks", blocks)
			assert.Equal(t, want, io.data.Bytes()[4096:4096+n])
		}

		// Force Unit Access.
		c := io.writeCmd(1, 5, 2, 0, 1024)
		c.SetFUA(true)
		require.NoError(t, io.do(c, nil).cqe.Status.Err())

		// In-capsule write data (8 KiB fits the capsule).
		want := randomBytes(99, 8192)
		c = io.writeCmd(1, 20000, 16, 0, 8192)
		c.DPTR = nvmeof.InCapsuleSGL{Length: 8192}.Descriptor()
		require.NoError(t, io.do(c, want).cqe.Status.Err())
		assert.Equal(t, want, io.readBack(1, 20000*512, 8192))
		// At an offset inside the in-capsule data.
		c = io.writeCmd(1, 20100, 1, 0, 512)
		c.DPTR = nvmeof.InCapsuleSGL{Offset: 100, Length: 512}.Descriptor()
		require.NoError(t, io.do(c, append(make([]byte, 100), want[:512]...)).cqe.Status.Err())
		assert.Equal(t, want[:512], io.readBack(1, 20100*512, 512))
	})
}

func TestLargeTransfersWaitForBuffers(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		// One large buffer per queue: eight concurrent 64 KiB writes and
		// reads take turns with it.
		tt := newTestTarget(t, listen(), WithLargeBuffersPerQueue(1))
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 32)
		const n = 64 << 10
		want := randomBytes(5, 8*n)
		copy(io.data.Bytes(), want)
		var cids []uint16
		for i := range 8 {
			c := io.writeCmd(1, uint64(i*n/512), n/512, i*n, n)
			io.submit(&c, nil)
			cids = append(cids, c.CID)
		}
		for _, cid := range cids {
			require.NoError(t, io.wait(cid).cqe.Status.Err())
		}
		assert.Equal(t, want, io.readBack(1, 0, 8*n))
		clear(io.data.Bytes())
		cids = cids[:0]
		for i := range 8 {
			c := io.readCmd(1, uint64(i*n/512), n/512, i*n, n)
			io.submit(&c, nil)
			cids = append(cids, c.CID)
		}
		for _, cid := range cids {
			require.NoError(t, io.wait(cid).cqe.Status.Err())
		}
		assert.Equal(t, want, io.data.Bytes()[:8*n])
	})
}

func TestSendWithInvalidate(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 16)
		require.NoError(t, io.do(io.writeCmd(1, 0, 8, 0, 4096), nil).cqe.Status.Err())

		for _, op := range []nvmeof.Opcode{nvmeof.IORead, nvmeof.IOWrite} {
			// A region of its own, since its key dies with the response.
			mr, err := io.pd.Alloc(4096, rdma.AccessAll)
			require.NoError(t, err)
			defer mr.Deregister()
			c := io.readCmd(1, 0, 8, 0, 4096)
			c.Opcode = op
			c.DPTR, err = nvmeof.KeyedSGL{Address: mr.Addr(), Length: 4096, Key: mr.RKey(), Invalidate: true}.Descriptor()
			require.NoError(t, err)
			r := io.do(c, nil)
			require.NoError(t, r.cqe.Status.Err())
			assert.NotZero(t, r.wc.Flags&rdma.WCWithInv, "%v: the response is a Send with Invalidate", op)
			assert.Equal(t, mr.RKey(), r.wc.InvRKey)
		}
		// A command that moves no data, with the key of a region: a plain Send.
		c := nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: 1}
		var err error
		c.DPTR, err = nvmeof.KeyedSGL{Address: io.data.Addr(), Key: io.data.RKey(), Invalidate: true}.Descriptor()
		require.NoError(t, err)
		r := io.do(c, nil)
		require.NoError(t, r.cqe.Status.Err())
		assert.Zero(t, r.wc.Flags&rdma.WCWithInv)
	})
}

func TestFlushWriteZeroesDeallocate(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 16)
		fill := func() []byte {
			want := randomBytes(3, 256<<10)
			copy(io.data.Bytes(), want)
			require.NoError(t, io.do(io.writeCmd(1, 0, 512, 0, 256<<10), nil).cqe.Status.Err())
			return want
		}

		for _, nsid := range []uint32{1, nvmeof.NSIDAll} {
			require.NoError(t, io.do(nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: nsid}, nil).cqe.Status.Err())
		}

		// Write Zeroes, then Write Zeroes with Deallocate.
		want := fill()
		for _, deac := range []bool{false, true} {
			c := nvmeof.Command{Opcode: nvmeof.IOWriteZeroes, NSID: 1}
			c.SetSLBA(10)
			require.NoError(t, c.SetBlocks(200))
			c.SetDEAC(deac)
			require.NoError(t, io.do(c, nil).cqe.Status.Err())
			copy(want[10*512:210*512], make([]byte, 200*512))
			assert.Equal(t, want, io.readBack(1, 0, 256<<10))
		}

		// Dataset Management: deallocate two ranges (data in the capsule);
		// with AD clear it changes nothing.
		want = fill()
		ranges := make([]byte, 2*nvmeof.DSMRangeSize)
		_, err := nvmeof.MarshalDSMRanges(ranges, []nvmeof.DSMRange{{Length: 128, SLBA: 0}, {Length: 8, SLBA: 300}})
		require.NoError(t, err)
		for _, ad := range []bool{false, true} {
			c := nvmeof.Command{Opcode: nvmeof.IODatasetManagement, NSID: 1}
			require.NoError(t, c.SetDSMRanges(2))
			if ad {
				c.CDW11 = uint32(nvmeof.DSMDeallocate)
			}
			c.DPTR = nvmeof.InCapsuleSGL{Length: uint32(len(ranges))}.Descriptor()
			require.NoError(t, io.do(c, ranges).cqe.Status.Err())
		}
		copy(want[:128*512], make([]byte, 128*512))
		copy(want[300*512:308*512], make([]byte, 8*512))
		assert.Equal(t, want, io.readBack(1, 0, 256<<10))
		// The ranges behind a Keyed SGL, longer than the ranges: allowed.
		copy(io.data.Bytes()[8192:], ranges)
		c := nvmeof.Command{Opcode: nvmeof.IODatasetManagement, NSID: 1, CDW11: uint32(nvmeof.DSMDeallocate)}
		require.NoError(t, c.SetDSMRanges(1))
		c.DPTR = io.keyed(8192, 4096, false)
		require.NoError(t, io.do(c, nil).cqe.Status.Err())
	})
}

func TestFileNamespaceOnWorkers(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen(), WithIOWorkersPerQueue(2))
		f, err := blockdev.OpenFile(filepath.Join(t.TempDir(), "ns.img"), 4<<20)
		require.NoError(t, err)
		_, err = tt.sub.AddNamespace(NamespaceConfig{NSID: 2, Device: f, BlockSize: 4096})
		require.NoError(t, err)
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 32)

		want := randomBytes(11, 1<<20)
		copy(io.data.Bytes(), want)
		var cids []uint16
		for i := range 16 { // 16 concurrent 64 KiB writes
			c := io.writeCmd(2, uint64(i*16), 16, i*65536, 65536)
			io.submit(&c, nil)
			cids = append(cids, c.CID)
		}
		for _, cid := range cids {
			require.NoError(t, io.wait(cid).cqe.Status.Err())
		}
		require.NoError(t, io.do(nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: 2}, nil).cqe.Status.Err())
		assert.True(t, bytes.Equal(want, deviceBytes(t, f, 0, 1<<20)))
		clear(io.data.Bytes())
		require.NoError(t, io.do(io.readCmd(2, 0, 32, 0, 128<<10), nil).cqe.Status.Err())
		assert.Equal(t, want[:128<<10], io.data.Bytes()[:128<<10])

		// Close syncs and closes the file.
		require.NoError(t, tt.Close())
		_, err = f.ReadAt(make([]byte, 1), 0)
		assert.ErrorIs(t, err, blockdev.ErrClosed)
	})
}
