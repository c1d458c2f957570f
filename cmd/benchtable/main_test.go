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
	lines := renderLines(t, sample)
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
	lines := renderLines(t, blockSample)
	// Medians: 70000 / 110000 = 0.64, above R5's 0.60.
	require.Regexp(t, `70000 IOPS\s+Block/randread-4KiB/nbdkit-memory\s+110000 IOPS\s+0\.64\s+R5 >= 0\.60 ok`, lines["Block/randread-4KiB/capsule-shm-mem"])
	// 1000 / 2000 = 0.50, below.
	require.Regexp(t, `0\.50\s+R5 >= 0\.60 BELOW`, lines["Block/seqread-1MiB/capsule-iwarp-mem"])
	// Writes have no bar.
	require.Regexp(t, `0\.20\s+-$`, lines["Block/randwrite-4KiB/capsule-iwarp-ec"])
	// R3: iwarp-IOPS against fio's IOPS, 60000 / 600000.
	require.Regexp(t, `60000 iwarp-IOPS\s+R3Baseline/fio-psync-tmpfs\s+600000 IOPS\s+0\.10\s+R3 >= 0\.25 BELOW`, lines["R3/iwarp-IOPS"])
	// R3: shm-IOPS against iwarp-IOPS of the same line, 500000 / 60000.
	require.Regexp(t, `500000 shm-IOPS\s+R3/iwarp-IOPS\s+60000 iwarp-IOPS\s+8\.33\s+R3 >= 2\.00 ok\s+0$`, lines["R3/shm-IOPS"])
	// A path that did not run, beside a baseline that did.
	require.Regexp(t, `^Block/randread-4KiB/capsule-iwarp-ec\s+-`, lines["Block/randread-4KiB/capsule-iwarp-ec"])
	// Rows whose benchmark and baseline both did not run are left out:
	// the transfers, R4, FUSE, chunkstore and dispatch rows.
	for name := range lines {
		require.Regexp(t, `^(benchmark|ratios|Block/|R3/)`, name)
	}
}

// engineSample is what scripts/bench.sh writes for fio with the capsule
// engine beside nbdkit, with CPU per I/O.
const engineSample = `BenchmarkBlock/randread-4KiB/nbdkit-memory 1 100000 IOPS 409.6 MB/s 8.0 fio-µs/IO 6.0 target-µs/IO
BenchmarkBlock/randread-4KiB/engine-shm-mem 1 90000 IOPS 368.6 MB/s 6.0 fio-µs/IO 9.0 target-µs/IO
BenchmarkBlock/randread-4KiB/engine-iwarp-mem 1 50000 IOPS 204.8 MB/s 12.0 fio-µs/IO 12.0 target-µs/IO
BenchmarkBlock/seqread-1MiB/nbdkit-memory 1 2000 IOPS 2097 MB/s 300.0 fio-µs/IO 200.0 target-µs/IO
BenchmarkBlock/seqread-1MiB/engine-shm-mem 1 1700 IOPS 1782 MB/s 250.0 fio-µs/IO 150.0 target-µs/IO
`

func TestRenderEngine(t *testing.T) {
	lines := renderLines(t, engineSample)
	require.Regexp(t, `0\.90\s+R5′ >= 0\.80 ok \(goal 1\.20\)`, lines["Block/randread-4KiB/engine-shm-mem"])
	require.Regexp(t, `0\.85\s+R5′ >= 0\.90 BELOW \(goal 1\.20\)`, lines["Block/seqread-1MiB/engine-shm-mem"])
	require.Regexp(t, `0\.50\s+-$`, lines["Block/randread-4KiB/engine-iwarp-mem"], "no bar over iwarp")
	require.Regexp(t, `6\.0 fio-µs/IO\s+Block/randread-4KiB/nbdkit-memory/fio-cpu\s+8\.0 fio-µs/IO\s+0\.75×`, lines["Block/randread-4KiB/engine-shm-mem/fio-cpu"])
	require.Regexp(t, `9\.0 target-µs/IO\s+Block/randread-4KiB/nbdkit-memory/target-cpu\s+6\.0 target-µs/IO\s+1\.50×`, lines["Block/randread-4KiB/engine-shm-mem/target-cpu"])
}

// r4Sample is BenchmarkR4 with -count 3: p50 latencies in ns.
const r4Sample = `BenchmarkR4-2   	       3	 110000000 ns/op	     17900 tcp-p50-ns	     29800 iwarp-p50-ns	      6200 shm-p50-ns	     11900 iwarp-added-ns	       0 B/op	       0 allocs/op
BenchmarkR4-2   	       3	 110000000 ns/op	     18000 tcp-p50-ns	     34000 iwarp-p50-ns	     16000 shm-p50-ns	     16000 iwarp-added-ns	       0 B/op	       0 allocs/op
BenchmarkR4-2   	       3	 110000000 ns/op	     17800 tcp-p50-ns	     28000 iwarp-p50-ns	      6100 shm-p50-ns	     10200 iwarp-added-ns	       1 B/op	       1 allocs/op
`

func TestRenderLatency(t *testing.T) {
	lines := renderLines(t, r4Sample)
	// Medians: iwarp 29800 against TCP 17900 adds 11.9 µs, within 15.
	require.Regexp(t, `29800 iwarp-p50-ns\s+R4/tcp-p50-ns\s+17900 tcp-p50-ns\s+\+11\.9 µs\s+R4 <= \+15 µs ok\s+0$`, lines["R4/iwarp-p50-ns"])
	// shm has no baseline: its median, 6200 ns, against 15 µs.
	require.Regexp(t, `^R4/shm-p50-ns\s+6200 shm-p50-ns\s+R4 <= 15 µs ok\s+0$`, lines["R4/shm-p50-ns"])

	lines = renderLines(t, strings.ReplaceAll(r4Sample, "29800 iwarp-p50-ns", "39800 iwarp-p50-ns"))
	// 34000 - 17900 = 16.1 µs.
	require.Regexp(t, `\+16\.1 µs\s+R4 <= \+15 µs ABOVE`, lines["R4/iwarp-p50-ns"])
}

// fuseSample is what scripts/fusebench.sh writes (COUNT=3 for the data
// cases, one run for metadata): the null file system, capsule's mount
// over shm, the Go client alone over shm, and no iwarp.
const fuseSample = `BenchmarkFUSE/randread-4KiB/null 1 30000 IOPS 122.9 MB/s
BenchmarkFUSE/randread-4KiB/capsule-shm 1 8000 IOPS 32.8 MB/s
BenchmarkFUSE/randread-4KiB/client-shm 1 24000 IOPS 98.3 MB/s
BenchmarkFUSE/randread-4KiB/null 1 28000 IOPS 114.7 MB/s
BenchmarkFUSE/randread-4KiB/capsule-shm 1 9000 IOPS 36.9 MB/s
BenchmarkFUSE/randread-4KiB/client-shm 1 23000 IOPS 94.2 MB/s
BenchmarkFUSE/randread-4KiB/null 1 27000 IOPS 110.6 MB/s
BenchmarkFUSE/randread-4KiB/capsule-shm 1 8500 IOPS 34.8 MB/s
BenchmarkFUSE/randread-4KiB/client-shm 1 25000 IOPS 102.4 MB/s
BenchmarkFUSE/seqread-1MiB/null 1 2000 IOPS 2097.2 MB/s
BenchmarkFUSE/seqread-1MiB/capsule-shm 1 1500 IOPS 1572.9 MB/s
BenchmarkFUSE/seqwrite-1MiB/null 1 3000 IOPS 3145.7 MB/s
BenchmarkFUSE/seqwrite-1MiB/capsule-shm 1 100 IOPS 104.9 MB/s
BenchmarkFUSE/bufread-1MiB/null 1 2500 IOPS 2621.4 MB/s
BenchmarkFUSEMeta/create/loopback-tmpfs 1 4000 ops/s
BenchmarkFUSEMeta/stat/loopback-tmpfs 1 7000 ops/s
BenchmarkFUSEMeta/unlink/loopback-tmpfs 1 17000 ops/s
BenchmarkFUSEMeta/create/capsule-shm 1 600 ops/s
BenchmarkFUSEMeta/stat/capsule-shm 1 9100 ops/s
BenchmarkFUSEMeta/unlink/capsule-shm 1 970 ops/s
BenchmarkFUSEMeta/create-stat-unlink/loopback-disk 1 2600 ops/s
BenchmarkFUSEMeta/create-stat-unlink/capsule-shm 1 1300 ops/s
BenchmarkFUSEWrite/seq-8KiB/capsule-shm 1 7200 IOPS 59.0 MB/s
BenchmarkFUSEWrite/seq-1MiB/capsule-shm 1 335 IOPS 351.0 MB/s
BenchmarkFUSEUntar/gosrc/capsule-shm 1 400 files/s 32 s 4 MB/s
BenchmarkFUSEUntar/gosrc/loopback-disk 1 8000 files/s 1.6 s 80 MB/s
`

func TestRenderFUSE(t *testing.T) {
	lines := renderLines(t, fuseSample)
	// Medians: 8500 / 28000 = 0.30, below R6′'s 0.45 for 4 KiB reads; fio
	// has no allocs/op.
	require.Regexp(t, `^FUSE/randread-4KiB/capsule-shm\s+8500 IOPS\s+FUSE/randread-4KiB/null\s+28000 IOPS\s+0\.30\s+R6′ >= 0\.45 BELOW \(goal 0\.60\)\s+-$`, lines["FUSE/randread-4KiB/capsule-shm"])
	// 1500 / 2000 = 0.75, above R6′'s 0.70 for 1 MiB reads.
	require.Regexp(t, `0\.75\s+R6′ >= 0\.70 ok \(goal 0\.90\)`, lines["FUSE/seqread-1MiB/capsule-shm"])
	// R12: whole metadata cycles against the disk loopback, 8 KiB writes
	// against the mount's own 1 MiB writes in MB/s; the untar has no bar.
	require.Regexp(t, `^FUSEMeta/create-stat-unlink/capsule-shm\s+1300 ops/s\s+FUSEMeta/create-stat-unlink/loopback-disk\s+2600 ops/s\s+0\.50\s+R12 >= 0\.50 ok \(goal 0\.80\)`, lines["FUSEMeta/create-stat-unlink/capsule-shm"])
	require.Regexp(t, `^FUSEWrite/seq-8KiB/capsule-shm\s+59 MB/s\s+FUSEWrite/seq-1MiB/capsule-shm\s+351 MB/s\s+0\.17\s+R12 >= 0\.50 BELOW`, lines["FUSEWrite/seq-8KiB/capsule-shm"])
	require.Regexp(t, `^FUSEUntar/gosrc/capsule-shm\s+400 files/s\s+FUSEUntar/gosrc/loopback-disk\s+8000 files/s\s+0\.05\s+-$`, lines["FUSEUntar/gosrc/capsule-shm"])
	require.NotContains(t, lines, "FUSEWrite/seq-8KiB/capsule-iwarp")
	// The client alone, writes and metadata carry no bar.
	require.Regexp(t, `24000 IOPS.*28000 IOPS\s+0\.86\s+-$`, lines["FUSE/randread-4KiB/client-shm"])
	require.Regexp(t, `0\.03\s+-$`, lines["FUSE/seqwrite-1MiB/capsule-shm"])
	require.Regexp(t, `^FUSEMeta/create/capsule-shm\s+600 ops/s\s+FUSEMeta/create/loopback-tmpfs\s+4000 ops/s\s+0\.15\s+-$`, lines["FUSEMeta/create/capsule-shm"])
	require.Regexp(t, `1\.30`, lines["FUSEMeta/stat/capsule-shm"])
	// iwarp did not run but the null file system did: "-" for the value,
	// the ratio and allocs/op, and no bar (R6′ is over shm).
	require.Regexp(t, `^FUSE/randread-4KiB/capsule-iwarp\s+-\s+FUSE/randread-4KiB/null\s+28000 IOPS\s+-\s+-$`, lines["FUSE/randread-4KiB/capsule-iwarp"])
	require.Regexp(t, `^FUSE/bufread-1MiB/capsule-shm\s+-`, lines["FUSE/bufread-1MiB/capsule-shm"])
	// The client alone runs the read cases only: no rows for the others.
	require.NotContains(t, lines, "FUSE/seqwrite-1MiB/client-shm")
	require.NotContains(t, lines, "FUSE/bufread-1MiB/client-shm")
	// Nothing of the other benchmarks.
	require.NotContains(t, lines, "Transfer/shm-write/1MiB")
	require.NotContains(t, lines, "SeqWrite/4+2")
}

// storeSample is go test -bench output of ./chunkstore and
// ./nvmeof/target (BenchmarkDispatch), with the rdma/conformance
// ping-pong the dispatch rows are read against.
const storeSample = `pkg: github.com/capsule-storage/capsule/chunkstore
BenchmarkSeqWrite/4+2-2         	     500	   458000 ns/op	2290.00 MB/s	  120000 B/op	     257 allocs/op
BenchmarkSeqWrite/4+2-2         	     500	   458000 ns/op	2200.00 MB/s	  120000 B/op	     257 allocs/op
BenchmarkSeqWrite/4+2-2         	     500	   458000 ns/op	2400.00 MB/s	  120000 B/op	     257 allocs/op
BenchmarkSeqWrite/1+0-2         	     500	   331000 ns/op	3164.00 MB/s	   30000 B/op	      20 allocs/op
BenchmarkSeqRead/healthy-2      	     500	   237000 ns/op	4400.00 MB/s	    3000 B/op	      56 allocs/op
BenchmarkSeqRead/degraded-2     	     500	   300000 ns/op	2640.00 MB/s	    3000 B/op	      56 allocs/op
BenchmarkEncode/store-2         	   20000	    39000 ns/op	6730.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkEncode/reedsolomon-2   	   80000	    12000 ns/op	21500.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkEncode/reedsolomon-purego-2	    8000	   125000 ns/op	2150.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkEncode/memcpy-2        	  100000	    10000 ns/op	26000.00 MB/s	       0 B/op	       0 allocs/op
BenchmarkPlainFile-2            	     500	   250000 ns/op	4200.00 MB/s	       0 B/op	       0 allocs/op
pkg: github.com/capsule-storage/capsule/nvmeof/target
BenchmarkDispatch/shm/read/qd1-2 	    2000	      4400 ns/op	 930.91 MB/s	       0 B/op	       0 allocs/op
BenchmarkDispatch/shm/write/qd1-2	    2000	      5000 ns/op	 819.20 MB/s	      16 B/op	       1 allocs/op
BenchmarkDispatch/iwarp/read/qd32-2	    2000	      4300 ns/op	 952.56 MB/s	       0 B/op	       0 allocs/op
BenchmarkDispatch/baseline/memcpy-4KiB-2	    2000	        90 ns/op	45511.11 MB/s
BenchmarkPingPong/shm/64B-2     	  200000	      6800 ns/op	       0 B/op	       0 allocs/op
BenchmarkPingPong/iwarp/64B-2   	   40000	     33400 ns/op	       0 B/op	       0 allocs/op
`

func TestRenderStoreAndDispatch(t *testing.T) {
	lines := renderLines(t, storeSample)
	// R7: the median 2290 of 4+2 against 3164 of 1+0 is 0.72.
	require.Regexp(t, `^SeqWrite/4\+2\s+2290 MB/s\s+SeqWrite/1\+0\s+3164 MB/s\s+0\.72\s+R7 >= 0\.70 ok\s+257$`, lines["SeqWrite/4+2"])
	// 2640 / 4400 = 0.60.
	require.Regexp(t, `0\.60\s+R7 >= 0\.70 BELOW\s+56$`, lines["SeqRead/degraded"])
	// Informational: the 1+0 path against plain pwrites, the encoder
	// against the library.
	require.Regexp(t, `0\.75\s+20$`, lines["SeqWrite/1+0"])
	require.Regexp(t, `6730 MB/s\s+Encode/reedsolomon\s+21500 MB/s\s+0\.31`, lines["Encode/store"])
	// R8: a command per op. shm read at QD1 takes 4400 ns against a
	// 6800 ns ping-pong (1.55 of its speed), no allocation.
	require.Regexp(t, `^Dispatch/shm/read/qd1\s+4400 ns/op\s+PingPong/shm/64B\s+6800 ns/op\s+1\.55\s+R8 0 allocs ok\s+0$`, lines["Dispatch/shm/read/qd1"])
	require.Regexp(t, `R8 0 allocs ABOVE\s+1$`, lines["Dispatch/shm/write/qd1"])
	// iwarp at QD32: 33400 / 4300.
	require.Regexp(t, `7\.77\s+R8 0 allocs ok`, lines["Dispatch/iwarp/read/qd32"])
	// A dispatch that did not run, beside a ping-pong that did.
	require.Regexp(t, `^Dispatch/iwarp/write/qd1\s+-\s+PingPong/iwarp/64B\s+33400 ns/op\s+-\s+R8 0 allocs\s+-$`, lines["Dispatch/iwarp/write/qd1"])
}

// renderLines runs the table over input and returns its lines by their
// first field.
func renderLines(t *testing.T, input string) map[string]string {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(strings.NewReader(input), &out))
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	return lines
}

// ecSample is what scripts/ecwritebench.sh writes (COUNT=3 for the
// random writes, one run for the rest): the ec namespace and the file
// namespace through the bridge, and the plain file's fdatasync.
const ecSample = `BenchmarkECWrite/randwrite-4KiB/capsule-ec 1 2296 IOPS 9.4 MB/s 602.7 cpu-µs/IO 513.8 target-µs/IO 88.9 bridge-µs/IO
BenchmarkECWrite/randwrite-4KiB/capsule-ec 1 2670 IOPS 10.9 MB/s 540.8 cpu-µs/IO 462.5 target-µs/IO 78.3 bridge-µs/IO
BenchmarkECWrite/randwrite-4KiB/capsule-ec 1 2108 IOPS 8.6 MB/s 554.9 cpu-µs/IO 479.7 target-µs/IO 75.2 bridge-µs/IO
BenchmarkECWrite/randwrite-4KiB/capsule-file 1 28264 IOPS 115.8 MB/s 40.0 cpu-µs/IO 20.7 target-µs/IO 19.3 bridge-µs/IO
BenchmarkECWrite/randwrite-4KiB/capsule-file 1 32982 IOPS 135.1 MB/s 36.5 cpu-µs/IO 17.9 target-µs/IO 18.6 bridge-µs/IO
BenchmarkECWrite/randwrite-4KiB/capsule-file 1 10796 IOPS 44.2 MB/s 99.5 cpu-µs/IO 50.9 target-µs/IO 48.6 bridge-µs/IO
BenchmarkECWrite/seqwrite-1MiB/capsule-ec 1 1000 IOPS 1048.6 MB/s 1704.6 cpu-µs/IO 1223.3 target-µs/IO 481.3 bridge-µs/IO
BenchmarkECWrite/seqwrite-1MiB/capsule-file 1 1600 IOPS 1677.7 MB/s 730.8 cpu-µs/IO 278.0 target-µs/IO 452.8 bridge-µs/IO
BenchmarkECWrite/seqwrite-1MiB/capsule-ec-v1 1 800 IOPS 838.9 MB/s 1500.0 cpu-µs/IO 1000.0 target-µs/IO 500.0 bridge-µs/IO
BenchmarkECWrite/randread-4KiB/capsule-ec 1 31981 IOPS 131.0 MB/s 35.9 cpu-µs/IO 18.6 target-µs/IO 17.3 bridge-µs/IO
BenchmarkECWrite/randread-4KiB/capsule-file 1 35922 IOPS 147.1 MB/s 29.9 cpu-µs/IO 13.2 target-µs/IO 16.7 bridge-µs/IO
BenchmarkECWrite/randread-4KiB/capsule-ec-v1 1 33000 IOPS 135.2 MB/s 33.0 cpu-µs/IO 16.0 target-µs/IO 17.0 bridge-µs/IO
BenchmarkECWrite/fua-4KiB/capsule-ec-engine 1 600000 p50-ns 1600 IOPS 80.0 target-µs/IO
BenchmarkECWrite/fua-4KiB/capsule-ec 1 900000 p50-ns 350000 write-p50-ns 550000 sync-p50-ns 1100 IOPS 90.0 cpu-µs/IO 80.0 target-µs/IO 10.0 bridge-µs/IO
BenchmarkECWrite/fua-4KiB/capsule-file 1 869376 p50-ns 242688 write-p50-ns 626688 sync-p50-ns 1037 IOPS 828.9 cpu-µs/IO 506.0 target-µs/IO 322.9 bridge-µs/IO
BenchmarkECWrite/fua-4KiB/plain-file 1 445728 p50-ns 5408 write-p50-ns 440320 sync-p50-ns 1393 IOPS
BenchmarkECWrite/write-amp/capsule-ec 1 1.744 write-amp 1.741 wchar-amp 55 target-MB 31 fio-MB 2508 IOPS 536.9 cpu-µs/IO 460.2 target-µs/IO 76.7 bridge-µs/IO
BenchmarkECWrite/space/capsule-ec 1 1.358 space-amp 2187 alloc-MB 1611 live-MB
`

func TestRenderECWrite(t *testing.T) {
	lines := renderLines(t, ecSample)
	// Medians: 2296 / 28264 = 0.08, below R7′'s 0.50, with its goal beside.
	require.Regexp(t, `^ECWrite/randwrite-4KiB/capsule-ec\s+2296 IOPS\s+ECWrite/randwrite-4KiB/capsule-file\s+28264 IOPS\s+0\.08\s+R7′ >= 0\.50 BELOW \(goal 0\.80\)\s+-$`, lines["ECWrite/randwrite-4KiB/capsule-ec"])
	// 1000 / 1600 = 0.62.
	require.Regexp(t, `0\.62\s+R7′ >= 0\.55 ok\s+-$`, lines["ECWrite/seqwrite-1MiB/capsule-ec"])
	// The v1 engine on the same case: against file: (800 / 1600), and
	// the log against it (1000 / 800), without a bar.
	require.Regexp(t, `^ECWrite/seqwrite-1MiB/capsule-ec-v1\s+800 IOPS\s+ECWrite/seqwrite-1MiB/capsule-file\s+1600 IOPS\s+0\.50\s+-$`, lines["ECWrite/seqwrite-1MiB/capsule-ec-v1"])
	require.Regexp(t, `^ECWrite/seqwrite-1MiB/capsule-ec/v1\s+1000 IOPS\s+ECWrite/seqwrite-1MiB/capsule-ec-v1\s+800 IOPS\s+1\.25\s+-$`, lines["ECWrite/seqwrite-1MiB/capsule-ec/v1"])
	// Reads: a ratio without a bar.
	require.Regexp(t, `0\.89\s+-$`, lines["ECWrite/randread-4KiB/capsule-ec"])
	// And against the v1 engine, with R7′'s ±10 %: 31981 / 33000 = 0.97.
	require.Regexp(t, `^ECWrite/randread-4KiB/capsule-ec/v1\s+31981 IOPS\s+ECWrite/randread-4KiB/capsule-ec-v1\s+33000 IOPS\s+0\.97\s+R7′ >= 0\.90 ok\s+-$`, lines["ECWrite/randread-4KiB/capsule-ec/v1"])
	// The amplifications are ratios already: no baseline, an upper bound.
	require.Regexp(t, `^ECWrite/write-amp/capsule-ec\s+1\.74 write-amp\s+R7′ <= 2\.50 ok \(goal 1\.80\)\s+-$`, lines["ECWrite/write-amp/capsule-ec"])
	require.Regexp(t, `^ECWrite/space/capsule-ec\s+1\.36 space-amp\s+R7′ <= 1\.30 ABOVE\s+-$`, lines["ECWrite/space/capsule-ec"])
	// Latency as a multiple of the plain file's: 600000 / 445728 = 1.35,
	// the FUA write one hop away; through the bridge, no bar.
	require.Regexp(t, `^ECWrite/fua-4KiB/capsule-ec-engine\s+600000 p50-ns\s+ECWrite/fua-4KiB/plain-file\s+445728 p50-ns\s+1\.35×\s+R7′ <= 1\.50× ok\s+-$`, lines["ECWrite/fua-4KiB/capsule-ec-engine"])
	require.Regexp(t, `^ECWrite/fua-4KiB/capsule-ec\s+900000 p50-ns\s+ECWrite/fua-4KiB/plain-file\s+445728 p50-ns\s+2\.02×\s+-$`, lines["ECWrite/fua-4KiB/capsule-ec"])
	require.Regexp(t, `1\.95×\s+-$`, lines["ECWrite/fua-4KiB/capsule-file"])
	// CPU per I/O, ec as a multiple of file: medians 554.9 / 40.0.
	require.Regexp(t, `^ECWrite/randwrite-4KiB/capsule-ec/cpu\s+554\.9 cpu-µs/IO\s+ECWrite/randwrite-4KiB/capsule-file/cpu\s+40\.0 cpu-µs/IO\s+13\.87×\s+-$`, lines["ECWrite/randwrite-4KiB/capsule-ec/cpu"])
	// The plain file has no bridge: fua-4KiB's CPU row is ec against file.
	require.Regexp(t, `90\.0 cpu-µs/IO.*828\.9 cpu-µs/IO\s+0\.11×`, lines["ECWrite/fua-4KiB/capsule-ec/cpu"])
	// write-amp's CPU stands alone.
	require.Regexp(t, `^ECWrite/write-amp/capsule-ec/cpu\s+536\.9 cpu-µs/IO\s+-$`, lines["ECWrite/write-amp/capsule-ec/cpu"])
	// Nothing of the other benchmarks.
	for name := range lines {
		require.Regexp(t, `^(benchmark|ratios|ECWrite/)`, name)
	}

	// A cost above its bound: 700000 / 445728.
	lines = renderLines(t, strings.ReplaceAll(ecSample, "600000 p50-ns", "700000 p50-ns"))
	require.Regexp(t, `1\.57×\s+R7′ <= 1\.50× ABOVE`, lines["ECWrite/fua-4KiB/capsule-ec-engine"])
	// Only the plain file ran: "-" for ec, no verdict, no rows of the rest.
	lines = renderLines(t, "BenchmarkECWrite/fua-4KiB/plain-file 1 445728 p50-ns 5408 write-p50-ns 440320 sync-p50-ns 1393 IOPS\n")
	require.Regexp(t, `^ECWrite/fua-4KiB/capsule-ec-engine\s+-\s+ECWrite/fua-4KiB/plain-file\s+445728 p50-ns\s+-\s+R7′ <= 1\.50×\s+-$`, lines["ECWrite/fua-4KiB/capsule-ec-engine"])
	require.NotContains(t, lines, "ECWrite/write-amp/capsule-ec")
}
