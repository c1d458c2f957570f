package nvmeof

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzTCPPDU feeds arbitrary bytes to the NVMe/TCP PDU decoders as a
// receiver meets them: the common header through TCPReceiver.Check on
// both sides, with and without digests and alignment, then the decoder
// of the type. It checks that nothing panics, that refusals are typed,
// that an accepted layout lies within PLEN, and that what decodes
// re-encodes to the same bytes (reserved bytes aside).
func FuzzTCPPDU(f *testing.F) {
	icreq, _ := (&TCPICReq{Digest: TCPHeaderDigest | TCPDataDigest}).MarshalBinary()
	icresp, _ := (&TCPICResp{MAXH2CDATA: 65536}).MarshalBinary()
	term, _ := (&TCPTermReq{Type: TCPPDUC2HTermReq, FES: TCPFESHeaderDigestError, Data: icreq[:24]}).MarshalBinary()
	f.Add(icreq, uint8(0))
	f.Add(icresp, uint8(1))
	f.Add(term, uint8(2))
	f.Add(annotated(`04 03 48 4c 50100000`), uint8(3))
	f.Add(annotated(`06 04 18 18 18100000 3412 0700 00200000 00100000 00000000`), uint8(4))
	f.Add(annotated(`07 0c 18 1c 1c020000 4200 0000 00000000 00020000 00000000`), uint8(5))
	f.Add(annotated(`09 00 18 00 18000000 0300 1100 00000000 00000100 00000000`), uint8(6))
	f.Fuzz(func(t *testing.T, b []byte, mode uint8) {
		h, err := ParseTCPHeader(b)
		if err != nil {
			require.ErrorIs(t, err, ErrShortBuffer)
			return
		}
		r := TCPReceiver{
			Controller:     mode&1 != 0,
			Initialized:    mode&2 != 0,
			HeaderDigest:   mode&4 != 0,
			DataDigest:     mode&8 != 0,
			PDA:            int(mode >> 4 & 7),
			MaxCapsuleData: 8192, MaxH2CData: 65536, MaxC2HData: 1 << 20,
		}
		l, fe := r.Check(h)
		if fe == nil {
			total := l.Header + l.Pad + l.Data
			if l.DataDigest {
				total += TCPDigestSize
			}
			require.Equal(t, int(h.PLEN), total, "layout does not add up to PLEN")
			require.GreaterOrEqual(t, l.Header, int(h.HLEN))
		} else {
			require.True(t, errors.Is(fe, &TCPFatalError{FES: fe.FES}))
		}
		var back [256]byte
		n, err := h.MarshalTo(back[:])
		require.NoError(t, err)
		require.Equal(t, b[:n], back[:n])

		switch TCPPDUType(b[0]) {
		case TCPPDUICReq:
			var p TCPICReq
			if err := p.UnmarshalBinary(b); err != nil {
				requireTCPTyped(t, err)
				return
			}
			_ = p.Check()
			enc, err := p.MarshalBinary()
			require.NoError(t, err)
			var again TCPICReq
			require.NoError(t, again.UnmarshalBinary(enc))
			require.Equal(t, p, again)
		case TCPPDUICResp:
			var p TCPICResp
			if err := p.UnmarshalBinary(b); err != nil {
				requireTCPTyped(t, err)
				return
			}
			enc, err := p.MarshalBinary()
			require.NoError(t, err)
			var again TCPICResp
			require.NoError(t, again.UnmarshalBinary(enc))
			require.Equal(t, p, again)
		case TCPPDUH2CTermReq, TCPPDUC2HTermReq:
			var p TCPTermReq
			if err := p.UnmarshalBinary(b); err != nil {
				requireTCPTyped(t, err)
				return
			}
			enc, err := p.MarshalBinary()
			require.NoError(t, err)
			require.True(t, bytes.Equal(b[TCPTermOffsetData:], enc[TCPTermOffsetData:]))
			require.Equal(t, b[:TCPTermOffsetFEI+4], enc[:TCPTermOffsetFEI+4])
		case TCPPDUH2CData, TCPPDUC2HData, TCPPDUR2T:
			p, err := ParseTCPDataPDU(b)
			if err != nil {
				require.ErrorIs(t, err, ErrShortBuffer)
				return
			}
			var enc [TCPDataHeaderSize]byte
			_, err = p.MarshalTo(enc[:], b[TCPOffsetPDO], le.Uint32(b[TCPOffsetPLEN:]))
			require.NoError(t, err)
			// HLEN is always written as 24; the reserved bytes as zero.
			require.Equal(t, b[:TCPOffsetHLEN], enc[:TCPOffsetHLEN])
			require.Equal(t, b[TCPOffsetPDO:TCPDataOffsetDATAL+4], enc[TCPOffsetPDO:TCPDataOffsetDATAL+4])
		}
	})
}

func requireTCPTyped(t *testing.T, err error) {
	t.Helper()
	var fe *TCPFatalError
	if errors.As(err, &fe) || errors.Is(err, ErrLength) || errors.Is(err, ErrShortBuffer) {
		return
	}
	t.Fatalf("untyped error: %v", err)
}
