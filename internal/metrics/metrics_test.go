package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/server"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

const testNQN = "nqn.2026-11.io.capsule:metrics-test"

// fixture is a target with a memory namespace, listening on shm, an
// erasure-coded store with a file namespace, and a host connected.
type fixture struct {
	t     *target.Target
	store *chunkstore.Store
	fs    *server.Server
	host  *host.Controller
	reg   *prometheus.Registry
}

func newFixture(t *testing.T) *fixture {
	log := slog.New(slog.DiscardHandler)
	tg, err := target.New(target.WithLogger(log))
	require.NoError(t, err)
	t.Cleanup(func() { tg.Close() })
	sub, err := tg.AddSubsystem(target.SubsystemConfig{NQN: testNQN, AllowAnyHost: true})
	require.NoError(t, err)
	mem, err := blockdev.NewMemory(4 << 20)
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: mem, BlockSize: 512})
	require.NoError(t, err)
	url, err := tg.Listen(context.Background(), fmt.Sprintf("shm://metrics-test-%d", os.Getpid()))
	require.NoError(t, err)

	dir := t.TempDir()
	store, err := chunkstore.OpenOrCreateDirs(chunkstore.DeviceDirs(dir, chunkstore.DefaultGeometry),
		chunkstore.WithLogger(log))
	require.NoError(t, err)
	fsrv, err := server.Open(store, server.Options{})
	require.NoError(t, err)
	t.Cleanup(func() {
		fsrv.Close()
		store.Close()
	})

	h, err := host.Dial(context.Background(), url, host.WithSubsystem(testNQN), host.WithLogger(log))
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })

	scrub := &ScrubStats{Passes: 2, Checked: 10, Damaged: 1, Repaired: 1, LastPassEnd: time.Unix(1700000000, 0)}
	reg, err := NewRegistry(Sources{
		Target:      tg,
		Store:       func() *chunkstore.Store { return store },
		FileSystems: func() map[string]*server.Server { return map[string]*server.Server{"files": fsrv} },
		Scrub:       func() *ScrubStats { return scrub },
		Cluster: func() *ClusterStats {
			return &ClusterStats{RebuildsFinished: 1, RebuiltBytes: 3 << 20, Volumes: []ClusterVolume{{
				Name: "vol", Epoch: 42,
				Shards: []ClusterShard{{Position: 2, Device: "n3/d0", Ops: []ClusterShardOps{
					{Op: "write", Ops: 10, Errors: 1, Bytes: 40960, Seconds: 0.5}}}},
				Rebuild: &ClusterRebuild{Position: 1, To: "n5/d0", Stripes: 100, Done: 40, Bytes: 1 << 20},
			}}}
		},
	})
	require.NoError(t, err)
	return &fixture{t: tg, store: store, fs: fsrv, host: h, reg: reg}
}

func (f *fixture) io(t *testing.T) {
	ns, err := f.host.Namespace(1)
	require.NoError(t, err)
	buf := make([]byte, 8192)
	for i := range 3 {
		_, err := ns.WriteAt(buf, int64(i)*8192)
		require.NoError(t, err)
	}
	_, err = ns.ReadAt(buf[:4096], 0)
	require.NoError(t, err)
	require.NoError(t, ns.Flush())
}

// value finds the metric of family name with the labels, or fails.
func value(t *testing.T, fams []*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	f.io(t)
	// The store's own I/O: a FUA write to a volume writes a stripe, a
	// shard on every device.
	v, err := f.store.CreateVolume("metrics", 1<<20)
	require.NoError(t, err)
	_, err = v.WriteAtFlags(make([]byte, 4096), 0, chunkstore.FUA)
	require.NoError(t, err)
	fams, err := f.reg.Gather()
	require.NoError(t, err)
	for _, fam := range fams {
		assert.True(t, strings.HasPrefix(fam.GetName(), Prefix), fam.GetName())
	}
	ns := map[string]string{"nqn": testNQN, "nsid": "1"}
	op := func(o string) map[string]string {
		l := map[string]string{"op": o}
		for k, v := range ns {
			l[k] = v
		}
		return l
	}
	assert.Equal(t, 3.0, value(t, fams, "capsule_namespace_ops_total", op("write")).GetCounter().GetValue())
	assert.Equal(t, 3.0*8192, value(t, fams, "capsule_namespace_bytes_total", op("write")).GetCounter().GetValue())
	assert.Equal(t, 4096.0, value(t, fams, "capsule_namespace_bytes_total", op("read")).GetCounter().GetValue())
	assert.Equal(t, 1.0, value(t, fams, "capsule_namespace_ops_total", op("flush")).GetCounter().GetValue())
	h := value(t, fams, "capsule_namespace_latency_seconds", op("write")).GetHistogram()
	assert.Equal(t, uint64(3), h.GetSampleCount())
	assert.Positive(t, h.GetSampleSum())
	assert.Len(t, h.GetBucket(), target.LatencyBuckets)
	assert.Equal(t, float64(4<<20), value(t, fams, "capsule_namespace_size_bytes", ns).GetGauge().GetValue())

	assert.Equal(t, 1.0, value(t, fams, "capsule_controllers", map[string]string{"nqn": testNQN}).GetGauge().GetValue())
	conns := value(t, fams, "capsule_controller_connections", map[string]string{"nqn": testNQN}).GetGauge().GetValue()
	assert.GreaterOrEqual(t, conns, 2.0, "the admin queue and at least one I/O queue")
	value(t, fams, "capsule_queue_depth", map[string]string{"nqn": testNQN, "qid": "1"})
	assert.Equal(t, 1.0, value(t, fams, "capsule_controller_connects_total", map[string]string{"nqn": testNQN}).GetCounter().GetValue())
	assert.Equal(t, 0.0, value(t, fams, "capsule_controller_reconnects_total", map[string]string{"nqn": testNQN}).GetCounter().GetValue())

	assert.Equal(t, 1.0, value(t, fams, "capsule_device_state", map[string]string{"device": "0", "state": "healthy"}).GetGauge().GetValue())
	assert.Equal(t, 0.0, value(t, fams, "capsule_device_state", map[string]string{"device": "0", "state": "failed"}).GetGauge().GetValue())
	assert.Equal(t, 0.0, value(t, fams, "capsule_store_degraded", nil).GetGauge().GetValue())
	// The FUA write went to the journal of M+1 devices, not necessarily 0.
	var writes, written float64
	for d := range 6 {
		dev := map[string]string{"device": fmt.Sprint(d), "op": "write"}
		writes += value(t, fams, "capsule_device_ops_total", dev).GetCounter().GetValue()
		written += value(t, fams, "capsule_device_bytes_total", dev).GetCounter().GetValue()
	}
	assert.Positive(t, writes)
	assert.Positive(t, written)
	assert.Equal(t, 1.0, value(t, fams, "capsule_store_journal_records_total", nil).GetCounter().GetValue())
	assert.Equal(t, 3.0*8192, value(t, fams, "capsule_store_journal_bytes_total", nil).GetCounter().GetValue())
	assert.Equal(t, 0.0, value(t, fams, "capsule_device_errors_total", map[string]string{"device": "0"}).GetCounter().GetValue())
	value(t, fams, "capsule_store_compactions_total", nil)
	value(t, fams, "capsule_store_reconstructions_total", nil)
	value(t, fams, "capsule_store_cleaner_bytes_total", nil)
	assert.Equal(t, 2.0, value(t, fams, "capsule_scrub_passes_total", nil).GetCounter().GetValue())
	assert.Equal(t, 1.0, value(t, fams, "capsule_scrub_stripes_damaged_total", nil).GetCounter().GetValue())
	assert.Equal(t, 1.7e9, value(t, fams, "capsule_scrub_last_pass_end_timestamp_seconds", nil).GetGauge().GetValue())
	value(t, fams, "capsule_fs_ops_total", map[string]string{"fs": "files", "op": "lookup"})
	value(t, fams, "capsule_fs_inodes", map[string]string{"fs": "files"})

	shard := map[string]string{"volume": "vol", "position": "2", "device": "n3/d0", "op": "write"}
	assert.Equal(t, 10.0, value(t, fams, "capsule_cluster_shard_ops_total", shard).GetCounter().GetValue())
	assert.Equal(t, 1.0, value(t, fams, "capsule_cluster_shard_errors_total", shard).GetCounter().GetValue())
	assert.Equal(t, 40960.0, value(t, fams, "capsule_cluster_shard_bytes_total", shard).GetCounter().GetValue())
	assert.Equal(t, 0.5, value(t, fams, "capsule_cluster_shard_seconds_total", shard).GetCounter().GetValue())
	assert.Equal(t, 42.0, value(t, fams, "capsule_cluster_volume_epoch", map[string]string{"volume": "vol"}).GetGauge().GetValue())
	rb := map[string]string{"volume": "vol", "position": "1", "device": "n5/d0"}
	assert.Equal(t, 100.0, value(t, fams, "capsule_cluster_rebuild_stripes", rb).GetGauge().GetValue())
	assert.Equal(t, 40.0, value(t, fams, "capsule_cluster_rebuild_stripes_done", rb).GetGauge().GetValue())
	assert.Equal(t, 1.0, value(t, fams, "capsule_cluster_rebuilds_total", nil).GetCounter().GetValue())
	assert.Equal(t, float64(3<<20), value(t, fams, "capsule_cluster_rebuilt_bytes_total", nil).GetCounter().GetValue())
}

// TestLint: the metrics pass promtool's checks (client_golang's promlint
// is what `promtool check metrics` runs).
func TestLint(t *testing.T) {
	f := newFixture(t)
	f.io(t)
	problems, err := testutil.GatherAndLint(f.reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestHandler: the handler serves the text format, without the metrics
// of the default registry.
func TestHandler(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(Handler(f.reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), "# TYPE capsule_namespace_latency_seconds histogram")
	assert.NotContains(t, string(body), "go_goroutines")
}

// TestNoStore: without a store, scrubber and file namespaces, the target's
// metrics alone.
func TestNoStore(t *testing.T) {
	tg, err := target.New(target.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer tg.Close()
	reg, err := NewRegistry(Sources{Target: tg, Store: func() *chunkstore.Store { return nil }})
	require.NoError(t, err)
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, fam := range fams {
		assert.False(t, strings.HasPrefix(fam.GetName(), "capsule_store_"), fam.GetName())
	}
	value(t, fams, "capsule_controllers", map[string]string{"nqn": "nqn.2014-08.org.nvmexpress.discovery"})
}
