package integration

import (
	"flag"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// nbdSoak turns on TestNBDSoak: go test ./integration -run Soak -args -nbd.soak 10m
var nbdSoak = flag.Duration("nbd.soak", 0, "run TestNBDSoak, fio on 16 NBD connections with verification, for this long")

// TestNBDSoak is the long variant of the load case, behind -nbd.soak: 16
// connections write and verify (each block checked within 1024 writes of
// being written, and everything again at the end) for the given time
// against an erasure-coded namespace.
func TestNBDSoak(t *testing.T) {
	if *nbdSoak <= 0 {
		t.Skip("a soak run; enable it with -nbd.soak DURATION")
	}
	requireTool(t, "fio")
	data := t.TempDir()
	tgt, url := ecTarget(t, data, "iwarp://127.0.0.1:0")
	bridge, uri := startBridge(t, url, nbdNQN, "127.0.0.1:0", "")
	out := runTool(t, "fio", fioArgs(uri, "--name=soak", "--rw=randwrite", "--bs=4k", "--iodepth=16", "--numjobs=16",
		"--offset=0", "--size=4m", "--offset_increment=4m", "--time_based", fmt.Sprintf("--runtime=%d", int(nbdSoak.Seconds())),
		"--verify_backlog=1024", "--do_verify=1")...)
	require.Contains(t, out, "soak;")
	bridge.stop(t)
	tgt.stop(t)
}
