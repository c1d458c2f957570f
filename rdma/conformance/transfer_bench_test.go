package conformance

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-storage/capsule/rdma"
)

// The transfer benchmarks compare the providers with their same-run
// baselines (shared/PERFORMANCE.md): shm against a Go copy (R1), iwarp
// against one loopback TCP stream (R2). cmd/benchtable prints the
// ratios from their output.

// benchSizes are the transfer sizes of BenchmarkTransfer.
var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

// benchProviders are the providers of the benchmarks and how to reach them.
var benchProviders = []struct {
	scheme string
	env    Env
}{
	{"shm", Env{ListenURL: benchShmURL}},
	{"iwarp", Env{ListenURL: func() string { return "iwarp://127.0.0.1:0" }, CompleteOnHandoff: true}},
}

var benchShmNames atomic.Uint64

func benchShmURL() string {
	return fmt.Sprintf("shm://conformance-bench-%d-%d", os.Getpid(), benchShmNames.Add(1))
}

func BenchmarkTransfer(b *testing.B) {
	b.Run("memcpy", func(b *testing.B) {
		for _, s := range benchSizes {
			b.Run(s.name, func(b *testing.B) { benchMemcpy(b, s.n) })
		}
	})
	b.Run("tcp", func(b *testing.B) {
		for _, s := range benchSizes {
			b.Run(s.name, func(b *testing.B) { benchTCPStream(b, s.n) })
		}
	})
	for _, p := range benchProviders {
		for _, op := range []rdma.Opcode{rdma.OpWrite, rdma.OpRead} {
			name := p.scheme + "-write"
			if op == rdma.OpRead {
				name = p.scheme + "-read"
			}
			b.Run(name, func(b *testing.B) {
				for _, s := range benchSizes {
					b.Run(s.name, func(b *testing.B) { benchOneSided(b, p.scheme, p.env, op, s.n) })
				}
			})
		}
	}
}

// processCPU is the process's user plus system CPU time (getrusage
// RUSAGE_SELF). Both ends of every transfer benchmark run in this
// process, so its growth over a timed loop is what the transfer cost,
// whatever else the machine is doing.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter reports the process CPU time a timed loop spent per MiB moved
// as the "cpu-ns/MiB" metric: a figure that, unlike MB/s, hardly moves
// when other work shares the cores.
type cpuMeter struct{ start time.Duration }

func startCPU() cpuMeter { return cpuMeter{start: processCPU()} }

// report records the metric for ops transfers of n bytes each.
func (m cpuMeter) report(b *testing.B, ops, n int) {
	if ops <= 0 {
		return
	}
	used := processCPU() - m.start
	b.ReportMetric(float64(used.Nanoseconds())/(float64(ops)*float64(n)/(1<<20)), "cpu-ns/MiB")
}

// benchMemcpy: Go copies of n bytes over the same memory a provider's
// transfer of that size touches: benchDepth(n) source and destination
// slots of n bytes, taken in turn, as benchOneSided keeps that many WRs
// in flight, each with its own slots. With one pair of buffers the
// baseline would run from a cache the provider's working set does not
// fit in: on a CPU with 2 MiB of L2 per core, copying one 1 MiB buffer
// over and over ran at 33.8 GB/s and the 4 x 1 MiB slots at about 14.
func benchMemcpy(b *testing.B, n int) {
	depth := benchDepth(n)
	src, dst := pattern(n*depth, 1), make([]byte, n*depth)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	ops := 0
	cpu := startCPU()
	for b.Loop() {
		i := (ops % depth) * n
		copy(dst[i:i+n], src[i:i+n])
		ops++
	}
	cpu.report(b, ops, n)
}

// tcpPair returns both ends of a loopback TCP connection, closed at cleanup.
func tcpPair(b *testing.B) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	server, ok := <-accepted
	if !ok {
		client.Close()
		b.Fatal("accept failed")
	}
	b.Cleanup(func() {
		client.Close()
		server.Close()
	})
	return client, server
}

// benchTCPStream: one loopback TCP stream, written n bytes at a time and
// drained by a reader goroutine with a 1 MiB buffer. The clock stops when
// the reader has every byte.
func benchTCPStream(b *testing.B, n int) {
	client, server := tcpPair(b)
	total := int64(b.N) * int64(n)
	drained := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<20)
		for got := int64(0); got < total; {
			k, err := server.Read(buf)
			got += int64(k)
			if err != nil {
				drained <- err
				return
			}
		}
		drained <- nil
	}()
	buf := pattern(n, 1)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	for range b.N {
		if _, err := client.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-drained; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu.report(b, b.N, n)
}

// benchDepth is the number of WRs a transfer benchmark keeps in flight:
// enough to keep the stream busy, 4 MiB at most, and between 4 and 16.
func benchDepth(n int) int {
	return min(16, max(4, (4<<20)/n))
}

// benchPair connects a pair of the provider for a benchmark, or skips b
// when the provider is not linked in.
func benchPair(b *testing.B, scheme string, env Env) *pair {
	requireScheme(b, scheme)
	return setup(b, env, 256)
}

// benchOneSided: RDMA Writes or Reads of n bytes on one QP, benchDepth(n)
// in flight, each signaled, completions taken in batches. Each WR in
// flight has its own slot on both sides. A Write run ends with a Read,
// so the clock stops only when the last Write's bytes are in place.
func benchOneSided(b *testing.B, scheme string, env Env, op rdma.Opcode, n int) {
	depth := benchDepth(n)
	p := benchPair(b, scheme, env)
	local := p.allocA(n*depth, rdma.AccessLocalWrite, 1)
	remote := p.allocB(n*depth, rdma.AccessAll, 2)
	p.connect(pairOptions{cfgA: rdma.QPConfig{MaxSendWR: 2 * depth}})
	wrs := make([]rdma.SendWR, depth+1)
	for i := range depth {
		wrs[i] = rdma.SendWR{ID: uint64(i), Op: op, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(local, i*n, n)},
			RemoteAddr: remote.Addr() + uint64(i*n), RKey: remote.RKey()}
	}
	wrs[depth] = rdma.SendWR{ID: uint64(depth), Op: rdma.OpRead, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(local, 0, 1)},
		RemoteAddr: remote.Addr(), RKey: remote.RKey()}
	wc := make([]rdma.WC, depth)
	ctx := context.Background()
	inflight := 0
	reap := func() {
		k, err := p.cqA.Wait(ctx, wc)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range wc[:k] {
			if w.Status != rdma.Success {
				b.Fatalf("completion %+v", w)
			}
		}
		inflight -= k
	}

	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	for i := range b.N {
		if inflight == depth {
			reap()
		}
		// Completions come in posting order, so slot i%depth is free.
		if err := p.a.PostSend(wrs[i%depth : i%depth+1]); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for inflight > 0 {
		reap()
	}
	if op == rdma.OpWrite {
		if err := p.a.PostSend(wrs[depth:]); err != nil {
			b.Fatal(err)
		}
		inflight++
		reap()
	}
	b.StopTimer()
	cpu.report(b, b.N, n)
}

func BenchmarkPingPong(b *testing.B) {
	const n = 64
	b.Run("tcp", func(b *testing.B) {
		b.Run("64B", func(b *testing.B) { benchTCPPingPong(b, n) })
	})
	for _, scheme := range []string{"iwarp", "shm"} {
		for _, p := range benchProviders {
			if p.scheme == scheme {
				b.Run(scheme, func(b *testing.B) {
					b.Run("64B", func(b *testing.B) { benchRDMAPingPong(b, p.scheme, p.env, n) })
				})
			}
		}
	}
}

// benchTCPPingPong: n bytes each way over loopback TCP (TCP_NODELAY, Go's
// default), one round trip per op.
func benchTCPPingPong(b *testing.B, n int) {
	client, server := tcpPair(b)
	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		buf := make([]byte, n)
		for {
			if _, err := io.ReadFull(server, buf); err != nil {
				return
			}
			if _, err := server.Write(buf); err != nil {
				return
			}
		}
	}()
	b.Cleanup(func() {
		client.Close()
		<-echoed
	})
	buf := pattern(n, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := client.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			b.Fatal(err)
		}
	}
}

const (
	// pingRecvs is the number of receives each side of a ping-pong keeps
	// posted.
	pingRecvs = 4
	// pingSignalEvery: every so many Sends is signaled, so that a
	// provider that frees send queue slots only on a polled completion
	// (as hardware does) never fills its queue.
	pingSignalEvery = 8
)

// benchRDMAPingPong: an n-byte inline Send each way, one round trip per
// op, every pingSignalEvery-th Send signaled. The passive side echoes
// every receive from its own goroutine.
func benchRDMAPingPong(b *testing.B, scheme string, env Env, n int) {
	p := benchPair(b, scheme, env)
	bufA := p.allocA(n*(pingRecvs+1), rdma.AccessLocalWrite, 1)
	bufB := p.allocB(n*(pingRecvs+1), rdma.AccessLocalWrite, 2)
	recvs := func(buf rdma.MR) []rdma.RecvWR {
		wrs := make([]rdma.RecvWR, pingRecvs)
		for i := range wrs {
			wrs[i] = rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{rdma.SGEOf(buf, (i+1)*n, n)}}
		}
		return wrs
	}
	recvA, recvB := recvs(bufA), recvs(bufB)
	cfg := rdma.QPConfig{MaxSendWR: 2 * pingSignalEvery, MaxRecvWR: 16}
	p.connect(pairOptions{cfgA: cfg, cfgB: cfg,
		primeA: func(qp rdma.QP) error { return qp.PostRecv(recvA) },
		primeB: func(qp rdma.QP) error { return qp.PostRecv(recvB) }})
	sendA := []rdma.SendWR{{ID: 100, Op: rdma.OpSend, Flags: rdma.Inline, SGL: []rdma.SGE{rdma.SGEOf(bufA, 0, n)}}}
	sendB := []rdma.SendWR{{ID: 100, Op: rdma.OpSend, Flags: rdma.Inline, SGL: []rdma.SGE{rdma.SGEOf(bufB, 0, n)}}}

	ctx, cancel := context.WithCancel(context.Background())
	echoed := make(chan error, 1)
	go func() {
		defer cancel() // ends the active side's wait if the echo fails
		wc := make([]rdma.WC, 8)
		sent := 0
		for {
			k, err := p.cqB.Wait(ctx, wc)
			if err != nil {
				echoed <- nil
				return
			}
			for _, w := range wc[:k] {
				switch {
				case w.Status != rdma.Success:
					echoed <- fmt.Errorf("echo side: %+v", w)
					return
				case w.Opcode == rdma.WCRecv:
					if err := p.b.PostRecv(recvB[w.ID : w.ID+1]); err != nil {
						echoed <- err
						return
					}
					sent++
					sendB[0].Flags = pingFlags(sent)
					if err := p.b.PostSend(sendB); err != nil {
						echoed <- err
						return
					}
				}
			}
		}
	}()
	b.Cleanup(func() {
		cancel()
		if err := <-echoed; err != nil {
			b.Error(err)
		}
	})

	wc := make([]rdma.WC, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		sendA[0].Flags = pingFlags(i + 1)
		if err := p.a.PostSend(sendA); err != nil {
			b.Fatal(err)
		}
		for got := false; !got; {
			k, err := p.cqA.Wait(ctx, wc)
			if err != nil {
				b.Fatal(err)
			}
			for _, w := range wc[:k] {
				if w.Status != rdma.Success {
					b.Fatalf("completion %+v", w)
				}
				if w.Opcode == rdma.WCRecv {
					if err := p.a.PostRecv(recvA[w.ID : w.ID+1]); err != nil {
						b.Fatal(err)
					}
					got = true
				}
			}
		}
	}
	b.StopTimer()
}

// pingFlags are the flags of the n-th Send (from 1) of a ping-pong side.
func pingFlags(n int) rdma.SendFlags {
	if n%pingSignalEvery == 0 {
		return rdma.Inline | rdma.Signaled
	}
	return rdma.Inline
}
