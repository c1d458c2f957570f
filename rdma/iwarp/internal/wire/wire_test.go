package wire

import (
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
)

// unhex turns an annotated hex dump into bytes: everything after "//" on a
// line is a comment, whitespace is ignored.
// unhex decodes field-annotated hex.
var unhex = hextest.Decode

func TestMPARequestHex(t *testing.T) {
	// RFC 5044 section 7.1: MPA Request with CRC wanted, no markers, Rev 1,
	// 3 bytes of private data.
	want := unhex(t, `
		4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 // Key "MPA ID Req Frame"
		40                                              // M=0 C=1 R=0 Res=0
		01                                              // Rev 1
		00 03                                           // PD_Length 3
		61 62 63                                        // Private Data "abc"
	`)
	f := MPAFrame{MPAHeader: MPAHeader{CRC: true, Rev: MPARevision}, Private: []byte("abc")}
	b := make([]byte, f.Len())
	n, err := f.MarshalTo(b)
	require.NoError(t, err)
	assert.Equal(t, want, b[:n])

	var g MPAFrame
	require.NoError(t, g.Unmarshal(want))
	assert.False(t, g.Reply)
	assert.True(t, g.CRC)
	assert.False(t, g.Markers)
	assert.Equal(t, []byte("abc"), g.Private)
}

func TestMPARejectReplyHex(t *testing.T) {
	want := unhex(t, `
		4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 // Key "MPA ID Rep Frame"
		60                                              // M=0 C=1 R=1
		01                                              // Rev 1
		00 02                                           // PD_Length 2
		00 06                                           // Private Data (an NVMe-oF reject status)
	`)
	f := MPAFrame{MPAHeader: MPAHeader{Reply: true, CRC: true, Reject: true, Rev: 1}, Private: []byte{0, 6}}
	b := make([]byte, 64)
	n, err := f.MarshalTo(b)
	require.NoError(t, err)
	assert.Equal(t, want, b[:n])
}

func TestMPAHeaderErrors(t *testing.T) {
	good := unhex(t, `4d50412049442052657120467261 6d65 00 01 0000`)
	_, err := UnmarshalMPAHeader(good[:19])
	assert.ErrorIs(t, err, ErrShort)

	bad := append([]byte(nil), good...)
	bad[9] = 'x' // key
	_, err = UnmarshalMPAHeader(bad)
	assert.ErrorIs(t, err, ErrMPAKey)

	bad = append([]byte(nil), good...)
	bad[17] = 2 // Rev 2 (RFC 6581) is not spoken
	_, err = UnmarshalMPAHeader(bad)
	assert.ErrorIs(t, err, ErrMPARevision)

	bad = append([]byte(nil), good...)
	bad[18], bad[19] = 0x02, 0x01 // PD_Length 513
	_, err = UnmarshalMPAHeader(bad)
	assert.ErrorIs(t, err, ErrPrivateTooLong)

	bad = append([]byte(nil), good...)
	bad[16] = 0x20 // R on a Request
	_, err = UnmarshalMPAHeader(bad)
	assert.ErrorIs(t, err, ErrMPAKey)

	var f MPAFrame
	assert.ErrorIs(t, f.Unmarshal(append(good[:18:18], 0, 4, 1)), ErrBadLength, "PD_Length 4, 1 byte present")
}

func TestCRCTrailerRFC3720Vector(t *testing.T) {
	// RFC 3720 appendix B.4: 32 bytes of zeros have CRC32C 0x8a9136aa,
	// sent as aa 36 91 8a. A ULPDU of 30 bytes needs no pad (2+30 = 32).
	zeros := make([]byte, 32)
	sum := crc32.Update(0, Castagnoli, zeros)
	tr := make([]byte, 8)
	n := PutTrailer(tr, 30, sum, true)
	assert.Equal(t, unhex(t, `aa 36 91 8a // CRC32C, little-endian image`), tr[:n])
	assert.NoError(t, CheckTrailer(tr[:n], 30, sum, true))
	tr[0] ^= 1
	assert.ErrorIs(t, CheckTrailer(tr[:n], 30, sum, true), ErrCRC)
}

func TestSendFPDUHex(t *testing.T) {
	// A one-segment Send of "ping" without CRC.
	want := unhex(t, `
		00 16        // ULPDU_Length 22 (18 header + 4 payload)
		41           // DDP: T=0 L=1 Rsvd=0 DV=1
		43           // RDMAP: RV=1 Rsv=0 Opcode=3 (Send)
		00 00 00 00  // RsvdULP (no Invalidate STag)
		00 00 00 00  // QN 0
		00 00 00 01  // MSN 1
		00 00 00 00  // MO 0
		70 69 6e 67  // payload "ping"
		00 00        // PAD to a multiple of 4 (2+22 = 24: none) -- see below
	`)
	want = want[:len(want)-2] // 2+22 = 24 is aligned: no pad
	h := Header{Last: true, Opcode: OpSend, QN: QNSend, MSN: 1}
	ulpdu := make([]byte, UntaggedHeaderLen+4)
	h.MarshalTo(ulpdu)
	copy(ulpdu[UntaggedHeaderLen:], "ping")
	b := make([]byte, 64)
	n, err := MarshalFPDU(b, ulpdu, false)
	require.NoError(t, err)
	assert.Equal(t, want, b[:n])

	got, total, err := ParseFPDU(b[:n], false)
	require.NoError(t, err)
	assert.Equal(t, n, total)
	var g Header
	hl, err := g.Unmarshal(got)
	require.NoError(t, err)
	assert.Equal(t, h, g)
	assert.Equal(t, "ping", string(got[hl:]))
}

func TestWriteHeaderHex(t *testing.T) {
	want := unhex(t, `
		81                      // DDP: T=1 L=0 DV=1 (more segments follow)
		40                      // RDMAP: RV=1 Opcode=0 (RDMA Write)
		00 00 12 01             // STag 0x1201
		00 00 7f 00 00 00 10 00 // TO 0x7f0000001000
	`)
	h := Header{Tagged: true, Opcode: OpWrite, STag: 0x1201, TO: 0x7f0000001000}
	b := make([]byte, TaggedHeaderLen)
	assert.Equal(t, TaggedHeaderLen, h.MarshalTo(b))
	assert.Equal(t, want, b)
	var g Header
	n, err := g.Unmarshal(want)
	require.NoError(t, err)
	assert.Equal(t, TaggedHeaderLen, n)
	assert.Equal(t, h, g)
}

func TestSendInvalidateHeaderHex(t *testing.T) {
	want := unhex(t, `
		41           // DDP: T=0 L=1 DV=1
		46           // RDMAP: RV=1 Opcode=6 (Send with SE and Invalidate)
		00 00 33 02  // Invalidate STag 0x3302
		00 00 00 00  // QN 0
		00 00 00 07  // MSN 7
		00 01 00 00  // MO 65536
	`)
	var g Header
	_, err := g.Unmarshal(want)
	require.NoError(t, err)
	assert.Equal(t, Header{Last: true, Opcode: OpSendSEInv, RsvdULP: 0x3302, QN: 0, MSN: 7, MO: 65536}, g)
}

func TestHeaderErrors(t *testing.T) {
	cases := []struct {
		name  string
		hex   string
		cause TermCause
	}{
		{"DDP version 0 tagged", `80 40 00000001 0000000000000000`, TermCause{LayerDDP, ETypeDDPTagged, CodeDDPTaggedVersion}},
		{"DDP version 2 untagged", `42 43 00000000 00000000 00000001 00000000`, TermCause{LayerDDP, ETypeDDPUntagged, CodeDDPUntaggedVersion}},
		{"RDMAP version 0", `41 03 00000000 00000000 00000001 00000000`, TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, CodeInvalidRDMAPVersion}},
		{"unknown opcode 0xc", `41 4c 00000000 00000000 00000001 00000000`, TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, CodeUnexpectedOpcode}},
		{"atomic request unsupported", `41 4a 00000000 00000001 00000001 00000000`, TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, CodeUnexpectedOpcode}},
		{"Send in the tagged model", `c1 43 00000001 0000000000000000`, TermCause{LayerRDMAP, ETypeRDMAPRemoteOperation, CodeUnexpectedOpcode}},
		{"Send on queue 1", `41 43 00000000 00000001 00000001 00000000`, TermCause{LayerDDP, ETypeDDPUntagged, CodeDDPInvalidQN}},
		{"queue 7", `41 43 00000000 00000007 00000001 00000000`, TermCause{LayerDDP, ETypeDDPUntagged, CodeDDPInvalidQN}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h Header
			_, err := h.Unmarshal(unhex(t, c.hex))
			var he *HeaderError
			require.ErrorAs(t, err, &he)
			assert.Equal(t, c.cause, he.Cause)
		})
	}
	var h Header
	_, err := h.Unmarshal(unhex(t, `41 43 00000000 00000000 00000001 0000`))
	assert.ErrorIs(t, err, ErrShort)
}

func TestReadRequestHex(t *testing.T) {
	want := unhex(t, `
		00 00 05 01             // Data Sink STag 0x501
		00 00 00 00 00 00 20 00 // Data Sink TO 0x2000
		00 10 00 00             // RDMA Read Message Size 1 MiB
		00 00 09 01             // Data Source STag 0x901
		00 00 7f 00 00 00 00 00 // Data Source TO
	`)
	r := ReadRequest{SinkSTag: 0x501, SinkTO: 0x2000, Size: 1 << 20, SrcSTag: 0x901, SrcTO: 0x7f0000000000}
	b := make([]byte, ReadRequestLen)
	r.MarshalTo(b)
	assert.Equal(t, want, b)
	var g ReadRequest
	require.NoError(t, g.Unmarshal(want))
	assert.Equal(t, r, g)
	assert.ErrorIs(t, g.Unmarshal(want[:27]), ErrBadLength)
}

func TestTerminateReadRequestHex(t *testing.T) {
	// A Read Request met an rkey without remote read rights: RDMAP layer,
	// remote protection error, access rights; M, D and R set with the
	// offending DDP header and Read Request header copied.
	want := unhex(t, `
		01                      // Layer 0 (RDMAP), EType 1 (remote protection)
		02                      // Error Code 0x02 (access rights violation)
		e0 00                   // M=1 D=1 R=1, reserved
		00 2e                   // DDP Segment Length 46 (18 + 28)
		41 41 00000000 00000001 00000001 00000000 // Terminated DDP header: Read Request QN 1 MSN 1
		00000501 0000000000002000 00001000 00000901 0000000000000000 // Terminated RDMA header
	`)
	ddp, rr := want[6:24], want[24:52]
	tm := Terminate{
		Cause:       TermCause{LayerRDMAP, ETypeRDMAPRemoteProtection, CodeAccessRights},
		SegLenValid: true, SegLen: 46, DDPHeader: ddp, RDMAHeader: rr,
	}
	b := make([]byte, TerminateMaxLen)
	n, err := tm.MarshalTo(b)
	require.NoError(t, err)
	assert.Equal(t, want, b[:n])
	var g Terminate
	require.NoError(t, g.Unmarshal(want))
	assert.Equal(t, tm, g)
}

func TestTerminateNoHeadersHex(t *testing.T) {
	want := unhex(t, `
		20     // Layer 2 (LLP/MPA), EType 0
		02     // Error Code 0x02 (MPA CRC error)
		00 00  // no headers copied
	`)
	var g Terminate
	require.NoError(t, g.Unmarshal(want))
	assert.Equal(t, TermCause{LayerLLP, ETypeMPA, CodeMPACRC}, g.Cause)
	assert.Empty(t, g.DDPHeader)
	b := make([]byte, 8)
	n, err := g.MarshalTo(b)
	require.NoError(t, err)
	assert.Equal(t, want, b[:n])
	assert.ErrorIs(t, g.Unmarshal(unhex(t, `20 02 00 00 00`)), ErrBadLength)
	assert.ErrorIs(t, g.Unmarshal(unhex(t, `10 02 40 00 00 20 41`)), ErrShort)
}

func TestImmDataHex(t *testing.T) {
	want := unhex(t, `
		de ad be ef // immediate value
		00 00 00 01 // kind: applies to the Send that follows
	`)
	d := ImmData{Value: 0xdeadbeef, Kind: ImmKindSend}
	b := make([]byte, ImmDataLen)
	d.MarshalTo(b)
	assert.Equal(t, want, b)
	var g ImmData
	require.NoError(t, g.Unmarshal(want))
	assert.Equal(t, d, g)
	assert.ErrorIs(t, g.Unmarshal(unhex(t, `00000000 00000002`)), ErrBadLength)
}

func TestPadLen(t *testing.T) {
	for n, p := range map[int]int{14: 0, 15: 3, 16: 2, 17: 1, 18: 0, 65535: 3} {
		assert.Equal(t, p, PadLen(n), "n=%d", n)
		assert.Zero(t, (ULPDULenSize+n+PadLen(n))%4)
	}
}
