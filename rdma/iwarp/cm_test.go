package iwarp

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

// FuzzCMPrivateData feeds arbitrary bytes to the MPA exchange reader that
// carries the CM private data. Whatever it accepts holds at most 512
// bytes of private data, owns its copy, consumed exactly the frame, and
// survives a write/read round trip unchanged.
func FuzzCMPrivateData(f *testing.F) {
	for _, fr := range []wire.MPAFrame{
		{MPAHeader: wire.MPAHeader{CRC: true, Rev: 1}, Private: []byte("nvme connect")},
		{MPAHeader: wire.MPAHeader{Reply: true, Reject: true, Rev: 1}, Private: bytes.Repeat([]byte{9}, 512)},
		{MPAHeader: wire.MPAHeader{Reply: true, Rev: 1}},
	} {
		var b bytes.Buffer
		_ = writeMPA(&b, &fr)
		f.Add(append(b.Bytes(), 0x00, 0x16, 0x41)) // and the start of an FPDU
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		r := bytes.NewReader(in)
		fr, err := readMPA(r)
		if err != nil {
			return
		}
		if len(fr.Private) > rdma.MaxPrivateData || int(fr.PDLength) != len(fr.Private) {
			t.Fatalf("private data of %d bytes (PD_Length %d)", len(fr.Private), fr.PDLength)
		}
		if used := len(in) - r.Len(); used != wire.MPAHeaderLen+len(fr.Private) {
			t.Fatalf("consumed %d bytes for a %d-byte frame", used, wire.MPAHeaderLen+len(fr.Private))
		}
		if len(fr.Private) > 0 {
			in[wire.MPAHeaderLen] ^= 0xff
			if fr.Private[0] == in[wire.MPAHeaderLen] {
				t.Fatal("private data aliases the input")
			}
		}
		var w bytes.Buffer
		if err := writeMPA(&w, &fr); err != nil {
			t.Fatalf("write back: %v", err)
		}
		g, err := readMPA(&w)
		if err != nil || g.MPAHeader != fr.MPAHeader || !bytes.Equal(g.Private, fr.Private) {
			t.Fatalf("round trip: %+v != %+v (%v)", g, fr, err)
		}
	})
}

func TestListenerSurvivesSilentAndBadClients(t *testing.T) {
	p := mustProv(t, WithHandshakeTimeout(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := p.Listen(ctx, "127.0.0.1:0")
	require.NoError(t, err)
	addr := trimScheme(l.Addr())

	// A client that never speaks does not hold up the others.
	silent, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer silent.Close()
	// One that sends a Reply where a Request belongs is dropped.
	bad, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer bad.Close()
	require.NoError(t, writeMPA(bad, &wire.MPAFrame{MPAHeader: wire.MPAHeader{Reply: true, Rev: 1}}))
	var one [1]byte
	_, err = bad.Read(one[:])
	assert.Error(t, err, "the listener hangs up on a Reply")
	// One that wants markers is refused with a reject Reply.
	mk, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer mk.Close()
	require.NoError(t, writeMPA(mk, &wire.MPAFrame{MPAHeader: wire.MPAHeader{Markers: true, Rev: 1}}))
	rep, err := readMPA(mk)
	require.NoError(t, err)
	assert.True(t, rep.Reply && rep.Reject)

	pd, _ := p.OpenPD("")
	cq, _ := pd.CreateCQ(8)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			return
		}
		q, _ := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
		t.Cleanup(func() { q.Close() })
		_ = req.Accept(q, []byte("ok"))
		assert.ErrorIs(t, req.Reject(nil), ErrAnswered)
	}()
	q, reply, err := rdma.Dial(ctx, l.Addr(), pd, rdma.QPConfig{SendCQ: cq}, nil)
	require.NoError(t, err)
	defer q.Close()
	assert.Equal(t, "ok", string(reply))

	// Close does not wait for the silent client's handshake to time out.
	require.NoError(t, l.Close())
	_, err = l.Accept(ctx)
	assert.ErrorIs(t, err, rdma.ErrClosed)
}

func TestConnectContextCancel(t *testing.T) {
	// A listener that accepts TCP but never answers the MPA Request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			var b [64]byte
			for {
				if _, err := c.Read(b[:]); err != nil {
					return
				}
			}
		}
	}()
	p := mustProv(t)
	pd, _ := p.OpenPD("")
	cq, _ := pd.CreateCQ(8)
	q, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
	require.NoError(t, err)
	defer q.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	_, err = q.Connect(ctx, ln.Addr().String(), nil)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, rdma.StateInit, q.State())
}
