package integration

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/internal/prereq"
)

// clusterNode is a `target serve --cluster-node` process.
type clusterNode struct {
	id   string
	d    *daemon
	addr string // its NVMe/TCP listener
	sock string // its admin socket
}

func startClusterNode(t *testing.T, id, dir string, etcd ...string) *clusterNode {
	t.Helper()
	data := filepath.Join(dir, id)
	args := []string{"serve", "--listen", "tcp://127.0.0.1:0", "--data", data, "--namespace", "mem:16MiB", "--fs", "",
		"--scrub-rate", "0", "--cluster-node", id, "--head-ttl", "2s", "--metrics", "127.0.0.1:0"}
	if len(etcd) == 0 {
		args = append(args, "--etcd-listen", "http://127.0.0.1:0")
	}
	for _, e := range etcd {
		args = append(args, "--etcd", e)
	}
	d := startDaemon(t, "capsule target ready", args...)
	return &clusterNode{id: id, d: d, addr: field(d.ready, "listeners"), sock: field(d.ready, "rpc")}
}

// rpc calls a method on the node's admin socket and decodes the result.
func (n *clusterNode) rpc(t *testing.T, method, params string, out any) {
	t.Helper()
	args := []string{"rpc", "-s", n.sock, method}
	if params != "" {
		args = append(args, params)
	}
	b, err := exec.Command(filepath.Join(binDir, "target"), args...).CombinedOutput()
	require.NoError(t, err, "target rpc %s: %s", method, b)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), "%s", b)
	}
}

// clusterHead waits until a node other than not heads vol and serves
// it (its own status lists it: its subsystem is up).
func clusterHead(t *testing.T, nodes map[string]*clusterNode, vol, not string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for id, n := range nodes {
			if id == not {
				continue
			}
			var st struct{ Serving []string }
			n.rpc(t, "cluster_get_status", "", &st)
			if slices.Contains(st.Serving, vol) {
				return id
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no node serves %s", vol)
	return ""
}

// TestClusterThreeNodes starts three cluster nodes on loopback (the first
// with the embedded etcd), creates a 2+1 volume over them, writes it
// with fio (verified) through its head, kills the head with SIGKILL, and
// verifies every byte through the node that takes over, with the dead
// node's device missing.
func TestClusterThreeNodes(t *testing.T) {
	engine := fioEngine(t)
	dir := t.TempDir()
	n0 := startClusterNode(t, "n0", dir)
	etcd := field(n0.d.ready, "etcd")
	require.NotEmpty(t, etcd)
	nodes := map[string]*clusterNode{"n0": n0}
	for _, id := range []string{"n1", "n2"} {
		nodes[id] = startClusterNode(t, id, dir, strings.Split(etcd, ",")...)
	}
	// n0 runs the etcd, so the head to kill must be another node: take a
	// volume name whose preferred head is not n0 (the nodes' devices are
	// on one file system, so they weigh the same in the ranking).
	var peers []cluster.Node
	for _, id := range []string{"n0", "n1", "n2"} {
		peers = append(peers, cluster.Node{ID: id, State: cluster.Active, Devices: []cluster.Device{{ID: "d0", Capacity: 1 << 40}}})
	}
	vol := ""
	for i := 1; vol == ""; i++ {
		if name := fmt.Sprintf("vol%d", i); cluster.Rank(name, peers)[0].Node != "n0" {
			vol = name
		}
	}
	n0.rpc(t, "cluster_volume_create", fmt.Sprintf(`{"name":%q,"geometry":"2+1","size":134217728}`, vol), nil)
	head := clusterHead(t, nodes, vol, "")
	require.NotEqual(t, "n0", head, "the preferred head serves the volume")
	nqn := "--nqn=nqn.2026-12.io.capsule:volume:" + vol
	job := []string{"--name=w", "--rw=randwrite", "--bs=64k", "--size=32M", "--iodepth=8"}
	out, err := engineFio(t, engine, nodes[head].addr, append(job, nqn, "--do_verify=1", "--fsync_on_close=1")...)
	require.NoError(t, err, out)

	// The head's metrics count its store's I/O to every shard's device,
	// and pass promtool.
	text := scrape(t, "http://"+field(nodes[head].d.ready, "metrics")+"/metrics")
	for _, id := range []string{"n0", "n1", "n2"} {
		require.Regexp(t, `capsule_cluster_shard_bytes_total\{device="`+id+`/d0",op="write",position="\d",volume="`+vol+`"\} [1-9]`, text)
	}
	require.Contains(t, text, `capsule_cluster_volume_epoch{volume="`+vol+`"}`)
	require.Contains(t, text, "capsule_cluster_rebuilt_bytes_total 0")
	check := exec.Command(prereq.Tool(t, "promtool"), "check", "metrics")
	check.Stdin = strings.NewReader(text)
	b, err := check.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", b)

	require.NoError(t, nodes[head].d.cmd.Process.Kill())
	<-nodes[head].d.exited
	nodes[head].d.stopped.Do(func() {})
	next := clusterHead(t, nodes, vol, head)
	out, err = engineFio(t, engine, nodes[next].addr, append(job, nqn, "--verify_only=1")...)
	require.NoError(t, err, "verify through %s after %s was killed:\n%s", next, head, out)
	t.Logf("head %s killed; every byte verified through %s", head, next)
}
