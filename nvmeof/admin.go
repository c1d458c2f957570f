package nvmeof

import "fmt"

// Admin command opcodes a fabrics controller serves (NVMe Base 2.x, 5).
const (
	AdminGetLogPage        Opcode = 0x02
	AdminIdentify          Opcode = 0x06
	AdminAbort             Opcode = 0x08
	AdminSetFeatures       Opcode = 0x09
	AdminGetFeatures       Opcode = 0x0a
	AdminAsyncEventRequest Opcode = 0x0c
	AdminKeepAlive         Opcode = 0x18
)

// --- Identify (NVMe Base 2.x, 5.2.13) ---

// IdentifyDataSize is the size of every Identify data structure.
const IdentifyDataSize = 4096

// CNS is the Controller or Namespace Structure field of Identify.
type CNS uint8

// Identify CNS values.
const (
	CNSNamespace              CNS = 0x00 // Identify Namespace (NVM)
	CNSController             CNS = 0x01 // Identify Controller
	CNSActiveNamespaceList    CNS = 0x02 // active namespace ID list
	CNSNamespaceIDDescriptors CNS = 0x03 // namespace identification descriptor list
)

// Command set identifiers (CSI).
const (
	CSINVM uint8 = 0x00 // NVM Command Set
	CSIZNS uint8 = 0x02 // Zoned Namespace Command Set
)

// CNS returns the CNS field (CDW10 bits 7:0) of an Identify command.
func (c *Command) CNS() CNS { return CNS(bits(c.CDW10, 0, 8)) }

// CNTID returns the Controller Identifier field (CDW10 bits 31:16).
func (c *Command) CNTID() uint16 { return uint16(c.CDW10 >> 16) }

// CSI returns the Command Set Identifier field (CDW11 bits 31:24).
func (c *Command) CSI() uint8 { return uint8(c.CDW11 >> 24) }

// SetIdentify sets the CNS and CNTID fields.
func (c *Command) SetIdentify(cns CNS, cntid uint16) {
	c.CDW10 = uint32(cns) | uint32(cntid)<<16
}

// --- Get Log Page (NVMe Base 2.x, 5.2.12) ---

// LogPageID is a Log Page Identifier.
type LogPageID uint8

// Log page identifiers.
const (
	LogSupportedPages          LogPageID = 0x00
	LogErrorInformation        LogPageID = 0x01
	LogSMARTHealth             LogPageID = 0x02
	LogFirmwareSlot            LogPageID = 0x03
	LogChangedNamespaceList    LogPageID = 0x04
	LogCommandsSupported       LogPageID = 0x05
	LogANA                     LogPageID = 0x0c // Asymmetric Namespace Access
	LogDiscovery               LogPageID = 0x70
	LogReservationNotification LogPageID = 0x80
)

// Get Log Page field positions.
const (
	glpLIDShift   = 0  // CDW10 7:0
	glpLSPShift   = 8  // CDW10 14:8
	glpRAEBit     = 15 // CDW10 15
	glpNUMDLShift = 16 // CDW10 31:16
	glpOTBit      = 23 // CDW14 23
)

// LID returns the Log Page Identifier (CDW10 bits 7:0).
func (c *Command) LID() LogPageID { return LogPageID(bits(c.CDW10, glpLIDShift, 8)) }

// LSP returns the Log Specific Parameter (CDW10 bits 14:8).
func (c *Command) LSP() uint8 { return uint8(bits(c.CDW10, glpLSPShift, 7)) }

// ANAReturnGroupsOnly reports the RGO bit of the LSP (bit 0), which asks
// the ANA log page for its descriptors without their NSID lists.
func (c *Command) ANAReturnGroupsOnly() bool { return c.LSP()&LSPANAReturnGroupsOnly != 0 }

// RAE reports Retain Asynchronous Event (CDW10 bit 15).
func (c *Command) RAE() bool { return bit(c.CDW10, glpRAEBit) }

// NUMDL returns Number of Dwords Lower (CDW10 bits 31:16).
func (c *Command) NUMDL() uint16 { return uint16(c.CDW10 >> glpNUMDLShift) }

// NUMDU returns Number of Dwords Upper (CDW11 bits 15:0).
func (c *Command) NUMDU() uint16 { return uint16(c.CDW11) }

// LSI returns the Log Specific Identifier (CDW11 bits 31:16).
func (c *Command) LSI() uint16 { return uint16(c.CDW11 >> 16) }

// LPOL returns Log Page Offset Lower (CDW12).
func (c *Command) LPOL() uint32 { return c.CDW12 }

// LPOU returns Log Page Offset Upper (CDW13).
func (c *Command) LPOU() uint32 { return c.CDW13 }

// OffsetType reports the OT bit (CDW14 bit 23): the offset is an index
// into the log page's list of entries rather than a byte offset.
func (c *Command) OffsetType() bool { return bit(c.CDW14, glpOTBit) }

// LogPageDwords returns the number of dwords asked for: NUMDU:NUMDL, a 0's
// based value, plus one (1 to 2^32).
func (c *Command) LogPageDwords() uint64 {
	return (uint64(c.NUMDU())<<16 | uint64(c.NUMDL())) + 1
}

// LogPageLength returns the number of bytes asked for: LogPageDwords * 4.
func (c *Command) LogPageLength() uint64 { return c.LogPageDwords() * 4 }

// LogPageOffset returns the log page offset, LPOU:LPOL.
func (c *Command) LogPageOffset() uint64 { return uint64(c.LPOU())<<32 | uint64(c.LPOL()) }

// SetGetLogPage sets the fields of a Get Log Page command asking for
// length bytes of log page lid from byte offset. length and offset must be
// multiples of 4 and length must be between 4 and 2^34.
func (c *Command) SetGetLogPage(lid LogPageID, offset, length uint64) error {
	if length == 0 || length%4 != 0 || length/4 > 1<<32 {
		return &FieldError{Structure: "Get Log Page command", Field: "NUMDL", Offset: CommandOffsetCDW10, Err: ErrFieldValue}
	}
	if offset%4 != 0 {
		return &FieldError{Structure: "Get Log Page command", Field: "LPOL", Offset: CommandOffsetCDW12, Err: ErrFieldValue}
	}
	numd := length/4 - 1
	c.CDW10 = uint32(lid) | uint32(numd&0xffff)<<glpNUMDLShift
	c.CDW11 = setBits(c.CDW11, 0, 16, uint32(numd>>16))
	c.CDW12 = uint32(offset)
	c.CDW13 = uint32(offset >> 32)
	c.CDW14 = setBit(c.CDW14, glpOTBit, false)
	return nil
}

// CopyLogPage copies the part of a rendered log page that a Get Log Page
// command asks for, page[offset:offset+len(dst)], into dst and clears the
// part of dst that lies past the end of the page (the specification leaves
// it undefined; zeros leak nothing). It returns the status to complete the
// command with: Invalid Field in Command when offset is past the end of
// the page or not a multiple of 4 (NVMe Base 2.x, 5.2.12, LPOL), success
// otherwise. An offset equal to the page size is allowed and returns zeros.
func CopyLogPage(dst, page []byte, offset uint64) Status {
	if offset%4 != 0 || offset > uint64(len(page)) {
		return StatusInvalidField.WithDNR()
	}
	n := copy(dst, page[offset:])
	clear(dst[n:])
	return StatusSuccess
}

// --- Set Features and Get Features (NVMe Base 2.x, 5.2.26, 5.2.11) ---

// FeatureID is a Feature Identifier.
type FeatureID uint8

// Feature identifiers.
const (
	FeatureArbitration          FeatureID = 0x01
	FeaturePowerManagement      FeatureID = 0x02
	FeatureTemperatureThreshold FeatureID = 0x04
	FeatureErrorRecovery        FeatureID = 0x05
	FeatureVolatileWriteCache   FeatureID = 0x06
	FeatureNumberOfQueues       FeatureID = 0x07
	FeatureWriteAtomicityNormal FeatureID = 0x0a
	FeatureAsyncEventConfig     FeatureID = 0x0b
	FeatureKeepAliveTimer       FeatureID = 0x0f
	FeatureHostIdentifier       FeatureID = 0x81
	FeatureReservationMask      FeatureID = 0x82 // Reservation Notification Mask, per namespace
	FeatureReservationPersist   FeatureID = 0x83 // Reservation Persistence (PTPL), per namespace
)

// FeatureSelect is the SEL field of Get Features.
type FeatureSelect uint8

// Get Features select values.
const (
	SelectCurrent      FeatureSelect = 0
	SelectDefault      FeatureSelect = 1
	SelectSaved        FeatureSelect = 2
	SelectCapabilities FeatureSelect = 3 // supported capabilities
)

// Features field positions.
const (
	featFIDShift = 0  // CDW10 7:0
	featSELShift = 8  // CDW10 10:8 (Get Features)
	featSVBit    = 31 // CDW10 31 (Set Features)
)

// FID returns the Feature Identifier (CDW10 bits 7:0).
func (c *Command) FID() FeatureID { return FeatureID(bits(c.CDW10, featFIDShift, 8)) }

// Save reports the SV bit of Set Features (CDW10 bit 31).
func (c *Command) Save() bool { return bit(c.CDW10, featSVBit) }

// Select returns the SEL field of Get Features (CDW10 bits 10:8).
func (c *Command) Select() FeatureSelect { return FeatureSelect(bits(c.CDW10, featSELShift, 3)) }

// FeatureValue returns the feature value of Set Features (CDW11).
func (c *Command) FeatureValue() uint32 { return c.CDW11 }

// SetFeature sets FID and the value (CDW11) of a Set Features command.
func (c *Command) SetFeature(fid FeatureID, value uint32) {
	c.CDW10 = setBits(c.CDW10, featFIDShift, 8, uint32(fid))
	c.CDW11 = value
}

// NumberOfQueues is the value of the Number of Queues feature: in Set
// Features CDW11 the queues requested (NSQR, NCQR), in the completion's
// DW0 the queues allocated (NSQA, NCQA). Both counts are 0's based on the
// wire; the methods count queues.
type NumberOfQueues uint32

// NewNumberOfQueues returns the value for sq I/O submission queues and cq
// I/O completion queues, each from 1 to 65535.
func NewNumberOfQueues(sq, cq int) (NumberOfQueues, error) {
	if sq < 1 || sq > 0xffff || cq < 1 || cq > 0xffff {
		return 0, &FieldError{Structure: "Number of Queues", Field: "NSQR", Offset: CommandOffsetCDW11, Err: ErrFieldValue}
	}
	return NumberOfQueues(uint32(sq-1) | uint32(cq-1)<<16), nil
}

// SubmissionQueues returns the number of I/O submission queues (NSQR+1 or NSQA+1).
func (n NumberOfQueues) SubmissionQueues() int { return int(uint16(n)) + 1 }

// CompletionQueues returns the number of I/O completion queues (NCQR+1 or NCQA+1).
func (n NumberOfQueues) CompletionQueues() int { return int(uint16(n>>16)) + 1 }

// Valid reports whether a request is valid: the specification has
// 65535 (a 0's based FFFFh) answered with Invalid Field in Command.
func (n NumberOfQueues) Valid() bool { return uint16(n) != 0xffff && uint16(n>>16) != 0xffff }

// VolatileWriteCache is the value of the Volatile Write Cache feature.
type VolatileWriteCache uint32

// WCE reports Volatile Write Cache Enable (bit 0).
func (v VolatileWriteCache) WCE() bool { return v&1 != 0 }

// AsyncEventConfig is the value of the Asynchronous Event Configuration
// feature: which events the controller reports.
type AsyncEventConfig uint32

// Asynchronous event configuration bits.
const (
	AECSMARTCriticalWarnings  AsyncEventConfig = 0xff    // bits 7:0, one per SMART critical warning
	AECNamespaceAttribute     AsyncEventConfig = 1 << 8  // Attached Namespace Attribute Notices
	AECFirmwareActivation     AsyncEventConfig = 1 << 9  // Firmware Activation Notices
	AECTelemetryLog           AsyncEventConfig = 1 << 10 // Telemetry Log Notices
	AECANAChange              AsyncEventConfig = 1 << 11 // Asymmetric Namespace Access Change Notices
	AECDiscoveryLogPageChange AsyncEventConfig = 1 << 31 // Discovery Log Page Change Notification
)

// KATO values are milliseconds; the Keep Alive Timer feature value is KATO.

// --- Asynchronous Event Request (NVMe Base 2.x, 5.2.2) ---

// AsyncEventType is the Asynchronous Event Type of an AER completion.
type AsyncEventType uint8

// Asynchronous event types.
const (
	AsyncEventError             AsyncEventType = 0
	AsyncEventSMARTHealth       AsyncEventType = 1
	AsyncEventNotice            AsyncEventType = 2
	AsyncEventIOCommandSpecific AsyncEventType = 6
	AsyncEventVendorSpecific    AsyncEventType = 7
)

// Asynchronous event information values of AsyncEventNotice.
const (
	NoticeNamespaceAttributeChanged  uint8 = 0x00
	NoticeFirmwareActivationStarting uint8 = 0x01
	NoticeTelemetryLogChanged        uint8 = 0x02
	NoticeANAChange                  uint8 = 0x03
	NoticeDiscoveryLogPageChange     uint8 = 0xf0
)

// AsyncEvent is DW0 of the completion of an Asynchronous Event Request.
type AsyncEvent struct {
	Type AsyncEventType // bits 2:0
	Info uint8          // bits 15:8
	// LogPage is the log page to read to clear the event (bits 23:16).
	LogPage LogPageID
}

// DW0 encodes e.
func (e AsyncEvent) DW0() uint32 {
	return uint32(e.Type&7) | uint32(e.Info)<<8 | uint32(e.LogPage)<<16
}

// ParseAsyncEvent decodes DW0 of an AER completion.
func ParseAsyncEvent(dw0 uint32) AsyncEvent {
	return AsyncEvent{Type: AsyncEventType(dw0 & 7), Info: uint8(dw0 >> 8), LogPage: LogPageID(dw0 >> 16)}
}

func (e AsyncEvent) String() string {
	return fmt.Sprintf("async event type %d info %02Xh log page %02Xh", e.Type, e.Info, uint8(e.LogPage))
}

// --- Abort (NVMe Base 2.x, 5.2.1) ---

// AbortSQID returns the submission queue of the command to abort (CDW10 bits 15:0).
func (c *Command) AbortSQID() uint16 { return uint16(c.CDW10) }

// AbortCID returns the command identifier of the command to abort (CDW10 bits 31:16).
func (c *Command) AbortCID() uint16 { return uint16(c.CDW10 >> 16) }

// SetAbort sets the command to abort.
func (c *Command) SetAbort(sqid, cid uint16) { c.CDW10 = uint32(sqid) | uint32(cid)<<16 }

// AbortNotAborted is DW0 of an Abort completion when the command was not
// aborted (bit 0 set); 0 means it was.
const AbortNotAborted uint32 = 1
