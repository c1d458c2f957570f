package integration

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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

// TestClusterSPDK looks at a three-node cluster's volume with SPDK's
// spdk_nvme_identify and spdk_nvme_perf, a host capsule did not write:
// any node's discovery log lists the volume on all three nodes (and
// refers to the others' discovery subsystems) and stays the same while
// nothing changes; each path has the same serial number and size; the
// ANA log page says Optimized (1) on the head and Inaccessible (3)
// elsewhere; and I/O through the head runs.
func TestClusterSPDK(t *testing.T) {
	run := spdkRun(t)
	dir := t.TempDir()
	n0 := startClusterNode(t, "n0", dir)
	etcd := strings.Split(field(n0.d.ready, "etcd"), ",")
	nodes := map[string]*clusterNode{"n0": n0}
	for _, id := range []string{"n1", "n2"} {
		nodes[id] = startClusterNode(t, id, dir, etcd...)
	}
	n0.rpc(t, "cluster_volume_create", `{"name":"vol","geometry":"2+1","size":67108864}`, nil)
	head := clusterHead(t, nodes, "vol", "")
	b, err := exec.Command(filepath.Join(binDir, "target"), "cluster", "status", "-s", n0.sock, "--wait", "--timeout", "60s").CombinedOutput()
	require.NoError(t, err, "%s", b)

	trid := func(n *clusterNode, nqn string) string {
		u := strings.TrimPrefix(n.addr, "tcp://")
		i := strings.LastIndexByte(u, ':')
		return fmt.Sprintf("trtype:TCP adrfam:IPv4 traddr:%s trsvcid:%s subnqn:%s", u[:i], u[i+1:], nqn)
	}
	const volNQN = "nqn.2026-12.io.capsule:volume:vol"
	genctr := regexp.MustCompile(`Generation Counter:\s+(\d+)`)
	disc := spdkTool(t, run, "spdk_nvme_identify", "-r", trid(nodes["n1"], "nqn.2014-08.org.nvmexpress.discovery"))
	for _, n := range nodes {
		port := n.addr[strings.LastIndexByte(n.addr, ':')+1:]
		require.Regexp(t, `Transport Service Identifier:\s+`+port+`\s+NVM Subsystem Qualified Name:\s+`+regexp.QuoteMeta(volNQN), disc,
			"n1's discovery log lists the volume on %s", n.id)
	}
	require.Contains(t, disc, "Referral to a discovery service")
	time.Sleep(2 * time.Second)
	again := spdkTool(t, run, "spdk_nvme_identify", "-r", trid(nodes["n1"], "nqn.2014-08.org.nvmexpress.discovery"))
	require.Equal(t, genctr.FindStringSubmatch(disc)[1], genctr.FindStringSubmatch(again)[1],
		"the discovery log's generation stays while nothing changes")

	serial := regexp.MustCompile(`Serial Number:\s+(\S+)`)
	var serials []string
	for id, n := range nodes {
		out := spdkTool(t, run, "spdk_nvme_identify", "-r", trid(n, volNQN))
		want := "3"
		if id == head {
			want = "1"
		}
		require.Regexp(t, `ANA Group ID\s+:\s+1\n(.*\n){0,3}\s+ANA State\s+:\s+`+want+`\n`, out, "the ANA state through %s (head %s)", id, head)
		require.Regexp(t, `Size \(in LBAs\):\s+16384 `, out)
		serials = append(serials, serial.FindStringSubmatch(out)[1])
	}
	require.Equal(t, serials[0], serials[1])
	require.Equal(t, serials[0], serials[2])

	out := spdkTool(t, run, "spdk_nvme_perf", "-r", trid(nodes[head], volNQN), "-q", "8", "-o", "4096", "-w", "randrw",
		"-M", "50", "-t", "2", "-c", "0x2")
	m := perfIOPS.FindStringSubmatch(out)
	require.NotNil(t, m, "no Total line:\n%s", out)
	iops, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	require.Positive(t, iops, out)
}
