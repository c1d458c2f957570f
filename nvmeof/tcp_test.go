package nvmeof

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Wire tests of the NVMe/TCP PDUs (NVMe/TCP Transport Specification 1.0,
// 3.6: PDU formats), each written from the specification's figures.

func TestTCPICReqWire(t *testing.T) {
	// The ICReq a Linux host sends asking for both digests.
	want := annotated(`
		00          # PDU-Type: ICReq
		00          # FLAGS
		80          # HLEN 128
		00          # PDO
		80000000    # PLEN 128
		0000        # PFV 0
		00          # HPDA 0
		03          # DGST: HDGST_ENABLE | DDGST_ENABLE
		00000000    # MAXR2T 0 (one R2T per command)
	` + zeros(112))
	p := TCPICReq{Digest: TCPHeaderDigest | TCPDataDigest}
	got, err := p.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	var back TCPICReq
	require.NoError(t, back.UnmarshalBinary(want))
	assert.Equal(t, p, back)
	assert.Nil(t, back.Check())

	bad := append([]byte(nil), want...)
	bad[TCPICOffsetPFV] = 1
	require.NoError(t, back.UnmarshalBinary(bad))
	fe := back.Check()
	require.NotNil(t, fe)
	assert.Equal(t, TCPFESUnsupportedParameter, fe.FES)
	assert.EqualValues(t, TCPICOffsetPFV, fe.FEI)

	bad = append([]byte(nil), want...)
	bad[TCPOffsetPLEN] = 0x81
	var ferr *TCPFatalError
	require.ErrorAs(t, back.UnmarshalBinary(bad), &ferr)
	assert.EqualValues(t, TCPOffsetPLEN, ferr.FEI)
	require.ErrorIs(t, back.UnmarshalBinary(want[:127]), ErrLength)
}

func TestTCPICRespWire(t *testing.T) {
	want := annotated(`
		01          # PDU-Type: ICResp
		00          # FLAGS
		80          # HLEN 128
		00          # PDO
		80000000    # PLEN 128
		0000        # PFV 0
		00          # CPDA 0
		01          # DGST: header digest only
		00000400    # MAXH2CDATA 262144
	` + zeros(112))
	p := TCPICResp{Digest: TCPHeaderDigest, MAXH2CDATA: 256 << 10}
	got, err := p.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	var back TCPICResp
	require.NoError(t, back.UnmarshalBinary(want))
	assert.Equal(t, p, back)

	// What a Linux host refuses.
	for name, tc := range map[string]struct {
		off int
		val []byte
	}{
		"PFV 1":             {TCPICOffsetPFV, []byte{1, 0}},
		"CPDA 32":           {TCPICRespOffsetCPDA, []byte{32}},
		"MAXH2CDATA 2048":   {TCPICRespOffsetMAXH2CDATA, []byte{0, 8, 0, 0}},
		"MAXH2CDATA 4098":   {TCPICRespOffsetMAXH2CDATA, []byte{2, 0x10, 0, 0}},
		"PLEN 132":          {TCPOffsetPLEN, []byte{0x84}},
		"reserved DGST bit": {TCPICOffsetDGST, []byte{4}},
	} {
		b := append([]byte(nil), want...)
		copy(b[tc.off:], tc.val)
		var fe *TCPFatalError
		require.ErrorAs(t, back.UnmarshalBinary(b), &fe, name)
		assert.EqualValues(t, tc.off, fe.FEI, name)
	}
}

func TestTCPCapsuleHeadersWire(t *testing.T) {
	// A CapsuleCmd with header digest, 4096 bytes of in-capsule data and
	// a data digest, CPDA 0: the data follows the header digest.
	want := annotated(`
		04          # PDU-Type: CapsuleCmd
		03          # FLAGS: HDGSTF | DDGSTF
		48          # HLEN 72
		4c          # PDO 76: after the 4-byte header digest
		50100000    # PLEN 72 + 4 + 4096 + 4 = 4176
	`)
	b := make([]byte, 8)
	PutTCPCapsuleHeader(b, TCPPDUCapsuleCmd, TCPFlagHDGSTF|TCPFlagDDGSTF, 76, 4176)
	assert.Equal(t, want, b)

	want = annotated(`
		05          # PDU-Type: CapsuleResp
		00          # FLAGS
		18          # HLEN 24
		00          # PDO
		18000000    # PLEN 24
	`)
	PutTCPCapsuleHeader(b, TCPPDUCapsuleResp, 0, 0, 24)
	assert.Equal(t, want, b)
	h, err := ParseTCPHeader(want)
	require.NoError(t, err)
	assert.Equal(t, TCPHeader{Type: TCPPDUCapsuleResp, HLEN: 24, PLEN: 24}, h)
	_, err = ParseTCPHeader(want[:7])
	require.ErrorIs(t, err, ErrShortBuffer)
}

func TestTCPDataPDUsWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    TCPDataPDU
		pdo  uint8
		plen uint32
		hex  string
	}{
		{"H2CData", TCPDataPDU{Type: TCPPDUH2CData, Flags: TCPFlagLastPDU, CCCID: 0x1234, TTAG: 7, DATAO: 8192, DATAL: 4096}, 24, 24 + 4096, `
			06          # PDU-Type: H2CData
			04          # FLAGS: LAST_PDU
			18          # HLEN 24
			18          # PDO 24
			18100000    # PLEN 4120
			3412        # CCCID 1234h
			0700        # TTAG 7
			00200000    # DATAO 8192
			00100000    # DATAL 4096
			00000000    # reserved
		`},
		{"C2HData", TCPDataPDU{Type: TCPPDUC2HData, Flags: TCPFlagLastPDU | TCPFlagSuccess | TCPFlagHDGSTF, CCCID: 0x0042, DATAL: 512}, 28, 28 + 512, `
			07          # PDU-Type: C2HData
			0d          # FLAGS: HDGSTF | LAST_PDU | SUCCESS
			18          # HLEN 24
			1c          # PDO 28
			1c020000    # PLEN 540
			4200        # CCCID 42h
			0000        # reserved
			00000000    # DATAO 0
			00020000    # DATAL 512
			00000000    # reserved
		`},
		{"R2T", TCPDataPDU{Type: TCPPDUR2T, CCCID: 0x0003, TTAG: 0x0011, DATAO: 0, DATAL: 65536}, 0, 24, `
			09          # PDU-Type: R2T
			00          # FLAGS
			18          # HLEN 24
			00          # PDO 0
			18000000    # PLEN 24
			0300        # CCCID 3
			1100        # TTAG 11h
			00000000    # R2TO 0
			00000100    # R2TL 65536
			00000000    # reserved
		`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := annotated(tc.hex)
			b := make([]byte, TCPDataHeaderSize)
			n, err := tc.p.MarshalTo(b, tc.pdo, tc.plen)
			require.NoError(t, err)
			assert.Equal(t, TCPDataHeaderSize, n)
			assert.Equal(t, want, b)
			back, err := ParseTCPDataPDU(want)
			require.NoError(t, err)
			assert.Equal(t, tc.p, back)
		})
	}
}

func TestTCPTermReqWire(t *testing.T) {
	// A C2HTermReq for an H2CData whose PDO was wrong: FES Invalid PDU
	// Header Field, FEI the offset of PDO, the offending header after.
	bad := annotated(`06 04 18 20 18100000 3412 0700 00200000 00100000 00000000`)
	want := annotated(`
		03          # PDU-Type: C2HTermReq
		00          # FLAGS
		18          # HLEN 24
		00          # PDO
		30000000    # PLEN 24 + 24 = 48
		0100        # FES 01h: Invalid PDU Header Field
		03000000    # FEI 3: the PDO field
		00000000 00000000 0000  # reserved
		06 04 18 20 18100000 3412 0700 00200000 00100000 00000000  # the header in error
	`)
	p := TCPTermReq{Type: TCPPDUC2HTermReq, FES: TCPFESInvalidHeaderField, FEI: TCPOffsetPDO, Data: bad}
	got, err := p.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	var back TCPTermReq
	require.NoError(t, back.UnmarshalBinary(want))
	assert.Equal(t, p, back)

	long := TCPTermReq{Type: TCPPDUH2CTermReq, FES: TCPFESPDUSequenceError, Data: make([]byte, 200)}
	assert.Equal(t, 152, long.Size(), "error data is cut to 128 bytes")
	_, err = (&TCPTermReq{Type: TCPPDUR2T}).MarshalBinary()
	require.ErrorIs(t, err, ErrFieldValue)
	require.Error(t, back.UnmarshalBinary(want[:40]))
}

func TestTCPDigest(t *testing.T) {
	// The CRC32C check value (RFC 3720 B.4 and the usual "123456789").
	assert.Equal(t, uint32(0xe3069283), TCPDigest([]byte("123456789")))
	assert.Equal(t, TCPDigest([]byte("123456789")), TCPDigestUpdate(TCPDigest([]byte("1234")), []byte("56789")))
	// 32 bytes of zeros, RFC 3720 B.4: aa 36 91 8a on the wire.
	b := make([]byte, 4)
	PutTCPDigest(b, make([]byte, 32))
	assert.Equal(t, annotated(`aa36918a`), b)
	assert.True(t, TCPDigestMatches(b, TCPDigest(make([]byte, 32))))
}

func TestTCPDataOffset(t *testing.T) {
	assert.Equal(t, 72, TCPDataOffset(72, 0))
	assert.Equal(t, 76, TCPDataOffset(76, 0))
	assert.Equal(t, 80, TCPDataOffset(72, 3))   // 16-byte alignment
	assert.Equal(t, 128, TCPDataOffset(28, 31)) // 128-byte alignment
}

func TestTCPReceiverCheck(t *testing.T) {
	ctrl := TCPReceiver{Controller: true, Initialized: true, MaxCapsuleData: 8192, MaxH2CData: 65536}
	digests := ctrl
	digests.HeaderDigest, digests.DataDigest = true, true
	aligned := ctrl
	aligned.PDA = 3
	host := TCPReceiver{Initialized: true, MaxC2HData: 1 << 20}
	fresh := TCPReceiver{Controller: true}

	type want struct {
		fes TCPFES
		fei int
	}
	ok := want{}
	for _, tc := range []struct {
		name string
		r    TCPReceiver
		h    string
		want want
		l    TCPLayout
	}{
		{"ICReq first", fresh, `00 00 80 00 80000000`, ok, TCPLayout{Header: 128}},
		{"CapsuleCmd before ICReq", fresh, `04 00 48 00 48000000`, want{TCPFESPDUSequenceError, 0}, TCPLayout{}},
		{"second ICReq", ctrl, `00 00 80 00 80000000`, want{TCPFESPDUSequenceError, 0}, TCPLayout{}},
		{"H2CTermReq before ICReq", fresh, `02 00 18 00 20000000`, ok, TCPLayout{Header: 24, Data: 8}},
		{"command, no data", ctrl, `04 00 48 00 48000000`, ok, TCPLayout{Header: 72}},
		{"command, 4 KiB in capsule", ctrl, `04 00 48 48 48100000`, ok, TCPLayout{Header: 72, Data: 4096}},
		{"command, digests", digests, `04 03 48 4c 50100000`, ok, TCPLayout{Header: 76, Data: 4096, DataDigest: true}},
		{"command, CPDA 3 pads to 80", aligned, `04 00 48 50 50100000`, ok, TCPLayout{Header: 72, Pad: 8, Data: 4096}},
		{"H2CData", ctrl, `06 04 18 18 18100000`, ok, TCPLayout{Header: 24, Data: 4096}},
		{"C2HData to host", host, `07 0c 18 18 18100000`, ok, TCPLayout{Header: 24, Data: 4096}},
		{"R2T to host", host, `09 00 18 00 18000000`, ok, TCPLayout{Header: 24}},
		{"C2HData to controller", ctrl, `07 04 18 18 18100000`, want{TCPFESInvalidHeaderField, TCPOffsetPDUType}, TCPLayout{}},
		{"unknown type", ctrl, `08 00 18 00 18000000`, want{TCPFESInvalidHeaderField, TCPOffsetPDUType}, TCPLayout{}},
		{"wrong HLEN", ctrl, `04 00 40 00 40000000`, want{TCPFESInvalidHeaderField, TCPOffsetHLEN}, TCPLayout{}},
		// A digest flag without the digest is ignored: the PDU is framed
		// as negotiated, so these 76 bytes are a header and 4 bytes of
		// data that PDO 0 puts inside the header.
		{"HDGSTF not negotiated", ctrl, `04 01 48 00 4c000000`, want{TCPFESInvalidHeaderField, TCPOffsetPDO}, TCPLayout{}},
		{"HDGSTF not negotiated, no data", ctrl, `04 01 48 00 48000000`, ok, TCPLayout{Header: 72}},
		{"HDGSTF missing", digests, `04 00 48 00 48000000`, want{TCPFESInvalidHeaderField, TCPOffsetFLAGS}, TCPLayout{}},
		{"DDGSTF missing", digests, `04 01 48 4c 4c100000`, want{TCPFESInvalidHeaderField, TCPOffsetFLAGS}, TCPLayout{}},
		{"DDGSTF without data", digests, `04 03 48 00 4c000000`, ok, TCPLayout{Header: 76}},
		{"DDGSTF not negotiated", ctrl, `04 02 48 48 48100000`, ok, TCPLayout{Header: 72, Data: 4096}},
		{"SUCCESS on H2CData (reserved there)", ctrl, `06 0c 18 18 18100000`, ok, TCPLayout{Header: 24, Data: 4096}},
		{"LAST_PDU on CapsuleCmd (reserved there)", ctrl, `04 04 48 00 48000000`, ok, TCPLayout{Header: 72}},
		{"reserved flag bits", ctrl, `04 f0 48 00 48000000`, ok, TCPLayout{Header: 72}},
		{"SUCCESS without LAST_PDU", host, `07 08 18 18 18100000`, want{TCPFESInvalidHeaderField, TCPOffsetFLAGS}, TCPLayout{}},
		{"PDO not per CPDA", aligned, `04 00 48 48 48100000`, want{TCPFESInvalidHeaderField, TCPOffsetPDO}, TCPLayout{}},
		{"PDO padded with CPDA 0", ctrl, `04 00 48 50 50100000`, ok, TCPLayout{Header: 72, Pad: 8, Data: 4096}},
		{"PDO inside the header", ctrl, `04 00 48 40 48100000`, want{TCPFESInvalidHeaderField, TCPOffsetPDO}, TCPLayout{}},
		{"PDO inside the header digest", digests, `04 03 48 48 50100000`, want{TCPFESInvalidHeaderField, TCPOffsetPDO}, TCPLayout{}},
		{"PDO without data (reserved)", ctrl, `04 00 48 48 48000000`, ok, TCPLayout{Header: 72}},
		{"PDO of an ICReq (reserved)", fresh, `00 00 80 80 80000000`, ok, TCPLayout{Header: 128}},
		{"PDO of an H2CTermReq (reserved)", ctrl, `02 00 18 18 20000000`, ok, TCPLayout{Header: 24, Data: 8}},
		{"PLEN beyond in-capsule size", ctrl, `04 00 48 48 48200100`, want{TCPFESInvalidHeaderField, TCPOffsetPLEN}, TCPLayout{}},
		{"H2CData beyond MAXH2CDATA", ctrl, `06 04 18 18 19000100`, want{TCPFESDataLimitExceeded, 0}, TCPLayout{}},
		{"H2CData of a huge PLEN", ctrl, `06 04 18 18 ffffffff`, want{TCPFESDataLimitExceeded, 0}, TCPLayout{}},
		{"C2HData beyond the limit", host, `07 04 18 18 18101000`, want{TCPFESInvalidHeaderField, TCPOffsetPLEN}, TCPLayout{}},
		{"H2CData without data", ctrl, `06 04 18 18 18000000`, want{TCPFESInvalidHeaderField, TCPOffsetPLEN}, TCPLayout{}},
		{"R2T with data", host, `09 00 18 00 1c000000`, want{TCPFESInvalidHeaderField, TCPOffsetPLEN}, TCPLayout{}},
		{"ICReq PLEN", fresh, `00 00 80 00 84000000`, want{TCPFESInvalidHeaderField, TCPOffsetPLEN}, TCPLayout{}},
		{"TermReq too long", ctrl, `02 00 18 00 99000000`, want{TCPFESInvalidHeaderField, TCPOffsetPLEN}, TCPLayout{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseTCPHeader(annotated(tc.h))
			require.NoError(t, err)
			r := tc.r
			l, fe := r.Check(h)
			if tc.want == ok {
				require.Nil(t, fe)
				assert.Equal(t, tc.l, l)
				return
			}
			require.NotNil(t, fe)
			assert.Equal(t, tc.want.fes, fe.FES, fe.Error())
			assert.EqualValues(t, tc.want.fei, fe.FEI, fe.Error())
			assert.True(t, errors.Is(fmtWrap(fe), &TCPFatalError{FES: tc.want.fes}))
		})
	}
}

func TestTCPReceiverCheckAllocatesNothing(t *testing.T) {
	r := TCPReceiver{Controller: true, Initialized: true, HeaderDigest: true, MaxCapsuleData: 8192}
	h := TCPHeader{Type: TCPPDUCapsuleCmd, Flags: TCPFlagHDGSTF, HLEN: 72, PLEN: 76}
	allocs := testing.AllocsPerRun(100, func() {
		if _, fe := r.Check(h); fe != nil {
			t.Fatal(fe)
		}
	})
	assert.Zero(t, allocs)
}

func fmtWrap(err error) error { return errors.Join(errors.New("context"), err) }

// zeros is annotated hex for n zero bytes.
func zeros(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '0', '0')
	}
	return "\n" + string(b) + " # reserved\n"
}
