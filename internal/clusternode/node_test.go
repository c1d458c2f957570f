package clusternode

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/cluster"
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

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(writer{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type writer struct{ t *testing.T }

func (w writer) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func startNode(t *testing.T, endpoints []string, id, dir string) *testNode {
	return startNodeWith(t, endpoints, id, dir, func(*Config) {})
}

func startNodeWith(t *testing.T, endpoints []string, id, dir string, tune func(*Config)) *testNode {
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
