#!/usr/bin/env bash
# R6: fio through capsule's FUSE mount (bin/mount) over shm:// and
# iwarp://, beside the null go-fuse file system (cmd/fusebench) in
# the same run, and metadata rates beside a go-fuse loopback mount of
# tmpfs. Cases: 4 KiB random read at QD1, 1 MiB sequential read and
# write, O_DIRECT (psync), and a buffered 1 MiB sequential read from a
# cold page cache (read-ahead). Every repetition runs each case on every
# mount back to back, then the Go file client alone (no FUSE) on the
# read cases, then the metadata workload on every mount.
#
# Each result is a benchmark line for cmd/benchtable:
# "BenchmarkFUSE/CASE/MOUNT 1 N IOPS M MB/s" and
# "BenchmarkFUSEMeta/OP/MOUNT 1 N ops/s". With BENCH_OUT set they are
# appended to that file (scripts/bench.sh prints them in its one table);
# without, this script ends with benchtable's table of them. Either way
# it prints each result as it comes.
#
# Environment: COUNT repetitions (3), RUNTIME seconds per fio run (8),
# SIZE of the capsule test file (1G), MOUNT_ARGS extra bin/mount flags
# (e.g. "--max-readahead 1048576"), NULL_ARGS extra null-FS flags,
# TRANSPORTS ("shm iwarp"), META_FILES (2000), BENCH_OUT.
# Needs root (or fusermount3 rights), fio, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
count="${COUNT:-3}"
runtime="${RUNTIME:-8}"
size="${SIZE:-1G}"
transports="${TRANSPORTS:-shm iwarp}"
meta_files="${META_FILES:-2000}"
bench_out="${BENCH_OUT:-}"

go build -o bin/target ./cmd/target
go build -o bin/mount ./cmd/mount
go build -o bin/fusebench ./cmd/fusebench

work="$(mktemp -d /tmp/fusebench.XXXXXX)"
tmpfs_dir="" # the loopback mount's tmpfs directory
pids=()
mounts=()
cleanup() {
	# Newest first: the mounts unmount themselves on SIGTERM before the
	# target they use stops; fusermount3 catches what is left.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
	for m in "${mounts[@]}"; do
		if grep -q " $m " /proc/mounts; then fusermount3 -u -z "$m" || true; fi
	done
	rm -rf "$work"
	[ -z "$tmpfs_dir" ] || rm -rf "$tmpfs_dir"
}
trap cleanup EXIT

# start LOG READY CMD... runs CMD in the background and waits for a
# stdout line starting with READY.
start() {
	local log="$1" ready="$2" what="$3"
	shift 2
	"$@" >"$log" 2>"$log.err" &
	pids+=($!)
	for _ in $(seq 300); do
		if grep -q "^$ready" "$log" 2>/dev/null; then return 0; fi
		if ! kill -0 "${pids[-1]}" 2>/dev/null; then
			echo "fusebench: $what exited:" >&2
			cat "$log.err" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "fusebench: $what not ready after 30s" >&2
	cat "$log.err" >&2
	exit 1
}

[ -n "$bench_out" ] || echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F)"

mkdir -p "$work/null" "$work/loop" "$work/tmpfs"
start "$work/null.log" "fusebench mounted" bin/fusebench null --size 4294967296 ${NULL_ARGS:-} "$work/null"
mounts+=("$work/null")

shm="shm://fusebench-$$"
port=$((20000 + $$ % 20000))
iwarp="iwarp://127.0.0.1:$port"
start "$work/target.log" "capsule target ready" bin/target serve --listen "$shm" --listen "$iwarp" \
	--data "$work/data" --scrub-rate 0 ${TARGET_ARGS:-}

declare -A url=([shm]="$shm" [iwarp]="$iwarp")
for tr in $transports; do
	mkdir -p "$work/$tr"
	start "$work/mount-$tr.log" "capsule mounted at" bin/mount --target "${url[$tr]}" ${MOUNT_ARGS:-} "$work/$tr"
	mounts+=("$work/$tr")
done

# fio_run NAME FILE RW BS EXTRA... prints "IOPS BW_BYTES_PER_S".
fio_run() {
	local name="$1" file="$2" rw="$3" bs="$4"
	shift 4
	fio --name="$name" --filename="$file" --rw="$rw" --bs="$bs" --iodepth=1 --ioengine=psync \
		--time_based --runtime="$runtime" --ramp_time=1 --output-format=json "$@" |
		python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
d = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
print("%.0f %.0f" % (d["iops"], d["bw_bytes"]))'
}

# The capsule test file, written once through the first transport.
first="${transports%% *}"
fio --name=layout --filename="$work/$first/data" --rw=write --bs=1M --size="$size" --direct=1 \
	--ioengine=psync --output-format=terse >/dev/null

# results: the benchmark lines, appended to BENCH_OUT or kept here.
results="${bench_out:-$work/results}"
[ -n "$bench_out" ] || : >"$results"

# record CASE MOUNT CMD... runs CMD, which prints "IOPS BYTES/s", prints
# the result and appends its benchmark line.
record() {
	local r iops bw mbs
	r="$("${@:3}")"
	read -r iops bw <<<"$r"
	mbs="$(awk -v b="$bw" 'BEGIN { printf "%.1f", b / 1e6 }')"
	printf '   %-14s %-14s %8.0f IOPS %8.0f MB/s\n' "$1" "$2" "$iops" "$mbs"
	echo "BenchmarkFUSE/$1/$2 1 $iops IOPS $mbs MB/s" >>"$results"
}

# meta MOUNT DIR runs the metadata workload in DIR, prints its rates and
# appends a benchmark line for each.
meta() {
	local line op rate
	line="$(bin/fusebench meta --files "$meta_files" "$2")"
	printf '   %-14s %s\n' "$1" "${line#meta }"
	for op in create stat unlink; do
		rate="$(echo "$line" | sed -n "s/.*$op=\([0-9.]*\).*/\1/p")"
		echo "BenchmarkFUSEMeta/$op/$1 1 $rate ops/s" >>"$results"
	done
}

tmpfs_dir="$(mktemp -d /dev/shm/fusebench.XXXXXX)"
start "$work/loop.log" "fusebench mounted" bin/fusebench loopback "$tmpfs_dir" "$work/loop"
mounts+=("$work/loop")

# name, fio rw, block size, direct. bufread-1MiB is a buffered sequential
# read from a cold page cache (read-ahead at work; the null file system
# answers it with direct_io all the same).
cases=("randread-4KiB randread 4k 1" "seqread-1MiB read 1M 1" "seqwrite-1MiB write 1M 1" "bufread-1MiB read 1M 0")
echo "== R6: fio psync QD1 through FUSE: the null go-fuse file system, capsule over ${transports// /, }, the Go client alone; metadata ($meta_files files) beside go-fuse's loopback of tmpfs; $count repetitions, ${runtime}s each"
for rep in $(seq "$count"); do
	echo "-- repetition $rep of $count"
	for c in "${cases[@]}"; do
		read -r cname rw bs direct <<<"$c"
		record "$cname" null fio_run "$cname" "$work/null/data" "$rw" "$bs" --direct="$direct" --invalidate=1 --size=4G
		for tr in $transports; do
			record "$cname" "capsule-$tr" fio_run "$cname" "$work/$tr/data" "$rw" "$bs" --direct="$direct" --invalidate=1 --size="$size"
		done
	done
	# The Go file client alone, same file, same request sizes: what the
	# mount adds on top of it is the FUSE layer's cost.
	for tr in $transports; do
		record randread-4KiB "client-$tr" bin/fusebench client --target "${url[$tr]}" --rw randread --bs 4096 --runtime "${runtime}s" data
		record seqread-1MiB "client-$tr" bin/fusebench client --target "${url[$tr]}" --rw read --bs 1048576 --runtime "${runtime}s" data
	done
	# Metadata: create, stat, unlink per second.
	meta loopback-tmpfs "$work/loop"
	for tr in $transports; do
		meta "capsule-$tr" "$work/$tr"
	done
done
fusermount3 -u "$work/loop"
rm -rf "$tmpfs_dir"

if [ -z "$bench_out" ]; then
	echo
	go run ./cmd/benchtable <"$results"
fi
