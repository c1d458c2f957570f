#!/usr/bin/env bash
# R7′: the erasure-coded write path end to end. One bin/target serve with
# an ec: namespace (NSID 1) and a file: namespace (NSID 2) whose data
# directory is on the same disk (never tmpfs), each exported by its own
# bin/mount --nbd bridge over shm://, driven by fio's nbd engine. Every
# repetition measures, in this order:
#   seqwrite-1MiB   1 MiB sequential writes at QD8, ec beside file (bar 0.55),
#                   and beside what the disk itself takes: fio's direct
#                   1 MiB writes at QD8 to a file in the same directory
#                   (disk-direct). The file namespace's writes overwrite a
#                   1 GiB file in the page cache; the ec store's go to the
#                   log, 1.59 device bytes per host byte, and its
#                   checkpoints make them durable: on a disk slower than
#                   the page cache, its ceiling is the disk's bandwidth
#                   over 1.59, 0.63 of disk-direct. The v1 engine (below)
#                   runs it too, as the store this bar was set against.
#   randwrite-4KiB  4 KiB random writes at QD32, ec beside file (bar 0.50, goal 0.80)
#   randread-4KiB   4 KiB random reads at QD32, ec beside file, and beside
#                   the same on the v1 engine (copy-on-write stripes): a
#                   bin/target built from V1_COMMIT, with a v1 store of its
#                   own on the same disk (R7′: no slower than before, ±10 %)
#   fua-4KiB        4 KiB FUA writes at QD1 with fio's capsule engine
#                   (bin/fio-capsule.so, one hop over shm, --fua=1) on ec
#                   and on file, beside fio psync --fdatasync=1 on a plain
#                   file in the same directory: p50 of the FUA write
#                   against that of write + fdatasync (bar: ec at most
#                   1.5 × the plain file); and, for tools that speak only
#                   NBD, 4 KiB writes each followed by a flush through the
#                   bridge (fio --fsync=1), p50 of write + sync
#   write-amp       4 KiB random overwrites at QD32 of the filled ec volume
#                   for RUNTIME_WA seconds: the target's write_bytes
#                   (/proc/PID/io) over the bytes fio wrote (bar 2.5, goal 1.8)
#   space           three random passes of SPACE_BS writes over the whole ec
#                   volume, then a flush and up to 30 s for the target to
#                   settle: the allocated bytes of DATA/dev*/shards over the
#                   live data × (K+M)/K (bar 1.3)
# Both volumes are filled once, sequentially, before the first repetition,
# so that writes overwrite and reads read data, and the live data of the
# ec store is the whole volume. Every bridge case also reports the CPU
# time (utime+stime, /proc/PID/stat) of the target and of its bridge per
# I/O; for a write case the window ends after a flush, so that what the
# target destages after fio ends is charged to the case that wrote it.
# The fio runs have no ramp_time: CPU, write_bytes and fio's counts must
# cover the same interval.
#
# Each result is a benchmark line for cmd/benchtable:
#   "BenchmarkECWrite/CASE/PATH 1 N IOPS M MB/s C cpu-µs/IO T target-µs/IO B bridge-µs/IO"
#   "BenchmarkECWrite/fua-4KiB/PATH 1 P p50-ns W write-p50-ns S sync-p50-ns N IOPS ..."
#   "BenchmarkECWrite/write-amp/capsule-ec 1 A write-amp X wchar-amp N IOPS ..."
#   "BenchmarkECWrite/space/capsule-ec 1 R space-amp A alloc-MB L live-MB"
# for PATH capsule-ec, capsule-file, capsule-ec-v1 or plain-file. With BENCH_OUT set they
# are appended to that file (scripts/bench.sh prints them in its one
# table); without, this script ends with benchtable's table of them.
#
# Environment: COUNT repetitions (3, at least 3), RUNTIME seconds per fio
# run (5), RUNTIME_WA seconds of the write-amplification run (60),
# SIZE_MIB of each namespace (1024), SPACE_BS block size of the space
# passes (64k: three passes of 4 KiB writes over 1 GiB are 786,432
# writes, over ten minutes at today's rate), EC geometry (4+2),
# ECWRITE_DIR the directory on the disk under test (/var/tmp), V1_COMMIT
# the commit whose bin/target runs the v1 engine (d04816e, the last before
# the log; "" leaves it out, as does a clone without it), CASES the
# cases to run (all: "seqwrite randwrite randread fua write-amp space"),
# TARGET_ARGS more flags for bin/target serve (say "--write-cache 0"),
# BENCH_OUT.
# Needs fio, nbdsh (python3-libnbd), python3.
set -euo pipefail
cd "$(dirname "$0")/.."
count="${COUNT:-3}"
runtime="${RUNTIME:-5}"
runtime_wa="${RUNTIME_WA:-60}"
size_mib="${SIZE_MIB:-1024}"
space_bs="${SPACE_BS:-64k}"
geometry="${EC:-4+2}"
dir="${ECWRITE_DIR:-/var/tmp}"
bench_out="${BENCH_OUT:-}"
v1_commit="${V1_COMMIT-d04816e}"
cases=" ${CASES:-seqwrite randwrite randread fua write-amp space} "
want() { [[ "$cases" == *" $1 "* ]]; }
[ "$count" -ge 3 ] || { echo "ecwritebench: COUNT must be at least 3" >&2; exit 2; }
k="${geometry%+*}"
m="${geometry#*+}"
for tool in fio nbdsh python3 du df; do
	command -v "$tool" >/dev/null || { echo "ecwritebench: $tool is missing (make deps installs it)" >&2; exit 1; }
done

# The disk under test: the store's devices, the file namespace and the
# plain file all live in one directory on it.
fstype="$(df --output=fstype "$dir" | tail -1 | tr -d ' ')"
source="$(df --output=source "$dir" | tail -1 | tr -d ' ')"
case "$fstype" in
tmpfs | ramfs | devtmpfs) echo "ecwritebench: $dir is on $fstype, not a disk: set ECWRITE_DIR" >&2; exit 2 ;;
esac
# The ec volume takes (K+M)/K of its size and more while overwritten
# stripes wait to be reclaimed; with the file namespace and the plain
# file, 8 volumes' worth is plenty.
avail="$(df --output=avail -B1M "$dir" | tail -1 | tr -d ' ')"
[ "$avail" -ge $((8 * size_mib)) ] || { echo "ecwritebench: $dir has $avail MiB free, needs $((8 * size_mib))" >&2; exit 2; }

# Alone it builds what it runs; scripts/bench.sh runs after make's build.
if [ -z "$bench_out" ]; then
	go build -o bin/target ./cmd/target
	go build -o bin/mount ./cmd/mount
	make -s fio-engine >/dev/null
fi

work="$(mktemp -d "$dir/capsule-ecwrite.XXXXXX")"
data="$work/data"
plain="$work/plain-file"
pids=()
cleanup() {
	# Newest first: the bridges end before the target they use.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

# start LOG READY WHAT CMD... runs CMD in the background and waits for a
# stdout line starting with READY; the line is left in LOG.
start() {
	local log="$1" ready="$2" what="$3"
	shift 3
	"$@" >"$log" 2>"$log.err" &
	pids+=($!)
	for _ in $(seq 300); do
		if grep -q "^$ready" "$log" 2>/dev/null; then return 0; fi
		if ! kill -0 "${pids[-1]}" 2>/dev/null; then
			echo "ecwritebench: $what exited:" >&2
			cat "$log.err" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "ecwritebench: $what not ready after 30s" >&2
	cat "$log.err" >&2
	exit 1
}

[ -n "$bench_out" ] || echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F), load $(cut -d' ' -f1-3 /proc/loadavg)"

shm="shm://ecwrite-$$"
# No file service (--fs ""): nothing but the two namespaces writes to the disk.
start "$work/target.log" "capsule target ready" target bin/target serve --listen "$shm" --data "$data" \
	--scrub-rate 0 --fs "" --ec "$geometry" \
	--namespace "ec:ecwrite:${size_mib}MiB" --namespace "file:file.img:${size_mib}MiB" ${TARGET_ARGS:-}
target_pid="${pids[-1]}"
declare -A uri=() bridge=() tpid=([capsule-ec]="$target_pid" [capsule-file]="$target_pid")
paths=(capsule-ec capsule-file)
# The v1 engine: its own bin/target, built from v1_commit's tree, serving
# an ec namespace of the same size and geometry on a v1 store of its own;
# read through today's bridge.
v1=()
if [ -n "$v1_commit" ] && git cat-file -e "$v1_commit^{commit}" 2>/dev/null; then
	mkdir -p "$work/v1src"
	git archive "$v1_commit" | tar -x -C "$work/v1src"
	(cd "$work/v1src" && go build -o "$work/v1-target" ./cmd/target) ||
		{ echo "ecwritebench: building bin/target at $v1_commit failed" >&2; exit 1; }
	start "$work/target-v1.log" "capsule target ready" "target at $v1_commit" "$work/v1-target" serve \
		--listen "$shm-v1" --data "$work/data-v1" --scrub-rate 0 --fs "" --ec "$geometry" \
		--namespace "ec:ecwrite:${size_mib}MiB"
	tpid[capsule-ec-v1]="${pids[-1]}"
	v1=(capsule-ec-v1)
	paths+=(capsule-ec-v1)
fi
for p in "${paths[@]}"; do
	nsid=1 url="$shm"
	[ "$p" = capsule-file ] && nsid=2
	[ "$p" = capsule-ec-v1 ] && url="$shm-v1"
	start "$work/$p.log" "capsule nbd ready" "bridge $p" bin/mount --target "$url" --nsid "$nsid" --nbd 127.0.0.1:0
	bridge[$p]="${pids[-1]}"
	uri[$p]="nbd://$(sed -n 's/^capsule nbd ready listen=\([^ ]*\).*/\1/p' "$work/$p.log")/"
done

results="${bench_out:-$work/results}"
[ -n "$bench_out" ] || : >"$results"
tck="$(getconf CLK_TCK)"
size_bytes=$((size_mib << 20))

# cpu PID: utime+stime of PID in clock ticks (fields 14 and 15 of
# /proc/PID/stat, counted after the parenthesised command name).
cpu() {
	local s f
	s="$(cat "/proc/$1/stat")"
	s="${s##*) }"
	read -r -a f <<<"$s"
	echo $((f[11] + f[12]))
}

# iostat PID FIELD: a counter of /proc/PID/io (write_bytes, wchar).
iostat() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/io"; }

# flush URI sends one NBD_CMD_FLUSH (the bridge makes it an NVMe Flush of
# the namespace). nbdsh's own directory leads PATH, so that it finds the
# python3 its package was built for (as integration/nbd_helpers_test.go).
nbdsh_dir="$(dirname "$(command -v nbdsh)")"
flush() { PATH="$nbdsh_dir:$PATH" nbdsh -u "$1" -c 'h.flush()'; }

# settle CMD...: runs CMD, which prints a number, every second until the
# target is quiet: CMD's reading unchanged over a second in which the
# target used under 5 % of a core (at the earliest after 2 s, at the
# latest after 30 s). Prints the last reading and the seconds waited.
# With settle_stop set to a command, it also ends when that command
# succeeds, and prints the reading of the second before.
settle() {
	local prev cur c0 c1 waited=1
	sleep 1
	cur="$("$@")"
	c1="$(cpu "$target_pid")"
	while [ "$waited" -lt 30 ]; do
		prev="$cur" c0="$c1"
		sleep 1
		waited=$((waited + 1))
		cur="$("$@")"
		c1="$(cpu "$target_pid")"
		if [ -n "${settle_stop:-}" ] && $settle_stop; then
			cur="$prev"
			break
		fi
		if [ "$cur" = "$prev" ] && [ $(((c1 - c0) * 20)) -lt "$tck" ]; then break; fi
	done
	echo "$cur $waited"
}

# alloc: the allocated bytes (st_blocks × 512) of the store's shard files.
alloc() { du -s -c --block-size=1 "$data"/dev*/shards | tail -1 | cut -f1; }

# fio_json FILE ARGS... runs fio with ARGS, its JSON output in FILE, and
# prints "IOPS BYTES/s IOS BYTES LAT_P50_NS SYNC_P50_NS" of its one job:
# the write side when it wrote, else the read side. LAT is submission to
# completion (lat_ns, --lat_percentiles=1; clat_ns when absent), SYNC that
# of the syncs (0 without any).
fio_json() {
	local file="$1"
	shift
	fio --output-format=json --output="$file" --numjobs=1 --group_reporting "$@" >/dev/null ||
		{ echo "ecwritebench: fio $* failed" >&2; return 1; }
	python3 - "$file" <<-'EOF'
		import json, sys
		j = json.load(open(sys.argv[1]))["jobs"][0]
		d = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
		def p50(lat):
		    return lat.get("percentile", {}).get("50.000000", 0) if lat.get("N", 0) else 0
		lat = p50(d["lat_ns"]) or p50(d["clat_ns"])
		print("%.0f %.0f %d %d %d %d" % (d["iops"], d["bw_bytes"], d["total_ios"], d["io_bytes"], lat, p50(j["sync"]["lat_ns"])))
	EOF
}

# The fio options of every timed run through a bridge (whose --uri
# follows: an engine's options come after --ioengine): the whole volume,
# one connection.
nbd_fio=(--ioengine=nbd --size="${size_mib}m" --time_based --randrepeat=0)

# bridge_run PATH WRITES FIO-ARGS... runs fio through PATH's bridge (and,
# when WRITES is 1, a flush after it) and prints fio_json's fields
# followed by the target's and the bridge's CPU µs per I/O.
bridge_run() {
	local p="$1" writes="$2" t0 b0 t1 b1 r ios
	shift 2
	t0="$(cpu "${tpid[$p]}")" b0="$(cpu "${bridge[$p]}")"
	r="$(fio_json "$work/fio.json" --name="$p" "${nbd_fio[@]}" --uri="${uri[$p]}" "$@")"
	[ "$writes" = 0 ] || flush "${uri[$p]}"
	t1="$(cpu "${tpid[$p]}")" b1="$(cpu "${bridge[$p]}")"
	ios="$(echo "$r" | cut -d' ' -f3)"
	echo "$r $(awk -v t=$((t1 - t0)) -v b=$((b1 - b0)) -v n="$ios" -v hz="$tck" \
		'BEGIN { n = n > 0 ? n : 1; printf "%.1f %.1f", t * 1e6 / hz / n, b * 1e6 / hz / n }')"
}

# record CASE PATH FIELDS: prints bridge_run's FIELDS and appends the
# benchmark line of CASE on PATH.
record() {
	local iops bw ios bytes lat sync tcpu bcpu mbs total
	read -r iops bw ios bytes lat sync tcpu bcpu <<<"$3"
	mbs="$(awk -v b="$bw" 'BEGIN { printf "%.1f", b / 1e6 }')"
	total="$(awk -v a="$tcpu" -v b="$bcpu" 'BEGIN { printf "%.1f", a + b }')"
	printf '   %-15s %-13s %9.0f IOPS %7.1f MB/s   cpu %7.1f µs/IO (target %.1f, bridge %.1f)\n' \
		"$1" "$2" "$iops" "$mbs" "$total" "$tcpu" "$bcpu"
	echo "BenchmarkECWrite/$1/$2 1 $iops IOPS $mbs MB/s $total cpu-µs/IO $tcpu target-µs/IO $bcpu bridge-µs/IO" >>"$results"
}

# engine_fua PATH: 4 KiB FUA writes at QD1 with fio's capsule engine on
# the ec (capsule-ec-engine) or file namespace (capsule-file-engine), one
# hop over shm; p50 submission to completion. CPU is the target's.
engine_fua() {
	local p="$1" nsid=1 t0 t1 r iops bw ios bytes lat sync tcpu
	[ "$p" = capsule-file-engine ] && nsid=2
	t0="$(cpu "$target_pid")"
	r="$(fio_json "$work/fio.json" --name="$p" --ioengine=external:bin/fio-capsule.so --thread=1 --uri="$shm" --nsid="$nsid" \
		--rw=randwrite --bs=4k --iodepth=1 --fua=1 --lat_percentiles=1 --time_based --runtime="$runtime" --randrepeat=0)"
	t1="$(cpu "$target_pid")"
	read -r iops bw ios bytes lat sync <<<"$r"
	tcpu="$(awk -v t=$((t1 - t0)) -v n="$ios" -v hz="$tck" 'BEGIN { n = n > 0 ? n : 1; printf "%.1f", t * 1e6 / hz / n }')"
	printf '   %-15s %-19s p50 %7.1f µs (FUA write) %7.0f IOPS   cpu %s µs/IO (target)\n' fua-4KiB "$p" \
		"$(awk -v n="$lat" 'BEGIN { print n / 1e3 }')" "$iops" "$tcpu"
	echo "BenchmarkECWrite/fua-4KiB/$p 1 $lat p50-ns $iops IOPS $tcpu target-µs/IO" >>"$results"
}

# fua PATH: 4 KiB random writes at QD1, each followed by a flush, through
# PATH's bridge (fio's nbd engine turns --fsync into NBD_CMD_FLUSH; it
# refuses --fdatasync with EINVAL), or on the plain file with psync and
# an fdatasync after each write. "Write then sync" end to end is the
# write's p50 (submission to completion) plus the sync's: fio times the
# two apart and logs no per-pair latency; the mean cycle (1/IOPS)
# includes fio's own time between them.
fua() {
	local p="$1" r iops bw ios bytes lat sync tcpu="" bcpu="" cpu_fields="" cpu_note=""
	if [ "$p" = plain-file ]; then
		r="$(fio_json "$work/fio.json" --name=plain --filename="$plain" --ioengine=psync --size="${size_mib}m" \
			--rw=randwrite --bs=4k --fdatasync=1 --lat_percentiles=1 --time_based --runtime="$runtime" --randrepeat=0)"
	else
		r="$(bridge_run "$p" 1 --rw=randwrite --bs=4k --iodepth=1 --fsync=1 --lat_percentiles=1 --runtime="$runtime")"
	fi
	read -r iops bw ios bytes lat sync tcpu bcpu <<<"$r"
	if [ -n "$tcpu" ]; then
		local total
		total="$(awk -v a="$tcpu" -v b="$bcpu" 'BEGIN { printf "%.1f", a + b }')"
		cpu_fields=" $total cpu-µs/IO $tcpu target-µs/IO $bcpu bridge-µs/IO"
		cpu_note="   cpu $total µs/IO (target $tcpu, bridge $bcpu)"
	fi
	printf '   %-15s %-13s p50 %7.1f µs (write %.1f + sync %.1f) %7.0f IOPS%s\n' fua-4KiB "$p" \
		"$(awk -v n=$((lat + sync)) 'BEGIN { print n / 1e3 }')" "$(awk -v n="$lat" 'BEGIN { print n / 1e3 }')" \
		"$(awk -v n="$sync" 'BEGIN { print n / 1e3 }')" "$iops" "$cpu_note"
	echo "BenchmarkECWrite/fua-4KiB/$p 1 $((lat + sync)) p50-ns $lat write-p50-ns $sync sync-p50-ns $iops IOPS$cpu_fields" >>"$results"
}

# write_amp: RUNTIME_WA seconds of 4 KiB random overwrites at QD32 on the
# filled ec volume. The target's write_bytes (what it caused to be
# written to the disk: page-cache pages dirtied and direct writes; a page
# rewritten while still dirty counts once) and wchar (bytes passed to
# write calls) are read with the store quiet before, and after a flush
# and until write_bytes stops growing: the busy cleaner's catching up is
# in the window, the idle pass that follows 3 s later (which space
# reports) is not. The store's own counters give the busy cleaner's moves
# per host byte (its idle passes' excluded).
write_amp() {
	local wb0 wc0 wb1 wc1 t0 b0 t1 b1 r iops bw ios bytes waited i0 h0 m0
	flush "${uri[capsule-ec]}"
	r="$(settle iostat "$target_pid" write_bytes)"
	read -r wb0 waited <<<"$r"
	wc0="$(iostat "$target_pid" wchar)"
	i0="$(store_stat idle_bytes)" h0="$(store_stat host_bytes)" m0="$(store_stat cleaner_bytes)"
	idle_began() { [ "$(store_stat idle_bytes)" != "$i0" ]; }
	t0="$(cpu "$target_pid")" b0="$(cpu "${bridge[capsule-ec]}")"
	r="$(fio_json "$work/fio.json" --name=wa "${nbd_fio[@]}" --uri="${uri[capsule-ec]}" \
		--rw=randwrite --bs=4k --iodepth=32 --norandommap --runtime="$runtime_wa")"
	flush "${uri[capsule-ec]}"
	local s1 moved
	s1="$(settle_stop=idle_began settle iostat "$target_pid" write_bytes)"
	read -r wb1 waited <<<"$s1"
	wc1="$(iostat "$target_pid" wchar)"
	moved="$(awk -v h=$(($(store_stat host_bytes) - h0)) -v m=$(($(store_stat cleaner_bytes) - m0 - $(store_stat idle_bytes) + i0)) \
		'BEGIN { h = h > 0 ? h : 1; printf "%.3f", m / h }')"
	t1="$(cpu "$target_pid")" b1="$(cpu "${bridge[capsule-ec]}")"
	read -r iops bw ios bytes _ <<<"$r"
	local line
	line="$(awk -v wb=$((wb1 - wb0)) -v wc=$((wc1 - wc0)) -v n="$bytes" -v ios="$ios" -v t=$((t1 - t0)) -v b=$((b1 - b0)) -v hz="$tck" 'BEGIN {
		n = n > 0 ? n : 1; ios = ios > 0 ? ios : 1
		printf "%.3f %.3f %.1f %.1f %.1f %.0f %.0f", wb / n, wc / n, (t + b) * 1e6 / hz / ios, t * 1e6 / hz / ios, b * 1e6 / hz / ios, wb / 1e6, n / 1e6 }')"
	local wa wca cpu_t cpu_tg cpu_b wb_mb fio_mb
	read -r wa wca cpu_t cpu_tg cpu_b wb_mb fio_mb <<<"$line"
	printf '   %-15s %-13s %s (target wrote %s MB for fio'"'"'s %s MB; wchar %s; the cleaner moved %s per host byte) %7.0f IOPS   cpu %.1f µs/IO, settled in %ss\n' \
		write-amp capsule-ec "$wa" "$wb_mb" "$fio_mb" "$wca" "$moved" "$iops" "$cpu_t" "$waited"
	echo "BenchmarkECWrite/write-amp/capsule-ec 1 $wa write-amp $wca wchar-amp $moved cleaner-share $wb_mb target-MB $fio_mb fio-MB $iops IOPS $cpu_t cpu-µs/IO $cpu_tg target-µs/IO $cpu_b bridge-µs/IO" >>"$results"
}

# store_stat FIELD prints a field of the ec store's counters (the target's
# store_get_status over its admin socket).
store_stat() {
	bin/target rpc --socket "$data/capsule.sock" store_get_status |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["stats"][sys.argv[1]])' "$1"
}

# space: three random passes of SPACE_BS writes over the whole ec volume
# (fio's random map: each pass writes every block once), a flush, then
# the store's idle pass (chunkstore.WithIdleCompaction: 3 s after the last
# I/O it compacts to 1.1 × the live data and punches the free slots; up to
# 120 s) and up to 30 s more for the allocation to settle; then the shard
# files' allocated bytes over what the live data (the whole volume: it
# was filled) takes at K+M over K. The line also has what the idle pass
# moved and how long it took to start and end.
space() {
	local r bw a waited c0 i0 idle=0
	c0="$(store_stat compactions)" i0="$(store_stat idle_bytes)"
	r="$(fio_json "$work/fio.json" --name=space --ioengine=nbd --uri="${uri[capsule-ec]}" --size="${size_mib}m" \
		--loops=3 --randrepeat=0 --rw=randwrite --bs="$space_bs" --iodepth=32)"
	flush "${uri[capsule-ec]}"
	while [ "$(store_stat compactions)" = "$c0" ] && [ "$idle" -lt 120 ]; do
		sleep 1
		idle=$((idle + 1))
	done
	local s1 moved
	moved="$(awk -v a="$(store_stat idle_bytes)" -v b="$i0" 'BEGIN { printf "%.0f", (a - b) / 1e6 }')"
	s1="$(settle alloc)"
	read -r a waited <<<"$s1"
	waited="$waited s after an idle pass of ${idle} s that moved $moved MB"
	bw="$(echo "$r" | cut -d' ' -f2)"
	local line ratio alloc_mb live_mb
	line="$(awk -v a="$a" -v s="$size_bytes" -v k="$k" -v m="$m" 'BEGIN { live = s * (k + m) / k; printf "%.3f %.0f %.0f", a / live, a / 1e6, live / 1e6 }')"
	read -r ratio alloc_mb live_mb <<<"$line"
	printf '   %-15s %-13s %s (%s MB allocated for %s MB of live data at %s; 3 passes of %s at %.0f MB/s), settled in %s\n' \
		space capsule-ec "$ratio" "$alloc_mb" "$live_mb" "$geometry" "$space_bs" "$(awk -v b="$bw" 'BEGIN { print b / 1e6 }')" "$waited"
	echo "BenchmarkECWrite/space/capsule-ec 1 $ratio space-amp $alloc_mb alloc-MB $live_mb live-MB $moved idle-moved-MB $idle idle-s" >>"$results"
}

echo "== R7′: the ec write path through the NBD bridge over shm, ec:${size_mib}MiB ($geometry) beside file:${size_mib}MiB on $source ($fstype, $dir); $count repetitions, ${runtime}s each, write amplification ${runtime_wa}s"
echo "-- filling the volumes (1 MiB sequential writes) and the plain file"
for p in "${paths[@]}"; do
	r="$(fio_json "$work/fio.json" --name=fill --ioengine=nbd --uri="${uri[$p]}" --size="${size_mib}m" --rw=write --bs=1m --iodepth=8)"
	flush "${uri[$p]}"
	printf '   %-15s %-13s %7.0f MB/s\n' fill "$p" "$(awk -v b="$(echo "$r" | cut -d' ' -f2)" 'BEGIN { print b / 1e6 }')"
done
fio --name=layout --filename="$plain" --size="${size_mib}m" --rw=write --bs=1m --ioengine=psync --end_fsync=1 \
	--output-format=terse >/dev/null
for rep in $(seq "$count"); do
	echo "-- repetition $rep of $count"
	for p in capsule-ec capsule-file "${v1[@]}"; do
		want seqwrite || break
		record seqwrite-1MiB "$p" "$(bridge_run "$p" 1 --rw=write --bs=1m --iodepth=8 --runtime="$runtime")"
	done
	if want seqwrite; then
		read -r iops bw _ <<<"$(fio_json "$work/fio.json" --name=disk --filename="$work/disk-direct" --size="${size_mib}m" \
			--rw=write --bs=1m --iodepth=8 --ioengine=libaio --direct=1 --time_based --runtime="$runtime")"
		rm -f "$work/disk-direct"
		mbs="$(awk -v b="$bw" 'BEGIN { printf "%.1f", b / 1e6 }')"
		printf '   %-15s %-13s %9.0f IOPS %7.1f MB/s\n' seqwrite-1MiB disk-direct "$iops" "$mbs"
		echo "BenchmarkECWrite/seqwrite-1MiB/disk-direct 1 $iops IOPS $mbs MB/s" >>"$results"
	fi
	for p in capsule-ec capsule-file; do
		want randwrite || break
		record randwrite-4KiB "$p" "$(bridge_run "$p" 1 --rw=randwrite --bs=4k --iodepth=32 --norandommap --runtime="$runtime")"
	done
	for p in capsule-ec capsule-file "${v1[@]}"; do
		want randread || break
		record randread-4KiB "$p" "$(bridge_run "$p" 0 --rw=randread --bs=4k --iodepth=32 --norandommap --runtime="$runtime")"
	done
	if want fua; then
		for p in capsule-ec-engine capsule-file-engine; do engine_fua "$p"; done
		for p in capsule-ec capsule-file plain-file; do fua "$p"; done
	fi
	if want write-amp; then write_amp; fi
	if want space; then space; fi
done

if [ -z "$bench_out" ]; then
	echo
	go run ./cmd/benchtable <"$results"
fi
