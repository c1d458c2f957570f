package iwarp

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

const benchSize = 1 << 20

// BenchmarkLoopback1MiB compares 1 MiB RDMA Writes and Reads over one
// iwarp connection with the same-run baseline of a raw Go TCP stream of
// 1 MiB writes over loopback (shared/PERFORMANCE.md R2). Read the ratio of
// the MB/s columns.
func BenchmarkLoopback1MiB(b *testing.B) {
	b.Run("tcp", benchRawTCP)
	for _, crc := range []bool{true, false} {
		name := "crc"
		if !crc {
			name = "nocrc"
		}
		b.Run("write-"+name, func(b *testing.B) { benchRDMA(b, rdma.OpWrite, crc) })
		b.Run("read-"+name, func(b *testing.B) { benchRDMA(b, rdma.OpRead, crc) })
	}
}

func benchRawTCP(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, benchSize)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				done <- nil
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(b, err)
	buf := make([]byte, benchSize)
	b.SetBytes(benchSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	require.NoError(b, <-done)
}

func benchRDMA(b *testing.B, op rdma.Opcode, crc bool) {
	p, err := New(WithCRC(crc))
	require.NoError(b, err)
	const depth = 4
	a, peer := newPair(b, pairOpts{prov: p, mrSize: depth * benchSize, preRecv: 1})
	wrs := make([]rdma.SendWR, depth)
	for i := range wrs {
		wrs[i] = rdma.SendWR{ID: uint64(i), Op: op, Flags: rdma.Signaled,
			SGL:        []rdma.SGE{rdma.SGEOf(a.mr, i*benchSize, benchSize)},
			RemoteAddr: peer.mr.Addr() + uint64(i*benchSize), RKey: peer.mr.RKey()}
	}
	wc := make([]rdma.WC, depth)
	ctx := context.Background()
	b.SetBytes(benchSize)
	b.ReportAllocs()
	b.ResetTimer()
	posted, completed := 0, 0
	for completed < b.N {
		for posted < b.N && posted-completed < depth {
			if err := a.qp.PostSend(wrs[posted%depth : posted%depth+1]); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n, err := a.cq.Wait(ctx, wc)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range wc[:n] {
			if w.Status != rdma.Success {
				b.Fatal(w.Status)
			}
		}
		completed += n
	}
	if op == rdma.OpWrite {
		// Writes complete when handed to TCP: wait until the last has
		// landed, with a Send that follows them in order.
		require.NoError(b, a.qp.PostSend([]rdma.SendWR{{ID: 99, Op: rdma.OpSend, Flags: rdma.Signaled}}))
		waitWC(b, a.cq)
		waitWC(b, peer.cq)
	}
}
