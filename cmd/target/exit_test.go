package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/cliexit"
	"github.com/capsule-storage/capsule/internal/storetest"
)

// runMain runs the target binary's main path (cliexit.Run over newApp) on
// args and returns its exit status and stderr.
func runMain(t *testing.T, args ...string) (code int, stderr string) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	code = cliexit.Run(context.Background(), app, append([]string{"target"}, args...))
	return code, errOut.String()
}

// TestExitStatus: 2 for misuse, 1 for a failure, in every command, with
// the error in one line that names the command once.
func TestExitStatus(t *testing.T) {
	data := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"srub"}, 2, `target: unknown command "srub"`},
		{[]string{"--log-level", "loud"}, 2, "target: bad --log-level"},
		{[]string{"--bogus"}, 2, "target: flag provided but not defined: -bogus (see target --help)"},
		{[]string{"serve", "--bogus"}, 2, "target: serve: flag provided but not defined: -bogus (see target serve --help)"},
		{[]string{"serve", "--block-size", "many"}, 2, "target: serve: invalid value"},
		{[]string{"serve", "--allow-host", "foo"}, 2, `target: --allow-host "foo": not an NQN`},
		{[]string{"serve", "stray"}, 2, "no arguments"},
		{[]string{"scrub"}, 2, "target: say where the store is"},
		{[]string{"scrub", "--bogus"}, 2, "target: scrub: flag provided but not defined"},
		{[]string{"scrub", "--data", data}, 1, "target: open store: no store on these devices; devices 0-5: device missing (no such file or directory)"},
		{[]string{"repair", "--data", data}, 2, "--device NEWDIR is required"},
		{[]string{"migrate"}, 2, "--data DIR is required"},
		{[]string{"perf"}, 0, ""},
		{[]string{"perf", "bogus"}, 2, `target: perf: unknown command "bogus"`},
		{[]string{"perf", "run"}, 2, "--connect URL is required"},
		{[]string{"perf", "run", "--connect", "iwarp://127.0.0.1:1", "--op", "jump"}, 2, "--op"},
		{[]string{"perf", "serve", "--nope"}, 2, "target: perf serve: flag provided but not defined"},
		{[]string{"perf", "run", "--connect", "iwarp://127.0.0.1:1", "--duration", "10ms", "--warmup", "0s"}, 1,
			"target: perf run: --connect iwarp://127.0.0.1:1: connection refused"},
		{[]string{"rpc"}, 2, "target: rpc: want METHOD"},
		{[]string{"rpc", "--socket", filepath.Join(data, "none.sock"), "volume_list"}, 1, "is `target serve` running?"},
	} {
		code, stderr := runMain(t, tc.args...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
		if tc.want == "" {
			continue
		}
		line := lastLine(stderr)
		assert.Contains(t, line, tc.want, "%v", tc.args)
		assert.NotContains(t, line, "target: target:", "%v", tc.args)
		assert.NotContains(t, line, "chunkstore: ", "%v", tc.args)
		assert.Equal(t, 1, strings.Count(line, "target: "), "%v: %s", tc.args, line)
	}
}

// TestBadInputLeavesDataUntouched: a bad flag, config or listener fails
// before anything is created under --data.
func TestBadInputLeavesDataUntouched(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	cfgFile := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`{"subsystems":[{"subsystem":"nvmf","config":[
		{"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2026-11.io.capsule:x"}},
		{"method":"nvmf_subsystem_add_host","params":{"nqn":"nqn.2026-11.io.capsule:x","host":"not-an-nqn"}}]}]}`), 0o600))
	shm := fmt.Sprintf("shm://untouched-%d", os.Getpid())
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--allow-host", "foo"}, 2, "--allow-host"},
		{[]string{"--allow-host", "nqn.2014-08.org.nvmexpress:uuid:1"}, 2, "UUID"},
		{[]string{"--listen", "nvme://127.0.0.1:1"}, 2, "--listen"},
		{[]string{"--listen", "iwarp://0.0.0.0:4420"}, 2, "not on loopback"},
		{[]string{"--ec", "9+9x"}, 2, "--ec"},
		{[]string{"--ec", "2+1", "--device", "/a"}, 2, "--device"},
		{[]string{"--namespace", "ec:v:1000"}, 2, "multiple of the 512-byte block"},
		{[]string{"--namespace", "disk:1GiB"}, 2, "kind"},
		{[]string{"--scrub-rate", "fast"}, 2, "--scrub-rate"},
		{[]string{"--namespace", "file:missing.img"}, 2, "missing.img: no such file or directory; give a size to create it"},
		{[]string{"--rpc-socket", "/" + strings.Repeat("s", 120)}, 2, "--rpc-socket"},
		{[]string{"--listen", "tcp://" + busy.Addr().String()}, 1, "--listen tcp://" + busy.Addr().String() + ": cannot listen: address already in use"},
		{[]string{"--listen", shm, "--listen", "tcp://" + busy.Addr().String()}, 1, "address already in use"},
		{[]string{"--config", cfgFile}, 1, `host "not-an-nqn": not an NQN`},
		{[]string{"--config", filepath.Join(t.TempDir(), "missing.json")}, 1, "--config"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		code, stderr := runMain(t, append([]string{"serve", "--data", data}, tc.args...)...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
		assert.Contains(t, lastLine(stderr), tc.want, "%v", tc.args)
		_, err := os.Stat(data)
		assert.ErrorIs(t, err, os.ErrNotExist, "%v: nothing is created under --data", tc.args)
	}
}

// TestReadyLineDegraded: the ready line ends with degraded=N when devices
// of the store are out of use, and has no such field otherwise.
func TestReadyLineDegraded(t *testing.T) {
	data := t.TempDir()
	storetest.Make(t, data, testVolSize, 31)
	cfg := defaultServeConfig()
	cfg.Listeners = []string{fmt.Sprintf("shm://ready-degraded-%d", os.Getpid())}
	cfg.DataDir = data
	cfg.Namespaces = []namespaceSpec{{Kind: "ec", Name: "vol", Size: testVolSize}}
	cfg.FS = ""
	cfg.ScrubRate = 0

	ready, stop := startServe(t, cfg)
	require.True(t, strings.HasPrefix(ready, "capsule target ready "), ready)
	assert.NotContains(t, ready, "degraded=")
	require.NoError(t, stop())

	require.NoError(t, os.RemoveAll(chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)[3]))
	ready, stop = startServe(t, cfg)
	require.True(t, strings.HasPrefix(ready, "capsule target ready "), ready)
	assert.Regexp(t, `^capsule target ready listeners=\S+ nqn=\S+ discovery=\S+ rpc=\S+ degraded=1$`, ready)
	require.NoError(t, stop())
}

// TestScrubTakesTheStoresGeometry: without --ec, scrub --data finds a
// 2+1 store's three devices, also when the last one is gone.
func TestScrubTakesTheStoresGeometry(t *testing.T) {
	data := t.TempDir()
	g := chunkstore.Geometry{Data: 2, Parity: 1}
	dirs := chunkstore.DeviceDirs(data, g)
	s, err := chunkstore.CreateDirs(dirs, chunkstore.WithGeometry(g))
	require.NoError(t, err)
	_, err = s.CreateVolume("vol", 1<<20)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	res := run("scrub", "--data", data)
	require.NoError(t, res.err, res.stderr)
	assert.Contains(t, res.stdout, "complete=true")

	require.NoError(t, os.RemoveAll(dirs[2]))
	res = run("scrub", "--data", data, "--no-repair")
	require.NoError(t, res.err, res.stderr)
	assert.Contains(t, res.stderr, "device 2")
	assert.Contains(t, res.stdout, "complete=true")
}

func TestStoreErrorText(t *testing.T) {
	assert.Equal(t, "0-3, 5, 7, 8", positions([]int{0, 1, 2, 3, 5, 7, 8}))
	assert.Equal(t, "4", positions([]int{4}))
	de := &chunkstore.DevicesError{Err: chunkstore.ErrTooManyFailures, Devices: []*chunkstore.DeviceError{
		{Pos: 1, Device: "d/dev1", Err: fmt.Errorf("%w: open d/dev1/identity: %w", chunkstore.ErrDeviceMissing, os.ErrNotExist)},
		{Pos: 2, Device: "d/dev2", Err: fmt.Errorf("%w: open d/dev2/identity: %w", chunkstore.ErrDeviceMissing, os.ErrNotExist)},
		{Pos: 4, Device: "d/dev4", Err: fmt.Errorf("%w: d/dev4", chunkstore.ErrForeignDevice)},
	}}
	assert.Equal(t, "too many devices unavailable; devices 1, 2: device missing; device 4: "+
		strings.TrimPrefix(chunkstore.ErrForeignDevice.Error(), "chunkstore: "), storeError(de))
}
