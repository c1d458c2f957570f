#!/usr/bin/env bash
# Issue 18's benchmarks: a 4+2 volume on six cluster nodes, each in a
# network namespace of its own and reached over NVMe/TCP, against a
# local 4+2 volume (one target, its six devices in one process) reached
# the same way, in the same run, by fio with capsule's engine from a host
# namespace: 1 MiB sequential writes and reads at QD8, and 4 KiB random
# reads at QD32. Each case reports IOPS and the CPU time of every target
# process per I/O. Then a position of each is rebuilt, unlimited: the
# local store's device 1 deleted and rebuilt by `target repair`, and one
# position of the cluster volume moved (a node drained, --rebuild-rate
# 0); their times give the rebuild rates in MiB/s of reconstructed shard
# data.
#
# Needs root (ip netns), fio and the engine (make build fio-engine).
# Environment: RUNTIME seconds per fio case (10), SIZE of the volumes'
# written region (512M).
set -euo pipefail
cd "$(dirname "$0")/.."
runtime="${RUNTIME:-10}"
size="${SIZE:-512M}"
engine="$PWD/bin/fio-capsule.so"
[ -f "$engine" ] || { echo "clusterbench: $engine missing: make fio-engine" >&2; exit 1; }
go build -o bin/target ./cmd/target

pfx="cb$$"
work="$(mktemp -d /var/tmp/clusterbench.XXXXXX)"
pids=()
nss=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for n in "${nss[@]}"; do ip netns del "$n" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

sw="${pfx}sw"
ip netns add "$sw"; nss+=("$sw")
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
machine() { # NAME OCTET
	local ns="$pfx$1" port="${pfx}p$2"
	ip netns add "$ns"; nss+=("$ns")
	ip -n "$ns" link set lo up
	ip link add eth0 netns "$ns" type veth peer name "$port" netns "$sw"
	ip -n "$ns" addr add "10.203.0.$2/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$sw" link set "$port" master br0
	ip -n "$sw" link set "$port" up
}
start() { # LOG NS ARGS...: starts bin/target serve in NS, waits for ready
	local log="$1" ns="$2"
	shift 2
	ip netns exec "$pfx$ns" bin/target serve "$@" >"$log" 2>"$log.err" &
	pids+=($!)
	for _ in $(seq 600); do
		grep -q "^capsule target ready" "$log" && return 0
		kill -0 "${pids[-1]}" 2>/dev/null || { cat "$log.err" >&2; exit 1; }
		sleep 0.1
	done
	echo "clusterbench: $ns not ready" >&2
	exit 1
}

machine host 200
machine local 50
start "$work/local.log" local --listen tcp://10.203.0.50:4420 --data "$work/local" --namespace ec:vol:1GiB --fs "" \
	--scrub-rate 0 --allow-any-host --rpc-socket "$work/local.sock"
for i in 0 1 2 3 4 5 6; do
	machine "n$i" $((11 + i))
done
etcd=""
for i in 0 1 2 3 4 5; do
	args=(--listen "tcp://10.203.0.$((11 + i)):4420" --data "$work/n$i" --namespace mem:16MiB --fs "" --scrub-rate 0
		--allow-any-host --rpc-socket "$work/n$i.sock" --cluster-node "n$i" --head-ttl 3s --rebuild-rate 0)
	if [ $i = 0 ]; then args+=(--etcd-listen http://10.203.0.11:2379); else args+=(--etcd "$etcd"); fi
	start "$work/n$i.log" "n$i" "${args[@]}"
	[ $i = 0 ] && etcd="$(sed -n 's/.* etcd=\([^ ]*\).*/\1/p' "$work/n0.log")"
done
bin/target rpc -s "$work/n0.sock" cluster_volume_create '{"name":"vol","geometry":"4+2","size":1073741824}' >/dev/null
head=""
for _ in $(seq 300); do
	for i in 0 1 2 3 4 5; do
		if bin/target rpc -s "$work/n$i.sock" cluster_get_status |
			python3 -c 'import json,sys; sys.exit(0 if "vol" in (json.load(sys.stdin)["serving"] or []) else 1)'; then
			head=$i
		fi
	done
	[ -n "$head" ] && break
	sleep 0.2
done
[ -n "$head" ] || { echo "clusterbench: no head" >&2; exit 1; }
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD), $(date -u +%F); cluster head n$head"

cputicks() { # total utime+stime of every bin/target process
	local t=0
	for p in $(pgrep -f "bin/target serve"); do
		t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
	done
	echo "$t"
}
hz="$(getconf CLK_TCK)"
run() { # NAME URI NQN RW BS QD
	local name="$1" uri="$2" nqn="$3" rw="$4" bs="$5" qd="$6" t0 t1 out
	t0="$(cputicks)"
	out="$(ip netns exec "${pfx}host" fio --name=x --ioengine=external:"$engine" --thread=1 --uri="$uri" --nqn="$nqn" \
		--rw="$rw" --bs="$bs" --iodepth="$qd" --size="$size" --time_based --runtime="$runtime" --output-format=json)"
	t1="$(cputicks)"
	printf '%s' "$out" >"$work/fio.json"
	python3 - "$name" "$rw" "$((t1 - t0))" "$hz" "$work/fio.json" <<'PY'
import json, sys
name, rw, ticks, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
j = json.load(open(sys.argv[5]))["jobs"][0]
d = j["write" if "write" in rw else "read"]
ios = max(d["total_ios"], 1)
print(f"{name} {d['iops']:.0f} IOPS {d['bw_bytes']/1e6:.0f} MB/s cpu {ticks/hz*1e6/ios:.0f} us/IO")
PY
}
local_nqn="nqn.2026-11.io.capsule:default"
vol_nqn="nqn.2026-12.io.capsule:volume:vol"
huri="tcp://10.203.0.$((11 + head)):4420"
for c in "seqwrite-1MiB write 1M 8" "seqread-1MiB read 1M 8" "randread-4KiB randread 4k 32"; do
	set -- $c
	run "local/$1" tcp://10.203.0.50:4420 "$local_nqn" "$2" "$3" "$4"
	run "cluster/$1" "$huri" "$vol_nqn" "$2" "$3" "$4"
done

# The local baseline: the local target stops, its device 1 is lost, and
# `target repair` rebuilds it into a new directory, unlimited.
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true
rm -rf "$work/local/dev1"
t0="$(date +%s.%N)"
rep="$(bin/target repair --data "$work/local" --device "$work/local-dev1-new" --position 1 2>/dev/null)"
t1="$(date +%s.%N)"
python3 - "$t0" "$t1" "$rep" <<'PY'
import re, sys
t0, t1, line = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
m = re.search(r"rebuilt=(\d+)", line)
if not m:
    print(f"local rebuild: no summary: {line!r}")
else:
    mib = int(m.group(1)) * 64 / 1024  # one 64 KiB shard per stripe
    print(f"local rebuild of one position (target repair): {mib:.0f} MiB of shard data in {t1 - t0:.2f} s, {mib / (t1 - t0):.0f} MiB/s")
PY

# Rebuild: a seventh node joins and one shard holder (not the head) is
# drained, so one position moves to it.
start "$work/n6.log" n6 --listen tcp://10.203.0.17:4420 --data "$work/n6" --namespace mem:16MiB --fs "" --scrub-rate 0 \
	--allow-any-host --rpc-socket "$work/n6.sock" --cluster-node n6 --head-ttl 3s --rebuild-rate 0 --etcd "$etcd"
drain=""
for i in 0 1 2 3 4 5; do [ "$i" != "$head" ] && { drain=$i; break; }; done
t0="$(date +%s.%N)"
bin/target rpc -s "$work/n$head.sock" node_remove "{\"id\":\"n$drain\"}" >/dev/null
for _ in $(seq 3000); do
	if grep -q "position rebuilt" "$work/n$head.log.err"; then break; fi
	sleep 0.1
done
t1="$(date +%s.%N)"
line="$(grep -m1 "position rebuilt" "$work/n$head.log.err" || true)"
echo "rebuild: ${line:-none within 300 s}"
python3 - "$t0" "$t1" "$line" <<'PY'
import re, sys
t0, t1, line = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
m = re.search(r"stripes=(\d+) .*took=([\d.]+)(ms|s)", line)
if m:
    took = float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    mib = int(m.group(1)) * 64 / 1024  # one 64 KiB shard per stripe
    print(f"rebuild of one position: {mib:.0f} MiB of shard data in {took:.2f} s, {mib / took:.0f} MiB/s; {t1 - t0:.1f} s from the drain")
PY
