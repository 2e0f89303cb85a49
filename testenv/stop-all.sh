#!/bin/bash
# Stop every test VM under $STEALSCOPE_TESTENV_RUN (default /run/stealscope-testenv),
# then SIGKILL any leftover qemu whose command line points into that run dir.
# Usage: stop-all.sh [--purge]   (--purge also deletes the run dirs and their logs)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RUN=${STEALSCOPE_TESTENV_RUN:-/run/stealscope-testenv}

for dir in "$RUN"/*/; do
    [ -d "$dir" ] || continue
    "$HERE/stop-vm.sh" "$(basename "$dir")"
done

# Safety net: qemu processes started from this run dir whose pidfile was lost.
for pid in $(pgrep -f -- "[q]emu-system-x86_64 .*-pidfile $RUN/" || true); do
    echo "stop-all.sh: killing stray qemu pid $pid" >&2
    kill -KILL "$pid" 2>/dev/null || true
done

if [ "${1:-}" = --purge ]; then
    rm -rf "${RUN:?}"/*/
fi
