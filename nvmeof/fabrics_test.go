package nvmeof

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// connectAdminBytes is a Connect for the admin queue as a Linux RDMA host
// sends it: 32 entries, keep alive 5 s, the 1024 bytes of data in the
// capsule (NVMe Base 2.x Figure 579).
var connectAdminBytes = annotated(`
	7f                      # 00     OPC: Fabrics (7Fh)
	40                      # 01     PSDT 01b as Linux sets it (reserved on NVMe-oF 1.1)
	00 00                   # 03:02  CID 0
	01                      # 04     FCTYPE: Connect (01h)
	00 00 00                # 07:05  reserved
	00 00 00 00 00 00 00 00 # 15:08  reserved
	00 00 00 00 00 00 00 00 # 23:16  reserved
	00 00 00 00 00 00 00 00 # 31:24  SGL1 offset 0
	00 04 00 00             # 35:32  SGL1 length 1024
	00 00 00                # 38:36  reserved
	01                      # 39     SGL1: Data Block, Offset subtype (in-capsule)
	00 00                   # 41:40  RECFMT 0
	00 00                   # 43:42  QID 0 (admin queue)
	1f 00                   # 45:44  SQSIZE 31 (32 entries, 0's based)
	04                      # 46     CATTR: DISSQFC (bit 2)
	00                      # 47     reserved
	88 13 00 00             # 51:48  KATO 5000 ms
	00 00 00 00 00 00 00 00 # 59:52  reserved
	00 00 00 00             # 63:60  reserved
`)

func TestParseConnect(t *testing.T) {
	var c Command
	require.NoError(t, c.UnmarshalBinary(connectAdminBytes))
	require.True(t, c.IsFabrics())
	assert.Equal(t, FabricsConnect, c.FabricsType())
	assert.Equal(t, "fabrics Connect cid=0", c.String())

	x, err := ParseConnect(&c)
	require.NoError(t, err)
	assert.Equal(t, Connect{
		SGL:    InCapsuleSGL{Length: ConnectDataSize}.Descriptor(),
		SQSize: 31,
		CATTR:  ConnectDisableSQFlowControl,
		KATO:   5000,
	}, x)
	assert.Equal(t, 32, x.QueueEntries())

	// Encoding gives the same bytes but for byte 1, which Command leaves 0.
	enc := x.Command()
	b, err := enc.MarshalBinary()
	require.NoError(t, err)
	want := append([]byte{}, connectAdminBytes...)
	want[CommandOffsetFlags] = 0
	assert.Equal(t, want, b)
}

func TestParseConnectRefusals(t *testing.T) {
	base := Connect{QID: 1, SQSize: 127, CID: 9}

	x := base
	x.RecFmt = 1
	c := x.Command()
	_, err := ParseConnect(&c)
	assert.ErrorIs(t, err, ErrFieldValue)
	assert.ErrorIs(t, err, StatusConnectIncompatibleFormat)
	assert.True(t, StatusOf(err).DNR())

	x = base
	x.SQSize = 0
	c = x.Command()
	_, err = ParseConnect(&c)
	assert.ErrorIs(t, err, StatusConnectInvalidParameters)
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, InvalidParameter{InData: false, Offset: ConnectOffsetSQSIZE}, fe.InvalidParameter())
	assert.Equal(t, uint32(0x0000_002c), fe.InvalidParameter().DW0())

	x = base
	x.QID = 0xffff
	c = x.Command()
	_, err = ParseConnect(&c)
	assert.ErrorIs(t, err, StatusConnectInvalidParameters)
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, uint32(ConnectOffsetQID), fe.InvalidParameter().DW0())

	c = base.Command()
	c.Opcode = AdminIdentify
	_, err = ParseConnect(&c)
	assert.ErrorIs(t, err, ErrWrongCommand)
	c = base.Command()
	c.SetFabricsType(FabricsPropertyGet)
	_, err = ParseConnect(&c)
	assert.ErrorIs(t, err, ErrWrongCommand)
	assert.Equal(t, StatusInternalError, StatusOf(err), "a dispatch mistake carries no protocol status")
}

const (
	testSubNQN  = "nqn.2024-01.io.capsule:subsystem1"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:0c0c0c0c-1111-2222-3333-444455556666"
)

// connectDataBytes builds Connect data field by field (NVMe Base 2.x
// Figure 580).
func connectDataBytes(t testing.TB) []byte {
	b := make([]byte, ConnectDataSize)
	place(t, b, 0, `00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff  # 15:00 HOSTID`)
	place(t, b, 16, `ff ff  # 17:16 CNTLID FFFFh (dynamic controller model)`)
	// 255:18 reserved
	copy(b[256:], testSubNQN)  // 511:256 SUBNQN, NUL-padded
	copy(b[512:], testHostNQN) // 767:512 HOSTNQN, NUL-padded
	// 1023:768 reserved
	return b
}

func TestConnectData(t *testing.T) {
	b := connectDataBytes(t)
	var d ConnectData
	require.NoError(t, d.UnmarshalBinary(b))
	assert.Equal(t, ConnectData{
		HostID:  [16]byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff},
		CNTLID:  CNTLIDDynamic,
		SubNQN:  testSubNQN,
		HostNQN: testHostNQN,
	}, d)
	out, err := d.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)

	assert.ErrorIs(t, d.UnmarshalBinary(b[:1023]), ErrLength)
	_, err = d.MarshalTo(make([]byte, 1023))
	assert.ErrorIs(t, err, ErrShortBuffer)
}

// TestConnectDataBadNQN checks that every malformed NQN is refused with
// Connect Invalid Parameters and the location the response reports.
func TestConnectDataBadNQN(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field int
		nqn   []byte
	}{
		{"empty SUBNQN", ConnectDataOffsetSUBNQN, nqnField("")},
		{"empty HOSTNQN", ConnectDataOffsetHOSTNQN, nqnField("")},
		{"interior NUL", ConnectDataOffsetSUBNQN, nqnField("nqn.2024-01.io.capsule\x00:x")},
		{"224 bytes", ConnectDataOffsetHOSTNQN, nqnField(strings.Repeat("n", 224))},
		{"no terminator", ConnectDataOffsetSUBNQN, []byte(strings.Repeat("n", 256))},
		{"not UTF-8", ConnectDataOffsetHOSTNQN, nqnField("nqn.2024-01.io.capsule:\xff")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := connectDataBytes(t)
			copy(b[tc.field:tc.field+NQNFieldSize], tc.nqn)
			var d ConnectData
			err := d.UnmarshalBinary(b)
			assert.ErrorIs(t, err, ErrInvalidNQN)
			assert.ErrorIs(t, err, StatusConnectInvalidParameters)
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			ip := fe.InvalidParameter()
			assert.Equal(t, InvalidParameter{InData: true, Offset: uint16(tc.field)}, ip)
			assert.Equal(t, ip, ParseInvalidParameter(ip.DW0()))
		})
	}
	d := ConnectData{SubNQN: testSubNQN, HostNQN: strings.Repeat("h", 224)}
	_, err := d.MarshalBinary()
	assert.ErrorIs(t, err, ErrInvalidNQN)
}

// TestConnectDataCNTLID checks the controller IDs Connect data may carry:
// FFF0h..FFFDh are reserved and refused (NVMe Base 2.x 6.3).
func TestConnectDataCNTLID(t *testing.T) {
	for id, ok := range map[uint16]bool{
		1: true, MaxCNTLID: true, 0xfff0: false, 0xfffd: false, CNTLIDAnyStatic: true, CNTLIDDynamic: true,
	} {
		b := connectDataBytes(t)
		le.PutUint16(b[ConnectDataOffsetCNTLID:], id)
		var d ConnectData
		err := d.UnmarshalBinary(b)
		d2 := ConnectData{CNTLID: id, SubNQN: testSubNQN, HostNQN: testHostNQN}
		_, err2 := d2.MarshalBinary()
		if ok {
			assert.NoError(t, err, "%04Xh", id)
			assert.NoError(t, err2, "%04Xh", id)
			continue
		}
		assert.ErrorIs(t, err, StatusConnectInvalidParameters, "%04Xh", id)
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, InvalidParameter{InData: true, Offset: ConnectDataOffsetCNTLID}, fe.InvalidParameter())
		assert.ErrorIs(t, err2, ErrFieldValue, "%04Xh", id)
	}
}

func TestValidateNQN(t *testing.T) {
	assert.NoError(t, ValidateNQN(DiscoveryNQN))
	assert.NoError(t, ValidateNQN(testHostNQN))
	assert.NoError(t, ValidateNQN(strings.Repeat("x", MaxNQNLength)))
	assert.NoError(t, ValidateNQN("nqn.2024-01.io.capsule:ünïcode"))
	for _, bad := range []string{"", strings.Repeat("x", MaxNQNLength+1), "a\x00b", "\xc3"} {
		assert.ErrorIs(t, ValidateNQN(bad), ErrInvalidNQN, "%q", bad)
	}
}

// TestConnectResponse checks DW0 of Connect responses (NVMe Base 2.x
// Figure 581 and 582).
func TestConnectResponse(t *testing.T) {
	ok := annotated(`
		01 00        # 01:00  CNTLID 1
		02 00        # 03:02  AUTHREQ: ATR (bit 1)
		00 00 00 00  # 07:04  reserved
		ff ff        # 09:08  SQHD FFFFh: SQ flow control disabled
		00 00        # 11:10  reserved
		00 00        # 13:12  CID 0
		00 00        # 15:14  success
	`)
	var c Completion
	require.NoError(t, c.UnmarshalBinary(ok))
	r := ParseConnectResponse(c.DW0)
	assert.Equal(t, ConnectResponse{CNTLID: 1, AuthReq: AuthTransactionRequired}, r)
	assert.Equal(t, c.DW0, r.DW0())
	assert.Equal(t, uint16(SQHDFlowControlDisabled), c.SQHD)

	bad := annotated(`
		00 01        # 01:00  IPO 256: SUBNQN
		01           # 02     IATTR: IPS=1, offset from the start of the data
		00           # 03     reserved
		00 00 00 00  # 07:04  reserved
		00 00        # 09:08  SQHD
		00 00        # 11:10  reserved
		00 00        # 13:12  CID 0
		04 83        # 15:14  P 0, SC 82h (8:1), SCT 1h (11:9), DNR (15): Connect Invalid Parameters
	`)
	require.NoError(t, c.UnmarshalBinary(bad))
	assert.Equal(t, StatusConnectInvalidParameters.WithDNR(), c.Status)
	assert.Equal(t, InvalidParameter{InData: true, Offset: ConnectDataOffsetSUBNQN}, ParseInvalidParameter(c.DW0))

	// The same response, built from the error a target gets.
	var d ConnectData
	b := connectDataBytes(t)
	b[ConnectDataOffsetSUBNQN] = 0
	err := d.UnmarshalBinary(b)
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	resp := Completion{DW0: fe.InvalidParameter().DW0(), Status: StatusOf(err)}
	out, err := resp.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, bad, out)
}

// Property Get and Set as a Linux host sends them at controller start
// (NVMe Base 2.x 6.5 and 6.6).
var (
	propertyGetCAPBytes = annotated(`
		7f                      # 00     OPC: Fabrics
		00                      # 01     reserved
		03 00                   # 03:02  CID 3
		04                      # 04     FCTYPE: Property Get (04h)
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 23:05 reserved
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00           # 39:24 reserved (no SGL)
		01                      # 40     ATTRIB: size 001b, 8 bytes
		00 00 00                # 43:41  reserved
		00 00 00 00             # 47:44  OFST 00h: CAP
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00           # 63:48 reserved
	`)
	propertySetCCBytes = annotated(`
		7f                      # 00     OPC: Fabrics
		00                      # 01     reserved
		04 00                   # 03:02  CID 4
		00                      # 04     FCTYPE: Property Set (00h)
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 23:05 reserved
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00           # 39:24 reserved
		00                      # 40     ATTRIB: size 000b, 4 bytes
		00 00 00                # 43:41  reserved
		14 00 00 00             # 47:44  OFST 14h: CC
		01 00 46 00 00 00 00 00 # 55:48  VALUE: EN=1, IOSQES=6, IOCQES=4
		00 00 00 00 00 00 00 00 # 63:56  reserved
	`)
)

func TestPropertyCommands(t *testing.T) {
	var c Command
	require.NoError(t, c.UnmarshalBinary(propertyGetCAPBytes))
	g, err := ParsePropertyGet(&c)
	require.NoError(t, err)
	assert.Equal(t, PropertyGet{CID: 3, Size: PropertySize8, Offset: PropertyCAP}, g)
	enc := g.Command()
	assert.Equal(t, c, enc)

	require.NoError(t, c.UnmarshalBinary(propertySetCCBytes))
	s, err := ParsePropertySet(&c)
	require.NoError(t, err)
	assert.Equal(t, PropertySet{CID: 4, Size: PropertySize4, Offset: PropertyCC, Value: 0x00460001}, s)
	cc := CC(s.Value)
	assert.True(t, cc.EN())
	assert.Equal(t, uint8(6), cc.IOSQES())
	assert.Equal(t, uint8(4), cc.IOCQES())
	enc = s.Command()
	assert.Equal(t, c, enc)

	// A reserved size is an invalid field.
	c.CDW10 = 2
	_, err = ParsePropertySet(&c)
	assert.ErrorIs(t, err, StatusInvalidField)
	c = g.Command()
	c.CDW10 = 7
	_, err = ParsePropertyGet(&c)
	assert.ErrorIs(t, err, StatusInvalidField)

	_, err = ParsePropertyGet(&c)
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, PropertyOffsetATTRIB, fe.Offset)

	c = s.Command()
	_, err = ParsePropertyGet(&c)
	assert.ErrorIs(t, err, ErrWrongCommand)
}

func TestDisconnect(t *testing.T) {
	b := annotated(`
		7f 00 07 00  # 03:00  OPC Fabrics, CID 7
		08           # 04     FCTYPE: Disconnect (08h)
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 23:05 reserved
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00           # 39:24 reserved
		00 00        # 41:40  RECFMT 0
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  # 63:42 reserved
	`)
	var c Command
	require.NoError(t, c.UnmarshalBinary(b))
	d, err := ParseDisconnect(&c)
	require.NoError(t, err)
	assert.Equal(t, Disconnect{CID: 7}, d)
	enc := d.Command()
	assert.Equal(t, c, enc)

	c.CDW10 = 1
	_, err = ParseDisconnect(&c)
	assert.ErrorIs(t, err, StatusConnectIncompatibleFormat)
}

func TestFabricsTypeNames(t *testing.T) {
	for ft, name := range map[FabricsType]string{
		FabricsPropertySet: "Property Set", FabricsConnect: "Connect", FabricsPropertyGet: "Property Get",
		FabricsAuthSend: "Authentication Send", FabricsAuthReceive: "Authentication Receive",
		FabricsDisconnect: "Disconnect", 0x42: "FCTYPE 42h",
	} {
		assert.Equal(t, name, ft.String())
	}
}

func ExampleFieldError_InvalidParameter() {
	// A target refusing Connect data whose HOSTNQN has no terminator.
	data := make([]byte, ConnectDataSize)
	copy(data[ConnectDataOffsetSUBNQN:], "nqn.2024-01.io.capsule:disk")
	for i := range NQNFieldSize {
		data[ConnectDataOffsetHOSTNQN+i] = 'x'
	}
	var d ConnectData
	err := d.UnmarshalBinary(data)
	var fe *FieldError
	if errors.As(err, &fe) {
		resp := Completion{CID: 1, DW0: fe.InvalidParameter().DW0(), Status: fe.Status}
		fmt.Printf("DW0 %08Xh, %s\n", resp.DW0, resp.Status.String())
	}
	// Output:
	// DW0 00010200h, connect invalid parameters (SCT 1h SC 82h, DNR)
}
