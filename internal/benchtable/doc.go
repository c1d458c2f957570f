// Command benchtable reads `go test -bench` output on stdin and prints the
// ratio table of shared/PERFORMANCE.md: each provider's throughput beside
// its same-run baseline (shm against memcpy, bar R1; iwarp against one
// loopback TCP stream, bar R2), the ping-pong latencies beside loopback
// TCP, the host library's random reads beside fio psync on tmpfs (R3),
// fio's nbd engine through the NBD bridge beside nbdkit's memory plugin
// (R5), and allocations per op (R8). scripts/bench.sh writes the fio
// results as benchmark lines of its own: "BenchmarkBlock/CASE/PATH 1 N
// IOPS M MB/s".
//
//	go test -run '^$' -bench '^Benchmark(Transfer|PingPong)$' -benchmem -count 5 ./rdma/conformance | go run ./internal/benchtable
//
// With -count above 1 every figure is the median of the runs. Lines that
// are not benchmark results are ignored; benchmarks that did not run
// (a provider not linked in) show as "-". The exit status is 0 unless the
// input holds no benchmark line at all: the bars are reported, not
// enforced, since absolute numbers on shared machines move by tens of
// percent from run to run.
package main
