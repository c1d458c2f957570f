package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// runRPC runs `target rpc ARGS` in this process.
func runRPC(args ...string) cliRun {
	var out, errOut bytes.Buffer
	app := &cli.App{Name: "target", Writer: &out, ErrWriter: &errOut, Commands: []*cli.Command{rpcCommand()},
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append([]string{"target", "rpc"}, args...))
	return cliRun{stdout: out.String(), stderr: errOut.String(), err: err}
}

// TestRPCCommand: `target rpc` prints a result as indented JSON, a
// JSON-RPC error as one line with exit 1, and misuse with exit 2.
func TestRPCCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := defaultServeConfig()
	cfg.Listeners = []string{fmt.Sprintf("shm://rpc-cmd-%d", os.Getpid())}
	cfg.Namespaces = []namespaceSpec{{Kind: "mem", Size: 1 << 20}}
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.RPCSocket = filepath.Join(dir, "s.sock")
	cfg.AllowAnyHost = true
	ready, _ := startServe(t, cfg)
	assert.Contains(t, ready, "rpc="+cfg.RPCSocket)

	r := runRPC("--socket", cfg.RPCSocket, "nvmf_get_subsystems", `{"nqn":"`+defaultNQN+`"}`)
	require.NoError(t, r.err, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, "[\n  {\n    \"nqn\": \""+defaultNQN+"\",\n"), r.stdout)
	assert.Contains(t, r.stdout, `"bdev_name": "mem1"`)

	r = runRPC("--socket", cfg.RPCSocket, "bdev_malloc_create", `{"name":"m9","num_blocks":8,"block_size":512}`)
	require.NoError(t, r.err, r.stderr)
	assert.Equal(t, "\"m9\"\n", r.stdout)
	state, err := os.ReadFile(filepath.Join(cfg.DataDir, stateFileName))
	require.NoError(t, err, "a change is written to the state file")
	assert.Contains(t, string(state), `"m9"`)

	r = runRPC("--socket", cfg.RPCSocket, "nvmf_subsystem_remove_ns", `{"nqn":"`+defaultNQN+`","nsid":9}`)
	assert.Equal(t, 1, r.code())
	assert.Equal(t, "no namespace 9 in "+defaultNQN, r.err.Error())

	for _, args := range [][]string{{}, {"a", "{}", "b"}, {"m", "[1"}, {"m", "3"}} {
		r = runRPC(append([]string{"--socket", cfg.RPCSocket}, args...)...)
		assert.Equal(t, 2, r.code(), "%q", args)
	}
	r = runRPC("--socket", filepath.Join(dir, "none.sock"), "save_config")
	assert.Equal(t, 1, r.code())
	assert.Contains(t, r.err.Error(), "is `target serve` running?")
	assert.NotContains(t, r.err.Error(), "\n")
}

// TestServeConfigFile: serve starts from --config and writes the state
// file from it; a bad config fails naming its entry before anything is
// created; flags that describe the target beside --config, or beside a
// state file, are misuse.
func TestServeConfigFile(t *testing.T) {
	dir := t.TempDir()
	shm := fmt.Sprintf("shm://serve-config-%d", os.Getpid())
	good := `{"subsystems":[{"subsystem":"bdev","config":[
		{"method":"bdev_malloc_create","params":{"name":"m","num_blocks":2048,"block_size":512}}]},
		{"subsystem":"nvmf","config":[
		{"method":"nvmf_subsystem_add_listener","params":{"nqn":"nqn.2014-08.org.nvmexpress.discovery","listen_address":{"trtype":"RDMA","adrfam":"INTRA_HOST","traddr":"` + strings.TrimPrefix(shm, "shm://") + `"}}},
		{"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2026-11.io.capsule:cfg","allow_any_host":true}},
		{"method":"nvmf_subsystem_add_listener","params":{"nqn":"nqn.2026-11.io.capsule:cfg","listen_address":{"trtype":"RDMA","adrfam":"INTRA_HOST","traddr":"` + strings.TrimPrefix(shm, "shm://") + `"}}},
		{"method":"nvmf_subsystem_add_ns","params":{"nqn":"nqn.2026-11.io.capsule:cfg","namespace":{"bdev_name":"m","nsid":4}}}]}]}`
	bad := strings.Replace(good, `"bdev_name":"m"`, `"bdev_name":"nope"`, 1)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
		return p
	}

	cfg := defaultServeConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.ConfigFile = write("bad.json", bad)
	err := serve(context.Background(), io.Discard, cfg)
	require.Error(t, err)
	assert.Equal(t, "--config "+cfg.ConfigFile+`: subsystems[1].config[3] (nvmf_subsystem_add_ns): no bdev (volume) named "nope" (volume_create makes one, or opens one of the store's)`, err.Error())
	_, err = os.Stat(cfg.DataDir)
	assert.ErrorIs(t, err, os.ErrNotExist, "a bad config creates nothing")

	cfg.ConfigFile = write("good.json", good)
	ready, stop := startServe(t, cfg)
	assert.Contains(t, ready, "listeners="+shm+" nqn=nqn.2026-11.io.capsule:cfg ")
	require.NoError(t, stop())
	state, err := os.ReadFile(filepath.Join(cfg.DataDir, stateFileName))
	require.NoError(t, err)
	assert.Contains(t, string(state), `"nsid": 4`)

	_, err = parseServe(t, "--config", cfg.ConfigFile, "--namespace", "mem:1MiB")
	assert.ErrorContains(t, err, "leave out --namespace")
	_, err = parseServe(t, "--data", cfg.DataDir, "--nqn", "nqn.2026-11.io.capsule:other")
	assert.ErrorContains(t, err, "holds the state of changes made over the admin socket")
	var ec cli.ExitCoder
	require.ErrorAs(t, err, &ec)
	assert.Equal(t, 2, ec.ExitCode())

	// Without flags, the state file is what serve starts from.
	cfg.ConfigFile = ""
	ready, stop = startServe(t, cfg)
	assert.Contains(t, ready, "nqn=nqn.2026-11.io.capsule:cfg ")
	require.NoError(t, stop())
}
