#!/bin/bash
# libvirt for the tests: the daemons (without systemd) and transient TCG domains
# booting the testenv kernel and initramfs.
#
# Usage: libvirt.sh start                  start virtlogd and libvirtd unless running;
#                                          prints the connection URI
#        libvirt.sh create NAME VCPUS [--busy N] [--mem MB]
#                                          `virsh create` a transient domain, wait for
#                                          the guest's ready marker, print the qemu pid
#        libvirt.sh destroy NAME           `virsh destroy`, and `undefine` if it was made
#                                          persistent (not an error if not running)
#        libvirt.sh stop                   destroy this run dir's domains, then stop the
#                                          daemons this run dir started (never others)
#
# Run dir: $STEALSCOPE_TESTENV_RUN (default /run/stealscope-testenv):
#   libvirtd/  the daemons' config, sockets, pid files and logs, and `uri`
#   NAME/      domain.xml, serial.log, the domain's copies of vmlinuz and initramfs
#              (libvirt chowns what it boots: the shared cache stays untouched)
# A libvirtd already serving /run/libvirt/libvirt-sock (a developer's system one)
# is used as it is (URI qemu:///system); otherwise libvirtd runs with its sockets
# in the run dir (URI qemu:///system?socket=RUN/libvirtd/libvirt-sock). Its qemu
# driver state is the system's (/run/libvirt/qemu), so one such daemon at a time:
# callers serialize (crates/cli/tests/common/libvirt.rs holds a lock).
# Env: STEALSCOPE_TESTENV_BOOT_TIMEOUT (120), STEALSCOPE_TESTENV_CACHE (see setup.sh)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${STEALSCOPE_TESTENV_CACHE:-/var/cache/stealscope-testenv}
RUN=${STEALSCOPE_TESTENV_RUN:-/run/stealscope-testenv}
TIMEOUT=${STEALSCOPE_TESTENV_BOOT_TIMEOUT:-120}
D="$RUN/libvirtd"

die() { echo "libvirt.sh: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
[ $# -ge 1 ] || usage 2
[ "$1" = -h ] || [ "$1" = --help ] && usage 0

# A live process (a zombie waiting for init to reap it is not).
running() { local s; s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) && [ "${s%% *}" != Z ]; }
alive() { [ -s "$1" ] && running "$(cat "$1")"; }
uri() { cat "$D/uri" 2>/dev/null || die "libvirt not started in $RUN (run: libvirt.sh start)"; }
vsh() { LIBVIRT_DEFAULT_URI=$(uri) virsh -q "$@"; }

start() {
    command -v libvirtd >/dev/null && command -v virsh >/dev/null \
        || die "libvirtd/virsh not found (apt-get install libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients)"
    mkdir -p "$D"
    if alive "$D/libvirtd.pid" && virsh -c "$(cat "$D/uri")" -q version >/dev/null 2>&1; then
        cat "$D/uri"; return
    fi
    if virsh -c qemu:///system -q version >/dev/null 2>&1; then
        echo "qemu:///system" >"$D/uri"
        echo "libvirt.sh: using the running system libvirtd" >&2
        cat "$D/uri"; return
    fi
    # virtlogd keeps qemu's log; its socket is fixed (/run/libvirt/virtlogd-sock).
    if ! [ -S /run/libvirt/virtlogd-sock ] || ! pgrep -x virtlogd >/dev/null; then
        virtlogd -d -p "$D/virtlogd.pid" || die "virtlogd failed to start"
    fi
    cat >"$D/libvirtd.conf" <<EOF
unix_sock_dir = "$D"
log_outputs = "3:file:$D/libvirtd.log"
EOF
    rm -f "$D/libvirtd.log"
    echo "qemu:///system?socket=$D/libvirt-sock" >"$D/uri"
    # -d returns before the drivers start: wait until it answers (or died).
    libvirtd -d -f "$D/libvirtd.conf" -p "$D/libvirtd.pid" || die "libvirtd failed to start"
    for _ in $(seq 100); do
        if virsh -c "$(cat "$D/uri")" -q version >/dev/null 2>&1; then
            cat "$D/uri"; return
        fi
        sleep 0.1
    done
    die "libvirtd did not answer on $D/libvirt-sock within 10 s: $(grep -a ' error : ' "$D/libvirtd.log" 2>/dev/null | grep -v dmidecode | tail -n 3)"
}

create() {
    [ $# -ge 2 ] || die "create needs NAME and VCPUS"
    local name=$1 vcpus=$2 busy=0 mem=256; shift 2
    while [ $# -gt 0 ]; do
        [ $# -ge 2 ] || die "$1 needs a value"
        case "$1" in
            --busy) busy=$2 ;;
            --mem) mem=$2 ;;
            *) die "unknown argument: $1" ;;
        esac
        shift 2
    done
    [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || die "NAME must match [A-Za-z0-9_.-]+: '$name'"
    [[ "$vcpus" =~ ^[1-9][0-9]*$ ]] || die "VCPUS must be a positive integer: '$vcpus'"
    if [ ! -s "$CACHE/vmlinuz" ] || [ ! -s "$CACHE/initramfs.cpio.gz" ]; then
        STEALSCOPE_TESTENV_CACHE="$CACHE" "$HERE/setup.sh" >&2 || die "setup.sh failed"
    fi
    local dir="$RUN/$name"
    rm -rf "$dir"; mkdir -p "$dir"
    chmod 755 "$RUN" "$dir"  # qemu runs as libvirt-qemu and opens files here
    cp "$CACHE/vmlinuz" "$CACHE/initramfs.cpio.gz" "$dir/"
    # <acpi/>: without it libvirt passes -no-acpi and the guest sees one CPU.
    cat >"$dir/domain.xml" <<EOF
<domain type='qemu'>
  <name>$name</name>
  <memory unit='MiB'>$mem</memory>
  <vcpu placement='static'>$vcpus</vcpu>
  <os>
    <type arch='x86_64'>hvm</type>
    <kernel>$dir/vmlinuz</kernel>
    <initrd>$dir/initramfs.cpio.gz</initrd>
    <cmdline>console=ttyS0 panic=-1 busy=$busy</cmdline>
  </os>
  <features><acpi/><apic/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <serial type='file'><source path='$dir/serial.log'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
    # cgroup v1 cpusets keep no CPU that went offline, even once it is back
    # (CPU hotplug tests): give libvirt's partition every online CPU again.
    local part=/sys/fs/cgroup/cpuset/machine
    if [ -f "$part/cpuset.cpus" ]; then
        cat /sys/devices/system/cpu/online >"$part/cpuset.cpus" || die "cannot reset $part/cpuset.cpus"
    fi
    vsh create "$dir/domain.xml" >/dev/null || die "virsh create $dir/domain.xml failed"
    local pidfile=/run/libvirt/qemu/$name.pid deadline=$(( $(date +%s) + TIMEOUT ))
    until grep -q STEALSCOPE-GUEST-READY "$dir/serial.log" 2>/dev/null; do
        [ "$(vsh domstate "$name" 2>/dev/null)" = running ] || {
            tail -n 20 "$dir/serial.log" "/var/log/libvirt/qemu/$name.log" >&2 2>/dev/null || true
            die "$name: the domain stopped before the guest was ready"
        }
        if [ "$(date +%s)" -ge "$deadline" ]; then
            vsh destroy "$name" >/dev/null 2>&1 || true
            die "$name: no STEALSCOPE-GUEST-READY in $dir/serial.log after ${TIMEOUT}s (destroyed)"
        fi
        sleep 0.1
    done
    cat "$pidfile"
}

destroy() {
    [ $# -eq 1 ] || die "destroy needs NAME"
    if [ "$(vsh domstate "$1" 2>/dev/null)" = running ]; then
        vsh destroy "$1" >/dev/null
    fi
    # A domain a test made persistent (virsh define) leaves no definition behind.
    if vsh domstate "$1" >/dev/null 2>&1; then
        vsh undefine "$1" >/dev/null
    fi
}

stop() {
    [ -d "$D" ] || return 0
    if [ -s "$D/uri" ]; then
        for xml in "$RUN"/*/domain.xml; do
            [ -f "$xml" ] || continue
            destroy "$(basename "$(dirname "$xml")")" || true
            rm -f "$(dirname "$xml")/vmlinuz" "$(dirname "$xml")/initramfs.cpio.gz"  # 15 MB of tmpfs each
        done
    fi
    local f pid
    for f in "$D/libvirtd.pid" "$D/virtlogd.pid"; do
        alive "$f" || continue
        pid=$(cat "$f")
        kill -TERM "$pid"
        for _ in $(seq 50); do running "$pid" || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -f "$D/uri"
}

cmd=$1; shift
case "$cmd" in
    start) start ;;
    create) create "$@" ;;
    destroy) destroy "$@" ;;
    stop) stop ;;
    *) die "unknown command: $cmd (see --help)" ;;
esac
