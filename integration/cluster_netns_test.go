package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// clusterNet is a switch (a bridge in a network namespace of its own)
// and namespaces plugged into it, on 10.202.0.0/24: the cluster tests'
// machines. Cleanup deletes every namespace, after the processes in them
// are stopped (cleanups run last-registered first).
type clusterNet struct {
	t   *testing.T
	pfx string
	sw  string
	dir string // data of every process
}

func newClusterNet(t *testing.T) *clusterNet {
	t.Helper()
	requireNetns(t)
	prereq.Tool(t, "etcd")
	c := &clusterNet{t: t, pfx: fmt.Sprintf("cl%d", os.Getpid()%100000), dir: t.TempDir()}
	c.sw = c.pfx + "sw"
	ipCmd(t, "netns", "add", c.sw)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", c.sw).Run() })
	ipCmd(t, "-n", c.sw, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", c.sw, "link", "set", "br0", "up")
	return c
}

// machine makes namespace name with address 10.202.0.octet on the switch.
func (c *clusterNet) machine(name string, octet int) (ns, addr string) {
	t := c.t
	ns = c.pfx + name
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	port := fmt.Sprintf("%sp%d", c.pfx, octet)
	ipCmd(t, "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", c.sw)
	addr = fmt.Sprintf("10.202.0.%d", octet)
	ipCmd(t, "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
	ipCmd(t, "-n", ns, "link", "set", "eth0", "up")
	ipCmd(t, "-n", c.sw, "link", "set", port, "master", "br0")
	ipCmd(t, "-n", c.sw, "link", "set", port, "up")
	return ns, addr
}

// cut takes machine octet off the switch (a partition both ways); heal
// plugs it back.
func (c *clusterNet) cut(octet int) {
	ipCmd(c.t, "-n", c.sw, "link", "set", fmt.Sprintf("%sp%d", c.pfx, octet), "down")
}
func (c *clusterNet) heal(octet int) {
	ipCmd(c.t, "-n", c.sw, "link", "set", fmt.Sprintf("%sp%d", c.pfx, octet), "up")
}

// etcdCluster starts a three-member etcd cluster (Debian's etcd-server),
// each member in a namespace of its own, and returns its client URLs.
func (c *clusterNet) etcdCluster() []string {
	t := c.t
	var peers, clients []string
	for i := range 3 {
		a := fmt.Sprintf("10.202.0.%d", 101+i)
		peers = append(peers, fmt.Sprintf("e%d=http://%s:2380", i, a))
		clients = append(clients, "http://"+a+":2379")
	}
	for i := range 3 {
		ns, a := c.machine(fmt.Sprintf("e%d", i), 101+i)
		argv := inNetns(ns, "etcd", "--name", fmt.Sprintf("e%d", i), "--data-dir", filepath.Join(c.dir, fmt.Sprintf("etcd%d", i)),
			"--listen-client-urls", "http://"+a+":2379", "--advertise-client-urls", "http://"+a+":2379",
			"--listen-peer-urls", "http://"+a+":2380", "--initial-advertise-peer-urls", "http://"+a+":2380",
			"--initial-cluster", strings.Join(peers, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", c.pfx, "--log-level", "error")
		startEtcd(t, argv)
	}
	return clients
}

// startEtcd runs an etcd member until the test ends (stopped by pid).
func startEtcd(t *testing.T, argv []string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
}

// netNode is a cluster node in a namespace of its own.
type netNode struct {
	id    string
	octet int
	ns    string
	addr  string // tcp://10.202.0.N:4420
	sock  string
	d     *daemon
}

func (c *clusterNet) node(id string, octet int, etcd []string) *netNode {
	ns, a := c.machine(id, octet)
	return c.startNode(&netNode{id: id, octet: octet, ns: ns, addr: "tcp://" + a + ":4420"}, etcd)
}

// startNode starts (or starts again) n's target in its namespace.
func (c *clusterNet) startNode(n *netNode, etcd []string) *netNode {
	data := filepath.Join(c.dir, n.id)
	n.sock = filepath.Join(c.dir, n.id+".sock")
	args := []string{filepath.Join(binDir, "target"), "serve", "--listen", n.addr, "--data", data, "--namespace", "mem:16MiB",
		"--fs", "", "--scrub-rate", "0", "--allow-any-host", "--rpc-socket", n.sock, "--cluster-node", n.id, "--head-ttl", "3s"}
	for _, e := range etcd {
		args = append(args, "--etcd", e)
	}
	n.d = startCommand(c.t, "target "+n.id, "capsule target ready", inNetns(n.ns, args...))
	return n
}

func (n *netNode) kill(t *testing.T) {
	require.NoError(t, n.d.cmd.Process.Kill())
	<-n.d.exited
	n.d.stopped.Do(func() {})
}

func (n *netNode) rpc(t *testing.T, method, params string, out any) error {
	args := []string{"rpc", "-s", n.sock, "--timeout", "20s", method}
	if params != "" {
		args = append(args, params)
	}
	b, err := exec.Command(filepath.Join(binDir, "target"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("target rpc %s: %v: %s", method, err, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// netStatus is what the tests read of cluster_get_status.
type netStatus struct {
	Serving []string
	Stores  []struct {
		Volume   string
		Degraded bool
		Devices  []struct{ Device struct{ Node string } }
	}
	Rebuilds []json.RawMessage
	Volumes  []struct {
		Name   string
		Shards []struct{ Node string }
		Head   *struct{ Node string }
		Moves  []json.RawMessage
	}
}

// waitFor polls the status of the given nodes until ok says so.
func waitFor(t *testing.T, what string, d time.Duration, nodes []*netNode, ok func(map[string]netStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		all := map[string]netStatus{}
		for _, n := range nodes {
			var st netStatus
			if n.rpc(t, "cluster_get_status", "", &st) == nil {
				all[n.id] = st
			}
		}
		if ok(all) {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, d)
}

// servedBy returns the node that serves vol, from the nodes' own status.
func servedBy(all map[string]netStatus, vol string) string {
	for id, st := range all {
		if slices.Contains(st.Serving, vol) {
			return id
		}
	}
	return ""
}

// TestClusterSixNodes: six nodes in their own network namespaces and a
// three-member etcd cluster hold a 4+2 volume. A host writes it with fio
// (verified) while two nodes that hold shards are killed; two new nodes
// join, the dead ones are drained, the head rebuilds their positions on
// the new nodes, and every byte fio wrote reads back, verified; then the
// head and another shard holder are killed together, and every byte
// still reads back through a new head.
func TestClusterSixNodes(t *testing.T) {
	engine := fioEngine(t)
	c := newClusterNet(t)
	etcd := c.etcdCluster()
	var nodes []*netNode
	for i := range 6 {
		nodes = append(nodes, c.node(fmt.Sprintf("n%d", i), 11+i, etcd))
	}
	hostNS, _ := c.machine("h", 200)
	require.NoError(t, nodes[0].rpc(t, "cluster_volume_create", `{"name":"vol","geometry":"4+2","size":268435456}`, nil))
	var head string
	waitFor(t, "a head serves vol", 60*time.Second, nodes, func(all map[string]netStatus) bool {
		head = servedBy(all, "vol")
		return head != ""
	})
	byID := map[string]*netNode{}
	for _, n := range nodes {
		byID[n.id] = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs := byID[head].d.stderr.String()
			t.Logf("head %s's log, the end:\n%s", head, logs[max(0, len(logs)-6000):])
		}
	})

	// fio writes and verifies 96 MiB through the head; two other nodes
	// die while it writes.
	job := []string{"--name=w", "--ioengine=external:" + engine, "--thread=1", "--uri=" + byID[head].addr,
		"--nqn=nqn.2026-12.io.capsule:volume:vol", "--rw=randwrite", "--bs=64k", "--size=96M", "--iodepth=8", "--verify=crc32c", "--verify_state_save=0", "--verify_fatal=1", "--rate=24m"}
	fio := exec.Command("ip", append([]string{"netns", "exec", hostNS, "fio"}, append(job, "--do_verify=1", "--fsync_on_close=1")...)...)
	fio.Dir = t.TempDir()
	out := &lockedBuffer{}
	fio.Stdout, fio.Stderr = out, out
	require.NoError(t, fio.Start())
	time.Sleep(1500 * time.Millisecond)
	var dead []*netNode
	for _, n := range nodes {
		if n.id != head && len(dead) < 2 {
			dead = append(dead, n)
		}
	}
	for _, n := range dead {
		n.kill(t)
	}
	require.NoError(t, fio.Wait(), "fio while two nodes died:\n%s", out)

	// Two new nodes; the dead ones are drained; their positions move.
	for i := range 2 {
		nodes = append(nodes, c.node(fmt.Sprintf("n%d", 6+i), 17+i, etcd))
	}
	live := slices.DeleteFunc(slices.Clone(nodes), func(n *netNode) bool { return slices.Contains(dead, n) })
	for _, n := range dead {
		require.NoError(t, byID[head].rpc(t, "node_remove", fmt.Sprintf(`{"id":%q}`, n.id), nil))
	}
	waitFor(t, "the dead nodes' positions rebuilt on the new ones", 180*time.Second, live, func(all map[string]netStatus) bool {
		st, ok := all[head]
		if !ok || len(st.Rebuilds) > 0 || len(st.Volumes) != 1 || len(st.Volumes[0].Moves) > 0 || len(st.Stores) != 1 || st.Stores[0].Degraded {
			return false
		}
		for _, d := range st.Stores[0].Devices {
			if d.Device.Node == dead[0].id || d.Device.Node == dead[1].id {
				return false
			}
		}
		return true
	})
	// Every byte, read back through the head and verified.
	verify := exec.Command("ip", append([]string{"netns", "exec", hostNS, "fio"}, append(job, "--verify_only=1")...)...)
	verify.Dir = t.TempDir()
	b, err := verify.CombinedOutput()
	require.NoError(t, err, "verify after the rebuild:\n%s", b)
	for _, n := range dead {
		require.NoError(t, byID[head].rpc(t, "node_remove", fmt.Sprintf(`{"id":%q}`, n.id), nil), "the drained node leaves")
	}

	// Then the head and another shard holder die together (SIGKILL): a
	// new head serves the volume degraded, and every byte still reads
	// back, through the surviving nodes' paths.
	var holders []string
	waitFor(t, "the map names the volume's nodes", 10*time.Second, live, func(all map[string]netStatus) bool {
		st := all[head]
		if len(st.Volumes) != 1 {
			return false
		}
		holders = holders[:0]
		for _, sh := range st.Volumes[0].Shards {
			holders = append(holders, sh.Node)
		}
		return true
	})
	second := ""
	for _, id := range holders {
		if id != head {
			second = id
			break
		}
	}
	killed := []*netNode{byID[head], byID[second]}
	for _, n := range killed {
		n.kill(t)
	}
	survivors := slices.DeleteFunc(slices.Clone(live), func(n *netNode) bool { return slices.Contains(killed, n) })
	var next string
	waitFor(t, "a new head after the head and "+second+" died", 60*time.Second, survivors, func(all map[string]netStatus) bool {
		next = servedBy(all, "vol")
		return next != ""
	})
	var paths []string
	for _, n := range survivors {
		paths = append(paths, n.addr)
	}
	job[slices.IndexFunc(job, func(a string) bool { return strings.HasPrefix(a, "--uri=") })] = "--uri=" + strings.Join(paths, ",")
	verify = exec.Command("ip", append([]string{"netns", "exec", hostNS, "fio"}, append(job, "--verify_only=1")...)...)
	verify.Dir = t.TempDir()
	b, err = verify.CombinedOutput()
	require.NoError(t, err, "verify through %s after the head %s and %s died:\n%s", next, head, second, b)
}

// TestClusterPartition cuts the head of a 2+1 volume off from etcd while
// it still reaches the other nodes' devices and the host: the worst
// case for split brain. Its lease lapses, another node takes the
// volume, and the host writes new data through it while it keeps
// writing through the old head too. The old head must refuse those
// writes (its lease check, then the devices' epoch fence), so that,
// after the partition heals, the volume holds exactly what the new head
// acknowledged.
func TestClusterPartition(t *testing.T) {
	engine := fioEngine(t)
	c := newClusterNet(t)
	etcd := c.etcdCluster()
	var nodes []*netNode
	for i := range 3 {
		nodes = append(nodes, c.node(fmt.Sprintf("n%d", i), 21+i, etcd))
	}
	byID := map[string]*netNode{}
	for _, n := range nodes {
		byID[n.id] = n
	}
	hostNS, _ := c.machine("h", 200)
	require.NoError(t, nodes[0].rpc(t, "cluster_volume_create", `{"name":"vol","geometry":"2+1","size":134217728}`, nil))
	var head string
	waitFor(t, "a head serves vol", 60*time.Second, nodes, func(all map[string]netStatus) bool {
		head = servedBy(all, "vol")
		return head != ""
	})
	fioJob := func(uri string, seed int, extra ...string) *exec.Cmd {
		args := []string{"netns", "exec", hostNS, "fio", "--name=p", "--ioengine=external:" + engine, "--thread=1",
			"--uri=" + uri, "--nqn=nqn.2026-12.io.capsule:volume:vol", "--rw=randwrite", "--bs=64k", "--size=32M",
			"--iodepth=4", "--verify=crc32c", "--verify_state_save=0", "--verify_fatal=1", fmt.Sprintf("--randseed=%d", seed)}
		cmd := exec.Command("ip", append(args, extra...)...)
		cmd.Dir = t.TempDir()
		return cmd
	}
	b, err := fioJob(byID[head].addr, 1, "--do_verify=1", "--fsync_on_close=1").CombinedOutput()
	require.NoError(t, err, "first writes:\n%s", b)

	// The head loses etcd, nothing else.
	for i := range 3 {
		ipCmd(t, "-n", byID[head].ns, "route", "add", "blackhole", fmt.Sprintf("10.202.0.%d/32", 101+i))
	}
	// The host keeps writing through the old head, other data.
	stale := fioJob(byID[head].addr, 2, "--time_based", "--runtime=25", "--do_verify=0", "--continue_on_error=all")
	staleOut := &lockedBuffer{}
	stale.Stdout, stale.Stderr = staleOut, staleOut
	require.NoError(t, stale.Start())

	var next string
	others := slices.DeleteFunc(slices.Clone(nodes), func(n *netNode) bool { return n.id == head })
	waitFor(t, "another node takes the volume", 60*time.Second, others, func(all map[string]netStatus) bool {
		next = servedBy(all, "vol")
		return next != "" && next != head
	})
	b, err = fioJob(byID[next].addr, 3, "--do_verify=1", "--fsync_on_close=1").CombinedOutput()
	require.NoError(t, err, "writes through the new head:\n%s", b)
	var st netStatus
	require.NoError(t, byID[head].rpc(t, "cluster_get_status", "", &st))
	require.NotContains(t, st.Serving, "vol", "the old head still serves the volume")

	stale.Wait() // it fails or runs out; either way it has stopped writing
	for i := range 3 {
		ipCmd(t, "-n", byID[head].ns, "route", "del", "blackhole", fmt.Sprintf("10.202.0.%d/32", 101+i))
	}
	time.Sleep(3 * time.Second)
	b, err = fioJob(byID[next].addr, 3, "--verify_only=1").CombinedOutput()
	require.NoError(t, err, "after the partition the volume holds other bytes than the new head acknowledged:\n%s\nthe old head's writer:\n%s", b, staleOut)
}

// TestClusterRollingRestart restarts every node of six (SIGTERM, then
// start again), one at a time and the head among them, while a host
// writes a 4+2 volume with fio through all six nodes at once (one path
// each, fio-capsule's multipath: ANA sends the I/O to the head and after
// it when it moves). Each node waits for the volume to be whole again
// (no rebuild running, no device out) before the next goes. Every round
// of fio verifies what it wrote, and after the last restart the volume
// holds every byte of the last round.
func TestClusterRollingRestart(t *testing.T) {
	engine := fioEngine(t)
	c := newClusterNet(t)
	etcd := c.etcdCluster()
	var nodes []*netNode
	var urls []string
	for i := range 6 {
		nodes = append(nodes, c.node(fmt.Sprintf("n%d", i), 31+i, etcd))
		urls = append(urls, nodes[i].addr)
	}
	hostNS, _ := c.machine("h", 200)
	require.NoError(t, nodes[0].rpc(t, "cluster_volume_create", `{"name":"vol","geometry":"4+2","size":268435456}`, nil))
	// whole waits, with `target cluster status --wait` on a node other
	// than not, until the volume is served, whole and placed, and
	// returns its head.
	whole := func(what, not string) string {
		asked := nodes[0]
		if asked.id == not {
			asked = nodes[1]
		}
		b, err := exec.Command(filepath.Join(binDir, "target"), "cluster", "status", "-s", asked.sock,
			"--wait", "--timeout", "120s").CombinedOutput()
		require.NoError(t, err, "%s:\n%s", what, b)
		require.Contains(t, string(b), "cluster settled")
		var head string
		waitFor(t, what, 10*time.Second, nodes, func(all map[string]netStatus) bool {
			head = servedBy(all, "vol")
			return head != ""
		})
		return head
	}
	head := whole("a head serves vol", "")

	fioJob := func(seed int, extra ...string) *exec.Cmd {
		args := []string{"netns", "exec", hostNS, "fio", "--name=r", "--ioengine=external:" + engine, "--thread=1",
			"--uri=" + strings.Join(urls, ","), "--nqn=nqn.2026-12.io.capsule:volume:vol", "--rw=randwrite", "--bs=64k",
			"--size=64M", "--iodepth=8", "--verify=crc32c", "--verify_state_save=0", "--verify_fatal=1",
			fmt.Sprintf("--randseed=%d", seed)}
		cmd := exec.Command("ip", append(args, extra...)...)
		cmd.Dir = t.TempDir()
		return cmd
	}
	// fio writes round after round, each verified, until the restarts end.
	var stop atomic.Bool
	type round struct {
		seed int
		err  error
		out  []byte
	}
	rounds := make(chan round, 64)
	go func() {
		defer close(rounds)
		for seed := 1; !stop.Load(); seed++ {
			b, err := fioJob(seed, "--rate=8m", "--do_verify=1", "--fsync_on_close=1").CombinedOutput()
			rounds <- round{seed, err, b}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		for range rounds {
		}
	})

	time.Sleep(3 * time.Second)
	for _, n := range nodes {
		what := "node " + n.id
		if n.id == head {
			what = "the head, " + n.id
		}
		t.Logf("restarting %s", what)
		n.d.stop(t)
		c.startNode(n, etcd)
		time.Sleep(3 * time.Second)
		head = whole("the volume whole again after restarting "+what, n.id)
	}
	stop.Store(true)
	last := 0
	for r := range rounds {
		require.NoError(t, r.err, "fio round %d:\n%s", r.seed, r.out)
		last = r.seed
	}
	require.GreaterOrEqual(t, last, 3, "fio rounds during the restarts")
	b, err := fioJob(last, "--verify_only=1").CombinedOutput()
	require.NoError(t, err, "the last round's bytes after every node restarted:\n%s", b)
}
