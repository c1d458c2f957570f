package fs

import (
	"sync"

	"github.com/capsule-storage/capsule/nvmeof/host"
)

// Registered data buffers: memory the client's controller registered
// once (host.Controller.AllocBuffer), which a Read or Write whose buffer
// lies in it moves without a copy. A caller that hands read data on (a
// FUSE reply) takes one with Buffer, reads into it and releases it when
// the data is gone; other callers keep using their own memory.

// BufferSize is the size of the client's registered buffers: the
// largest read or write that Buffer serves.
const BufferSize = 1 << 20

// maxBuffers bounds the client's registered memory: 16 buffers of
// BufferSize. Buffer returns nil when all of them are out.
const maxBuffers = 16

// Buffer is registered memory of BufferSize bytes, taken with
// Client.Buffer. It belongs to the caller until Release.
type Buffer struct {
	mem []byte
	set *bufferSet
}

// Bytes returns the buffer's memory: BufferSize bytes, which keep what
// was last written to them.
func (b *Buffer) Bytes() []byte { return b.mem }

// Release gives the buffer back. Its memory must not be used after.
func (b *Buffer) Release() { b.set.put(b) }

// bufferSet is the registered buffers of one controller. When the client
// moves to a new controller (client.go, controller) or closes, the set is
// retired: the old controller, whose Close unmaps the buffers, is closed
// once the last buffer out comes back.
type bufferSet struct {
	ctrl *host.Controller

	mu      sync.Mutex // guards what follows
	free    []*Buffer
	made    int  // buffers allocated
	out     int  // buffers taken and not released
	retired bool // no more buffers; close ctrl when out reaches 0
	closed  bool // ctrl closed (or being closed)
}

// get takes a free buffer, or allocates one while fewer than maxBuffers
// exist; nil when none can be had.
func (s *bufferSet) get() *Buffer {
	s.mu.Lock()
	if s.retired {
		s.mu.Unlock()
		return nil
	}
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		s.out++
		s.mu.Unlock()
		return b
	}
	if s.made == maxBuffers {
		s.mu.Unlock()
		return nil
	}
	s.made++
	s.out++
	s.mu.Unlock()
	mem, err := s.ctrl.AllocBuffer(BufferSize)
	if err != nil {
		s.mu.Lock()
		s.made--
		s.out--
		s.closeIfDone()
		return nil
	}
	return &Buffer{mem: mem, set: s}
}

// put takes a buffer back; the last one back of a retired set closes its
// controller.
func (s *bufferSet) put(b *Buffer) {
	s.mu.Lock()
	s.out--
	if !s.retired {
		s.free = append(s.free, b)
	}
	s.closeIfDone()
}

// retire stops handing out buffers and closes the controller now, or
// when the last buffer out comes back.
func (s *bufferSet) retire() error {
	s.mu.Lock()
	s.retired = true
	s.free = nil
	return s.closeIfDone()
}

// closeIfDone unlocks s.mu and closes the controller if the set is
// retired, no buffer is out and nobody closed it yet.
func (s *bufferSet) closeIfDone() error {
	closeNow := s.retired && s.out == 0 && !s.closed
	s.closed = s.closed || closeNow
	s.mu.Unlock()
	if closeNow {
		return s.ctrl.Close()
	}
	return nil
}

// Buffer returns a registered buffer of BufferSize bytes, or nil when
// the client has none free (16 are out) or cannot register one. Reads
// into it, and writes from it, move no data through the host library's
// own buffers: the target RDMA-Writes read data straight into it. The
// caller releases it once done with the data, and may hold it across a
// reconnect: the memory stays valid (though a new connection copies
// again) until Release.
func (c *Client) Buffer() *Buffer {
	return c.bufs.Load().get()
}
