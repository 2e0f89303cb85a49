#!/bin/bash
# Build a tiny busybox initramfs for stealscope test guests.
#
# Usage: mkinitramfs.sh [-o OUT.cpio.gz] [--extra FILE]... [--force]
#
# Default OUT is $STEALSCOPE_TESTENV_CACHE/initramfs.cpio.gz. The output is
# rebuilt only when it is missing or older than this script, busybox or an
# --extra file (or with --force). Each --extra FILE is copied to /bin/<name>
# (debug info stripped; a dynamically linked FILE brings its shared libraries)
# in the guest.
#
# Guest kernel command line understood by /init:
#   busy=N      start N infinite shell busy loops
#   shownuma=1  print NUMA node cpulists/meminfo to the console
#   run=/path   run a program after the ready marker; its exit code is
#               printed as "STEALSCOPE-RUN-EXIT <rc>"
#   poweroff=1  power the guest off after run= finished
# Marker printed when ready: STEALSCOPE-GUEST-READY
set -euo pipefail

CACHE=${STEALSCOPE_TESTENV_CACHE:-/var/cache/stealscope-testenv}
BUSYBOX=${STEALSCOPE_TESTENV_BUSYBOX:-/bin/busybox}
OUT="$CACHE/initramfs.cpio.gz"
FORCE=0
EXTRAS=()

die() { echo "mkinitramfs.sh: error: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        -o) [ $# -ge 2 ] || die "-o needs a path"; OUT=$2; shift 2 ;;
        --extra) [ $# -ge 2 ] || die "--extra needs a file"; EXTRAS+=("$2"); shift 2 ;;
        --force) FORCE=1; shift ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

[ -x "$BUSYBOX" ] || die "$BUSYBOX not found; run testenv/setup.sh (needs busybox-static)"
# busybox-static has no dynamic loader; a dynamic busybox would not run in the guest.
if LC_ALL=C readelf -l "$BUSYBOX" 2>/dev/null | grep -q 'Requesting program interpreter'; then
    die "$BUSYBOX is dynamically linked; install busybox-static"
fi
command -v cpio >/dev/null || die "cpio not found; run testenv/setup.sh"
for f in "${EXTRAS[@]+"${EXTRAS[@]}"}"; do
    [ -f "$f" ] || die "--extra file not found: $f"
done

# Up to date?
if [ "$FORCE" = 0 ] && [ -s "$OUT" ]; then
    stale=0
    for dep in "$0" "$BUSYBOX" "${EXTRAS[@]+"${EXTRAS[@]}"}"; do
        [ "$OUT" -nt "$dep" ] || stale=1
    done
    if [ "$stale" = 0 ]; then echo "$OUT"; exit 0; fi
fi

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/stealscope-initramfs.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE"/{bin,sbin,dev,proc,sys,tmp,etc,root}
cp "$BUSYBOX" "$STAGE/bin/busybox"
ln -s busybox "$STAGE/bin/sh"
# The kernel opens /dev/console before running /init; create it if we can (root).
mknod -m 600 "$STAGE/dev/console" c 5 1 2>/dev/null || true
for f in "${EXTRAS[@]+"${EXTRAS[@]}"}"; do
    dst="$STAGE/bin/$(basename "$f")"
    install -m 755 "$f" "$dst"
    # Debug info is most of a debug build's size and the guest never reads it.
    strip --strip-debug "$dst" 2>/dev/null || true
    # A dynamically linked program gets its shared libraries and loader at
    # the paths it was linked against (so test builds run as they are).
    if LC_ALL=C readelf -l "$f" 2>/dev/null | grep -q 'Requesting program interpreter'; then
        for lib in $(ldd "$f" | awk '/=> \//{print $3} /^[[:space:]]*\//{print $1}'); do
            mkdir -p "$STAGE$(dirname "$lib")"
            [ -e "$STAGE$lib" ] || cp -L "$lib" "$STAGE$lib"
        done
    fi
done

cat >"$STAGE/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
exec </dev/console >/dev/console 2>&1

busy=0; run=; shownuma=0; poweroff=0
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        busy=*) busy=${arg#busy=} ;;
        run=*) run=${arg#run=} ;;
        shownuma=*) shownuma=${arg#shownuma=} ;;
        poweroff=*) poweroff=${arg#poweroff=} ;;
    esac
done

echo "stealscope-guest: $(nproc) cpus, busy=$busy"
# Loop i is pinned to vCPU i mod nproc: the guest's scheduler would
# otherwise move a lone loop between vCPUs, and a host-side measurement
# of one second then sees its demand on one vCPU or split over two
# (place_qemu's two plans of one host differed that way in CI).
i=0
n=$(nproc)
while [ "$i" -lt "$busy" ]; do
    taskset -c $((i % n)) sh -c 'while :; do :; done' &
    i=$((i + 1))
done

if [ "$shownuma" = 1 ]; then
    for n in /sys/devices/system/node/node*; do
        [ -d "$n" ] || continue
        echo "NUMA $(basename "$n") cpulist=$(cat "$n/cpulist")"
        grep -E 'MemTotal|MemFree' "$n/meminfo"
    done
    echo "NUMA-END"
fi

echo STEALSCOPE-GUEST-READY

if [ -n "$run" ]; then
    "$run"
    echo "STEALSCOPE-RUN-EXIT $?"
    [ "$poweroff" = 1 ] && poweroff -f
fi
while :; do sleep 3600; done
EOF
chmod 755 "$STAGE/init"

mkdir -p "$(dirname "$OUT")"
( cd "$STAGE" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 ) | gzip -1 >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
