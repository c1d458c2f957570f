package target

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

func TestLatencyBucket(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {time.Microsecond, 0}, {time.Microsecond + 1, 1}, {2 * time.Microsecond, 1},
		{3 * time.Microsecond, 2}, {4 * time.Microsecond, 2}, {4*time.Microsecond + 1, 3},
		{LatencyBucketBound(LatencyBuckets - 1), LatencyBuckets - 1},
		{LatencyBucketBound(LatencyBuckets-1) + 1, LatencyBuckets}, {time.Hour, LatencyBuckets},
	} {
		assert.Equal(t, c.want, latencyBucket(c.d), "%v", c.d)
	}
}

// TestIOStats: each kind of I/O command is counted on its namespace,
// with the bytes of those that succeed, the failures, and a latency in a
// bucket; a queue's depth and the controller's queues are reported.
func TestIOStats(t *testing.T) {
	tt := newTestTarget(t, transports()["shm"]())
	admin := adminQueue(t, tt.url, testSubNQN, 0)
	io := ioQueue(t, tt.url, admin, 1, 16)

	require.NoError(t, io.do(io.writeCmd(1, 0, 8, 0, 4096), nil).cqe.Status.Err())
	require.NoError(t, io.do(io.writeCmd(1, 8, 8, 0, 4096), nil).cqe.Status.Err())
	require.NoError(t, io.do(io.readCmd(1, 0, 16, 0, 8192), nil).cqe.Status.Err())
	require.Error(t, io.do(io.readCmd(1, tt.ns.Blocks(), 1, 0, 512), nil).cqe.Status.Err(), "past the end")
	require.NoError(t, io.do(nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: 1}, nil).cqe.Status.Err())
	require.NoError(t, io.do(nvmeof.Command{Opcode: nvmeof.IOFlush, NSID: nvmeof.NSIDAll}, nil).cqe.Status.Err())
	wz := nvmeof.Command{Opcode: nvmeof.IOWriteZeroes, NSID: 1}
	require.NoError(t, wz.SetBlocks(4))
	require.NoError(t, io.do(wz, nil).cqe.Status.Err())

	check := func(k IOKind, ops, errs, bytes uint64) {
		t.Helper()
		st := tt.ns.IOStats(k)
		assert.Equal(t, ops, st.Ops, "%v ops", k)
		assert.Equal(t, errs, st.Errors, "%v errors", k)
		assert.Equal(t, bytes, st.Bytes, "%v bytes", k)
		var n uint64
		for _, c := range st.Latency {
			n += c
		}
		assert.Equal(t, ops, n, "%v: every command in one latency bucket", k)
		if ops > 0 {
			assert.Positive(t, st.LatencySum, "%v latency", k)
		}
	}
	check(IOWrite, 2, 0, 8192)
	check(IORead, 2, 1, 8192)
	check(IOFlush, 1, 0, 0) // the broadcast one is not a namespace's
	check(IOWriteZeroes, 1, 0, 0)
	check(IODatasetMgmt, 0, 0, 0)
	check(IOVendor, 0, 0, 0)
	assert.Equal(t, IOStats{}, tt.ns.IOStats(NumIOKinds))

	infos := tt.sub.ControllerInfos()
	require.Len(t, infos, 1)
	assert.Equal(t, []QueueInfo{{QID: 0, Entries: 32, Outstanding: 0}, {QID: 1, Entries: 16, Outstanding: 0}}, infos[0].Queues)
	assert.Equal(t, []HostStats{{HostNQN: testHostNQN, Connects: 1}}, tt.sub.HostStats())
}

func TestHostStatsBounded(t *testing.T) {
	s := &Subsystem{hostStats: map[string]*hostCounters{}}
	for i := range maxTrackedHosts + 10 {
		s.mu.Lock()
		s.hostLocked(string(rune('a'+i%26)) + time.Duration(i).String()).connects.Add(1)
		s.mu.Unlock()
	}
	st := s.HostStats()
	assert.Len(t, st, maxTrackedHosts+1)
	for _, h := range st {
		if h.HostNQN == "" {
			assert.Equal(t, uint64(10), h.Connects)
		}
	}
}
