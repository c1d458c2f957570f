package nvmeof

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIdentifyCommand(t *testing.T) {
	b := annotated(`
		06                      # 00     OPC: Identify (06h)
		40 08 00                # 03:01  PSDT 01b, CID 8
		00 00 00 00             # 07:04  NSID 0
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 23:08 CDW2, CDW3, MPTR
		00 00 01 00 00 00 00 00 # 31:24  SGL1 address 10000h
		00 10 00 01 00 00 00 40 # 39:32  SGL1 length 4096, key 1, Keyed Data Block (40h)
		01                      # 40     CDW10 CNS 01h: Identify Controller
		00                      # 41     reserved
		02 00                   # 43:42  CNTID 2
		00 00 00 00             # 47:44  CDW11: CNSSID 0, CSI 00h (NVM)
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 63:48 CDW12..CDW15
	`)
	var c Command
	require.NoError(t, c.UnmarshalBinary(b))
	assert.Equal(t, AdminIdentify, c.Opcode)
	assert.Equal(t, CNSController, c.CNS())
	assert.Equal(t, uint16(2), c.CNTID())
	assert.Equal(t, CSINVM, c.CSI())

	c.SetIdentify(CNSActiveNamespaceList, 0)
	assert.Equal(t, uint32(2), c.CDW10)
	c.CDW11 = 0x0200_0000
	assert.Equal(t, CSIZNS, c.CSI())
}

// TestGetLogPageCommand decodes a Get Log Page for the discovery log as
// a Linux host asks for the second 1 KiB record: NUMD 255 (1024 bytes)
// at offset 2048 (NVMe Base 2.x 5.2.12).
func TestGetLogPageCommand(t *testing.T) {
	b := annotated(`
		02                      # 00     OPC: Get Log Page (02h)
		40 0a 00                # 03:01  PSDT 01b, CID 10
		00 00 00 00             # 07:04  NSID 0
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 23:08 CDW2, CDW3, MPTR
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 39:24 SGL1
		70                      # 40     LID 70h: Discovery
		80                      # 41     LSP 0 (14:8), RAE 1 (bit 15)
		ff 00                   # 43:42  NUMDL 00FFh
		00 00                   # 45:44  NUMDU 0
		00 00                   # 47:46  LSI 0
		00 08 00 00             # 51:48  LPOL 800h
		00 00 00 00             # 55:52  LPOU 0
		00 00 00 00             # 59:56  CDW14: UUID index 0, OT 0, CSI 0
		00 00 00 00             # 63:60  CDW15
	`)
	var c Command
	require.NoError(t, c.UnmarshalBinary(b))
	assert.Equal(t, AdminGetLogPage, c.Opcode)
	assert.Equal(t, LogDiscovery, c.LID())
	assert.Equal(t, uint8(0), c.LSP())
	assert.True(t, c.RAE())
	assert.Equal(t, uint16(0xff), c.NUMDL())
	assert.Equal(t, uint16(0), c.NUMDU())
	assert.Equal(t, uint16(0), c.LSI())
	assert.Equal(t, uint32(0x800), c.LPOL())
	assert.Equal(t, uint32(0), c.LPOU())
	assert.False(t, c.OffsetType())
	assert.Equal(t, uint64(256), c.LogPageDwords())
	assert.Equal(t, uint64(1024), c.LogPageLength())
	assert.Equal(t, uint64(2048), c.LogPageOffset())

	var e Command
	e.Opcode, e.CID, e.Flags = AdminGetLogPage, 10, 0x40
	require.NoError(t, e.SetGetLogPage(LogDiscovery, 2048, 1024))
	e.CDW10 |= 1 << 15 // RAE
	assert.Equal(t, c, e)
}

func TestGetLogPageLengths(t *testing.T) {
	var c Command
	// The largest request: 2^32 dwords, NUMDU:NUMDL all ones.
	require.NoError(t, c.SetGetLogPage(LogErrorInformation, 1<<40, 1<<34))
	assert.Equal(t, uint16(0xffff), c.NUMDL())
	assert.Equal(t, uint16(0xffff), c.NUMDU())
	assert.Equal(t, uint64(1<<34), c.LogPageLength())
	assert.Equal(t, uint64(1<<40), c.LogPageOffset())
	assert.Equal(t, uint32(1<<8), c.LPOU())

	// NUMDU above the 16-bit NUMDL.
	require.NoError(t, c.SetGetLogPage(LogChangedNamespaceList, 0, 4*0x1_0001))
	assert.Equal(t, uint16(0), c.NUMDL())
	assert.Equal(t, uint16(1), c.NUMDU())

	c.CDW11 = 0xabcd_0000
	require.NoError(t, c.SetGetLogPage(LogSMARTHealth, 0, 512))
	assert.Equal(t, uint16(0xabcd), c.LSI(), "SetGetLogPage keeps LSI")

	assert.ErrorIs(t, c.SetGetLogPage(LogSMARTHealth, 0, 0), ErrFieldValue)
	assert.ErrorIs(t, c.SetGetLogPage(LogSMARTHealth, 0, 6), ErrFieldValue)
	assert.ErrorIs(t, c.SetGetLogPage(LogSMARTHealth, 0, 1<<34+4), ErrFieldValue)
	assert.ErrorIs(t, c.SetGetLogPage(LogSMARTHealth, 2, 4), ErrFieldValue)

	c.CDW14 = 1 << 23
	assert.True(t, c.OffsetType())
}

// TestCopyLogPage checks the offset and length semantics of Get Log Page
// (NVMe Base 2.x 5.2.12, LPOL): data past the end of the page is zero, an
// offset beyond the page is an invalid field.
func TestCopyLogPage(t *testing.T) {
	page := make([]byte, 100)
	for i := range page {
		page[i] = byte(i + 1)
	}
	dst := make([]byte, 16)
	for i := range dst {
		dst[i] = 0xee
	}

	assert.Equal(t, StatusSuccess, CopyLogPage(dst, page, 0))
	assert.Equal(t, page[:16], dst)

	assert.Equal(t, StatusSuccess, CopyLogPage(dst, page, 92))
	assert.Equal(t, []byte{93, 94, 95, 96, 97, 98, 99, 100, 0, 0, 0, 0, 0, 0, 0, 0}, dst)

	assert.Equal(t, StatusSuccess, CopyLogPage(dst, page, 100), "offset at the end: all zeros")
	assert.Equal(t, make([]byte, 16), dst)

	st := CopyLogPage(dst, page, 104)
	assert.Equal(t, StatusInvalidField, st.Code())
	assert.True(t, st.DNR())
	assert.Equal(t, StatusInvalidField, CopyLogPage(dst, page, 2).Code(), "offset not dword aligned")
	assert.Equal(t, StatusInvalidField, CopyLogPage(dst, page, ^uint64(0)-3).Code())

	assert.Equal(t, StatusSuccess, CopyLogPage(nil, page, 4))
}

// TestNumberOfQueues checks the Number of Queues feature as Linux asks for
// 8 I/O queues and a controller grants 4 (NVMe Base 2.x 5.2.26.2.1).
func TestNumberOfQueues(t *testing.T) {
	b := annotated(`
		09                      # 00     OPC: Set Features (09h)
		40 0c 00                # 03:01  PSDT 01b, CID 12
		00 00 00 00             # 07:04  NSID 0
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 23:08
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 39:24 SGL1
		07 00 00 00             # 43:40  CDW10 FID 07h: Number of Queues, SV 0
		07 00 07 00             # 47:44  CDW11 NSQR 7, NCQR 7 (8 each, 0's based)
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 63:48
	`)
	var c Command
	require.NoError(t, c.UnmarshalBinary(b))
	assert.Equal(t, AdminSetFeatures, c.Opcode)
	assert.Equal(t, FeatureNumberOfQueues, c.FID())
	assert.False(t, c.Save())
	req := NumberOfQueues(c.FeatureValue())
	assert.True(t, req.Valid())
	assert.Equal(t, 8, req.SubmissionQueues())
	assert.Equal(t, 8, req.CompletionQueues())

	granted, err := NewNumberOfQueues(4, 4)
	require.NoError(t, err)
	assert.Equal(t, NumberOfQueues(0x0003_0003), granted, "DW0: NSQA 3, NCQA 3")

	var e Command
	e.Opcode, e.CID, e.Flags = AdminSetFeatures, 12, 0x40
	e.SetFeature(FeatureNumberOfQueues, uint32(req))
	assert.Equal(t, c, e)

	assert.False(t, NumberOfQueues(0xffff_0000).Valid())
	assert.False(t, NumberOfQueues(0x0000_ffff).Valid())
	_, err = NewNumberOfQueues(0, 1)
	assert.ErrorIs(t, err, ErrFieldValue)
	_, err = NewNumberOfQueues(1, 65536)
	assert.ErrorIs(t, err, ErrFieldValue)
	n, err := NewNumberOfQueues(65535, 1)
	require.NoError(t, err)
	assert.Equal(t, 65535, n.SubmissionQueues())
}

func TestFeatureFields(t *testing.T) {
	var c Command
	c.Opcode = AdminGetFeatures
	c.CDW10 = 0x0000_030f // SEL 011b (supported capabilities), FID 0Fh (KATO)
	assert.Equal(t, FeatureKeepAliveTimer, c.FID())
	assert.Equal(t, SelectCapabilities, c.Select())

	c.Opcode = AdminSetFeatures
	c.CDW10 = 0x8000_0006 // SV, FID 06h (volatile write cache)
	c.CDW11 = 1
	assert.True(t, c.Save())
	assert.Equal(t, FeatureVolatileWriteCache, c.FID())
	assert.True(t, VolatileWriteCache(c.FeatureValue()).WCE())
	assert.False(t, VolatileWriteCache(2).WCE())

	aec := AsyncEventConfig(0x8000_0100)
	assert.Equal(t, AECDiscoveryLogPageChange|AECNamespaceAttribute, aec)
	assert.Equal(t, AsyncEventConfig(0xff), AECSMARTCriticalWarnings)
}

// TestAsyncEvent checks DW0 of AER completions: a namespace attribute
// notice pointing at the Changed Namespace List log, and the discovery
// log change notice (NVMe Base 2.x 5.2.2).
func TestAsyncEvent(t *testing.T) {
	ns := AsyncEvent{Type: AsyncEventNotice, Info: NoticeNamespaceAttributeChanged, LogPage: LogChangedNamespaceList}
	assert.Equal(t, uint32(0x0004_0002), ns.DW0())
	assert.Equal(t, ns, ParseAsyncEvent(0x0004_0002))

	disc := AsyncEvent{Type: AsyncEventNotice, Info: NoticeDiscoveryLogPageChange, LogPage: LogDiscovery}
	assert.Equal(t, uint32(0x0070_f002), disc.DW0())
	assert.Equal(t, disc, ParseAsyncEvent(disc.DW0()))

	smart := ParseAsyncEvent(0xff02_0101) // reserved bits 31:24 and 7:3 ignored
	assert.Equal(t, AsyncEvent{Type: AsyncEventSMARTHealth, Info: 1, LogPage: LogSMARTHealth}, smart)
	assert.Contains(t, smart.String(), "log page 02h")
}

func TestAbortCommand(t *testing.T) {
	var c Command
	c.Opcode = AdminAbort
	c.SetAbort(3, 0x1234)
	assert.Equal(t, uint32(0x1234_0003), c.CDW10)
	assert.Equal(t, uint16(3), c.AbortSQID())
	assert.Equal(t, uint16(0x1234), c.AbortCID())
	assert.Equal(t, uint32(1), AbortNotAborted)
}

func TestKeepAliveAndAER(t *testing.T) {
	for _, op := range []Opcode{AdminKeepAlive, AdminAsyncEventRequest} {
		c := Command{Opcode: op, CID: 1}
		b, err := c.MarshalBinary()
		require.NoError(t, err)
		assert.Equal(t, byte(op), b[0])
		assert.Equal(t, NoData, c.Direction())
	}
	assert.Equal(t, Opcode(0x18), AdminKeepAlive)
	assert.Equal(t, Opcode(0x0c), AdminAsyncEventRequest)
}

func ExampleCopyLogPage() {
	// A target answering Get Log Page for the discovery log, which it has
	// rendered into page: the host asks for 1024 bytes at offset 2048.
	d := DiscoveryLog{GenCtr: 3, Entries: make([]DiscoveryLogEntry, 2)}
	for i := range d.Entries {
		d.Entries[i] = DiscoveryLogEntry{TRTYPE: TransportRDMA, ADRFAM: AddressFamilyIPv4,
			SUBTYPE: SubsystemNVMe, TRSVCID: "4420", TRADDR: "192.0.2.1", SUBNQN: "nqn.2024-01.io.capsule:disk"}
	}
	page, _ := d.MarshalBinary()

	var cmd Command
	cmd.Opcode = AdminGetLogPage
	_ = cmd.SetGetLogPage(LogDiscovery, 2048, 1024)

	buf := make([]byte, cmd.LogPageLength())
	st := CopyLogPage(buf, page, cmd.LogPageOffset())
	var e DiscoveryLogEntry
	_ = e.UnmarshalBinary(buf)
	fmt.Println(st.String(), e.TRADDR, e.TRSVCID)

	st = CopyLogPage(buf, page, 4096)
	fmt.Println(st.String())
	// Output:
	// successful completion (SCT 0h SC 00h) 192.0.2.1 4420
	// invalid field in command (SCT 0h SC 02h, DNR)
}
