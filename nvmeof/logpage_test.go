package nvmeof

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errorLogEntryBytes records an Invalid Field in Command on a Read over
// RDMA (NVMe Base 2.x 5.2.12.1.2).
var errorLogEntryBytes = annotated(`
	2a 00 00 00 00 00 00 00  # 07:00  Error Count 42
	01 00                    # 09:08  SQID 1
	05 00                    # 11:10  CID 5
	05 80                    # 13:12  P 1, SC 02h, SCT 0h, DNR: Invalid Field in Command
	2c 00                    # 15:14  PEL: byte 2Ch (44, CDW11), bit 0
	00 10 00 00 00 00 00 00  # 23:16  LBA 1000h
	01 00 00 00              # 27:24  NSID 1
	00                       # 28     VSIA: none
	01                       # 29     TRTYPE: RDMA
	00                       # 30     CSI: NVM
	02                       # 31     OPC: Read
	00 00 00 00 00 00 00 00  # 39:32  Command Specific Information
	00 00                    # 41:40  Transport Type Specific Information
	00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 62:42 reserved
	01                       # 63     Log Page Version 1
`)

func TestErrorLogEntry(t *testing.T) {
	var e ErrorLogEntry
	require.NoError(t, e.UnmarshalBinary(errorLogEntryBytes))
	want := ErrorLogEntry{
		ErrorCount: 42, SQID: 1, CID: 5, Phase: true, Status: StatusInvalidField.WithDNR(),
		PEL: NewParameterErrorLocation(44, 0), LBA: 0x1000, NSID: 1, TRTYPE: TransportRDMA,
		CSI: CSINVM, Opcode: IORead, Version: 1,
	}
	assert.Equal(t, want, e)
	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, errorLogEntryBytes, out)

	assert.Equal(t, uint16(0x0503), NewParameterErrorLocation(3, 5))
	assert.Equal(t, uint16(0x0003), NewParameterErrorLocation(3, 8), "bit is 3 bits")
	assert.ErrorIs(t, e.UnmarshalBinary(errorLogEntryBytes[:63]), ErrLength)
}

// TestSMARTLog checks the SMART / Health Information log page (NVMe Base
// 2.x 5.2.12.1.3).
func TestSMARTLog(t *testing.T) {
	b := make([]byte, SMARTLogSize)
	place(t, b, 0, `04                 # 00      Critical Warning: reliability degraded`)
	place(t, b, 1, `3b 01              # 02:01   Composite Temperature 315 K`)
	place(t, b, 3, `64 0a 03 00        # 06:03   Available Spare 100%, threshold 10%, used 3%, EG warnings 0`)
	place(t, b, 32, `e8 03 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 47:32  Data Units Read 1000`)
	place(t, b, 48, `00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00  # 63:48  Data Units Written 2^64`)
	place(t, b, 64, `10 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 79:64  Host Read Commands 16`)
	place(t, b, 112, `02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 # 127:112 Power Cycles 2`)
	place(t, b, 176, `07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 # 191:176 Error Log Entries 7`)
	place(t, b, 192, `05 00 00 00 06 00 00 00  # 199:192 Warning / Critical Composite Temperature Time`)
	place(t, b, 200, `3a 01 3c 01                 # 203:200 Temperature Sensors 1 and 2`)
	place(t, b, 216, `01 00 00 00 02 00 00 00 03 00 00 00 04 00 00 00  # 231:216 thermal management counters`)
	var s SMARTLog
	require.NoError(t, s.UnmarshalBinary(b))
	want := SMARTLog{
		CriticalWarning: CriticalWarningReliability, CompositeTemperature: 315,
		AvailableSpare: 100, AvailableSpareThreshold: 10, PercentageUsed: 3,
		DataUnitsRead: Uint128{Lo: 1000}, DataUnitsWritten: Uint128{Hi: 1}, HostReadCommands: Uint128{Lo: 16},
		PowerCycles: Uint128{Lo: 2}, ErrorLogEntries: Uint128{Lo: 7},
		WarningTemperatureTime: 5, CriticalTemperatureTime: 6,
		TemperatureSensors:     [8]uint16{314, 316},
		ThermalTransitionCount: [2]uint32{1, 2}, ThermalTotalTime: [2]uint32{3, 4},
	}
	assert.Equal(t, want, s)
	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)
	assert.ErrorIs(t, s.UnmarshalBinary(b[:511]), ErrLength)
}

// TestFirmwareSlotLog checks the Firmware Slot Information log page
// (NVMe Base 2.x 5.2.12.1.4).
func TestFirmwareSlotLog(t *testing.T) {
	b := make([]byte, FirmwareSlotLogSize)
	place(t, b, 0, `21                         # 00     AFI: active slot 1, next slot 2`)
	place(t, b, 8, `31 2e 30 20 20 20 20 20    # 15:08  FRS1 "1.0"`)
	place(t, b, 16, `31 2e 31 2d 72 63 31 20   # 23:16  FRS2 "1.1-rc1"; FRS3..7 empty (zero)`)
	var f FirmwareSlotLog
	require.NoError(t, f.UnmarshalBinary(b))
	want := FirmwareSlotLog{AFI: 0x21, FRS: [FirmwareSlots]string{"1.0", "1.1-rc1"}}
	assert.Equal(t, want, f)
	assert.Equal(t, 1, f.ActiveSlot())
	assert.Equal(t, 2, f.NextSlot())
	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)

	place(t, b, 24, `ff 00 00 00 00 00 00 00  # FRS3 not ASCII`)
	var fe *FieldError
	require.ErrorAs(t, f.UnmarshalBinary(b), &fe)
	assert.Equal(t, 24, fe.Offset)
	_, err = (&FirmwareSlotLog{FRS: [FirmwareSlots]string{"toolongrev"}}).MarshalBinary()
	assert.ErrorIs(t, err, ErrInvalidString)
}

// TestChangedNamespaceList checks the Changed Attached Namespace List log
// page and its overflow marker (NVMe Base 2.x 5.2.12.1.5).
func TestChangedNamespaceList(t *testing.T) {
	b := make([]byte, ChangedNamespaceLogSize)
	place(t, b, 0, `03 00 00 00 07 00 00 00  # NSIDs 3 and 7 changed`)
	ids, overflow, err := AppendChangedNamespaceList(nil, b)
	require.NoError(t, err)
	assert.False(t, overflow)
	assert.Equal(t, []uint32{3, 7}, ids)
	out := make([]byte, ChangedNamespaceLogSize)
	_, err = MarshalChangedNamespaceList(out, ids)
	require.NoError(t, err)
	assert.Equal(t, b, out)

	many := make([]uint32, NamespaceListEntries+1)
	for i := range many {
		many[i] = uint32(i + 1)
	}
	_, err = MarshalChangedNamespaceList(out, many)
	require.NoError(t, err)
	want := make([]byte, ChangedNamespaceLogSize)
	place(t, want, 0, `ff ff ff ff  # more than 1024 changed; the rest is zero`)
	assert.Equal(t, want, out)
	ids, overflow, err = AppendChangedNamespaceList(nil, out)
	require.NoError(t, err)
	assert.True(t, overflow)
	assert.Empty(t, ids)

	place(t, out, 8, `01 00 00 00  # an entry after the overflow marker`)
	_, _, err = AppendChangedNamespaceList(nil, out)
	assert.ErrorIs(t, err, ErrInvalidList)
	_, _, err = AppendChangedNamespaceList(nil, out[:8])
	assert.ErrorIs(t, err, ErrLength)
	_, err = MarshalChangedNamespaceList(make([]byte, 8), many)
	assert.ErrorIs(t, err, ErrShortBuffer)
}
