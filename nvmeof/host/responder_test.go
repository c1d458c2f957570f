package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
	_ "github.com/capsule-storage/capsule/rdma/fault"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

// responder is a scripted NVMe-oF controller for the host's tests. It
// speaks the RDMA binding over the rdma API, answers Connect, Property Get
// and Set, Identify, Set Features (Number of Queues), Keep Alive, Get Log
// Page (discovery), and Read, Write, Flush, Write Zeroes and Dataset
// Management against one namespace in registered memory, moving data with
// RDMA Write and Read. It records every CM request and capsule, so that
// tests can check the host's wire bytes; hooks change its answers.
type responder struct {
	t   testing.TB
	url string // what hosts dial
	l   rdma.Listener
	pd  rdma.PD
	ns  rdma.MR // the namespace's blocks

	// Settings; change them before hosts connect.
	subNQN    string
	blockSize int
	ioccsz    uint32 // in 16-byte units
	mdts      uint8
	maxcmd    uint16
	mqes      uint16
	maxQueues int
	kas       uint16
	allow     []string // host NQNs allowed; nil allows any
	// tweak changes each Identify Controller answer.
	tweak func(*nvmeof.IdentifyController)
	// rejectCM, when set, rejects connections with this status.
	rejectCM nvmeof.RDMACMStatus
	// ioConnect, when set, runs under mu as an I/O queue's Connect
	// arrives, before the controller it names is looked up.
	ioConnect func(qid, cntlid uint16)

	keepAlives atomic.Int64
	memMu      sync.Mutex // guards writes to ns's bytes

	// mu guards the records, controllers and connections.
	mu       sync.Mutex
	capsules []capsuleRecord
	cmReqs   []nvmeof.RDMACMRequest
	ctrls    map[uint16]*fakeController
	nextID   uint16
	conns    map[*respConn]struct{}
	closed   bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// capsuleRecord is one command capsule as it arrived, with the data the
// responder fetched for it by RDMA Read.
type capsuleRecord struct {
	qid     uint16
	capsule []byte
	keyed   []byte
}

// fakeController is a controller of the responder; cc and csts are
// guarded by responder.mu (the admin connection writes them, the I/O
// connections read them).
type fakeController struct {
	cntlid  uint16
	subNQN  string
	hostNQN string
	kato    uint32
	cc      nvmeof.CC
	csts    nvmeof.CSTS
}

const respNQN = "nqn.2024-01.io.capsule:responder"

// newResponder listens at url (port 0 or a fresh shm name) with a
// namespace of size bytes in blocks of blockSize.
func newResponder(t testing.TB, url string, size int64, blockSize int) *responder {
	t.Helper()
	r := &responder{
		t: t, subNQN: respNQN, blockSize: blockSize,
		ioccsz: (64 + 8192) / 16, mdts: 5, maxcmd: 128, mqes: 1023, maxQueues: 8, kas: 10,
		ctrls: map[uint16]*fakeController{}, nextID: 1, conns: map[*respConn]struct{}{},
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	var err error
	r.l, err = rdma.Listen(r.ctx, url)
	require.NoError(t, err)
	r.url = r.l.Addr()
	r.pd, err = rdma.OpenPD(r.url)
	require.NoError(t, err)
	r.ns, err = r.pd.Alloc(int(size), rdma.AccessAll)
	require.NoError(t, err)
	r.wg.Add(1)
	go r.acceptLoop()
	t.Cleanup(r.close)
	return r
}

func (r *responder) acceptLoop() {
	defer r.wg.Done()
	for {
		req, err := r.l.Accept(r.ctx)
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.serve(req)
		}()
	}
}

func (r *responder) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.qp.SetError()
	}
	r.mu.Unlock()
	r.cancel()
	r.l.Close()
	r.wg.Wait()
	r.ns.Deregister()
	r.pd.Close()
}

// records returns a copy of the capsules received so far.
func (r *responder) records() []capsuleRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]capsuleRecord(nil), r.capsules...)
}

// cmRequests returns the RDMA_CM private data of every connection request.
func (r *responder) cmRequests() []nvmeof.RDMACMRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]nvmeof.RDMACMRequest(nil), r.cmReqs...)
}

// cut drops every connection, as a lost link would.
func (r *responder) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.qp.SetError()
	}
}

// nsBytes returns the namespace memory (read it only while no host I/O
// runs).
func (r *responder) nsBytes() []byte { return r.ns.Bytes() }

// respConn is one accepted queue.
type respConn struct {
	r       *responder
	qid     uint16
	qp      rdma.QP
	cq      rdma.CQ
	recvMR  rdma.MR
	capSize int
	recvs   []rdma.RecvWR
	ctrl    *fakeController
	sqhd    uint16
	entries int
	backlog []rdma.WC
	respMR  rdma.MR   // the response capsule, sent inline
	keep    []rdma.MR // regions of answers whose Writes may still be in flight
	readSeq uint64
}

const respReadID = 1 << 40

func (r *responder) serve(req rdma.ConnRequest) {
	var cm nvmeof.RDMACMRequest
	if err := cm.UnmarshalBinary(req.PrivateData()); err != nil {
		rej := nvmeof.RDMACMReject{Status: nvmeof.RDMACMStatusOf(err)}
		b, _ := rej.MarshalBinary()
		req.Reject(b)
		return
	}
	r.mu.Lock()
	r.cmReqs = append(r.cmReqs, cm)
	reject := r.rejectCM
	r.mu.Unlock()
	if reject != 0 {
		rej := nvmeof.RDMACMReject{Status: reject}
		b, _ := rej.MarshalBinary()
		req.Reject(b)
		return
	}
	entries := int(cm.HSQSize) + 1
	c := &respConn{r: r, qid: cm.QID, entries: entries, capSize: max(nvmeof.CommandSize+nvmeof.ConnectDataSize, int(r.ioccsz)*16)}
	var err error
	if c.cq, err = r.pd.CreateCQ(entries*8 + 64); err != nil {
		req.Reject(nil)
		return
	}
	defer c.cq.Close()
	if c.qp, err = r.pd.CreateQP(rdma.QPConfig{SendCQ: c.cq, MaxSendWR: entries*4 + 8, MaxRecvWR: entries, MaxSGE: 1}); err != nil {
		req.Reject(nil)
		return
	}
	defer c.qp.Close()
	if c.recvMR, err = r.pd.Alloc(entries*c.capSize, rdma.AccessLocalWrite); err != nil {
		req.Reject(nil)
		return
	}
	defer c.recvMR.Deregister()
	if c.respMR, err = r.pd.Alloc(nvmeof.CompletionSize, rdma.AccessLocalWrite); err != nil {
		req.Reject(nil)
		return
	}
	defer c.respMR.Deregister()
	defer func() {
		for _, mr := range c.keep {
			mr.Deregister()
		}
	}()
	c.recvs = make([]rdma.RecvWR, entries)
	for i := range c.recvs {
		c.recvs[i] = rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{rdma.SGEOf(c.recvMR, i*c.capSize, c.capSize)}}
	}
	if err := c.qp.PostRecv(c.recvs); err != nil {
		req.Reject(nil)
		return
	}
	acc := nvmeof.RDMACMAccept{CRQSize: uint16(entries)}
	b, _ := acc.MarshalBinary()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		req.Reject(nil)
		return
	}
	r.conns[c] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	if err := req.Accept(c.qp, b); err != nil {
		return
	}
	c.loop()
}

// next returns the next completion, from the backlog first.
func (c *respConn) next(wcs []rdma.WC) (rdma.WC, bool) {
	if len(c.backlog) > 0 {
		wc := c.backlog[0]
		c.backlog = c.backlog[1:]
		return wc, true
	}
	n, err := c.cq.Wait(c.r.ctx, wcs[:1])
	if err != nil || n == 0 {
		return rdma.WC{}, false
	}
	return wcs[0], true
}

func (c *respConn) loop() {
	wcs := make([]rdma.WC, 1)
	for {
		wc, ok := c.next(wcs)
		if !ok || wc.Status != rdma.Success {
			c.qp.SetError()
			return
		}
		if wc.Opcode != rdma.WCRecv {
			continue
		}
		i := int(wc.ID)
		capsule := c.recvMR.Bytes()[i*c.capSize : i*c.capSize+int(wc.ByteLen)]
		if !c.handle(capsule) {
			c.qp.SetError()
			return
		}
		if err := c.qp.PostRecv(c.recvs[i : i+1]); err != nil {
			return
		}
	}
}

// fetch RDMA-Reads a keyed SGL's bytes from the host.
func (c *respConn) fetch(k nvmeof.KeyedSGL) ([]byte, bool) {
	if k.Length == 0 {
		return nil, true
	}
	mr, err := c.r.pd.Alloc(int(k.Length), rdma.AccessLocalWrite)
	if err != nil {
		return nil, false
	}
	defer mr.Deregister()
	c.readSeq++
	id := respReadID + c.readSeq
	err = c.qp.PostSend([]rdma.SendWR{{ID: id, Op: rdma.OpRead, Flags: rdma.Signaled,
		SGL: []rdma.SGE{rdma.SGEOf(mr, 0, int(k.Length))}, RemoteAddr: k.Address, RKey: k.Key}})
	if err != nil {
		return nil, false
	}
	wcs := make([]rdma.WC, 8)
	for {
		n, err := c.cq.Wait(c.r.ctx, wcs)
		if err != nil {
			return nil, false
		}
		var done, ok bool
		for _, wc := range wcs[:n] {
			if wc.ID == id {
				done, ok = true, wc.Status == rdma.Success
				continue
			}
			c.backlog = append(c.backlog, wc)
		}
		if done {
			if !ok {
				return nil, false
			}
			return append([]byte(nil), mr.Bytes()...), true
		}
	}
}

// hostData returns the host-to-controller data of a command: in the
// capsule or fetched by RDMA Read.
func (c *respConn) hostData(cmd *nvmeof.Command, rest []byte, rec *recording) ([]byte, bool) {
	switch cmd.DPTR.Kind() {
	case nvmeof.SGLKindInCapsule:
		ic, _ := cmd.DPTR.InCapsule()
		if ic.Offset+uint64(ic.Length) > uint64(len(rest)) {
			return nil, false
		}
		return rest[ic.Offset : ic.Offset+uint64(ic.Length)], true
	case nvmeof.SGLKindKeyed:
		k, _ := cmd.DPTR.Keyed()
		b, ok := c.fetch(k)
		rec.setKeyed(b)
		return b, ok
	}
	return nil, false
}

// handle serves one capsule; false drops the connection.
func (c *respConn) handle(capsule []byte) bool {
	r := c.r
	cmd, rest, err := nvmeof.ParseCapsule(capsule)
	if err != nil {
		return false
	}
	// Record the capsule before answering it: the host may look as soon
	// as it has the response.
	r.mu.Lock()
	r.capsules = append(r.capsules, capsuleRecord{qid: c.qid, capsule: append([]byte(nil), capsule...)})
	rec := &recording{r: r, i: len(r.capsules) - 1}
	r.mu.Unlock()
	if cmd.IsFabrics() {
		return c.fabrics(&cmd, rest, rec)
	}
	r.mu.Lock()
	ready := c.ctrl != nil && c.ctrl.csts.RDY()
	r.mu.Unlock()
	if !ready {
		return c.reply(&cmd, nvmeof.StatusCommandSequenceError, 0, nil)
	}
	if c.qid == 0 {
		return c.admin(&cmd)
	}
	return c.io(&cmd, rest, rec)
}

// recording adds what the responder fetched to a recorded capsule.
type recording struct {
	r *responder
	i int
}

func (rec *recording) setKeyed(b []byte) {
	rec.r.mu.Lock()
	rec.r.capsules[rec.i].keyed = b
	rec.r.mu.Unlock()
}

func (c *respConn) fabrics(cmd *nvmeof.Command, rest []byte, rec *recording) bool {
	r := c.r
	switch cmd.FabricsType() {
	case nvmeof.FabricsConnect:
		x, err := nvmeof.ParseConnect(cmd)
		if err != nil {
			return c.reply(cmd, nvmeof.StatusOf(err), 0, nil)
		}
		data, ok := c.hostData(cmd, rest, rec)
		if !ok {
			return false
		}
		var cd nvmeof.ConnectData
		if err := cd.UnmarshalBinary(data); err != nil {
			return c.reply(cmd, nvmeof.StatusOf(err), 0, nil)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if cd.SubNQN != r.subNQN && cd.SubNQN != nvmeof.DiscoveryNQN {
			return c.replyLocked(cmd, nvmeof.StatusConnectInvalidParameters.WithDNR(),
				nvmeof.InvalidParameter{InData: true, Offset: nvmeof.ConnectDataOffsetSUBNQN}.DW0(), nil)
		}
		if r.allow != nil && !contains(r.allow, cd.HostNQN) {
			return c.replyLocked(cmd, nvmeof.StatusConnectInvalidHost.WithDNR(), 0, nil)
		}
		if x.QID == 0 {
			fc := &fakeController{cntlid: r.nextID, subNQN: cd.SubNQN, hostNQN: cd.HostNQN, kato: x.KATO}
			r.nextID++
			r.ctrls[fc.cntlid] = fc
			c.ctrl = fc
		} else {
			if r.ioConnect != nil {
				r.ioConnect(x.QID, cd.CNTLID)
			}
			fc := r.ctrls[cd.CNTLID]
			if fc == nil || fc.hostNQN != cd.HostNQN || !fc.csts.RDY() {
				return c.replyLocked(cmd, nvmeof.StatusConnectInvalidParameters.WithDNR(),
					nvmeof.InvalidParameter{InData: true, Offset: nvmeof.ConnectDataOffsetCNTLID}.DW0(), nil)
			}
			c.ctrl = fc
		}
		return c.replyLocked(cmd, nvmeof.StatusSuccess, nvmeof.ConnectResponse{CNTLID: c.ctrl.cntlid}.DW0(), nil)
	case nvmeof.FabricsPropertyGet:
		pg, err := nvmeof.ParsePropertyGet(cmd)
		if err != nil || c.ctrl == nil {
			return c.reply(cmd, nvmeof.StatusInvalidField, 0, nil)
		}
		r.mu.Lock()
		cc, csts := c.ctrl.cc, c.ctrl.csts
		r.mu.Unlock()
		var v uint64
		switch pg.Offset {
		case nvmeof.PropertyCAP:
			css := nvmeof.CAPCSSNVM
			if c.ctrl.subNQN == nvmeof.DiscoveryNQN {
				css = nvmeof.CAPCSSNoIO
			}
			v = uint64(nvmeof.CAP(0).WithMQES(r.mqes).WithCQR(true).WithTO(2).WithCSS(css))
		case nvmeof.PropertyVS:
			v = uint64(nvmeof.Version2_0)
		case nvmeof.PropertyCC:
			v = uint64(cc)
		case nvmeof.PropertyCSTS:
			v = uint64(csts)
		default:
			return c.reply(cmd, nvmeof.StatusInvalidField, 0, nil)
		}
		var cqe nvmeof.Completion
		cqe.SetValue64(v)
		return c.replyCQE(cmd, nvmeof.StatusSuccess, cqe.DW0, cqe.DW1)
	case nvmeof.FabricsPropertySet:
		ps, err := nvmeof.ParsePropertySet(cmd)
		if err != nil || c.ctrl == nil || ps.Offset != nvmeof.PropertyCC {
			return c.reply(cmd, nvmeof.StatusInvalidField, 0, nil)
		}
		cc := nvmeof.CC(ps.Value)
		r.mu.Lock()
		c.ctrl.cc = cc
		c.ctrl.csts = c.ctrl.csts.WithRDY(cc.EN())
		if cc.SHN() != nvmeof.ShutdownNone {
			c.ctrl.csts = c.ctrl.csts.WithSHST(nvmeof.ShutdownStatusComplete)
		}
		r.mu.Unlock()
		return c.reply(cmd, nvmeof.StatusSuccess, 0, nil)
	}
	return c.reply(cmd, nvmeof.StatusInvalidOpcode, 0, nil)
}

func (r *responder) identifyController(fc *fakeController) nvmeof.IdentifyController {
	id := nvmeof.IdentifyController{
		SN: "RESPONDER1", MN: "capsule host test responder", FR: "1.0",
		MDTS: r.mdts, CNTLID: fc.cntlid, VER: nvmeof.Version2_0, CNTRLTYPE: nvmeof.ControllerTypeIO,
		CTRATT: nvmeof.CTRATTHostID128, KAS: r.kas, SQES: 0x66, CQES: 0x44, MAXCMD: r.maxcmd, NN: 1,
		ONCS: nvmeof.ONCSDatasetManagement | nvmeof.ONCSWriteZeroes, VWC: nvmeof.VWCPresent,
		SGLS:   nvmeof.SGLSSupported | nvmeof.SGLSKeyedDataBlock | nvmeof.SGLSOffsetAddress,
		SUBNQN: fc.subNQN, IOCCSZ: r.ioccsz, IORCSZ: 1, MSDBD: 1,
	}
	if fc.subNQN == nvmeof.DiscoveryNQN {
		id.CNTRLTYPE, id.KAS, id.NN, id.ONCS, id.VWC = nvmeof.ControllerTypeDiscovery, 0, 0, 0, 0
	}
	if r.tweak != nil {
		r.tweak(&id)
	}
	return id
}

func (c *respConn) admin(cmd *nvmeof.Command) bool {
	r := c.r
	switch cmd.Opcode {
	case nvmeof.AdminIdentify:
		buf := make([]byte, nvmeof.IdentifyDataSize)
		switch cmd.CNS() {
		case nvmeof.CNSController:
			r.mu.Lock()
			id := r.identifyController(c.ctrl)
			r.mu.Unlock()
			id.MarshalTo(buf)
		case nvmeof.CNSNamespace:
			if cmd.NSID == 1 {
				shift := bits.TrailingZeros(uint(r.blockSize))
				n := uint64(len(r.ns.Bytes()) >> shift)
				ns := nvmeof.IdentifyNamespace{NSZE: n, NCAP: n, NUSE: n, DLFEAT: nvmeof.DLFEATReadZeroes}
				ns.LBAF[0].LBADS = uint8(shift)
				ns.MarshalTo(buf)
			}
		case nvmeof.CNSActiveNamespaceList:
			if cmd.NSID < 1 {
				nvmeof.MarshalNamespaceList(buf, []uint32{1})
			} else {
				nvmeof.MarshalNamespaceList(buf, nil)
			}
		default:
			return c.reply(cmd, nvmeof.StatusInvalidField, 0, nil)
		}
		return c.reply(cmd, nvmeof.StatusSuccess, 0, buf)
	case nvmeof.AdminSetFeatures:
		if cmd.FID() != nvmeof.FeatureNumberOfQueues {
			return c.reply(cmd, nvmeof.StatusInvalidField, 0, nil)
		}
		want := nvmeof.NumberOfQueues(cmd.FeatureValue())
		n := min(want.SubmissionQueues(), r.maxQueues)
		got, _ := nvmeof.NewNumberOfQueues(n, n)
		return c.reply(cmd, nvmeof.StatusSuccess, uint32(got), nil)
	case nvmeof.AdminKeepAlive:
		r.keepAlives.Add(1)
		return c.reply(cmd, nvmeof.StatusSuccess, 0, nil)
	case nvmeof.AdminGetLogPage:
		if cmd.LID() != nvmeof.LogDiscovery {
			return c.reply(cmd, nvmeof.StatusInvalidLogPage, 0, nil)
		}
		page, err := r.discoveryLog().MarshalBinary()
		if err != nil {
			return false
		}
		buf := make([]byte, cmd.LogPageLength())
		st := nvmeof.CopyLogPage(buf, page, cmd.LogPageOffset())
		if !st.Success() {
			return c.reply(cmd, st, 0, nil)
		}
		return c.reply(cmd, nvmeof.StatusSuccess, 0, buf)
	}
	return c.reply(cmd, nvmeof.StatusInvalidOpcode, 0, nil)
}

func (r *responder) discoveryLog() *nvmeof.DiscoveryLog {
	e := nvmeof.DiscoveryLogEntry{SUBTYPE: nvmeof.SubsystemNVMe, CNTLID: nvmeof.CNTLIDDynamic, ASQSZ: 32, SUBNQN: r.subNQN}
	scheme, addr, _ := strings.Cut(strings.TrimPrefix(r.url, "fault+"), "://")
	if scheme == "shm" {
		e.TRTYPE, e.ADRFAM, e.TRADDR = nvmeof.TransportRDMA, nvmeof.AddressFamilyIntraHost, addr
		e.SetRDMA(nvmeof.RDMATransportAddress{QPType: nvmeof.RDMAQPTypeReliableConnected, Provider: nvmeof.RDMAProviderNone, CMS: nvmeof.RDMACMSRDMACM})
	} else {
		host, port, _ := net.SplitHostPort(addr)
		e.TRTYPE, e.ADRFAM, e.TRADDR, e.TRSVCID = nvmeof.TransportRDMA, nvmeof.AddressFamilyIPv4, host, port
		e.SetRDMA(nvmeof.RDMATransportAddress{QPType: nvmeof.RDMAQPTypeReliableConnected, Provider: nvmeof.RDMAProviderIWARP, CMS: nvmeof.RDMACMSRDMACM})
	}
	return &nvmeof.DiscoveryLog{GenCtr: 1, Entries: []nvmeof.DiscoveryLogEntry{e}}
}

func (c *respConn) io(cmd *nvmeof.Command, rest []byte, rec *recording) bool {
	r := c.r
	if cmd.NSID != 1 {
		return c.reply(cmd, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), 0, nil)
	}
	mem := r.ns.Bytes()
	off := int64(cmd.SLBA()) * int64(r.blockSize)
	n := int64(cmd.Blocks()) * int64(r.blockSize)
	inRange := off >= 0 && off+n <= int64(len(mem))
	switch cmd.Opcode {
	case nvmeof.IORead:
		if !inRange {
			return c.reply(cmd, nvmeof.StatusLBAOutOfRange.WithDNR(), 0, nil)
		}
		k, ok := cmd.DPTR.Keyed()
		if !ok || int64(k.Length) != n {
			return c.reply(cmd, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), 0, nil)
		}
		return c.send([]rdma.SendWR{{Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(r.ns, int(off), int(n))},
			RemoteAddr: k.Address, RKey: k.Key}}, cmd, nvmeof.StatusSuccess, 0, 0)
	case nvmeof.IOWrite:
		if !inRange {
			return c.reply(cmd, nvmeof.StatusLBAOutOfRange.WithDNR(), 0, nil)
		}
		data, ok := c.hostData(cmd, rest, rec)
		if !ok {
			return false
		}
		if int64(len(data)) != n {
			return c.reply(cmd, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), 0, nil)
		}
		r.memMu.Lock()
		copy(mem[off:], data)
		r.memMu.Unlock()
	case nvmeof.IOFlush:
	case nvmeof.IOWriteZeroes:
		if !inRange {
			return c.reply(cmd, nvmeof.StatusLBAOutOfRange.WithDNR(), 0, nil)
		}
		r.memMu.Lock()
		clear(mem[off : off+n])
		r.memMu.Unlock()
	case nvmeof.IODatasetManagement:
		data, ok := c.hostData(cmd, rest, rec)
		if !ok {
			return false
		}
		ranges, err := nvmeof.AppendDSMRanges(nil, data, cmd.DSMRanges())
		if err != nil {
			return c.reply(cmd, nvmeof.StatusInvalidField.WithDNR(), 0, nil)
		}
		r.memMu.Lock()
		for _, rg := range ranges {
			o, l := int64(rg.SLBA)*int64(r.blockSize), int64(rg.Length)*int64(r.blockSize)
			if o+l <= int64(len(mem)) {
				clear(mem[o : o+l])
			}
		}
		r.memMu.Unlock()
	default:
		return c.reply(cmd, nvmeof.StatusInvalidOpcode.WithDNR(), 0, nil)
	}
	return c.reply(cmd, nvmeof.StatusSuccess, 0, nil)
}

func (c *respConn) reply(cmd *nvmeof.Command, st nvmeof.Status, dw0 uint32, data []byte) bool {
	if data == nil {
		return c.replyCQE(cmd, st, dw0, 0)
	}
	k, ok := cmd.DPTR.Keyed()
	if !ok || int(k.Length) < len(data) {
		return c.replyCQE(cmd, nvmeof.StatusDataSGLLengthInvalid, 0, 0)
	}
	mr, err := c.r.pd.Alloc(len(data), rdma.AccessLocalWrite)
	if err != nil {
		return false
	}
	copy(mr.Bytes(), data)
	c.keep = append(c.keep, mr)
	return c.send([]rdma.SendWR{{Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(mr, 0, len(data))},
		RemoteAddr: k.Address, RKey: k.Key}}, cmd, st, dw0, 0)
}

// replyLocked is reply for callers holding r.mu.
func (c *respConn) replyLocked(cmd *nvmeof.Command, st nvmeof.Status, dw0 uint32, data []byte) bool {
	return c.reply(cmd, st, dw0, data)
}

func (c *respConn) replyCQE(cmd *nvmeof.Command, st nvmeof.Status, dw0, dw1 uint32) bool {
	return c.send(nil, cmd, st, dw0, dw1)
}

// send posts wrs (RDMA Writes of data) chained with the response Send,
// as Send with Invalidate when the command's keyed SGL asked for it.
func (c *respConn) send(wrs []rdma.SendWR, cmd *nvmeof.Command, st nvmeof.Status, dw0, dw1 uint32) bool {
	c.sqhd = uint16((int(c.sqhd) + 1) % c.entries)
	cqe := nvmeof.Completion{DW0: dw0, DW1: dw1, SQHD: c.sqhd, SQID: c.qid, CID: cmd.CID, Status: st}
	cqe.MarshalTo(c.respMR.Bytes())
	resp := rdma.SendWR{Op: rdma.OpSend, Flags: rdma.Inline, SGL: []rdma.SGE{rdma.SGEOf(c.respMR, 0, nvmeof.CompletionSize)}}
	if k, ok := cmd.DPTR.Keyed(); ok && k.Invalidate {
		resp.Op, resp.InvRKey = rdma.OpSendInv, k.Key
	}
	return c.qp.PostSend(append(wrs, resp)) == nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hexCapsule renders a capsule's SQE as 16-byte rows, for failure output.
func hexCapsule(b []byte) string {
	var sb strings.Builder
	for i := 0; i < len(b) && i < nvmeof.CommandSize; i += 16 {
		fmt.Fprintf(&sb, "%02x: % x\n", i, b[i:min(i+16, len(b))])
	}
	return sb.String()
}

// u32 reads a little-endian dword of a capsule.
func u32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
