package target

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// FuzzTCPStream writes arbitrary bytes after the ICReq of an NVMe/TCP
// connection (mode picks the digests) and then closes its sending side.
// Whatever the bytes, every PDU the target answers with is well formed
// for a host (nvmeof.TCPReceiver.Check, the header digest when
// negotiated), a C2HTermReq is the last thing sent, the target closes the
// connection, and a new connection is served.
func FuzzTCPStream(f *testing.F) {
	capsule := func(cmd nvmeof.Command, data []byte) []byte {
		x := &tcpInit{t: f}
		return x.capsule(cmd, data)
	}
	x := &tcpInit{t: f}
	cn, cd := x.connectCmd(0)
	cn.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
	f.Add(uint8(0), capsule(cn, cd))
	cn.DPTR = nvmeof.TransportSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
	f.Add(uint8(0), capsule(cn, nil))
	f.Add(uint8(0), append(capsule(cn, nil), x.h2cData(2, 0, 0, cd, true)...))
	f.Add(uint8(0), x.h2cData(7, 3, 0, make([]byte, 64), true))
	f.Add(uint8(3), []byte{4, 3, 72, 76, 0x50, 0x10, 0, 0})
	term, _ := (&nvmeof.TCPTermReq{Type: nvmeof.TCPPDUH2CTermReq, FES: nvmeof.TCPFESPDUSequenceError}).MarshalBinary()
	f.Add(uint8(0), term)
	f.Add(uint8(1), []byte{0, 0, 128, 0, 128, 0, 0, 0})

	tt := newTestTarget(f, "tcp://127.0.0.1:0", WithLogger(slog.New(slog.DiscardHandler)))
	addr := strings.TrimPrefix(tt.url, "tcp://")
	f.Fuzz(func(t *testing.T, mode uint8, b []byte) {
		dg := nvmeof.TCPDigestTypes(mode & 3)
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		ic, _ := (&nvmeof.TCPICReq{Digest: dg}).MarshalBinary()
		_, err = c.Write(ic)
		require.NoError(t, err)
		br := bufio.NewReader(c)
		resp := make([]byte, nvmeof.TCPICRespSize)
		_, err = io.ReadFull(br, resp)
		require.NoError(t, err)
		var icr nvmeof.TCPICResp
		require.NoError(t, icr.UnmarshalBinary(resp))
		go func() {
			c.Write(b)
			c.(*net.TCPConn).CloseWrite()
		}()
		recv := nvmeof.TCPReceiver{Initialized: true, HeaderDigest: dg&nvmeof.TCPHeaderDigest != 0,
			DataDigest: dg&nvmeof.TCPDataDigest != 0, MaxC2HData: 1 << 20}
		terminated := false
		for {
			var ch [nvmeof.TCPCommonHeaderSize]byte
			if _, err := io.ReadFull(br, ch[:]); err != nil {
				require.ErrorIs(t, err, io.EOF, "the target closes the connection")
				break
			}
			require.False(t, terminated, "nothing follows a C2HTermReq")
			h, _ := nvmeof.ParseTCPHeader(ch[:])
			l, fe := recv.Check(h)
			require.Nil(t, fe, "a malformed PDU from the target: %v", fe)
			pdu := make([]byte, h.PLEN)
			copy(pdu, ch[:])
			_, err := io.ReadFull(br, pdu[nvmeof.TCPCommonHeaderSize:])
			require.NoError(t, err)
			if l.Header > int(h.HLEN) {
				require.True(t, nvmeof.TCPDigestMatches(pdu[h.HLEN:], nvmeof.TCPDigest(pdu[:h.HLEN])), "header digest")
			}
			if h.Type == nvmeof.TCPPDUC2HTermReq {
				var term nvmeof.TCPTermReq
				require.NoError(t, term.UnmarshalBinary(pdu))
				terminated = true
			}
		}
		// The target still serves.
		d := dialTCP(t, tt.url, 0)
		d.c.Close()
	})
}
