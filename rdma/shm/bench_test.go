package shm

import (
	"context"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/rdma"
)

// BenchmarkOneSided measures 1 MiB RDMA Write and Read, one stream,
// against a Go copy of 1 MiB measured in the same run (PERFORMANCE.md R1:
// Write and Read should each reach 70 % of copy).
func BenchmarkOneSided(b *testing.B) {
	const n = 1 << 20
	b.Run("copy-baseline", func(b *testing.B) {
		src, dst := make([]byte, n), make([]byte, n)
		b.SetBytes(n)
		b.ReportAllocs()
		for b.Loop() {
			copy(dst, src)
		}
	})
	for _, op := range []rdma.Opcode{rdma.OpWrite, rdma.OpRead} {
		b.Run(op.String(), func(b *testing.B) {
			p := newPair(b, pairOpts{})
			remote := alloc(b, p.pdB, n, rdma.AccessAll)
			local := alloc(b, p.pdA, n, rdma.AccessAll)
			wrs := []rdma.SendWR{{Op: op, Flags: rdma.Signaled, SGL: sge(local, 0, n), RemoteAddr: remote.Addr(), RKey: remote.RKey()}}
			wc := make([]rdma.WC, 1)
			post := func() {
				if err := p.a.PostSend(wrs); err != nil {
					b.Fatal(err)
				}
				for k := 0; k == 0; {
					k, _ = p.cqA.Poll(wc)
				}
				if wc[0].Status != rdma.Success {
					b.Fatal(wc[0].Status)
				}
			}
			post() // maps the peer's region and touches every page
			b.SetBytes(n)
			b.ReportAllocs()
			for b.Loop() {
				post()
			}
		})
	}
}

// BenchmarkPingPong measures the round trip of a small Send answered by a
// Send, with the provider's adaptive polling and CQ.Wait on both sides.
func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(sizeName(size), func(b *testing.B) {
			p := newPair(b, pairOpts{})
			mrA := alloc(b, p.pdA, 2*size, rdma.AccessLocalWrite)
			mrB := alloc(b, p.pdB, size, rdma.AccessLocalWrite)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			recvB := []rdma.RecvWR{{SGL: sge(mrB, 0, size)}}
			sendB := []rdma.SendWR{{Op: rdma.OpSend, SGL: sge(mrB, 0, size)}}
			for i := 0; i < 16; i++ {
				p.b.PostRecv(recvB)
			}
			go func() {
				wc := make([]rdma.WC, 8)
				for {
					k, err := p.cqB.Wait(ctx, wc)
					if err != nil {
						return
					}
					for _, w := range wc[:k] {
						if w.Status != rdma.Success {
							return
						}
						p.b.PostRecv(recvB)
						p.b.PostSend(sendB)
					}
				}
			}()
			recvA := []rdma.RecvWR{{SGL: sge(mrA, size, size)}}
			sendA := []rdma.SendWR{{Op: rdma.OpSend, SGL: sge(mrA, 0, size)}}
			wc := make([]rdma.WC, 8)
			b.ReportAllocs()
			for b.Loop() {
				p.a.PostRecv(recvA)
				p.a.PostSend(sendA)
				for got := false; !got; {
					k, err := p.cqA.Wait(ctx, wc)
					if err != nil {
						b.Fatal(err)
					}
					for _, w := range wc[:k] {
						if w.Status != rdma.Success {
							b.Fatal(w.Status)
						}
						got = got || w.Opcode == rdma.WCRecv
					}
				}
			}
		})
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return itoa(n/1024) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// BenchmarkDoorbell compares the two doorbells considered, as a ping-pong
// between two goroutines that always sleep: a futex on a shared word (the
// one used) and an eventfd read through the Go netpoller.
func BenchmarkDoorbell(b *testing.B) {
	b.Run("futex", func(b *testing.B) {
		fd, mem, err := newMemfd("bench", 4096)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		defer unmap(mem)
		ping := (*atomic.Uint32)(unsafe.Pointer(&mem[0]))
		pong := (*atomic.Uint32)(unsafe.Pointer(&mem[64]))
		var turnPing, turnPong atomic.Uint32
		// wait sleeps on w until turn is set, then clears it.
		wait := func(w, turn *atomic.Uint32) {
			for {
				w.Store(1)
				if turn.Swap(0) == 1 {
					w.Store(0)
					return
				}
				sleep(w, -1)
			}
		}
		post := func(w, turn *atomic.Uint32) {
			turn.Store(1)
			ring(w)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				wait(ping, &turnPing)
				if turnPong.Load() == 2 {
					return
				}
				post(pong, &turnPong)
			}
		}()
		for b.Loop() {
			post(ping, &turnPing)
			wait(pong, &turnPong)
		}
		turnPong.Store(2)
		post(ping, &turnPing)
		<-done
	})
	b.Run("eventfd", func(b *testing.B) {
		mk := func() *eventFD {
			fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
			if err != nil {
				b.Fatal(err)
			}
			return newEventFD(fd)
		}
		ping, pong := mk(), mk()
		defer ping.Close()
		defer pong.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if !ping.wait() {
					return
				}
				pong.post()
			}
		}()
		for b.Loop() {
			ping.post()
			pong.wait()
		}
		ping.Close()
		<-done
	})
}
