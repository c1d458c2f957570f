#!/usr/bin/env bash
# Runs every benchmark beside its same-run baseline and prints the ratios
# that shared/PERFORMANCE.md asks for. COUNT sets the repetitions (median).
set -euo pipefail
cd "$(dirname "$0")/.."
count="${COUNT:-5}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

go test -run '^$' -bench '^Benchmark(Transfer|PingPong)$' -benchmem -count "$count" -timeout 60m ./rdma/conformance | tee "$out"
echo
go run ./internal/benchtable < "$out"
