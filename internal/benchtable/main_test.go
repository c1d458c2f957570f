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
