package target

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// resHost is one host (its host ID) with an I/O queue to namespace 1.
type resHost struct {
	t     *testing.T
	id    [16]byte
	admin *rawQueue
	io    *rawQueue
}

func newResHost(t *testing.T, url string, id byte) *resHost {
	data := hostData(testSubNQN, nvmeof.CNTLIDDynamic)
	data.HostID = [16]byte{id, 0xaa}
	admin, err := dialRaw(t, url, rawDialConfig{qid: 0, hsqsize: 31, hrqsize: 32})
	require.NoError(t, err)
	r := admin.connect(31, 0, data, false)
	require.NoError(t, r.cqe.Status.Err())
	admin.cntlid = nvmeof.ParseConnectResponse(r.cqe.DW0).CNTLID
	admin.enable()
	io, err := dialRaw(t, url, rawDialConfig{qid: 1, hsqsize: 31, hrqsize: 32, cntlid: admin.cntlid})
	require.NoError(t, err)
	data.CNTLID = admin.cntlid
	r = io.connect(31, 0, data, true)
	require.NoError(t, r.cqe.Status.Err())
	io.cntlid = admin.cntlid
	return &resHost{t: t, id: data.HostID, admin: admin, io: io}
}

func (h *resHost) keys(op nvmeof.Opcode, action uint8, iekey bool, rtype nvmeof.ReservationType, cptpl uint8, crkey, other uint64) nvmeof.Status {
	c := nvmeof.Command{Opcode: op, NSID: 1, CID: h.io.cid()}
	c.SetPSDT(nvmeof.PSDTSGLBuffer)
	c.SetReservation(action, iekey, rtype, cptpl)
	k := nvmeof.ReservationKeys{Current: crkey, Other: other}
	b, _ := k.MarshalBinary()
	if op == nvmeof.IOReservationRelease {
		b = b[:nvmeof.ReservationReleaseDataSize]
	}
	c.DPTR = nvmeof.InCapsuleSGL{Length: uint32(len(b))}.Descriptor()
	return h.io.do(c, b).cqe.Status
}

func (h *resHost) register(action uint8, iekey bool, crkey, nrkey uint64) nvmeof.Status {
	return h.keys(nvmeof.IOReservationRegister, action, iekey, 0, 0, crkey, nrkey)
}

func (h *resHost) acquire(action uint8, t nvmeof.ReservationType, crkey, prkey uint64) nvmeof.Status {
	return h.keys(nvmeof.IOReservationAcquire, action, false, t, 0, crkey, prkey)
}

func (h *resHost) release(action uint8, t nvmeof.ReservationType, crkey uint64) nvmeof.Status {
	return h.keys(nvmeof.IOReservationRelease, action, false, t, 0, crkey, 0)
}

func (h *resHost) report() nvmeof.ReservationStatus {
	h.t.Helper()
	const n = 4096
	c := nvmeof.Command{Opcode: nvmeof.IOReservationReport, NSID: 1, CID: h.io.cid(), CDW10: n/4 - 1, CDW11: 1}
	c.SetPSDT(nvmeof.PSDTSGLBuffer)
	c.DPTR = h.io.keyed(0, n, false)
	require.NoError(h.t, h.io.do(c, nil).cqe.Status.Err())
	b := h.io.data.Bytes()[:n]
	regs := int(b[nvmeof.ResStatusOffsetREGSTS])
	var st nvmeof.ReservationStatus
	require.NoError(h.t, st.UnmarshalBinary(b[:nvmeof.ResStatusHeaderSize+regs*nvmeof.ResStatusEntrySize]))
	return st
}

func (h *resHost) write() nvmeof.Status {
	return h.io.do(h.io.writeCmd(1, 0, 1, 0, 512), nil).cqe.Status
}
func (h *resHost) read() nvmeof.Status { return h.io.do(h.io.readCmd(1, 0, 1, 0, 512), nil).cqe.Status }

func requireStatusIs(t *testing.T, want, got nvmeof.Status, what string) {
	t.Helper()
	require.Equal(t, want.String(), got.String(), what)
}

func TestReservations(t *testing.T) {
	tt := newTestTarget(t, transports()["shm"]())
	a, b := newResHost(t, tt.url, 1), newResHost(t, tt.url, 2)
	adm0 := adminQueue(t, tt.url, testSubNQN, 0)
	ok := nvmeof.StatusSuccess
	conflict := nvmeof.StatusReservationConflict.WithDNR()

	// Registration.
	requireStatusIs(t, ok, a.register(nvmeof.ReservationRegister, false, 0, 0xa), "A registers")
	requireStatusIs(t, ok, b.register(nvmeof.ReservationRegister, false, 0, 0xb), "B registers")
	requireStatusIs(t, ok, b.register(nvmeof.ReservationRegister, false, 0, 0xb), "again with the same key")
	requireStatusIs(t, conflict, b.register(nvmeof.ReservationRegister, false, 0, 0xbb), "again with another key")
	st := a.report()
	require.Len(t, st.Registrants, 2)
	assert.Equal(t, nvmeof.ReservationNone, st.RTYPE)
	assert.Equal(t, a.id, st.Registrants[0].HostID)
	assert.Equal(t, uint64(0xa), st.Registrants[0].RKey)

	// Write Exclusive: others read, do not write.
	requireStatusIs(t, conflict, a.acquire(nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusive, 0xbad, 0), "acquire with a wrong key")
	requireStatusIs(t, ok, a.acquire(nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusive, 0xa, 0), "A acquires WE")
	requireStatusIs(t, ok, a.acquire(nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusive, 0xa, 0), "again, same type")
	requireStatusIs(t, conflict, b.acquire(nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusive, 0xb, 0), "B cannot acquire")
	requireStatusIs(t, ok, a.write(), "the holder writes")
	requireStatusIs(t, conflict, b.write(), "a registrant does not write under WE")
	requireStatusIs(t, ok, b.read(), "but reads")
	st = b.report()
	assert.Equal(t, nvmeof.ReservationWriteExclusive, st.RTYPE)
	assert.True(t, st.Registrants[0].Holds)
	assert.False(t, st.Registrants[1].Holds)

	// Release: the type must match; a non-holder's release does nothing.
	requireStatusIs(t, nvmeof.StatusInvalidField.WithDNR(), a.release(nvmeof.ReservationRelease, nvmeof.ReservationExclusiveAccess, 0xa), "release of another type")
	requireStatusIs(t, ok, b.release(nvmeof.ReservationRelease, nvmeof.ReservationWriteExclusive, 0xb), "B releases what it does not hold")
	requireStatusIs(t, conflict, b.write(), "still reserved")
	requireStatusIs(t, ok, a.release(nvmeof.ReservationRelease, nvmeof.ReservationWriteExclusive, 0xa), "A releases")
	requireStatusIs(t, ok, b.write(), "free again")

	// Exclusive Access: others neither read nor write; B preempts A into
	// Write Exclusive - Registrants Only and A's registration is gone.
	requireStatusIs(t, ok, a.acquire(nvmeof.ReservationAcquire, nvmeof.ReservationExclusiveAccess, 0xa, 0), "A acquires EA")
	requireStatusIs(t, conflict, b.read(), "no reads under EA")
	requireStatusIs(t, conflict, b.acquire(nvmeof.ReservationPreempt, nvmeof.ReservationWriteExclusiveRegOnly, 0xb, 0x1234), "preempt of no key")
	gen := b.report().GEN
	requireStatusIs(t, ok, b.acquire(nvmeof.ReservationPreemptAndAbort, nvmeof.ReservationWriteExclusiveRegOnly, 0xb, 0xa), "B preempts A")
	st = b.report()
	assert.Equal(t, nvmeof.ReservationWriteExclusiveRegOnly, st.RTYPE)
	require.Len(t, st.Registrants, 1)
	assert.Equal(t, b.id, st.Registrants[0].HostID)
	assert.Greater(t, st.GEN, gen, "a preemption moves the generation")
	requireStatusIs(t, conflict, a.write(), "A, no longer registered, does not write")
	requireStatusIs(t, ok, a.read(), "but reads under WERO")
	requireStatusIs(t, ok, a.register(nvmeof.ReservationRegister, false, 0, 0xa2), "A registers again")
	requireStatusIs(t, ok, a.write(), "registrants write under WERO")

	// Replace and unregister.
	requireStatusIs(t, conflict, a.register(nvmeof.ReservationReplace, false, 0xbad, 0xa3), "replace with a wrong key")
	requireStatusIs(t, ok, a.register(nvmeof.ReservationReplace, false, 0xa2, 0xa3), "replace")
	requireStatusIs(t, conflict, a.register(nvmeof.ReservationUnregister, false, 0xa2, 0), "unregister with the old key")
	requireStatusIs(t, ok, a.register(nvmeof.ReservationUnregister, true, 0xbad, 0), "unregister, IEKEY")

	// Clear: every registration and the reservation go.
	requireStatusIs(t, ok, b.release(nvmeof.ReservationClear, 0, 0xb), "B clears")
	st = a.report()
	assert.Empty(t, st.Registrants)
	assert.Equal(t, nvmeof.ReservationNone, st.RTYPE)
	requireStatusIs(t, ok, a.write(), "free after clear")

	// All registrants hold: either writes; the reservation ends with the
	// last registrant.
	requireStatusIs(t, ok, a.register(nvmeof.ReservationRegister, false, 0, 1), "A registers")
	requireStatusIs(t, ok, b.register(nvmeof.ReservationRegister, false, 0, 2), "B registers")
	requireStatusIs(t, ok, a.acquire(nvmeof.ReservationAcquire, nvmeof.ReservationExclusiveAccessAllRegs, 1, 0), "A acquires EAAR")
	st = a.report()
	assert.True(t, st.Registrants[0].Holds && st.Registrants[1].Holds, "every registrant holds")
	requireStatusIs(t, ok, b.write(), "B holds too")
	requireStatusIs(t, ok, a.register(nvmeof.ReservationUnregister, false, 1, 0), "A unregisters")
	requireStatusIs(t, conflict, a.read(), "A, not registered, no access under EAAR")
	requireStatusIs(t, ok, b.register(nvmeof.ReservationUnregister, false, 2, 0), "B unregisters")
	assert.Equal(t, nvmeof.ReservationNone, a.report().RTYPE, "no registrant, no reservation")
	requireStatusIs(t, ok, a.read(), "free")

	// What is refused: PTPL (not supported), reserved types and actions,
	// the non-extended report.
	requireStatusIs(t, nvmeof.StatusInvalidField.WithDNR(), a.keys(nvmeof.IOReservationRegister, 0, false, 0, nvmeof.CPTPLSet, 0, 5), "CPTPL set")
	requireStatusIs(t, ok, a.register(nvmeof.ReservationRegister, false, 0, 5), "A registers")
	requireStatusIs(t, nvmeof.StatusInvalidField.WithDNR(), a.acquire(nvmeof.ReservationAcquire, 7, 5, 0), "RTYPE 7")
	requireStatusIs(t, nvmeof.StatusInvalidField.WithDNR(), a.acquire(3, nvmeof.ReservationWriteExclusive, 5, 0), "RACQA 3")
	c := nvmeof.Command{Opcode: nvmeof.IOReservationReport, NSID: 1, CID: a.io.cid(), CDW10: 15}
	c.SetPSDT(nvmeof.PSDTSGLBuffer)
	c.DPTR = a.io.keyed(0, 64, false)
	requireStatusIs(t, nvmeof.StatusHostIDInconsistentFormat.WithDNR(), a.io.do(c, nil).cqe.Status, "report without EDS")

	// The reservation features of namespace 1: the notification mask is
	// kept, persistence can only be off.
	feat := func(op nvmeof.Opcode, fid nvmeof.FeatureID, nsid, v uint32) rawResponse {
		c := nvmeof.Command{Opcode: op, NSID: nsid, CID: adm0.cid()}
		c.CDW10, c.CDW11 = uint32(fid), v
		return adm0.do(c, nil)
	}
	require.NoError(t, feat(nvmeof.AdminSetFeatures, nvmeof.FeatureReservationMask, 1, 0x6).cqe.Status.Err())
	assert.Equal(t, uint32(0x6), feat(nvmeof.AdminGetFeatures, nvmeof.FeatureReservationMask, 1, 0).cqe.DW0)
	require.NoError(t, feat(nvmeof.AdminSetFeatures, nvmeof.FeatureReservationPersist, 1, 0).cqe.Status.Err())
	requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), feat(nvmeof.AdminSetFeatures, nvmeof.FeatureReservationPersist, 1, 1))
	assert.Zero(t, feat(nvmeof.AdminGetFeatures, nvmeof.FeatureReservationPersist, 1, 0).cqe.DW0)
	requireStatus(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), feat(nvmeof.AdminGetFeatures, nvmeof.FeatureReservationMask, 9, 0))

	// Identify says so.
	var id nvmeof.IdentifyNamespace
	require.NoError(t, id.UnmarshalBinary(adm0.identify(nvmeof.CNSNamespace, 1)))
	assert.Equal(t, nvmeof.RESCAPAllTypes|nvmeof.RESCAPIgnoreExistingKey, id.RESCAP)
}

// notice reads log page 80h on h's admin queue.
func (h *resHost) notice() nvmeof.ReservationNotice {
	h.t.Helper()
	var n nvmeof.ReservationNotice
	require.NoError(h.t, n.UnmarshalBinary(h.admin.getLogPage(nvmeof.LogReservationNotification, 0, 0, nvmeof.ResNoticeLogSize)))
	return n
}

func TestReservationNotices(t *testing.T) {
	tt := newTestTarget(t, transports()["shm"]())
	a, b := newResHost(t, tt.url, 1), newResHost(t, tt.url, 2)
	aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: 0x5000}
	a.admin.submit(&aer, nil)
	require.NoError(t, a.register(nvmeof.ReservationRegister, false, 0, 0xa).Err())
	require.NoError(t, b.register(nvmeof.ReservationRegister, false, 0, 0xb).Err())
	require.NoError(t, a.acquire(nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusiveRegOnly, 0xa, 0).Err())

	// B preempts A: A hears of it.
	require.NoError(t, b.acquire(nvmeof.ReservationPreempt, nvmeof.ReservationWriteExclusiveRegOnly, 0xb, 0xa).Err())
	r := a.admin.wait(0x5000)
	require.NoError(t, r.cqe.Status.Err())
	ev := nvmeof.ParseAsyncEvent(r.cqe.DW0)
	assert.Equal(t, nvmeof.AsyncEventIOCommandSpecific, ev.Type)
	assert.Equal(t, nvmeof.LogReservationNotification, ev.LogPage)
	n := a.notice()
	assert.Equal(t, uint8(nvmeof.ResNoticeRegPreempted), n.Type)
	assert.Equal(t, uint32(1), n.NSID)
	assert.Equal(t, uint64(1), n.Count)
	assert.Zero(t, n.Available)
	assert.Equal(t, uint8(nvmeof.ResNoticeEmpty), a.notice().Type, "read once")

	// A registers again; B releases its Registrants Only reservation: A
	// hears that, B does not.
	require.NoError(t, a.register(nvmeof.ReservationRegister, false, 0, 0xa).Err())
	aer.CID = 0x5001
	a.admin.submit(&aer, nil)
	require.NoError(t, b.release(nvmeof.ReservationRelease, nvmeof.ReservationWriteExclusiveRegOnly, 0xb).Err())
	require.NoError(t, a.admin.wait(0x5001).cqe.Status.Err())
	n = a.notice()
	assert.Equal(t, uint8(nvmeof.ResNoticeResReleased), n.Type)
	assert.Equal(t, uint64(2), n.Count)
	assert.Equal(t, uint8(nvmeof.ResNoticeEmpty), b.notice().Type)

	// Masked notices are not logged.
	c := nvmeof.Command{Opcode: nvmeof.AdminSetFeatures, NSID: 1, CID: a.admin.cid(), CDW10: uint32(nvmeof.FeatureReservationMask), CDW11: 1 << nvmeof.ResNoticeRegPreempted}
	require.NoError(t, a.admin.do(c, nil).cqe.Status.Err())
	require.NoError(t, b.release(nvmeof.ReservationClear, 0, 0xb).Err())
	assert.Equal(t, uint8(nvmeof.ResNoticeEmpty), a.notice().Type, "masked")
}

// memResStore is a ReservationStore in memory, which outlives the
// targets of a test as a database file outlives target processes.
type memResStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memResStore) Load(subnqn string, nsid uint32) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[fmt.Sprint(subnqn, nsid)], nil
}

func (s *memResStore) Save(subnqn string, nsid uint32, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b == nil {
		delete(s.m, fmt.Sprint(subnqn, nsid))
	} else {
		s.m[fmt.Sprint(subnqn, nsid)] = append([]byte(nil), b...)
	}
	return nil
}

func TestReservationsPersistThroughPowerLoss(t *testing.T) {
	store := &memResStore{m: map[string][]byte{}}
	start := func() *testTarget {
		tg, err := New(WithLogger(testLogger(t)))
		require.NoError(t, err)
		sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, Hosts: []string{testHostNQN}})
		require.NoError(t, err)
		mem, err := blockdev.NewMemory(1 << 20)
		require.NoError(t, err)
		_, err = sub.AddNamespace(NamespaceConfig{NSID: 1, Device: mem, Reservations: store})
		require.NoError(t, err)
		url, err := tg.Listen(context.Background(), transports()["shm"]())
		require.NoError(t, err)
		return &testTarget{Target: tg, sub: sub, url: url}
	}
	tt := start()
	a, b := newResHost(t, tt.url, 1), newResHost(t, tt.url, 2)
	var id nvmeof.IdentifyNamespace
	require.NoError(t, id.UnmarshalBinary(a.admin.identify(nvmeof.CNSNamespace, 1)))
	assert.NotZero(t, id.RESCAP&nvmeof.RESCAPPersistThroughPowerLoss)
	require.NoError(t, a.keys(nvmeof.IOReservationRegister, nvmeof.ReservationRegister, false, 0, nvmeof.CPTPLSet, 0, 0xa).Err())
	require.NoError(t, b.register(nvmeof.ReservationRegister, false, 0, 0xb).Err())
	require.NoError(t, a.acquire(nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusive, 0xa, 0).Err())
	gen := a.report().GEN
	a.io.close()
	b.io.close()
	require.NoError(t, tt.Close())

	// The power comes back: the same reservation, the same registrants.
	tt = start()
	t.Cleanup(func() { tt.Close() })
	a, b = newResHost(t, tt.url, 1), newResHost(t, tt.url, 2)
	st := b.report()
	assert.True(t, st.PTPLS)
	assert.Equal(t, nvmeof.ReservationWriteExclusive, st.RTYPE)
	assert.Equal(t, gen, st.GEN)
	require.Len(t, st.Registrants, 2)
	assert.Equal(t, uint16(0xffff), st.Registrants[0].CNTLID, "not registered through a controller since")
	requireStatusIs(t, nvmeof.StatusReservationConflict.WithDNR(), b.write(), "A still holds")
	requireStatusIs(t, nvmeof.StatusSuccess, a.write(), "the holder writes")

	// PTPL off: nothing is kept.
	require.NoError(t, a.keys(nvmeof.IOReservationRegister, nvmeof.ReservationReplace, false, 0, nvmeof.CPTPLClear, 0xa, 0xa1).Err())
	b2, _ := store.Load(testSubNQN, 1)
	assert.Nil(t, b2)
	assert.False(t, b.report().PTPLS)
}
