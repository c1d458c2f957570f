package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/internal/clusternode"
	"github.com/capsule-storage/capsule/internal/devsvc"
	"github.com/capsule-storage/capsule/internal/metrics"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// checkMetricsAddr checks --metrics: "" (off) or HOST:PORT, the port a
// number (0 picks a free one).
func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics %s: want HOST:PORT, such as 127.0.0.1:9464", addr)
	}
	var n int
	if _, err := fmt.Sscanf(port, "%d", &n); err != nil || n < 0 || n > 65535 || fmt.Sprint(n) != port {
		return fmt.Errorf("--metrics %s: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

// metricsShutdown bounds how long stopping the metrics server waits for
// a scrape in progress.
const metricsShutdown = 2 * time.Second

// serveMetrics serves /metrics on addr over HTTP, read from the target,
// the admin service's store and file namespaces, and the scrubber, until
// stop is called. It returns the address it listens on.
func serveMetrics(addr string, t *target.Target, svc *admin.Service, scrubber *atomic.Pointer[backgroundScrub],
	node *atomic.Pointer[clusternode.Node], log *slog.Logger) (bound string, stop func(), err error) {
	reg, err := metrics.NewRegistry(metrics.Sources{
		Target:      t,
		Store:       svc.Store,
		FileSystems: svc.FileSystems,
		Scrub: func() *metrics.ScrubStats {
			if sc := scrubber.Load(); sc != nil {
				return sc.Metrics()
			}
			return nil
		},
		Cluster: func() *metrics.ClusterStats {
			if n := node.Load(); n != nil {
				return clusterMetrics(n)
			}
			return nil
		},
	})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(reg))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdown)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}

// clusterMetrics reads a cluster node's counters for the metrics.
func clusterMetrics(n *clusternode.Node) *metrics.ClusterStats {
	st := &metrics.ClusterStats{}
	st.RebuildsFinished, st.RebuiltBytes = n.RebuildTotals()
	index := map[string]int{}
	// volume returns the entry of a volume, valid until the next call.
	volume := func(name string, epoch int64) *metrics.ClusterVolume {
		i, ok := index[name]
		if !ok {
			i = len(st.Volumes)
			index[name] = i
			st.Volumes = append(st.Volumes, metrics.ClusterVolume{Name: name, Epoch: epoch})
		}
		return &st.Volumes[i]
	}
	for _, io := range n.ShardIO() {
		v := volume(io.Volume, io.Epoch)
		sh := metrics.ClusterShard{Position: io.Position, Device: io.Device.String()}
		for k, ks := range io.Kinds {
			sh.Ops = append(sh.Ops, metrics.ClusterShardOps{Op: devsvc.Kind(k).String(), Ops: ks.Ops, Errors: ks.Errors,
				Bytes: ks.Bytes, Seconds: ks.Time.Seconds()})
		}
		v.Shards = append(v.Shards, sh)
	}
	for _, r := range n.Rebuilds() {
		v := volume(r.Volume, 0)
		v.Rebuild = &metrics.ClusterRebuild{Position: r.Position, To: r.To.String(), Stripes: r.Stripes, Done: r.Done, Bytes: r.Bytes}
	}
	return st
}
