package nvmeof

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// identifyControllerBytes places every field this package decodes at the
// offset NVMe Base 2.x 5.2.13.2.1 gives it, with values an RDMA I/O
// controller reports.
func identifyControllerBytes(t testing.TB) []byte {
	b := make([]byte, IdentifyDataSize)
	place(t, b, 0, `cd ab                              # 01:00     VID ABCDh`)
	place(t, b, 2, `34 12                              # 03:02     SSVID 1234h`)
	place(t, b, 4, `30 31 32 33 34 35 36 37 38 39 61 62 63 64 65 66 20 20 20 20  # 23:04  SN "0123456789abcdef", space-padded`)
	place(t, b, 24, `63 61 70 73 75 6c 65 `+strings.Repeat("20 ", 33)+` # 63:24  MN "capsule", space-padded`)
	place(t, b, 64, `30 2e 31 20 20 20 20 20           # 71:64     FR "0.1"`)
	place(t, b, 72, `06                                 # 72        RAB 6`)
	place(t, b, 73, `00 14 4e                           # 75:73     IEEE OUI`)
	place(t, b, 76, `0b                                 # 76        CMIC: multi-port, multi-controller, ANA reporting`)
	place(t, b, 77, `05                                 # 77        MDTS 5 (128 KiB with 4 KiB pages)`)
	place(t, b, 78, `01 00                              # 79:78     CNTLID 1`)
	place(t, b, 80, `00 04 01 00                        # 83:80     VER 1.4.0`)
	place(t, b, 92, `00 09 00 00                        # 95:92     OAES: namespace attribute (bit 8), ANA change (bit 11) notices`)
	place(t, b, 96, `01 00 00 00                        # 99:96     CTRATT: 128-bit host identifier`)
	place(t, b, 111, `01                                # 111       CNTRLTYPE: I/O controller`)
	place(t, b, 128, `0a 00 14 00 1e 00                 # 133:128   CRDT1 1 s, CRDT2 2 s, CRDT3 3 s`)
	place(t, b, 256, `00 00                             # 257:256   OACS 0`)
	place(t, b, 258, `03                                # 258       ACL 3 (4 aborts, 0's based)`)
	place(t, b, 259, `03                                # 259       AERL 3 (4 AERs, 0's based)`)
	place(t, b, 260, `03                                # 260       FRMW: slot 1 read only, 1 slot`)
	place(t, b, 261, `07                                # 261       LPA: per-namespace SMART, effects log, extended data`)
	place(t, b, 262, `3f                                # 262       ELPE 63 (64 entries)`)
	place(t, b, 263, `00                                # 263       NPSS 0 (one power state)`)
	place(t, b, 266, `5d 01 6b 01                       # 269:266   WCTEMP 349 K, CCTEMP 363 K`)
	place(t, b, 270, `64 00                             # 271:270   MTFA 100 (10 s)`)
	place(t, b, 280, `00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00  # 295:280  TNVMCAP 2^32 bytes`)
	place(t, b, 320, `32 00                             # 321:320   KAS 50 (5 s)`)
	place(t, b, 342, `0a                                # 342       ANATT 10 s`)
	place(t, b, 343, `5f                                # 343       ANACAP: the five states, ANAGRPID fixed while attached`)
	place(t, b, 344, `00 04 00 00                       # 347:344   ANAGRPMAX 1024`)
	place(t, b, 348, `00 04 00 00                       # 351:348   NANAGRPID 1024`)
	place(t, b, 512, `66                                # 512       SQES: required 6, maximum 6`)
	place(t, b, 513, `44                                # 513       CQES: required 4, maximum 4`)
	place(t, b, 514, `80 00                             # 515:514   MAXCMD 128`)
	place(t, b, 516, `00 04 00 00                       # 519:516   NN 1024`)
	place(t, b, 520, `0c 00                             # 521:520   ONCS: Dataset Management, Write Zeroes`)
	place(t, b, 525, `07                                # 525       VWC: present, flush broadcast supported`)
	place(t, b, 536, `05 00 10 00                       # 539:536   SGLS: supported, keyed (bit 2), offset (bit 20)`)
	copy(b[768:], testSubNQN) //                           1023:768  SUBNQN, NUL-padded
	place(t, b, 1792, `04 01 00 00                      # 1795:1792 IOCCSZ 260 (64 + 4096 bytes)`)
	place(t, b, 1796, `01 00 00 00                      # 1799:1796 IORCSZ 1 (16 bytes)`)
	place(t, b, 1800, `00 00                            # 1801:1800 ICDOFF 0`)
	place(t, b, 1802, `00                               # 1802      FCATT: dynamic controller model`)
	place(t, b, 1803, `01                               # 1803      MSDBD 1`)
	place(t, b, 1804, `01 00                            # 1805:1804 OFCS: Disconnect supported`)
	place(t, b, 1806, `00                               # 1806      DCTYPE: not a discovery controller`)
	place(t, b, 2048, `c4 09                            # 2049:2048 PSD0 MP 2500 (25 W)`)
	return b
}

func identifyControllerValue() IdentifyController {
	id := IdentifyController{
		VID: 0xabcd, SSVID: 0x1234, SN: "0123456789abcdef", MN: "capsule", FR: "0.1",
		RAB: 6, IEEE: [3]byte{0x00, 0x14, 0x4e}, CMIC: CMICMultiPort | CMICMultiController | CMICANA, MDTS: 5,
		CNTLID: 1, VER: Version1_4, OAES: 1<<8 | 1<<11, CTRATT: CTRATTHostID128, CNTRLTYPE: ControllerTypeIO,
		CRDT: [3]uint16{10, 20, 30}, ACL: 3, AERL: 3, FRMW: 3,
		LPA: LPASMARTPerNamespace | LPACommandsEffects | LPAExtendedData, ELPE: 63,
		WCTEMP: 349, CCTEMP: 363, MTFA: 100, TNVMCAP: Uint128{Lo: 1 << 32}, KAS: 50,
		ANATT: 10, ANACAP: ANACAPOptimized | ANACAPNonOptimized | ANACAPInaccessible | ANACAPPersistentLoss | ANACAPChange | ANACAPGroupIDFixed,
		ANAGRPMAX: 1024, NANAGRPID: 1024, SQES: 0x66, CQES: 0x44,
		MAXCMD: 128, NN: 1024, ONCS: ONCSDatasetManagement | ONCSWriteZeroes,
		VWC: VWCPresent | VWCFlushBroadcast, SGLS: SGLSSupported | SGLSKeyedDataBlock | SGLSOffsetAddress,
		SUBNQN: testSubNQN, IOCCSZ: 260, IORCSZ: 1, MSDBD: 1, OFCS: OFCSDisconnect,
	}
	id.PSD[0].SetMaxPower(2500)
	return id
}

func TestIdentifyController(t *testing.T) {
	b := identifyControllerBytes(t)
	var id IdentifyController
	require.NoError(t, id.UnmarshalBinary(b))
	want := identifyControllerValue()
	assert.Equal(t, want, id)
	assert.Equal(t, 64+4096, id.CommandCapsuleSize())
	assert.Equal(t, uint16(2500), id.PSD[0].MaxPower())
	assert.False(t, id.PSD[0].NonOperational())

	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)

	// A central discovery controller reports DCTYPE 2 at byte 1806.
	place(t, b, 1806, `02`)
	require.NoError(t, id.UnmarshalBinary(b))
	assert.Equal(t, uint8(2), id.DCTYPE)
}

func TestIdentifyControllerStrings(t *testing.T) {
	// NUL padding, as some controllers use, decodes the same.
	b := identifyControllerBytes(t)
	copy(b[IDCtrlOffsetFR:], "0.1\x00\x00\x00\x00\x00")
	var id IdentifyController
	require.NoError(t, id.UnmarshalBinary(b))
	assert.Equal(t, "0.1", id.FR)

	for _, tc := range []struct {
		name  string
		off   int
		bytes string
		field string
	}{
		{"control character in SN", IDCtrlOffsetSN, "abc\ndef", "SN"},
		{"byte above 7Eh in MN", IDCtrlOffsetMN, "caps\xc3\xbcle", "MN"},
		{"text after a NUL in FR", IDCtrlOffsetFR, "0.1\x00beta", "FR"},
		{"SUBNQN without terminator", IDCtrlOffsetSUBNQN, strings.Repeat("q", 256), "SUBNQN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := identifyControllerBytes(t)
			copy(b[tc.off:], tc.bytes)
			var id IdentifyController
			err := id.UnmarshalBinary(b)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
			assert.Equal(t, tc.off, fe.Offset)
		})
	}

	// An empty SUBNQN (pre-1.2.1 controllers) is allowed both ways.
	b = identifyControllerBytes(t)
	clear(b[IDCtrlOffsetSUBNQN : IDCtrlOffsetSUBNQN+NQNFieldSize])
	require.NoError(t, id.UnmarshalBinary(b))
	assert.Empty(t, id.SUBNQN)
	_, err := id.MarshalBinary()
	require.NoError(t, err)

	bad := identifyControllerValue()
	bad.SN = strings.Repeat("9", SerialNumberSize+1)
	_, err = bad.MarshalBinary()
	assert.ErrorIs(t, err, ErrInvalidString)
	bad = identifyControllerValue()
	bad.MN = "tab\there"
	_, err = bad.MarshalBinary()
	assert.ErrorIs(t, err, ErrInvalidString)
	bad = identifyControllerValue()
	bad.SUBNQN = "x\x00y"
	_, err = bad.MarshalBinary()
	assert.ErrorIs(t, err, ErrInvalidNQN)

	assert.ErrorIs(t, id.UnmarshalBinary(make([]byte, 4095)), ErrLength)
	_, err = id.MarshalTo(make([]byte, 4095))
	assert.ErrorIs(t, err, ErrShortBuffer)
}

// identifyNamespaceBytes is a 1 GiB namespace of 4 KiB blocks with two LBA
// formats (NVM Command Set Specification, Identify Namespace).
func identifyNamespaceBytes(t testing.TB) []byte {
	b := make([]byte, IdentifyDataSize)
	place(t, b, 0, `00 00 04 00 00 00 00 00   # 07:00   NSZE 40000h blocks`)
	place(t, b, 8, `00 00 04 00 00 00 00 00   # 15:08   NCAP 40000h`)
	place(t, b, 16, `00 00 02 00 00 00 00 00  # 23:16   NUSE 20000h`)
	place(t, b, 24, `01                       # 24      NSFEAT: thin provisioning`)
	place(t, b, 25, `01                       # 25      NLBAF 1 (two formats, 0's based)`)
	place(t, b, 26, `01                       # 26      FLBAS: format 1, metadata not extended`)
	place(t, b, 33, `09                       # 33      DLFEAT: reads zeros, Write Zeroes deallocates`)
	place(t, b, 64, `07 00 07 00 07 00 07 00 07 00  # 73:64  NPWG, NPWA, NPDG, NPDA, NOWS 7 (8 blocks)`)
	place(t, b, 104, `01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10  # 119:104 NGUID`)
	place(t, b, 120, `a1 a2 a3 a4 a5 a6 a7 a8  # 127:120 EUI64`)
	place(t, b, 128, `00 00 09 02              # 131:128 LBAF0: MS 0, LBADS 9 (512), RP 10b`)
	place(t, b, 132, `00 00 0c 00              # 135:132 LBAF1: MS 0, LBADS 12 (4096), RP 00b`)
	return b
}

func TestIdentifyNamespace(t *testing.T) {
	b := identifyNamespaceBytes(t)
	var ns IdentifyNamespace
	require.NoError(t, ns.UnmarshalBinary(b))
	want := IdentifyNamespace{
		NSZE: 0x40000, NCAP: 0x40000, NUSE: 0x20000, NSFEAT: NSFEATThinProvisioning, NLBAF: 1, FLBAS: 1,
		DLFEAT: DLFEATReadZeroes | DLFEATWriteZeroesDeallocate,
		NPWG:   7, NPWA: 7, NPDG: 7, NPDA: 7, NOWS: 7,
		NGUID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		EUI64: [8]byte{0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8},
	}
	want.LBAF[0] = LBAFormat{LBADS: 9, RP: 2}
	want.LBAF[1] = LBAFormat{LBADS: 12}
	assert.Equal(t, want, ns)
	assert.Equal(t, 1, ns.FormatIndex())
	bs, err := ns.BlockSize()
	require.NoError(t, err)
	assert.Equal(t, uint32(4096), bs)

	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)

	// An inactive namespace is all zero and decodes.
	require.NoError(t, ns.UnmarshalBinary(make([]byte, IdentifyDataSize)))
	_, err = ns.BlockSize()
	assert.ErrorIs(t, err, ErrFieldValue)
}

func TestIdentifyNamespaceFormatIndex(t *testing.T) {
	var ns IdentifyNamespace
	ns.FLBAS = 0x10 // metadata at the end of the block: kept
	ns.SetFormatIndex(0x2b)
	assert.Equal(t, uint8(0x10|0x0b|0x40), ns.FLBAS, "bits 3:0 = Bh, bits 6:5 = 10b")
	assert.Equal(t, 0x2b, ns.FormatIndex())
	ns.SetFormatIndex(0)
	assert.Equal(t, uint8(0x10), ns.FLBAS)
}

func TestIdentifyNamespaceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		off   int
		hex   string
		field string
	}{
		{"NCAP above NSZE", IDNSOffsetNCAP, "00 00 05 00 00 00 00 00", "NCAP"},
		{"NUSE above NCAP", IDNSOffsetNUSE, "00 00 05 00 00 00 00 00", "NUSE"},
		{"65 formats", IDNSOffsetNLBAF, "40", "NLBAF"},
		{"format in use not listed", IDNSOffsetFLBAS, "02", "FLBAS"},
		{"block of 256 bytes", IDNSOffsetLBAF + 4 + 2, "08", "LBADS"},
		{"block of 2^32 bytes", IDNSOffsetLBAF + 4 + 2, "20", "LBADS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := identifyNamespaceBytes(t)
			place(t, b, tc.off, tc.hex)
			var ns IdentifyNamespace
			err := ns.UnmarshalBinary(b)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
		})
	}
}

func TestNamespaceList(t *testing.T) {
	b := make([]byte, NamespaceListSize)
	place(t, b, 0, `01 00 00 00  02 00 00 00  0a 00 00 00  # NSIDs 1, 2, 10; zeros after`)
	ids, err := AppendNamespaceList(nil, b)
	require.NoError(t, err)
	assert.Equal(t, []uint32{1, 2, 10}, ids)

	out := make([]byte, NamespaceListSize)
	for i := range out {
		out[i] = 0xee
	}
	n, err := MarshalNamespaceList(out, ids)
	require.NoError(t, err)
	assert.Equal(t, NamespaceListSize, n)
	assert.Equal(t, b, out)

	// Identify CNS 02h with NSID 1 lists the IDs above 1.
	assert.Equal(t, []uint32{2, 10}, ActiveNamespacesAfter(ids, 1))
	assert.Empty(t, ActiveNamespacesAfter(ids, 10))
	many := make([]uint32, 2000)
	for i := range many {
		many[i] = uint32(i + 1)
	}
	assert.Len(t, ActiveNamespacesAfter(many, 0), NamespaceListEntries)
	assert.Equal(t, uint32(1001), ActiveNamespacesAfter(many, 1000)[0])

	for name, list := range map[string][]uint32{
		"descending": {2, 1}, "duplicate": {1, 1}, "zero": {0}, "broadcast": {NSIDAll}, "FFFFFFFEh": {0xfffffffe},
		"1025 entries": many[:1025],
	} {
		_, err := MarshalNamespaceList(out, list)
		assert.ErrorIs(t, err, ErrInvalidList, name)
	}

	place(t, b, 16, `05 00 00 00  # a nonzero entry after the terminating zero`)
	_, err = AppendNamespaceList(nil, b)
	assert.ErrorIs(t, err, ErrInvalidList)
	b = make([]byte, NamespaceListSize)
	place(t, b, 0, `05 00 00 00  03 00 00 00  # out of order`)
	got, err := AppendNamespaceList([]uint32{99}, b)
	assert.ErrorIs(t, err, ErrInvalidList)
	assert.Equal(t, []uint32{99}, got, "dst is left as it was")
	_, err = AppendNamespaceList(nil, b[:100])
	assert.ErrorIs(t, err, ErrLength)
}

// TestNamespaceIDs checks the namespace identification descriptor list
// (NVMe Base 2.x 5.2.13.2.3, Figure 331).
func TestNamespaceIDs(t *testing.T) {
	b := make([]byte, IdentifyDataSize)
	place(t, b, 0, `
		01 08 00 00                                      # NIDT 1 (EUI64), NIDL 8, reserved
		a1 a2 a3 a4 a5 a6 a7 a8                          # EUI64
		03 10 00 00                                      # NIDT 3 (UUID), NIDL 16
		6b a7 b8 10 9d ad 11 d1 80 b4 00 c0 4f d4 30 c8  # UUID
		04 01 00 00                                      # NIDT 4 (CSI), NIDL 1
		00                                               # CSI 0: NVM
		                                                 # NIDL 0 ends the list
	`)
	var n NamespaceIDs
	require.NoError(t, n.UnmarshalBinary(b))
	want := NamespaceIDs{
		EUI64: [8]byte{0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8}, HasEUI64: true,
		UUID: [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}, HasUUID: true,
		CSI: CSINVM, HasCSI: true,
	}
	assert.Equal(t, want, n)
	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)
	assert.Contains(t, want.String(), "CSI:0(true)")

	// An unknown type is skipped; the known ones after it still count.
	b = make([]byte, IdentifyDataSize)
	place(t, b, 0, `
		09 02 00 00 ff ff                                # NIDT 9 (unknown), NIDL 2
		02 10 00 00 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  # NIDT 2 (NGUID)
	`)
	require.NoError(t, n.UnmarshalBinary(b))
	assert.True(t, n.HasNGUID)
	assert.Equal(t, [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, n.NGUID)
	assert.False(t, n.HasEUI64)

	for name, list := range map[string]string{
		"EUI64 of 16 bytes": `01 10 00 00`,
		"CSI of 2 bytes":    `04 02 00 00 00 00`,
		"two UUIDs":         `03 10 00 00 00000000000000000000000000000000 03 10 00 00`,
	} {
		b = make([]byte, IdentifyDataSize)
		place(t, b, 0, list)
		assert.ErrorIs(t, n.UnmarshalBinary(b), ErrInvalidList, name)
	}
	// Fifteen descriptors of an unknown type, 259 bytes each, reach offset
	// 3885; 211 bytes remain.
	chain := func(lastNIDL byte) []byte {
		b := make([]byte, IdentifyDataSize)
		off := 0
		for range 15 {
			place(t, b, off, `f0 ff 00 00  # NIDT F0h (unknown), NIDL 255`)
			off += 4 + 255
		}
		b[off], b[off+1] = 0xf0, lastNIDL
		return b
	}
	assert.ErrorIs(t, n.UnmarshalBinary(chain(255)), ErrInvalidList, "the last descriptor runs past the end")
	require.NoError(t, n.UnmarshalBinary(chain(207)), "the list fills the 4096 bytes exactly")
}
