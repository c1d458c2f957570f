package nsdevice

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof/nbd"
)

// BenchmarkBridge runs 4 KiB random reads and writes at QD32, and 1 MiB
// reads at QD8, from one NBD connection through the server, the host
// library and a target in this process, over shm and iwarp. allocs/op counts the whole process
// per request (client, bridge, host and target): the bridge's share is
// none in steady state.
func BenchmarkBridge(b *testing.B) {
	for _, tr := range []string{"shm", "iwarp"} {
		for _, op := range []nbd.Command{nbd.CmdRead, nbd.CmdWrite} {
			b.Run(tr+"/"+map[nbd.Command]string{nbd.CmdRead: "read", nbd.CmdWrite: "write"}[op]+"-4KiB-QD32", func(b *testing.B) {
				url := "iwarp://127.0.0.1:0"
				if tr == "shm" {
					url = shmURL()
				}
				addr, _, _, _ := bridgeAt(b, url)
				runQD(b, addr, op, 4096, 32)
			})
		}
		b.Run(tr+"/read-1MiB-QD8", func(b *testing.B) {
			url := "iwarp://127.0.0.1:0"
			if tr == "shm" {
				url = shmURL()
			}
			addr, _, _, _ := bridgeAt(b, url)
			runQD(b, addr, nbd.CmdRead, 1<<20, 8)
		})
	}
}

// runQD keeps qd requests of size bytes in flight on one connection for
// b.N requests.
func runQD(b *testing.B, addr string, op nbd.Command, size, qd int) {
	nc, err := net.Dial("tcp", addr)
	require.NoError(b, err)
	defer nc.Close()
	br := bufio.NewReaderSize(nc, 256<<10)
	bw := bufio.NewWriterSize(nc, 256<<10)
	g := make([]byte, nbd.GreetingSize)
	_, err = io.ReadFull(br, g)
	require.NoError(b, err)
	h, _ := (&nbd.OptionHeader{Option: nbd.OptExportName}).MarshalBinary()
	_, err = nc.Write(append(binary.BigEndian.AppendUint32(nil, nbd.ClientFlagFixedNewstyle|nbd.ClientFlagNoZeroes), h...))
	require.NoError(b, err)
	r := make([]byte, nbd.ExportNameReplySize)
	_, err = io.ReadFull(br, r)
	require.NoError(b, err)
	blocks := binary.BigEndian.Uint64(r) / uint64(size)

	payload := make([]byte, size)
	credits := make(chan struct{}, qd)
	for range qd {
		credits <- struct{}{}
	}
	done := make(chan error, 1)
	go func() {
		hdr := make([]byte, nbd.SimpleReplySize)
		data := make([]byte, size)
		for i := 0; i < b.N; i++ {
			if _, err := io.ReadFull(br, hdr); err != nil {
				done <- err
				return
			}
			if binary.BigEndian.Uint32(hdr[4:]) != 0 {
				done <- nbd.Errno(binary.BigEndian.Uint32(hdr[4:]))
				return
			}
			if op == nbd.CmdRead {
				if _, err := io.ReadFull(br, data); err != nil {
					done <- err
					return
				}
			}
			credits <- struct{}{}
		}
		done <- nil
	}()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	var req nbd.Request
	var rb [nbd.RequestSize]byte
	x := uint64(88172645463325252)
	for i := 0; i < b.N; i++ {
		<-credits
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		req = nbd.Request{Type: op, Cookie: uint64(i), Offset: (x % blocks) * uint64(size), Length: uint32(size)}
		req.MarshalTo(rb[:])
		bw.Write(rb[:])
		if op == nbd.CmdWrite {
			bw.Write(payload)
		}
		if len(credits) == 0 {
			bw.Flush()
		}
	}
	bw.Flush()
	require.NoError(b, <-done)
	// CPU time of the whole process (client, bridge, host, target) per
	// request: steadier than wall time on a shared machine, though the
	// shm provider's polling adds to it.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
