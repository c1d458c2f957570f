package iwarp

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

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

// BenchmarkR2Ratio measures PERFORMANCE.md R2 on a shared machine: it
// alternates blocks of 16 MiB over a raw Go TCP stream (1 MiB writes),
// 1 MiB RDMA Writes and 1 MiB RDMA Reads (4 outstanding) over one iwarp
// connection (with and without CRC), so that load from elsewhere hits all three alike,
// and reports each one's MB/s and the ratios write/tcp and read/tcp.
func BenchmarkR2Ratio(b *testing.B) {
	b.Run("crc", func(b *testing.B) { benchR2(b, true) })
	b.Run("nocrc", func(b *testing.B) { benchR2(b, false) })
}

func benchR2(b *testing.B, crc bool) {
	const block = 16
	// Raw TCP pair; the reader acknowledges each block with one byte.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, benchSize)
		for {
			for i := 0; i < block; i++ {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	}()
	tc, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(b, err)
	defer tc.Close()
	tbuf := make([]byte, benchSize)

	const depth = 4
	a, peer := newPair(b, pairOpts{prov: mustProv(b, WithCRC(crc)), mrSize: depth * benchSize})
	ctx := context.Background()
	wc := make([]rdma.WC, depth)
	run := func(op rdma.Opcode) {
		posted, done := 0, 0
		for done < block {
			for posted < block && posted-done < depth {
				i := posted % depth
				if err := a.qp.PostSend([]rdma.SendWR{{Op: op, Flags: rdma.Signaled,
					SGL:        []rdma.SGE{rdma.SGEOf(a.mr, i*benchSize, benchSize)},
					RemoteAddr: peer.mr.Addr() + uint64(i*benchSize), RKey: peer.mr.RKey()}}); err != nil {
					b.Fatal(err)
				}
				posted++
			}
			n, err := a.cq.Wait(ctx, wc)
			if err != nil {
				b.Fatal(err)
			}
			done += n
		}
		if op == rdma.OpWrite { // the data has landed when a Read behind it returns
			if err := a.qp.PostSend([]rdma.SendWR{{Op: rdma.OpRead, Flags: rdma.Signaled,
				SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, 1)}, RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}}); err != nil {
				b.Fatal(err)
			}
			if _, err := a.cq.Wait(ctx, wc[:1]); err != nil {
				b.Fatal(err)
			}
		}
	}
	var tTCP, tWrite, tRead time.Duration
	var cTCP, cWrite, cRead time.Duration // process CPU time (user+system)
	b.SetBytes(3 * block * benchSize)
	b.ResetTimer()
	tcpBlock := func() {
		for k := 0; k < block; k++ {
			if _, err := tc.Write(tbuf); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := io.ReadFull(tc, tbuf[:1]); err != nil {
			b.Fatal(err)
		}
	}
	phases := []struct {
		run  func()
		t, c *time.Duration
	}{
		{tcpBlock, &tTCP, &cTCP},
		{func() { run(rdma.OpWrite) }, &tWrite, &cWrite},
		{func() { run(rdma.OpRead) }, &tRead, &cRead},
	}
	orders := [][]int{{0, 1, 2}, {0, 2, 1}}
	for i := 0; i < b.N; i++ {
		// Alternate the order: on the shared build machines a Write block
		// that follows an idle spell of its connection (the TCP block, or
		// even a 20 ms sleep) runs markedly slower than one right after the
		// Read block, so each iwarp phase follows the TCP one half the
		// time. BenchmarkLoopback1MiB measures the steady streams.
		for _, k := range orders[i%len(orders)] {
			ph := phases[k]
			c0, t0 := cpuTime(), time.Now()
			ph.run()
			*ph.t += time.Since(t0)
			*ph.c += cpuTime() - c0
		}
	}
	mbps := func(d time.Duration) float64 { return float64(b.N*block*benchSize) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(tTCP), "tcp-MB/s")
	b.ReportMetric(mbps(tWrite), "write-MB/s")
	b.ReportMetric(mbps(tRead), "read-MB/s")
	b.ReportMetric(tTCP.Seconds()/tWrite.Seconds(), "write/tcp")
	b.ReportMetric(tTCP.Seconds()/tRead.Seconds(), "read/tcp")
	// CPU time per MiB does not depend on what else runs on the machine:
	// it shows what each path costs.
	perMiB := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N*block) }
	b.ReportMetric(perMiB(cTCP), "tcp-cpu-us/MiB")
	b.ReportMetric(perMiB(cWrite), "write-cpu-us/MiB")
	b.ReportMetric(perMiB(cRead), "read-cpu-us/MiB")
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPingPong4KiB is a 4 KiB Send answered by a 4 KiB Send, next to
// the same exchange over a raw TCP connection (TCP_NODELAY, Go's
// default): the round-trip latency the provider adds (R4's ingredient).
func BenchmarkPingPong4KiB(b *testing.B) {
	const size = 4096
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(b, err)
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, size)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(b, err)
		defer c.Close()
		buf := make([]byte, size)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("iwarp", func(b *testing.B) {
		a, peer := newPair(b, pairOpts{})
		ctx := context.Background()
		wc := make([]rdma.WC, 2)
		arecv := []rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 8192, size)}}}
		precv := []rdma.RecvWR{{ID: 2, SGL: []rdma.SGE{rdma.SGEOf(peer.mr, 8192, size)}}}
		asend := []rdma.SendWR{{ID: 3, Op: rdma.OpSend, SGL: []rdma.SGE{rdma.SGEOf(a.mr, 0, size)}}}
		psend := []rdma.SendWR{{ID: 4, Op: rdma.OpSend, SGL: []rdma.SGE{rdma.SGEOf(peer.mr, 0, size)}}}
		done := make(chan struct{})
		defer close(done)
		require.NoError(b, peer.qp.PostRecv(precv))
		go func() { // the echoing side
			for {
				select {
				case <-done:
					return
				default:
				}
				n, err := peer.cq.Wait(ctx, wc[1:])
				if err != nil || n == 0 || wc[1].Status != rdma.Success {
					return
				}
				if peer.qp.PostRecv(precv) != nil || peer.qp.PostSend(psend) != nil {
					return
				}
			}
		}()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := a.qp.PostRecv(arecv); err != nil {
				b.Fatal(err)
			}
			if err := a.qp.PostSend(asend); err != nil {
				b.Fatal(err)
			}
			if _, err := a.cq.Wait(ctx, wc[:1]); err != nil || wc[0].Status != rdma.Success {
				b.Fatal(err, wc[0].Status)
			}
		}
	})
}
