#!/bin/bash
# Stop a test VM: QMP "quit", then SIGTERM, then SIGKILL (each waited for).
#
# Usage: stop-vm.sh NAME
# Keeps serial.log / qemu.log in $STEALSCOPE_TESTENV_RUN/NAME/ for post-mortems;
# removes qemu.pid and qmp.sock. Stopping a VM that is not running is not an error.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RUN=${STEALSCOPE_TESTENV_RUN:-/run/stealscope-testenv}
die() { echo "stop-vm.sh: error: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: stop-vm.sh NAME"
NAME=$1
DIR="$RUN/$NAME"

. "$HERE/alive.sh"

# wait_gone PID TENTHS: wait up to TENTHS/10 s for PID to exit.
wait_gone() {
    local i
    for ((i = 0; i < $2; i++)); do
        alive "$1" || return 0
        sleep 0.1
    done
    ! alive "$1"
}

pid=$(cat "$DIR/qemu.pid" 2>/dev/null || true)
# Only act on a live process that is really this VM's qemu (guards against pid reuse).
if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-name $NAME,"; then
    python3 "$HERE/qmp.py" --timeout 5 "$DIR/qmp.sock" quit >/dev/null 2>&1 || true
    if ! wait_gone "$pid" 50; then
        echo "stop-vm.sh: $NAME (pid $pid) ignored QMP quit, sending SIGTERM" >&2
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_gone "$pid" 50; then
            echo "stop-vm.sh: $NAME (pid $pid) still alive, sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
            wait_gone "$pid" 50 || die "$NAME (pid $pid) survived SIGKILL"
        fi
    fi
    echo "stop-vm.sh: stopped $NAME (pid $pid)" >&2
fi
rm -f "$DIR/qemu.pid" "$DIR/qmp.sock"
