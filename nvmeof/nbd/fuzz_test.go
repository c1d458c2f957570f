package nbd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
)

// Every decoder of client bytes has a fuzz target: it must not panic,
// must refuse with the package's typed errors, and what it accepts must
// survive an encode and a second decode unchanged. go test runs the
// seeds; run one longer with, for example,
//
//	go test -run '^$' -fuzz '^FuzzRequest$' -fuzztime 1m ./nvmeof/nbd/

func requireTyped(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrBadMagic) && !errors.Is(err, ErrLength) {
		t.Fatalf("untyped error: %v", err)
	}
}

func FuzzRequest(f *testing.F) {
	f.Add(hextest.MustDecode(`25609513 0001 0001 0102030405060708 0000000100000200 00001000`))
	f.Add(hextest.MustDecode(`25609513 0000 0002 0000000000000000 0000000000000000 00000000`))
	f.Add(hextest.MustDecode(`25609513 ffff ffff ffffffffffffffff ffffffffffffffff ffffffff`))
	f.Add([]byte{0x25, 0x60})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if err := r.UnmarshalBinary(b); err != nil {
			requireTyped(t, err)
			return
		}
		out, err := r.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, b, out, "a request has no reserved bits: bytes round-trip")
		var r2 Request
		require.NoError(t, r2.UnmarshalBinary(out))
		require.Equal(t, r, r2)
	})
}

func FuzzOption(f *testing.F) {
	f.Add(hextest.MustDecode(`49484156454f5054 00000007 0000000b`), hextest.MustDecode(`00000003 766f6c 0002 0003 0001`))
	f.Add(hextest.MustDecode(`49484156454f5054 00000003 00000000`), []byte{})
	f.Add([]byte("IHAVEOPT"), hextest.MustDecode(`ffffffff 0000`))
	f.Fuzz(func(t *testing.T, hdr, data []byte) {
		var h OptionHeader
		if err := h.UnmarshalBinary(hdr); err != nil {
			requireTyped(t, err)
		} else {
			out, err := h.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, hdr, out)
		}
		var q InfoRequest
		if err := q.UnmarshalBinary(data); err != nil {
			requireTyped(t, err)
			return
		}
		out, err := q.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, data, out, "info request data round-trips byte for byte")
		var q2 InfoRequest
		require.NoError(t, q2.UnmarshalBinary(out))
		require.Equal(t, q, q2)
	})
}

// FuzzSession feeds arbitrary client bytes to a whole session: the
// handshake, then transmission once a GO or EXPORT_NAME gets through.
// The server must neither panic nor hang, must answer in well-formed
// messages, and must keep every write inside the export.
func FuzzSession(f *testing.F) {
	greet := hextest.MustDecode(`00000003`) // client flags: fixed newstyle, no zeroes
	opt := func(o Option, data []byte) []byte {
		h, _ := (&OptionHeader{Option: o, Length: uint32(len(data))}).MarshalBinary()
		return append(h, data...)
	}
	req := func(typ Command, flags uint16, off uint64, n uint32, payload []byte) []byte {
		b, _ := (&Request{Flags: flags, Type: typ, Cookie: 1, Offset: off, Length: n}).MarshalBinary()
		return append(b, payload...)
	}
	goData, _ := (&InfoRequest{Infos: []uint16{InfoBlockSize}}).MarshalBinary()
	session := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	f.Add(session(greet, opt(OptList, nil), opt(OptStructuredReply, nil), opt(OptGo, goData),
		req(CmdWrite, CmdFlagFUA, 512, 1024, make([]byte, 1024)), req(CmdRead, 0, 0, 4096, nil),
		req(CmdTrim, 0, 0, 512, nil), req(CmdWriteZeroes, 0, 1024, 512, nil), req(CmdFlush, 0, 0, 0, nil),
		req(CmdDisc, 0, 0, 0, nil)))
	f.Add(session(greet, opt(OptExportName, nil), req(CmdWrite, 0, 1<<20, 512, make([]byte, 512)),
		req(CmdRead, 0, 1<<64-512, 1024, nil), req(Command(99), 0, 0, 0, nil)))
	f.Add(session(greet, opt(OptInfo, []byte{0, 0, 0, 9}), opt(OptAbort, nil)))
	f.Add(session(greet, opt(OptGo, goData), req(CmdWrite, 0, 0, 1<<31, make([]byte, 100))))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		mem := &memDevice{data: make([]byte, 64<<10)}
		guard := make([]byte, 4096)
		for i := range guard {
			guard[i] = 0xa5
		}
		mem.data = append(mem.data, guard...)
		exp := mem.export("", 512)
		exp.Size = 64 << 10
		s := &Server{Exports: []Export{exp}, Slots: 4, InFlightBytes: 8 << 10}
		client, server := net.Pipe()
		served := make(chan error, 1)
		go func() { served <- s.ServeConn(server) }()
		out := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(client)
			out <- b
		}()
		client.Write(in) // the server may stop reading early: an error here is fine
		client.Close()
		<-served
		got := <-out
		require.Equal(t, guard, mem.data[64<<10:], "nothing was written past the export")
		if len(got) >= GreetingSize {
			require.Equal(t, MagicNBD, binary.BigEndian.Uint64(got))
		}
	})
}
