#!/usr/bin/env bash
# R6: fio through capsule's FUSE mount (bin/mount) over shm:// and
# iwarp://, beside the null go-fuse file system (internal/fusebench) in
# the same run, and metadata rates beside a go-fuse loopback mount of
# tmpfs. Cases: 4 KiB random read at QD1, 1 MiB sequential read and
# write, O_DIRECT (psync), and a buffered 1 MiB sequential read from a
# cold page cache (read-ahead). Every repetition runs each case on every
# mount back to back; the table shows medians and the ratio to null.
#
# Environment: COUNT repetitions (3), RUNTIME seconds per fio run (8),
# SIZE of the capsule test file (1G), MOUNT_ARGS extra bin/mount flags
# (e.g. "--max-readahead 1048576"), NULL_ARGS extra null-FS flags,
# TRANSPORTS ("shm iwarp"), META_FILES (2000).
# Needs root (or fusermount3 rights), fio, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
count="${COUNT:-3}"
runtime="${RUNTIME:-8}"
size="${SIZE:-1G}"
transports="${TRANSPORTS:-shm iwarp}"
meta_files="${META_FILES:-2000}"

go build -o bin/target ./cmd/target
go build -o bin/mount ./cmd/mount
go build -o bin/fusebench ./internal/fusebench

work="$(mktemp -d /tmp/fusebench.XXXXXX)"
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

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F)"

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

# name, fio rw, block size, direct. bufread1m is a buffered sequential
# read from a cold page cache (read-ahead at work; the null file system
# answers it with direct_io all the same).
cases=("randread4k randread 4k 1" "seqread1m read 1M 1" "seqwrite1m write 1M 1" "bufread1m read 1M 0")
results="$work/results"
: >"$results"
for rep in $(seq "$count"); do
	for c in "${cases[@]}"; do
		read -r cname rw bs direct <<<"$c"
		echo "null $cname $(fio_run "$cname" "$work/null/data" "$rw" "$bs" --direct="$direct" --invalidate=1 --size=4G)" >>"$results"
		for tr in $transports; do
			echo "$tr $cname $(fio_run "$cname" "$work/$tr/data" "$rw" "$bs" --direct="$direct" --invalidate=1 --size="$size")" >>"$results"
		done
	done
done

# The Go file client alone, same file, same request sizes: what the
# mount adds on top of it is the FUSE layer's cost.
for rep in $(seq "$count"); do
	for tr in $transports; do
		echo "client-$tr randread4k $(bin/fusebench client --target "${url[$tr]}" --rw randread --bs 4096 --runtime "${runtime}s" data)" >>"$results"
		echo "client-$tr seqread1m $(bin/fusebench client --target "${url[$tr]}" --rw read --bs 1048576 --runtime "${runtime}s" data)" >>"$results"
	done
done

echo
echo "== R6: fio psync QD1 through FUSE, medians of $count runs of ${runtime}s; client-*: the Go client alone"
python3 - "$results" <<'EOF'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    fs, case, iops, bw = line.split()
    rows.setdefault((fs, case), []).append((float(iops), float(bw)))
cases = ["randread4k", "seqread1m", "seqwrite1m", "bufread1m"]
fss = sorted({fs for fs, _ in rows}, key=lambda f: (f != "null", f.startswith("client-"), f))
print("| case | mount | IOPS | MB/s | vs null |")
print("|---|---|---|---|---|")
for c in cases:
    base = statistics.median(r[0] for r in rows[("null", c)])
    for fs in fss:
        if (fs, c) not in rows:
            continue
        iops = statistics.median(r[0] for r in rows[(fs, c)])
        bw = statistics.median(r[1] for r in rows[(fs, c)])
        print("| %s | %s | %.0f | %.0f | %.0f %% |" % (c, fs, iops, bw / 1e6, 100 * iops / base))
EOF

echo
echo "== metadata: create, stat, unlink per second ($meta_files files), go-fuse loopback of tmpfs vs capsule"
tmpfs_dir="$(mktemp -d /dev/shm/fusebench.XXXXXX)"
start "$work/loop.log" "fusebench mounted" bin/fusebench loopback "$tmpfs_dir" "$work/loop"
mounts+=("$work/loop")
echo "loopback-tmpfs $(bin/fusebench meta --files "$meta_files" "$work/loop")"
for tr in $transports; do
	echo "capsule-$tr $(bin/fusebench meta --files "$meta_files" "$work/$tr")"
done
fusermount3 -u "$work/loop"
rm -rf "$tmpfs_dir"
