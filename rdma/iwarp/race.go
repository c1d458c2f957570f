//go:build race

package iwarp

import (
	"net"
	"syscall"
)

// raceEnabled is true under the race detector.
//
// The race detector learns that socket data written by one goroutine
// happens before another goroutine reads it from syscall.Write (a release)
// and syscall.Read (an acquire, after the buffer write is recorded). Two
// gaps remain for this provider: writev (net.Buffers) releases nothing,
// and a payload read straight into registered memory is recorded before
// the acquire. So under the detector a batch is preceded by a zero-length
// syscall.Write, and a direct payload read by a zero-length syscall.Read:
// no-ops for TCP that give the detector the edges that exist in reality
// (a peer places bytes only after the poster wrote them).
const raceEnabled = true

func rawConn(c *net.TCPConn, cache *syscall.RawConn) syscall.RawConn {
	if *cache == nil {
		rc, err := c.SyscallConn()
		if err != nil {
			return nil
		}
		*cache = rc
	}
	return *cache
}

func (t *txPath) raceRelease() {
	if rc := rawConn(t.conn, &t.raw); rc != nil {
		_ = rc.Write(func(fd uintptr) bool {
			_, _ = syscall.Write(int(fd), nil)
			return true
		})
	}
}

func (d *rxReader) raceAcquire() {
	if rc := rawConn(d.conn, &d.raw); rc != nil {
		_ = rc.Read(func(fd uintptr) bool {
			_, _ = syscall.Read(int(fd), nil)
			return true
		})
	}
}
