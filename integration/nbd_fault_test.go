package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/prereq"
	"github.com/capsule-storage/capsule/internal/storetest"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/nbd"
	"github.com/capsule-storage/capsule/nvmeof/nbd/nsdevice"
	"github.com/capsule-storage/capsule/rdma/fault"
)

// The fault cases write with fio in three kinds of runs over one layout,
// so that a later verify-only run checks exactly the blocks an earlier
// run wrote (fio derives each block's contents from its offset and the
// job, and checks a crc32c header in every block).
//
//	flushed:  [0, 16 MiB) written and flushed (end_fsync) before the fault
//	loaded:   [16, 48 MiB) written while the fault strikes, not flushed
//
// What is flushed must survive any fault; what was only acknowledged may
// be lost when the target itself dies (its write cache goes with it), so
// the loaded range is verified only where the target stays up.
const (
	flushedRange = "--offset=0 --size=16m"
	loadedRange  = "--offset=16m --size=32m"
)

func fioRun(t *testing.T, uri, name, rng string, extra ...string) string {
	t.Helper()
	return runTool(t, "fio", fioArgs(uri, append(append([]string{"--name=" + name}, strings.Fields(rng)...), extra...)...)...)
}

// writeFlushed writes the flushed range and flushes it.
func writeFlushed(t *testing.T, uri string) {
	t.Helper()
	fioRun(t, uri, "flushed", flushedRange, "--rw=randwrite", "--bs=64k", "--iodepth=8", "--do_verify=1", "--end_fsync=1", "--randseed=11")
}

// verifyFlushed reads the flushed range back and checks every block.
func verifyFlushed(t *testing.T, uri string) {
	t.Helper()
	fioRun(t, uri, "flushed", flushedRange, "--rw=randwrite", "--bs=64k", "--iodepth=8", "--verify_only=1", "--randseed=11")
}

// startLoadOn starts fio writing the loaded range in the background on
// jobs connections (a power of two up to 32), each with its share of the
// range, in blocks of bs; wait returns its error and output.
func startLoadOn(t *testing.T, uri string, jobs int, bs string, verify bool) (wait func() (string, error)) {
	wait, _ = startLoadRunning(t, uri, jobs, bs, verify)
	return wait
}

// startLoadRunning is startLoadOn, also returning whether fio still runs.
func startLoadRunning(t *testing.T, uri string, jobs int, bs string, verify bool) (wait func() (string, error), running func() bool) {
	t.Helper()
	share := fmt.Sprintf("%dk", 32<<10/jobs)
	args := fioArgs(uri, "--name=loaded", "--rw=randwrite", "--bs="+bs, "--iodepth=16", fmt.Sprintf("--numjobs=%d", jobs),
		"--offset=16m", "--size="+share, "--offset_increment="+share, "--randseed=12", fmt.Sprintf("--do_verify=%d", map[bool]int{false: 0, true: 1}[verify]))
	if !verify {
		// A load that is not verified runs for a while whatever the
		// machine's speed, so the fault surely lands inside it.
		args = append(args, "--time_based", "--runtime=4")
	}
	cmd := exec.Command(prereq.Tool(t, "fio"), args...)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	})
	wait = func() (string, error) {
		select {
		case err := <-done:
			done <- err
			return out.String(), err
		case <-time.After(3 * time.Minute):
			t.Fatalf("fio still running after 3 minutes:\n%s", out.String())
			return "", nil
		}
	}
	running = func() bool {
		select {
		case err := <-done:
			done <- err
			return false
		default:
			return true
		}
	}
	return wait, running
}

// ecTarget starts `target serve` with an erasure-coded namespace over
// iwarp on loopback (port 0: a free one) and returns it and its URL.
func ecTarget(t *testing.T, data, listen string) (*daemon, string) {
	t.Helper()
	d := startDaemon(t, "capsule target ready", "serve", "--listen", listen, "--data", data,
		"--namespace", "ec:vol0:64MiB", "--nqn", nbdNQN, "--scrub-rate", "0")
	return d, strings.Split(field(d.ready, "listeners"), ",")[0]
}

// TestNBDTargetKilled kills the target with SIGKILL while fio writes
// through the bridge, restarts it on the same address and data, and
// checks that the bridge reconnected on its own: fio's run completes
// without an error, the first flush after the loss reports that
// acknowledged writes may be gone, and everything flushed before the
// kill verifies.
func TestNBDTargetKilled(t *testing.T) {
	prereq.Tool(t, "fio")
	prereq.Tool(t, "nbdsh")
	data := t.TempDir()
	tgt, url := ecTarget(t, data, "iwarp://127.0.0.1:0")
	bridge, uri := startBridge(t, url, nbdNQN, "127.0.0.1:0", "", "--reconnect-timeout", "2m")
	defer func() {
		if t.Failed() {
			t.Logf("bridge stderr:\n%s", bridge.stderr)
		}
	}()
	writeFlushed(t, uri)

	sent := wcharOf(t, bridge.cmd.Process.Pid)
	wait, running := startLoadRunning(t, uri, 2, "4k", false)
	time.Sleep(time.Second)
	// On a loaded machine fio may not have written yet: the kill must
	// come after writes were acknowledged (the bridge has sent a few MiB
	// to the target), or there is nothing for the flush to report.
	for deadline := time.Now().Add(30 * time.Second); wcharOf(t, bridge.cmd.Process.Pid) < sent+4<<20; {
		require.True(t, time.Now().Before(deadline), "fio wrote nothing through the bridge in 30 s")
		time.Sleep(50 * time.Millisecond)
	}
	require.True(t, running())
	tgt.kill9(t)
	time.Sleep(500 * time.Millisecond) // the bridge sees the loss and starts reconnecting
	_, url2 := ecTarget(t, data, url)
	require.Equal(t, url, url2)
	out, err := wait()
	require.NoError(t, err, "fio through the reconnect:\n%s", out)

	out = runTool(t, "nbdsh", "-u", uri, "-c", `
import errno
try:
    h.flush()
except nbd.Error as e:
    assert e.errnum == errno.EIO, e
    print("flush EIO")
h.flush()
print("flush ok")
`)
	assert.Contains(t, out, "flush EIO", "writes were acknowledged before the kill and not flushed")
	assert.Contains(t, out, "flush ok", "the failure is reported once")
	verifyFlushed(t, uri)
	fioRun(t, uri, "after", loadedRange, "--rw=randwrite", "--bs=16k", "--iodepth=16", "--do_verify=1", "--end_fsync=1")
}

// TestNBDBridgeKilled kills the bridge with SIGKILL under load, starts a
// new one on the same port, and checks what was flushed through the old
// one, then writes and verifies through the new one. The target runs
// over shm here.
func TestNBDBridgeKilled(t *testing.T) {
	prereq.Tool(t, "fio")
	data := t.TempDir()
	shm := uniqueShm("nbd-bridge")
	startDaemon(t, "capsule target ready", "serve", "--listen", shm, "--data", data,
		"--namespace", "ec:vol0:64MiB", "--nqn", nbdNQN, "--scrub-rate", "0")
	bridge, uri := startBridge(t, shm, nbdNQN, "127.0.0.1:0", "vol")
	listen := strings.TrimSuffix(strings.TrimPrefix(uri, "nbd://"), "/vol")
	writeFlushed(t, uri)

	wait, running := startLoadRunning(t, uri, 2, "4k", false)
	time.Sleep(time.Second)
	require.True(t, running())
	bridge.kill9(t)
	_, err := wait()
	require.Error(t, err, "fio loses its connections with the bridge")

	_, uri2 := startBridge(t, shm, nbdNQN, listen, "vol")
	require.Equal(t, uri, uri2)
	verifyFlushed(t, uri)
	wait = startLoadOn(t, uri, 2, "16k", true)
	out, err := wait()
	require.NoError(t, err, "write and verify through the new bridge:\n%s", out)
}

// TestNBDConnectionCut runs the bridge in this process, connected to a
// target process through the fault wrapper (fault+iwarp://), and cuts
// its connection to the target again and again while fio writes and
// verifies. The target stays up, so every write must verify, and fio
// sees no error: each request in flight at a cut is resubmitted after
// the reconnect.
func TestNBDConnectionCut(t *testing.T) {
	prereq.Tool(t, "fio")
	data := t.TempDir()
	_, url := ecTarget(t, data, "iwarp://127.0.0.1:0")
	addr := strings.TrimPrefix(url, "iwarp://")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := host.Dial(ctx, "fault+"+url, append(nsdevice.DialOptions(), host.WithSubsystem(nbdNQN),
		host.WithReconnectDelay(20*time.Millisecond, 200*time.Millisecond), host.WithMaxRetries(1000))...)
	require.NoError(t, err)
	defer c.Close()
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	exp, err := nsdevice.Export(ns, "", "cut test", nbd.DefaultSlots)
	require.NoError(t, err)
	srv := &nbd.Server{Exports: []nbd.Export{exp}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		require.NoError(t, srv.Shutdown(context.Background()))
		require.ErrorIs(t, <-served, nbd.ErrServerClosed)
	}()
	uri := "nbd://" + l.Addr().String() + "/"

	writeFlushed(t, uri)
	wait, running := startLoadRunning(t, uri, 2, "4k", true)
	inj := fault.For(addr)
	cuts := 0
	for range 5 {
		time.Sleep(300 * time.Millisecond)
		require.True(t, running(), "the load must outlast the cuts; give it more to write")
		if inj.Cut() > 0 {
			cuts++
		}
		require.Eventually(t, func() bool { return c.State() == host.StateLive }, time.Minute, 10*time.Millisecond)
	}
	out, err := wait()
	require.NoError(t, err, "fio across %d cuts:\n%s", cuts, out)
	assert.GreaterOrEqual(t, c.Stats().Reconnects, uint64(cuts))
	assert.Positive(t, cuts)
	verifyFlushed(t, uri)
}

// TestNBDStoreDamageUnderLoad runs fio on 16 connections at once, writing
// and verifying, while a device directory of the erasure-coded store is
// deleted and shard bytes on another device are flipped. Every block
// fio wrote must verify, and so must everything flushed before.
func TestNBDStoreDamageUnderLoad(t *testing.T) {
	prereq.Tool(t, "fio")
	data := t.TempDir()
	shm := uniqueShm("nbd-damage")
	startDaemon(t, "capsule target ready", "serve", "--listen", shm, "--data", data,
		"--namespace", "ec:vol0:64MiB", "--nqn", nbdNQN, "--scrub-rate", "0")
	_, uri := startBridge(t, shm, nbdNQN, "127.0.0.1:0", "")
	writeFlushed(t, uri)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)

	wait, running := startLoadRunning(t, uri, 16, "8k", true)
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, os.RemoveAll(dirs[ecLost]))
	r := rand.New(rand.NewPCG(9, 9))
	st, err := os.Stat(filepath.Join(dirs[0], "shards"))
	require.NoError(t, err)
	slots := int(st.Size() / ecSlot)
	require.Positive(t, slots)
	for range 12 {
		storetest.FlipShardUnit(t, r, dirs[0], r.IntN(slots), ecUnit)
		time.Sleep(50 * time.Millisecond)
	}
	require.True(t, running(), "the load must outlast the damage; give it more to write")
	out, err := wait()
	require.NoError(t, err, "fio on 16 connections through the damage:\n%s", out)
	verifyFlushed(t, uri)
}

// wcharOf returns the bytes process pid has written to files and
// sockets (/proc/PID/io wchar).
func wcharOf(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no wchar in /proc/%d/io", pid)
	return 0
}
