package server

import (
	"sync"
)

// replyCacheSize is how many request IDs the server remembers.
const replyCacheSize = 4096

// replyCache remembers the outcome of the last replyCacheSize commands
// that carried a request ID (protocol.go), so that a command a host sends
// again after a lost connection is answered, not run twice.
type replyCache struct {
	// mu guards m, ring and next.
	mu   sync.Mutex
	m    map[uint64]*reply
	ring [replyCacheSize]uint64 // IDs in the order they came, for eviction
	next int
}

// reply is one command's outcome; done is closed once it is set.
type reply struct {
	done  chan struct{}
	errno uint32
	data  []byte
}

// begin returns the entry of id and whether the caller is the first, who
// runs the command and calls finish.
func (c *replyCache) begin(id uint64) (*reply, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[uint64]*reply, replyCacheSize)
	}
	if r, ok := c.m[id]; ok {
		return r, false
	}
	if old := c.ring[c.next]; old != 0 {
		delete(c.m, old)
	}
	c.ring[c.next] = id
	c.next = (c.next + 1) % replyCacheSize
	r := &reply{done: make(chan struct{})}
	c.m[id] = r
	return r, true
}

// finish records the outcome of the command that began r.
func (c *replyCache) finish(r *reply, errno uint32, data []byte) {
	r.errno = errno
	r.data = append([]byte(nil), data...)
	close(r.done)
}
