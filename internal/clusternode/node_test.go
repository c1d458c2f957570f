package clusternode

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/internal/devsvc"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/target"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

type testNode struct {
	id   string
	addr string
	tgt  *target.Target
	node *Node
	cli  *cluster.Map
}

func (tn *testNode) stop() {
	if tn.node != nil {
		tn.node.Close()
		tn.tgt.Close()
		tn.cli.Client().Close()
		tn.node = nil
	}
}

// crash stops the node as a power loss would: its target goes, its
// etcd client goes, and its leases run out by themselves.
func (tn *testNode) crash() {
	tn.cli.Client().Close()
	tn.tgt.Close()
	tn.node.cancel()
	tn.node = nil
}

func logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(writer{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type writer struct{ t testing.TB }

func (w writer) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func startNode(t testing.TB, endpoints []string, id, dir string) *testNode {
	return startNodeWith(t, endpoints, id, dir, func(*Config) {})
}

func startNodeWith(t testing.TB, endpoints []string, id, dir string, tune func(*Config)) *testNode {
	t.Helper()
	tgt, err := target.New()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr, err := tgt.Listen(ctx, "tcp://127.0.0.1:0")
	require.NoError(t, err)
	cli, err := cluster.Connect(endpoints)
	require.NoError(t, err)
	m := cluster.New(cli, "/"+t.Name()+"/")
	cfg := Config{Map: m, ID: id, Devices: []Device{{ID: "d0", Dir: filepath.Join(dir, id, "d0")}},
		Target: tgt, Addrs: []string{addr}, HeadTTL: 2 * time.Second, DeviceTimeout: time.Second, Log: logger(t),
		MaintainEvery: 200 * time.Millisecond}
	tune(&cfg)
	n, err := Start(ctx, cfg)
	require.NoError(t, err)
	tn := &testNode{id: id, addr: addr, tgt: tgt, node: n, cli: m}
	t.Cleanup(tn.stop)
	return tn
}

// headOf waits until some node serves vol and returns it.
func headOf(t *testing.T, nodes []*testNode, vol string, not string) *testNode {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.node != nil && n.id != not && len(n.node.Serving()) > 0 && n.node.Serving()[0] == vol {
				return n
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no node serves %s", vol)
	return nil
}

// TestClusterFailover: three nodes with a device each hold a 2+1 volume.
// A host writes through the head; the head crashes; another node takes
// the volume once the lease runs out, opens the store with one device
// gone, and every flushed byte reads back through it.
func TestClusterFailover(t *testing.T) {
	e, err := cluster.StartEmbedded(cluster.EmbedOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(e.Close) // after the nodes' cleanups, which still talk to it
	dir := t.TempDir()
	var nodes []*testNode
	for i := range 3 {
		nodes = append(nodes, startNode(t, e.Endpoints(), fmt.Sprintf("n%d", i), dir))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = nodes[0].cli.CreateVolume(ctx, cluster.Volume{Name: "v", Geometry: "2+1", Size: 16 << 20})
	require.NoError(t, err)

	head := headOf(t, nodes, "v", "")
	write := func(h *testNode) []byte {
		c, err := host.Dial(ctx, h.addr, host.WithSubsystem(VolumeNQN("v")))
		require.NoError(t, err)
		defer c.Close()
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		data := make([]byte, 4<<20)
		r := rand.New(rand.NewPCG(7, 7))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		_, err = ns.WriteAt(data, 1<<20)
		require.NoError(t, err)
		require.NoError(t, ns.Flush())
		return data
	}
	read := func(h *testNode, want []byte) {
		c, err := host.Dial(ctx, h.addr, host.WithSubsystem(VolumeNQN("v")))
		require.NoError(t, err)
		defer c.Close()
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		got := make([]byte, len(want))
		_, err = ns.ReadAt(got, 1<<20)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "the volume reads back other bytes through %s", h.id)
	}
	data := write(head)
	read(head, data)

	head.crash()
	next := headOf(t, nodes, "v", head.id)
	require.NotEqual(t, head.id, next.id)
	read(next, data)
	info, err := next.cli.HeadOf(ctx, "v")
	require.NoError(t, err)
	require.Equal(t, next.id, info.Node)
}

// TestClusterMultipath: every node serves the volume's subsystem, the
// head's path Optimized and the others Inaccessible, with controller IDs
// of their own, and each node's discovery log lists every node's path. A
// host connected to all three (host.DialMultipath) writes while the head
// stops and while the next head crashes; no error reaches it, and every
// byte it wrote reads back. The volume is 2+2 on five nodes, so that it
// survives the two losses.
func TestClusterMultipath(t *testing.T) {
	e, err := cluster.StartEmbedded(cluster.EmbedOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	dir := t.TempDir()
	var nodes []*testNode
	var urls []string
	for i := range 5 {
		nodes = append(nodes, startNode(t, e.Endpoints(), fmt.Sprintf("n%d", i), dir))
		urls = append(urls, nodes[i].addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err = nodes[0].cli.CreateVolume(ctx, cluster.Volume{Name: "v", Geometry: "2+2", Size: 16 << 20})
	require.NoError(t, err)
	head := headOf(t, nodes, "v", "")

	// Discovery through any node finds every path.
	require.Eventually(t, func() bool {
		entries, err := host.Discover(ctx, nodes[1].addr)
		if err != nil {
			return false
		}
		var paths []string
		for _, e := range entries {
			if e.SUBNQN == VolumeNQN("v") {
				u, _ := host.EntryURL(e)
				paths = append(paths, u)
			}
		}
		slices.Sort(paths)
		want := slices.Sorted(slices.Values(urls))
		return slices.Equal(want, paths)
	}, 10*time.Second, 100*time.Millisecond, "node n1's discovery log lists the volume on every node")

	m, err := host.DialMultipath(ctx, urls, host.WithSubsystem(VolumeNQN("v")), host.WithQueues(1),
		host.WithCtrlLossTimeout(30*time.Second), host.WithReconnectDelay(100*time.Millisecond, time.Second))
	require.NoError(t, err)
	defer m.Close()
	ns, err := m.Namespace(1)
	require.NoError(t, err)
	ids := map[uint16]string{}
	for _, p := range m.Paths() {
		require.NotNil(t, p.Controller, p.URL)
		info, err := p.Controller.Info()
		require.NoError(t, err)
		id := info.CNTLID
		require.NotContains(t, ids, id, "%s and %s gave the same CNTLID", p.URL, ids[id])
		ids[id] = p.URL
	}
	cur, ok := ns.CurrentPath()
	if ok {
		require.Equal(t, head.addr, cur, "the I/O goes to the head")
	}

	const block = 64 << 10
	want := make([]byte, ns.Size())
	r := rand.New(rand.NewPCG(3, 4))
	write := func(count int) {
		for range count {
			off := int64(r.IntN(int(ns.Size()/block))) * block
			p := make([]byte, block)
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			_, err := ns.WriteAt(p, off)
			require.NoError(t, err)
			copy(want[off:], p)
		}
		require.NoError(t, ns.Flush())
	}
	check := func() {
		got := make([]byte, len(want))
		_, err := ns.ReadAt(got, 0)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "the volume reads back other bytes")
	}
	write(50)
	// The head counts what its store sent to each shard's device.
	ios := head.node.ShardIO()
	require.Len(t, ios, 4)
	for _, io := range ios {
		require.NotNil(t, io.Kinds, "position %d", io.Position)
		w := io.Kinds[devsvc.KindWrite]
		require.Positive(t, w.Ops, "writes to position %d", io.Position)
		require.Positive(t, w.Bytes)
		require.Positive(t, w.Time)
		require.Positive(t, io.Kinds[devsvc.KindSync].Ops)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(200 * time.Millisecond)
		head.stop() // as at SIGTERM: the head is released at once
	}()
	write(200)
	<-done
	next := headOf(t, nodes, "v", head.id)
	write(50)
	check()
	cur, _ = ns.CurrentPath()
	require.Equal(t, next.addr, cur, "the I/O follows the head")

	go func() {
		time.Sleep(200 * time.Millisecond)
		next.crash() // the lease runs out first
	}()
	write(200)
	check()
}
