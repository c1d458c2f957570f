package integration

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/prereq"
)

// nbdSoak turns on TestNBDSoak: go test ./integration -run Soak -args -nbd.soak 10m
var nbdSoak = flag.Duration("nbd.soak", 0, "run TestNBDSoak, fio on 16 NBD connections with verification, for this long")

// TestNBDSoak is the long variant of the load case, behind -nbd.soak: 16
// connections write and verify against an erasure-coded namespace, run
// after run, until the given time is spent. Each run writes every block of
// its job's 4 MiB once, checks each within 1024 writes of writing it
// (verify_backlog), and checks all of them again when the run ends; the
// block size changes from run to run, so a block the target failed to
// write cannot pass as the previous run's copy. A time-based fio run
// would not do that last check: when the runtime is up fio skips its
// verify phase.
func TestNBDSoak(t *testing.T) {
	if *nbdSoak <= 0 {
		t.Skip("a soak run; enable it with -nbd.soak DURATION")
	}
	prereq.Tool(t, "fio")
	data := t.TempDir()
	tgt, url := ecTarget(t, data, "iwarp://127.0.0.1:0")
	bridge, uri := startBridge(t, url, nbdNQN, "127.0.0.1:0", "")
	sizes := []string{"4k", "16k", "8k", "64k"}
	deadline := time.Now().Add(*nbdSoak)
	for run := 0; run == 0 || time.Now().Before(deadline); run++ {
		out := runTool(t, "fio", fioArgs(uri, "--name=soak", "--rw=randwrite", "--bs="+sizes[run%len(sizes)],
			"--iodepth=16", "--numjobs=16", "--offset=0", "--size=4m", "--offset_increment=4m",
			fmt.Sprintf("--randseed=%d", 100+run), "--verify_backlog=1024", "--do_verify=1")...)
		require.Contains(t, out, "soak;", "run %d", run)
	}
	bridge.stop(t)
	tgt.stop(t)
}
