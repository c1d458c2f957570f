#!/usr/bin/env bash
# Runs the benchmarks beside their same-run baselines and prints the
# ratios that shared/PERFORMANCE.md asks for. COUNT sets the repetitions
# of the RDMA transfer benchmarks (their table shows medians).
#   R1, R2  rdma/conformance   BenchmarkTransfer, BenchmarkPingPong (table below)
#   R3, R4  nvmeof/host        BenchmarkR3, BenchmarkR4 (ratios reported as metrics)
#   R7      chunkstore         SeqWrite 4+2 vs 1+0, SeqRead healthy vs degraded, Encode
#   R8      allocs/op in every line
set -euo pipefail
cd "$(dirname "$0")/.."
count="${COUNT:-5}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F)"
echo "== R1/R2: rdma transfers"
go test -run '^$' -bench '^Benchmark(Transfer|PingPong)$' -benchmem -count "$count" -timeout 60m ./rdma/conformance | tee "$out"
echo
go run ./internal/benchtable < "$out"
echo
echo "== R3/R4/R8: NVMe-oF through the host library (interleaved with their baselines)"
go test -run '^$' -bench '^Benchmark(R3|R4)$' -benchmem -count 3 -timeout 30m ./nvmeof/host
echo
echo "== R8: target dispatch"
go test -run '^$' -bench '^BenchmarkDispatch$' -benchmem -benchtime 2000x -timeout 30m ./nvmeof/target
echo
echo "== R7: erasure coding"
go test -run '^$' -bench '^Benchmark(SeqWrite|SeqRead|Encode|PlainFile)$' -benchmem -count 3 -timeout 30m ./chunkstore
