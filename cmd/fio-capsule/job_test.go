package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// testNQN is the subsystem startTarget serves.
const testNQN = "nqn.2026-12.io.capsule:fio-engine-test"

// startTarget serves a 16 MiB memory namespace (4 KiB blocks) at each
// url in this process and returns the addresses it listens on, and its
// subsystem.
func startTarget(t *testing.T, urls ...string) ([]string, *target.Subsystem) {
	t.Helper()
	tgt, err := target.New()
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	sub, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: testNQN, AllowAnyHost: true})
	require.NoError(t, err)
	dev, err := blockdev.NewMemory(16 << 20)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev, BlockSize: 4096})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var addrs []string
	for _, url := range urls {
		addr, err := tgt.Listen(ctx, url)
		require.NoError(t, err)
		addrs = append(addrs, addr)
	}
	return addrs, sub
}

// reap waits for n completions of j and returns them by tag.
func reap(t *testing.T, j *job, n int) map[uint64]completion {
	t.Helper()
	got := map[uint64]completion{}
	for len(got) < n {
		k := j.getevents(1, n-len(got), 10*time.Second, func(_ int, c completion) { got[c.tag] = c })
		require.Positive(t, k, "no completion within 10s")
	}
	return got
}

// TestJob drives a job as fio's callbacks do: queue a window of writes,
// commit, reap; then reads of the same blocks, a trim, a flush, and a
// request the namespace refuses.
func TestJob(t *testing.T) {
	for _, url := range []string{fmt.Sprintf("shm://fio-job-%d", os.Getpid()), "iwarp://127.0.0.1:0", "tcp://127.0.0.1:0"} {
		t.Run(url[:3], func(t *testing.T) {
			addrs, _ := startTarget(t, url)
			addr := addrs[0]
			const depth = 8
			j, err := openJob(context.Background(), jobConfig{URI: addr, Depth: depth, MaxBlock: 64 << 10})
			require.NoError(t, err)
			t.Cleanup(func() { j.close() })
			require.Equal(t, int64(16<<20), j.size())
			require.Equal(t, 4096, j.blockSize())

			// fio's buffers: the job's registered memory, as the
			// engine's iomem_alloc hands it to fio.
			mem, err := j.allocMem(2 * depth * 64 << 10)
			require.NoError(t, err)
			t.Cleanup(func() { j.freeMem() })
			bufs := make([][]byte, depth)
			for i := range bufs {
				bufs[i] = mem[i*64<<10 : (i+1)*64<<10]
				copy(bufs[i], bytes.Repeat([]byte{byte(i + 1)}, 64<<10))
				require.NoError(t, j.queue(uint64(100+i), host.OpWrite, int64(i)*64<<10, bufs[i], 0, i%2 == 0))
			}
			require.ErrorIs(t, j.queue(999, host.OpWrite, 0, bufs[0], 0, false), errBusy, "the pool holds iodepth requests")
			assert.Zero(t, j.getevents(0, depth, 0, func(int, completion) {}), "nothing committed, nothing done")
			j.commit()
			for tag, c := range reap(t, j, depth) {
				assert.Zero(t, c.errno, "write %d", tag)
			}

			reads := make([][]byte, depth)
			for i := range reads {
				reads[i] = mem[(depth+i)*64<<10 : (depth+i+1)*64<<10]
				require.NoError(t, j.queue(uint64(200+i), host.OpRead, int64(i)*64<<10, reads[i], 0, false))
			}
			j.commit()
			reap(t, j, depth)
			for i := range reads {
				assert.Equal(t, bufs[i], reads[i], "block range %d", i)
			}

			require.NoError(t, j.queue(300, host.OpDiscard, 0, nil, 64<<10, false))
			require.NoError(t, j.queue(301, host.OpFlush, 0, nil, 0, false))
			require.NoError(t, j.queue(302, host.OpWrite, 16<<20, bufs[0][:4096], 0, false))
			require.NoError(t, j.queue(303, host.OpWrite, 1, bufs[0][:4096], 0, false))
			j.commit()
			got := reap(t, j, 4)
			assert.Zero(t, got[300].errno, "trim")
			assert.Zero(t, got[301].errno, "flush")
			assert.Equal(t, int32(syscall.EINVAL), got[302].errno, "past the end")
			assert.Equal(t, int64(4096), got[302].resid)
			assert.Equal(t, int32(syscall.EINVAL), got[303].errno, "unaligned")
		})
	}
}

// TestJobTargetGone: with the target gone, I/Os fail with EIO once the
// reconnect timeout has passed, not before.
func TestJobTargetGone(t *testing.T) {
	tgt, err := target.New()
	require.NoError(t, err)
	sub, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: "nqn.2026-12.io.capsule:fio-engine-gone", AllowAnyHost: true})
	require.NoError(t, err)
	dev, err := blockdev.NewMemory(1 << 20)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev, BlockSize: 512})
	require.NoError(t, err)
	addr, err := tgt.Listen(context.Background(), "iwarp://127.0.0.1:0")
	require.NoError(t, err)
	j, err := openJob(context.Background(), jobConfig{URI: addr, Depth: 2, MaxBlock: 4096, ReconnectTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { j.close() })
	start := time.Now()
	tgt.Close()
	buf := make([]byte, 4096)
	require.NoError(t, j.queue(1, host.OpRead, 0, buf, 0, false))
	j.commit()
	got := reap(t, j, 1)
	assert.Equal(t, int32(syscall.EIO), got[1].errno)
	assert.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "the I/O waited for the reconnect timeout")
}

func TestOpenJobErrors(t *testing.T) {
	_, err := openJob(context.Background(), jobConfig{})
	assert.ErrorContains(t, err, "--uri is required")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = openJob(ctx, jobConfig{URI: "tcp://127.0.0.1:1"})
	assert.ErrorContains(t, err, "connecting to tcp://127.0.0.1:1")
}

// TestOpenJobNQN: --nqn picks the subsystem; one the target does not
// serve fails the job with a message that names the ones it serves.
func TestOpenJobNQN(t *testing.T) {
	addrs, _ := startTarget(t, "tcp://127.0.0.1:0")
	addr := addrs[0]
	j, err := openJob(context.Background(), jobConfig{URI: addr, NQN: testNQN, Depth: 1, MaxBlock: 4096})
	require.NoError(t, err)
	assert.Equal(t, testNQN, j.info().Identify.SUBNQN)
	require.NoError(t, j.close())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = openJob(ctx, jobConfig{URI: addr, NQN: "nqn.2026-12.io.capsule:nothing-here", Depth: 1})
	require.Error(t, err)
	assert.Equal(t, "--nqn=nqn.2026-12.io.capsule:nothing-here: "+addr+" serves no such subsystem (it serves "+testNQN+")", err.Error())
}

// TestJobNoAllocations: queue, commit and getevents allocate nothing per
// I/O in steady state (R8), for a window of 8 reads and one of 8 writes,
// in the job's registered memory as fio's buffers are (that the host
// copies none of it is nvmeof/host's TestAllocBufferNoCopy); and plain
// memory, which the host copies, allocates nothing either.
func TestJobNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on synchronization")
	}
	addrs, _ := startTarget(t, fmt.Sprintf("shm://fio-job-alloc-%d", os.Getpid()))
	addr := addrs[0]
	const depth = 8
	j, err := openJob(context.Background(), jobConfig{URI: addr, Depth: depth, MaxBlock: 4096})
	require.NoError(t, err)
	t.Cleanup(func() { j.close() })
	mem, err := j.allocMem(depth * 4096)
	require.NoError(t, err)
	var failed int32
	collect := func(_ int, c completion) { failed |= c.errno }
	for name, tc := range map[string]struct {
		op  host.Op
		buf []byte
	}{
		"reads":               {host.OpRead, mem},
		"writes":              {host.OpWrite, mem},
		"reads, plain memory": {host.OpRead, make([]byte, depth*4096)},
	} {
		window := func() {
			for i := range depth {
				if err := j.queue(uint64(i+1), tc.op, int64(i)*4096, tc.buf[i*4096:(i+1)*4096], 0, false); err != nil {
					t.Fatal(err)
				}
			}
			j.commit()
			for got := 0; got < depth; {
				got += j.getevents(1, depth, -1, collect)
			}
		}
		for range 100 {
			window()
		}
		allocs := testing.AllocsPerRun(200, window)
		require.Zero(t, failed, name)
		require.Zero(t, allocs, "a window of %d %s allocates", depth, name)
	}
	require.NoError(t, j.freeMem())
}

// TestJobMultipath: --uri with two paths of one subsystem, the first
// Inaccessible: the job's writes and reads go through the second, from
// memory outside the Go heap; without --nqn it is refused.
func TestJobMultipath(t *testing.T) {
	urls, sub := startTarget(t, "tcp://127.0.0.1:0", "tcp://127.0.0.2:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, sub.SetANAState(urls[0], 0, nvmeof.ANAInaccessible))
	uri := urls[0] + "," + urls[1]
	_, err := openJob(ctx, jobConfig{URI: uri, Depth: 4, MaxBlock: 4096})
	require.ErrorContains(t, err, "needs --nqn")

	j, err := openJob(ctx, jobConfig{URI: uri, NQN: testNQN, Depth: 4, MaxBlock: 4096})
	require.NoError(t, err)
	t.Cleanup(func() { j.close() })
	require.Equal(t, int64(16<<20), j.size())
	require.NotZero(t, j.info().CNTLID)
	mem, err := j.allocMem(8 * 4096)
	require.NoError(t, err)
	for i := range 4 {
		b := mem[i*4096 : (i+1)*4096]
		copy(b, bytes.Repeat([]byte{byte(i + 7)}, 4096))
		require.NoError(t, j.queue(uint64(i), host.OpWrite, int64(i)*4096, b, 0, false))
	}
	j.commit()
	for tag, c := range reap(t, j, 4) {
		require.Zero(t, c.errno, "write %d", tag)
	}
	for i := range 4 {
		require.NoError(t, j.queue(uint64(10+i), host.OpRead, int64(i)*4096, mem[(4+i)*4096:(5+i)*4096], 0, false))
	}
	j.commit()
	for tag, c := range reap(t, j, 4) {
		require.Zero(t, c.errno, "read %d", tag)
	}
	assert.Equal(t, mem[:4*4096], mem[4*4096:])
	require.NoError(t, j.freeMem())
}
