package nvmeof

// Log page sizes.
const (
	ErrorLogEntrySize       = 64
	SMARTLogSize            = 512
	FirmwareSlotLogSize     = 512
	ChangedNamespaceLogSize = NamespaceListSize
)

// Byte offsets of the fields of an Error Information log entry (NVMe Base
// 2.x, 5.2.12.1.2).
const (
	ErrLogOffsetErrorCount = 0  // ECNT, 8 bytes; 0 marks an invalid entry
	ErrLogOffsetSQID       = 8  // Submission Queue ID
	ErrLogOffsetCID        = 10 // Command ID
	ErrLogOffsetStatus     = 12 // phase tag bit 0, Status bits 15:1
	ErrLogOffsetPEL        = 14 // Parameter Error Location
	ErrLogOffsetLBA        = 16 // LBA, 8 bytes
	ErrLogOffsetNSID       = 24 // Namespace
	ErrLogOffsetVSIA       = 28 // Vendor Specific Information Available
	ErrLogOffsetTRTYPE     = 29 // Transport Type
	ErrLogOffsetCSI        = 30 // Command Set Indicator (log page version 1)
	ErrLogOffsetOPC        = 31 // Opcode (log page version 1)
	ErrLogOffsetCSINFO     = 32 // Command Specific Information, 8 bytes
	ErrLogOffsetTTSI       = 40 // Transport Type Specific Information
	ErrLogOffsetLPVER      = 63 // Log Page Version
)

// ErrorLogEntry is one 64-byte entry of the Error Information log page
// (LID 01h). The page is ELPE+1 entries, newest first.
type ErrorLogEntry struct {
	ErrorCount uint64
	SQID       uint16
	CID        uint16
	Phase      bool
	Status     Status
	// PEL is the Parameter Error Location: byte in bits 7:0, bit in bits
	// 10:8, of the command parameter in error.
	PEL     uint16
	LBA     uint64
	NSID    uint32
	VSIA    uint8
	TRTYPE  TransportType
	CSI     uint8
	Opcode  Opcode
	CSInfo  uint64
	TTSI    uint16
	Version uint8
}

// NewParameterErrorLocation returns the PEL value for byte and bit (0-7)
// of a command.
func NewParameterErrorLocation(byteOffset uint8, bitOffset uint8) uint16 {
	return uint16(byteOffset) | uint16(bitOffset&7)<<8
}

// MarshalTo writes the 64-byte entry into b, reserved bytes cleared.
func (e *ErrorLogEntry) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("error log entry", b, ErrorLogEntrySize); err != nil {
		return 0, err
	}
	b = b[:ErrorLogEntrySize]
	clear(b)
	le.PutUint64(b[ErrLogOffsetErrorCount:], e.ErrorCount)
	le.PutUint16(b[ErrLogOffsetSQID:], e.SQID)
	le.PutUint16(b[ErrLogOffsetCID:], e.CID)
	sts := uint16(e.Status&statusMask) << 1
	if e.Phase {
		sts |= 1
	}
	le.PutUint16(b[ErrLogOffsetStatus:], sts)
	le.PutUint16(b[ErrLogOffsetPEL:], e.PEL&0x07ff)
	le.PutUint64(b[ErrLogOffsetLBA:], e.LBA)
	le.PutUint32(b[ErrLogOffsetNSID:], e.NSID)
	b[ErrLogOffsetVSIA] = e.VSIA
	b[ErrLogOffsetTRTYPE] = byte(e.TRTYPE)
	b[ErrLogOffsetCSI] = e.CSI
	b[ErrLogOffsetOPC] = byte(e.Opcode)
	le.PutUint64(b[ErrLogOffsetCSINFO:], e.CSInfo)
	le.PutUint16(b[ErrLogOffsetTTSI:], e.TTSI)
	b[ErrLogOffsetLPVER] = e.Version
	return ErrorLogEntrySize, nil
}

// MarshalBinary returns the 64-byte entry.
func (e *ErrorLogEntry) MarshalBinary() ([]byte, error) {
	b := make([]byte, ErrorLogEntrySize)
	_, err := e.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes exactly 64 bytes. Reserved bits of PEL are dropped.
func (e *ErrorLogEntry) UnmarshalBinary(b []byte) error {
	if err := needExactly("error log entry", b, ErrorLogEntrySize); err != nil {
		return err
	}
	sts := le.Uint16(b[ErrLogOffsetStatus:])
	*e = ErrorLogEntry{
		ErrorCount: le.Uint64(b[ErrLogOffsetErrorCount:]),
		SQID:       le.Uint16(b[ErrLogOffsetSQID:]),
		CID:        le.Uint16(b[ErrLogOffsetCID:]),
		Phase:      sts&1 != 0,
		Status:     Status(sts >> 1),
		PEL:        le.Uint16(b[ErrLogOffsetPEL:]) & 0x07ff,
		LBA:        le.Uint64(b[ErrLogOffsetLBA:]),
		NSID:       le.Uint32(b[ErrLogOffsetNSID:]),
		VSIA:       b[ErrLogOffsetVSIA],
		TRTYPE:     TransportType(b[ErrLogOffsetTRTYPE]),
		CSI:        b[ErrLogOffsetCSI],
		Opcode:     Opcode(b[ErrLogOffsetOPC]),
		CSInfo:     le.Uint64(b[ErrLogOffsetCSINFO:]),
		TTSI:       le.Uint16(b[ErrLogOffsetTTSI:]),
		Version:    b[ErrLogOffsetLPVER],
	}
	return nil
}

// Byte offsets of the fields of the SMART / Health Information log page
// (NVMe Base 2.x, 5.2.12.1.3).
const (
	SMARTOffsetCriticalWarning         = 0
	SMARTOffsetCompositeTemperature    = 1 // Kelvin, 2 bytes
	SMARTOffsetAvailableSpare          = 3 // percent
	SMARTOffsetAvailableSpareThreshold = 4 // percent
	SMARTOffsetPercentageUsed          = 5
	SMARTOffsetEnduranceGroupWarning   = 6
	SMARTOffsetDataUnitsRead           = 32 // 16 bytes, thousands of 512-byte units
	SMARTOffsetDataUnitsWritten        = 48
	SMARTOffsetHostReadCommands        = 64
	SMARTOffsetHostWriteCommands       = 80
	SMARTOffsetControllerBusyTime      = 96 // minutes
	SMARTOffsetPowerCycles             = 112
	SMARTOffsetPowerOnHours            = 128
	SMARTOffsetUnsafeShutdowns         = 144
	SMARTOffsetMediaErrors             = 160
	SMARTOffsetErrorLogEntries         = 176
	SMARTOffsetWarningTemperatureTime  = 192 // minutes, 4 bytes
	SMARTOffsetCriticalTemperatureTime = 196 // minutes, 4 bytes
	SMARTOffsetTemperatureSensors      = 200 // 8 sensors, 2 bytes each, Kelvin
	SMARTOffsetThermalTransitionCount1 = 216
	SMARTOffsetThermalTransitionCount2 = 220
	SMARTOffsetThermalTotalTime1       = 224
	SMARTOffsetThermalTotalTime2       = 228
)

// Critical warning bits of the SMART / Health log page.
const (
	CriticalWarningSpare          uint8 = 1 << 0
	CriticalWarningTemperature    uint8 = 1 << 1
	CriticalWarningReliability    uint8 = 1 << 2
	CriticalWarningReadOnly       uint8 = 1 << 3
	CriticalWarningVolatileBackup uint8 = 1 << 4
)

// SMARTLog is the SMART / Health Information log page (LID 02h).
type SMARTLog struct {
	CriticalWarning         uint8
	CompositeTemperature    uint16 // Kelvin
	AvailableSpare          uint8
	AvailableSpareThreshold uint8
	PercentageUsed          uint8
	EnduranceGroupWarning   uint8
	DataUnitsRead           Uint128
	DataUnitsWritten        Uint128
	HostReadCommands        Uint128
	HostWriteCommands       Uint128
	ControllerBusyTime      Uint128
	PowerCycles             Uint128
	PowerOnHours            Uint128
	UnsafeShutdowns         Uint128
	MediaErrors             Uint128
	ErrorLogEntries         Uint128
	WarningTemperatureTime  uint32
	CriticalTemperatureTime uint32
	TemperatureSensors      [8]uint16
	ThermalTransitionCount  [2]uint32
	ThermalTotalTime        [2]uint32
}

// MarshalTo writes the 512-byte page into b, reserved bytes cleared.
func (s *SMARTLog) MarshalTo(b []byte) (int, error) {
	if err := needAtLeast("SMART log", b, SMARTLogSize); err != nil {
		return 0, err
	}
	b = b[:SMARTLogSize]
	clear(b)
	b[SMARTOffsetCriticalWarning] = s.CriticalWarning
	le.PutUint16(b[SMARTOffsetCompositeTemperature:], s.CompositeTemperature)
	b[SMARTOffsetAvailableSpare] = s.AvailableSpare
	b[SMARTOffsetAvailableSpareThreshold] = s.AvailableSpareThreshold
	b[SMARTOffsetPercentageUsed] = s.PercentageUsed
	b[SMARTOffsetEnduranceGroupWarning] = s.EnduranceGroupWarning
	for i, v := range s.counters() {
		putUint128(b[SMARTOffsetDataUnitsRead+16*i:], *v)
	}
	le.PutUint32(b[SMARTOffsetWarningTemperatureTime:], s.WarningTemperatureTime)
	le.PutUint32(b[SMARTOffsetCriticalTemperatureTime:], s.CriticalTemperatureTime)
	for i, t := range s.TemperatureSensors {
		le.PutUint16(b[SMARTOffsetTemperatureSensors+2*i:], t)
	}
	le.PutUint32(b[SMARTOffsetThermalTransitionCount1:], s.ThermalTransitionCount[0])
	le.PutUint32(b[SMARTOffsetThermalTransitionCount2:], s.ThermalTransitionCount[1])
	le.PutUint32(b[SMARTOffsetThermalTotalTime1:], s.ThermalTotalTime[0])
	le.PutUint32(b[SMARTOffsetThermalTotalTime2:], s.ThermalTotalTime[1])
	return SMARTLogSize, nil
}

// counters returns the 128-bit counters in wire order (16 bytes apart from
// SMARTOffsetDataUnitsRead).
func (s *SMARTLog) counters() [10]*Uint128 {
	return [10]*Uint128{
		&s.DataUnitsRead, &s.DataUnitsWritten, &s.HostReadCommands, &s.HostWriteCommands,
		&s.ControllerBusyTime, &s.PowerCycles, &s.PowerOnHours, &s.UnsafeShutdowns,
		&s.MediaErrors, &s.ErrorLogEntries,
	}
}

// MarshalBinary returns the 512-byte page.
func (s *SMARTLog) MarshalBinary() ([]byte, error) {
	b := make([]byte, SMARTLogSize)
	_, err := s.MarshalTo(b)
	return b, err
}

// UnmarshalBinary decodes exactly 512 bytes.
func (s *SMARTLog) UnmarshalBinary(b []byte) error {
	if err := needExactly("SMART log", b, SMARTLogSize); err != nil {
		return err
	}
	var x SMARTLog
	x.CriticalWarning = b[SMARTOffsetCriticalWarning]
	x.CompositeTemperature = le.Uint16(b[SMARTOffsetCompositeTemperature:])
	x.AvailableSpare = b[SMARTOffsetAvailableSpare]
	x.AvailableSpareThreshold = b[SMARTOffsetAvailableSpareThreshold]
	x.PercentageUsed = b[SMARTOffsetPercentageUsed]
	x.EnduranceGroupWarning = b[SMARTOffsetEnduranceGroupWarning]
	for i, v := range x.counters() {
		*v = getUint128(b[SMARTOffsetDataUnitsRead+16*i:])
	}
	x.WarningTemperatureTime = le.Uint32(b[SMARTOffsetWarningTemperatureTime:])
	x.CriticalTemperatureTime = le.Uint32(b[SMARTOffsetCriticalTemperatureTime:])
	for i := range x.TemperatureSensors {
		x.TemperatureSensors[i] = le.Uint16(b[SMARTOffsetTemperatureSensors+2*i:])
	}
	x.ThermalTransitionCount[0] = le.Uint32(b[SMARTOffsetThermalTransitionCount1:])
	x.ThermalTransitionCount[1] = le.Uint32(b[SMARTOffsetThermalTransitionCount2:])
	x.ThermalTotalTime[0] = le.Uint32(b[SMARTOffsetThermalTotalTime1:])
	x.ThermalTotalTime[1] = le.Uint32(b[SMARTOffsetThermalTotalTime2:])
	*s = x
	return nil
}

// Byte offsets of the Firmware Slot Information log page (NVMe Base 2.x,
// 5.2.12.1.4).
const (
	FWSlotOffsetAFI  = 0 // Active Firmware Info
	FWSlotOffsetFRS1 = 8 // Firmware Revision for Slot 1..7, 8 bytes each
)

// FirmwareSlots is the number of firmware slots the log page describes.
const FirmwareSlots = 7

// FirmwareSlotLog is the Firmware Slot Information log page (LID 03h).
type FirmwareSlotLog struct {
	// AFI is Active Firmware Info: current slot in bits 2:0, next slot
	// (after reset) in bits 6:4.
	AFI uint8
	// FRS holds the firmware revision in each slot; "" for an empty slot
	// (all zero on the wire).
	FRS [FirmwareSlots]string
}

// ActiveSlot returns the slot the running firmware was loaded from (1-7).
func (f *FirmwareSlotLog) ActiveSlot() int { return int(f.AFI & 7) }

// NextSlot returns the slot that is activated at the next reset, 0 if none
// is indicated.
func (f *FirmwareSlotLog) NextSlot() int { return int(f.AFI >> 4 & 7) }

// MarshalTo writes the 512-byte page into b, reserved bytes cleared. A
// revision is ASCII of at most 8 characters, space-padded; an empty one
// is written as zeros.
func (f *FirmwareSlotLog) MarshalTo(b []byte) (int, error) {
	const name = "firmware slot log"
	if err := needAtLeast(name, b, FirmwareSlotLogSize); err != nil {
		return 0, err
	}
	b = b[:FirmwareSlotLogSize]
	clear(b)
	b[FWSlotOffsetAFI] = f.AFI & 0x77
	for i, r := range f.FRS {
		if r == "" {
			continue
		}
		off := FWSlotOffsetFRS1 + FirmwareRevisionSize*i
		if err := putASCII(b[off:off+FirmwareRevisionSize], r); err != nil {
			return 0, &FieldError{Structure: name, Field: "FRS", Offset: off, Err: err}
		}
	}
	return FirmwareSlotLogSize, nil
}

// MarshalBinary returns the 512-byte page.
func (f *FirmwareSlotLog) MarshalBinary() ([]byte, error) {
	b := make([]byte, FirmwareSlotLogSize)
	if _, err := f.MarshalTo(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalBinary decodes exactly 512 bytes. Revisions must be ASCII.
func (f *FirmwareSlotLog) UnmarshalBinary(b []byte) error {
	const name = "firmware slot log"
	if err := needExactly(name, b, FirmwareSlotLogSize); err != nil {
		return err
	}
	var x FirmwareSlotLog
	x.AFI = b[FWSlotOffsetAFI] & 0x77
	for i := range x.FRS {
		off := FWSlotOffsetFRS1 + FirmwareRevisionSize*i
		r, err := getASCII(b[off : off+FirmwareRevisionSize])
		if err != nil {
			return &FieldError{Structure: name, Field: "FRS", Offset: off, Err: err}
		}
		x.FRS[i] = r
	}
	*f = x
	return nil
}

// NamespaceListOverflow is the first entry of a Changed Attached Namespace
// List that has more than 1024 changed namespaces to report.
const NamespaceListOverflow uint32 = 0xffffffff

// MarshalChangedNamespaceList writes the Changed Attached Namespace List
// log page (LID 04h) into b: the ascending NSIDs in ids, or, if there are
// more than 1024 of them, the overflow marker FFFFFFFFh followed by zeros.
func MarshalChangedNamespaceList(b []byte, ids []uint32) (int, error) {
	if len(ids) > NamespaceListEntries {
		if err := needAtLeast("changed namespace list", b, NamespaceListSize); err != nil {
			return 0, err
		}
		clear(b[:NamespaceListSize])
		le.PutUint32(b, NamespaceListOverflow)
		return NamespaceListSize, nil
	}
	return MarshalNamespaceList(b, ids)
}

// AppendChangedNamespaceList decodes the Changed Attached Namespace List
// log page and appends its NSIDs to dst. overflow reports the FFFFFFFFh
// marker: more namespaces changed than the list holds, and the host has to
// rescan them all.
func AppendChangedNamespaceList(dst []uint32, b []byte) (ids []uint32, overflow bool, err error) {
	const name = "changed namespace list"
	if err := needExactly(name, b, NamespaceListSize); err != nil {
		return dst, false, err
	}
	if le.Uint32(b) == NamespaceListOverflow {
		for i := 1; i < NamespaceListEntries; i++ {
			if le.Uint32(b[4*i:]) != 0 {
				return dst, false, &FieldError{Structure: name, Field: "NSID", Offset: 4 * i, Err: ErrInvalidList}
			}
		}
		return dst, true, nil
	}
	ids, err = AppendNamespaceList(dst, b)
	return ids, false, err
}
