package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sample is go test -bench output with two runs of each benchmark, some
// noise lines, and a provider that did not run.
const sample = `goos: linux
goarch: amd64
pkg: github.com/capsule-storage/capsule/rdma/conformance
BenchmarkTransfer/memcpy/1MiB-2    	    4976	     41160 ns/op	10000.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkTransfer/memcpy/1MiB-2    	    4976	     41160 ns/op	12000.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkTransfer/tcp/1MiB-2       	     921	    263356 ns/op	4000.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkTransfer/shm-write/1MiB-2 	     900	    100000 ns/op	8000.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkTransfer/shm-write/1MiB-2 	     900	    100000 ns/op	9000.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkTransfer/shm-write/1MiB-2 	     900	    100000 ns/op	7000.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkTransfer/iwarp-write/1MiB-2	     500	    400000 ns/op	2000.00 MB/s	     120 B/op	       2 allocs/op
--- SKIP: BenchmarkTransfer/shm-read
BenchmarkPingPong/tcp/64B-2        	   13443	     20000 ns/op	       0 B/op	       0 allocs/op
BenchmarkPingPong/iwarp/64B-2      	   10000	     40000 ns/op	       0 B/op	       0 allocs/op
PASS
`

func TestParseMedians(t *testing.T) {
	res, err := parse(strings.NewReader(sample))
	require.NoError(t, err)
	v, ok := res["Transfer/memcpy/1MiB"].median("MB/s")
	require.True(t, ok)
	require.Equal(t, 11000.0, v, "median of an even count is the mean of the middle two")
	v, _ = res["Transfer/shm-write/1MiB"].median("MB/s")
	require.Equal(t, 8000.0, v)
	v, _ = res["Transfer/iwarp-write/1MiB"].median("allocs/op")
	require.Equal(t, 2.0, v)
	_, ok = res["Transfer/shm-read/1MiB"].median("MB/s")
	require.False(t, ok, "a benchmark that did not run has no samples")
}

func TestRender(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(strings.NewReader(sample), &out))
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	// 8000 / 11000 = 0.73, above R1's 0.70.
	require.Regexp(t, `0\.73\s+R1 >= 0\.70 ok\s+0$`, lines["Transfer/shm-write/1MiB"])
	// 2000 / 4000 = 0.50, below R2's 0.75.
	require.Regexp(t, `0\.50\s+R2 >= 0\.75 BELOW\s+2$`, lines["Transfer/iwarp-write/1MiB"])
	// Latency: tcp takes half the time, so iwarp runs at 0.50 of its speed.
	require.Regexp(t, `40000 ns/op.*0\.50`, lines["PingPong/iwarp/64B"])
	// Missing results show as "-".
	require.Regexp(t, `Transfer/shm-read/1MiB\s+-`, lines["Transfer/shm-read/1MiB"])
}

func TestRunNoInput(t *testing.T) {
	require.Error(t, run(strings.NewReader("PASS\n"), &bytes.Buffer{}))
}

// blockSample is what scripts/bench.sh writes for fio runs, and a
// BenchmarkR3 line with its metrics.
const blockSample = `BenchmarkBlock/randread-4KiB/nbdkit-memory 1 100000 IOPS 409.6 MB/s
BenchmarkBlock/randread-4KiB/nbdkit-memory 1 120000 IOPS 491.5 MB/s
BenchmarkBlock/randread-4KiB/nbdkit-memory 1 110000 IOPS 450.6 MB/s
BenchmarkBlock/randread-4KiB/capsule-shm-mem 1 70000 IOPS 286.7 MB/s
BenchmarkBlock/randread-4KiB/capsule-shm-mem 1 60000 IOPS 245.8 MB/s
BenchmarkBlock/randread-4KiB/capsule-shm-mem 1 80000 IOPS 327.7 MB/s
BenchmarkBlock/randwrite-4KiB/nbdkit-memory 1 100000 IOPS 409.6 MB/s
BenchmarkBlock/randwrite-4KiB/capsule-iwarp-ec 1 20000 IOPS 81.9 MB/s
BenchmarkBlock/seqread-1MiB/nbdkit-memory 1 2000 IOPS 2097 MB/s
BenchmarkBlock/seqread-1MiB/capsule-iwarp-mem 1 1000 IOPS 1048 MB/s
BenchmarkR3-2   	      3	 400000000 ns/op	    700000 pread-IOPS	     60000 iwarp-IOPS	    500000 shm-IOPS	         8.3 shm/iwarp	        0.08 iwarp/pread	       0 B/op	       0 allocs/op
BenchmarkR3Baseline/fio-psync-tmpfs 1 600000 IOPS
`

func TestRenderBlock(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(strings.NewReader(blockSample), &out))
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	// Medians: 70000 / 110000 = 0.64, above R5's 0.60.
	require.Regexp(t, `70000 IOPS\s+Block/randread-4KiB/nbdkit-memory\s+110000 IOPS\s+0\.64\s+R5 >= 0\.60 ok`, lines["Block/randread-4KiB/capsule-shm-mem"])
	// 1000 / 2000 = 0.50, below.
	require.Regexp(t, `0\.50\s+R5 >= 0\.60 BELOW`, lines["Block/seqread-1MiB/capsule-iwarp-mem"])
	// Writes have no bar.
	require.Regexp(t, `0\.20\s+-$`, lines["Block/randwrite-4KiB/capsule-iwarp-ec"])
	// R3: iwarp-IOPS against fio's IOPS, 60000 / 600000.
	require.Regexp(t, `60000 iwarp-IOPS\s+R3Baseline/fio-psync-tmpfs\s+600000 IOPS\s+0\.10\s+R3 >= 0\.25 BELOW`, lines["R3"])
	// A path that did not run.
	require.Regexp(t, `^Block/randread-4KiB/capsule-iwarp-ec\s+-`, lines["Block/randread-4KiB/capsule-iwarp-ec"])
}
