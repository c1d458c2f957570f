package nvmeof

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// discoveryLogBytes is a discovery log page with one RDMA entry (NVMe Base
// 2.x 5.2.12.3.3, Figures 310 and 312; TSAS from the NVMe RDMA Transport
// Specification).
func discoveryLogBytes(t testing.TB) []byte {
	b := make([]byte, DiscoveryLogSize(1))
	place(t, b, 0, `07 00 00 00 00 00 00 00   # 07:00   GENCTR 7`)
	place(t, b, 8, `01 00 00 00 00 00 00 00   # 15:08   NUMREC 1`)
	place(t, b, 16, `00 00                    # 17:16   RECFMT 0`)
	// 1023:18 reserved; entry 0 at 1024
	e := b[1024:]
	place(t, e, 0, `01                        # 00      TRTYPE: RDMA`)
	place(t, e, 1, `01                        # 01      ADRFAM: IPv4`)
	place(t, e, 2, `02                        # 02      SUBTYPE: NVM subsystem`)
	place(t, e, 3, `04                        # 03      TREQ: secure channel not specified, SQ flow control disable supported`)
	place(t, e, 4, `01 00                     # 05:04   PORTID 1`)
	place(t, e, 6, `ff ff                     # 07:06   CNTLID FFFFh: dynamic controller model`)
	place(t, e, 8, `20 00                     # 09:08   ASQSZ 32`)
	place(t, e, 10, `00 00                    # 11:10   EFLAGS 0`)
	place(t, e, 32, `34 34 32 30`+strings.Repeat(" 20", 28)+` # 63:32 TRSVCID "4420", space-padded`)
	copy(e[256:], testSubNQN) //                 511:256 SUBNQN, NUL-padded
	place(t, e, 512, `31 39 32 2e 30 2e 32 2e 31 30`+strings.Repeat(" 20", 246)+` # 767:512 TRADDR "192.0.2.10"`)
	place(t, e, 768, `01                       # 768     TSAS RDMA_QPTYPE: reliable connected`)
	place(t, e, 769, `01                       # 769     TSAS RDMA_PRTYPE: no provider specified`)
	place(t, e, 770, `01                       # 770     TSAS RDMA_CMS: RDMA_CM`)
	place(t, e, 776, `00 00                    # 777:776 TSAS RDMA_PKEY 0`)
	return b
}

func discoveryLogValue() DiscoveryLog {
	e := DiscoveryLogEntry{
		TRTYPE: TransportRDMA, ADRFAM: AddressFamilyIPv4, SUBTYPE: SubsystemNVMe,
		TREQ: TREQSecureChannelUnspecified | TREQDisableSQFlowControl, PORTID: 1, CNTLID: CNTLIDDynamic,
		ASQSZ: 32, TRSVCID: "4420", SUBNQN: testSubNQN, TRADDR: "192.0.2.10",
	}
	e.SetRDMA(RDMATransportAddress{QPType: RDMAQPTypeReliableConnected, Provider: RDMAProviderNone, CMS: RDMACMSRDMACM})
	return DiscoveryLog{GenCtr: 7, Entries: []DiscoveryLogEntry{e}}
}

func TestDiscoveryLog(t *testing.T) {
	b := discoveryLogBytes(t)
	var d DiscoveryLog
	require.NoError(t, d.UnmarshalBinary(b))
	want := discoveryLogValue()
	assert.Equal(t, want, d)
	assert.Equal(t, RDMATransportAddress{QPType: 1, Provider: 1, CMS: 1}, d.Entries[0].RDMA())

	out, err := want.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, b, out)

	h, err := ParseDiscoveryLogHeader(b[:DiscoveryLogHeaderSize])
	require.NoError(t, err)
	assert.Equal(t, DiscoveryLogHeader{GenCtr: 7, NumRec: 1}, h)
}

func TestDiscoveryLogPadding(t *testing.T) {
	// Linux nvmet pads TRSVCID and TRADDR with NULs; that decodes the same.
	b := discoveryLogBytes(t)
	e := b[1024:]
	clear(e[DiscEntryOffsetTRSVCID : DiscEntryOffsetTRSVCID+TRSVCIDSize])
	copy(e[DiscEntryOffsetTRSVCID:], "4420")
	clear(e[DiscEntryOffsetTRADDR : DiscEntryOffsetTRADDR+TRADDRSize])
	copy(e[DiscEntryOffsetTRADDR:], "192.0.2.10")
	var d DiscoveryLog
	require.NoError(t, d.UnmarshalBinary(b))
	assert.Equal(t, discoveryLogValue(), d)
}

func TestDiscoveryLogRefusals(t *testing.T) {
	var d DiscoveryLog
	b := discoveryLogBytes(t)

	assert.ErrorIs(t, d.UnmarshalBinary(b[:DiscoveryLogHeaderSize]), ErrLength, "NUMREC 1 with no entry")
	assert.ErrorIs(t, d.UnmarshalBinary(append(b, make([]byte, 1024)...)), ErrLength, "an entry NUMREC does not count")
	assert.ErrorIs(t, d.UnmarshalBinary(b[:2000]), ErrLength)
	assert.ErrorIs(t, d.UnmarshalBinary(b[:100]), ErrShortBuffer)

	huge := append([]byte{}, b...)
	place(t, huge, 8, `ff ff ff ff ff ff ff ff  # NUMREC 2^64-1`)
	assert.ErrorIs(t, d.UnmarshalBinary(huge), ErrLength)

	bad := append([]byte{}, b...)
	place(t, bad, 16, `01 00  # RECFMT 1`)
	assert.ErrorIs(t, d.UnmarshalBinary(bad), ErrFieldValue)

	for name, edit := range map[string]func(e []byte){
		"TRSVCID with a control byte": func(e []byte) { e[DiscEntryOffsetTRSVCID+1] = 0x07 },
		"TRADDR with text after NUL":  func(e []byte) { e[DiscEntryOffsetTRADDR+3] = 0 },
		"empty SUBNQN":                func(e []byte) { clear(e[DiscEntryOffsetSUBNQN : DiscEntryOffsetSUBNQN+NQNFieldSize]) },
	} {
		bad := append([]byte{}, b...)
		edit(bad[1024:])
		err := d.UnmarshalBinary(bad)
		var fe *FieldError
		assert.ErrorAs(t, err, &fe, name)
	}

	v := discoveryLogValue()
	v.Entries[0].TRADDR = strings.Repeat("a", TRADDRSize+1)
	_, err := v.MarshalBinary()
	assert.ErrorIs(t, err, ErrInvalidString)
	v = discoveryLogValue()
	v.Entries[0].SUBNQN = ""
	_, err = v.MarshalBinary()
	assert.ErrorIs(t, err, ErrInvalidNQN)
	v = discoveryLogValue()
	_, err = v.MarshalTo(make([]byte, 2047))
	assert.ErrorIs(t, err, ErrShortBuffer)
}

func TestDiscoveryLogEmpty(t *testing.T) {
	d := DiscoveryLog{GenCtr: 1}
	b, err := d.MarshalBinary()
	require.NoError(t, err)
	assert.Len(t, b, DiscoveryLogHeaderSize)
	var got DiscoveryLog
	require.NoError(t, got.UnmarshalBinary(b))
	assert.Equal(t, uint64(1), got.GenCtr)
	assert.Empty(t, got.Entries)
}
