package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

const serveHostNQN = "nqn.2014-08.org.nvmexpress:uuid:0c0ffee0-0000-4000-8000-000000000001"

// TestServe starts `target serve` and talks NVMe/RDMA to it from this
// process, over iwarp and shm: Connect, the enable handshake, Identify,
// a write and a read; then SIGTERM stops it cleanly.
func TestServe(t *testing.T) {
	shm := fmt.Sprintf("shm://serve-it-%d", os.Getpid())
	nqn := "nqn.2026-11.io.capsule:integration"
	d := startDaemon(t, "capsule target ready", "serve", "--listen", "iwarp://127.0.0.1:0", "--listen", shm,
		"--namespace", "mem:64MiB", "--namespace", "file:ns2.img:16MiB", "--data", t.TempDir(), "--nqn", nqn)
	listeners := strings.Split(field(d.ready, "listeners"), ",")
	require.Len(t, listeners, 2, d.ready)
	require.Regexp(t, `^iwarp://127\.0\.0\.1:[1-9][0-9]*$`, listeners[0], "the ready line names the real port")
	require.Equal(t, shm, listeners[1])
	require.Equal(t, nqn, field(d.ready, "nqn"))

	for _, url := range listeners {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			h := dialNVMe(t, url, 0, 0)
			cntlid := h.connect(t, 0, nqn)
			h.enable(t)
			var id nvmeof.IdentifyController
			require.NoError(t, id.UnmarshalBinary(h.identify(t, nvmeof.CNSController, 0)))
			assert.Equal(t, cntlid, id.CNTLID)
			assert.Equal(t, nqn, id.SUBNQN)
			assert.Equal(t, nvmeof.ControllerTypeIO, id.CNTRLTYPE)
			assert.Equal(t, "capsule", id.MN)
			assert.NotZero(t, id.KAS)
			assert.NotZero(t, id.SGLS&nvmeof.SGLSKeyedDataBlock)
			assert.GreaterOrEqual(t, id.IOCCSZ, uint32(4))
			var ids []uint32
			ids, err := nvmeof.AppendNamespaceList(ids, h.identify(t, nvmeof.CNSActiveNamespaceList, 0))
			require.NoError(t, err)
			assert.Equal(t, []uint32{1, 2}, ids)

			io := dialNVMe(t, url, 1, cntlid)
			io.connect(t, cntlid, nqn)
			for _, nsid := range []uint32{1, 2} {
				msg := fmt.Appendf(nil, "written over %s to namespace %d", url, nsid)
				copy(io.data.Bytes(), msg)
				require.NoError(t, io.rw(t, nvmeof.IOWrite, nsid, 100, 0).Status.Err())
				clear(io.data.Bytes()[4096:8192])
				require.NoError(t, io.rw(t, nvmeof.IORead, nsid, 100, 4096).Status.Err())
				assert.Equal(t, msg, io.data.Bytes()[4096:4096+len(msg)])
			}
		})
	}

	t.Run("discovery", func(t *testing.T) {
		h := dialNVMe(t, listeners[1], 0, 0)
		h.connect(t, 0, nvmeof.DiscoveryNQN)
		h.enable(t)
		hdr, err := nvmeof.ParseDiscoveryLogHeader(h.getLogPage(t, nvmeof.LogDiscovery, 1024))
		require.NoError(t, err)
		var log nvmeof.DiscoveryLog
		require.NoError(t, log.UnmarshalBinary(h.getLogPage(t, nvmeof.LogDiscovery, uint64(nvmeof.DiscoveryLogSize(int(hdr.NumRec))))))
		var nvm []string
		for _, e := range log.Entries {
			if e.SUBTYPE == nvmeof.SubsystemNVMe {
				assert.Equal(t, nqn, e.SUBNQN)
				nvm = append(nvm, e.TRADDR)
			}
		}
		assert.ElementsMatch(t, []string{"127.0.0.1", strings.TrimPrefix(shm, "shm://")}, nvm)
	})

	d.stop(t)
}

// TestServeDefaults runs plain `target`: serve with the embedded defaults.
// The defaults listen at fixed addresses, so the test needs them free.
func TestServeDefaults(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:4420")
	if err != nil {
		prereq.Missing(t, "127.0.0.1:4420 is in use here (%v); the default listeners need it", err)
	}
	ln.Close()
	probe, err := rdma.Listen(context.Background(), "shm://capsule")
	if err != nil {
		prereq.Missing(t, "shm://capsule is in use here (%v); the default listeners need it", err)
	}
	probe.Close()

	d := startDaemon(t, "capsule target ready")
	assert.Equal(t, "iwarp://127.0.0.1:4420,shm://capsule", field(d.ready, "listeners"))
	assert.Equal(t, "nqn.2026-11.io.capsule:default", field(d.ready, "nqn"))
	h := dialNVMe(t, "shm://capsule", 0, 0)
	h.connect(t, 0, "nqn.2026-11.io.capsule:default")
	h.enable(t)
	var ns nvmeof.IdentifyNamespace
	require.NoError(t, ns.UnmarshalBinary(h.identify(t, nvmeof.CNSNamespace, 1)))
	assert.Equal(t, uint64(1<<30/512), ns.NSZE, "one 1 GiB namespace of 512-byte blocks")
	d.stop(t)
}

// nvmeQueue is a minimal NVMe/RDMA initiator for one queue: enough to
// check the daemon from outside.
type nvmeQueue struct {
	qid     uint16
	pd      rdma.PD
	cq      rdma.CQ
	qp      rdma.QP
	data    rdma.MR // the region the target reads and writes
	msgs    rdma.MR // capsule at 0, response buffers after it
	nextCID uint16
}

func dialNVMe(t *testing.T, url string, qid, cntlid uint16) *nvmeQueue {
	pd, err := rdma.OpenPD(url)
	require.NoError(t, err)
	h := &nvmeQueue{qid: qid, pd: pd, nextCID: 1}
	t.Cleanup(func() {
		if h.qp != nil {
			h.qp.Close()
		}
		h.cq.Close()
		h.data.Deregister()
		h.msgs.Deregister()
		h.pd.Close()
	})
	h.cq, err = pd.CreateCQ(64)
	require.NoError(t, err)
	h.data, err = pd.Alloc(64<<10, rdma.AccessAll)
	require.NoError(t, err)
	h.msgs, err = pd.Alloc(64<<10, rdma.AccessLocalWrite)
	require.NoError(t, err)
	h.qp, err = pd.CreateQP(rdma.QPConfig{SendCQ: h.cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSGE: 1})
	require.NoError(t, err)
	for i := range 16 {
		require.NoError(t, h.qp.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: []rdma.SGE{rdma.SGEOf(h.msgs, 4096+64*i, 64)}}}))
	}
	req := nvmeof.RDMACMRequest{QID: qid, HRQSize: 16, HSQSize: 15, CNTLID: cntlid}
	priv, err := req.MarshalBinary()
	require.NoError(t, err)
	_, host, err := rdma.ParseURL(url)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reply, err := h.qp.Connect(ctx, host, priv)
	require.NoError(t, err)
	var acc nvmeof.RDMACMAccept
	require.NoError(t, acc.UnmarshalBinary(reply))
	assert.Equal(t, uint16(16), acc.CRQSize)
	return h
}

// do sends one command (one at a time) and returns its response.
func (h *nvmeQueue) do(t *testing.T, c nvmeof.Command) nvmeof.Completion {
	c.CID = h.nextCID
	h.nextCID++
	_, err := c.MarshalTo(h.msgs.Bytes())
	require.NoError(t, err)
	require.NoError(t, h.qp.PostSend([]rdma.SendWR{{Op: rdma.OpSend, SGL: []rdma.SGE{rdma.SGEOf(h.msgs, 0, nvmeof.CommandSize)}}}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wcs := make([]rdma.WC, 8)
	for {
		n, err := h.cq.Wait(ctx, wcs)
		require.NoError(t, err, "no response (QP %v)", h.qp.Err())
		for _, wc := range wcs[:n] {
			require.Equal(t, rdma.Success, wc.Status)
			if wc.Opcode != rdma.WCRecv {
				continue
			}
			require.Equal(t, uint32(nvmeof.CompletionSize), wc.ByteLen)
			off := 4096 + 64*int(wc.ID)
			var cqe nvmeof.Completion
			require.NoError(t, cqe.UnmarshalBinary(h.msgs.Bytes()[off:off+nvmeof.CompletionSize]))
			require.NoError(t, h.qp.PostRecv([]rdma.RecvWR{{ID: wc.ID, SGL: []rdma.SGE{rdma.SGEOf(h.msgs, off, 64)}}}))
			require.Equal(t, c.CID, cqe.CID)
			return cqe
		}
	}
}

func (h *nvmeQueue) keyed(t *testing.T, off, n int) nvmeof.SGLDescriptor {
	d, err := nvmeof.KeyedSGL{Address: h.data.Addr() + uint64(off), Length: uint32(n), Key: h.data.RKey()}.Descriptor()
	require.NoError(t, err)
	return d
}

// connect sends Connect with its data behind a Keyed SGL, as Linux does,
// and returns the controller ID.
func (h *nvmeQueue) connect(t *testing.T, cntlid uint16, nqn string) uint16 {
	if h.qid == 0 {
		cntlid = nvmeof.CNTLIDDynamic
	}
	d := nvmeof.ConnectData{HostID: [16]byte{0x0c}, CNTLID: cntlid, SubNQN: nqn, HostNQN: serveHostNQN}
	_, err := d.MarshalTo(h.data.Bytes())
	require.NoError(t, err)
	x := nvmeof.Connect{QID: h.qid, SQSize: 15, KATO: 30000, SGL: h.keyed(t, 0, nvmeof.ConnectDataSize)}
	cqe := h.do(t, x.Command())
	require.NoError(t, cqe.Status.Err())
	return nvmeof.ParseConnectResponse(cqe.DW0).CNTLID
}

func (h *nvmeQueue) enable(t *testing.T) {
	cc := nvmeof.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4)
	set := nvmeof.PropertySet{Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCC, Value: uint64(cc)}
	require.NoError(t, h.do(t, set.Command()).Status.Err())
	get := nvmeof.PropertyGet{Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCSTS}
	cqe := h.do(t, get.Command())
	require.NoError(t, cqe.Status.Err())
	require.True(t, nvmeof.CSTS(cqe.DW0).RDY())
}

func (h *nvmeQueue) identify(t *testing.T, cns nvmeof.CNS, nsid uint32) []byte {
	c := nvmeof.Command{Opcode: nvmeof.AdminIdentify, NSID: nsid, DPTR: h.keyed(t, 0, nvmeof.IdentifyDataSize)}
	c.SetIdentify(cns, 0)
	require.NoError(t, h.do(t, c).Status.Err())
	return append([]byte(nil), h.data.Bytes()[:nvmeof.IdentifyDataSize]...)
}

func (h *nvmeQueue) getLogPage(t *testing.T, lid nvmeof.LogPageID, n uint64) []byte {
	c := nvmeof.Command{Opcode: nvmeof.AdminGetLogPage, DPTR: h.keyed(t, 0, int(n))}
	require.NoError(t, c.SetGetLogPage(lid, 0, n))
	require.NoError(t, h.do(t, c).Status.Err())
	return append([]byte(nil), h.data.Bytes()[:n]...)
}

// rw reads or writes 4 KiB at LBA 8*block4k through the data region at off.
func (h *nvmeQueue) rw(t *testing.T, op nvmeof.Opcode, nsid uint32, slba uint64, off int) nvmeof.Completion {
	c := nvmeof.Command{Opcode: op, NSID: nsid, DPTR: h.keyed(t, off, 4096)}
	c.SetSLBA(slba)
	require.NoError(t, c.SetBlocks(8))
	return h.do(t, c)
}
