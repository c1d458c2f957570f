package clusternode

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/internal/devsvc"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// BenchmarkClusterWrite writes 1 MiB blocks, eight at a time, to a 4+2
// volume of six nodes in this process, over NVMe/TCP on loopback: the
// whole cluster's CPU per byte in one profile (go test -cpuprofile).
func BenchmarkClusterWrite(b *testing.B) {
	e, err := cluster.StartEmbedded(cluster.EmbedOptions{Dir: b.TempDir()})
	require.NoError(b, err)
	defer e.Close()
	dir := b.TempDir()
	var nodes []*testNode
	for i := range 6 {
		nodes = append(nodes, startNode(b, e.Endpoints(), fmt.Sprintf("n%d", i), dir))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const size = 256 << 20
	_, err = nodes[0].cli.CreateVolume(ctx, cluster.Volume{Name: "v", Geometry: "4+2", Size: size})
	require.NoError(b, err)
	var head *testNode
	for head == nil {
		for _, n := range nodes {
			if s := n.node.Serving(); len(s) > 0 {
				head = n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, err := host.Dial(ctx, head.addr, host.WithSubsystem(VolumeNQN("v")), host.WithMaxTransfer(1<<20))
	require.NoError(b, err)
	defer c.Close()
	ns, err := c.Namespace(1)
	require.NoError(b, err)
	const block, depth = 1 << 20, 8
	b.SetBytes(block)
	b.ResetTimer()
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for range depth {
		wg.Go(func() {
			buf := make([]byte, block)
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= b.N {
					return
				}
				if _, err := ns.WriteAt(buf, int64(i%(size/block))*block); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	// The mean time of the head's commands to the shards' devices.
	var kinds [4]devsvc.KindStats
	for _, io := range head.node.ShardIO() {
		for k, ks := range io.Kinds {
			kinds[k].Ops += ks.Ops
			kinds[k].Bytes += ks.Bytes
			kinds[k].Time += ks.Time
		}
	}
	for k, ks := range kinds {
		if ks.Ops > 0 {
			b.ReportMetric(float64(ks.Time.Microseconds())/float64(ks.Ops), "µs/shard-"+devsvc.Kind(k).String())
			b.ReportMetric(float64(ks.Ops)/float64(b.N), "shard-"+devsvc.Kind(k).String()+"/op")
		}
	}
}
