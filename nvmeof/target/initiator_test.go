package target

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/rdma"
	_ "github.com/capsule-storage/capsule/rdma/fault"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

// This file is a minimal NVMe/RDMA initiator for the target's tests: it
// speaks the binding directly (RDMA_CM private data, command capsules by
// Send, responses by Receive, data through a registered region the target
// reads and writes with the keys the capsules carry) so that every byte
// the target sends can be checked.

const (
	testSubNQN  = "nqn.2026-11.io.capsule:test"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	otherHost   = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555"
	rawDataSize = 2 << 20 // the initiator's data region
	rawRecvSize = 64      // receive buffers, larger than a response so a wrong size shows
	rawTimeout  = 20 * time.Second
)

// transports lists the listener URLs every transport test runs on.
var shmSeq atomic.Int64

func transports() map[string]func() string {
	return map[string]func() string{
		"iwarp": func() string { return "iwarp://127.0.0.1:0" },
		"shm":   func() string { return fmt.Sprintf("shm://target-test-%d-%d", os.Getpid(), shmSeq.Add(1)) },
	}
}

// forEachTransport runs f once per transport.
func forEachTransport(t *testing.T, f func(t *testing.T, listen func() string)) {
	for name, listen := range transports() {
		t.Run(name, func(t *testing.T) { f(t, listen) })
	}
}

// testTarget is a target with one subsystem and a 16 MiB memory namespace
// (NSID 1, 512-byte blocks), listening on one URL.
type testTarget struct {
	*Target
	sub *Subsystem
	ns  *Namespace
	mem *blockdev.Memory
	url string
}

// testLogger sends the target's warnings and errors to the test log
// (until the test ends), and drops the rest unless -v asks for them.
func testLogger(t testing.TB) *slog.Logger {
	w := &testLogWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	level := slog.LevelWarn
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testLogWriter struct {
	t    testing.TB
	mu   sync.Mutex // guards done
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func newTestTarget(t testing.TB, listen string, opts ...Option) *testTarget {
	t.Helper()
	tg, err := New(append([]Option{WithLogger(testLogger(t))}, opts...)...)
	require.NoError(t, err)
	sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, Hosts: []string{testHostNQN}})
	require.NoError(t, err)
	mem, err := blockdev.NewMemory(16 << 20)
	require.NoError(t, err)
	ns, err := sub.AddNamespace(NamespaceConfig{NSID: 1, Device: mem, BlockSize: 512})
	require.NoError(t, err)
	url, err := tg.Listen(context.Background(), listen)
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	return &testTarget{Target: tg, sub: sub, ns: ns, mem: mem, url: url}
}

// rawQueue is one NVMe queue of the raw initiator.
type rawQueue struct {
	t       testing.TB
	pd      rdma.PD
	cq      rdma.CQ
	qp      rdma.QP
	data    rdma.MR // the region the target reads and writes
	cmds    rdma.MR // one capsule buffer per CID slot
	rsps    rdma.MR // receive buffers
	nrecv   int
	capSize int
	accept  nvmeof.RDMACMAccept
	qid     uint16
	cntlid  uint16
	nextCID uint16
	wcs     []rdma.WC
	sendWR  [1]rdma.SendWR
	sendSGE [1]rdma.SGE
	recvWR  [1]rdma.RecvWR
	recvSGE [1]rdma.SGE
	// responses that arrived while waiting for another CID
	got    map[uint16]rawResponse
	closed bool
}

// rawResponse is a response capsule as it arrived.
type rawResponse struct {
	cqe nvmeof.Completion
	raw [nvmeof.CompletionSize]byte
	wc  rdma.WC
}

// rawDialConfig describes the connection request.
type rawDialConfig struct {
	qid     uint16
	hsqsize uint16 // 0's based
	hrqsize uint16
	cntlid  uint16
	nrecv   int // receives the initiator posts; default hrqsize
}

// dialRaw connects one queue. A refused connection returns the error.
func dialRaw(tb testing.TB, url string, cfg rawDialConfig) (*rawQueue, error) {
	if cfg.nrecv == 0 {
		cfg.nrecv = int(cfg.hrqsize)
	}
	pd, err := rdma.OpenPD(url)
	require.NoError(tb, err)
	q := &rawQueue{t: tb, pd: pd, qid: cfg.qid, nrecv: cfg.nrecv, capSize: nvmeof.CommandSize + 16<<10,
		wcs: make([]rdma.WC, 64), got: map[uint16]rawResponse{}, nextCID: 1}
	tb.Cleanup(q.close)
	q.cq, err = pd.CreateCQ(4*cfg.nrecv + 64)
	require.NoError(tb, err)
	q.data, err = pd.Alloc(rawDataSize, rdma.AccessAll)
	require.NoError(tb, err)
	q.cmds, err = pd.Alloc(64*q.capSize, rdma.AccessLocalWrite)
	require.NoError(tb, err)
	q.rsps, err = pd.Alloc(cfg.nrecv*rawRecvSize, rdma.AccessLocalWrite)
	require.NoError(tb, err)
	q.qp, err = pd.CreateQP(rdma.QPConfig{SendCQ: q.cq, MaxSendWR: 128, MaxRecvWR: cfg.nrecv, MaxSGE: 1})
	require.NoError(tb, err)
	for i := range cfg.nrecv {
		q.postRecv(i)
	}
	req := nvmeof.RDMACMRequest{QID: cfg.qid, HRQSize: cfg.hrqsize, HSQSize: cfg.hsqsize, CNTLID: cfg.cntlid}
	priv, err := req.MarshalBinary()
	require.NoError(tb, err)
	_, host, err := rdma.ParseURL(url)
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
	defer cancel()
	reply, err := q.qp.Connect(ctx, host, priv)
	if err != nil {
		return nil, err
	}
	require.NoError(tb, q.accept.UnmarshalBinary(reply))
	return q, nil
}

func (q *rawQueue) close() {
	if q.closed {
		return
	}
	q.closed = true
	if q.qp != nil {
		q.qp.Close()
	}
	if q.cq != nil {
		q.cq.Close()
	}
	for _, mr := range []rdma.MR{q.data, q.cmds, q.rsps} {
		if mr != nil {
			mr.Deregister()
		}
	}
	q.pd.Close()
}

func (q *rawQueue) postRecv(i int) {
	q.recvSGE[0] = rdma.SGEOf(q.rsps, i*rawRecvSize, rawRecvSize)
	q.recvWR[0] = rdma.RecvWR{ID: uint64(i), SGL: q.recvSGE[:]}
	require.NoError(q.t, q.qp.PostRecv(q.recvWR[:]))
}

// keyed returns a Keyed SGL for n bytes at off of the data region.
func (q *rawQueue) keyed(off, n int, invalidate bool) nvmeof.SGLDescriptor {
	d, err := nvmeof.KeyedSGL{Address: q.data.Addr() + uint64(off), Length: uint32(n), Key: q.data.RKey(),
		Invalidate: invalidate}.Descriptor()
	require.NoError(q.t, err)
	return d
}

// cid returns a fresh command identifier.
func (q *rawQueue) cid() uint16 {
	c := q.nextCID
	q.nextCID++
	if q.nextCID == 0 {
		q.nextCID = 1
	}
	return c
}

// submit sends a command capsule: the SQE followed by inCapsule bytes.
// The capsule buffer is chosen by CID, so up to 64 commands may be in
// flight with distinct low CID bits.
func (q *rawQueue) submit(c *nvmeof.Command, inCapsule []byte) {
	slot := int(c.CID % 64)
	buf := q.cmds.Bytes()[slot*q.capSize:]
	_, err := c.MarshalTo(buf)
	require.NoError(q.t, err)
	copy(buf[nvmeof.CommandSize:], inCapsule)
	q.sendSGE[0] = rdma.SGEOf(q.cmds, slot*q.capSize, nvmeof.CommandSize+len(inCapsule))
	q.sendWR[0] = rdma.SendWR{ID: 1 << 32, Op: rdma.OpSend, SGL: q.sendSGE[:]}
	require.NoError(q.t, q.qp.PostSend(q.sendWR[:]))
}

// poll moves completions into q.got until cid has its response, or the
// QP fails, or the timeout passes. It returns false if there is none.
func (q *rawQueue) poll(cid uint16, timeout time.Duration) (rawResponse, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if r, ok := q.got[cid]; ok {
			delete(q.got, cid)
			return r, true
		}
		if q.qp.State() == rdma.StateError {
			if q.drained() {
				return rawResponse{}, false
			}
			continue
		}
		n, err := q.cq.Wait(ctx, q.wcs)
		if err != nil {
			return rawResponse{}, false
		}
		for _, wc := range q.wcs[:n] {
			if wc.Status != rdma.Success || wc.Opcode != rdma.WCRecv {
				// Failed and flushed WRs: responses that arrived before
				// the connection ended are still taken.
				continue
			}
			q.take(wc)
		}
	}
}

// drained polls what is left in the CQ into q.got and reports whether it
// was empty.
func (q *rawQueue) drained() bool {
	n, _ := q.cq.Poll(q.wcs)
	for _, wc := range q.wcs[:n] {
		if wc.Status == rdma.Success && wc.Opcode == rdma.WCRecv {
			q.take(wc)
		}
	}
	return n == 0
}

// take stores the response a receive completion brought.
func (q *rawQueue) take(wc rdma.WC) {
	i := int(wc.ID)
	b := q.rsps.Bytes()[i*rawRecvSize : i*rawRecvSize+rawRecvSize]
	require.Equal(q.t, uint32(nvmeof.CompletionSize), wc.ByteLen, "a response capsule is 16 bytes")
	var r rawResponse
	copy(r.raw[:], b)
	require.NoError(q.t, r.cqe.UnmarshalBinary(b[:nvmeof.CompletionSize]))
	r.wc = wc
	q.got[r.cqe.CID] = r
	if q.qp.State() != rdma.StateError {
		q.postRecv(i)
	}
}

// wait returns the response to cid, failing the test if none comes.
func (q *rawQueue) wait(cid uint16) rawResponse {
	r, ok := q.poll(cid, rawTimeout)
	require.True(q.t, ok, "no response to CID %d (QP %v, err %v)", cid, q.qp.State(), q.qp.Err())
	return r
}

// do submits a command and waits for its response.
func (q *rawQueue) do(c nvmeof.Command, inCapsule []byte) rawResponse {
	if c.CID == 0 {
		c.CID = q.cid()
	}
	q.submit(&c, inCapsule)
	return q.wait(c.CID)
}

// connectCommand builds a Connect whose data travels in the capsule
// (inCapsule) or behind a Keyed SGL at offset 0 of the data region.
func (q *rawQueue) connectCommand(sqsize uint16, kato uint32, data nvmeof.ConnectData, inCapsule bool) (nvmeof.Command, []byte) {
	b, err := data.MarshalBinary()
	require.NoError(q.t, err)
	x := nvmeof.Connect{CID: q.cid(), QID: q.qid, SQSize: sqsize, KATO: kato}
	if inCapsule {
		x.SGL = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
		return x.Command(), b
	}
	copy(q.data.Bytes(), b)
	x.SGL = q.keyed(0, nvmeof.ConnectDataSize, false)
	return x.Command(), nil
}

// connect runs a Connect and returns its response.
func (q *rawQueue) connect(sqsize uint16, kato uint32, data nvmeof.ConnectData, inCapsule bool) rawResponse {
	c, ic := q.connectCommand(sqsize, kato, data, inCapsule)
	return q.do(c, ic)
}

// hostData is Connect data for testHostNQN.
func hostData(subnqn string, cntlid uint16) nvmeof.ConnectData {
	return nvmeof.ConnectData{HostID: [16]byte{1, 2, 3}, CNTLID: cntlid, SubNQN: subnqn, HostNQN: testHostNQN}
}

// adminQueue dials the admin queue (32 entries), connects it to subnqn
// and enables the controller.
func adminQueue(t testing.TB, url, subnqn string, kato uint32) *rawQueue {
	q, err := dialRaw(t, url, rawDialConfig{qid: 0, hsqsize: 31, hrqsize: 32})
	require.NoError(t, err)
	r := q.connect(31, kato, hostData(subnqn, nvmeof.CNTLIDDynamic), false)
	require.NoError(t, r.cqe.Status.Err())
	q.cntlid = nvmeof.ParseConnectResponse(r.cqe.DW0).CNTLID
	q.enable()
	return q
}

// enable runs the enable handshake: CC.EN=1, then CSTS.RDY.
func (q *rawQueue) enable() {
	cc := nvmeof.CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4)
	q.setProperty(nvmeof.PropertyCC, uint64(cc))
	require.True(q.t, nvmeof.CSTS(q.property(nvmeof.PropertyCSTS)).RDY(), "CSTS.RDY after CC.EN")
}

func (q *rawQueue) property(off uint32) uint64 {
	size, _ := nvmeof.PropertySizeAt(off)
	x := nvmeof.PropertyGet{CID: q.cid(), Size: size, Offset: off}
	r := q.do(x.Command(), nil)
	require.NoError(q.t, r.cqe.Status.Err())
	return r.cqe.Value64()
}

func (q *rawQueue) setProperty(off uint32, v uint64) {
	x := nvmeof.PropertySet{CID: q.cid(), Size: nvmeof.PropertySize4, Offset: off, Value: v}
	r := q.do(x.Command(), nil)
	require.NoError(q.t, r.cqe.Status.Err())
}

// ioQueue dials and connects I/O queue qid of the admin queue's controller.
func ioQueue(t testing.TB, url string, admin *rawQueue, qid uint16, entries int) *rawQueue {
	q, err := dialRaw(t, url, rawDialConfig{qid: qid, hsqsize: uint16(entries - 1), hrqsize: uint16(entries), cntlid: admin.cntlid})
	require.NoError(t, err)
	r := q.connect(uint16(entries-1), 0, hostData(testSubNQN, admin.cntlid), true)
	require.NoError(t, r.cqe.Status.Err())
	q.cntlid = admin.cntlid
	return q
}

// readCmd builds a Read of nlb blocks at slba into the data region at off.
func (q *rawQueue) readCmd(nsid uint32, slba uint64, nlb uint32, off, sglLen int) nvmeof.Command {
	c := nvmeof.Command{Opcode: nvmeof.IORead, CID: q.cid(), NSID: nsid}
	c.SetPSDT(nvmeof.PSDTSGLBuffer)
	c.SetSLBA(slba)
	require.NoError(q.t, c.SetBlocks(nlb))
	c.DPTR = q.keyed(off, sglLen, false)
	return c
}

// writeCmd builds a Write of nlb blocks at slba from the data region at off.
func (q *rawQueue) writeCmd(nsid uint32, slba uint64, nlb uint32, off, sglLen int) nvmeof.Command {
	c := q.readCmd(nsid, slba, nlb, off, sglLen)
	c.Opcode = nvmeof.IOWrite
	return c
}

// identifyCmd builds an Identify into the data region at offset 0.
func (q *rawQueue) identifyCmd(cns nvmeof.CNS, nsid uint32) nvmeof.Command {
	c := nvmeof.Command{Opcode: nvmeof.AdminIdentify, CID: q.cid(), NSID: nsid}
	c.SetPSDT(nvmeof.PSDTSGLBuffer)
	c.SetIdentify(cns, 0)
	c.DPTR = q.keyed(0, nvmeof.IdentifyDataSize, false)
	return c
}

// identify runs an Identify and returns the data.
func (q *rawQueue) identify(cns nvmeof.CNS, nsid uint32) []byte {
	r := q.do(q.identifyCmd(cns, nsid), nil)
	require.NoError(q.t, r.cqe.Status.Err())
	return append([]byte(nil), q.data.Bytes()[:nvmeof.IdentifyDataSize]...)
}

// getLogPage reads length bytes of log page lid from offset into the data
// region at offset 0.
func (q *rawQueue) getLogPageCmd(lid nvmeof.LogPageID, nsid uint32, offset, length uint64) nvmeof.Command {
	c := nvmeof.Command{Opcode: nvmeof.AdminGetLogPage, CID: q.cid(), NSID: nsid}
	c.SetPSDT(nvmeof.PSDTSGLBuffer)
	require.NoError(q.t, c.SetGetLogPage(lid, offset, length))
	c.DPTR = q.keyed(0, int(length), false)
	return c
}

func (q *rawQueue) getLogPage(lid nvmeof.LogPageID, nsid uint32, offset, length uint64) []byte {
	r := q.do(q.getLogPageCmd(lid, nsid, offset, length), nil)
	require.NoError(q.t, r.cqe.Status.Err())
	return append([]byte(nil), q.data.Bytes()[:length]...)
}

// setFeature runs Set Features and returns the response.
func (q *rawQueue) setFeature(fid nvmeof.FeatureID, v uint32) rawResponse {
	c := nvmeof.Command{Opcode: nvmeof.AdminSetFeatures, CID: q.cid()}
	c.SetFeature(fid, v)
	return q.do(c, nil)
}

// putUint32 is a little-endian helper for hand-built data.
func putUint32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }
