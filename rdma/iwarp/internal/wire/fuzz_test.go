package wire

import (
	"bytes"
	"testing"
)

func FuzzMPAFrame(f *testing.F) {
	req := MPAFrame{MPAHeader: MPAHeader{CRC: true, Rev: 1}, Private: []byte("hello")}
	rep := MPAFrame{MPAHeader: MPAHeader{Reply: true, Reject: true, Rev: 1}, Private: bytes.Repeat([]byte{7}, 512)}
	for _, fr := range []MPAFrame{req, rep} {
		b := make([]byte, fr.Len())
		fr.MarshalTo(b)
		f.Add(b)
	}
	f.Add([]byte("MPA ID Req Frame\x80\x01\x02\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr MPAFrame
		if err := fr.Unmarshal(b); err != nil {
			return
		}
		out := make([]byte, fr.Len())
		n, err := fr.MarshalTo(out)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var g MPAFrame
		if err := g.Unmarshal(out[:n]); err != nil {
			t.Fatalf("decode of re-encoded frame: %v", err)
		}
		if g.MPAHeader != fr.MPAHeader || !bytes.Equal(g.Private, fr.Private) {
			t.Fatalf("round trip: %+v != %+v", g, fr)
		}
		// Only reserved bits may differ from the input.
		if !bytes.Equal(out[:mpaOffFlags], b[:mpaOffFlags]) || !bytes.Equal(out[mpaOffRev:n], b[mpaOffRev:]) ||
			out[mpaOffFlags] != b[mpaOffFlags]&^mpaFlagReserved {
			t.Fatalf("re-encoding changed more than reserved bits")
		}
	})
}

func FuzzFPDU(f *testing.F) {
	for _, crc := range []bool{false, true} {
		h := Header{Last: true, Opcode: OpSend, MSN: 1}
		u := make([]byte, UntaggedHeaderLen+5)
		h.MarshalTo(u)
		b := make([]byte, 64)
		n, _ := MarshalFPDU(b, u, crc)
		f.Add(b[:n], crc)
	}
	f.Add([]byte{0, 14, 1, 2}, true)
	f.Fuzz(func(t *testing.T, b []byte, crc bool) {
		u, total, err := ParseFPDU(b, crc)
		if err != nil {
			return
		}
		out := make([]byte, FPDULen(len(u), crc))
		n, err := MarshalFPDU(out, u, crc)
		if err != nil || n != total {
			t.Fatalf("re-encode: n=%d total=%d err=%v", n, total, err)
		}
		u2, total2, err := ParseFPDU(out, crc)
		if err != nil || total2 != total || !bytes.Equal(u2, u) {
			t.Fatalf("round trip failed: %v", err)
		}
		if crc && !bytes.Equal(out[:ULPDULenSize+len(u)], b[:ULPDULenSize+len(u)]) {
			t.Fatalf("length or ULPDU changed")
		}
	})
}

func FuzzHeader(f *testing.F) {
	for _, h := range []Header{
		{Tagged: true, Last: true, Opcode: OpWrite, STag: 0x1201, TO: 1 << 40},
		{Tagged: true, Opcode: OpReadResponse, STag: 9, TO: 4096},
		{Last: true, Opcode: OpSendInv, RsvdULP: 0x3302, MSN: 3, MO: 70000},
		{Last: true, Opcode: OpReadRequest, QN: QNReadRequest, MSN: 1},
		{Last: true, Opcode: OpTerminate, QN: QNTerminate, MSN: 1},
		{Last: true, Opcode: OpImmediateDataSE, MSN: 9},
	} {
		b := make([]byte, UntaggedHeaderLen)
		n := h.MarshalTo(b)
		f.Add(b[:n])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Header
		n, err := h.Unmarshal(b)
		if err != nil {
			return
		}
		out := make([]byte, n)
		if h.MarshalTo(out) != n {
			t.Fatal("length changed")
		}
		var g Header
		if _, err := g.Unmarshal(out); err != nil || g != h {
			t.Fatalf("round trip: %+v != %+v (%v)", g, h, err)
		}
	})
}

func FuzzReadRequest(f *testing.F) {
	b := make([]byte, ReadRequestLen)
	(&ReadRequest{SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5}).MarshalTo(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ReadRequest
		if r.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, ReadRequestLen)
		r.MarshalTo(out)
		if !bytes.Equal(out, b) {
			t.Fatal("round trip changed bytes")
		}
	})
}

func FuzzTerminate(f *testing.F) {
	ddp := make([]byte, UntaggedHeaderLen)
	(&Header{Last: true, Opcode: OpReadRequest, QN: 1, MSN: 1}).MarshalTo(ddp)
	tm := Terminate{Cause: TermCause{LayerRDMAP, 1, 2}, SegLenValid: true, SegLen: 46, DDPHeader: ddp, RDMAHeader: make([]byte, ReadRequestLen)}
	b := make([]byte, TerminateMaxLen)
	n, _ := tm.MarshalTo(b)
	f.Add(b[:n])
	f.Add([]byte{0x20, 0x02, 0, 0})
	f.Add([]byte{0x12, 0x02, 0xc0, 0, 0, 18, 0x81, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var tm Terminate
		if tm.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, TerminateMaxLen)
		n, err := tm.MarshalTo(out)
		if err != nil {
			// Unknown layer values above 0xf cannot occur from 4 bits.
			t.Fatalf("re-encode: %v", err)
		}
		var g Terminate
		if err := g.Unmarshal(out[:n]); err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		if g.Cause != tm.Cause || g.SegLenValid != tm.SegLenValid || g.SegLen != tm.SegLen ||
			!bytes.Equal(g.DDPHeader, tm.DDPHeader) || !bytes.Equal(g.RDMAHeader, tm.RDMAHeader) {
			t.Fatalf("round trip: %+v != %+v", g, tm)
		}
	})
}

func FuzzImmData(f *testing.F) {
	f.Add([]byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d ImmData
		if d.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, ImmDataLen)
		d.MarshalTo(out)
		if !bytes.Equal(out, b) {
			t.Fatal("round trip changed bytes")
		}
	})
}
