package target

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/rdma"
)

// cqeBytes builds the 16 bytes of a response capsule, field by field.
func cqeBytes(dw0, dw1 uint32, sqhd, cid uint16, st nvmeof.Status) [16]byte {
	var b [16]byte
	putUint32(b[0:], dw0) // DW0: command specific
	putUint32(b[4:], dw1) // DW1: command specific
	b[8], b[9] = byte(sqhd), byte(sqhd>>8)
	// bytes 10-11: SQID, reserved in a Fabrics response: zero
	b[12], b[13] = byte(cid), byte(cid>>8)
	sts := uint16(st) << 1 // bit 0, the phase tag, is reserved: zero
	b[14], b[15] = byte(sts), byte(sts>>8)
	return b
}

// requireStatus checks a response's status: SCT, SC and DNR.
func requireStatus(t testing.TB, want nvmeof.Status, r rawResponse) {
	t.Helper()
	require.Equal(t, want.String(), r.cqe.Status.String(), "CID %d", r.cqe.CID)
}

func TestConnectAdmin(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		for _, inCapsule := range []bool{false, true} {
			q, err := dialRaw(t, tt.url, rawDialConfig{hsqsize: 31, hrqsize: 32})
			require.NoError(t, err)
			assert.Equal(t, uint16(32), q.accept.CRQSize, "CRQSIZE is HSQSIZE+1")
			c, ic := q.connectCommand(31, 10000, hostData(testSubNQN, nvmeof.CNTLIDDynamic), inCapsule)
			r := q.do(c, ic)
			cntlid := uint16(r.cqe.DW0)
			assert.NotZero(t, cntlid)
			assert.LessOrEqual(t, cntlid, nvmeof.MaxCNTLID)
			// The first response: CNTLID in DW0, SQHD 1 of 32 entries.
			assert.Equal(t, cqeBytes(uint32(cntlid), 0, 1, c.CID, nvmeof.StatusSuccess), r.raw)
		}
		assert.Equal(t, 2, tt.sub.Controllers(), "each admin queue has its own controller")
	})
}

func TestConnectRefusals(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		q, err := dialRaw(t, tt.url, rawDialConfig{hsqsize: 31, hrqsize: 32})
		require.NoError(t, err)

		// Unknown subsystem: Connect Invalid Parameters, IATTR 1 (in the
		// data), IPO 256 (SUBNQN).
		r := q.connect(31, 0, hostData("nqn.2026-11.io.capsule:nobody", nvmeof.CNTLIDDynamic), false)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)
		assert.Equal(t, uint32(1<<16|256), r.cqe.DW0)

		// A host not on the allow-list: Connect Invalid Host (SCT 1h, SC 84h).
		d := hostData(testSubNQN, nvmeof.CNTLIDDynamic)
		d.HostNQN = otherHost
		r = q.connect(31, 0, d, true)
		requireStatus(t, nvmeof.StatusConnectInvalidHost.WithDNR(), r)
		assert.Equal(t, uint16(0x184<<1|0x8000), uint16(r.raw[14])|uint16(r.raw[15])<<8, "SCT 1h SC 84h DNR on the wire")

		// A static controller ID on a dynamic subsystem: IPO 16 in the data.
		r = q.connect(31, 0, hostData(testSubNQN, 1), false)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)
		assert.Equal(t, uint32(1<<16|16), r.cqe.DW0)

		// An admin queue larger than 32 entries: IPO 44 (SQSIZE) in the SQE.
		r = q.connect(32, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), false)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)
		assert.Equal(t, uint32(44), r.cqe.DW0)

		// SQSIZE 0 is refused by the wire decoder.
		r = q.connect(0, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), false)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)

		// A Connect for QID 1 on the connection made for QID 0: IPO 42.
		c, ic := q.connectCommand(31, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), true)
		c.CDW10 |= 1 << 16
		r = q.do(c, ic)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)
		assert.Equal(t, uint32(42), r.cqe.DW0)

		// Connect data that is not 1024 bytes: Data SGL Length Invalid.
		c, _ = q.connectCommand(31, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), false)
		c.DPTR = q.keyed(0, 512, false)
		requireStatus(t, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), q.do(c, nil))

		// Anything but Connect on a queue that is not connected.
		requireStatus(t, nvmeof.StatusInvalidOpcode.WithDNR(), q.do(q.identifyCmd(nvmeof.CNSController, 0), nil))

		// The connection survived every refusal: now the host is let in.
		require.NoError(t, tt.sub.AllowHost(otherHost))
		r = q.connect(31, 0, d, true)
		require.NoError(t, r.cqe.Status.Err())
		// A second Connect on a connected queue is out of sequence.
		r = q.connect(31, 0, d, true)
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), r)
	})
}

func TestConnectIOQueue(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen(), WithMaxIOQueues(4), WithMaxQueueEntries(64))

		// An I/O queue Connect before any admin queue: the controller it
		// names does not exist: IPO 16 (CNTLID) in the data.
		early, err := dialRaw(t, tt.url, rawDialConfig{qid: 1, hsqsize: 15, hrqsize: 16, cntlid: 1})
		require.NoError(t, err)
		r := early.connect(15, 0, hostData(testSubNQN, 1), true)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)
		assert.Equal(t, uint32(1<<16|16), r.cqe.DW0)

		admin := adminQueue(t, tt.url, testSubNQN, 0)
		// The same connection, now naming a controller that exists.
		r = early.connect(15, 0, hostData(testSubNQN, admin.cntlid), true)
		require.NoError(t, r.cqe.Status.Err())
		assert.Equal(t, uint32(admin.cntlid), r.cqe.DW0)

		// A second connection for QID 1: Command Sequence Error.
		dup, err := dialRaw(t, tt.url, rawDialConfig{qid: 1, hsqsize: 15, hrqsize: 16, cntlid: admin.cntlid})
		require.NoError(t, err)
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), dup.connect(15, 0, hostData(testSubNQN, admin.cntlid), true))

		// Another host cannot attach a queue to this host's controller.
		q2, err := dialRaw(t, tt.url, rawDialConfig{qid: 2, hsqsize: 15, hrqsize: 16, cntlid: admin.cntlid})
		require.NoError(t, err)
		require.NoError(t, tt.sub.AllowHost(otherHost))
		d := hostData(testSubNQN, admin.cntlid)
		d.HostNQN = otherHost
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), q2.connect(15, 0, d, true))

		// SQSIZE above the connection's HSQSIZE: IPO 44.
		r = q2.connect(16, 0, hostData(testSubNQN, admin.cntlid), true)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)
		assert.Equal(t, uint32(44), r.cqe.DW0)

		// Number of Queues grants 2: QID 3 is refused (IPO 42), QID 2 works.
		r = admin.setFeature(nvmeof.FeatureNumberOfQueues, 1|1<<16)
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), r) // I/O queue 1 exists already
		dup.close()
		early.close()
		require.Eventually(t, func() bool { return ioQueueCount(tt, admin.cntlid) == 0 }, rawTimeout, time.Millisecond)
		r = admin.setFeature(nvmeof.FeatureNumberOfQueues, 1|1<<16)
		require.NoError(t, r.cqe.Status.Err())
		assert.Equal(t, uint32(1|1<<16), r.cqe.DW0, "NSQA and NCQA, 0's based")
		q3, err := dialRaw(t, tt.url, rawDialConfig{qid: 3, hsqsize: 15, hrqsize: 16, cntlid: admin.cntlid})
		require.NoError(t, err)
		r = q3.connect(15, 0, hostData(testSubNQN, admin.cntlid), true)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), r)
		assert.Equal(t, uint32(42), r.cqe.DW0)
		require.NoError(t, q2.connect(15, 0, hostData(testSubNQN, admin.cntlid), true).cqe.Status.Err())

		// The discovery subsystem has no I/O queues.
		disc := adminQueue(t, tt.url, nvmeof.DiscoveryNQN, 0)
		q4, err := dialRaw(t, tt.url, rawDialConfig{qid: 1, hsqsize: 15, hrqsize: 16, cntlid: disc.cntlid})
		require.NoError(t, err)
		requireStatus(t, nvmeof.StatusConnectInvalidParameters.WithDNR(), q4.connect(15, 0, hostData(nvmeof.DiscoveryNQN, disc.cntlid), true))
	})
}

// ioQueueCount counts the I/O queues of a controller.
func ioQueueCount(tt *testTarget, cntlid uint16) int {
	c := tt.sub.findController(cntlid)
	if c == nil {
		return -1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ioCount
}

func TestConnectionRequestRejects(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen(), WithMaxIOQueues(2), WithMaxQueueEntries(64))
		for _, tc := range []struct {
			name string
			cfg  rawDialConfig
			want nvmeof.RDMACMStatus
		}{
			{"admin queue over 32 entries", rawDialConfig{qid: 0, hsqsize: 32, hrqsize: 32}, nvmeof.RDMACMInvalidHSQSIZE},
			{"I/O queue over MQES", rawDialConfig{qid: 1, hsqsize: 64, hrqsize: 64}, nvmeof.RDMACMInvalidHSQSIZE},
			{"HSQSIZE 0", rawDialConfig{qid: 1, hsqsize: 0, hrqsize: 1}, nvmeof.RDMACMInvalidHSQSIZE},
			{"HRQSIZE 0", rawDialConfig{qid: 1, hsqsize: 7, hrqsize: 0, nrecv: 8}, nvmeof.RDMACMInvalidHRQSIZE},
			{"QID above the I/O queues", rawDialConfig{qid: 3, hsqsize: 7, hrqsize: 8}, nvmeof.RDMACMInvalidQID},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := dialRaw(t, tt.url, tc.cfg)
				var rej *rdma.RejectError
				require.True(t, errors.As(err, &rej), "want a reject, got %v", err)
				var p nvmeof.RDMACMReject
				require.NoError(t, p.UnmarshalBinary(rej.Private))
				assert.Equal(t, tc.want, p.Status)
			})
		}
		t.Run("short private data", func(t *testing.T) {
			pd, err := rdma.OpenPD(tt.url)
			require.NoError(t, err)
			defer pd.Close()
			cq, err := pd.CreateCQ(8)
			require.NoError(t, err)
			defer cq.Close()
			_, host, err := rdma.ParseURL(tt.url)
			require.NoError(t, err)
			qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
			require.NoError(t, err)
			defer qp.Close()
			_, err = qp.Connect(t.Context(), host, []byte{0, 0, 0, 0})
			var rej *rdma.RejectError
			require.True(t, errors.As(err, &rej), "want a reject, got %v", err)
			var p nvmeof.RDMACMReject
			require.NoError(t, p.UnmarshalBinary(rej.Private))
			assert.Equal(t, nvmeof.RDMACMInvalidPrivateDataLength, p.Status)
		})
	})
}

func TestPropertiesAndHandshakes(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		q, err := dialRaw(t, tt.url, rawDialConfig{hsqsize: 31, hrqsize: 32})
		require.NoError(t, err)
		r := q.connect(31, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), false)
		require.NoError(t, r.cqe.Status.Err())
		q.cntlid = uint16(r.cqe.DW0)

		capReg := nvmeof.CAP(q.property(nvmeof.PropertyCAP))
		assert.Equal(t, uint16(DefaultMaxQueueEntries-1), capReg.MQES())
		assert.True(t, capReg.CQR())
		assert.Equal(t, uint8(timeoutUnits), capReg.TO())
		assert.Equal(t, nvmeof.CAPCSSNVM|nvmeof.CAPCSSIOCommandSets, capReg.CSS())
		assert.Zero(t, capReg.MPSMIN())
		assert.Equal(t, nvmeof.Version2_0, nvmeof.Version(q.property(nvmeof.PropertyVS)))
		assert.Zero(t, q.property(nvmeof.PropertyCC))
		assert.Zero(t, q.property(nvmeof.PropertyCSTS))

		// Either half of CAP in 4 bytes, as SPDK answers it.
		x := nvmeof.PropertyGet{CID: q.cid(), Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCAP}
		r = q.do(x.Command(), nil)
		require.NoError(t, r.cqe.Status.Err())
		assert.Equal(t, uint32(capReg), r.cqe.DW0)
		x = nvmeof.PropertyGet{CID: q.cid(), Size: nvmeof.PropertySize4, Offset: nvmeof.PropertyCAP + 4}
		r = q.do(x.Command(), nil)
		require.NoError(t, r.cqe.Status.Err())
		assert.Equal(t, uint32(capReg>>32), r.cqe.DW0)
		// Wrong size, read-only properties, unknown offsets: Invalid Field.
		x = nvmeof.PropertyGet{CID: q.cid(), Size: nvmeof.PropertySize8, Offset: nvmeof.PropertyVS}
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.do(x.Command(), nil))
		x = nvmeof.PropertyGet{CID: q.cid(), Size: nvmeof.PropertySize4, Offset: 0x40}
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.do(x.Command(), nil))
		for _, off := range []uint32{nvmeof.PropertyCAP, nvmeof.PropertyVS, nvmeof.PropertyCSTS, nvmeof.PropertyNSSR} {
			s := nvmeof.PropertySet{CID: q.cid(), Size: nvmeof.PropertySize4, Offset: off, Value: 1}
			requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.do(s.Command(), nil))
		}
		s := nvmeof.PropertySet{CID: q.cid(), Size: nvmeof.PropertySize8, Offset: nvmeof.PropertyCC, Value: 1}
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.do(s.Command(), nil))

		// An enable with a 32-byte SQ entry: Controller Fatal Status.
		bad := nvmeof.CC(0).WithEN(true).WithIOSQES(5).WithIOCQES(4)
		q.setProperty(nvmeof.PropertyCC, uint64(bad))
		csts := nvmeof.CSTS(q.property(nvmeof.PropertyCSTS))
		assert.True(t, csts.CFS())
		assert.False(t, csts.RDY())
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), q.do(q.identifyCmd(nvmeof.CNSController, 0), nil))
		// Reset (EN=0) clears it; a good enable sets RDY.
		q.setProperty(nvmeof.PropertyCC, 0)
		assert.Zero(t, q.property(nvmeof.PropertyCSTS))
		q.enable()

		// Reset deletes I/O queues.
		io := ioQueue(t, tt.url, q, 1, 16)
		q.setProperty(nvmeof.PropertyCC, 0)
		<-io.qp.Done()
		assert.False(t, nvmeof.CSTS(q.property(nvmeof.PropertyCSTS)).RDY())
		q.enable()

		// Shutdown: SHST goes to complete once the namespaces are flushed,
		// and commands other than Fabrics ones stop.
		cc := nvmeof.CC(q.property(nvmeof.PropertyCC)).WithSHN(nvmeof.ShutdownNormal)
		q.setProperty(nvmeof.PropertyCC, uint64(cc))
		require.Eventually(t, func() bool {
			return nvmeof.CSTS(q.property(nvmeof.PropertyCSTS)).SHST() == nvmeof.ShutdownStatusComplete
		}, rawTimeout, time.Millisecond)
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), q.do(q.identifyCmd(nvmeof.CNSController, 0), nil))
		// Clearing SHN and resetting brings it back.
		q.setProperty(nvmeof.PropertyCC, 0)
		assert.Equal(t, nvmeof.ShutdownStatusNormal, nvmeof.CSTS(q.property(nvmeof.PropertyCSTS)).SHST())
		q.enable()
		require.NoError(t, q.do(q.identifyCmd(nvmeof.CNSController, 0), nil).cqe.Status.Err())
	})
}

func TestDisconnect(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		admin := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, admin, 1, 16)

		x := nvmeof.Disconnect{CID: admin.cid()}
		requireStatus(t, nvmeof.StatusInvalidQueueType.WithDNR(), admin.do(x.Command(), nil))

		x = nvmeof.Disconnect{CID: io.cid()}
		r := io.do(x.Command(), nil)
		require.NoError(t, r.cqe.Status.Err())
		// The queue is gone at once, its QID free; the connection takes
		// no more commands.
		assert.Equal(t, 0, ioQueueCount(tt, admin.cntlid))
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), io.do(io.readCmd(1, 0, 1, 0, 512), nil))
		io2 := ioQueue(t, tt.url, admin, 1, 16)
		assert.Equal(t, 1, ioQueueCount(tt, admin.cntlid))
		// The host did not close the old connection: the target does.
		<-io.qp.Done()
		require.NoError(t, io2.do(io2.readCmd(1, 0, 1, 0, 512), nil).cqe.Status.Err())
	})
}
