package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// spdkRun returns SPDK's run script (SPDK_DIR/run, or the build beside
// the project in ../shared/tools/spdk), which runs spdk_nvme_identify,
// spdk_nvme_perf and nvmf_tgt with the libraries and hugepages they
// need.
func spdkRun(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SPDK_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "tools", "spdk")
	}
	run, err := filepath.Abs(filepath.Join(dir, "run"))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "bin", "spdk_nvme_perf")); err != nil {
		prereq.Missing(t, "SPDK's initiators are not in %s (set SPDK_DIR): %v", dir, err)
	}
	prereq.Root(t, "SPDK (hugepages)")
	return run
}

// spdkTool runs one SPDK tool and returns its output; it must exit 0.
func spdkTool(t *testing.T, run string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, run, args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// perfIOPS is the IOPS of spdk_nvme_perf's Total line.
var perfIOPS = regexp.MustCompile(`(?m)^Total\s*:\s*([0-9.]+)`)

// TestSPDKInitiators runs SPDK's initiators against `target serve` on
// NVMe/TCP, as SPDK documents them: spdk_nvme_identify must find every
// mandatory feature, and spdk_nvme_perf, with no hostnqn (it then sends
// an empty host NQN), must connect and run verified-by-status I/O with
// and without header and data digests.
func TestSPDKInitiators(t *testing.T) {
	run := spdkRun(t)
	d := startDaemon(t, "capsule target ready", "serve", "--listen", "tcp://127.0.0.1:0", "--namespace", "mem:128MiB",
		"--fs", "", "--data", t.TempDir(), "--scrub-rate", "0")
	url := strings.Split(field(d.ready, "listeners"), ",")[0]
	port := url[strings.LastIndex(url, ":")+1:]
	trid := "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:" + port

	out := spdkTool(t, run, "spdk_nvme_identify", "-r", trid+" subnqn:"+field(d.ready, "nqn"))
	assert.NotContains(t, out, "get_feature", "a feature refused")
	assert.NotContains(t, out, "failed")
	assert.Contains(t, out, "NVMe Specification Version (VS):       2.0")
	assert.Regexp(t, `SGL Keyed:\s+Not Supported`, out, "no keyed SGLs on TCP")
	assert.Regexp(t, `Namespace ID:1`, out)

	for _, digests := range [][]string{nil, {"-H", "-I"}} {
		t.Run("digests"+strings.Join(digests, ""), func(t *testing.T) {
			args := append([]string{"spdk_nvme_perf", "-r", trid, "-q", "16", "-o", "4096", "-w", "randrw", "-M", "50",
				"-t", "2", "-c", "0x2"}, digests...)
			out := spdkTool(t, run, args...)
			m := perfIOPS.FindStringSubmatch(out)
			require.NotNil(t, m, "no Total line:\n%s", out)
			iops, err := strconv.ParseFloat(m[1], 64)
			require.NoError(t, err)
			assert.Positive(t, iops, out)
			assert.NotContains(t, out, "Connect command failed", out)
		})
	}
	assert.NotContains(t, d.stderr.String(), "fatal error", "a connection terminated")
	assert.NotContains(t, d.stderr.String(), "level=ERROR")
}
