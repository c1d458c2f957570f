package nvmeof

import "fmt"

// Offsets of the controller properties a fabrics host reads and writes
// with Property Get and Property Set (NVMe Base 2.x, 3.1.4).
const (
	PropertyCAP  uint32 = 0x00 // Controller Capabilities, 8 bytes
	PropertyVS   uint32 = 0x08 // Version, 4 bytes
	PropertyCC   uint32 = 0x14 // Controller Configuration, 4 bytes
	PropertyCSTS uint32 = 0x1c // Controller Status, 4 bytes
	PropertyNSSR uint32 = 0x20 // NVM Subsystem Reset, 4 bytes
)

// NSSRReset is the value written to NSSR to reset the NVM subsystem ("NVMe").
const NSSRReset uint32 = 0x4e564d65

// PropertySize is the ATTRIB size field of Property Get and Property Set.
type PropertySize uint8

// Property sizes.
const (
	PropertySize4 PropertySize = 0 // 4 bytes
	PropertySize8 PropertySize = 1 // 8 bytes
)

// Bytes returns the size in bytes (0 for a reserved value).
func (s PropertySize) Bytes() int {
	switch s {
	case PropertySize4:
		return 4
	case PropertySize8:
		return 8
	}
	return 0
}

func (s PropertySize) check(name string) error {
	if s.Bytes() == 0 {
		return &FieldError{Structure: name, Field: "ATTRIB", Offset: PropertyOffsetATTRIB,
			Status: StatusInvalidField.WithDNR(), Err: ErrFieldValue}
	}
	return nil
}

// PropertySizeAt returns the size of the property at offset, and false
// for an offset this package does not define.
func PropertySizeAt(offset uint32) (PropertySize, bool) {
	switch offset {
	case PropertyCAP:
		return PropertySize8, true
	case PropertyVS, PropertyCC, PropertyCSTS, PropertyNSSR:
		return PropertySize4, true
	}
	return 0, false
}

// CAP is the Controller Capabilities property.
type CAP uint64

// CAP field positions.
const (
	capMQESShift   = 0  // 15:0
	capCQRBit      = 16 // 16
	capAMSShift    = 17 // 18:17
	capTOShift     = 24 // 31:24
	capDSTRDShift  = 32 // 35:32
	capNSSRSBit    = 36 // 36
	capCSSShift    = 37 // 44:37
	capBPSBit      = 45 // 45
	capMPSMINShift = 48 // 51:48
	capMPSMAXShift = 52 // 55:52
	capCMBSBit     = 57 // 57
)

// CSS bits of CAP (Command Sets Supported, CAP bits 44:37).
const (
	CAPCSSNVM           uint8 = 1 << 0 // NVM Command Set
	CAPCSSIOCommandSets uint8 = 1 << 6 // one or more I/O Command Sets
	CAPCSSNoIO          uint8 = 1 << 7 // no I/O Command Set (admin only; Discovery controllers)
)

func (c CAP) field(shift, width uint) uint64 { return uint64(c) >> shift & (1<<width - 1) }

func (c CAP) with(shift, width uint, v uint64) CAP {
	m := uint64(1<<width-1) << shift
	return CAP(uint64(c)&^m | v<<shift&m)
}

// MQES returns Maximum Queue Entries Supported, 0's based.
func (c CAP) MQES() uint16 { return uint16(c.field(capMQESShift, 16)) }

// CQR reports Contiguous Queues Required.
func (c CAP) CQR() bool { return c.field(capCQRBit, 1) != 0 }

// AMS returns Arbitration Mechanism Supported (bit 0: weighted round robin
// with urgent priority class; bit 1: vendor specific).
func (c CAP) AMS() uint8 { return uint8(c.field(capAMSShift, 2)) }

// TO returns Timeout, in 500 millisecond units: how long a host waits for
// CSTS.RDY to follow CC.EN.
func (c CAP) TO() uint8 { return uint8(c.field(capTOShift, 8)) }

// DSTRD returns Doorbell Stride (0 on fabrics).
func (c CAP) DSTRD() uint8 { return uint8(c.field(capDSTRDShift, 4)) }

// NSSRS reports NVM Subsystem Reset Supported.
func (c CAP) NSSRS() bool { return c.field(capNSSRSBit, 1) != 0 }

// CSS returns Command Sets Supported (CAPCSS bits).
func (c CAP) CSS() uint8 { return uint8(c.field(capCSSShift, 8)) }

// BPS reports Boot Partition Support.
func (c CAP) BPS() bool { return c.field(capBPSBit, 1) != 0 }

// MPSMIN returns Memory Page Size Minimum: 2^(12+MPSMIN) bytes.
func (c CAP) MPSMIN() uint8 { return uint8(c.field(capMPSMINShift, 4)) }

// MPSMAX returns Memory Page Size Maximum: 2^(12+MPSMAX) bytes.
func (c CAP) MPSMAX() uint8 { return uint8(c.field(capMPSMAXShift, 4)) }

// CMBS reports Controller Memory Buffer Supported.
func (c CAP) CMBS() bool { return c.field(capCMBSBit, 1) != 0 }

// WithMQES returns c with MQES set (0's based).
func (c CAP) WithMQES(v uint16) CAP { return c.with(capMQESShift, 16, uint64(v)) }

// WithCQR returns c with CQR set to on.
func (c CAP) WithCQR(on bool) CAP { return c.with(capCQRBit, 1, b2u(on)) }

// WithAMS returns c with AMS set.
func (c CAP) WithAMS(v uint8) CAP { return c.with(capAMSShift, 2, uint64(v)) }

// WithTO returns c with TO set (500 ms units).
func (c CAP) WithTO(v uint8) CAP { return c.with(capTOShift, 8, uint64(v)) }

// WithNSSRS returns c with NSSRS set to on.
func (c CAP) WithNSSRS(on bool) CAP { return c.with(capNSSRSBit, 1, b2u(on)) }

// WithCSS returns c with CSS set.
func (c CAP) WithCSS(v uint8) CAP { return c.with(capCSSShift, 8, uint64(v)) }

// WithMPSMIN returns c with MPSMIN set.
func (c CAP) WithMPSMIN(v uint8) CAP { return c.with(capMPSMINShift, 4, uint64(v)) }

// WithMPSMAX returns c with MPSMAX set.
func (c CAP) WithMPSMAX(v uint8) CAP { return c.with(capMPSMAXShift, 4, uint64(v)) }

func (c CAP) String() string {
	return fmt.Sprintf("CAP{MQES:%d CQR:%t AMS:%d TO:%d CSS:%#x MPSMIN:%d MPSMAX:%d}",
		c.MQES(), c.CQR(), c.AMS(), c.TO(), c.CSS(), c.MPSMIN(), c.MPSMAX())
}

func b2u(on bool) uint64 {
	if on {
		return 1
	}
	return 0
}

// Version is the VS property and the VER field of Identify Controller:
// major in bits 31:16, minor in 15:8, tertiary in 7:0.
type Version uint32

// Versions of the NVMe specifications.
const (
	Version1_2_1 = Version(1<<16 | 2<<8 | 1)
	Version1_3   = Version(1<<16 | 3<<8)
	Version1_4   = Version(1<<16 | 4<<8)
	Version2_0   = Version(2 << 16)
	Version2_1   = Version(2<<16 | 1<<8)
)

// NewVersion returns major.minor.tertiary.
func NewVersion(major uint16, minor, tertiary uint8) Version {
	return Version(uint32(major)<<16 | uint32(minor)<<8 | uint32(tertiary))
}

// Major returns the major version.
func (v Version) Major() uint16 { return uint16(v >> 16) }

// Minor returns the minor version.
func (v Version) Minor() uint8 { return uint8(v >> 8) }

// Tertiary returns the tertiary version.
func (v Version) Tertiary() uint8 { return uint8(v) }

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", v.Major(), v.Minor(), v.Tertiary())
}

// CC is the Controller Configuration property.
type CC uint32

// CC field positions.
const (
	ccENBit       = 0
	ccCSSShift    = 4  // 6:4
	ccMPSShift    = 7  // 10:7
	ccAMSShift    = 11 // 13:11
	ccSHNShift    = 14 // 15:14
	ccIOSQESShift = 16 // 19:16
	ccIOCQESShift = 20 // 23:20
	ccCRIMEBit    = 24
)

// CC.CSS values (I/O Command Set Selected).
const (
	CCCSSNVM       uint8 = 0 // NVM Command Set
	CCCSSAllIO     uint8 = 6 // all supported I/O Command Sets
	CCCSSAdminOnly uint8 = 7 // admin command set only
)

// ShutdownNotification is CC.SHN.
type ShutdownNotification uint8

// Shutdown notifications.
const (
	ShutdownNone   ShutdownNotification = 0
	ShutdownNormal ShutdownNotification = 1
	ShutdownAbrupt ShutdownNotification = 2
)

// EN reports Enable.
func (c CC) EN() bool { return bit(uint32(c), ccENBit) }

// CSS returns I/O Command Set Selected.
func (c CC) CSS() uint8 { return uint8(bits(uint32(c), ccCSSShift, 3)) }

// MPS returns Memory Page Size: 2^(12+MPS) bytes.
func (c CC) MPS() uint8 { return uint8(bits(uint32(c), ccMPSShift, 4)) }

// AMS returns Arbitration Mechanism Selected.
func (c CC) AMS() uint8 { return uint8(bits(uint32(c), ccAMSShift, 3)) }

// SHN returns Shutdown Notification.
func (c CC) SHN() ShutdownNotification {
	return ShutdownNotification(bits(uint32(c), ccSHNShift, 2))
}

// IOSQES returns I/O Submission Queue Entry Size: 2^IOSQES bytes (6 for 64).
func (c CC) IOSQES() uint8 { return uint8(bits(uint32(c), ccIOSQESShift, 4)) }

// IOCQES returns I/O Completion Queue Entry Size: 2^IOCQES bytes (4 for 16).
func (c CC) IOCQES() uint8 { return uint8(bits(uint32(c), ccIOCQESShift, 4)) }

// CRIME reports Controller Ready Independent of Media Enable.
func (c CC) CRIME() bool { return bit(uint32(c), ccCRIMEBit) }

// WithEN returns c with EN set to on.
func (c CC) WithEN(on bool) CC { return CC(setBit(uint32(c), ccENBit, on)) }

// WithCSS returns c with CSS set.
func (c CC) WithCSS(v uint8) CC { return CC(setBits(uint32(c), ccCSSShift, 3, uint32(v))) }

// WithMPS returns c with MPS set.
func (c CC) WithMPS(v uint8) CC { return CC(setBits(uint32(c), ccMPSShift, 4, uint32(v))) }

// WithAMS returns c with AMS set.
func (c CC) WithAMS(v uint8) CC { return CC(setBits(uint32(c), ccAMSShift, 3, uint32(v))) }

// WithSHN returns c with SHN set.
func (c CC) WithSHN(v ShutdownNotification) CC {
	return CC(setBits(uint32(c), ccSHNShift, 2, uint32(v)))
}

// WithIOSQES returns c with IOSQES set.
func (c CC) WithIOSQES(v uint8) CC { return CC(setBits(uint32(c), ccIOSQESShift, 4, uint32(v))) }

// WithIOCQES returns c with IOCQES set.
func (c CC) WithIOCQES(v uint8) CC { return CC(setBits(uint32(c), ccIOCQESShift, 4, uint32(v))) }

func (c CC) String() string {
	return fmt.Sprintf("CC{EN:%t CSS:%d MPS:%d AMS:%d SHN:%d IOSQES:%d IOCQES:%d}",
		c.EN(), c.CSS(), c.MPS(), c.AMS(), c.SHN(), c.IOSQES(), c.IOCQES())
}

// CSTS is the Controller Status property.
type CSTS uint32

// CSTS field positions.
const (
	cstsRDYBit    = 0
	cstsCFSBit    = 1
	cstsSHSTShift = 2 // 3:2
	cstsNSSROBit  = 4
	cstsPPBit     = 5
)

// ShutdownStatus is CSTS.SHST.
type ShutdownStatus uint8

// Shutdown statuses.
const (
	ShutdownStatusNormal    ShutdownStatus = 0 // normal operation, no shutdown requested
	ShutdownStatusOccurring ShutdownStatus = 1 // shutdown processing occurring
	ShutdownStatusComplete  ShutdownStatus = 2 // shutdown processing complete
)

// RDY reports Ready.
func (s CSTS) RDY() bool { return bit(uint32(s), cstsRDYBit) }

// CFS reports Controller Fatal Status.
func (s CSTS) CFS() bool { return bit(uint32(s), cstsCFSBit) }

// SHST returns Shutdown Status.
func (s CSTS) SHST() ShutdownStatus { return ShutdownStatus(bits(uint32(s), cstsSHSTShift, 2)) }

// NSSRO reports NVM Subsystem Reset Occurred.
func (s CSTS) NSSRO() bool { return bit(uint32(s), cstsNSSROBit) }

// PP reports Processing Paused.
func (s CSTS) PP() bool { return bit(uint32(s), cstsPPBit) }

// WithRDY returns s with RDY set to on.
func (s CSTS) WithRDY(on bool) CSTS { return CSTS(setBit(uint32(s), cstsRDYBit, on)) }

// WithCFS returns s with CFS set to on.
func (s CSTS) WithCFS(on bool) CSTS { return CSTS(setBit(uint32(s), cstsCFSBit, on)) }

// WithSHST returns s with SHST set.
func (s CSTS) WithSHST(v ShutdownStatus) CSTS {
	return CSTS(setBits(uint32(s), cstsSHSTShift, 2, uint32(v)))
}

func (s CSTS) String() string {
	return fmt.Sprintf("CSTS{RDY:%t CFS:%t SHST:%d}", s.RDY(), s.CFS(), s.SHST())
}
