#!/usr/bin/env bash
# R11: spdk_nvme_perf against capsule's NVMe/TCP target (bin/target serve,
# a memory namespace) and against SPDK's nvmf_tgt with a Malloc bdev, in
# one run, alternating target by target within each case:
#   randread-4KiB-qd32, randread-4KiB-qd1, seqread-1MiB-qd8, randwrite-4KiB-qd32
# spdk_nvme_perf runs as SPDK documents it (no hostnqn) on core 1
# (-c 0x2); nvmf_tgt polls core 0 (-m 0x1) all the time, capsule uses what
# the scheduler gives it. Each run reports IOPS, MB/s, mean latency and
# the CPU per I/O of the target and of perf (from /proc/PID/stat; perf's
# from its own exit), so a ratio can be read beside what it cost.
#
# Each result is a benchmark line "BenchmarkR11/CASE/TARGET 1 N IOPS M
# MB/s L lat-µs C target-µs/IO P perf-µs/IO"; with BENCH_OUT set they are
# appended to that file (scripts/bench.sh), and either way the script
# ends with a table of medians and capsule/nvmf_tgt ratios.
#
# Environment: COUNT repetitions (3), RUNTIME seconds per run (5),
# SPDK_DIR (../shared/tools/spdk: its run script installs what the tools
# need and sets up hugepages, so this needs root), BENCH_OUT. Without
# SPDK it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
count="${COUNT:-3}"
runtime="${RUNTIME:-5}"
spdk="${SPDK_DIR:-../shared/tools/spdk}"
bench_out="${BENCH_OUT:-}"
if [ ! -x "$spdk/run" ] || [ ! -x "$spdk/bin/spdk_nvme_perf" ] || [ ! -x "$spdk/bin/nvmf_tgt" ]; then
	echo "== R11: skipped, no SPDK in $spdk (set SPDK_DIR)"
	exit 0
fi
spdk="$(cd "$spdk" && pwd)"
go build -o bin/target ./cmd/target

work="$(mktemp -d /tmp/spdkbench.XXXXXX)"
out="$work/results"
: >"$out"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
hz="$(getconf CLK_TCK)"

# ticks PID: the CPU time (utime+stime, clock ticks) of PID so far.
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== R11: spdk_nvme_perf against capsule (NVMe/TCP, 256 MiB mem namespace) and nvmf_tgt (256 MiB Malloc bdev): $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"

cport="$(freeport)"
./bin/target serve --listen "tcp://127.0.0.1:$cport" --namespace mem:256MiB --fs "" --data "$work/data" \
	--scrub-rate 0 --rpc-socket "$work/capsule.sock" >"$work/target.out" 2>"$work/target.err" &
pids+=($!)
capsule_pid=$!
for _ in $(seq 600); do grep -q "^capsule target ready" "$work/target.out" 2>/dev/null && break; sleep 0.1; done
grep -q "^capsule target ready" "$work/target.out" || { echo "spdkbench: capsule did not start" >&2; cat "$work/target.err" >&2; exit 1; }

sport="$(freeport)"
# The run script execs nvmf_tgt: $! is nvmf_tgt itself.
"$spdk/run" nvmf_tgt -m 0x1 -s 1024 -r "$work/spdk.sock" >"$work/nvmf_tgt.log" 2>&1 &
pids+=($!)
spdk_pid=$!
rpc() { "$spdk/run" rpc.py -s "$work/spdk.sock" "$@" >"$work/rpc.out" 2>&1 || { echo "spdkbench: rpc.py $*:" >&2; cat "$work/rpc.out" >&2; return 1; }; }
for _ in $(seq 300); do [ -S "$work/spdk.sock" ] && rpc rpc_get_methods 2>/dev/null && break; sleep 0.1; done
rpc nvmf_create_transport -t TCP
rpc bdev_malloc_create -b Malloc0 256 512
rpc nvmf_create_subsystem nqn.2016-06.io.spdk:cnode1 -a -s SPDK00000000000001
rpc nvmf_subsystem_add_ns nqn.2016-06.io.spdk:cnode1 Malloc0
rpc nvmf_subsystem_add_listener nqn.2016-06.io.spdk:cnode1 -t tcp -a 127.0.0.1 -s "$sport"

declare -A port=([capsule]="$cport" [nvmf_tgt]="$sport") tpid=([capsule]="$capsule_pid" [nvmf_tgt]="$spdk_pid")

# perf_case CASE TARGET: one spdk_nvme_perf run.
perf_case() {
	local name="$1" tgt="$2" rw bs qd
	case "$name" in
	randread-4KiB-qd32) rw=randread bs=4096 qd=32 ;;
	randread-4KiB-qd1) rw=randread bs=4096 qd=1 ;;
	seqread-1MiB-qd8) rw=read bs=1048576 qd=8 ;;
	randwrite-4KiB-qd32) rw=randwrite bs=4096 qd=32 ;;
	esac
	local t0 t1 pticks line iops mibs lat ios tcpu pcpu
	t0="$(ticks "${tpid[$tgt]}")"
	pticks="$( ("$spdk/run" spdk_nvme_perf -r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:${port[$tgt]}" \
		-q "$qd" -o "$bs" -w "$rw" -t "$runtime" -c 0x2 >"$work/perf.out" 2>&1 || true
		read -r st <"/proc/$BASHPID/stat"
		echo "${st##*) }" | awk '{print $14 + $15}'))"
	t1="$(ticks "${tpid[$tgt]}")"
	line="$(grep -m1 '^Total' "$work/perf.out" || true)"
	if [ -z "$line" ]; then
		echo "spdkbench: $name on $tgt gave no result:" >&2
		cat "$work/perf.out" >&2
		exit 1
	fi
	# Total : IOPS MiB/s Average min max
	iops="$(echo "$line" | awk '{print $3}')"
	mibs="$(echo "$line" | awk '{printf "%.1f", $4 * 1048576 / 1e6}')"
	lat="$(echo "$line" | awk '{print $5}')"
	ios="$(awk -v i="$iops" -v r="$runtime" 'BEGIN { print i * r }')"
	tcpu="$(awk -v t="$((t1 - t0))" -v hz="$hz" -v n="$ios" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')"
	pcpu="$(awk -v t="$pticks" -v hz="$hz" -v n="$ios" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')"
	printf '   %-20s %-9s %10.0f IOPS %8s MB/s %9s µs   cpu µs/IO: target %6s, perf %6s\n' \
		"$name" "$tgt" "$iops" "$mibs" "$lat" "$tcpu" "$pcpu"
	echo "BenchmarkR11/$name/$tgt 1 $iops IOPS $mibs MB/s $lat lat-µs $tcpu target-µs/IO $pcpu perf-µs/IO" >>"$out"
}

cases=(randread-4KiB-qd32 randread-4KiB-qd1 seqread-1MiB-qd8 randwrite-4KiB-qd32)
for r in $(seq "$count"); do
	echo "-- repetition $r of $count (${runtime}s each)"
	for c in "${cases[@]}"; do
		# Alternate which target goes first, so neither always meets the
		# other's leftovers.
		if [ $((r % 2)) = 1 ]; then order=(capsule nvmf_tgt); else order=(nvmf_tgt capsule); fi
		for tgt in "${order[@]}"; do perf_case "$c" "$tgt"; done
	done
done
[ -z "$bench_out" ] || cat "$out" >>"$bench_out"

echo "== R11 medians (capsule / nvmf_tgt; goal >= 1.0 each; nvmf_tgt busy-polls a core)"
printf '   %-20s %12s %12s %7s   %s\n' case capsule nvmf_tgt ratio "cpu µs/IO target: capsule, nvmf_tgt"
for c in "${cases[@]}"; do
	med() { grep "^BenchmarkR11/$c/$1 " "$out" | awk -v f="$2" '{print $f}' | sort -g | awk '{a[NR]=$1} END { if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
	unit=3
	[ "$c" = seqread-1MiB-qd8 ] && unit=5
	a="$(med capsule "$unit")" b="$(med nvmf_tgt "$unit")"
	ca="$(med capsule 9)" cb="$(med nvmf_tgt 9)"
	u=IOPS
	[ "$unit" = 5 ] && u=MB/s
	printf '   %-20s %12.1f %12.1f %7.2f   %s, %s   (%s)\n' "$c" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$ca" "$cb" "$u"
done
