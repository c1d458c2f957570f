package shm

import (
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cross-process doorbell ping-pong: the peer process answers every ring
// of the ping doorbell with a ring of the pong doorbell.
const doorbellItersEnv = "CAPSULE_SHM_TEST_DOORBELL_ITERS"

// runDoorbellPeer is the peer's side; fd 3 is the shared memfd (futex) or
// fds 3 and 4 are the ping and pong eventfds.
func runDoorbellPeer(kind string) error {
	n, err := strconv.Atoi(os.Getenv(doorbellItersEnv))
	if err != nil {
		return err
	}
	switch kind {
	case "doorbell-futex":
		mem, err := unix.Mmap(3, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		ping, pong, turnPing, turnPong := futexWords(mem)
		for i := 0; i < n; i++ {
			futexPingWait(ping, turnPing)
			futexPingPost(pong, turnPong)
		}
	case "doorbell-eventfd":
		ping, pong := newEventFD(3), newEventFD(4)
		for i := 0; i < n; i++ {
			ping.wait()
			pong.post()
		}
	}
	return nil
}

func futexWords(mem []byte) (ping, pong, turnPing, turnPong *atomic.Uint32) {
	w := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }
	return w(0), w(64), w(128), w(192)
}

func futexPingWait(w, turn *atomic.Uint32) {
	for {
		w.Store(1)
		if turn.Swap(0) == 1 {
			w.Store(0)
			return
		}
		sleep(w, -1)
	}
}

func futexPingPost(w, turn *atomic.Uint32) {
	turn.Store(1)
	ring(w)
}

// BenchmarkDoorbellProcess is BenchmarkDoorbell between two processes,
// which is how the provider is used.
func BenchmarkDoorbellProcess(b *testing.B) {
	start := func(b *testing.B, kind string, files ...*os.File) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), peerEnv+"="+kind, doorbellItersEnv+"="+strconv.Itoa(b.N))
		cmd.ExtraFiles = files
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		return cmd
	}
	b.Run("futex", func(b *testing.B) {
		fd, mem, err := newMemfd("bench", 4096)
		if err != nil {
			b.Fatal(err)
		}
		defer unmap(mem)
		f := os.NewFile(uintptr(fd), "memfd")
		defer f.Close()
		cmd := start(b, "doorbell-futex", f)
		ping, pong, turnPing, turnPong := futexWords(mem)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			futexPingPost(ping, turnPing)
			futexPingWait(pong, turnPong)
		}
		b.StopTimer()
		cmd.Wait()
	})
	b.Run("eventfd", func(b *testing.B) {
		mk := func() (*eventFD, *os.File) {
			fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
			if err != nil {
				b.Fatal(err)
			}
			d, err := unix.Dup(fd)
			if err != nil {
				b.Fatal(err)
			}
			return newEventFD(fd), os.NewFile(uintptr(d), "eventfd")
		}
		ping, pingF := mk()
		pong, pongF := mk()
		defer ping.Close()
		defer pong.Close()
		cmd := start(b, "doorbell-eventfd", pingF, pongF)
		pingF.Close()
		pongF.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ping.post()
			pong.wait()
		}
		b.StopTimer()
		cmd.Wait()
	})
}
