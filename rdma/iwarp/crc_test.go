package iwarp

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
	"github.com/capsule-storage/capsule/rdma/iwarp/internal/wire"
)

// TestCRCMatchesStdlib runs full-size segments, which take the folding
// CRC path of internal/crc32c, against a peer that frames and checks
// with hash/crc32 (wire.MarshalFPDU, wire.ParseFPDU): a 1 MiB RDMA Write
// in, then a Read of the same megabyte out.
func TestCRCMatchesStdlib(t *testing.T) {
	const size = 1 << 20
	p := mustProv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := p.Listen(ctx, "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	pd, _ := p.OpenPD("")
	cq, _ := pd.CreateCQ(16)
	mr, err := pd.Alloc(size, rdma.AccessAll)
	require.NoError(t, err)
	accepted := make(chan rdma.QP, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			close(accepted)
			return
		}
		q, _ := pd.CreateQP(rdma.QPConfig{SendCQ: cq})
		_ = req.Accept(q, nil)
		accepted <- q
	}()
	rp := dialRaw(t, trimScheme(l.Addr()), nil)
	require.True(t, rp.crc, "CRC is negotiated by default")
	q := <-accepted
	require.NotNil(t, q)
	defer q.Close()

	data := pattern(size, 9)
	var stream []byte
	for off := 0; off < size; off += DefaultMaxSegment {
		n := min(DefaultMaxSegment, size-off)
		h := wire.Header{Tagged: true, Last: off+n == size, Opcode: wire.OpWrite, STag: mr.RKey(), TO: mr.Addr() + uint64(off)}
		stream = append(stream, rp.fpdu(h, data[off:off+n])...)
	}
	var body [wire.ReadRequestLen]byte
	rr := wire.ReadRequest{SinkSTag: 77, SinkTO: 0, Size: size, SrcSTag: mr.RKey(), SrcTO: mr.Addr()}
	rr.MarshalTo(body[:])
	stream = append(stream, rp.fpdu(wire.Header{Last: true, Opcode: wire.OpReadRequest, QN: wire.QNReadRequest, MSN: 1}, body[:])...)
	go func() { _, _ = rp.conn.Write(stream) }()

	got := make([]byte, 0, size)
	for len(got) < size {
		var lb [2]byte
		_, err := io.ReadFull(rp.conn, lb[:])
		require.NoError(t, err)
		n := int(binary.BigEndian.Uint16(lb[:]))
		rest := make([]byte, wire.FPDULen(n, true)-2)
		_, err = io.ReadFull(rp.conn, rest)
		require.NoError(t, err)
		u, _, err := wire.ParseFPDU(append(lb[:], rest...), true)
		require.NoError(t, err, "a Read Response FPDU checked by hash/crc32")
		var h wire.Header
		hl, err := h.Unmarshal(u)
		require.NoError(t, err)
		require.Equal(t, wire.OpReadResponse, h.Opcode)
		require.Equal(t, uint64(len(got)), h.TO)
		got = append(got, u[hl:]...)
	}
	require.True(t, bytes.Equal(data, got), "the Write was placed and read back intact")
	require.Equal(t, rdma.StateRTS, q.State())
}
