package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/internal/prereq"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// TestMetricsPrometheus starts `target serve --metrics` on loopback, does
// block and file I/O, checks the scraped text with `promtool check
// metrics`, and has a real Prometheus server scrape the target and
// answer, over its HTTP API, that the scrape is up and a capsule_ series
// holds the writes.
func TestMetricsPrometheus(t *testing.T) {
	promtool := prereq.Tool(t, "promtool")
	prometheus := prereq.Tool(t, "prometheus")
	dir := t.TempDir()
	shm := fmt.Sprintf("shm://metrics-it-%d", os.Getpid())
	d := startDaemon(t, "capsule target ready", "serve", "--listen", "tcp://127.0.0.1:0", "--listen", shm,
		"--namespace", "ec:vol0:16MiB", "--ec", "2+1", "--data", filepath.Join(dir, "data"),
		"--rpc-socket", filepath.Join(dir, "admin.sock"), "--scrub-rate", "0", "--metrics", "127.0.0.1:0")
	addr := field(d.ready, "metrics")
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), d.ready)

	// Block I/O, and a few file operations.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := host.Dial(ctx, shm, host.WithSubsystem(adminNQN), host.WithQueues(1))
	require.NoError(t, err)
	defer c.Close()
	ns, err := c.Namespace(1)
	require.NoError(t, err)
	block := bytes.Repeat([]byte("metrics "), 512) // 4 KiB
	for i := range 8 {
		_, err = ns.WriteAt(block, int64(i)*4096)
		require.NoError(t, err)
	}
	require.NoError(t, ns.Flush())
	_, err = ns.ReadAt(block, 0)
	require.NoError(t, err)
	fc, err := capfs.Dial(ctx, shm, capfs.WithSubsystem(adminNQN))
	require.NoError(t, err)
	defer fc.Close()
	require.NoError(t, fc.FS().MkdirAll("m/n", 0o755))

	// The text, as promtool reads it.
	text := scrape(t, "http://"+addr+"/metrics")
	assert.Contains(t, text, `capsule_namespace_ops_total{nqn="`+adminNQN+`",nsid="1",op="write"} 8`)
	assert.Contains(t, text, `capsule_namespace_bytes_total{nqn="`+adminNQN+`",nsid="1",op="write"} 32768`)
	assert.Contains(t, text, "# TYPE capsule_namespace_latency_seconds histogram")
	assert.Contains(t, text, `capsule_fs_ops_total{fs="files",op="mkdir"} 2`)
	assert.Contains(t, text, `capsule_device_state{device="0",path=`)
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(text)
	out, err := check.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", out)
	assert.Empty(t, strings.TrimSpace(string(out)), "promtool check metrics finds nothing to say")

	// A Prometheus server that scrapes the target every second.
	promAddr := freeLoopbackAddr(t)
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: capsule
    static_configs:
      - targets: ['%s']
`, addr)), 0o644))
	prom := startPrometheus(t, prometheus, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)
	api := "http://" + promAddr + "/api/v1/query?query="
	require.Eventually(t, func() bool {
		return queryValue(t, api+url.QueryEscape(`up{job="capsule"}`)) == "1"
	}, 60*time.Second, 250*time.Millisecond, "Prometheus never scraped the target (up==1); its log:\n%s", prom)
	q := `capsule_namespace_ops_total{job="capsule",nsid="1",op="write"}`
	assert.Equal(t, "8", queryValue(t, api+url.QueryEscape(q)), "Prometheus holds the capsule_ series")
}

// scrape GETs a metrics page.
func scrape(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port free a moment
// ago, for a server that takes its address only as a flag.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// startPrometheus runs the Prometheus server until the test ends, when
// it is stopped by pid with SIGTERM. The returned buffer collects its log.
func startPrometheus(t *testing.T, bin string, args ...string) *lockedBuffer {
	t.Helper()
	log := &lockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	return log
}

// queryValue runs an instant query against the Prometheus HTTP API and
// returns the value of its one sample, or "" when there is none (yet).
func queryValue(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		return "" // not listening yet
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil || r.Status != "success" ||
		len(r.Data.Result) != 1 {
		return ""
	}
	v, _ := r.Data.Result[0].Value[1].(string)
	return v
}
