package target

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// I/O statistics: what a metrics exporter reads (internal/metrics). The
// counters are atomics bumped on the I/O path, which allocates nothing
// for them; the snapshots below are taken at scrape time.

// IOKind is the kind of an I/O command a namespace counts.
type IOKind uint8

const (
	IORead        IOKind = iota // Read
	IOWrite                     // Write
	IOFlush                     // Flush of one namespace (a broadcast Flush is not counted)
	IOWriteZeroes               // Write Zeroes
	IODatasetMgmt               // Dataset Management (deallocate)
	IOVendor                    // vendor-specific commands (the file service)
	NumIOKinds    = 6           // the number of IOKinds
)

var ioKindNames = [NumIOKinds]string{"read", "write", "flush", "write_zeroes", "dataset_management", "vendor"}

// String is the kind's name in metrics: read, write, flush, write_zeroes,
// dataset_management, vendor.
func (k IOKind) String() string {
	if int(k) < len(ioKindNames) {
		return ioKindNames[k]
	}
	return "unknown"
}

// LatencyBuckets is the number of finite latency buckets: bucket i counts
// commands that took at most LatencyBucketBound(i) (and more than the
// bound of bucket i-1); one more bucket counts the slower ones.
const LatencyBuckets = 24

// LatencyBucketBound is the upper bound of latency bucket i: 2^i µs, so
// 1 µs to about 8.4 s.
func LatencyBucketBound(i int) time.Duration { return time.Microsecond << i }

// IOStats are the counters of one kind of command on one namespace since
// it was added. A command is counted when its response is ready to be
// sent: latency runs from the command's arrival on its queue to that
// point, so it includes fetching host data and executing, and leaves out
// sending the response (and, for reads, the data).
type IOStats struct {
	Ops    uint64 // commands completed, failed ones included
	Errors uint64 // commands completed with a status other than success
	Bytes  uint64 // data moved by the commands that succeeded
	// LatencySum is the total latency of the Ops commands.
	LatencySum time.Duration
	// Latency counts commands per bucket (not cumulative); the last
	// element counts those above LatencyBucketBound(LatencyBuckets-1).
	Latency [LatencyBuckets + 1]uint64
}

// ioCounters are the atomics behind an IOStats.
type ioCounters struct {
	ops, errors, bytes, latencyNanos atomic.Uint64
	latency                          [LatencyBuckets + 1]atomic.Uint64
}

// latencyBucket is the bucket of a latency of d.
func latencyBucket(d time.Duration) int {
	if d <= time.Microsecond {
		return 0
	}
	// The smallest i with d <= 2^i µs: the bit length of ceil(d/µs)-1.
	us := (uint64(d) + uint64(time.Microsecond) - 1) / uint64(time.Microsecond)
	return min(bits.Len64(us-1), LatencyBuckets)
}

func (c *ioCounters) record(bytes int, ok bool, d time.Duration) {
	c.ops.Add(1)
	if ok {
		c.bytes.Add(uint64(bytes))
	} else {
		c.errors.Add(1)
	}
	if d < 0 {
		d = 0
	}
	c.latencyNanos.Add(uint64(d))
	c.latency[latencyBucket(d)].Add(1)
}

func (c *ioCounters) snapshot() IOStats {
	s := IOStats{
		Ops:        c.ops.Load(),
		Errors:     c.errors.Load(),
		Bytes:      c.bytes.Load(),
		LatencySum: time.Duration(c.latencyNanos.Load()),
	}
	for i := range c.latency {
		s.Latency[i] = c.latency[i].Load()
	}
	return s
}

// IOStats returns the namespace's counters of one kind of command.
func (ns *Namespace) IOStats(k IOKind) IOStats {
	if k >= NumIOKinds {
		return IOStats{}
	}
	return ns.io[k].snapshot()
}

// countIO records a finished I/O command of r's namespace. It runs in
// queue.finish, on any goroutine.
func (r *request) countIO() {
	if r.ns == nil || r.h == nil || !r.h.counted || r.start.IsZero() {
		return
	}
	r.ns.io[r.h.kind].record(r.dataLen, r.rsp.Status.Success(), time.Since(r.start))
}

// QueueInfo describes a connected queue of a controller.
type QueueInfo struct {
	QID         uint16
	Entries     int // SQSIZE+1 of its Connect
	Outstanding int // commands received and not yet answered: the queue's depth now
}

// hostCounters are a subsystem's counts for one host NQN.
type hostCounters struct {
	connects          atomic.Uint64
	keepAliveExpiries atomic.Uint64
}

// maxTrackedHosts bounds the host NQNs a subsystem counts separately;
// hosts past it are counted together under the empty NQN, so that hosts
// that connect with ever new NQNs do not grow the table without end.
const maxTrackedHosts = 1024

// HostStats are a subsystem's counters for one host NQN since the
// subsystem was added. HostNQN "" gathers the hosts past the first 1024.
type HostStats struct {
	HostNQN string
	// Connects counts the controllers the host created (admin queue
	// Connects that succeeded); every one after the first is a reconnect.
	Connects uint64
	// KeepAliveExpiries counts the host's controllers ended because no
	// command came within the keep-alive timeout.
	KeepAliveExpiries uint64
}

// hostLocked returns the counters of hostNQN; s.mu must be held.
func (s *Subsystem) hostLocked(hostNQN string) *hostCounters {
	h := s.hostStats[hostNQN]
	if h == nil {
		if len(s.hostStats) >= maxTrackedHosts {
			hostNQN = ""
			if h = s.hostStats[""]; h != nil {
				return h
			}
		}
		h = new(hostCounters)
		s.hostStats[hostNQN] = h
	}
	return h
}

func (s *Subsystem) countKeepAliveExpiry(hostNQN string) {
	s.mu.Lock()
	h := s.hostLocked(hostNQN)
	s.mu.Unlock()
	h.keepAliveExpiries.Add(1)
}

// HostStats returns the counters of every host that has connected, in no
// particular order.
func (s *Subsystem) HostStats() []HostStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]HostStats, 0, len(s.hostStats))
	for nqn, h := range s.hostStats {
		out = append(out, HostStats{HostNQN: nqn, Connects: h.connects.Load(), KeepAliveExpiries: h.keepAliveExpiries.Load()})
	}
	return out
}
