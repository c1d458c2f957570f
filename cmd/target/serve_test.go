package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

func TestParseNamespaceSpec(t *testing.T) {
	for in, want := range map[string]namespaceSpec{
		"mem:1GiB":                  {Kind: "mem", Size: 1 << 30},
		"mem:512MiB":                {Kind: "mem", Size: 512 << 20},
		"file:disk.img":             {Kind: "file", Path: "disk.img"},
		"file:disk.img:10GiB":       {Kind: "file", Path: "disk.img", Size: 10 << 30},
		"file:/dev/nvme0n1":         {Kind: "file", Path: "/dev/nvme0n1"},
		"file:/srv/a:b/disk.img":    {Kind: "file", Path: "/srv/a:b/disk.img"},
		"file:/srv/a:b/disk.img:4k": {Kind: "file", Path: "/srv/a:b/disk.img", Size: 4096},
	} {
		got, err := parseNamespaceSpec(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "mem", "mem:", "mem:0", "mem:lots", "file:", "nvme:1GiB", "file:x:0", "1GiB"} {
		_, err := parseNamespaceSpec(bad)
		assert.Error(t, err, bad)
	}
}

func TestLocalListener(t *testing.T) {
	for url, want := range map[string]bool{
		"shm://capsule":             true,
		"iwarp://127.0.0.1:4420":    true,
		"iwarp://[::1]:4420":        true,
		"iwarp://localhost:4420":    true,
		"fault+iwarp://127.0.0.1:1": true,
		"iwarp://0.0.0.0:4420":      false,
		"iwarp://10.1.2.3:4420":     false,
		"rdma://192.0.2.1:4420":     false,
		"iwarp://target:4420":       false,
		"iwarp://127.0.0.1":         false,
	} {
		assert.Equal(t, want, localListener(url), url)
	}
}

// parseServe runs the serve command's flag handling on args and returns
// the configuration serve would run with.
func parseServe(t *testing.T, args ...string) (serveConfig, error) {
	var got serveConfig
	app := &cli.App{
		Commands:       []*cli.Command{serveCommand(func(_ context.Context, _ io.Writer, cfg serveConfig) error { got = cfg; return nil })},
		Writer:         io.Discard,
		ErrWriter:      io.Discard,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(append([]string{"target", "serve"}, args...))
	return got, err
}

func TestServeFlags(t *testing.T) {
	cfg, err := parseServe(t)
	require.NoError(t, err)
	want := defaultServeConfig()
	want.AllowAnyHost = true // both default listeners are local
	assert.Equal(t, want, cfg)
	assert.Equal(t, []string{"iwarp://127.0.0.1:4420", "shm://capsule"}, cfg.Listeners)
	assert.Equal(t, []namespaceSpec{{Kind: "mem", Size: 1 << 30}}, cfg.Namespaces)
	assert.Equal(t, "nqn.2026-11.io.capsule:default", cfg.NQN)
	assert.Equal(t, "./data", cfg.DataDir)
	assert.Equal(t, 512, cfg.BlockSize)

	cfg, err = parseServe(t, "--listen", "iwarp://0.0.0.0:4420", "--listen", "shm://other",
		"--namespace", "mem:512MiB", "--namespace", "file:disk.img:1GiB", "--data", "/srv/capsule",
		"--nqn", "nqn.2026-11.io.capsule:box", "--allow-host", "nqn.2014-08.org.nvmexpress:uuid:1",
		"--allow-host", "nqn.2014-08.org.nvmexpress:uuid:2", "--block-size", "4096")
	require.NoError(t, err)
	assert.Equal(t, serveConfig{
		Listeners:  []string{"iwarp://0.0.0.0:4420", "shm://other"},
		DataDir:    "/srv/capsule",
		Namespaces: []namespaceSpec{{Kind: "mem", Size: 512 << 20}, {Kind: "file", Path: "disk.img", Size: 1 << 30}},
		NQN:        "nqn.2026-11.io.capsule:box",
		AllowHosts: []string{"nqn.2014-08.org.nvmexpress:uuid:1", "nqn.2014-08.org.nvmexpress:uuid:2"},
		BlockSize:  4096,
	}, cfg, "an allow-list, so not any host")

	cfg, err = parseServe(t, "--listen", "iwarp://0.0.0.0:4420", "--allow-any-host")
	require.NoError(t, err)
	assert.True(t, cfg.AllowAnyHost)
}

func TestServeFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "iwarp://0.0.0.0:4420"}, "not on loopback"},
		{[]string{"--listen", "iwarp://10.0.0.1:4420", "--listen", "shm://x"}, "--allow-host"},
		{[]string{"--listen", "nvme://127.0.0.1:1"}, "--listen"},
		{[]string{"--namespace", "disk:1GiB"}, "kind"},
		{[]string{"--namespace", "mem:1000"}, "multiple of the 512-byte block"},
		{[]string{"--namespace", "mem:1MiB", "--block-size", "1024"}, "--block-size"},
		{[]string{"--namespace", "mem:6KiB", "--block-size", "4096"}, "multiple of the 4096-byte block"},
		{[]string{"--nqn", ""}, "--nqn"},
		{[]string{"--nqn", "nqn.2014-08.org.nvmexpress.discovery"}, "--nqn"},
		{[]string{"--allow-host", strings.Repeat("x", 300)}, "--allow-host"},
		{[]string{"stray"}, "no arguments"},
	} {
		_, err := parseServe(t, tc.args...)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}
}

func TestServeCommandListed(t *testing.T) {
	assert.NotNil(t, newApp().Command("serve"))
}

// syncBuffer is a bytes.Buffer safe to read while serve writes it.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeRunsAndStops runs serve in the test process: it opens a file
// namespace under --data, prints the ready line with the real listener
// addresses, and returns nil when its context ends.
func TestServeRunsAndStops(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	shm := fmt.Sprintf("shm://serve-test-%d", os.Getpid())
	cfg := serveConfig{
		Listeners:  []string{"iwarp://127.0.0.1:0", shm},
		DataDir:    dataDir,
		Namespaces: []namespaceSpec{{Kind: "mem", Size: 8 << 20}, {Kind: "file", Path: "ns2.img", Size: 4 << 20}},
		NQN:        "nqn.2026-11.io.capsule:servetest",
		BlockSize:  4096,
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, out, cfg) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "\n") }, 30*time.Second, time.Millisecond)
	line := strings.TrimSpace(out.String())
	require.True(t, strings.HasPrefix(line, "capsule target ready "), line)
	fields := map[string]string{}
	for _, f := range strings.Fields(line)[3:] {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	listeners := strings.Split(fields["listeners"], ",")
	require.Len(t, listeners, 2)
	assert.Regexp(t, `^iwarp://127\.0\.0\.1:[1-9][0-9]*$`, listeners[0])
	assert.Equal(t, shm, listeners[1])
	assert.Equal(t, "nqn.2026-11.io.capsule:servetest", fields["nqn"])
	assert.Equal(t, "nqn.2014-08.org.nvmexpress.discovery", fields["discovery"])
	st, err := os.Stat(filepath.Join(dataDir, "ns2.img"))
	require.NoError(t, err)
	assert.Equal(t, int64(4<<20), st.Size())

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}

func TestServeRefusesBadNamespace(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.Listeners = []string{fmt.Sprintf("shm://serve-bad-%d", os.Getpid())}
	cfg.Namespaces = []namespaceSpec{{Kind: "file", Path: filepath.Join(t.TempDir(), "missing.img")}}
	err := serve(context.Background(), io.Discard, cfg)
	require.Error(t, err, "a missing file with no size cannot be created")
}
