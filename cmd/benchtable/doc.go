// Command benchtable reads `go test -bench` output on stdin and prints the
// one table of ratios of shared/PERFORMANCE.md, each benchmark beside its
// same-run baseline:
//
//   - R1, R2: each provider's 1 MiB throughput (and 4 KiB, 64 KiB without
//     a bar) against memcpy (shm) or one loopback TCP stream (iwarp), and
//     the ping-pongs beside loopback TCP (rdma/conformance).
//   - R3: the host library's 4 KiB random reads at QD32 (BenchmarkR3's
//     iwarp-IOPS and shm-IOPS) against fio psync on tmpfs, and shm against
//     iwarp.
//   - R4: the QD1 read latencies of BenchmarkR4: iwarp's p50 minus the
//     TCP round trip's, and shm's p50 alone, each against 15 µs.
//   - R5: fio's nbd engine through the NBD bridge against nbdkit's memory
//     plugin.
//   - R5′: fio with capsule's in-process ioengine (bin/fio-capsule.so) on
//     the memory namespace over shm and iwarp against the same nbdkit run
//     (the bar over shm: 4 KiB random reads and writes at QD32, 1 MiB
//     sequential reads at QD8), and the CPU per I/O of fio and of the
//     server (target, target and bridge, or nbdkit) as multiples of
//     nbdkit's run, without a bar.
//   - R6′: fio through the FUSE mount against the null go-fuse file
//     system (the bars and goals on shm's 4 KiB random and 1 MiB
//     sequential reads; writes, buffered reads, iwarp and the Go client
//     alone without one), and metadata rates against go-fuse's loopback
//     of tmpfs, without a bar.
//   - R12: whole create+stat+unlink cycles through the mount against
//     go-fuse's loopback of a directory on the disk, and 8 KiB buffered
//     writes against the same mount's 1 MiB writes (in MB/s), each with
//     its bar and goal; the untar of Go's src/ against the same loopback,
//     without a bar.
//   - R7: chunkstore's SeqWrite/4+2 against SeqWrite/1+0 and
//     SeqRead/degraded against SeqRead/healthy; without a bar, 1+0 against
//     PlainFile and the store's encoding against reedsolomon.
//   - R7′: the erasure-coded write path end to end, fio's nbd engine
//     through the bridge on an ec: namespace against a file: namespace
//     of the same target on the same disk: 4 KiB random writes at QD32
//     (bar and goal) and 1 MiB sequential writes (bar; and, without a
//     bar, the v1 engine's against the same file: namespace and the log's
//     against the v1 engine's), 4 KiB random reads without a bar; the write amplification and the space
//     amplification that the script measured (at most a bound); the p50
//     of a QD1 4 KiB write and its flush as a multiple of a plain file's
//     write and fdatasync (at most 1.5×); and the CPU of the target and
//     the bridge per I/O, ec as a multiple of file, without a bar.
//   - R8: allocs/op of every Go benchmark in the last column, with the bar
//     on BenchmarkDispatch, whose op is one command (R3 and R4 count an op
//     as a block of reads; nvmeof/host's TestNoAllocationsPerIO checks the
//     host per I/O). The dispatch rows read each provider's per-command
//     time against its own 64 B ping-pong.
//
// The scripts write what fio and the metadata workload measure as
// benchmark lines of their own: scripts/bench.sh "BenchmarkBlock/CASE/PATH
// 1 N IOPS M MB/s F fio-µs/IO T target-µs/IO" and "BenchmarkR3Baseline/fio-psync-tmpfs 1 N IOPS",
// scripts/fusebench.sh "BenchmarkFUSE/CASE/MOUNT 1 N IOPS M MB/s" and
// "BenchmarkFUSEMeta/OP/MOUNT 1 N ops/s", "BenchmarkFUSEWrite/seq-BS/MOUNT
// 1 N IOPS M MB/s ..." and "BenchmarkFUSEUntar/gosrc/MOUNT 1 F files/s
// ...", scripts/ecwritebench.sh
// "BenchmarkECWrite/CASE/PATH 1 N IOPS M MB/s C cpu-µs/IO ...",
// "BenchmarkECWrite/fua-4KiB/PATH 1 P p50-ns ...",
// "BenchmarkECWrite/write-amp/capsule-ec 1 A write-amp ..." and
// "BenchmarkECWrite/space/capsule-ec 1 R space-amp ...".
//
//	go test -run '^$' -bench '^Benchmark(Transfer|PingPong)$' -benchmem -count 5 ./rdma/conformance | go run ./cmd/benchtable
//
// Every figure is the median of its runs, and a ratio is that of two
// medians (for times, the baseline's over the benchmark's, so above 1 is
// always faster), except on the R7′ cost rows, whose ratio "3.20×" is
// the benchmark's time or CPU per I/O over the baseline's. Lines that
// are not benchmark results are ignored. A row shows "-" where its
// benchmark or its baseline did not run (a provider not linked in) and
// is left out where neither ran, so a partial run (ONLY=block,
// fusebench.sh alone) prints only what it measured. The exit status is 0
// unless the input holds no benchmark line at all: the bars are
// reported, not enforced, since absolute numbers on shared machines move
// by tens of percent from run to run.
//
// It lives in cmd/ as a command of its own (go run ./cmd/benchtable, as
// scripts/bench.sh, fusebench.sh and ecwritebench.sh run it), but `make
// build` does not build it: it is a tool of the benchmarks, not part of
// what capsule ships.
package main
