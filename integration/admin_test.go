package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

const (
	adminNQN  = "nqn.2026-11.io.capsule:default"
	secondNQN = "nqn.2016-06.io.spdk:cnode1"
)

// rpcResult is what `target rpc` did.
type rpcResult struct {
	stdout, stderr string
	code           int
}

// targetRPC runs `bin/target rpc --socket SOCK METHOD [PARAMS]`.
func targetRPC(t *testing.T, sock string, args ...string) rpcResult {
	t.Helper()
	return runTargetCode(t, append([]string{"rpc", "--socket", sock}, args...)...)
}

// mustRPC runs a call that must succeed and returns its result.
func mustRPC(t *testing.T, sock string, args ...string) string {
	t.Helper()
	res := targetRPC(t, sock, args...)
	require.Zero(t, res.code, "target rpc %s: %s", strings.Join(args, " "), res.stderr)
	return strings.TrimSpace(res.stdout)
}

// spdkRPC returns the command line of SPDK's rpc.py: SPDK_DIR, or the
// copy beside the project (../shared/tools/spdk), run with python3.
func spdkRPC(t *testing.T) []string {
	t.Helper()
	dir := os.Getenv("SPDK_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "tools", "spdk")
	}
	script := filepath.Join(dir, "scripts", "rpc.py")
	if _, err := os.Stat(script); err != nil {
		prereq.Missing(t, "SPDK's rpc.py is not at %s (set SPDK_DIR): %v", script, err)
	}
	return []string{prereq.Tool(t, "python3"), script}
}

// TestAdminSocket drives a running `target serve` over its admin socket:
// a volume created and added as NSID 5 with `target rpc` reaches a
// connected host by an Asynchronous Event and reads and writes; removing
// it is told the same way; SPDK's rpc.py adds a second subsystem and
// reads the subsystems back in SPDK's shape; a restart without flags
// comes back to the same configuration and the same data.
func TestAdminSocket(t *testing.T) {
	rpcPy := spdkRPC(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	sock := filepath.Join(dir, "admin.sock")
	shm := fmt.Sprintf("shm://admin-it-%d", os.Getpid())
	d := startDaemon(t, "capsule target ready", "serve", "--listen", "tcp://127.0.0.1:0", "--listen", shm,
		"--namespace", "ec:vol0:16MiB", "--ec", "2+1", "--data", data, "--rpc-socket", sock, "--scrub-rate", "0")
	assert.Equal(t, sock, field(d.ready, "rpc"))
	st, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the admin socket is the owner's alone")
	tcpURL := strings.Split(field(d.ready, "listeners"), ",")[0]
	require.True(t, strings.HasPrefix(tcpURL, "tcp://127.0.0.1:"), d.ready)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	events := make(chan host.AsyncEvent, 16)
	c, err := host.Dial(ctx, tcpURL, host.WithSubsystem(adminNQN), host.WithQueues(1),
		host.WithAsyncEvents(func(ev host.AsyncEvent) { events <- ev }))
	require.NoError(t, err)
	defer c.Close()
	changed := func() []uint32 {
		t.Helper()
		select {
		case ev := <-events:
			require.NoError(t, ev.Err)
			return ev.ChangedNamespaces
		case <-time.After(20 * time.Second):
			t.Fatal("the host got no asynchronous event")
			return nil
		}
	}

	// A volume, added as NSID 5 while the host is connected.
	assert.Equal(t, `"vol5"`, mustRPC(t, sock, "volume_create", `{"name":"vol5","size":"8MiB"}`))
	assert.Equal(t, "5", mustRPC(t, sock, "nvmf_subsystem_add_ns",
		`{"nqn":"`+adminNQN+`","namespace":{"bdev_name":"vol5","nsid":5}}`))
	assert.Equal(t, []uint32{5}, changed())
	ns, err := c.Namespace(5)
	require.NoError(t, err)
	assert.Equal(t, int64(8<<20), ns.Size())
	block := bytes.Repeat([]byte("written to NSID 5 after an AER. "), 128) // 4 KiB
	_, err = ns.WriteAt(block, 1<<20)
	require.NoError(t, err)
	require.NoError(t, ns.Flush())
	got := make([]byte, len(block))
	_, err = ns.ReadAt(got, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, block, got)

	// Errors: one line, exit 1; misuse: exit 2.
	res := targetRPC(t, sock, "nvmf_subsystem_add_ns", `{"nqn":"`+adminNQN+`","namespace":{"bdev_name":"vol5"}}`)
	assert.Equal(t, 1, res.code)
	assert.Equal(t, `target: "vol5" is already namespace 5 of `+adminNQN+"\n", res.stderr)
	res = targetRPC(t, sock, "volume_create", `{"name":"x","size":1,"colour":"red"}`)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, `unknown parameter "colour"`)
	assert.Equal(t, 2, targetRPC(t, sock).code)
	assert.Equal(t, 2, targetRPC(t, sock, "volume_list", "{not json").code)

	// Removed again: the host is told, and the handle is dead.
	assert.Equal(t, "true", mustRPC(t, sock, "nvmf_subsystem_remove_ns", `{"nqn":"`+adminNQN+`","nsid":5}`))
	assert.Equal(t, []uint32{5}, changed())
	_, err = ns.ReadAt(got, 0)
	require.ErrorIs(t, err, host.ErrNamespaceChanged)

	// SPDK's rpc.py changes and reads the same target.
	runPy := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, rpcPy[0], append(append(rpcPy[1:], "-s", sock), args...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "rpc.py %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	runPy("nvmf_create_subsystem", secondNQN, "-a", "-s", "SPDK00000000000001")
	port := strings.TrimPrefix(tcpURL, "tcp://127.0.0.1:")
	runPy("nvmf_subsystem_add_listener", secondNQN, "-t", "tcp", "-a", "127.0.0.1", "-s", port, "-f", "ipv4")
	runPy("nvmf_subsystem_add_ns", secondNQN, "vol5", "-n", "3")
	runPy("nvmf_subsystem_add_host", adminNQN, "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555")
	type spdkSub struct {
		NQN             string `json:"nqn"`
		Subtype         string `json:"subtype"`
		AllowAnyHost    bool   `json:"allow_any_host"`
		SerialNumber    string `json:"serial_number"`
		ListenAddresses []struct {
			TrType, AdrFam, TrAddr, TrSvcID string
		} `json:"listen_addresses"`
		Hosts []struct {
			NQN string `json:"nqn"`
		} `json:"hosts"`
		Namespaces []struct {
			NSID     uint32 `json:"nsid"`
			BdevName string `json:"bdev_name"`
			UUID     string `json:"uuid"`
		} `json:"namespaces"`
	}
	var subs []spdkSub
	out := runPy("nvmf_get_subsystems")
	require.NoError(t, json.Unmarshal([]byte(out), &subs), out)
	require.Len(t, subs, 3, out)
	assert.Equal(t, "nqn.2014-08.org.nvmexpress.discovery", subs[0].NQN)
	assert.Equal(t, "Discovery", subs[0].Subtype)
	assert.Equal(t, adminNQN, subs[1].NQN)
	assert.Equal(t, "NVMe", subs[1].Subtype)
	require.Len(t, subs[1].ListenAddresses, 2)
	assert.Equal(t, "TCP", subs[1].ListenAddresses[0].TrType)
	assert.Equal(t, "IPv4", subs[1].ListenAddresses[0].AdrFam)
	assert.Equal(t, "127.0.0.1", subs[1].ListenAddresses[0].TrAddr)
	assert.Equal(t, port, subs[1].ListenAddresses[0].TrSvcID)
	assert.Equal(t, "INTRA_HOST", subs[1].ListenAddresses[1].AdrFam)
	require.Len(t, subs[1].Namespaces, 2, "vol0 and the file namespace")
	assert.Equal(t, "vol0", subs[1].Namespaces[0].BdevName)
	assert.Equal(t, "files", subs[1].Namespaces[1].BdevName)
	require.Len(t, subs[1].Hosts, 1)
	assert.Equal(t, secondNQN, subs[2].NQN)
	assert.True(t, subs[2].AllowAnyHost)
	assert.Equal(t, "SPDK00000000000001", subs[2].SerialNumber)
	require.Len(t, subs[2].ListenAddresses, 1, "served on the listener rpc.py added, not on shm")
	assert.Equal(t, port, subs[2].ListenAddresses[0].TrSvcID)
	require.Len(t, subs[2].Namespaces, 1)
	assert.Equal(t, uint32(3), subs[2].Namespaces[0].NSID)
	assert.Equal(t, "vol5", subs[2].Namespaces[0].BdevName)
	assert.NotEmpty(t, subs[2].Namespaces[0].UUID)

	var vols []struct {
		Name string `json:"name"`
		NQN  string `json:"nqn"`
		NSID uint32 `json:"nsid"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRPC(t, sock, "volume_list")), &vols))
	require.Len(t, vols, 2)
	assert.Equal(t, secondNQN, vols[1].NQN)
	var status struct {
		Geometry string `json:"geometry"`
		Devices  []struct {
			State string `json:"state"`
		} `json:"devices"`
		Stats map[string]any `json:"stats"`
		Scrub struct {
			State string `json:"state"`
		} `json:"scrub"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRPC(t, sock, "store_get_status")), &status))
	assert.Equal(t, "2+1", status.Geometry)
	assert.Len(t, status.Devices, 3)
	assert.Contains(t, status.Stats, "write_amplification")
	assert.Equal(t, "off", status.Scrub.State, "--scrub-rate 0")
	before := mustRPC(t, sock, "save_config")
	require.NoError(t, c.Close())

	// A restart with no flags that describe the target comes back to the
	// same configuration, from DATA/capsule.json, and the same data.
	d.stop(t)
	res2 := runTargetCode(t, "serve", "--data", data, "--rpc-socket", sock, "--namespace", "mem:1MiB")
	assert.Equal(t, 2, res2.code, "flags beside a state file are misuse")
	assert.Contains(t, res2.stderr, "capsule.json holds the state of changes")
	d = startDaemon(t, "capsule target ready", "serve", "--ec", "2+1", "--data", data, "--rpc-socket", sock, "--scrub-rate", "0")
	assert.Equal(t, tcpURL, strings.Split(field(d.ready, "listeners"), ",")[0], "the listener keeps its port")
	assert.JSONEq(t, before, mustRPC(t, sock, "save_config"))
	c2, err := host.Dial(ctx, tcpURL, host.WithSubsystem(secondNQN), host.WithQueues(1))
	require.NoError(t, err)
	defer c2.Close()
	ns3, err := c2.Namespace(3)
	require.NoError(t, err)
	clear(got)
	_, err = ns3.ReadAt(got, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, block, got, "vol5 kept what NSID 5 wrote")
}

// runTargetCode runs bin/target to its end and returns what it did.
func runTargetCode(t *testing.T, args ...string) rpcResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "target"), args...)
	cmd.Dir = t.TempDir()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := rpcResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return res
}
