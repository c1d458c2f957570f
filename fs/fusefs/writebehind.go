package fusefs

import (
	"io"
	"sync"
	"syscall"
	"time"
)

// Write-behind (doc.go, "Writes"; on with Options.WriteBehind, without
// the writeback cache): a WRITE
// smaller than wbMax through a file opened without O_DIRECT, O_SYNC or
// O_DSYNC is answered once the mount holds its bytes. Each inode has one buffer of contiguous bytes
// written through one open file; it goes to the target, in one WRITE of
// up to wbMax bytes, when it is full, when a write does not continue it,
// wbDelay after its first write, and before any request whose answer or
// effect depends on the file's data or attributes (drain). One buffer per
// inode is in flight at a time, so buffers reach the target in the order
// they were written.
const (
	// wbMax is the most bytes one buffer holds: a WRITE of the largest
	// size the kernel sends.
	wbMax = MaxWrite
	// wbDelay bounds how long a write waits in the mount before it is
	// sent to the target.
	wbDelay = 100 * time.Millisecond
	// wbLimit bounds the bytes of all the buffers of a mount, those in
	// flight included; past it writes go through.
	wbLimit = 64 << 20
)

// writeBehind is one inode's buffered writes.
type writeBehind struct {
	mu  sync.Mutex // guards the fields below; held while waiting for a flight
	fh  *fileHandle
	off int64  // file offset of buf[0]
	buf []byte // nil when nothing is buffered

	// inflight receives the result of the buffer in flight; nil when
	// none is.
	inflight chan error
	// err is the first failure of a buffered write that no write, flush
	// or fsync has reported yet.
	err   error
	timer *time.Timer
}

// pending reports whether the inode has writes not known to be at the
// target.
func (w *writeBehind) pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf != nil || w.inflight != nil
}

// wbPool recycles buffers of wbMax bytes.
var wbPool = sync.Pool{New: func() any { b := make([]byte, wbMax); return &b }}

// reserve takes wbMax bytes of the mount's write-behind budget.
func (fsys *fileSystem) reserve() bool {
	if fsys.wbBytes.Add(wbMax) > wbLimit {
		fsys.wbBytes.Add(-wbMax)
		return false
	}
	return true
}

func (fsys *fileSystem) unreserve(b []byte) {
	b = b[:cap(b)]
	wbPool.Put(&b)
	fsys.wbBytes.Add(-wbMax)
}

// behind reports whether writes through fh may be buffered.
func (fsys *fileSystem) behind(fh *fileHandle, n int) bool {
	return fsys.writeBehind && fh != nil && fh.behind && fh.opener != nil && n < wbMax
}

// bufferWrite buffers data at off, written through fh. It reports false
// when the write must go through instead (the mount's budget is spent);
// then nothing is buffered or in flight for the inode.
func (n *node) bufferWrite(fh *fileHandle, data []byte, off int64) (uint32, syscall.Errno, bool) {
	w := &n.wb
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight != nil {
		select {
		case err := <-w.inflight: // landed: a failure is reported now
			w.inflight = nil
			if err != nil && w.err == nil {
				w.err = err
			}
		default:
		}
	}
	if err := w.err; err != nil {
		w.err = nil
		return 0, errnoOf(err), true
	}
	if w.buf != nil && (w.fh != fh || off != w.off+int64(len(w.buf)) || len(w.buf)+len(data) > wbMax) {
		n.sendLocked()
	}
	if w.buf == nil {
		if !n.fsys.reserve() {
			n.waitLocked()
			return 0, 0, false
		}
		w.buf = (*wbPool.Get().(*[]byte))[:0]
		w.fh, w.off = fh, off
		if w.timer == nil {
			w.timer = time.AfterFunc(wbDelay, n.flushLater)
		} else {
			w.timer.Reset(wbDelay)
		}
	}
	w.buf = append(w.buf, data...)
	if len(w.buf) == wbMax {
		n.sendLocked()
	}
	return uint32(len(data)), 0, true
}

// sendLocked puts the buffer in flight, once the one before it has
// landed.
func (n *node) sendLocked() {
	w := &n.wb
	n.waitLocked()
	w.timer.Stop()
	fh, off, buf := w.fh, w.off, w.buf
	w.fh, w.buf = nil, nil
	done := make(chan error, 1)
	w.inflight = done
	go func() { done <- n.writeOut(fh, off, buf) }()
}

// waitLocked waits for the buffer in flight and keeps its failure.
func (n *node) waitLocked() {
	w := &n.wb
	if w.inflight == nil {
		return
	}
	if err := <-w.inflight; err != nil && w.err == nil {
		w.err = err
	}
	w.inflight = nil
}

// writeOut writes buf at off through fh and gives the buffer back.
func (n *node) writeOut(fh *fileHandle, off int64, buf []byte) error {
	defer n.fsys.unreserve(buf)
	for p := buf; len(p) > 0; {
		m, err := n.fsys.c.Write(fh.opener.ctx, n.ino, fh.h, p, off)
		if err == nil && m == 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			// The kernel counted these bytes as written: its next
			// open of the file must not keep pages or sizes from
			// before.
			n.dataChanged()
			return err
		}
		p, off = p[m:], off+int64(m)
	}
	return nil
}

// flushLater is the timer's: a buffer not full goes wbDelay after its
// first write.
func (n *node) flushLater() {
	w := &n.wb
	w.mu.Lock()
	if w.buf != nil {
		n.sendLocked()
	}
	w.mu.Unlock()
}

// drain returns once every write the inode buffered is at the target.
// With report it also returns, and forgets, the failure of a buffered
// write not yet reported; without, the failure waits for the next
// write, flush or fsync.
func (n *node) drain(report bool) syscall.Errno {
	if !n.fsys.writeBehind {
		return 0 // nothing is ever buffered: no lock on every read and stat
	}
	w := &n.wb
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf != nil {
		w.timer.Stop()
		n.waitLocked()
		fh, off, buf := w.fh, w.off, w.buf
		w.fh, w.buf = nil, nil
		if err := n.writeOut(fh, off, buf); err != nil && w.err == nil {
			w.err = err
		}
	}
	n.waitLocked()
	if !report || w.err == nil {
		return 0
	}
	err := w.err
	w.err = nil
	return errnoOf(err)
}
