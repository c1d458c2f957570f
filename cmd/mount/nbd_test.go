package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/internal/prereq"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// startTarget serves a memory namespace of size bytes in this process
// over iwarp on loopback and returns its URL and subsystem NQN.
func startTarget(t *testing.T, size int64) (string, string) {
	t.Helper()
	const nqn = "nqn.2026-11.io.capsule:mount-nbd-test"
	tgt, err := target.New()
	require.NoError(t, err)
	t.Cleanup(func() { tgt.Close() })
	sub, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: nqn, AllowAnyHost: true})
	require.NoError(t, err)
	dev, err := blockdev.NewMemory(size)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev, BlockSize: 4096})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url, err := tgt.Listen(ctx, "iwarp://127.0.0.1:0")
	require.NoError(t, err)
	return url, nqn
}

// TestNBDExport runs the NBD mode in this process against a target in
// this process, asks nbdinfo what it sees, and stops it as SIGTERM
// would.
func TestNBDExport(t *testing.T) {
	nbdinfo := prereq.Tool(t, "nbdinfo")
	url, nqn := startTarget(t, 32<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	app := newApp()
	app.Writer, app.ErrWriter = pw, io.Discard
	app.ExitErrHandler = func(*cli.Context, error) {}
	ran := make(chan error, 1)
	go func() {
		ran <- app.RunContext(ctx, []string{"mount", "--target", url, "--nqn", nqn, "--nbd", "127.0.0.1:0", "--export", "vol"})
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	require.True(t, sc.Scan(), "no ready line")
	ready := sc.Text()
	go io.Copy(io.Discard, pr)
	require.True(t, strings.HasPrefix(ready, "capsule nbd ready "), ready)
	var listen string
	for _, f := range strings.Fields(ready) {
		if v, ok := strings.CutPrefix(f, "listen="); ok {
			listen = v
		}
	}
	require.NotEmpty(t, listen, ready)

	out, err := exec.Command(nbdinfo, "--json", "nbd://"+listen+"/vol").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var info struct {
		Exports []struct {
			Name         string `json:"export-name"`
			Size         int64  `json:"export-size"`
			MultiConn    bool   `json:"can_multi_conn"`
			Flush        bool   `json:"can_flush"`
			FUA          bool   `json:"can_fua"`
			Trim         bool   `json:"can_trim"`
			Zero         bool   `json:"can_zero"`
			ReadOnly     bool   `json:"is_read_only"`
			MinBlockSize int    `json:"block_size_minimum"`
		} `json:"exports"`
	}
	require.NoError(t, json.Unmarshal(out, &info), "%s", out)
	require.Len(t, info.Exports, 1)
	e := info.Exports[0]
	assert.Equal(t, "vol", e.Name)
	assert.Equal(t, int64(32<<20), e.Size)
	assert.Equal(t, 4096, e.MinBlockSize, "the namespace's block size")
	assert.True(t, e.MultiConn && e.Flush && e.FUA && e.Trim && e.Zero, "%s", out)
	assert.False(t, e.ReadOnly)

	out, err = exec.Command(nbdinfo, "nbd://"+listen+"/other").CombinedOutput()
	assert.Error(t, err, "an unknown export is refused: %s", out)

	cancel()
	require.NoError(t, <-ran, "a signal ends the bridge cleanly")
}

func TestNBDArguments(t *testing.T) {
	assert.Equal(t, 2, exitCode(t, runApp(t, "--target", "shm://nowhere", "--nbd", "127.0.0.1:0", "--nsid", "0")), "nsid 0")
	err := runApp(t, "--target", fmt.Sprintf("shm://no-such-target-%d", os.Getpid()), "--nbd", "127.0.0.1:0")
	require.Error(t, err, "no target to connect to")
	assert.Contains(t, err.Error(), "connecting to")
}
