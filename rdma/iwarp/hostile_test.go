package iwarp

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

// rawPeer is a hand-driven iWARP peer on a plain TCP connection: it does
// the MPA exchange and then writes whatever bytes a test wants.
type rawPeer struct {
	conn net.Conn
	crc  bool
}

func dialRaw(t *testing.T, addr string, private []byte) *rawPeer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	req := wire.MPAFrame{MPAHeader: wire.MPAHeader{CRC: true, Rev: 1}, Private: private}
	require.NoError(t, writeMPA(c, &req))
	rep, err := readMPA(c)
	require.NoError(t, err)
	require.True(t, rep.Reply)
	require.False(t, rep.Reject)
	return &rawPeer{conn: c, crc: rep.CRC}
}

// fpdu frames a DDP segment (header h, then body) as an FPDU.
func (p *rawPeer) fpdu(h wire.Header, body []byte) []byte {
	u := make([]byte, h.Len()+len(body))
	h.MarshalTo(u)
	copy(u[h.Len():], body)
	b := make([]byte, wire.FPDULen(len(u), p.crc))
	n, _ := wire.MarshalFPDU(b, u, p.crc)
	return b[:n]
}

func (p *rawPeer) write(t *testing.T, b []byte) {
	t.Helper()
	_, err := p.conn.Write(b)
	require.NoError(t, err)
}

// readTerminate reads FPDUs until a Terminate and then expects the
// connection to end.
func (p *rawPeer) readTerminate(t *testing.T) wire.Terminate {
	t.Helper()
	for {
		var lb [2]byte
		_, err := io.ReadFull(p.conn, lb[:])
		require.NoError(t, err, "connection ended without a Terminate")
		n := int(binary.BigEndian.Uint16(lb[:]))
		rest := make([]byte, wire.FPDULen(n, p.crc)-2)
		_, err = io.ReadFull(p.conn, rest)
		require.NoError(t, err)
		u, _, err := wire.ParseFPDU(append(lb[:], rest...), p.crc)
		require.NoError(t, err, "the Terminate's own FPDU is well formed")
		var h wire.Header
		hl, err := h.Unmarshal(u)
		require.NoError(t, err)
		if h.Opcode != wire.OpTerminate {
			continue
		}
		assert.Equal(t, uint32(wire.QNTerminate), h.QN)
		assert.True(t, h.Last)
		var tm wire.Terminate
		require.NoError(t, tm.Unmarshal(append([]byte(nil), u[hl:]...)))
		_, err = io.ReadFull(p.conn, lb[:1])
		assert.Error(t, err, "the connection ends after the Terminate")
		return tm
	}
}

func TestHostileFrames(t *testing.T) {
	p := mustProv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := p.Listen(ctx, "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	pd, _ := p.OpenPD("")
	cq, _ := pd.CreateCQ(1024)
	recvMR, _ := pd.Alloc(1<<16, rdma.AccessAll) // where Recvs land
	mr, _ := pd.Alloc(1<<16, rdma.AccessAll)     // what forged Writes and Read Responses aim at
	copy(mr.Bytes(), pattern(1<<16, 4))
	victim := append([]byte(nil), mr.Bytes()...)

	var mu sync.Mutex
	var served []rdma.QP
	go func() {
		for {
			req, err := l.Accept(ctx)
			if err != nil {
				return
			}
			q, _ := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
			_ = q.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(recvMR, 0, 64)}}})
			mu.Lock()
			served = append(served, q)
			mu.Unlock()
			_ = req.Accept(q, nil)
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, q := range served {
			q.Close()
		}
	}()
	addr := trimScheme(l.Addr())
	send := wire.Header{Last: true, Opcode: wire.OpSend, QN: 0, MSN: 1}
	rdmaCause := func(et, code uint8) wire.TermCause {
		return wire.TermCause{Layer: wire.LayerRDMAP, EType: et, Code: code}
	}
	ddpCause := func(et, code uint8) wire.TermCause {
		return wire.TermCause{Layer: wire.LayerDDP, EType: et, Code: code}
	}
	cases := []struct {
		name    string
		frame   func(p *rawPeer) []byte
		cause   wire.TermCause
		withDDP bool
	}{
		{"bad CRC", func(p *rawPeer) []byte {
			b := p.fpdu(send, []byte("hello"))
			b[len(b)-1] ^= 0x40
			return b
		}, wire.TermCause{Layer: wire.LayerLLP, EType: wire.ETypeMPA, Code: wire.CodeMPACRC}, false},
		{"ULPDU shorter than its header", func(p *rawPeer) []byte {
			b := p.fpdu(send, nil)
			binary.BigEndian.PutUint16(b, 10)
			return b
		}, wire.TermCause{Layer: wire.LayerLLP, EType: wire.ETypeMPA, Code: wire.CodeMPALength}, false},
		{"unknown opcode", nil, rdmaCause(wire.ETypeRDMAPRemoteOperation, wire.CodeUnexpectedOpcode), false},
		{"wrong DDP version", nil, ddpCause(wire.ETypeDDPUntagged, wire.CodeDDPUntaggedVersion), false},
		{"wrong RDMAP version", nil, rdmaCause(wire.ETypeRDMAPRemoteOperation, wire.CodeInvalidRDMAPVersion), false},
		{"MSN out of window", func(p *rawPeer) []byte {
			h := send
			h.MSN = 5
			return p.fpdu(h, []byte("late"))
		}, ddpCause(wire.ETypeDDPUntagged, wire.CodeDDPMSNRange), true},
		{"MO not zero", func(p *rawPeer) []byte {
			h := send
			h.MO = 8
			return p.fpdu(h, []byte("middle"))
		}, ddpCause(wire.ETypeDDPUntagged, wire.CodeDDPInvalidMO), true},
		{"queue 3", func(p *rawPeer) []byte {
			b := p.fpdu(send, []byte("q"))
			binary.BigEndian.PutUint32(b[2+wire.OffQN:], 3)
			return refcrc(p, b)
		}, ddpCause(wire.ETypeDDPUntagged, wire.CodeDDPInvalidQN), true},
		{"Write to an unknown STag", func(p *rawPeer) []byte {
			return p.fpdu(wire.Header{Tagged: true, Last: true, Opcode: wire.OpWrite, STag: 0xdead01, TO: mr.Addr()}, []byte("evil"))
		}, rdmaCause(wire.ETypeRDMAPRemoteProtection, wire.CodeInvalidSTag), true},
		{"Write past the region", func(p *rawPeer) []byte {
			return p.fpdu(wire.Header{Tagged: true, Last: true, Opcode: wire.OpWrite, STag: mr.RKey(), TO: mr.Addr() + 1<<16 - 2}, []byte("evil"))
		}, rdmaCause(wire.ETypeRDMAPRemoteProtection, wire.CodeBaseBounds), true},
		{"Read Response nobody asked for", func(p *rawPeer) []byte {
			return p.fpdu(wire.Header{Tagged: true, Last: true, Opcode: wire.OpReadResponse, STag: mr.RKey(), TO: mr.Addr()}, []byte("evil"))
		}, rdmaCause(wire.ETypeRDMAPRemoteOperation, wire.CodeUnexpectedOpcode), true},
		{"Read Request of the wrong length", func(p *rawPeer) []byte {
			return p.fpdu(wire.Header{Last: true, Opcode: wire.OpReadRequest, QN: 1, MSN: 1}, make([]byte, 20))
		}, ddpCause(wire.ETypeDDPUntagged, wire.CodeDDPMSNRange), true},
		{"Send too long for the Recv", func(p *rawPeer) []byte {
			return p.fpdu(send, make([]byte, 65))
		}, ddpCause(wire.ETypeDDPUntagged, wire.CodeDDPTooLong), true},
		{"Immediate Data of 9 bytes", func(p *rawPeer) []byte {
			return p.fpdu(wire.Header{Last: true, Opcode: wire.OpImmediateData, MSN: 1}, make([]byte, 9))
		}, rdmaCause(wire.ETypeRDMAPRemoteOperation, wire.CodeUnspecified), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rp := dialRaw(t, addr, nil)
			var b []byte
			switch c.name {
			case "unknown opcode":
				b = rp.fpdu(send, []byte("x"))
				b[3] = 0x4c
				b = refcrc(rp, b)
			case "wrong DDP version":
				b = rp.fpdu(send, []byte("x"))
				b[2] = 0x42
				b = refcrc(rp, b)
			case "wrong RDMAP version":
				b = rp.fpdu(send, []byte("x"))
				b[3] = 0x83
				b = refcrc(rp, b)
			default:
				b = c.frame(rp)
			}
			rp.write(t, b)
			tm := rp.readTerminate(t)
			rp.conn.Close()
			assert.Equal(t, c.cause, tm.Cause)
			if c.withDDP {
				require.NotEmpty(t, tm.DDPHeader, "offending DDP header copied")
				assert.Equal(t, b[2:2+len(tm.DDPHeader)], tm.DDPHeader)
				assert.True(t, tm.SegLenValid)
			} else {
				assert.Empty(t, tm.DDPHeader)
			}
		})
	}
	// Pure garbage right after the handshake: the connection ends; what
	// the Terminate says depends on the bytes.
	rp := dialRaw(t, addr, nil)
	rp.write(t, []byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n"))
	_, err = io.Copy(io.Discard, rp.conn)
	assert.NoError(t, err, "the provider closes the connection")
	rp.conn.Close()

	// Nothing was written into the region, and the listener still works.
	assert.True(t, bytes.Equal(victim, mr.Bytes()), "a forged Write or Read Response changed memory")
	a, b := newPair(t, pairOpts{preRecv: 1})
	post(t, a.qp, rdma.SendWR{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 8)}})
	assert.Equal(t, rdma.Success, waitWC(t, a.cq).Status)
	assert.Equal(t, rdma.Success, waitWC(t, b.cq).Status)
	// And a well-behaved raw peer is served on the same listener.
	rp = dialRaw(t, addr, []byte("polite"))
	rp.write(t, rp.fpdu(send, []byte("hi")))
	rp.write(t, rp.fpdu(wire.Header{Last: true, Opcode: wire.OpTerminate, QN: 2, MSN: 1}, []byte{0x20, 0x01, 0, 0}))
	_, err = io.Copy(io.Discard, rp.conn)
	assert.NoError(t, err)
	mu.Lock()
	last := served[len(served)-1]
	mu.Unlock()
	waitDone(t, last)
	assert.Equal(t, rdma.RemOpErr, last.Err(), "an LLP Terminate from the peer")
}

// refcrc recomputes the CRC of an FPDU that a test edited.
func refcrc(p *rawPeer, b []byte) []byte {
	n := int(binary.BigEndian.Uint16(b))
	out := make([]byte, len(b))
	m, _ := wire.MarshalFPDU(out, b[2:2+n], p.crc)
	return out[:m]
}

// FuzzReceiver feeds arbitrary bytes, after a valid MPA exchange, to a
// QP's receive path over a real connection. Whatever the bytes, the QP
// neither panics nor hangs: once the peer half-closes it ends in
// StateError, every Recv completes, and no byte lands outside the
// registered regions (the race detector and the Go runtime would object).
func FuzzReceiver(f *testing.F) {
	rp := &rawPeer{crc: true}
	send := wire.Header{Last: true, Opcode: wire.OpSend, MSN: 1}
	f.Add(rp.fpdu(send, []byte("hello")))
	f.Add(append(rp.fpdu(wire.Header{Last: true, Opcode: wire.OpImmediateData, MSN: 1}, []byte{0, 0, 0, 7, 0, 0, 0, 1}),
		rp.fpdu(wire.Header{Last: true, Opcode: wire.OpSend, MSN: 2}, []byte("imm"))...))
	rr := make([]byte, wire.ReadRequestLen)
	(&wire.ReadRequest{SinkSTag: 1, Size: 8, SrcSTag: 0x101}).MarshalTo(rr)
	f.Add(rp.fpdu(wire.Header{Last: true, Opcode: wire.OpReadRequest, QN: 1, MSN: 1}, rr))
	f.Add(rp.fpdu(wire.Header{Tagged: true, Last: true, Opcode: wire.OpWrite, STag: 0x101}, []byte("w")))
	f.Add(rp.fpdu(wire.Header{Last: true, Opcode: wire.OpTerminate, QN: 2, MSN: 1}, []byte{0x12, 0x02, 0xc0, 0}))
	f.Add([]byte{0xff, 0xff, 0x41, 0x43})

	p, err := New()
	require.NoError(f, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := p.Listen(ctx, "127.0.0.1:0")
	require.NoError(f, err)
	defer l.Close()
	pd, _ := p.OpenPD("")
	mr, _ := pd.Alloc(1<<16, rdma.AccessAll)
	addr := trimScheme(l.Addr())
	f.Fuzz(func(t *testing.T, b []byte) {
		cq, _ := pd.CreateCQ(64)
		defer cq.Close()
		q, _ := pd.CreateQP(rdma.QPConfig{SendCQ: cq, RNRRetry: 1, RNRTimeout: time.Millisecond})
		defer q.Close()
		require.NoError(t, q.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(mr, 0, 4096)}}}))
		accepted := make(chan error, 1)
		go func() {
			req, err := l.Accept(ctx)
			if err == nil {
				err = req.Accept(q, nil)
			}
			accepted <- err
		}()
		peer := dialRaw(t, addr, nil)
		require.NoError(t, <-accepted)
		_, _ = peer.conn.Write(b)
		_ = peer.conn.(*net.TCPConn).CloseWrite()
		go func() { _, _ = io.Copy(io.Discard, peer.conn) }()
		waitDone(t, q)
		assert.NotNil(t, q.Err())
		waitWC(t, cq) // the Recv, completed or flushed
		var wc [4]rdma.WC
		n, _ := cq.Poll(wc[:])
		assert.Zero(t, n, "the Recv completed exactly once")
		peer.conn.Close()
	})
}
