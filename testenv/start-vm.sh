#!/bin/bash
# Start a QEMU TCG guest in the background and wait until it is ready.
#
# Usage: start-vm.sh NAME VCPUS [--busy N] [--mem MB] [--numa2] [--extra FILE]...
#                    [--cmdline "..."]
#   --busy N      guest starts N busy loops (default 0)
#   --mem MB      guest memory (default 256)
#   --numa2       two guest NUMA nodes; memory split in half, node0 gets the
#                 first ceil(VCPUS/2) vCPUs, node1 the rest (needs VCPUS >= 2)
#   --extra FILE  add FILE to the guest at /bin/<name> (per-VM initramfs)
#   --cmdline S   appended to the kernel command line (e.g. "run=/bin/x shownuma=1")
#
# Run dir: $STEALSCOPE_TESTENV_RUN/NAME/ (default /run/stealscope-testenv) with
#   qemu.pid, qmp.sock, serial.log, qemu.log (qemu's own stderr), boot.seconds
# Env: STEALSCOPE_TESTENV_BOOT_TIMEOUT  seconds to wait for the ready marker (120)
#      STEALSCOPE_TESTENV_QEMU_EXTRA    extra qemu arguments (word-split)
#      STEALSCOPE_TESTENV_CACHE         kernel/initramfs cache (see setup.sh)
# Prints the qemu pid on stdout once serial.log shows STEALSCOPE-GUEST-READY.
# If NAME is already running, prints its pid and exits 0 without restarting.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${STEALSCOPE_TESTENV_CACHE:-/var/cache/stealscope-testenv}
RUN=${STEALSCOPE_TESTENV_RUN:-/run/stealscope-testenv}
TIMEOUT=${STEALSCOPE_TESTENV_BOOT_TIMEOUT:-120}

die() { echo "start-vm.sh: error: $*" >&2; exit 1; }
. "$HERE/alive.sh"
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

[ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; } && usage 0
[ $# -ge 2 ] || { echo "start-vm.sh: error: need NAME and VCPUS" >&2; usage 2; }
NAME=$1 VCPUS=$2; shift 2
BUSY=0 MEM=256 NUMA2=0 CMDLINE="" EXTRAS=()
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || [ "$1" = --numa2 ] || die "$1 needs a value"
    case "$1" in
        --busy) BUSY=$2; shift 2 ;;
        --mem) MEM=$2; shift 2 ;;
        --numa2) NUMA2=1; shift ;;
        --extra) EXTRAS+=(--extra "$2"); shift 2 ;;
        --cmdline) CMDLINE=$2; shift 2 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
[[ "$NAME" =~ ^[A-Za-z0-9_.-]+$ ]] || die "NAME must match [A-Za-z0-9_.-]+: '$NAME'"
[[ "$VCPUS" =~ ^[1-9][0-9]*$ ]] || die "VCPUS must be a positive integer: '$VCPUS'"
[[ "$BUSY" =~ ^[0-9]+$ ]] || die "--busy must be a number: '$BUSY'"
[[ "$MEM" =~ ^[1-9][0-9]*$ ]] || die "--mem must be a number of MB: '$MEM'"
[ "$NUMA2" = 0 ] || [ "$VCPUS" -ge 2 ] || die "--numa2 needs VCPUS >= 2"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found; run testenv/setup.sh"

DIR="$RUN/$NAME"
# Already running? (pid alive and really our qemu)
if [ -s "$DIR/qemu.pid" ]; then
    pid=$(cat "$DIR/qemu.pid")
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-name $NAME,"; then
        echo "start-vm.sh: $NAME already running (pid $pid)" >&2
        echo "$pid"; exit 0
    fi
fi
rm -rf "$DIR"; mkdir -p "$DIR"

# Kernel + initramfs: run setup.sh on first use.
if [ ! -s "$CACHE/vmlinuz" ] || [ ! -s "$CACHE/initramfs.cpio.gz" ]; then
    STEALSCOPE_TESTENV_CACHE="$CACHE" "$HERE/setup.sh" >&2 || die "setup.sh failed"
fi
INITRD="$CACHE/initramfs.cpio.gz"
if [ ${#EXTRAS[@]} -gt 0 ]; then
    INITRD=$("$HERE/mkinitramfs.sh" -o "$DIR/initramfs.cpio.gz" "${EXTRAS[@]}") || die "mkinitramfs.sh failed"
else
    # Refresh the cached default initramfs if mkinitramfs.sh changed (no-op otherwise).
    STEALSCOPE_TESTENV_CACHE="$CACHE" "$HERE/mkinitramfs.sh" >/dev/null || die "mkinitramfs.sh failed"
fi

NUMA_ARGS=()
if [ "$NUMA2" = 1 ]; then
    m0=$((MEM / 2)) m1=$((MEM - MEM / 2)) c0=$(((VCPUS + 1) / 2))
    NUMA_ARGS=(-object "memory-backend-ram,id=mem0,size=${m0}M"
               -object "memory-backend-ram,id=mem1,size=${m1}M"
               -numa "node,nodeid=0,cpus=0-$((c0 - 1)),memdev=mem0"
               -numa "node,nodeid=1,cpus=${c0}-$((VCPUS - 1)),memdev=mem1")
fi

# shellcheck disable=SC2206  # intentional word splitting of the extra args
EXTRA_QEMU=(${STEALSCOPE_TESTENV_QEMU_EXTRA:-})
start=$(date +%s.%N)
qemu-system-x86_64 \
    -accel tcg,thread=multi \
    -name "$NAME,debug-threads=on" \
    -smp "$VCPUS" -m "$MEM" "${NUMA_ARGS[@]+"${NUMA_ARGS[@]}"}" \
    -nodefaults -display none -no-reboot \
    -serial "file:$DIR/serial.log" \
    -qmp "unix:$DIR/qmp.sock,server=on,wait=off" \
    -kernel "$CACHE/vmlinuz" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 busy=$BUSY $CMDLINE" \
    -daemonize -pidfile "$DIR/qemu.pid" \
    "${EXTRA_QEMU[@]+"${EXTRA_QEMU[@]}"}" \
    >"$DIR/qemu.log" 2>&1 \
    || die "qemu failed to start: $(cat "$DIR/qemu.log")"
pid=$(cat "$DIR/qemu.pid")

deadline=$(( $(date +%s) + TIMEOUT ))
until grep -q STEALSCOPE-GUEST-READY "$DIR/serial.log" 2>/dev/null; do
    if ! alive "$pid"; then
        tail -n 20 "$DIR/serial.log" "$DIR/qemu.log" >&2 2>/dev/null || true
        die "$NAME: qemu (pid $pid) exited before the guest was ready"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        tail -n 20 "$DIR/serial.log" >&2 2>/dev/null || true
        "$HERE/stop-vm.sh" "$NAME" >&2 || true
        die "$NAME: no STEALSCOPE-GUEST-READY in $DIR/serial.log after ${TIMEOUT}s (VM stopped)"
    fi
    sleep 0.1
done
secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
echo "$secs" >"$DIR/boot.seconds"
echo "start-vm.sh: $NAME ready in ${secs}s (pid $pid, run dir $DIR)" >&2
echo "$pid"
