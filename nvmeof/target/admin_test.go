package target

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
)

// TestIdentifyControllerLinuxChecks checks Identify Controller against
// what a Linux host (drivers/nvme/host core.c, fabrics.c, rdma.c) checks
// before it accepts a controller, and the other fields it reads.
func TestIdentifyControllerLinuxChecks(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		q := adminQueue(t, tt.url, testSubNQN, 5000)
		var id nvmeof.IdentifyController
		require.NoError(t, id.UnmarshalBinary(q.identify(nvmeof.CNSController, 0)))

		// What Linux refuses a controller over.
		assert.Equal(t, q.cntlid, id.CNTLID, "CNTLID is the one Connect returned")
		assert.NotZero(t, id.KAS, "keep-alive support is mandatory on fabrics")
		assert.GreaterOrEqual(t, id.IOCCSZ, uint32(4))
		assert.GreaterOrEqual(t, id.IORCSZ, uint32(1))
		assert.NotZero(t, id.MAXCMD)
		assert.NotZero(t, id.SGLS&nvmeof.SGLSKeyedDataBlock, "keyed SGLs are mandatory for RDMA")
		assert.Zero(t, id.ICDOFF)
		assert.Equal(t, nvmeof.ControllerTypeIO, id.CNTRLTYPE)

		// The fabrics fields of the binding.
		assert.Equal(t, uint32((64+DefaultInCapsuleDataSize)/16), id.IOCCSZ, "64-byte SQE plus 8 KiB of in-capsule data")
		assert.Equal(t, uint32(1), id.IORCSZ)
		assert.NotZero(t, id.SGLS&nvmeof.SGLSOffsetAddress, "SGLS bit 20: in-capsule data")
		assert.Equal(t, nvmeof.SGLSSupported, id.SGLS&3)
		assert.Equal(t, uint8(1), id.MSDBD)
		assert.Equal(t, nvmeof.OFCSDisconnect, id.OFCS)

		// Identity and limits.
		assert.Equal(t, tt.sub.SerialNumber(), id.SN)
		assert.Len(t, id.SN, 20)
		assert.Equal(t, DefaultModelNumber, id.MN)
		assert.Equal(t, DefaultFirmwareRevision, id.FR)
		assert.Equal(t, testSubNQN, id.SUBNQN)
		assert.Equal(t, nvmeof.Version2_0, id.VER)
		assert.Equal(t, uint8(8), id.MDTS, "the RDMA binding's 1 MiB in 4 KiB pages")
		assert.Equal(t, uint8(0x66), id.SQES)
		assert.Equal(t, uint8(0x44), id.CQES)
		assert.Equal(t, uint16(DefaultMaxQueueEntries), id.MAXCMD)
		assert.Equal(t, uint32(MaxNamespaces), id.NN)
		assert.Equal(t, nvmeof.ONCSDatasetManagement|nvmeof.ONCSWriteZeroes|nvmeof.ONCSReservations, id.ONCS)
		assert.Equal(t, nvmeof.VWCPresent|nvmeof.VWCFlushBroadcast, id.VWC)
		assert.NotZero(t, id.CTRATT&nvmeof.CTRATTHostID128)
		assert.NotZero(t, id.CTRATT&ctrattTBKAS)
		assert.Equal(t, oaesNamespaceAttribute|oaesANAChange, id.OAES)

		// ANA, as Linux reads it (nvme_mpath_init_identify): MNAN set and
		// at most NN, and an ANA log page of 16 + NANAGRPID*32 + MNAN*4
		// bytes within MDTS.
		assert.Equal(t, nvmeof.CMICMultiPort|nvmeof.CMICMultiController|nvmeof.CMICANA, id.CMIC)
		assert.Equal(t, uint8(anaTransitionTime), id.ANATT)
		assert.Equal(t, nvmeof.ANACAPOptimized|nvmeof.ANACAPNonOptimized|nvmeof.ANACAPInaccessible|
			nvmeof.ANACAPPersistentLoss|nvmeof.ANACAPChange|nvmeof.ANACAPGroupIDFixed, id.ANACAP)
		assert.Equal(t, uint32(MaxANAGroups), id.ANAGRPMAX)
		assert.Equal(t, uint32(MaxANAGroups), id.NANAGRPID)
		assert.NotZero(t, id.MNAN)
		assert.LessOrEqual(t, id.MNAN, id.NN)
		assert.LessOrEqual(t, nvmeof.MaxANALogSize(id.NANAGRPID, id.MNAN), uint64(4096)<<id.MDTS)
		assert.Equal(t, uint8(errorLogEntries-1), id.ELPE)
		assert.Equal(t, uint8(asyncEventLimit-1), id.AERL)
		assert.Zero(t, id.FCATT, "dynamic controller model")

		// The serial number is derived from the NQN: stable.
		assert.Equal(t, deriveSerialNumber(testSubNQN), id.SN)
	})
}

func TestIdentifyNamespace(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		dev, err := blockdev.NewMemory(8<<20 + 100) // a partial block at the end is not exposed
		require.NoError(t, err)
		ns4k, err := tt.sub.AddNamespace(NamespaceConfig{NSID: 7, Device: dev, BlockSize: 4096})
		require.NoError(t, err)
		q := adminQueue(t, tt.url, testSubNQN, 0)

		var id nvmeof.IdentifyNamespace
		require.NoError(t, id.UnmarshalBinary(q.identify(nvmeof.CNSNamespace, 1)))
		assert.Equal(t, uint64(16<<20/512), id.NSZE)
		assert.Equal(t, id.NSZE, id.NCAP)
		bs, err := id.BlockSize()
		require.NoError(t, err)
		assert.Equal(t, uint32(512), bs)
		assert.Equal(t, tt.ns.NGUID(), id.NGUID)
		assert.Equal(t, nvmeof.DLFEATReadZeroes, id.DLFEAT&7, "deallocated blocks read as zeros")

		require.NoError(t, id.UnmarshalBinary(q.identify(nvmeof.CNSNamespace, 7)))
		assert.Equal(t, uint64(8<<20/4096), id.NSZE)
		bs, _ = id.BlockSize()
		assert.Equal(t, uint32(4096), bs)
		assert.Equal(t, ns4k.Blocks(), id.NSZE)

		// An inactive NSID in range: all zeros. Out of range: refused.
		assert.Equal(t, make([]byte, 4096), q.identify(nvmeof.CNSNamespace, 2))
		for _, nsid := range []uint32{0, MaxNamespaces + 1, nvmeof.NSIDAll} {
			requireStatus(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), q.do(q.identifyCmd(nvmeof.CNSNamespace, nsid), nil))
		}

		// Active namespace list: the NSIDs above the one given.
		var ids []uint32
		ids, err = nvmeof.AppendNamespaceList(ids, q.identify(nvmeof.CNSActiveNamespaceList, 0))
		require.NoError(t, err)
		assert.Equal(t, []uint32{1, 7}, ids)
		ids, err = nvmeof.AppendNamespaceList(nil, q.identify(nvmeof.CNSActiveNamespaceList, 1))
		require.NoError(t, err)
		assert.Equal(t, []uint32{7}, ids)
		requireStatus(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), q.do(q.identifyCmd(nvmeof.CNSActiveNamespaceList, 0xfffffffe), nil))

		// Namespace identification descriptors: NGUID, UUID (derived from
		// the NQN and NSID, so stable), CSI.
		var nid nvmeof.NamespaceIDs
		require.NoError(t, nid.UnmarshalBinary(q.identify(nvmeof.CNSNamespaceIDDescriptors, 1)))
		uuid, nguid := DeriveNamespaceIDs(testSubNQN, 1)
		assert.True(t, nid.HasUUID && nid.HasNGUID && nid.HasCSI)
		assert.Equal(t, uuid, nid.UUID)
		assert.Equal(t, nguid, nid.NGUID)
		assert.Equal(t, nvmeof.CSINVM, nid.CSI)
		assert.Equal(t, byte(0x50), nid.UUID[6]&0xf0, "a version 5 UUID")
		requireStatus(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), q.do(q.identifyCmd(nvmeof.CNSNamespaceIDDescriptors, 2), nil))

		// CNS values not served: Invalid Field.
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.do(q.identifyCmd(0x10, 1), nil))
	})
}

func TestNamespaceIDs(t *testing.T) {
	u1, g1 := DeriveNamespaceIDs(testSubNQN, 1)
	u2, g2 := DeriveNamespaceIDs(testSubNQN, 1)
	assert.Equal(t, u1, u2)
	assert.Equal(t, g1, g2)
	u3, g3 := DeriveNamespaceIDs(testSubNQN, 2)
	assert.NotEqual(t, u1, u3)
	assert.NotEqual(t, g1, g3)
	u4, _ := DeriveNamespaceIDs("nqn.2026-11.io.capsule:other", 1)
	assert.NotEqual(t, u1, u4)
	assert.Equal(t, byte(0x80), u1[8]&0xc0, "RFC 9562 variant")

	// Stored identifiers are kept.
	tg, err := New(WithLogger(testLogger(t)))
	require.NoError(t, err)
	defer tg.Close()
	sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowAnyHost: true})
	require.NoError(t, err)
	dev, _ := blockdev.NewMemory(1 << 20)
	stored := [16]byte{0xde, 0xad}
	ns, err := sub.AddNamespace(NamespaceConfig{Device: dev, UUID: stored})
	require.NoError(t, err)
	assert.Equal(t, uint32(1), ns.NSID(), "NSID 0 takes the lowest free one")
	assert.Equal(t, stored, ns.UUID())
	assert.Equal(t, g1, ns.NGUID())
}

func TestGetLogPage(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		q := adminQueue(t, tt.url, testSubNQN, 0)
		io := ioQueue(t, tt.url, q, 1, 16)

		// Three errors on the I/O queue, then the error log, newest first.
		for _, nsid := range []uint32{5, 6, 7} {
			requireStatus(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), io.do(io.readCmd(nsid, 0, 1, 0, 512), nil))
		}
		page := q.getLogPage(nvmeof.LogErrorInformation, 0, 0, 64*errorLogEntries)
		var e nvmeof.ErrorLogEntry
		for i, nsid := range []uint32{7, 6, 5} {
			require.NoError(t, e.UnmarshalBinary(page[i*64:(i+1)*64]))
			assert.Equal(t, uint64(3-i), e.ErrorCount)
			assert.Equal(t, uint16(1), e.SQID)
			assert.Equal(t, nsid, e.NSID)
			assert.Equal(t, nvmeof.TransportRDMA, e.TRTYPE)
			assert.Equal(t, nvmeof.IORead, e.Opcode)
			assert.Equal(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), e.Status)
			assert.Equal(t, uint16(nvmeof.CommandOffsetNSID), e.PEL)
		}
		assert.Equal(t, make([]byte, 64), page[3*64:4*64], "no fourth entry")

		// Offset and length are honoured: the page read in pieces is the
		// page read whole; past the end reads zeros.
		whole := q.getLogPage(nvmeof.LogErrorInformation, 0, 0, 4096)
		var pieces []byte
		for off := uint64(0); off < 4096; off += 1000 {
			pieces = append(pieces, q.getLogPage(nvmeof.LogErrorInformation, 0, off, min(1000, 4096-off))...)
		}
		assert.Equal(t, whole, pieces)
		tail := q.getLogPage(nvmeof.LogErrorInformation, 0, 4000, 200)
		assert.Equal(t, whole[4000:], tail[:96])
		assert.Equal(t, make([]byte, 104), tail[96:])
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.do(q.getLogPageCmd(nvmeof.LogErrorInformation, 0, 4100, 4), nil))

		// SMART / Health counts commands and data units.
		copy(io.data.Bytes(), bytes.Repeat([]byte{7}, 8192))
		require.NoError(t, io.do(io.writeCmd(1, 0, 16, 0, 8192), nil).cqe.Status.Err())
		require.NoError(t, io.do(io.readCmd(1, 0, 16, 0, 8192), nil).cqe.Status.Err())
		require.NoError(t, io.do(io.readCmd(1, 0, 1, 0, 512), nil).cqe.Status.Err())
		var smart nvmeof.SMARTLog
		require.NoError(t, smart.UnmarshalBinary(q.getLogPage(nvmeof.LogSMARTHealth, nvmeof.NSIDAll, 0, 512)))
		assert.Equal(t, uint64(2), smart.HostReadCommands.Lo)
		assert.Equal(t, uint64(1), smart.HostWriteCommands.Lo)
		assert.Equal(t, uint64(1), smart.DataUnitsRead.Lo, "8704 bytes is one (rounded up) thousand 512-byte units")
		assert.Equal(t, uint64(4), smart.ErrorLogEntries.Lo, "three reads and the log page offset")
		require.NoError(t, smart.UnmarshalBinary(q.getLogPage(nvmeof.LogSMARTHealth, 1, 0, 512)))
		assert.Equal(t, uint64(1), smart.HostWriteCommands.Lo)
		requireStatus(t, nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), q.do(q.getLogPageCmd(nvmeof.LogSMARTHealth, 9, 0, 512), nil))

		var fw nvmeof.FirmwareSlotLog
		require.NoError(t, fw.UnmarshalBinary(q.getLogPage(nvmeof.LogFirmwareSlot, 0, 0, 512)))
		assert.Equal(t, 1, fw.ActiveSlot())
		assert.Equal(t, DefaultFirmwareRevision, fw.FRS[0])

		// Unknown pages, the discovery page on an I/O controller, and
		// more than MDTS: refused.
		requireStatus(t, nvmeof.StatusInvalidLogPage.WithDNR(), q.do(q.getLogPageCmd(0xc0, 0, 0, 512), nil))
		requireStatus(t, nvmeof.StatusInvalidLogPage.WithDNR(), q.do(q.getLogPageCmd(nvmeof.LogDiscovery, 0, 0, 1024), nil))
		c := q.getLogPageCmd(nvmeof.LogErrorInformation, 0, 0, 4096)
		require.NoError(t, c.SetGetLogPage(nvmeof.LogErrorInformation, 0, DefaultRDMAMaxTransfer+4))
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.do(c, nil))
		// An SGL shorter than NUMD asks for.
		c = q.getLogPageCmd(nvmeof.LogSMARTHealth, 0, 0, 512)
		c.DPTR = q.keyed(0, 256, false)
		requireStatus(t, nvmeof.StatusDataSGLLengthInvalid.WithDNR(), q.do(c, nil))
	})
}

func TestFeatures(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen(), WithMaxIOQueues(8))
		q := adminQueue(t, tt.url, testSubNQN, 0)
		get := func(fid nvmeof.FeatureID, sel nvmeof.FeatureSelect) rawResponse {
			c := nvmeof.Command{Opcode: nvmeof.AdminGetFeatures, CID: q.cid()}
			c.CDW10 = uint32(fid) | uint32(sel)<<8
			return q.do(c, nil)
		}

		// Number of Queues: the grant is the smaller of the request and the limit.
		r := q.setFeature(nvmeof.FeatureNumberOfQueues, 31|31<<16)
		require.NoError(t, r.cqe.Status.Err())
		assert.Equal(t, uint32(7|7<<16), r.cqe.DW0)
		r = q.setFeature(nvmeof.FeatureNumberOfQueues, 2|3<<16)
		assert.Equal(t, uint32(2|2<<16), r.cqe.DW0)
		assert.Equal(t, uint32(2|2<<16), get(nvmeof.FeatureNumberOfQueues, nvmeof.SelectCurrent).cqe.DW0)
		assert.Equal(t, uint32(7|7<<16), get(nvmeof.FeatureNumberOfQueues, nvmeof.SelectDefault).cqe.DW0)
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.setFeature(nvmeof.FeatureNumberOfQueues, 0xffff))

		// Keep Alive Timer.
		require.NoError(t, q.setFeature(nvmeof.FeatureKeepAliveTimer, 60000).cqe.Status.Err())
		assert.Equal(t, uint32(60000), get(nvmeof.FeatureKeepAliveTimer, nvmeof.SelectCurrent).cqe.DW0)

		// Asynchronous Event Configuration: every defined bit is taken
		// (SPDK's host sends 0x11F), reserved bits are dropped.
		require.NoError(t, q.setFeature(nvmeof.FeatureAsyncEventConfig, 0x11f|1<<20).cqe.Status.Err())
		assert.Equal(t, uint32(0x11f), get(nvmeof.FeatureAsyncEventConfig, nvmeof.SelectCurrent).cqe.DW0)
		require.NoError(t, q.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECNamespaceAttribute)).cqe.Status.Err())
		assert.Equal(t, uint32(nvmeof.AECNamespaceAttribute), get(nvmeof.FeatureAsyncEventConfig, nvmeof.SelectCurrent).cqe.DW0)

		// Volatile Write Cache.
		assert.Equal(t, uint32(1), get(nvmeof.FeatureVolatileWriteCache, nvmeof.SelectCurrent).cqe.DW0)
		require.NoError(t, q.setFeature(nvmeof.FeatureVolatileWriteCache, 0).cqe.Status.Err())
		assert.Equal(t, uint32(0), get(nvmeof.FeatureVolatileWriteCache, nvmeof.SelectCurrent).cqe.DW0)
		assert.Equal(t, uint32(1), get(nvmeof.FeatureVolatileWriteCache, nvmeof.SelectDefault).cqe.DW0)

		// Capabilities: changeable, not saveable.
		assert.Equal(t, uint32(featureChangeable), get(nvmeof.FeatureKeepAliveTimer, nvmeof.SelectCapabilities).cqe.DW0)

		// The mandatory features that only hold what they are told.
		for _, f := range []struct {
			fid nvmeof.FeatureID
			v   uint32
		}{{nvmeof.FeatureArbitration, 0x01020307}, {nvmeof.FeaturePowerManagement, 2 << 5},
			{nvmeof.FeatureErrorRecovery, 100}, {nvmeof.FeatureWriteAtomicityNormal, 1}} {
			assert.Zero(t, get(f.fid, nvmeof.SelectCurrent).cqe.DW0, "%#x", f.fid)
			require.NoError(t, q.setFeature(f.fid, f.v).cqe.Status.Err(), "%#x", f.fid)
			assert.Equal(t, f.v, get(f.fid, nvmeof.SelectCurrent).cqe.DW0, "%#x", f.fid)
			assert.Zero(t, get(f.fid, nvmeof.SelectDefault).cqe.DW0, "%#x", f.fid)
		}
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.setFeature(nvmeof.FeaturePowerManagement, 1))          // PS 1: NPSS is 0
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.setFeature(nvmeof.FeatureErrorRecovery, 1<<16))        // DULBE
		requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.setFeature(nvmeof.FeatureTemperatureThreshold, 2<<20)) // THSEL 2
		assert.Equal(t, uint32(defaultTempOver), get(nvmeof.FeatureTemperatureThreshold, nvmeof.SelectCurrent).cqe.DW0)
		require.NoError(t, q.setFeature(nvmeof.FeatureTemperatureThreshold, 300).cqe.Status.Err())
		assert.Equal(t, uint32(300), get(nvmeof.FeatureTemperatureThreshold, nvmeof.SelectCurrent).cqe.DW0)
		assert.Equal(t, uint32(defaultTempOver), get(nvmeof.FeatureTemperatureThreshold, nvmeof.SelectDefault).cqe.DW0)
		// Host Identifier: set by Connect on a fabrics controller.
		requireStatus(t, nvmeof.StatusCommandSequenceError.WithDNR(), q.setFeature(nvmeof.FeatureHostIdentifier, 1))
		// Features not served, and Save: proper statuses.
		for _, fid := range []nvmeof.FeatureID{0x08, 0x09, 0x7f} {
			requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), q.setFeature(fid, 0))
			requireStatus(t, nvmeof.StatusInvalidField.WithDNR(), get(fid, nvmeof.SelectCurrent))
		}
		c := nvmeof.Command{Opcode: nvmeof.AdminSetFeatures, CID: q.cid()}
		c.SetFeature(nvmeof.FeatureKeepAliveTimer, 1000)
		c.CDW10 |= 1 << 31
		requireStatus(t, nvmeof.StatusFeatureNotSaveable.WithDNR(), q.do(c, nil))

		// Keep Alive and Abort.
		require.NoError(t, q.do(nvmeof.Command{Opcode: nvmeof.AdminKeepAlive}, nil).cqe.Status.Err())
		abort := nvmeof.Command{Opcode: nvmeof.AdminAbort}
		abort.SetAbort(1, 99)
		r = q.do(abort, nil)
		require.NoError(t, r.cqe.Status.Err())
		assert.Equal(t, nvmeof.AbortNotAborted, r.cqe.DW0)
	})
}

func TestAsyncEventNamespaceChange(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		q := adminQueue(t, tt.url, testSubNQN, 0)
		require.NoError(t, q.setFeature(nvmeof.FeatureAsyncEventConfig, uint32(nvmeof.AECNamespaceAttribute)).cqe.Status.Err())

		aer := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: q.cid()}
		q.submit(&aer, nil)
		_, answered := q.poll(aer.CID, 50*time.Millisecond)
		require.False(t, answered, "an AER is held until an event")

		dev, _ := blockdev.NewMemory(1 << 20)
		_, err := tt.sub.AddNamespace(NamespaceConfig{NSID: 2, Device: dev})
		require.NoError(t, err)
		r := q.wait(aer.CID)
		require.NoError(t, r.cqe.Status.Err())
		ev := nvmeof.ParseAsyncEvent(r.cqe.DW0)
		assert.Equal(t, nvmeof.AsyncEventNotice, ev.Type)
		assert.Equal(t, nvmeof.NoticeNamespaceAttributeChanged, ev.Info)
		assert.Equal(t, nvmeof.LogChangedNamespaceList, ev.LogPage)

		// A second change while the event is masked: the next AER waits
		// until the log page is read.
		aer2 := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: q.cid()}
		q.submit(&aer2, nil)
		_, err = tt.sub.RemoveNamespace(2)
		require.NoError(t, err)
		_, answered = q.poll(aer2.CID, 50*time.Millisecond)
		require.False(t, answered, "masked until the changed namespace list is read")
		ids, overflow, err := nvmeof.AppendChangedNamespaceList(nil, q.getLogPage(nvmeof.LogChangedNamespaceList, nvmeof.NSIDAll, 0, 4096))
		require.NoError(t, err)
		assert.False(t, overflow)
		assert.Equal(t, []uint32{2}, ids)
		r = q.wait(aer2.CID) // reading the log unmasked the pending event
		assert.Equal(t, nvmeof.LogChangedNamespaceList, nvmeof.ParseAsyncEvent(r.cqe.DW0).LogPage)
		ids, _, err = nvmeof.AppendChangedNamespaceList(nil, q.getLogPage(nvmeof.LogChangedNamespaceList, nvmeof.NSIDAll, 0, 4096))
		require.NoError(t, err)
		assert.Empty(t, ids, "reading the log cleared it")

		// At most AERL+1 held; the next is refused.
		var cids []uint16
		for range asyncEventLimit {
			c := nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest, CID: q.cid()}
			q.submit(&c, nil)
			cids = append(cids, c.CID)
		}
		requireStatus(t, nvmeof.StatusAsyncEventRequestLimitExceeded.WithDNR(), q.do(nvmeof.Command{Opcode: nvmeof.AdminAsyncEventRequest}, nil))
		// Closing the target answers the held ones.
		require.NoError(t, tt.Close())
		for _, cid := range cids {
			requireStatus(t, nvmeof.StatusAbortedSQDeletion, q.wait(cid))
		}
	})
}
