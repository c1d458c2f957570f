package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeMetrics: with --metrics, serve says where in its ready line
// and serves capsule_ metrics there until it stops.
func TestServeMetrics(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.Listeners = []string{fmt.Sprintf("shm://serve-metrics-%d", os.Getpid())}
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Namespaces = []namespaceSpec{{Kind: "ec", Name: "vol0", Size: 8 << 20}}
	cfg.Geometry.Data, cfg.Geometry.Parity = 2, 1
	cfg.ScrubRate = 0
	cfg.Metrics = "127.0.0.1:0"
	ready, stop := startServe(t, cfg)
	var addr string
	for _, f := range strings.Fields(ready) {
		if v, ok := strings.CutPrefix(f, "metrics="); ok {
			addr = v
		}
	}
	require.NotEmpty(t, addr, ready)
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	text := string(body)
	assert.Contains(t, text, `capsule_namespace_ops_total{nqn="nqn.2026-11.io.capsule:default",nsid="1",op="read"} 0`)
	assert.Contains(t, text, `capsule_device_state{device="0"`)
	assert.Contains(t, text, "capsule_fs_inodes")
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if !strings.HasPrefix(l, "#") {
			assert.True(t, strings.HasPrefix(l, "capsule_"), l)
		}
	}
	require.NoError(t, stop())
	_, err = http.Get("http://" + addr + "/metrics")
	assert.Error(t, err, "the metrics server stops with serve")
}
