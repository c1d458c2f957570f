#!/usr/bin/env bash
# R6′ and R12: capsule's FUSE mount (bin/mount) over shm:// and iwarp://,
# each measured beside its baseline in the same run.
#
# R6′, fio psync QD1 against the null go-fuse file system (cmd/fusebench
# null): 4 KiB random read, 1 MiB sequential read and write, O_DIRECT,
# and a buffered 1 MiB sequential read from a cold page cache
# (read-ahead). Every fio run on a FUSE mount also reports the CPU time
# (utime+stime of /proc/PID/stat) per request of the process serving the
# mount (bin/mount, or the null or loopback file system) and, for
# capsule, of the target. The window is the whole fio run, its 1 s ramp
# included, so the requests are fio's total_ios plus IOPS × the ramp.
# The Go file client alone (no FUSE) runs the read cases too: what the
# mount adds on top of it is the FUSE layer's cost.
#
# R12, against go-fuse's loopback (cmd/fusebench loopback) of a
# directory on the disk that holds the target's data directory (never
# tmpfs; FUSEBENCH_DIR):
#   create-stat-unlink  cmd/fusebench meta: META_FILES files created,
#                       then stat'ed, then unlinked; whole cycles per
#                       second (and each phase's rate), also beside
#                       the loopback of tmpfs as before
#   seq-8KiB, seq-1MiB  buffered sequential writes of a new file with fio
#                       psync (direct=0, fallocate=none: each write
#                       appends, as cp, tar, dd or a log writer's do),
#                       then one fsync (end_fsync=1, inside fio's
#                       runtime), WRITE_SIZE bytes or RUNTIME seconds,
#                       whichever ends first. The kernel's writeback
#                       cache is off, so every write(2) is one FUSE
#                       WRITE (MOUNT_ARGS=--write-behind buffers the
#                       small ones in the mount and sends them 1 MiB at
#                       a time; fs/fusefs, "Writes"): 8 KiB (a database page, a
#                       small application's write) against the mount's
#                       own 1 MiB is the per-request cost of the write
#                       path against its bandwidth. The bar is capsule's 8 KiB over
#                       capsule's 1 MiB; the loopback's pair is shown for
#                       scale.
#   untar               tar -x of Go's own src/ (from `go env GOROOT`,
#                       packed once into the work directory: with Go
#                       1.26, 12,802 entries and 127 MB of file data;
#                       fewer than 10,000 entries is an error; it takes
#                       minutes on capsule today) into the mount of the first
#                       transport and into the disk loopback, timed up
#                       to durability: syncfs of the mount (a no-op on
#                       both FUSE mounts today, kept for one that
#                       implements it), an fsync of one extracted file
#                       (on capsule that syncs the target's whole store;
#                       its metadata commits are synced already) and a
#                       syncfs of the disk (the loopback's page cache).
#                       Each tree is then checked against the tarball
#                       itself: every entry's type, mode, symlink target,
#                       size, mtime and the SHA-256 of every file's
#                       bytes, read back through the mount (the mount
#                       drops cached pages of a file it wrote at its next
#                       open, so the bytes come from the target). A
#                       mismatch is printed and makes the script exit 1
#                       at the end.
# Every repetition runs each fio case on every mount back to back, then
# the Go client, the writes, the metadata workload and the untar.
#
# Each result is a benchmark line for cmd/benchtable:
#   "BenchmarkFUSE/CASE/MOUNT 1 N IOPS M MB/s [T target-µs/IO] [U mount-µs/IO]"
#   "BenchmarkFUSEWrite/seq-8KiB|seq-1MiB/MOUNT 1 N IOPS M MB/s [T target-µs/IO] U mount-µs/IO"
#   "BenchmarkFUSEMeta/OP/MOUNT 1 N ops/s" (OP create, stat, unlink or
#   create-stat-unlink)
#   "BenchmarkFUSEUntar/gosrc/MOUNT 1 F files/s S s M MB/s"
# for MOUNT null, capsule-shm, capsule-iwarp, client-shm, client-iwarp,
# loopback-tmpfs or loopback-disk. With BENCH_OUT set they are appended
# to that file (scripts/bench.sh prints them in its one table); without,
# this script prints benchtable's table of them. Either way it prints
# each result as it comes and ends with the R6′ and R12 ratios (medians),
# which benchtable does not know yet.
#
# Environment: COUNT repetitions (3), RUNTIME seconds per fio run (8),
# SIZE of the capsule test file (1G), WRITE_SIZE of each write case's
# file (256M), MOUNT_ARGS extra bin/mount flags (e.g. "--max-readahead
# 1048576"), NULL_ARGS extra null-FS flags, TARGET_ARGS extra target
# flags, TRANSPORTS ("shm iwarp"), META_FILES (2000), UNTAR (1; 0 leaves
# the untar out), FUSEBENCH_DIR
# the directory on the disk under test (/var/tmp), BENCH_OUT.
# A quick smoke run: COUNT=1 RUNTIME=2 META_FILES=500 UNTAR=0 TRANSPORTS=shm.
# Needs root (or fusermount3 rights), fio, python3, tar.
set -euo pipefail
cd "$(dirname "$0")/.."
count="${COUNT:-3}"
runtime="${RUNTIME:-8}"
size="${SIZE:-1G}"
write_size="${WRITE_SIZE:-256M}"
transports="${TRANSPORTS:-shm iwarp}"
meta_files="${META_FILES:-2000}"
untar="${UNTAR:-1}"
dir="${FUSEBENCH_DIR:-/var/tmp}"
bench_out="${BENCH_OUT:-}"
for tool in fio python3 fusermount3 tar; do
	command -v "$tool" >/dev/null || { echo "fusebench: $tool is missing (make deps installs it)" >&2; exit 1; }
done

# The disk under test: the target's data directory and the disk
# loopback's directory are both under dir.
fstype="$(df --output=fstype "$dir" | tail -1 | tr -d ' ')"
case "$fstype" in
tmpfs | ramfs | devtmpfs) echo "fusebench: $dir is on $fstype, not a disk: set FUSEBENCH_DIR" >&2; exit 2 ;;
esac
avail="$(df --output=avail -B1M "$dir" | tail -1 | tr -d ' ')"
[ "$avail" -ge 6144 ] || { echo "fusebench: $dir has $avail MiB free, needs 6144" >&2; exit 2; }

go build -o bin/target ./cmd/target
go build -o bin/mount ./cmd/mount
go build -o bin/fusebench ./cmd/fusebench

work="$(mktemp -d "$dir/fusebench.XXXXXX")"
tmpfs_dir="" # the tmpfs loopback's directory
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

# ticks PID: the CPU time (utime+stime, clock ticks) of PID so far
# (fields 14 and 15 of /proc/PID/stat, counted after the parenthesised
# command name); 0 for "-".
ticks() {
	if [ "$1" = - ]; then echo 0; return; fi
	sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}
hz="$(getconf CLK_TCK)"

[ -n "$bench_out" ] || echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F)"

# pid[MOUNT]: the process serving MOUNT (and pid[target] the target),
# whose CPU per request the fio runs report.
declare -A pid=()
mkdir -p "$work/null" "$work/loop" "$work/loopdisk" "$work/disk"
# shellcheck disable=SC2086 # the *_ARGS are extra flags, split on purpose
start "$work/null.log" "fusebench mounted" bin/fusebench null --size 4294967296 ${NULL_ARGS:-} "$work/null"
mounts+=("$work/null")
pid[null]="${pids[-1]}"

shm="shm://fusebench-$$"
port=$((20000 + $$ % 20000))
iwarp="iwarp://127.0.0.1:$port"
# shellcheck disable=SC2086 # the *_ARGS are extra flags, split on purpose
start "$work/target.log" "capsule target ready" bin/target serve --listen "$shm" --listen "$iwarp" \
	--data "$work/data" --scrub-rate 0 ${TARGET_ARGS:-}
pid[target]="${pids[-1]}"

declare -A url=([shm]="$shm" [iwarp]="$iwarp")
for tr in $transports; do
	mkdir -p "$work/$tr"
	# shellcheck disable=SC2086 # the *_ARGS are extra flags, split on purpose
	start "$work/mount-$tr.log" "capsule mounted at" bin/mount --target "${url[$tr]}" ${MOUNT_ARGS:-} "$work/$tr"
	mounts+=("$work/$tr")
	pid["capsule-$tr"]="${pids[-1]}"
done

# The loopback of a directory on the same disk as the target's data.
start "$work/loopdisk.log" "fusebench mounted" bin/fusebench loopback "$work/disk" "$work/loopdisk"
mounts+=("$work/loopdisk")
pid[loopback-disk]="${pids[-1]}"

# fio_run NAME FILE RW BS EXTRA... prints "IOPS BW_BYTES_PER_S IOS": IOS
# is the requests of the whole run, fio's total_ios plus IOPS × the 1 s
# ramp, which fio does not count.
fio_run() {
	local name="$1" file="$2" rw="$3" bs="$4"
	shift 4
	fio --name="$name" --filename="$file" --rw="$rw" --bs="$bs" --iodepth=1 --ioengine=psync \
		--time_based --runtime="$runtime" --ramp_time=1 --output-format=json "$@" |
		python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
d = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
print("%.0f %.0f %.0f" % (d["iops"], d["bw_bytes"], d["total_ios"] + d["iops"] * 1))'
}

# fio_write FILE BS: buffered sequential writes of the new file FILE,
# WRITE_SIZE bytes or RUNTIME seconds, then one fsync, all inside fio's
# runtime (no ramp); prints "IOPS BW_BYTES_PER_S IOS" and removes FILE.
fio_write() {
	fio --name=write --filename="$1" --rw=write --bs="$2" --size="$write_size" --runtime="$runtime" \
		--iodepth=1 --ioengine=psync --direct=0 --fallocate=none --end_fsync=1 --output-format=json |
		python3 -c '
import json, sys
d = json.load(sys.stdin)["jobs"][0]["write"]
print("%.0f %.0f %.0f" % (d["iops"], d["bw_bytes"], d["total_ios"]))'
	rm -f "$1"
}

# The capsule test file, written once through the first transport.
first="${transports%% *}"
fio --name=layout --filename="$work/$first/data" --rw=write --bs=1M --size="$size" --direct=1 \
	--ioengine=psync --output-format=terse >/dev/null

# results: the benchmark lines, appended to BENCH_OUT or kept here.
results="${bench_out:-$work/results}"
[ -n "$bench_out" ] || : >"$results"

# record GROUP CASE MOUNT TARGET-PID MOUNT-PID CMD... runs CMD, which
# prints "IOPS BYTES/s [IOS]", prints the result and appends its
# benchmark line "BenchmarkGROUP/CASE/MOUNT ...". A PID that is not "-"
# adds its CPU per request over CMD's run (IOS requests; without IOS,
# IOPS × RUNTIME) as target-µs/IO or mount-µs/IO.
record() {
	local group="$1" cname="$2" mname="$3" tpid="$4" mpid="$5"
	shift 5
	local t0 m0 t1 m1 r iops bw ios mbs line show="" us
	t0="$(ticks "$tpid")"
	m0="$(ticks "$mpid")"
	r="$("$@")"
	t1="$(ticks "$tpid")"
	m1="$(ticks "$mpid")"
	ios=""
	read -r iops bw ios <<<"$r"
	[ -n "$ios" ] || ios="$(awk -v i="$iops" -v r="$runtime" 'BEGIN { print i * r }')"
	mbs="$(awk -v b="$bw" 'BEGIN { printf "%.1f", b / 1e6 }')"
	line="Benchmark$group/$cname/$mname 1 $iops IOPS $mbs MB/s"
	if [ "$tpid" != - ]; then
		us="$(awk -v t="$((t1 - t0))" -v hz="$hz" -v n="$ios" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')"
		line+=" $us target-µs/IO"
		show+=" target $us"
	fi
	if [ "$mpid" != - ]; then
		us="$(awk -v t="$((m1 - m0))" -v hz="$hz" -v n="$ios" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')"
		line+=" $us mount-µs/IO"
		show+=" mount $us"
	fi
	printf '   %-14s %-14s %8.0f IOPS %8.1f MB/s%s\n' "$cname" "$mname" "$iops" "$mbs" "${show:+   cpu µs/IO:$show}"
	echo "$line" >>"$results"
}

# meta MOUNT DIR runs the metadata workload in DIR, prints its rates and
# appends a benchmark line for each ("meta create=R stat=R unlink=R
# create-stat-unlink=R). It syncs first, so that no mount's run shares
# the disk with the write-back of what ran before it (the write cases
# leave hundreds of MiB dirty).
meta() {
	local line kv
	sync
	line="$(bin/fusebench meta --files "$meta_files" "$2")"
	printf '   %-14s %s\n' "$1" "${line#meta }"
	for kv in ${line#meta }; do
		echo "BenchmarkFUSEMeta/${kv%%=*}/$1 1 ${kv#*=} ops/s" >>"$results"
	done
}

# manifest DIR|--tar TARBALL prints one sorted line per entry of the tree
# under DIR, or of the tarball: type, mode, size, mtime (whole seconds,
# as tar keeps them) and SHA-256 of a file; type, mode of a directory;
# a symlink's target. A hard link in the tarball is the file it links to.
manifest() {
	python3 - "$@" <<'EOF'
import hashlib, os, stat, sys, tarfile

def digest(f):
    h = hashlib.sha256()
    while b := f.read(1 << 20):
        h.update(b)
    return h.hexdigest()

out = []
if sys.argv[1] == "--tar":
    with tarfile.open(sys.argv[2]) as t:
        for m in t:
            name = m.name.rstrip("/")
            if m.issym():
                out.append("l %s -> %s" % (name, m.linkname))
            elif m.isdir():
                out.append("d %o %s" % (m.mode, name))
            elif m.isfile() or m.islnk():
                f = t.extractfile(m)
                size = m.size if m.isfile() else t.getmember(m.linkname).size
                out.append("f %o %d %d %s %s" % (m.mode, size, int(m.mtime), digest(f), name))
            else:
                out.append("? %s" % name)
else:
    root = sys.argv[1]
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            name = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out.append("l %s -> %s" % (name, os.readlink(p)))
            elif stat.S_ISDIR(st.st_mode):
                out.append("d %o %s" % (stat.S_IMODE(st.st_mode), name))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    out.append("f %o %d %d %s %s" % (stat.S_IMODE(st.st_mode), st.st_size, int(st.st_mtime), digest(f), name))
            else:
                out.append("? %s" % name)
print("\n".join(sorted(out)))
EOF
}

# The untar's tarball, its manifest, its entry count and bytes, and the
# file whose fsync ends each timed extraction.
tarball="$work/gosrc.tar"
failures="$work/untar.failures" # one line per tree that differs
if [ "$untar" != 0 ]; then
	goroot="$(go env GOROOT)"
	tar -C "$goroot" -cf "$tarball" src
	manifest --tar "$tarball" >"$work/gosrc.manifest"
	entries="$(wc -l <"$work/gosrc.manifest")"
	tar_bytes="$(awk '$1 == "f" { n += $3 } END { print n + 0 }' "$work/gosrc.manifest")"
	syncfile="$(awk '$1 == "f" && NF == 6 { print $6; exit }' "$work/gosrc.manifest")"
	[ "$entries" -ge 10000 ] || { echo "fusebench: $goroot/src has $entries entries, fewer than 10,000" >&2; exit 1; }
	echo "== untar tree: $goroot/src, $entries entries, $((tar_bytes / 1000000)) MB of file data"
fi

# untar_run MOUNT DIR REP extracts the tarball into DIR/untar-REP, timed
# up to durability (see the top), prints and records the result, checks
# the tree against the tarball and removes it.
untar_run() {
	local dest="$2/untar-$3" t0 t1 secs fps mbs verdict
	mkdir "$dest"
	sync -f "$work" # start from a clean disk: earlier dirty data is not this run's
	t0="$(date +%s.%N)"
	tar -C "$dest" -xf "$tarball"
	sync -f "$dest"
	sync "$dest/$syncfile"
	sync -f "$work"
	t1="$(date +%s.%N)"
	secs="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')"
	fps="$(awk -v n="$entries" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')"
	mbs="$(awk -v n="$tar_bytes" -v s="$secs" 'BEGIN { printf "%.1f", n / s / 1e6 }')"
	if manifest "$dest" | cmp -s - "$work/gosrc.manifest"; then
		verdict="tree byte-exact"
	else
		manifest "$dest" | diff "$work/gosrc.manifest" - | head -20 >&2 || true
		verdict="TREE DIFFERS from the tarball"
		echo "untar $1 rep $3: $verdict" >>"$failures"
	fi
	printf '   %-14s %-14s %8.2f s %8s files/s %8.1f MB/s   %s\n' untar "$1" "$secs" "$fps" "$mbs" "$verdict"
	echo "BenchmarkFUSEUntar/gosrc/$1 1 $fps files/s $secs s $mbs MB/s" >>"$results"
	rm -rf "$dest"
}

tmpfs_dir="$(mktemp -d /dev/shm/fusebench.XXXXXX)"
start "$work/loop.log" "fusebench mounted" bin/fusebench loopback "$tmpfs_dir" "$work/loop"
mounts+=("$work/loop")

# name, fio rw, block size, direct. bufread-1MiB is a buffered sequential
# read from a cold page cache (read-ahead at work; the null file system
# answers it with direct_io all the same).
cases=("randread-4KiB randread 4k 1" "seqread-1MiB read 1M 1" "seqwrite-1MiB write 1M 1" "bufread-1MiB read 1M 0")
echo "== R6′ and R12 through FUSE: the null go-fuse file system, capsule over ${transports// /, }, the Go client alone (fio psync QD1, ${runtime}s each); buffered writes, metadata ($meta_files files)$([ "$untar" = 0 ] || echo " and untar") beside go-fuse's loopback of a disk directory ($dir, $fstype) and of tmpfs; $count repetitions"
for rep in $(seq "$count"); do
	echo "-- repetition $rep of $count"
	for c in "${cases[@]}"; do
		read -r cname rw bs direct <<<"$c"
		record FUSE "$cname" null - "${pid[null]}" fio_run "$cname" "$work/null/data" "$rw" "$bs" --direct="$direct" --invalidate=1 --size=4G
		for tr in $transports; do
			record FUSE "$cname" "capsule-$tr" "${pid[target]}" "${pid[capsule-$tr]}" \
				fio_run "$cname" "$work/$tr/data" "$rw" "$bs" --direct="$direct" --invalidate=1 --size="$size"
		done
	done
	# The Go file client alone, same file, same request sizes.
	for tr in $transports; do
		record FUSE randread-4KiB "client-$tr" "${pid[target]}" - bin/fusebench client --target "${url[$tr]}" --rw randread --bs 4096 --runtime "${runtime}s" data
		record FUSE seqread-1MiB "client-$tr" "${pid[target]}" - bin/fusebench client --target "${url[$tr]}" --rw read --bs 1048576 --runtime "${runtime}s" data
	done
	# Buffered sequential writes of a new file, 8 KiB and 1 MiB.
	for bs in 8KiB 1MiB; do
		record FUSEWrite "seq-$bs" loopback-disk - "${pid[loopback-disk]}" fio_write "$work/loopdisk/write" "${bs%iB}"
		for tr in $transports; do
			record FUSEWrite "seq-$bs" "capsule-$tr" "${pid[target]}" "${pid[capsule-$tr]}" fio_write "$work/$tr/write" "${bs%iB}"
		done
	done
	# Metadata: create, stat, unlink per second.
	meta loopback-tmpfs "$work/loop"
	meta loopback-disk "$work/loopdisk"
	for tr in $transports; do
		meta "capsule-$tr" "$work/$tr"
	done
	# Untar, on the first transport only: it takes minutes on capsule.
	if [ "$untar" != 0 ]; then
		untar_run loopback-disk "$work/loopdisk" "$rep"
		untar_run "capsule-$first" "$work/$first" "$rep"
	fi
done
fusermount3 -u "$work/loop"
rm -rf "$tmpfs_dir"

if [ -z "$bench_out" ]; then
	echo
	go run ./cmd/benchtable <"$results"
fi

# The R6′ and R12 ratios, medians of this run's repetitions (benchtable
# does not know the new benchmarks yet).
echo
echo "== R6′ and R12 (medians of $count repetitions; bars of shared/PERFORMANCE.md)"
python3 - "$results" "$transports" "$first" "$untar" "$([ -f "$failures" ] && echo bad || echo ok)" <<'EOF'
import statistics, sys

path, transports, first, untar, verified = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5]
res = {}
for line in open(path):
    f = line.split()
    if len(f) < 4 or not f[0].startswith("Benchmark") or len(f) % 2:
        continue
    r = res.setdefault(f[0][len("Benchmark"):], {})
    for v, u in zip(f[2::2], f[3::2]):
        try:
            r.setdefault(u, []).append(float(v))
        except ValueError:
            pass

def med(name, unit):
    v = res.get(name, {}).get(unit)
    return statistics.median(v) if v else None

def row(rid, what, name, base, unit, bar=0.0, goal=0.0):
    v, b = med(name, unit), med(base, unit)
    if v is None or b is None or b == 0:
        return
    q = v / b
    verdict = ""
    if bar:
        verdict = "bar >= %.2f%s %s" % (bar, " (goal %.2f)" % goal if goal else "", "ok" if q >= bar else "BELOW")
    short = lambda n: n.split("/", 1)[1]  # CASE/MOUNT
    print("%-4s %-30s %-30s %9s %-7s against %-27s %9s  = %.2f  %s" % (
        rid, what, short(name), fmt(v), unit, short(base), fmt(b), q, verdict))

def fmt(x):
    return "{:,.0f}".format(x) if x >= 100 else "{:.1f}".format(x)

def cpu(rid, what, name):
    t, m = med(name, "target-µs/IO"), med(name, "mount-µs/IO")
    if t is None and m is None:
        return
    parts = []
    if t is not None:
        parts.append("target %.1f" % t)
    if m is not None:
        parts.append("mount %.1f" % m)
    print("%-4s %-30s %-30s CPU µs per request: %s" % (rid, what, name.split("/", 1)[1], ", ".join(parts)))

for tr in transports:
    shm = tr == "shm"
    row("R12", "create+stat+unlink per second", "FUSEMeta/create-stat-unlink/capsule-" + tr,
        "FUSEMeta/create-stat-unlink/loopback-disk", "ops/s", 0.5 if shm else 0, 0.8 if shm else 0)
    # The disk loopback's rate moves 2-3x with what the disk did before;
    # the tmpfs one's does not, so this shows whether capsule moved.
    row("R12", "  (against the tmpfs loopback)", "FUSEMeta/create-stat-unlink/capsule-" + tr,
        "FUSEMeta/create-stat-unlink/loopback-tmpfs", "ops/s")
for tr in transports:
    shm = tr == "shm"
    row("R12", "8 KiB against 1 MiB writes", "FUSEWrite/seq-8KiB/capsule-" + tr,
        "FUSEWrite/seq-1MiB/capsule-" + tr, "MB/s", 0.5 if shm else 0, 0.8 if shm else 0)
row("R12", "(the loopback's own pair)", "FUSEWrite/seq-8KiB/loopback-disk", "FUSEWrite/seq-1MiB/loopback-disk", "MB/s")
for tr in transports:
    row("R12", "8 KiB writes against loopback", "FUSEWrite/seq-8KiB/capsule-" + tr, "FUSEWrite/seq-8KiB/loopback-disk", "MB/s")
if untar != "0":
    row("R12", "untar of Go's src/", "FUSEUntar/gosrc/capsule-" + first, "FUSEUntar/gosrc/loopback-disk", "files/s")
    print("R12  untar trees: %s" % ("every one byte-exact" if verified == "ok" else "SOME DIFFER from the tarball (above)"))
for tr in transports:
    shm = tr == "shm"
    for c, bar, goal in (("randread-4KiB", 0.45, 0.6), ("seqread-1MiB", 0.70, 0.9)):
        row("R6′", c + " QD1 against null", "FUSE/%s/capsule-%s" % (c, tr), "FUSE/%s/null" % c, "IOPS",
            bar if shm else 0, goal if shm else 0)
        cpu("R6′", "  its CPU", "FUSE/%s/capsule-%s" % (c, tr))
for c in ("randread-4KiB", "seqread-1MiB"):
    cpu("R6′", "  the null FS's CPU", "FUSE/%s/null" % c)
EOF
if [ -f "$failures" ]; then
	echo "fusebench: an untarred tree differs from the tarball:" >&2
	cat "$failures" >&2
	exit 1
fi
