package integration

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// TestHostNQNSameAcrossProcesses starts `target serve` admitting only
// this machine's host NQN (as this process works it out), then two
// `mount --nbd` processes without --hostnqn: both are admitted, and the
// target's controllers (nvmf_subsystem_get_controllers) show one host
// NQN and one HOSTID. A third with another --hostnqn is refused.
func TestHostNQNSameAcrossProcesses(t *testing.T) {
	sys, err := host.SystemIdentity()
	require.NoError(t, err)
	if sys.Source == "random" {
		prereq.Missing(t, "no %s and no %s: this machine has no stable host identity", host.HostNQNFile, host.MachineIDFile)
	}
	data := t.TempDir()
	sock := filepath.Join(data, "capsule.sock")
	d := startDaemon(t, "capsule target ready", "serve", "--listen", "iwarp://127.0.0.1:0", "--data", data,
		"--namespace", "mem:16MiB", "--allow-host", sys.NQN, "--rpc-socket", sock)
	url := field(d.ready, "listeners")
	require.True(t, strings.HasPrefix(url, "iwarp://"), d.ready)
	nqn := field(d.ready, "nqn")
	require.NotEmpty(t, nqn, d.ready)

	startBridge(t, url, nqn, "127.0.0.1:0", "a")
	startBridge(t, url, nqn, "127.0.0.1:0", "b")

	var ctrls []struct {
		HostNQN string `json:"hostnqn"`
		HostID  string `json:"hostid"`
	}
	out := mustRPC(t, sock, "nvmf_subsystem_get_controllers", `{"nqn":"`+nqn+`"}`)
	require.NoError(t, json.Unmarshal([]byte(out), &ctrls), out)
	require.Len(t, ctrls, 2, out)
	for _, c := range ctrls {
		assert.Equal(t, sys.NQN, c.HostNQN)
		assert.Equal(t, uuid.UUID(sys.ID).String(), c.HostID)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "mount"), "--target", url, "--nqn", nqn,
		"--hostnqn", "nqn.2026-11.io.example:stranger", "--nbd", "127.0.0.1:0")
	b, err := cmd.CombinedOutput()
	require.Error(t, err, "a host NQN the target does not allow is refused:\n%s", b)
	assert.Contains(t, string(b), "stranger", "the refusal names the host NQN")
}
