#!/usr/bin/env bash
# Installs the Debian packages that the tests and tools need, when they are
# missing. Runs apt-get update first, once, only when something is missing.
# Usage: scripts/deps.sh PACKAGE...
set -euo pipefail

missing=()
for p in "$@"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null; then sudo=sudo; else
		echo "deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
