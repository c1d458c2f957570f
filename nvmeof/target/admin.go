package target

import (
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Admin commands: Identify, Get Log Page, Set and Get Features, Keep
// Alive, Asynchronous Event Request, Abort (NVMe Base 2.x, 5).

// --- Identify ---

func prepareIdentify(r *request) nvmeof.Status {
	ctrl, nsid := r.q.ctrl, r.cmd.NSID
	switch r.cmd.CNS() {
	case nvmeof.CNSController:
	case nvmeof.CNSNamespace:
		if ctrl.discovery {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		if nsid == 0 || nsid > MaxNamespaces {
			return r.fail(nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), nvmeof.CommandOffsetNSID)
		}
	case nvmeof.CNSNamespaceIDDescriptors:
		if ctrl.discovery {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		if ctrl.sub.Namespace(nsid) == nil {
			return r.fail(nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), nvmeof.CommandOffsetNSID)
		}
	case nvmeof.CNSActiveNamespaceList, nvmeof.CNSActiveNamespaceListCommandSet:
		if ctrl.discovery {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		if nsid >= 0xfffffffe {
			return r.fail(nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), nvmeof.CommandOffsetNSID)
		}
		if r.cmd.CNS() == nvmeof.CNSActiveNamespaceListCommandSet && r.cmd.CSI() != nvmeof.CSINVM {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
	case nvmeof.CNSNamespaceCommandSet, nvmeof.CNSNamespaceIndependent:
		if ctrl.discovery {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		if nsid == 0 || nsid > MaxNamespaces {
			return r.fail(nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), nvmeof.CommandOffsetNSID)
		}
		if r.cmd.CNS() == nvmeof.CNSNamespaceCommandSet && r.cmd.CSI() != nvmeof.CSINVM {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
	case nvmeof.CNSControllerCommandSet:
		// Another CSI is refused, as nvmet refuses it: SPDK's host asks
		// for KV and ZNS whatever the controller reports, and takes a
		// structure of zeros (what SPDK's target answers) for support of
		// that command set, then fails on the ZNS log pages.
		if ctrl.discovery || r.cmd.CSI() != nvmeof.CSINVM {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
	case nvmeof.CNSCommandSetList:
		if ctrl.discovery {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
	default:
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
	}
	r.dir, r.dataLen = nvmeof.ControllerToHost, nvmeof.IdentifyDataSize
	return nvmeof.StatusSuccess
}

func executeIdentify(r *request) nvmeof.Status {
	ctrl, buf := r.q.ctrl, r.data[:nvmeof.IdentifyDataSize]
	var err error
	switch r.cmd.CNS() {
	case nvmeof.CNSController:
		id := ctrl.identify()
		_, err = id.MarshalTo(buf)
	case nvmeof.CNSNamespace:
		ns := ctrl.sub.Namespace(r.cmd.NSID)
		if ns == nil {
			clear(buf) // an inactive NSID: all zeros
			return nvmeof.StatusSuccess
		}
		id := ns.identify()
		switch ctrl.ana.state(ns.anaGroup) {
		case nvmeof.ANAInaccessible, nvmeof.ANAPersistentLoss:
			// No blocks can be used through this path (as nvmet says).
			id.NUSE = 0
		}
		_, err = id.MarshalTo(buf)
	case nvmeof.CNSNamespaceIDDescriptors:
		ns := ctrl.sub.Namespace(r.cmd.NSID)
		if ns == nil {
			return r.fail(nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), nvmeof.CommandOffsetNSID)
		}
		ids := nvmeof.NamespaceIDs{NGUID: ns.nguid, UUID: ns.uuid, CSI: nvmeof.CSINVM, HasNGUID: true, HasUUID: true, HasCSI: true}
		_, err = ids.MarshalTo(buf)
	case nvmeof.CNSActiveNamespaceList, nvmeof.CNSActiveNamespaceListCommandSet:
		// Every namespace is of the NVM command set.
		_, err = nvmeof.MarshalNamespaceList(buf, nvmeof.ActiveNamespacesAfter(ctrl.sub.ns.Load().ids, r.cmd.NSID))
	case nvmeof.CNSNamespaceCommandSet:
		// No protection information, no storage tags: all zeros, for an
		// inactive NSID too.
		var id nvmeof.IdentifyNamespaceNVM
		_, err = id.MarshalTo(buf)
	case nvmeof.CNSNamespaceIndependent:
		ns := ctrl.sub.Namespace(r.cmd.NSID)
		if ns == nil {
			clear(buf)
			return nvmeof.StatusSuccess
		}
		id := nvmeof.IdentifyNamespaceIndependent{NMIC: 1, RESCAP: ns.rescap(), ANAGRPID: ns.anaGroup, NSTAT: nvmeof.NSTATReady}
		_, err = id.MarshalTo(buf)
	case nvmeof.CNSControllerCommandSet:
		id := ctrl.identifyNVM()
		_, err = id.MarshalTo(buf)
	case nvmeof.CNSCommandSetList:
		// One combination, index 0: the NVM command set alone.
		var l nvmeof.CommandSetList
		l[0] = nvmeof.CommandSetVectorNVM
		_, err = l.MarshalTo(buf)
	}
	if err != nil {
		ctrl.log.Error("identify data", "cns", r.cmd.CNS(), "err", err)
		return nvmeof.StatusInternalError
	}
	return nvmeof.StatusSuccess
}

// identify returns the Identify Controller data of c.
func (c *controller) identify() nvmeof.IdentifyController {
	cfg := &c.t.cfg
	id := nvmeof.IdentifyController{
		SN:        c.sub.serial,
		MN:        cfg.modelNumber,
		FR:        cfg.firmwareRevision,
		RAB:       6,
		CMIC:      nvmeof.CMICMultiPort | nvmeof.CMICMultiController | nvmeof.CMICANA,
		MDTS:      mdts(c.admin.maxTransfer()), // the admin queue's binding; each queue checks its own
		CNTLID:    c.cntlid,
		VER:       specVersion,
		CTRATT:    nvmeof.CTRATTHostID128 | ctrattTBKAS,
		CNTRLTYPE: nvmeof.ControllerTypeIO,
		ACL:       abortLimit - 1,
		AERL:      asyncEventLimit - 1,
		FRMW:      1<<1 | 1, // one slot, slot 1 read-only
		LPA:       nvmeof.LPASMARTPerNamespace | nvmeof.LPAExtendedData,
		ELPE:      errorLogEntries - 1,
		KAS:       keepAliveSupport,
		ANATT:     anaTransitionTime,
		ANACAP:    anaCapabilities,
		ANAGRPMAX: MaxANAGroups,
		NANAGRPID: MaxANAGroups,
		SQES:      6<<4 | 6,
		CQES:      4<<4 | 4,
		MAXCMD:    uint16(cfg.maxQueueEntries),
		NN:        MaxNamespaces,
		MNAN:      MaxNamespaces, // Linux hosts refuse ANA without it
		ONCS:      nvmeof.ONCSDatasetManagement | nvmeof.ONCSWriteZeroes | nvmeof.ONCSReservations,
		VWC:       nvmeof.VWCPresent | nvmeof.VWCFlushBroadcast,
		SGLS:      nvmeof.SGLSSupported | nvmeof.SGLSOffsetAddress,
		SUBNQN:    c.sub.nqn,
		IOCCSZ:    uint32(cfg.capsuleSize() / 16),
		IORCSZ:    nvmeof.CompletionSize / 16,
		ICDOFF:    0,
		MSDBD:     1,
		OFCS:      nvmeof.OFCSDisconnect,
		OAES:      oaesNamespaceAttribute | oaesANAChange,
	}
	if _, tcp := c.admin.tr.(*tcpQueue); !tcp {
		// Keyed SGLs are the RDMA transport's: a TCP controller moves
		// data with Transport SGL Data Blocks, and says so by leaving
		// the bit clear, as Linux nvmet does.
		id.SGLS |= nvmeof.SGLSKeyedDataBlock
	}
	if c.discovery {
		id.CNTRLTYPE = nvmeof.ControllerTypeDiscovery
		id.CMIC = 0
		id.NN = 0
		id.ONCS = 0
		id.VWC = 0
		id.OAES = oaesDiscoveryLogChange
		id.ANATT, id.ANACAP, id.ANAGRPMAX, id.NANAGRPID, id.MNAN = 0, 0, 0, 0, 0
		id.LPA = nvmeof.LPAExtendedData
		id.DCTYPE = 1 // direct discovery controller: reports its own subsystems
		id.OFCS = 0
		id.FRMW = 0
	}
	return id
}

// identifyNVM returns the NVM command set specific Identify Controller
// data: Write Zeroes limited as the host library splits it (MDTS, in
// 4 KiB pages; Write Zeroes moves no data, but hosts that read WZSL
// keep to it), no other limit.
func (c *controller) identifyNVM() nvmeof.IdentifyControllerNVM {
	return nvmeof.IdentifyControllerNVM{WZSL: mdts(c.admin.maxTransfer())}
}

// rescap is RESCAP: every reservation type, IEKEY ignoring CRKEY, and
// persistence through power loss where the namespace has a
// ReservationStore (reservation.go, ptpl.go).
func (ns *Namespace) rescap() uint8 {
	c := nvmeof.RESCAPAllTypes | nvmeof.RESCAPIgnoreExistingKey
	if ns.res.store != nil {
		c |= nvmeof.RESCAPPersistThroughPowerLoss
	}
	return c
}

// identify returns the Identify Namespace data of ns.
func (ns *Namespace) identify() nvmeof.IdentifyNamespace {
	id := nvmeof.IdentifyNamespace{
		NSZE:   ns.blocks,
		NCAP:   ns.blocks,
		NUSE:   ns.blocks,
		NSFEAT: 0,
		NLBAF:  0,
		NMIC:   1, // may be attached to several controllers
		DLFEAT: nvmeof.DLFEATReadZeroes | nvmeof.DLFEATWriteZeroesDeallocate,
		RESCAP: ns.rescap(),
		// ANAGRPID: the group's state on the listener decides whether
		// I/O runs (ana.go).
		ANAGRPID: ns.anaGroup,
		NGUID:    ns.nguid,
	}
	id.LBAF[0] = nvmeof.LBAFormat{LBADS: uint8(ns.blockShift)}
	return id
}

// --- Get Log Page ---

func prepareGetLogPage(r *request) nvmeof.Status {
	ctrl, c := r.q.ctrl, &r.cmd
	length := c.LogPageLength()
	if length > uint64(r.q.maxTransfer()) {
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
	}
	if c.OffsetType() {
		// Offsets are byte offsets only (LPA does not claim index offsets).
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW14)
	}
	switch lid := c.LID(); {
	case lid == nvmeof.LogErrorInformation:
	case lid == nvmeof.LogDiscovery && ctrl.discovery:
	case ctrl.discovery:
		return r.fail(nvmeof.StatusInvalidLogPage.WithDNR(), nvmeof.CommandOffsetCDW10)
	case lid == nvmeof.LogSMARTHealth:
		if nsid := c.NSID; nsid != 0 && nsid != nvmeof.NSIDAll && ctrl.sub.Namespace(nsid) == nil {
			return r.fail(nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), nvmeof.CommandOffsetNSID)
		}
	case lid == nvmeof.LogFirmwareSlot, lid == nvmeof.LogChangedNamespaceList, lid == nvmeof.LogReservationNotification,
		lid == nvmeof.LogANA:
	default:
		return r.fail(nvmeof.StatusInvalidLogPage.WithDNR(), nvmeof.CommandOffsetCDW10)
	}
	r.dir, r.dataLen = nvmeof.ControllerToHost, int(length)
	return nvmeof.StatusSuccess
}

func executeGetLogPage(r *request) nvmeof.Status {
	ctrl, c := r.q.ctrl, &r.cmd
	offset := c.LogPageOffset()
	var size int
	switch c.LID() {
	case nvmeof.LogErrorInformation:
		size = errorLogEntries * nvmeof.ErrorLogEntrySize
	case nvmeof.LogSMARTHealth:
		size = nvmeof.SMARTLogSize
	case nvmeof.LogFirmwareSlot:
		size = nvmeof.FirmwareSlotLogSize
	case nvmeof.LogChangedNamespaceList:
		size = nvmeof.ChangedNamespaceLogSize
	case nvmeof.LogReservationNotification:
		size = nvmeof.ResNoticeLogSize
	}
	var page []byte
	switch c.LID() {
	case nvmeof.LogDiscovery:
		page = ctrl.t.discoveryLogPage(ctrl.hostNQN)
	case nvmeof.LogANA:
		// What it holds, padded with zeros to the largest page Identify
		// Controller allows (NANAGRPID, MNAN): a host reads that size,
		// in transfers of at most MDTS, as Linux does. An offset past it
		// is refused by CopyLogPage below (the event is unmasked even
		// then).
		page = ctrl.anaLogPage(c.ANAReturnGroupsOnly(), c.RAE())
		if m := int(nvmeof.MaxANALogSize(MaxANAGroups, MaxNamespaces)); len(page) < m {
			page = append(page, make([]byte, m-len(page))...)
		}
	default:
		if offset%4 != 0 || offset > uint64(size) {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW12)
		}
		page = make([]byte, size)
	}
	switch c.LID() {
	case nvmeof.LogErrorInformation:
		ctrl.errorLogPage(page)
	case nvmeof.LogSMARTHealth:
		ctrl.smartLog(c.NSID).MarshalTo(page)
	case nvmeof.LogFirmwareSlot:
		fw := nvmeof.FirmwareSlotLog{AFI: 1}
		fw.FRS[0] = ctrl.t.cfg.firmwareRevision
		fw.MarshalTo(page)
	case nvmeof.LogChangedNamespaceList:
		ctrl.changedNamespacePage(page, c.RAE())
	case nvmeof.LogReservationNotification:
		ctrl.reservationNoticePage(page, c.RAE())
	}
	if st := nvmeof.CopyLogPage(r.data[:r.dataLen], page, offset); !st.Success() {
		return r.fail(st, nvmeof.CommandOffsetCDW12)
	}
	if c.LID() == nvmeof.LogDiscovery {
		ctrl.discoveryPageRead(c.RAE())
	}
	return nvmeof.StatusSuccess
}

// smartLog returns the SMART / Health log of one namespace, or of all of
// them for NSID 0 or FFFFFFFFh.
func (c *controller) smartLog(nsid uint32) *nvmeof.SMARTLog {
	var reads, writes, bytesRead, bytesWritten uint64
	for _, ns := range c.sub.Namespaces() {
		if nsid != 0 && nsid != nvmeof.NSIDAll && ns.nsid != nsid {
			continue
		}
		reads += ns.readCommands.Load()
		writes += ns.writeCommands.Load()
		bytesRead += ns.bytesRead.Load()
		bytesWritten += ns.bytesWritten.Load()
	}
	// Data units are thousands of 512-byte units, rounded up.
	units := func(b uint64) nvmeof.Uint128 { return nvmeof.Uint128{Lo: (b + 512*1000 - 1) / (512 * 1000)} }
	return &nvmeof.SMARTLog{
		DataUnitsRead:     units(bytesRead),
		DataUnitsWritten:  units(bytesWritten),
		HostReadCommands:  nvmeof.Uint128{Lo: reads},
		HostWriteCommands: nvmeof.Uint128{Lo: writes},
		PowerOnHours:      nvmeof.Uint128{Lo: uint64(time.Since(c.t.started) / time.Hour)},
		ErrorLogEntries:   nvmeof.Uint128{Lo: c.errorCount()},
	}
}

func (c *controller) errorCount() uint64 {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.errCount
}

// --- Set Features and Get Features ---

// featureChangeable is DW0 of Get Features with SEL 011b for a feature
// Set Features changes: changeable, not saveable, not namespace
// specific.
const featureChangeable = 1 << 2

// featureValues holds the features that only store what the host sets
// (controller.mu guards them). Arbitration, Power Management,
// Temperature Threshold, Error Recovery and Write Atomicity Normal are
// mandatory; the controller has no use for them but reports back what it
// was told, as SPDK's nvmf_tgt does (Linux nvmet reports zeros and
// refuses to set them).
type featureValues struct {
	arbitration    uint32
	powerMgmt      uint32
	tempOver       uint16 // composite temperature, over threshold (Kelvin)
	tempUnder      uint16
	errorRecovery  uint32
	writeAtomicity uint32
	// resMask is the Reservation Notification Mask by NSID (bits 3:1:
	// registration preempted, reservation released, reservation
	// preempted); no notices are sent yet, so it is only kept.
	resMask map[uint32]uint32
}

// Feature values the host may set and get back.
const (
	// defaultTempOver is the over temperature threshold a controller
	// starts with: 70 °C in Kelvin.
	defaultTempOver = 343
	// powerMgmtWH and powerMgmtPS are Workload Hint and Power State:
	// NPSS is 0, so the one power state is 0.
	powerMgmtWH = 0x7 << 5
	// errRecoveryTLER is the Time Limited Error Recovery field; DULBE
	// (bit 16) is not supported.
	errRecoveryTLER  = 0xffff
	errRecoveryDULBE = 1 << 16
	// tempSelAll is TMPSEL 1111b: every sensor, in Set Features.
	tempSelAll = 0xf
	// aecDefined are the AEC bits the specification defines: the SMART
	// critical warnings, the notices in bits 15:8, and Discovery Log
	// Page Change. The others are reserved and dropped.
	aecDefined nvmeof.AsyncEventConfig = 0xffff | nvmeof.AECDiscoveryLogPageChange
	// hostIDSize is the 128-bit host identifier Get Features 81h returns.
	hostIDSize = 16
	// hostIDEXHID is CDW11 bit 0 of Get Features 81h: the 128-bit form.
	hostIDEXHID = 1
	// featureNamespaceSpecific is DW0 bit 1 of Get Features with SEL
	// 011b: the feature is namespace specific.
	featureNamespaceSpecific = 1 << 1
	// resMaskBits are the defined bits of the Reservation Notification
	// Mask.
	resMaskBits = 0xe
)

func prepareFeatures(r *request) nvmeof.Status {
	if r.cmd.Opcode == nvmeof.AdminSetFeatures && r.cmd.Save() {
		return r.fail(nvmeof.StatusFeatureNotSaveable.WithDNR(), nvmeof.CommandOffsetCDW10)
	}
	if r.cmd.Opcode == nvmeof.AdminGetFeatures && r.cmd.FID() == nvmeof.FeatureHostIdentifier &&
		r.q.ctrl.featureSupported(nvmeof.FeatureHostIdentifier) && r.cmd.Select() != nvmeof.SelectCapabilities {
		// Get Features Host Identifier returns the 128-bit host
		// identifier as data.
		if r.cmd.FeatureValue()&hostIDEXHID == 0 {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
		r.dir, r.dataLen = nvmeof.ControllerToHost, hostIDSize
	}
	// No other feature served carries a data buffer.
	return nvmeof.StatusSuccess
}

// featureSupported reports whether the controller has feature fid.
func (c *controller) featureSupported(fid nvmeof.FeatureID) bool {
	switch fid {
	case nvmeof.FeatureKeepAliveTimer, nvmeof.FeatureAsyncEventConfig:
		return true
	case nvmeof.FeatureNumberOfQueues, nvmeof.FeatureVolatileWriteCache,
		nvmeof.FeatureArbitration, nvmeof.FeaturePowerManagement, nvmeof.FeatureTemperatureThreshold,
		nvmeof.FeatureErrorRecovery, nvmeof.FeatureWriteAtomicityNormal, nvmeof.FeatureHostIdentifier,
		nvmeof.FeatureReservationMask, nvmeof.FeatureReservationPersist:
		return !c.discovery
	}
	return false
}

// supportedEvents is the AEC bits c can report.
func (c *controller) supportedEvents() nvmeof.AsyncEventConfig {
	if c.discovery {
		return nvmeof.AECDiscoveryLogPageChange
	}
	return nvmeof.AECNamespaceAttribute
}

// temperatureThreshold checks TMPSEL and THSEL of a Temperature
// Threshold feature (CDW11 bits 19:16 and 21:20): sensors 0 (the
// composite) to 8, or all of them (1111b, setAll) in Set Features, and
// an over (0) or under (1) threshold.
func temperatureThreshold(v uint32, setAll bool) (tmpsel, thsel uint32, ok bool) {
	tmpsel, thsel = v>>16&0xf, v>>20&0x3
	return tmpsel, thsel, thsel <= 1 && (tmpsel <= 8 || setAll && tmpsel == tempSelAll)
}

// reservationFeatureNSID checks the NSID of the namespace-specific
// reservation features: an active namespace, or FFFFFFFFh (all of them)
// when all is allowed (Set Features).
func reservationFeatureNSID(r *request, all bool) nvmeof.Status {
	nsid := r.cmd.NSID
	if all && nsid == nvmeof.NSIDAll {
		return nvmeof.StatusSuccess
	}
	if r.q.ctrl.sub.Namespace(nsid) == nil {
		return r.fail(nvmeof.StatusInvalidNamespaceOrFormat.WithDNR(), nvmeof.CommandOffsetNSID)
	}
	return nvmeof.StatusSuccess
}

func executeSetFeatures(r *request) nvmeof.Status {
	ctrl, fid, v := r.q.ctrl, r.cmd.FID(), r.cmd.FeatureValue()
	if !ctrl.featureSupported(fid) {
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
	}
	if fid == nvmeof.FeatureReservationMask || fid == nvmeof.FeatureReservationPersist {
		if st := reservationFeatureNSID(r, true); !st.Success() {
			return st
		}
	}
	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()
	switch fid {
	case nvmeof.FeatureNumberOfQueues:
		n := nvmeof.NumberOfQueues(v)
		if !n.Valid() {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
		if ctrl.ioCount > 0 {
			return r.fail(nvmeof.StatusCommandSequenceError.WithDNR(), nvmeof.CommandOffsetCDW10)
		}
		ctrl.queuesGranted = min(n.SubmissionQueues(), n.CompletionQueues(), ctrl.t.cfg.maxIOQueues)
		r.rsp.DW0 = ctrl.numberOfQueuesLocked()
	case nvmeof.FeatureKeepAliveTimer:
		kato := time.Duration(v) * time.Millisecond
		if kato == 0 && ctrl.discovery {
			kato = DiscoveryKATO
		}
		ctrl.setKeepAliveLocked(kato)
	case nvmeof.FeatureAsyncEventConfig:
		// Every defined bit is taken, as nvmet and SPDK take the SMART
		// critical warnings (0x11F is what SPDK's host sends): events
		// this controller never raises are never reported.
		ctrl.aec = nvmeof.AsyncEventConfig(v) & aecDefined
		ctrl.deliverEventsLocked()
	case nvmeof.FeatureVolatileWriteCache:
		ctrl.wce.Store(nvmeof.VolatileWriteCache(v).WCE())
	case nvmeof.FeatureArbitration:
		ctrl.feat.arbitration = v
	case nvmeof.FeaturePowerManagement:
		if v&^powerMgmtWH != 0 {
			// A power state other than 0: NPSS is 0.
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
		ctrl.feat.powerMgmt = v
	case nvmeof.FeatureTemperatureThreshold:
		tmpsel, thsel, ok := temperatureThreshold(v, true)
		if !ok {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
		if tmpsel == 0 || tmpsel == tempSelAll {
			if thsel == 0 {
				ctrl.feat.tempOver = uint16(v)
			} else {
				ctrl.feat.tempUnder = uint16(v)
			}
		}
	case nvmeof.FeatureErrorRecovery:
		if v&errRecoveryDULBE != 0 {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
		ctrl.feat.errorRecovery = v & errRecoveryTLER
	case nvmeof.FeatureWriteAtomicityNormal:
		ctrl.feat.writeAtomicity = v & 1
	case nvmeof.FeatureHostIdentifier:
		// On a fabrics controller the host identifier comes with Connect.
		return r.fail(nvmeof.StatusCommandSequenceError.WithDNR(), nvmeof.CommandOffsetCDW10)
	case nvmeof.FeatureReservationMask:
		if ctrl.feat.resMask == nil {
			ctrl.feat.resMask = map[uint32]uint32{}
		}
		if r.cmd.NSID == nvmeof.NSIDAll {
			for _, ns := range ctrl.sub.Namespaces() {
				ctrl.feat.resMask[ns.nsid] = v & resMaskBits
			}
		} else {
			ctrl.feat.resMask[r.cmd.NSID] = v & resMaskBits
		}
	case nvmeof.FeatureReservationPersist:
		if st := setPTPL(r, v&1 != 0); !st.Success() {
			return st
		}
	}
	return nvmeof.StatusSuccess
}

func executeGetFeatures(r *request) nvmeof.Status {
	ctrl, fid, sel := r.q.ctrl, r.cmd.FID(), r.cmd.Select()
	if !ctrl.featureSupported(fid) {
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
	}
	if sel > nvmeof.SelectCapabilities {
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW10)
	}
	if fid == nvmeof.FeatureReservationMask || fid == nvmeof.FeatureReservationPersist {
		if st := reservationFeatureNSID(r, false); !st.Success() {
			return st
		}
	}
	if sel == nvmeof.SelectCapabilities {
		switch fid {
		case nvmeof.FeatureHostIdentifier:
		case nvmeof.FeatureReservationMask, nvmeof.FeatureReservationPersist:
			r.rsp.DW0 = featureChangeable | featureNamespaceSpecific
		default:
			r.rsp.DW0 = featureChangeable
		}
		return nvmeof.StatusSuccess
	}
	current := sel == nvmeof.SelectCurrent // default and saved are the same: nothing is saveable
	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()
	switch fid {
	case nvmeof.FeatureNumberOfQueues:
		if current {
			r.rsp.DW0 = ctrl.numberOfQueuesLocked()
		} else {
			n := uint32(ctrl.t.cfg.maxIOQueues - 1)
			r.rsp.DW0 = n | n<<16
		}
	case nvmeof.FeatureKeepAliveTimer:
		switch {
		case current:
			r.rsp.DW0 = uint32(ctrl.kato / time.Millisecond)
		case ctrl.discovery:
			r.rsp.DW0 = uint32(DiscoveryKATO / time.Millisecond)
		}
	case nvmeof.FeatureAsyncEventConfig:
		if current {
			r.rsp.DW0 = uint32(ctrl.aec)
		}
	case nvmeof.FeatureVolatileWriteCache:
		if !current || ctrl.wce.Load() {
			r.rsp.DW0 = 1
		}
	case nvmeof.FeatureArbitration:
		if current {
			r.rsp.DW0 = ctrl.feat.arbitration
		}
	case nvmeof.FeaturePowerManagement:
		if current {
			r.rsp.DW0 = ctrl.feat.powerMgmt
		}
	case nvmeof.FeatureTemperatureThreshold:
		tmpsel, thsel, ok := temperatureThreshold(r.cmd.FeatureValue(), false)
		if !ok {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
		var th uint16
		switch {
		case tmpsel != 0:
			// No other sensor: their thresholds read as 0.
		case thsel == 0 && current:
			th = ctrl.feat.tempOver
		case thsel == 0:
			th = defaultTempOver
		case current:
			th = ctrl.feat.tempUnder
		}
		r.rsp.DW0 = uint32(th) | tmpsel<<16 | thsel<<20
	case nvmeof.FeatureErrorRecovery:
		if current {
			r.rsp.DW0 = ctrl.feat.errorRecovery
		}
	case nvmeof.FeatureWriteAtomicityNormal:
		if current {
			r.rsp.DW0 = ctrl.feat.writeAtomicity
		}
	case nvmeof.FeatureHostIdentifier:
		copy(r.data[:hostIDSize], ctrl.hostID[:])
	case nvmeof.FeatureReservationMask:
		if current {
			r.rsp.DW0 = ctrl.feat.resMask[r.cmd.NSID]
		}
	case nvmeof.FeatureReservationPersist:
		if ns := ctrl.sub.Namespace(r.cmd.NSID); current && ns != nil {
			ns.res.mu.Lock()
			if ns.res.ptpl {
				r.rsp.DW0 = 1
			}
			ns.res.mu.Unlock()
		}
	}
	return nvmeof.StatusSuccess
}

// numberOfQueuesLocked is the Number of Queues value granted: NSQA and
// NCQA, 0's based.
func (c *controller) numberOfQueuesLocked() uint32 {
	n := uint32(c.queuesGranted - 1)
	return n | n<<16
}

// --- Keep Alive, Asynchronous Event Request, Abort ---

func executeKeepAlive(r *request) nvmeof.Status {
	// Every command restarts the keep-alive period (queue.dispatch sets
	// the controller's traffic flag); Keep Alive has nothing else to do.
	return nvmeof.StatusSuccess
}

func executeAsyncEventRequest(r *request) nvmeof.Status { return r.q.ctrl.holdAER(r) }

func executeAbort(r *request) nvmeof.Status {
	// Commands are not queued inside the controller: by the time an Abort
	// runs, the command it names has completed or is being executed. The
	// spec allows a controller to complete Abort without aborting.
	r.rsp.DW0 = nvmeof.AbortNotAborted
	return nvmeof.StatusSuccess
}
