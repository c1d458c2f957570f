#!/usr/bin/env bash
# Makes DIR a configured source tree of the fio that Debian installed, for
# building fio ioengines against (make fio-engine): installs fio and
# dpkg-dev when missing, adds a deb-src entry for the suites the system's
# deb entries use, fetches the source package of the installed fio's
# version (apt-get source), and runs its configure for config-host.h.
# Does nothing when DIR already holds that version, configured.
# Usage: scripts/fio-src.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "$(dirname "$dir")"
dir="$(cd "$(dirname "$dir")" && pwd)/$(basename "$dir")"
here="$(cd "$(dirname "$0")" && pwd)"
"$here/deps.sh" fio dpkg-dev gcc
version="$(dpkg-query -W -f='${Version}' fio)"
if [ -f "$dir/config-host.h" ] && [ "$(cat "$dir/.debian-version" 2>/dev/null)" = "$version" ]; then
	exit 0
fi

sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
# A deb-src entry beside each deb822 entry of the system's own sources
# (or each one-line deb entry), once.
src=/etc/apt/sources.list.d/capsule-deb-src.sources
if ! apt-get source --print-uris -qq "fio=$version" >/dev/null 2>&1; then
	entries=""
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
		[ -f "$f" ] || continue
		case "$f" in
		*.sources)
			entries+="$(awk 'BEGIN { RS = ""; ORS = "\n\n" } /Types:[^\n]*deb/ && /debian/ { sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f")"$'\n'
			;;
		*)
			# deb [OPTIONS] URI SUITE COMPONENT...; a signed-by option is kept.
			entries+="$(awk '$1 == "deb" && /debian/ {
				signed = ""
				if (match($0, /signed-by=[^] ]*/)) signed = substr($0, RSTART + 10, RLENGTH - 10)
				sub(/\[[^]]*\] */, ""); $1 = ""; print signed "|" $0
			}' "$f" | while IFS='|' read -r signed l; do
				# shellcheck disable=SC2086 # the fields of the line, split on purpose
				set -- $l
				printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: %s\n' "$1" "$2" "${*:3}"
				[ -z "$signed" ] || printf 'Signed-By: %s\n' "$signed"
				printf '\n'
			done)"$'\n'
			;;
		esac
	done
	[ -n "${entries//[$'\n ']/}" ] || { echo "fio-src: no Debian deb entry to add a deb-src entry beside" >&2; exit 1; }
	echo "fio-src: adding deb-src entries ($src)" >&2
	printf '%s' "$entries" | $sudo tee "$src" >/dev/null
	$sudo apt-get update -qq
fi

work="$(mktemp -d "$(dirname "$dir")/.fio-src.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "fio-src: fetching the source of fio $version" >&2
(cd "$work" && apt-get source -qq "fio=$version" >/dev/null 2>&1) || {
	echo "fio-src: apt-get source fio=$version failed" >&2
	(cd "$work" && apt-get source "fio=$version") >&2 || true
	exit 1
}
tree="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'fio-*' | head -1)"
[ -n "$tree" ] || { echo "fio-src: no source tree in $work" >&2; exit 1; }
# Configured as Debian configures it (debian/rules), minus the optional
# libraries: the engine's structures do not depend on them.
(cd "$tree" && ./configure --disable-native --prefix=/usr >"$work/configure.log" 2>&1) || {
	cat "$work/configure.log" >&2
	exit 1
}
echo "$version" >"$tree/.debian-version"
rm -rf "$dir"
mv "$tree" "$dir"
