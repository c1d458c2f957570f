#!/usr/bin/env bash
# Runs the benchmarks beside their same-run baselines and prints the
# ratios that shared/PERFORMANCE.md asks for, ending with one table
# (cmd/benchtable) of every part's results:
#   R1, R2  rdma/conformance   BenchmarkTransfer, BenchmarkPingPong
#   R3, R4  nvmeof/host        BenchmarkR3, BenchmarkR4 (each path interleaved with its
#                              baselines), and fio psync 4 KiB random read on tmpfs as
#                              R3's baseline
#   R5      bin/mount --nbd    fio's nbd engine through the bridge, over shm:// and iwarp://,
#                              on a memory and an erasure-coded namespace, each case beside
#                              fio on `nbdkit memory` run the same way
#   R5′     bin/fio-capsule.so fio with capsule's in-process ioengine on the memory namespace
#                              over shm:// and iwarp://, one hop, beside the same nbdkit runs;
#                              every block case reports the CPU per I/O of fio and of the
#                              server (target, target+bridge, or nbdkit)
#   R6′     bin/mount          fio through the FUSE mount over shm:// and iwarp://, beside
#                              the null go-fuse file system, with the CPU per request of the
#                              target and the mount (scripts/fusebench.sh)
#   R12     bin/mount          the file service on a disk directory beside go-fuse's loopback
#                              of one on the same disk: create+stat+unlink per second,
#                              buffered 8 KiB against 1 MiB sequential writes, and an untar of
#                              Go's src/ checked byte for byte (scripts/fusebench.sh; META_FILES,
#                              WRITE_SIZE, UNTAR=0 leaves the untar out, FUSEBENCH_DIR)
#   R7      chunkstore         SeqWrite 4+2 vs 1+0, SeqRead degraded vs healthy, Encode
#   R7′     bin/mount --nbd    the ec write path end to end on a disk directory (not tmpfs):
#                              fio's nbd engine on an ec: beside a file: namespace of one
#                              target, write and space amplification, QD1 write+flush
#                              latency beside a plain file's fdatasync, CPU per I/O
#                              (scripts/ecwritebench.sh; RUNTIME_WA, ECWRITE_DIR, SPACE_BS)
#   R8      allocs/op in every Go benchmark line; nvmeof/target BenchmarkDispatch
# COUNT sets the repetitions of the RDMA transfer benchmarks, REPS those of
# every fio case and of the other Go benchmarks (at least 3; the table
# shows medians), RUNTIME the seconds of each fio run. ONLY=block runs the
# R5′ and R5 fio part (and R3's fio baseline) alone, ONLY=fuse the R6′ and R12 part alone,
# ONLY=ecwrite the R7′ part alone, ONLY=cluster issue 18's cluster figures
# alone (scripts/clusterbench.sh: six netns nodes against a local 4+2
# volume, and a move's rebuild rate; root).
set -euo pipefail
cd "$(dirname "$0")/.."
count="${COUNT:-5}"
reps="${REPS:-3}"
runtime="${RUNTIME:-5}"
only="${ONLY:-}"
[ "$reps" -ge 3 ] || { echo "REPS must be at least 3" >&2; exit 2; }
case "$only" in "" | block | fuse | ecwrite | cluster) ;; *) echo "ONLY must be block, fuse, ecwrite or cluster" >&2; exit 2 ;; esac
work="$(mktemp -d)"
out="$work/results"
: >"$out"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"

# waitline FILE PREFIX: waits for a line starting with PREFIX in FILE and
# prints it.
waitline() {
	for _ in $(seq 600); do
		if grep -q "^$2" "$1" 2>/dev/null; then grep -m1 "^$2" "$1"; return 0; fi
		sleep 0.1
	done
	echo "bench: no '$2' in $1:" >&2; cat "$1" >&2; exit 1
}

# ticks PID...: the CPU time (utime+stime, clock ticks) of the PIDs so far,
# summed (fields 14 and 15 of /proc/PID/stat, counted after the
# parenthesised command name).
ticks() {
	local p t=0
	for p in "$@"; do t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}'))); done
	echo "$t"
}
hz="$(getconf CLK_TCK)"

# fio_case NAME PATH URI SERVER-PID...: one fio run of case NAME, with
# fio's nbd engine, or with capsule's engine for an engine-* PATH (URI a
# capsule URL then); prints progress and appends a Go-benchmark-style
# line (IOPS, MB/s, and CPU per I/O of fio and of the server processes)
# to the results. fio runs in a subshell that reads its own children's
# CPU (cutime+cstime) once fio has exited; CPU per I/O counts the ramp's
# I/Os too (IOPS times ramp plus runtime) and fio's connection setup.
fio_case() {
	local name="$1" path="$2" uri="$3" rw bs qd field
	shift 3
	case "$name" in
	randread-4KiB) rw=randread bs=4k qd=32 field=8 ;;
	randwrite-4KiB) rw=randwrite bs=4k qd=32 field=49 ;;
	seqread-1MiB) rw=read bs=1m qd=8 field=8 ;;
	seqwrite-1MiB) rw=write bs=1m qd=8 field=49 ;;
	esac
	local engine=(--ioengine=nbd --uri="$uri")
	case "$path" in engine-*) engine=(--ioengine=external:bin/fio-capsule.so --thread=1 --uri="$uri") ;; esac
	local line iops kib t0 t1 fticks ios mbs fcpu tcpu
	t0="$(ticks "$@")"
	fticks="$( (fio --name=bench "${engine[@]}" --rw="$rw" --bs="$bs" --iodepth="$qd" \
		--numjobs=1 --size=512m --time_based --runtime="$runtime" --ramp_time=1 --norandommap \
		--randrepeat=0 --group_reporting --output-format=terse --terse-version=3 >"$work/fio.out"
		read -r st <"/proc/$BASHPID/stat" # a builtin: this subshell's own stat, fio waited for
		echo "${st##*) }" | awk '{print $14 + $15}'))"
	t1="$(ticks "$@")"
	line="$(grep "^3;" "$work/fio.out")"
	iops="$(echo "$line" | cut -d';' -f"$field")"
	kib="$(echo "$line" | cut -d';' -f"$((field - 1))")"
	mbs="$(echo "$kib" | awk '{printf "%.1f", $1*1024/1e6}')"
	ios="$(awk -v i="$iops" -v r="$runtime" 'BEGIN { print i * (r + 1) }')"
	fcpu="$(awk -v t="$fticks" -v hz="$hz" -v n="$ios" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')"
	tcpu="$(awk -v t="$((t1 - t0))" -v hz="$hz" -v n="$ios" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')"
	printf '   %-15s %-17s %10.0f IOPS %8.0f MB/s   cpu µs/IO: fio %6.1f, server %6.1f\n' "$name" "$path" "$iops" "$mbs" "$fcpu" "$tcpu"
	echo "BenchmarkBlock/$name/$path 1 $iops IOPS $mbs MB/s $fcpu fio-µs/IO $tcpu target-µs/IO" >>"$out"
}

block() {
	for tool in fio nbdkit nbdinfo python3; do
		command -v "$tool" >/dev/null || { echo "bench: $tool is missing (make deps installs it)" >&2; exit 1; }
	done
	[ -f bin/fio-capsule.so ] || { echo "bench: bin/fio-capsule.so is missing (make fio-engine builds it)" >&2; exit 1; }
	echo "== R5′ and R5: block I/O with fio, capsule's engine in fio (one hop) and fio's nbd engine through the NBD bridge, beside nbdkit memory ($reps repetitions, ${runtime}s each)"
	local shm="shm://bench-$$" port
	./bin/target serve --listen iwarp://127.0.0.1:0 --listen "$shm" --data "$work/data" --scrub-rate 0 \
		--namespace mem:512MiB --namespace ec:benchvol:512MiB >"$work/target.out" 2>"$work/target.err" &
	pids+=($!)
	local target_pid=$!
	local ready iwarp
	ready="$(waitline "$work/target.out" "capsule target ready")"
	iwarp="$(echo "$ready" | sed 's/.*listeners=\([^, ]*\).*/\1/')"
	# servers[PATH]: the processes that serve PATH, whose CPU is its
	# server's.
	declare -gA uris=() servers=()
	uris[engine-shm-mem]="$shm" servers[engine-shm-mem]="$target_pid"
	uris[engine-iwarp-mem]="$iwarp" servers[engine-iwarp-mem]="$target_pid"
	local i=0
	for t in shm iwarp; do
		for ns in 1 2; do
			local url="$shm" kind=mem
			[ "$t" = iwarp ] && url="$iwarp"
			[ "$ns" = 2 ] && kind=ec
			./bin/mount --target "$url" --nsid "$ns" --nbd 127.0.0.1:0 >"$work/mount$i.out" 2>"$work/mount$i.err" &
			pids+=($!)
			ready="$(waitline "$work/mount$i.out" "capsule nbd ready")"
			uris["capsule-$t-$kind"]="nbd://$(echo "$ready" | sed 's/.*listen=\([^ ]*\).*/\1/')/"
			servers["capsule-$t-$kind"]="$target_pid $!"
			i=$((i + 1))
		done
	done
	port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
	nbdkit --foreground --exit-with-parent -i 127.0.0.1 -p "$port" memory 512M >"$work/nbdkit.out" 2>&1 &
	pids+=($!)
	servers[nbdkit-memory]="$!"
	for _ in $(seq 100); do nbdinfo --can connect "nbd://127.0.0.1:$port/" 2>/dev/null && break; sleep 0.1; done
	uris[nbdkit-memory]="nbd://127.0.0.1:$port/"
	local paths=(nbdkit-memory engine-shm-mem engine-iwarp-mem capsule-shm-mem capsule-iwarp-mem capsule-shm-ec capsule-iwarp-ec)
	for r in $(seq "$reps"); do
		echo "-- repetition $r of $reps"
		# The writes go first: they fill every path's 512 MiB, so the reads
		# read data everywhere, not holes.
		for c in seqwrite-1MiB randwrite-4KiB seqread-1MiB randread-4KiB; do
			# shellcheck disable=SC2086 # servers[] holds PIDs, split on purpose
			for p in "${paths[@]}"; do fio_case "$c" "$p" "${uris[$p]}" ${servers[$p]}; done
		done
	done
	echo "-- R3 baseline: fio psync 4 KiB random read on tmpfs (/dev/shm), 1 job"
	local f="/dev/shm/capsule-bench-$$"
	for r in $(seq "$reps"); do
		local line
		line="$(fio --name=r3 --filename="$f" --size=256m --rw=randread --bs=4k --ioengine=psync --numjobs=1 \
			--time_based --runtime="$runtime" --ramp_time=1 --norandommap --randrepeat=0 \
			--output-format=terse --terse-version=3)"
		echo "   fio psync tmpfs $(echo "$line" | cut -d';' -f8) IOPS"
		echo "BenchmarkR3Baseline/fio-psync-tmpfs 1 $(echo "$line" | cut -d';' -f8) IOPS" >>"$out"
	done
	rm -f "$f"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}

# fuse: R6′ and R12, scripts/fusebench.sh (META_FILES, WRITE_SIZE, UNTAR and
# FUSEBENCH_DIR pass through), its results appended to ours; it prints
# its own R6′ and R12 ratios, which the table does not show yet.
fuse() {
	for tool in fio python3 fusermount3; do
		command -v "$tool" >/dev/null || { echo "bench: $tool is missing (make deps installs it)" >&2; exit 1; }
	done
	BENCH_OUT="$out" COUNT="$reps" RUNTIME="$runtime" ./scripts/fusebench.sh
}

# ecwrite: R7′, scripts/ecwritebench.sh (RUNTIME_WA, ECWRITE_DIR and
# SPACE_BS pass through), its results appended to ours.
ecwrite() {
	BENCH_OUT="$out" COUNT="$reps" RUNTIME="$runtime" ./scripts/ecwritebench.sh
}

if [ -z "$only" ]; then
	echo "== R1/R2: rdma transfers"
	go test -run '^$' -bench '^Benchmark(Transfer|PingPong)$' -benchmem -count "$count" -timeout 60m ./rdma/conformance | tee -a "$out"
	echo
	echo "== R3/R4/R8: NVMe-oF through the host library (interleaved with their baselines)"
	go test -run '^$' -bench '^Benchmark(R3|R4)$' -benchmem -count "$reps" -timeout 30m ./nvmeof/host | tee -a "$out"
	echo
	echo "== R8: target dispatch"
	go test -run '^$' -bench '^BenchmarkDispatch$' -benchmem -benchtime 20000x -count "$reps" -timeout 30m ./nvmeof/target | tee -a "$out"
	echo
	echo "== R7: erasure coding"
	go test -run '^$' -bench '^Benchmark(SeqWrite|SeqRead|Encode|PlainFile)$' -benchmem -count "$reps" -timeout 30m ./chunkstore | tee -a "$out"
	echo
fi
if [ -z "$only" ] || [ "$only" = block ]; then
	block
	echo
fi
if [ -z "$only" ] || [ "$only" = fuse ]; then
	fuse
	echo
fi
if [ -z "$only" ] || [ "$only" = ecwrite ]; then
	ecwrite
	echo
fi
if [ -z "$only" ] || [ "$only" = cluster ]; then
	echo "== the cluster (issue 18): printed as it runs, not in the table"
	RUNTIME="$runtime" ./scripts/clusterbench.sh
	echo
fi
# R11: spdk_nvme_perf against capsule and SPDK's nvmf_tgt, where SPDK is
# (SPDK_DIR, ../shared/tools/spdk); scripts/spdkbench.sh prints its table.
if [ -z "$only" ]; then
	BENCH_OUT="$out" COUNT="$reps" RUNTIME="$runtime" ./scripts/spdkbench.sh
	echo
fi
go run ./cmd/benchtable <"$out"
