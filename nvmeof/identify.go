package nvmeof

import "fmt"

// Uint128 is a 128-bit little-endian counter or capacity (SMART counters,
// TNVMCAP, UNVMCAP).
type Uint128 struct {
	Lo, Hi uint64
}

func getUint128(b []byte) Uint128 { return Uint128{Lo: le.Uint64(b), Hi: le.Uint64(b[8:])} }

func putUint128(b []byte, v Uint128) {
	le.PutUint64(b, v.Lo)
	le.PutUint64(b[8:], v.Hi)
}

// Byte offsets of the fields of the Identify Controller data structure
// (NVMe Base 2.x, 5.2.13.2.1; the NVMe over Fabrics fields at 1792).
const (
	IDCtrlOffsetVID       = 0    // PCI Vendor ID
	IDCtrlOffsetSSVID     = 2    // PCI Subsystem Vendor ID
	IDCtrlOffsetSN        = 4    // Serial Number, 20 bytes ASCII
	IDCtrlOffsetMN        = 24   // Model Number, 40 bytes ASCII
	IDCtrlOffsetFR        = 64   // Firmware Revision, 8 bytes ASCII
	IDCtrlOffsetRAB       = 72   // Recommended Arbitration Burst
	IDCtrlOffsetIEEE      = 73   // IEEE OUI Identifier, 3 bytes
	IDCtrlOffsetCMIC      = 76   // Controller Multi-Path I/O and Namespace Sharing Capabilities
	IDCtrlOffsetMDTS      = 77   // Maximum Data Transfer Size, 2^n units of CAP.MPSMIN
	IDCtrlOffsetCNTLID    = 78   // Controller ID
	IDCtrlOffsetVER       = 80   // Version
	IDCtrlOffsetRTD3R     = 84   // RTD3 Resume Latency
	IDCtrlOffsetRTD3E     = 88   // RTD3 Entry Latency
	IDCtrlOffsetOAES      = 92   // Optional Asynchronous Events Supported
	IDCtrlOffsetCTRATT    = 96   // Controller Attributes
	IDCtrlOffsetCNTRLTYPE = 111  // Controller Type
	IDCtrlOffsetFGUID     = 112  // FRU Globally Unique Identifier, 16 bytes
	IDCtrlOffsetCRDT1     = 128  // Command Retry Delay Time 1..3, 2 bytes each
	IDCtrlOffsetOACS      = 256  // Optional Admin Command Support
	IDCtrlOffsetACL       = 258  // Abort Command Limit, 0's based
	IDCtrlOffsetAERL      = 259  // Asynchronous Event Request Limit, 0's based
	IDCtrlOffsetFRMW      = 260  // Firmware Updates
	IDCtrlOffsetLPA       = 261  // Log Page Attributes
	IDCtrlOffsetELPE      = 262  // Error Log Page Entries, 0's based
	IDCtrlOffsetNPSS      = 263  // Number of Power States Support, 0's based
	IDCtrlOffsetAVSCC     = 264  // Admin Vendor Specific Command Configuration
	IDCtrlOffsetAPSTA     = 265  // Autonomous Power State Transition Attributes
	IDCtrlOffsetWCTEMP    = 266  // Warning Composite Temperature Threshold
	IDCtrlOffsetCCTEMP    = 268  // Critical Composite Temperature Threshold
	IDCtrlOffsetMTFA      = 270  // Maximum Time for Firmware Activation, 100 ms units
	IDCtrlOffsetTNVMCAP   = 280  // Total NVM Capacity, 16 bytes
	IDCtrlOffsetUNVMCAP   = 296  // Unallocated NVM Capacity, 16 bytes
	IDCtrlOffsetKAS       = 320  // Keep Alive Support, 100 ms units
	IDCtrlOffsetANATT     = 342  // ANA Transition Time, seconds
	IDCtrlOffsetANACAP    = 343  // Asymmetric Namespace Access Capabilities
	IDCtrlOffsetANAGRPMAX = 344  // ANA Group Identifier Maximum
	IDCtrlOffsetNANAGRPID = 348  // Number of ANA Group Identifiers
	IDCtrlOffsetSQES      = 512  // Submission Queue Entry Size
	IDCtrlOffsetCQES      = 513  // Completion Queue Entry Size
	IDCtrlOffsetMAXCMD    = 514  // Maximum Outstanding Commands
	IDCtrlOffsetNN        = 516  // Number of Namespaces
	IDCtrlOffsetONCS      = 520  // Optional NVM Command Support
	IDCtrlOffsetFUSES     = 522  // Fused Operation Support
	IDCtrlOffsetFNA       = 524  // Format NVM Attributes
	IDCtrlOffsetVWC       = 525  // Volatile Write Cache
	IDCtrlOffsetAWUN      = 526  // Atomic Write Unit Normal, 0's based
	IDCtrlOffsetAWUPF     = 528  // Atomic Write Unit Power Fail, 0's based
	IDCtrlOffsetACWU      = 532  // Atomic Compare & Write Unit, 0's based
	IDCtrlOffsetSGLS      = 536  // SGL Support
	IDCtrlOffsetMNAN      = 540  // Maximum Number of Allowed Namespaces
	IDCtrlOffsetSUBNQN    = 768  // NVM Subsystem NQN, 256 bytes
	IDCtrlOffsetIOCCSZ    = 1792 // I/O Queue Command Capsule Supported Size, 16-byte units
	IDCtrlOffsetIORCSZ    = 1796 // I/O Queue Response Capsule Supported Size, 16-byte units
	IDCtrlOffsetICDOFF    = 1800 // In Capsule Data Offset, 16-byte units
	IDCtrlOffsetFCATT     = 1802 // Fabrics Controller Attributes
	IDCtrlOffsetMSDBD     = 1803 // Maximum SGL Data Block Descriptors
	IDCtrlOffsetOFCS      = 1804 // Optional Fabric Commands Support
	IDCtrlOffsetDCTYPE    = 1806 // Discovery Controller Type
	IDCtrlOffsetPSD       = 2048 // Power State Descriptors 0..31, 32 bytes each
)

// Field sizes of Identify Controller strings.
const (
	SerialNumberSize     = 20
	ModelNumberSize      = 40
	FirmwareRevisionSize = 8
)

// ControllerType is the CNTRLTYPE field.
type ControllerType uint8

// Controller types.
const (
	ControllerTypeIO             ControllerType = 1
	ControllerTypeDiscovery      ControllerType = 2
	ControllerTypeAdministrative ControllerType = 3
)

// CMIC bits.
const (
	CMICMultiPort       uint8 = 1 << 0 // two or more ports
	CMICMultiController uint8 = 1 << 1 // two or more controllers
	CMICANA             uint8 = 1 << 3 // asymmetric namespace access reporting
)

// OACS bits.
const (
	OACSSecurity            uint16 = 1 << 0
	OACSFormatNVM           uint16 = 1 << 1
	OACSFirmware            uint16 = 1 << 2
	OACSNamespaceManagement uint16 = 1 << 3
)

// LPA bits (Log Page Attributes).
const (
	LPASMARTPerNamespace uint8 = 1 << 0
	LPACommandsEffects   uint8 = 1 << 1
	LPAExtendedData      uint8 = 1 << 2 // NUMDU and the log page offset are supported
	LPATelemetry         uint8 = 1 << 3
	LPAPersistentEvent   uint8 = 1 << 4
)

// ONCS bits (Optional NVM Command Support).
const (
	ONCSCompare            uint16 = 1 << 0
	ONCSWriteUncorrectable uint16 = 1 << 1
	ONCSDatasetManagement  uint16 = 1 << 2
	ONCSWriteZeroes        uint16 = 1 << 3
	ONCSSaveSelect         uint16 = 1 << 4 // Save field of Set Features, Select field of Get Features
	ONCSReservations       uint16 = 1 << 5
	ONCSTimestamp          uint16 = 1 << 6
	ONCSVerify             uint16 = 1 << 7
)

// VWC bits.
const (
	VWCPresent uint8 = 1 << 0
	// VWCFlushBroadcast (bits 2:1 = 11b): Flush with NSID FFFFFFFFh is supported.
	VWCFlushBroadcast uint8 = 3 << 1
	// VWCFlushNoBroadcast (bits 2:1 = 10b): Flush with NSID FFFFFFFFh is not supported.
	VWCFlushNoBroadcast uint8 = 2 << 1
)

// SGLS bits (SGL Support).
const (
	SGLSSupported             uint32 = 1      // bits 1:0 = 01b: SGLs supported, byte aligned
	SGLSSupportedDwordAligned uint32 = 2      // bits 1:0 = 10b: SGLs supported, dword alignment
	SGLSKeyedDataBlock        uint32 = 1 << 2 // Keyed SGL Data Block descriptor supported
	SGLSBitBucket             uint32 = 1 << 16
	SGLSByteAlignedMetadata   uint32 = 1 << 17
	SGLSLongerThanData        uint32 = 1 << 18 // SGL length may exceed the data
	SGLSMPTRSGL               uint32 = 1 << 19 // MPTR may hold an SGL descriptor
	SGLSOffsetAddress         uint32 = 1 << 20 // Data Block Offset subtype supported (in-capsule data)
)

// FCATT bits.
const (
	// FCATTStaticController: the subsystem uses the static controller
	// model (clear: dynamic).
	FCATTStaticController uint8 = 1 << 0
)

// OFCS bits.
const (
	// OFCSDisconnect: the Disconnect command is supported.
	OFCSDisconnect uint16 = 1 << 0
)

// CTRATT bits.
const (
	// CTRATTHostID128: 128-bit Host Identifiers are supported (required on fabrics).
	CTRATTHostID128 uint32 = 1 << 0
)

// PowerStateDescriptor is one 32-byte power state descriptor.
type PowerStateDescriptor [32]byte

// MaxPower returns the MP field (bytes 1:0), in units MaxPowerScale says.
func (p PowerStateDescriptor) MaxPower() uint16 { return le.Uint16(p[0:]) }

// SetMaxPower sets the MP field.
func (p *PowerStateDescriptor) SetMaxPower(v uint16) { le.PutUint16(p[0:], v) }

// NonOperational reports NOPS (byte 3 bit 1).
func (p PowerStateDescriptor) NonOperational() bool { return p[3]&2 != 0 }

// IdentifyController is the Identify Controller data structure (CNS 01h),
// with every field a Linux host looks at. Fields not listed here are
// written as zero and ignored when decoding.
type IdentifyController struct {
	VID       uint16
	SSVID     uint16
	SN        string // Serial Number, up to 20 ASCII characters
	MN        string // Model Number, up to 40 ASCII characters
	FR        string // Firmware Revision, up to 8 ASCII characters
	RAB       uint8
	IEEE      [3]byte
	CMIC      uint8
	MDTS      uint8
	CNTLID    uint16
	VER       Version
	RTD3R     uint32
	RTD3E     uint32
	OAES      uint32
	CTRATT    uint32
	CNTRLTYPE ControllerType
	FGUID     [16]byte
	CRDT      [3]uint16 // CRDT1..CRDT3, 100 ms units
	OACS      uint16
	ACL       uint8
	AERL      uint8
	FRMW      uint8
	LPA       uint8
	ELPE      uint8
	NPSS      uint8
	AVSCC     uint8
	APSTA     uint8
	WCTEMP    uint16
	CCTEMP    uint16
	MTFA      uint16
	TNVMCAP   Uint128
	UNVMCAP   Uint128
	KAS       uint16
	// ANATT is the ANA Transition Time: the most seconds a group stays
	// in the ANA Change state.
	ANATT     uint8
	ANACAP    uint8 // ANACAP bits
	ANAGRPMAX uint32
	NANAGRPID uint32
	SQES      uint8 // bits 3:0 required, 7:4 maximum, log2 of bytes
	CQES      uint8
	MAXCMD    uint16
	NN        uint32
	ONCS      uint16
	FUSES     uint16
	FNA       uint8
	VWC       uint8
	AWUN      uint16
	AWUPF     uint16
	ACWU      uint16
	SGLS      uint32
	MNAN      uint32
	// SUBNQN is the subsystem NQN; it may be empty only for controllers
	// older than NVMe 1.2.1.
	SUBNQN string
	IOCCSZ uint32
	IORCSZ uint32
	ICDOFF uint16
	FCATT  uint8
	MSDBD  uint8
	OFCS   uint16
	// DCTYPE is the Discovery Controller Type: 0 not reported, 1 direct,
	// 2 central.
	DCTYPE uint8
	PSD    [32]PowerStateDescriptor
}

// CommandCapsuleSize returns the largest I/O command capsule, in bytes
// (IOCCSZ * 16): 64 for the SQE plus the in-capsule data.
func (id *IdentifyController) CommandCapsuleSize() int { return int(id.IOCCSZ) * 16 }

// MarshalTo writes the 4096-byte structure into b, reserved bytes cleared.
// Strings must be printable ASCII that fits its field, and SUBNQN empty or
// a valid NQN.
func (id *IdentifyController) MarshalTo(b []byte) (int, error) {
	const name = "Identify Controller"
	if err := needAtLeast(name, b, IdentifyDataSize); err != nil {
		return 0, err
	}
	b = b[:IdentifyDataSize]
	clear(b)
	le.PutUint16(b[IDCtrlOffsetVID:], id.VID)
	le.PutUint16(b[IDCtrlOffsetSSVID:], id.SSVID)
	for _, s := range [...]struct {
		field string
		off   int
		size  int
		v     string
	}{
		{"SN", IDCtrlOffsetSN, SerialNumberSize, id.SN},
		{"MN", IDCtrlOffsetMN, ModelNumberSize, id.MN},
		{"FR", IDCtrlOffsetFR, FirmwareRevisionSize, id.FR},
	} {
		if err := putASCII(b[s.off:s.off+s.size], s.v); err != nil {
			return 0, &FieldError{Structure: name, Field: s.field, Offset: s.off, Err: err}
		}
	}
	b[IDCtrlOffsetRAB] = id.RAB
	copy(b[IDCtrlOffsetIEEE:], id.IEEE[:])
	b[IDCtrlOffsetCMIC] = id.CMIC
	b[IDCtrlOffsetMDTS] = id.MDTS
	le.PutUint16(b[IDCtrlOffsetCNTLID:], id.CNTLID)
	le.PutUint32(b[IDCtrlOffsetVER:], uint32(id.VER))
	le.PutUint32(b[IDCtrlOffsetRTD3R:], id.RTD3R)
	le.PutUint32(b[IDCtrlOffsetRTD3E:], id.RTD3E)
	le.PutUint32(b[IDCtrlOffsetOAES:], id.OAES)
	le.PutUint32(b[IDCtrlOffsetCTRATT:], id.CTRATT)
	b[IDCtrlOffsetCNTRLTYPE] = byte(id.CNTRLTYPE)
	copy(b[IDCtrlOffsetFGUID:], id.FGUID[:])
	for i, v := range id.CRDT {
		le.PutUint16(b[IDCtrlOffsetCRDT1+2*i:], v)
	}
	le.PutUint16(b[IDCtrlOffsetOACS:], id.OACS)
	b[IDCtrlOffsetACL] = id.ACL
	b[IDCtrlOffsetAERL] = id.AERL
	b[IDCtrlOffsetFRMW] = id.FRMW
	b[IDCtrlOffsetLPA] = id.LPA
	b[IDCtrlOffsetELPE] = id.ELPE
	b[IDCtrlOffsetNPSS] = id.NPSS
	b[IDCtrlOffsetAVSCC] = id.AVSCC
	b[IDCtrlOffsetAPSTA] = id.APSTA
	le.PutUint16(b[IDCtrlOffsetWCTEMP:], id.WCTEMP)
	le.PutUint16(b[IDCtrlOffsetCCTEMP:], id.CCTEMP)
	le.PutUint16(b[IDCtrlOffsetMTFA:], id.MTFA)
	putUint128(b[IDCtrlOffsetTNVMCAP:], id.TNVMCAP)
	putUint128(b[IDCtrlOffsetUNVMCAP:], id.UNVMCAP)
	le.PutUint16(b[IDCtrlOffsetKAS:], id.KAS)
	b[IDCtrlOffsetANATT] = id.ANATT
	b[IDCtrlOffsetANACAP] = id.ANACAP
	le.PutUint32(b[IDCtrlOffsetANAGRPMAX:], id.ANAGRPMAX)
	le.PutUint32(b[IDCtrlOffsetNANAGRPID:], id.NANAGRPID)
	b[IDCtrlOffsetSQES] = id.SQES
	b[IDCtrlOffsetCQES] = id.CQES
	le.PutUint16(b[IDCtrlOffsetMAXCMD:], id.MAXCMD)
	le.PutUint32(b[IDCtrlOffsetNN:], id.NN)
	le.PutUint16(b[IDCtrlOffsetONCS:], id.ONCS)
	le.PutUint16(b[IDCtrlOffsetFUSES:], id.FUSES)
	b[IDCtrlOffsetFNA] = id.FNA
	b[IDCtrlOffsetVWC] = id.VWC
	le.PutUint16(b[IDCtrlOffsetAWUN:], id.AWUN)
	le.PutUint16(b[IDCtrlOffsetAWUPF:], id.AWUPF)
	le.PutUint16(b[IDCtrlOffsetACWU:], id.ACWU)
	le.PutUint32(b[IDCtrlOffsetSGLS:], id.SGLS)
	le.PutUint32(b[IDCtrlOffsetMNAN:], id.MNAN)
	if err := putNQN(b[IDCtrlOffsetSUBNQN:IDCtrlOffsetSUBNQN+NQNFieldSize], id.SUBNQN, true); err != nil {
		return 0, &FieldError{Structure: name, Field: "SUBNQN", Offset: IDCtrlOffsetSUBNQN, Err: err}
	}
	le.PutUint32(b[IDCtrlOffsetIOCCSZ:], id.IOCCSZ)
	le.PutUint32(b[IDCtrlOffsetIORCSZ:], id.IORCSZ)
	le.PutUint16(b[IDCtrlOffsetICDOFF:], id.ICDOFF)
	b[IDCtrlOffsetFCATT] = id.FCATT
	b[IDCtrlOffsetMSDBD] = id.MSDBD
	le.PutUint16(b[IDCtrlOffsetOFCS:], id.OFCS)
	b[IDCtrlOffsetDCTYPE] = id.DCTYPE
	for i := range id.PSD {
		copy(b[IDCtrlOffsetPSD+32*i:], id.PSD[i][:])
	}
	return IdentifyDataSize, nil
}

// MarshalBinary returns the 4096-byte structure.
func (id *IdentifyController) MarshalBinary() ([]byte, error) {
	b := make([]byte, IdentifyDataSize)
	if _, err := id.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalBinary decodes exactly 4096 bytes. SN, MN and FR must be ASCII
// (trailing spaces or NULs are padding and are removed); SUBNQN must be
// all zero or a valid NUL-padded NQN.
func (id *IdentifyController) UnmarshalBinary(b []byte) error {
	const name = "Identify Controller"
	if err := needExactly(name, b, IdentifyDataSize); err != nil {
		return err
	}
	var x IdentifyController
	var err error
	x.VID = le.Uint16(b[IDCtrlOffsetVID:])
	x.SSVID = le.Uint16(b[IDCtrlOffsetSSVID:])
	if x.SN, err = getASCII(b[IDCtrlOffsetSN : IDCtrlOffsetSN+SerialNumberSize]); err != nil {
		return &FieldError{Structure: name, Field: "SN", Offset: IDCtrlOffsetSN, Err: err}
	}
	if x.MN, err = getASCII(b[IDCtrlOffsetMN : IDCtrlOffsetMN+ModelNumberSize]); err != nil {
		return &FieldError{Structure: name, Field: "MN", Offset: IDCtrlOffsetMN, Err: err}
	}
	if x.FR, err = getASCII(b[IDCtrlOffsetFR : IDCtrlOffsetFR+FirmwareRevisionSize]); err != nil {
		return &FieldError{Structure: name, Field: "FR", Offset: IDCtrlOffsetFR, Err: err}
	}
	x.RAB = b[IDCtrlOffsetRAB]
	copy(x.IEEE[:], b[IDCtrlOffsetIEEE:])
	x.CMIC = b[IDCtrlOffsetCMIC]
	x.MDTS = b[IDCtrlOffsetMDTS]
	x.CNTLID = le.Uint16(b[IDCtrlOffsetCNTLID:])
	x.VER = Version(le.Uint32(b[IDCtrlOffsetVER:]))
	x.RTD3R = le.Uint32(b[IDCtrlOffsetRTD3R:])
	x.RTD3E = le.Uint32(b[IDCtrlOffsetRTD3E:])
	x.OAES = le.Uint32(b[IDCtrlOffsetOAES:])
	x.CTRATT = le.Uint32(b[IDCtrlOffsetCTRATT:])
	x.CNTRLTYPE = ControllerType(b[IDCtrlOffsetCNTRLTYPE])
	copy(x.FGUID[:], b[IDCtrlOffsetFGUID:])
	for i := range x.CRDT {
		x.CRDT[i] = le.Uint16(b[IDCtrlOffsetCRDT1+2*i:])
	}
	x.OACS = le.Uint16(b[IDCtrlOffsetOACS:])
	x.ACL = b[IDCtrlOffsetACL]
	x.AERL = b[IDCtrlOffsetAERL]
	x.FRMW = b[IDCtrlOffsetFRMW]
	x.LPA = b[IDCtrlOffsetLPA]
	x.ELPE = b[IDCtrlOffsetELPE]
	x.NPSS = b[IDCtrlOffsetNPSS]
	x.AVSCC = b[IDCtrlOffsetAVSCC]
	x.APSTA = b[IDCtrlOffsetAPSTA]
	x.WCTEMP = le.Uint16(b[IDCtrlOffsetWCTEMP:])
	x.CCTEMP = le.Uint16(b[IDCtrlOffsetCCTEMP:])
	x.MTFA = le.Uint16(b[IDCtrlOffsetMTFA:])
	x.TNVMCAP = getUint128(b[IDCtrlOffsetTNVMCAP:])
	x.UNVMCAP = getUint128(b[IDCtrlOffsetUNVMCAP:])
	x.KAS = le.Uint16(b[IDCtrlOffsetKAS:])
	x.ANATT = b[IDCtrlOffsetANATT]
	x.ANACAP = b[IDCtrlOffsetANACAP]
	x.ANAGRPMAX = le.Uint32(b[IDCtrlOffsetANAGRPMAX:])
	x.NANAGRPID = le.Uint32(b[IDCtrlOffsetNANAGRPID:])
	x.SQES = b[IDCtrlOffsetSQES]
	x.CQES = b[IDCtrlOffsetCQES]
	x.MAXCMD = le.Uint16(b[IDCtrlOffsetMAXCMD:])
	x.NN = le.Uint32(b[IDCtrlOffsetNN:])
	x.ONCS = le.Uint16(b[IDCtrlOffsetONCS:])
	x.FUSES = le.Uint16(b[IDCtrlOffsetFUSES:])
	x.FNA = b[IDCtrlOffsetFNA]
	x.VWC = b[IDCtrlOffsetVWC]
	x.AWUN = le.Uint16(b[IDCtrlOffsetAWUN:])
	x.AWUPF = le.Uint16(b[IDCtrlOffsetAWUPF:])
	x.ACWU = le.Uint16(b[IDCtrlOffsetACWU:])
	x.SGLS = le.Uint32(b[IDCtrlOffsetSGLS:])
	x.MNAN = le.Uint32(b[IDCtrlOffsetMNAN:])
	if x.SUBNQN, err = getNQN(b[IDCtrlOffsetSUBNQN:IDCtrlOffsetSUBNQN+NQNFieldSize], true); err != nil {
		return &FieldError{Structure: name, Field: "SUBNQN", Offset: IDCtrlOffsetSUBNQN, Err: err}
	}
	x.IOCCSZ = le.Uint32(b[IDCtrlOffsetIOCCSZ:])
	x.IORCSZ = le.Uint32(b[IDCtrlOffsetIORCSZ:])
	x.ICDOFF = le.Uint16(b[IDCtrlOffsetICDOFF:])
	x.FCATT = b[IDCtrlOffsetFCATT]
	x.MSDBD = b[IDCtrlOffsetMSDBD]
	x.OFCS = le.Uint16(b[IDCtrlOffsetOFCS:])
	x.DCTYPE = b[IDCtrlOffsetDCTYPE]
	for i := range x.PSD {
		copy(x.PSD[i][:], b[IDCtrlOffsetPSD+32*i:])
	}
	*id = x
	return nil
}

// Byte offsets of the fields of the Identify Namespace data structure for
// the NVM Command Set (NVM Command Set Specification 1.0, 4.1.5.1).
const (
	IDNSOffsetNSZE     = 0   // Namespace Size, logical blocks
	IDNSOffsetNCAP     = 8   // Namespace Capacity
	IDNSOffsetNUSE     = 16  // Namespace Utilization
	IDNSOffsetNSFEAT   = 24  // Namespace Features
	IDNSOffsetNLBAF    = 25  // Number of LBA Formats, 0's based
	IDNSOffsetFLBAS    = 26  // Formatted LBA Size
	IDNSOffsetMC       = 27  // Metadata Capabilities
	IDNSOffsetDPC      = 28  // End-to-end Data Protection Capabilities
	IDNSOffsetDPS      = 29  // End-to-end Data Protection Type Settings
	IDNSOffsetNMIC     = 30  // Namespace Multi-path I/O and Namespace Sharing Capabilities
	IDNSOffsetRESCAP   = 31  // Reservation Capabilities
	IDNSOffsetFPI      = 32  // Format Progress Indicator
	IDNSOffsetDLFEAT   = 33  // Deallocate Logical Block Features
	IDNSOffsetNAWUN    = 34  // Namespace Atomic Write Unit Normal
	IDNSOffsetNAWUPF   = 36  // Namespace Atomic Write Unit Power Fail
	IDNSOffsetNACWU    = 38  // Namespace Atomic Compare & Write Unit
	IDNSOffsetNOIOB    = 46  // Namespace Optimal I/O Boundary
	IDNSOffsetNVMCAP   = 48  // NVM Capacity, 16 bytes
	IDNSOffsetNPWG     = 64  // Namespace Preferred Write Granularity
	IDNSOffsetNPWA     = 66  // Namespace Preferred Write Alignment
	IDNSOffsetNPDG     = 68  // Namespace Preferred Deallocate Granularity
	IDNSOffsetNPDA     = 70  // Namespace Preferred Deallocate Alignment
	IDNSOffsetNOWS     = 72  // Namespace Optimal Write Size
	IDNSOffsetANAGRPID = 92  // ANA Group Identifier
	IDNSOffsetNSATTR   = 99  // Namespace Attributes
	IDNSOffsetNGUID    = 104 // Namespace Globally Unique Identifier, 16 bytes
	IDNSOffsetEUI64    = 120 // IEEE Extended Unique Identifier, 8 bytes
	IDNSOffsetLBAF     = 128 // LBA Format 0..63, 4 bytes each
)

// MaxLBAFormats is the number of LBA format entries in Identify Namespace.
const MaxLBAFormats = 64

// NSFEAT bits.
const (
	NSFEATThinProvisioning uint8 = 1 << 0
	NSFEATAtomics          uint8 = 1 << 1 // NAWUN, NAWUPF, NACWU are valid
	NSFEATDeallocError     uint8 = 1 << 2
	NSFEATIOOptimization   uint8 = 1 << 4 // NPWG, NPWA, NPDG, NPDA, NOWS are valid
)

// DLFEAT bits.
const (
	// DLFEATReadZeroes (bits 2:0 = 001b): a deallocated block reads as zeros.
	DLFEATReadZeroes uint8 = 1
	// DLFEATWriteZeroesDeallocate: Write Zeroes with DEAC deallocates.
	DLFEATWriteZeroesDeallocate uint8 = 1 << 3
)

// LBAFormat is one LBA Format entry.
type LBAFormat struct {
	MS    uint16 // Metadata Size, bytes per block
	LBADS uint8  // LBA Data Size, log2 of bytes (9 for 512)
	RP    uint8  // Relative Performance, bits 1:0
}

// IdentifyNamespace is the Identify Namespace data structure of the NVM
// Command Set (CNS 00h). An inactive namespace is all zero.
type IdentifyNamespace struct {
	NSZE     uint64
	NCAP     uint64
	NUSE     uint64
	NSFEAT   uint8
	NLBAF    uint8 // number of LBA formats, 0's based
	FLBAS    uint8
	MC       uint8
	DPC      uint8
	DPS      uint8
	NMIC     uint8
	RESCAP   uint8
	FPI      uint8
	DLFEAT   uint8
	NAWUN    uint16
	NAWUPF   uint16
	NACWU    uint16
	NOIOB    uint16
	NVMCAP   Uint128
	NPWG     uint16
	NPWA     uint16
	NPDG     uint16
	NPDA     uint16
	NOWS     uint16
	ANAGRPID uint32
	NSATTR   uint8
	NGUID    [16]byte
	EUI64    [8]byte
	LBAF     [MaxLBAFormats]LBAFormat
}

// FormatIndex returns the index of the LBA format in use: FLBAS bits 3:0,
// with bits 6:5 as the upper two bits.
func (ns *IdentifyNamespace) FormatIndex() int {
	return int(ns.FLBAS&0x0f) | int(ns.FLBAS>>5&3)<<4
}

// SetFormatIndex sets the format-index bits of FLBAS.
func (ns *IdentifyNamespace) SetFormatIndex(i int) {
	ns.FLBAS = ns.FLBAS&^0x6f | uint8(i&0x0f) | uint8(i>>4&3)<<5
}

// BlockSize returns the logical block size of the format in use, in
// bytes. It fails with ErrFieldValue if LBADS is below 9 (512 bytes, the
// smallest the specification allows) or too large to be a size.
func (ns *IdentifyNamespace) BlockSize() (uint32, error) {
	i := ns.FormatIndex()
	lbads := ns.LBAF[i].LBADS
	if lbads < 9 || lbads > 31 {
		return 0, &FieldError{Structure: "Identify Namespace", Field: "LBADS", Offset: IDNSOffsetLBAF + 4*i + 2, Err: ErrFieldValue}
	}
	return 1 << lbads, nil
}

// MarshalTo writes the 4096-byte structure into b, reserved bytes cleared.
func (ns *IdentifyNamespace) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("Identify Namespace", b, IdentifyDataSize); err != nil {
		return 0, err
	}
	b = b[:IdentifyDataSize]
	clear(b)
	le.PutUint64(b[IDNSOffsetNSZE:], ns.NSZE)
	le.PutUint64(b[IDNSOffsetNCAP:], ns.NCAP)
	le.PutUint64(b[IDNSOffsetNUSE:], ns.NUSE)
	b[IDNSOffsetNSFEAT] = ns.NSFEAT
	b[IDNSOffsetNLBAF] = ns.NLBAF
	b[IDNSOffsetFLBAS] = ns.FLBAS
	b[IDNSOffsetMC] = ns.MC
	b[IDNSOffsetDPC] = ns.DPC
	b[IDNSOffsetDPS] = ns.DPS
	b[IDNSOffsetNMIC] = ns.NMIC
	b[IDNSOffsetRESCAP] = ns.RESCAP
	b[IDNSOffsetFPI] = ns.FPI
	b[IDNSOffsetDLFEAT] = ns.DLFEAT
	le.PutUint16(b[IDNSOffsetNAWUN:], ns.NAWUN)
	le.PutUint16(b[IDNSOffsetNAWUPF:], ns.NAWUPF)
	le.PutUint16(b[IDNSOffsetNACWU:], ns.NACWU)
	le.PutUint16(b[IDNSOffsetNOIOB:], ns.NOIOB)
	putUint128(b[IDNSOffsetNVMCAP:], ns.NVMCAP)
	le.PutUint16(b[IDNSOffsetNPWG:], ns.NPWG)
	le.PutUint16(b[IDNSOffsetNPWA:], ns.NPWA)
	le.PutUint16(b[IDNSOffsetNPDG:], ns.NPDG)
	le.PutUint16(b[IDNSOffsetNPDA:], ns.NPDA)
	le.PutUint16(b[IDNSOffsetNOWS:], ns.NOWS)
	le.PutUint32(b[IDNSOffsetANAGRPID:], ns.ANAGRPID)
	b[IDNSOffsetNSATTR] = ns.NSATTR
	copy(b[IDNSOffsetNGUID:], ns.NGUID[:])
	copy(b[IDNSOffsetEUI64:], ns.EUI64[:])
	for i, f := range ns.LBAF {
		e := b[IDNSOffsetLBAF+4*i:]
		le.PutUint16(e, f.MS)
		e[2] = f.LBADS
		e[3] = f.RP & 3
	}
	return IdentifyDataSize, nil
}

// MarshalBinary returns the 4096-byte structure.
func (ns *IdentifyNamespace) MarshalBinary() ([]byte, error) {
	b := make([]byte, IdentifyDataSize)
	if _, err := ns.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalBinary decodes exactly 4096 bytes. It checks that NUSE <= NCAP
// <= NSZE, that NLBAF counts at most 64 formats, that the format in use is
// one of them, and, for a namespace with a size, that the format in use
// has a usable LBADS (see BlockSize).
func (ns *IdentifyNamespace) UnmarshalBinary(b []byte) error {
	const name = "Identify Namespace"
	if err := needExactly(name, b, IdentifyDataSize); err != nil {
		return err
	}
	var x IdentifyNamespace
	x.NSZE = le.Uint64(b[IDNSOffsetNSZE:])
	x.NCAP = le.Uint64(b[IDNSOffsetNCAP:])
	x.NUSE = le.Uint64(b[IDNSOffsetNUSE:])
	x.NSFEAT = b[IDNSOffsetNSFEAT]
	x.NLBAF = b[IDNSOffsetNLBAF]
	x.FLBAS = b[IDNSOffsetFLBAS]
	x.MC = b[IDNSOffsetMC]
	x.DPC = b[IDNSOffsetDPC]
	x.DPS = b[IDNSOffsetDPS]
	x.NMIC = b[IDNSOffsetNMIC]
	x.RESCAP = b[IDNSOffsetRESCAP]
	x.FPI = b[IDNSOffsetFPI]
	x.DLFEAT = b[IDNSOffsetDLFEAT]
	x.NAWUN = le.Uint16(b[IDNSOffsetNAWUN:])
	x.NAWUPF = le.Uint16(b[IDNSOffsetNAWUPF:])
	x.NACWU = le.Uint16(b[IDNSOffsetNACWU:])
	x.NOIOB = le.Uint16(b[IDNSOffsetNOIOB:])
	x.NVMCAP = getUint128(b[IDNSOffsetNVMCAP:])
	x.NPWG = le.Uint16(b[IDNSOffsetNPWG:])
	x.NPWA = le.Uint16(b[IDNSOffsetNPWA:])
	x.NPDG = le.Uint16(b[IDNSOffsetNPDG:])
	x.NPDA = le.Uint16(b[IDNSOffsetNPDA:])
	x.NOWS = le.Uint16(b[IDNSOffsetNOWS:])
	x.ANAGRPID = le.Uint32(b[IDNSOffsetANAGRPID:])
	x.NSATTR = b[IDNSOffsetNSATTR]
	copy(x.NGUID[:], b[IDNSOffsetNGUID:])
	copy(x.EUI64[:], b[IDNSOffsetEUI64:])
	for i := range x.LBAF {
		e := b[IDNSOffsetLBAF+4*i:]
		x.LBAF[i] = LBAFormat{MS: le.Uint16(e), LBADS: e[2], RP: e[3] & 3}
	}
	switch {
	case x.NCAP > x.NSZE:
		return &FieldError{Structure: name, Field: "NCAP", Offset: IDNSOffsetNCAP, Err: ErrFieldValue}
	case x.NUSE > x.NCAP:
		return &FieldError{Structure: name, Field: "NUSE", Offset: IDNSOffsetNUSE, Err: ErrFieldValue}
	case int(x.NLBAF) >= MaxLBAFormats:
		return &FieldError{Structure: name, Field: "NLBAF", Offset: IDNSOffsetNLBAF, Err: ErrFieldValue}
	case x.FormatIndex() > int(x.NLBAF):
		return &FieldError{Structure: name, Field: "FLBAS", Offset: IDNSOffsetFLBAS, Err: ErrFieldValue}
	}
	if x.NSZE != 0 {
		if _, err := x.BlockSize(); err != nil {
			return err
		}
	}
	*ns = x
	return nil
}

// NamespaceListEntries is the number of NSIDs in a namespace list (the
// active namespace ID list, CNS 02h, and the Changed Attached Namespace
// List log page).
const NamespaceListEntries = 1024

// NamespaceListSize is the size of a namespace list in bytes.
const NamespaceListSize = NamespaceListEntries * 4

// ActiveNamespacesAfter returns the part of the ascending list of active
// NSIDs that an Identify with CNS 02h and the given NSID returns: the IDs
// greater than nsid, at most 1024 of them. It aliases ids.
func ActiveNamespacesAfter(ids []uint32, nsid uint32) []uint32 {
	i := 0
	for i < len(ids) && ids[i] <= nsid {
		i++
	}
	ids = ids[i:]
	return ids[:min(len(ids), NamespaceListEntries)]
}

// checkNamespaceIDs checks that ids is an ordered list of valid NSIDs.
func checkNamespaceIDs(name string, ids []uint32) error {
	var prev uint32
	for i, id := range ids {
		if id == 0 || id >= 0xfffffffe || id <= prev {
			return &FieldError{Structure: name, Field: "NSID", Offset: 4 * i, Err: ErrInvalidList}
		}
		prev = id
	}
	return nil
}

// MarshalNamespaceList writes a 4096-byte namespace list holding ids into
// b, zero-filled after them. ids must be ascending valid NSIDs, at most 1024.
func MarshalNamespaceList(b []byte, ids []uint32) (int, error) {
	const name = "namespace list"
	if err := needAtLeast(name, b, NamespaceListSize); err != nil {
		return 0, err
	}
	if len(ids) > NamespaceListEntries {
		return 0, &FieldError{Structure: name, Field: "NSID", Offset: NamespaceListSize, Err: ErrInvalidList}
	}
	if err := checkNamespaceIDs(name, ids); err != nil {
		return 0, err
	}
	b = b[:NamespaceListSize]
	clear(b)
	for i, id := range ids {
		le.PutUint32(b[4*i:], id)
	}
	return NamespaceListSize, nil
}

// AppendNamespaceList decodes a 4096-byte namespace list and appends its
// NSIDs to dst. The list ends at the first zero entry; every entry after
// it must be zero too, and the IDs must ascend. With a dst of capacity
// 1024 it does not allocate.
func AppendNamespaceList(dst []uint32, b []byte) ([]uint32, error) {
	const name = "namespace list"
	if err := needExactly(name, b, NamespaceListSize); err != nil {
		return dst, err
	}
	n := 0
	for n < NamespaceListEntries && le.Uint32(b[4*n:]) != 0 {
		n++
	}
	for i := n; i < NamespaceListEntries; i++ {
		if le.Uint32(b[4*i:]) != 0 {
			return dst, &FieldError{Structure: name, Field: "NSID", Offset: 4 * i, Err: ErrInvalidList}
		}
	}
	start := len(dst)
	for i := range n {
		dst = append(dst, le.Uint32(b[4*i:]))
	}
	if err := checkNamespaceIDs(name, dst[start:]); err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// NIDType is the Namespace Identifier Type of a namespace identification
// descriptor.
type NIDType uint8

// Namespace identifier types and their lengths.
const (
	NIDTEUI64 NIDType = 1 // 8 bytes
	NIDTNGUID NIDType = 2 // 16 bytes
	NIDTUUID  NIDType = 3 // 16 bytes
	NIDTCSI   NIDType = 4 // 1 byte
)

// nidLength is the NIDL each known type must have.
var nidLength = [...]int{NIDTEUI64: 8, NIDTNGUID: 16, NIDTUUID: 16, NIDTCSI: 1}

// NamespaceIDs is the namespace identification descriptor list (CNS 03h).
// Each Has flag says whether the descriptor of that type is present.
type NamespaceIDs struct {
	EUI64    [8]byte
	NGUID    [16]byte
	UUID     [16]byte
	CSI      uint8
	HasEUI64 bool
	HasNGUID bool
	HasUUID  bool
	HasCSI   bool
}

// MarshalTo writes the 4096-byte descriptor list into b: a descriptor
// (NIDT, NIDL, two reserved bytes, NID) for each present identifier, in
// type order, then zeros.
func (n *NamespaceIDs) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("namespace identification descriptors", b, IdentifyDataSize); err != nil {
		return 0, err
	}
	b = b[:IdentifyDataSize]
	clear(b)
	off := 0
	put := func(t NIDType, id []byte) {
		b[off] = byte(t)
		b[off+1] = byte(len(id))
		copy(b[off+4:], id)
		off += 4 + len(id)
	}
	if n.HasEUI64 {
		put(NIDTEUI64, n.EUI64[:])
	}
	if n.HasNGUID {
		put(NIDTNGUID, n.NGUID[:])
	}
	if n.HasUUID {
		put(NIDTUUID, n.UUID[:])
	}
	if n.HasCSI {
		put(NIDTCSI, []byte{n.CSI})
	}
	return IdentifyDataSize, nil
}

// MarshalBinary returns the 4096-byte descriptor list.
func (n *NamespaceIDs) MarshalBinary() ([]byte, error) {
	b := make([]byte, IdentifyDataSize)
	if _, err := n.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalBinary decodes a 4096-byte descriptor list. The list ends at a
// descriptor whose NIDL is zero or at the end of the data. A known type
// must have its defined length and appear once; a descriptor must not run
// past the end; descriptors of unknown types are skipped, as the
// specification tells hosts to.
func (n *NamespaceIDs) UnmarshalBinary(b []byte) error {
	const name = "namespace identification descriptors"
	if err := needExactly(name, b, IdentifyDataSize); err != nil {
		return err
	}
	var x NamespaceIDs
	for off := 0; off+4 <= len(b); {
		t, l := NIDType(b[off]), int(b[off+1])
		if l == 0 {
			break
		}
		if off+4+l > len(b) {
			return &FieldError{Structure: name, Field: "NIDL", Offset: off + 1, Err: ErrInvalidList}
		}
		id := b[off+4 : off+4+l]
		var seen *bool
		switch t {
		case NIDTEUI64:
			seen = &x.HasEUI64
			copy(x.EUI64[:], id)
		case NIDTNGUID:
			seen = &x.HasNGUID
			copy(x.NGUID[:], id)
		case NIDTUUID:
			seen = &x.HasUUID
			copy(x.UUID[:], id)
		case NIDTCSI:
			seen = &x.HasCSI
			x.CSI = id[0]
		}
		if seen != nil {
			if *seen || l != nidLength[t] {
				return &FieldError{Structure: name, Field: "NIDT", Offset: off, Err: ErrInvalidList}
			}
			*seen = true
		}
		off += 4 + l
	}
	*n = x
	return nil
}

// String describes the identifiers for logs.
func (n *NamespaceIDs) String() string {
	return fmt.Sprintf("EUI64:%x(%t) NGUID:%x(%t) UUID:%x(%t) CSI:%d(%t)",
		n.EUI64, n.HasEUI64, n.NGUID, n.HasNGUID, n.UUID, n.HasUUID, n.CSI, n.HasCSI)
}
