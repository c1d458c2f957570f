//go:build rdma && cgo

package verbs

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capsule-storage/capsule/rdma"
)

// pollFD parks goroutines on a file descriptor of libibverbs or librdmacm
// (a completion channel, an rdma_cm event channel, a device's async fd)
// through the Go runtime's poller, so that no OS thread blocks in C.
//
// The descriptor is switched to non-blocking, which the C calls that read
// it then report as EAGAIN, and a duplicate is handed to os.NewFile: the
// duplicate shares the open file description, so readiness is the same,
// and closing it (Close) leaves the original to its owner.
type pollFD struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool

	mu  sync.Mutex // guards gen and the file's read deadline
	gen uint64     // bumped by every wait, so a late context callback is ignored
}

func newPollFD(fd int, name string) (*pollFD, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, &CallError{Op: "fcntl(O_NONBLOCK)", Errno: err.(syscall.Errno)}
	}
	dup, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return nil, &CallError{Op: "fcntl(F_DUPFD_CLOEXEC)", Errno: errno}
	}
	f := os.NewFile(dup, name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &pollFD{f: f, rc: rc}, nil
}

// wait calls try until it returns true, parking on readability in
// between. It returns ctx's error when ctx ends first, and rdma.ErrClosed
// once Close was called. ctx may be nil: then only Close stops it.
func (p *pollFD) wait(ctx context.Context, try func() bool) error {
	if ctx != nil && ctx.Done() != nil {
		p.mu.Lock()
		p.gen++
		g := p.gen
		p.mu.Unlock()
		stop := context.AfterFunc(ctx, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.gen == g {
				p.f.SetReadDeadline(time.Unix(1, 0))
			}
		})
		defer func() {
			stop()
			p.mu.Lock()
			defer p.mu.Unlock()
			p.gen++
			p.f.SetReadDeadline(time.Time{})
		}()
	}
	err := p.rc.Read(func(uintptr) bool { return try() })
	switch {
	case err == nil:
		return nil
	case p.closed.Load():
		return rdma.ErrClosed
	case ctx != nil && ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded):
		return ctx.Err()
	}
	return err
}

// Close wakes every waiter with rdma.ErrClosed and closes the duplicate.
func (p *pollFD) Close() error {
	p.closed.Store(true)
	return p.f.Close()
}
