package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// netnsTransports are the NVMe-oF transports the several-hosts case runs
// over: NVMe/RDMA over iwarp:// and NVMe/TCP over tcp://, each URL made
// the same way (scheme://ADDRESS:4420).
var netnsTransports = []string{"iwarp", "tcp"}

// requireNetns checks that this process may make network namespaces and
// veth pairs (root, iproute2); with CI=true it fails when not.
func requireNetns(t *testing.T) {
	t.Helper()
	prereq.Root(t, "making network namespaces")
	prereq.Tool(t, "ip")
}

// ipCmd runs ip with args, failing the test on error.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s:\n%s", strings.Join(args, " "), out)
}

// hostsNet makes a target namespace and two host namespaces, each host
// joined to the target by a veth pair on its own /24: host i reaches the
// target at 10.201.i.1 and is 10.201.i.2. Cleanup deletes them (after
// the processes the test started in them are stopped, since cleanups run
// last-registered first).
func hostsNet(t *testing.T) (tgt string, hosts [2]string, addrs [2]string) {
	t.Helper()
	pfx := fmt.Sprintf("cap%d", os.Getpid()%100000)
	tgt = pfx + "t"
	ipCmd(t, "netns", "add", tgt)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", tgt).Run() })
	ipCmd(t, "-n", tgt, "link", "set", "lo", "up")
	for i := range hosts {
		h := fmt.Sprintf("%sh%d", pfx, i)
		hosts[i] = h
		ipCmd(t, "netns", "add", h)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", h).Run() })
		ipCmd(t, "-n", h, "link", "set", "lo", "up")
		tv, hv := fmt.Sprintf("%st%d", pfx, i), fmt.Sprintf("%sv%d", pfx, i)
		ipCmd(t, "link", "add", tv, "netns", tgt, "type", "veth", "peer", "name", hv, "netns", h)
		addrs[i] = fmt.Sprintf("10.201.%d.1", i+1)
		ipCmd(t, "-n", tgt, "addr", "add", addrs[i]+"/24", "dev", tv)
		ipCmd(t, "-n", h, "addr", "add", fmt.Sprintf("10.201.%d.2/24", i+1), "dev", hv)
		ipCmd(t, "-n", tgt, "link", "set", tv, "up")
		ipCmd(t, "-n", h, "link", "set", hv, "up")
	}
	return tgt, hosts, addrs
}

// inNetns is argv run inside network namespace ns.
func inNetns(ns string, argv ...string) []string {
	return append([]string{"ip", "netns", "exec", ns}, argv...)
}

// TestNBDSeveralHosts serves one erasure-coded namespace from a target in
// its own network namespace to two hosts in two others. Each host runs
// the bridge and fio at the same time, writing and verifying its half of
// the namespace on two connections; then each verifies the half the other
// host wrote.
func TestNBDSeveralHosts(t *testing.T) {
	requireNetns(t)
	fio := prereq.Tool(t, "fio")
	for _, tr := range netnsTransports {
		t.Run(tr, func(t *testing.T) {
			tgtNS, hosts, addrs := hostsNet(t)
			listen := []string{filepath.Join(binDir, "target"), "serve", "--data", t.TempDir(), "--namespace", "ec:vol0:64MiB",
				"--nqn", nbdNQN, "--scrub-rate", "0", "--allow-any-host"}
			for _, a := range addrs {
				listen = append(listen, "--listen", fmt.Sprintf("%s://%s:4420", tr, a))
			}
			startCommand(t, "target", "capsule target ready", inNetns(tgtNS, listen...))
			var uris [2]string
			for i, h := range hosts {
				d := startCommand(t, "mount", "capsule nbd ready", inNetns(h, filepath.Join(binDir, "mount"),
					"--target", fmt.Sprintf("%s://%s:4420", tr, addrs[i]), "--nqn", nbdNQN, "--nbd", "127.0.0.1:0", "--export", "vol"))
				uris[i] = "nbd://" + field(d.ready, "listen") + "/vol"
			}
			half := func(i int) []string {
				return []string{fmt.Sprintf("--offset=%dm", 32*i), "--size=8m", "--offset_increment=16m", "--numjobs=2",
					"--rw=randwrite", "--bs=8k", "--iodepth=16", fmt.Sprintf("--randseed=%d", 40+i)}
			}
			runFio := func(i int, host string, extra ...string) error {
				argv := inNetns(host, append([]string{fio}, fioArgs(uris[i%2], append(append([]string{fmt.Sprintf("--name=host%d", i)}, half(i)...), extra...)...)...)...)
				out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
				if err != nil {
					return fmt.Errorf("fio in %s: %w\n%s", host, err, out)
				}
				return nil
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, h := range hosts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = runFio(i, h, "--do_verify=1", "--end_fsync=1")
				}()
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			// Each host reads what the other wrote: fio job i's layout,
			// through host 1-i's bridge.
			for i := range hosts {
				argv := inNetns(hosts[1-i], append([]string{fio}, fioArgs(uris[1-i], append(append([]string{fmt.Sprintf("--name=host%d", i)}, half(i)...), "--verify_only=1")...)...)...)
				out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
				require.NoError(t, err, "host %d verifying host %d's writes:\n%s", 1-i, i, out)
			}
		})
	}
}
