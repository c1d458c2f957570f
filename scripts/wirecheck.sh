#!/usr/bin/env bash
# wirecheck: capture the iwarp provider's traffic and an NVMe/TCP session
# on loopback and have Wireshark judge both.
#
# It picks a free loopback port, captures that port on lo with dumpcap,
# runs TestWirecheckTraffic (rdma/iwarp) against the port (Send, Send with
# SE, Send with Invalidate, RDMA Write, Read, Write and Send with
# Immediate, and a Terminate), stops the capture and decodes it with
# tshark. It fails when a frame is malformed, when any expert info of
# severity warning or error appears, when an MPA CRC is bad, when fewer
# than MIN_FRAMES frames decode as iwarp_ddp_rdmap or fewer than
# MIN_SEGMENTS DDP segments are decoded in them, or when an RDMAP opcode
# the test sends is missing from the decode.
#
# Then it does the same for NVMe/TCP: TestWirecheckTCPTraffic
# (nvmeof/host) runs the project's target on a second free port and the
# host library against it, without and with header and data digests;
# tshark decodes the port as nvme-tcp with both digests checked. It fails
# on a malformed frame, an expert info of severity warning or error, a
# bad digest, fewer than MIN_TCP_PDUS PDUs, or a missing PDU type (ICReq,
# ICResp, CapsuleCmd, CapsuleResp, H2CData, C2HData, R2T).
#
# Needs tshark and dumpcap (installed with apt-get when run as root and
# missing) and the right to capture on lo (root, or dumpcap with
# capabilities). Environment: MIN_FRAMES (default 10), MIN_SEGMENTS
# (default 30), MIN_TCP_PDUS (default 40), KEEP_CAPTURE=1 to keep the
# pcapngs and print their directory.
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
MIN_FRAMES=${MIN_FRAMES:-10}
MIN_SEGMENTS=${MIN_SEGMENTS:-30}
MIN_TCP_PDUS=${MIN_TCP_PDUS:-40}

die() { echo "wirecheck: $*" >&2; exit 1; }

if ! command -v tshark >/dev/null || ! command -v dumpcap >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "wirecheck: installing tshark" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -q tshark >/dev/null 2>&1 ||
			{ apt-get update -q >/dev/null && apt-get install -y -q tshark >/dev/null; } ||
			die "could not install tshark"
	else
		die "tshark and dumpcap are needed (apt-get install tshark)"
	fi
fi

# free_port prints a free loopback port: random, checked against the
# sockets in use.
free_port() {
	local p
	for _ in $(seq 1 50); do
		p=$((20000 + RANDOM % 40000))
		if [ -z "$(ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null)" ]; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}
port=$(free_port)

tmp=$(mktemp -d)
cap="$tmp/iwarp.pcapng"
capture_pid=""
cleanup() {
	if [ -n "$capture_pid" ] && kill -0 "$capture_pid" 2>/dev/null; then
		kill -INT "$capture_pid" 2>/dev/null || true
		wait "$capture_pid" 2>/dev/null || true
	fi
	if [ "${KEEP_CAPTURE:-0}" = 1 ]; then
		echo "wirecheck: captures kept in $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

# Build the test binaries first, so the captures only wait for the
# traffic.
go test -c -o "$tmp/iwarp.test" ./rdma/iwarp/
go test -c -o "$tmp/host.test" ./nvmeof/host/

# start_capture PORT FILE captures PORT on lo into FILE.
start_capture() {
	: >"$tmp/dumpcap.log"
	dumpcap -q -i lo -f "tcp port $1" -w "$2" 2>"$tmp/dumpcap.log" &
	capture_pid=$!
	# dumpcap reports "Capturing on" once the filter is installed.
	for _ in $(seq 1 100); do
		grep -q "Capturing on" "$tmp/dumpcap.log" 2>/dev/null && break
		kill -0 "$capture_pid" 2>/dev/null || { cat "$tmp/dumpcap.log" >&2; die "dumpcap failed"; }
		sleep 0.1
	done
	grep -q "Capturing on" "$tmp/dumpcap.log" || { cat "$tmp/dumpcap.log" >&2; die "dumpcap did not start"; }
}

# stop_capture lets the last segments reach the capture and stops it.
stop_capture() {
	sleep 0.5
	kill -INT "$capture_pid"
	wait "$capture_pid" || true
	capture_pid=""
}

start_capture "$port" "$cap"

echo "wirecheck: traffic on 127.0.0.1:$port" >&2
test_rc=0
CAPSULE_IWARP_WIRECHECK_PORT=$port "$tmp/iwarp.test" -test.run '^TestWirecheckTraffic$' -test.count=1 -test.v \
	>"$tmp/test.log" 2>&1 || test_rc=$?
grep -q -- '--- SKIP' "$tmp/test.log" && { cat "$tmp/test.log" >&2; die "the traffic test skipped"; }
stop_capture
[ "$test_rc" = 0 ] || { cat "$tmp/test.log" >&2; die "TestWirecheckTraffic failed"; }

# Wireshark's MPA dissector is heuristic only (there is no iwarp_mpa entry
# for "-d tcp.port==$port,..."), so enable the heuristic explicitly and let
# it run before any port-based guess. It checks the MPA CRC whenever the
# MPA exchange negotiated one; there is no preference to set.
TSHARK=(tshark -n -r "$cap" --enable-heuristic iwarp_mpa_tcp -o tcp.try_heuristic_first:TRUE)

frames=$("${TSHARK[@]}" -Y iwarp_ddp_rdmap -T fields -e frame.number 2>/dev/null | wc -l)
# A frame (TCP segment) can carry several FPDUs: count the DDP segments too.
segments=$("${TSHARK[@]}" -Y iwarp_ddp_rdmap -T fields -e iwarp_rdma.opcode 2>/dev/null | tr ',' '\n' | grep -c . || true)
malformed=$("${TSHARK[@]}" -Y _ws.malformed -T fields -e frame.number 2>/dev/null | wc -l)
# Expert infos of severity warning (0x00600000) or error (0x00800000).
experts=$("${TSHARK[@]}" -Y '_ws.expert.severity >= 0x00600000' -T fields -e frame.number -e _ws.expert.message 2>/dev/null)
verbose=$("${TSHARK[@]}" -V 2>/dev/null)
good_crc=$(grep -c 'Good CRC32' <<<"$verbose" || true)
bad_crc=$(grep -c 'Bad CRC32' <<<"$verbose" || true)
opcodes=$("${TSHARK[@]}" -Y iwarp_ddp_rdmap -T fields -e iwarp_rdma.opcode 2>/dev/null | tr ',' '\n' | sort -u | tr '\n' ' ')

echo "wirecheck: $frames frames with $segments DDP/RDMAP segments, opcodes: $opcodes" >&2
echo "wirecheck: MPA CRC good $good_crc, bad $bad_crc; malformed $malformed" >&2
fail=0
if [ "$malformed" != 0 ]; then
	echo "wirecheck: malformed frames:" >&2
	"${TSHARK[@]}" -Y _ws.malformed >&2 2>/dev/null || true
	fail=1
fi
if [ -n "$experts" ]; then
	echo "wirecheck: expert infos of severity warning or error:" >&2
	echo "$experts" >&2
	fail=1
fi
[ "$bad_crc" = 0 ] || { echo "wirecheck: $bad_crc bad MPA CRCs" >&2; fail=1; }
[ "$good_crc" -gt 0 ] || { echo "wirecheck: no MPA CRC was checked" >&2; fail=1; }
[ "$frames" -ge "$MIN_FRAMES" ] || { echo "wirecheck: only $frames iwarp_ddp_rdmap frames (want >= $MIN_FRAMES)" >&2; fail=1; }
[ "$segments" -ge "$MIN_SEGMENTS" ] || { echo "wirecheck: only $segments DDP segments decoded (want >= $MIN_SEGMENTS)" >&2; fail=1; }
# Write, Read Request, Read Response, Send, Send with Invalidate, Send
# with SE, Send with SE and Invalidate, Terminate, and RFC 7306 Immediate
# Data (0x08, which Wireshark 4.0 shows as "Unknown (0x8)").
for op in 0x00 0x01 0x02 0x03 0x04 0x05 0x06 0x07 0x08; do
	grep -qw -- "$op" <<<"$opcodes" || { echo "wirecheck: RDMAP opcode $op not seen" >&2; fail=1; }
done
[ "$fail" = 0 ] || die "iwarp FAILED (run with KEEP_CAPTURE=1 to keep the capture)"
echo "wirecheck: iwarp ok"

# NVMe/TCP.
tport=$(free_port)
tcap="$tmp/nvme-tcp.pcapng"
start_capture "$tport" "$tcap"
echo "wirecheck: NVMe/TCP traffic on 127.0.0.1:$tport" >&2
test_rc=0
CAPSULE_TCP_WIRECHECK_PORT=$tport "$tmp/host.test" -test.run '^TestWirecheckTCPTraffic$' -test.count=1 -test.v \
	>"$tmp/tcp-test.log" 2>&1 || test_rc=$?
grep -q -- '--- SKIP' "$tmp/tcp-test.log" && { cat "$tmp/tcp-test.log" >&2; die "the NVMe/TCP traffic test skipped"; }
stop_capture
[ "$test_rc" = 0 ] || { cat "$tmp/tcp-test.log" >&2; die "TestWirecheckTCPTraffic failed"; }

# Decode the port as nvme-tcp; digests are checked only when asked. TCP
# sequence analysis is off: its notes on loopback flow control (window
# full, zero window) are not about the PDUs.
TTSHARK=(tshark -n -r "$tcap" -d "tcp.port==$tport,nvme-tcp" -o nvme-tcp.check_hdgst:TRUE -o nvme-tcp.check_ddgst:TRUE
	-o tcp.analyze_sequence_numbers:FALSE)
pdus=$("${TTSHARK[@]}" -Y nvme-tcp -T fields -e nvme-tcp.type 2>/dev/null | tr ',' '\n' | grep -c . || true)
types=$("${TTSHARK[@]}" -Y nvme-tcp -T fields -e nvme-tcp.type 2>/dev/null | tr ',' '\n' | sort -un | tr '\n' ' ')
tmalformed=$("${TTSHARK[@]}" -Y _ws.malformed -T fields -e frame.number 2>/dev/null | wc -l)
texperts=$("${TTSHARK[@]}" -Y '_ws.expert.severity >= 0x00600000' -T fields -e frame.number -e _ws.expert.message 2>/dev/null)
tverbose=$("${TTSHARK[@]}" -V 2>/dev/null)
bad_digests=$(grep -cE 'Digest: 0x[0-9a-f]+ \[incorrect' <<<"$tverbose" || true)
digests=$(grep -cE 'Digest: 0x[0-9a-f]+ \[correct\]' <<<"$tverbose" || true)

echo "wirecheck: $pdus NVMe/TCP PDUs, types: $types" >&2
echo "wirecheck: digests correct $digests, incorrect $bad_digests; malformed $tmalformed" >&2
fail=0
if [ "$tmalformed" != 0 ]; then
	echo "wirecheck: malformed NVMe/TCP frames:" >&2
	"${TTSHARK[@]}" -Y _ws.malformed >&2 2>/dev/null || true
	fail=1
fi
if [ -n "$texperts" ]; then
	echo "wirecheck: NVMe/TCP expert infos of severity warning or error:" >&2
	echo "$texperts" >&2
	fail=1
fi
[ "$bad_digests" = 0 ] || { echo "wirecheck: $bad_digests bad NVMe/TCP digests" >&2; fail=1; }
[ "$digests" -gt 0 ] || { echo "wirecheck: no NVMe/TCP digest was checked" >&2; fail=1; }
[ "$pdus" -ge "$MIN_TCP_PDUS" ] || { echo "wirecheck: only $pdus NVMe/TCP PDUs (want >= $MIN_TCP_PDUS)" >&2; fail=1; }
# ICReq, ICResp, CapsuleCmd, CapsuleResp, H2CData, C2HData, R2T.
for ty in 0 1 4 5 6 7 9; do
	grep -qw -- "$ty" <<<"$types" || { echo "wirecheck: NVMe/TCP PDU type $ty not seen" >&2; fail=1; }
done
[ "$fail" = 0 ] || die "NVMe/TCP FAILED (run with KEEP_CAPTURE=1 to keep the capture)"
echo "wirecheck: NVMe/TCP ok"
echo "wirecheck: ok"
