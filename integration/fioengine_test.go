package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// fioEngine returns the absolute path of bin/fio-capsule.so, which make
// test builds (make fio-engine) before the tests run.
func fioEngine(t *testing.T) string {
	t.Helper()
	prereq.Tool(t, "fio")
	p, err := filepath.Abs("../bin/fio-capsule.so")
	require.NoError(t, err)
	if _, err := os.Stat(p); err != nil {
		prereq.Missing(t, "the fio engine %s is missing: make fio-engine builds it (%v)", p, err)
	}
	return p
}

// engineFio runs fio with the capsule engine against url in a temporary
// directory, with fio's crc32c verification; it returns fio's output
// and error.
func engineFio(t *testing.T, engine, url string, extra ...string) (string, error) {
	t.Helper()
	args := append([]string{"--ioengine=external:" + engine, "--thread=1", "--uri=" + url,
		"--verify=crc32c", "--verify_state_save=0", "--verify_fatal=1", "--group_reporting=1"}, extra...)
	cmd := exec.Command("fio", args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFioEngine runs fio in-process with bin/fio-capsule.so over shm,
// iwarp and tcp: random 4 KiB writes at queue depth 16 in two jobs (each
// its own controller), verified; 1 MiB sequential writes with FUA and
// fsyncs, verified; trims; and refuses process jobs.
func TestFioEngine(t *testing.T) {
	engine := fioEngine(t)
	shm := uniqueShm("fioengine")
	tgt := startDaemon(t, "capsule target ready", "serve", "--listen", "iwarp://127.0.0.1:0", "--listen", shm,
		"--listen", "tcp://127.0.0.1:0", "--namespace", "mem:96MiB", "--scrub-rate", "0")
	urls := strings.Split(field(tgt.ready, "listeners"), ",")
	require.Len(t, urls, 3, tgt.ready)
	for i, url := range urls {
		base := []string{"--offset=" + []string{"0", "32m", "64m"}[i]}
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			before := strings.Count(tgt.stderr.String(), controllerCreated)
			out, err := engineFio(t, engine, url, append(base, "--name=rand", "--rw=randwrite", "--bs=4k",
				"--iodepth=16", "--numjobs=2", "--size=4m", "--offset_increment=4m", "--do_verify=1")...)
			require.NoError(t, err, out)
			assert.Contains(t, out, "err= 0", out)
			assert.Equal(t, 2, strings.Count(tgt.stderr.String(), controllerCreated)-before, "each job its own controller")
			out, err = engineFio(t, engine, url, append(base, "--name=seq", "--rw=write", "--bs=1m",
				"--iodepth=4", "--size=16m", "--offset_increment=0", "--fua=1", "--fsync=4", "--end_fsync=1",
				"--do_verify=1")...)
			require.NoError(t, err, out)
			assert.Contains(t, out, "sync (", "fio issued its fsyncs through the engine:\n"+out)
			out, err = engineFio(t, engine, url, append(base, "--name=trim", "--rw=randtrim", "--bs=64k",
				"--iodepth=4", "--size=8m", "--verify=0")...)
			require.NoError(t, err, out)
			assert.Contains(t, out, "trim: IOPS=", out)
		})
	}
	t.Run("thread=0", func(t *testing.T) {
		cmd := exec.Command("fio", "--name=proc", "--ioengine=external:"+engine, "--uri="+urls[0], "--rw=read", "--size=1m")
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s", out)
		assert.Contains(t, string(out), "thread=1 is required", "%s", out)
	})
	t.Run("no uri", func(t *testing.T) {
		cmd := exec.Command("fio", "--name=nouri", "--ioengine=external:"+engine, "--thread=1", "--rw=read", "--size=1m")
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s", out)
		assert.Contains(t, string(out), "--uri is required", "%s", out)
	})
}

// fileTarget serves a file: namespace on listen; its data outlives the
// process (the kernel keeps what a killed target wrote).
func fileTarget(t *testing.T, data, listen string) (*daemon, string) {
	t.Helper()
	d := startDaemon(t, "capsule target ready", "serve", "--listen", listen, "--data", data,
		"--namespace", "file:"+filepath.Join(data, "ns.img")+":64MiB", "--scrub-rate", "0")
	return d, strings.Split(field(d.ready, "listeners"), ",")[0]
}

// fioProcess is fio started in the background; the test stops it by pid
// if it is still running at the end.
type fioProcess struct {
	out  *lockedBuffer
	done chan error
}

func startFio(t *testing.T, args ...string) *fioProcess {
	t.Helper()
	cmd := exec.Command("fio", args...)
	cmd.Dir = t.TempDir()
	p := &fioProcess{out: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { p.done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	return p
}

// wait returns fio's output and exit error, failing the test after d.
func (p *fioProcess) wait(t *testing.T, d time.Duration) (string, error) {
	t.Helper()
	select {
	case err := <-p.done:
		return p.out.String(), err
	case <-time.After(d):
		t.Fatalf("fio still running after %v:\n%s", d, p.out.String())
	}
	return "", nil
}

// controllerCreated is what the target logs for each controller of its
// default NVM subsystem.
const controllerCreated = `msg="controller created" subnqn=nqn.2026-11.io.capsule:default`

// connected waits until a host has connected to tgt's NVM subsystem (on
// a loaded machine fio takes a while to start).
func connected(t *testing.T, tgt *daemon) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(tgt.stderr.String(), controllerCreated); {
		require.True(t, time.Now().Before(deadline), "no host connected in 30 s; target stderr:\n%s", tgt.stderr)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFioEngineReconnect kills the target under fio's verified writes
// and restarts it on the same address, over shm and iwarp: the engine's
// host reconnects and resubmits from fio's registered buffers (the new
// target process reaches them anew), and fio finishes and verifies. Then
// it kills the target for good: fio's I/Os fail with EIO once
// --reconnect_timeout has passed.
func TestFioEngineReconnect(t *testing.T) {
	engine := fioEngine(t)
	var tgt *daemon
	var url string
	for _, listen := range []string{uniqueShm("fioreconnect"), "iwarp://127.0.0.1:0"} {
		data := t.TempDir()
		tgt, url = fileTarget(t, data, listen)
		fio := startFio(t, "--ioengine=external:"+engine, "--thread=1", "--uri="+url,
			"--reconnect_timeout=60", "--name=cut", "--rw=randwrite", "--bs=4k", "--iodepth=8", "--size=16m",
			"--rate_iops=1500", "--verify=crc32c", "--do_verify=1", "--verify_state_save=0", "--verify_fatal=1")
		connected(t, tgt)
		time.Sleep(1500 * time.Millisecond) // about 2000 writes done of 4096
		tgt.kill9(t)
		time.Sleep(500 * time.Millisecond)
		var url2 string
		tgt, url2 = fileTarget(t, data, url)
		require.Equal(t, url, url2)
		out, err := fio.wait(t, 2*time.Minute)
		require.NoError(t, err, "fio through the reconnect over %s:\n%s", url, out)
		assert.Contains(t, out, "err= 0", out)
		assert.Contains(t, out, "controller lost; reconnecting", "the engine's host saw the loss over %s", url)
	}

	// The target (iwarp) goes away for good: EIO after the reconnect
	// timeout.
	fio := startFio(t, "--ioengine=external:"+engine, "--thread=1", "--uri="+url,
		"--reconnect_timeout=2", "--name=gone", "--rw=randread", "--bs=4k", "--iodepth=8", "--size=16m",
		"--time_based", "--runtime=60")
	connected(t, tgt)
	time.Sleep(500 * time.Millisecond)
	tgt.kill9(t)
	killed := time.Now()
	out, err := fio.wait(t, time.Minute)
	require.Error(t, err, "fio must fail:\n%s", out)
	assert.GreaterOrEqual(t, time.Since(killed), 2*time.Second, "the I/Os waited for the reconnect timeout")
	assert.Contains(t, out, "Input/output error", out)
}

// TestFioEngineNQN: with two NVM subsystems behind one listener, fio's
// job connects to the first the discovery log lists by default, and to
// the one --nqn names; an NQN the target does not serve fails the job
// with a message naming the ones it does.
func TestFioEngineNQN(t *testing.T) {
	engine := fioEngine(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	tgt := startDaemon(t, "capsule target ready", "serve", "--listen", "tcp://127.0.0.1:0", "--data", filepath.Join(dir, "data"),
		"--namespace", "mem:16MiB", "--rpc-socket", sock, "--scrub-rate", "0")
	url := field(tgt.ready, "listeners")
	hostPort := strings.TrimPrefix(url, "tcp://")
	i := strings.LastIndexByte(hostPort, ':')
	const other = "nqn.2026-12.io.capsule:fio-other"
	mustRPC(t, sock, "nvmf_create_subsystem", `{"nqn":"`+other+`","allow_any_host":true}`)
	mustRPC(t, sock, "nvmf_subsystem_add_listener", `{"nqn":"`+other+`","listen_address":{"trtype":"TCP","adrfam":"IPv4","traddr":"`+
		hostPort[:i]+`","trsvcid":"`+hostPort[i+1:]+`"}}`)
	mustRPC(t, sock, "volume_create", `{"name":"other","size":"8MiB"}`)
	mustRPC(t, sock, "nvmf_subsystem_add_ns", `{"nqn":"`+other+`","namespace":{"bdev_name":"other","nsid":1}}`)
	otherCreated := `msg="controller created" subnqn=` + other

	job := []string{"--name=w", "--rw=write", "--bs=64k", "--iodepth=4", "--size=4m", "--do_verify=1"}
	before := strings.Count(tgt.stderr.String(), controllerCreated)
	out, err := engineFio(t, engine, url, job...)
	require.NoError(t, err, out)
	assert.Equal(t, 1, strings.Count(tgt.stderr.String(), controllerCreated)-before, "the default is the first subsystem")
	assert.NotContains(t, tgt.stderr.String(), otherCreated)

	out, err = engineFio(t, engine, url, append([]string{"--nqn=" + other}, job...)...)
	require.NoError(t, err, out)
	assert.Equal(t, 1, strings.Count(tgt.stderr.String(), otherCreated), "--nqn picks the subsystem")
	assert.Contains(t, out, "err= 0", out)

	out, err = engineFio(t, engine, url, append([]string{"--nqn=nqn.2026-12.io.capsule:nowhere"}, job...)...)
	require.Error(t, err, out)
	assert.Contains(t, out, "--nqn=nqn.2026-12.io.capsule:nowhere: "+url+" serves no such subsystem (it serves "+
		"nqn.2026-11.io.capsule:default, "+other+")", out)
}
