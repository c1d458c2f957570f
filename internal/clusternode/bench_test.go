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
// benchCluster starts six nodes in this process with a 4+2 volume of
// size bytes and returns its head and the namespace a host sees.
func benchCluster(b *testing.B, size int64) (*testNode, *host.Namespace) {
	e, err := cluster.StartEmbedded(cluster.EmbedOptions{Dir: b.TempDir()})
	require.NoError(b, err)
	b.Cleanup(e.Close)
	dir := b.TempDir()
	var nodes []*testNode
	for i := range 6 {
		nodes = append(nodes, startNode(b, e.Endpoints(), fmt.Sprintf("n%d", i), dir))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err = nodes[0].cli.CreateVolume(ctx, cluster.Volume{Name: "v", Geometry: "4+2", Size: uint64(size)})
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
	b.Cleanup(func() { c.Close() })
	ns, err := c.Namespace(1)
	require.NoError(b, err)
	return head, ns
}

// run does b.N requests of fn, depth at a time, each given its index.
func run(b *testing.B, depth int, fn func(buf []byte, i int) error, block int) {
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
				if err := fn(buf, i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// reportShardIO reports the head's commands to the shards' devices per
// op, and their mean time.
func reportShardIO(b *testing.B, head *testNode) {
	var kinds [4]devsvc.KindStats
	for _, io := range head.node.ShardIO() {
		for k, ks := range io.Kinds {
			kinds[k].Ops += ks.Ops
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

// BenchmarkClusterWrite writes 1 MiB blocks, eight at a time, to a 4+2
// volume of six nodes in this process, over NVMe/TCP on loopback: the
// whole cluster's CPU per byte in one profile (go test -cpuprofile), and
// the head's commands to the shards per write.
func BenchmarkClusterWrite(b *testing.B) {
	const size, block = 256 << 20, 1 << 20
	head, ns := benchCluster(b, size)
	b.SetBytes(block)
	b.ResetTimer()
	run(b, 8, func(buf []byte, i int) error {
		_, err := ns.WriteAt(buf, int64(i%(size/block))*block)
		return err
	}, block)
	b.StopTimer()
	reportShardIO(b, head)
}

// BenchmarkClusterRandRead reads 4 KiB at random, 32 at a time, from 64
// MiB of a 4+2 volume of six nodes written first.
func BenchmarkClusterRandRead(b *testing.B) {
	const size, region, block = 256 << 20, 64 << 20, 4096
	head, ns := benchCluster(b, size)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < region; off += int64(len(buf)) {
		_, err := ns.WriteAt(buf, off)
		require.NoError(b, err)
	}
	require.NoError(b, ns.Flush())
	b.SetBytes(block)
	b.ResetTimer()
	run(b, 32, func(buf []byte, i int) error {
		off := int64(uint64(i)*2654435761%(region/block)) * block
		_, err := ns.ReadAt(buf, off)
		return err
	}, block)
	b.StopTimer()
	reportShardIO(b, head)
}
