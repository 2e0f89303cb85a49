#!/bin/bash
# End-to-end check of the test VM tooling; prints measurements and ends with
# "selftest: N passed, N failed" (exit 1 if anything failed).
#
# Boots vmA (2 vCPUs, busy=2) and vmB (1 vCPU, busy=1), checks thread names,
# QMP thread-ids vs /proc TIDs and vCPU CPU burn via schedstat, then a --numa2
# guest, then stops everything and checks that no qemu is left.
# Uses its own run dir (default /run/stealscope-testenv-selftest) so it never
# touches VMs started by someone else.
set -euo pipefail

T=$(cd "$(dirname "$0")" && pwd)
export STEALSCOPE_TESTENV_RUN=${STEALSCOPE_TESTENV_SELFTEST_RUN:-/run/stealscope-testenv-selftest}
RUN=$STEALSCOPE_TESTENV_RUN
PASS=0 FAIL=0
ok() { echo "ok:   $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL: $*"; FAIL=$((FAIL + 1)); }
check() { local msg=$1; shift; if "$@"; then ok "$msg"; else bad "$msg"; fi; }
trap '"$T/stop-all.sh" 2>/dev/null || true' EXIT

# CPU-thread run time (schedstat field 1, ns) of every "CPU n/TCG" thread: "tid ns" lines.
cpu_ns() { local t; for t in /proc/"$1"/task/*; do
    case "$(cat "$t/comm")" in CPU*/TCG) echo "${t##*/} $(cut -d' ' -f1 "$t/schedstat")" ;; esac
done; }

s=$(date +%s.%N); "$T/setup.sh" >/dev/null
echo "setup.sh (cached): $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN{printf "%.2f", e-s}')s"

declare -A PID
PID[vmA]=$("$T/start-vm.sh" vmA 2 --busy 2)
PID[vmB]=$("$T/start-vm.sh" vmB 1 --busy 1)
for vm in vmA vmB; do
    pid=${PID[$vm]}
    echo "--- $vm pid $pid boot $(cat "$RUN/$vm/boot.seconds")s RSS $(awk '/VmRSS/{print $2, $3}' "/proc/$pid/status")"
    for t in /proc/"$pid"/task/*; do echo "    tid ${t##*/}: $(cat "$t/comm")"; done
    qmp_tids=$("$T/qmp.py" "$vm" query-cpus-fast |
        python3 -c 'import json,sys; print(" ".join(str(c["thread-id"]) for c in json.load(sys.stdin)["return"]))')
    proc_tids=$(cpu_ns "$pid" | cut -d' ' -f1 | sort -n | xargs)
    echo "    QMP thread-ids: $qmp_tids; CPU n/TCG TIDs: $proc_tids"
    check "$vm: QMP query-cpus-fast thread-ids == CPU n/TCG TIDs" [ "$qmp_tids" = "$proc_tids" ]
done

cpu_ns "${PID[vmA]}" >/tmp/selftest.$$.a; cpu_ns "${PID[vmB]}" >>/tmp/selftest.$$.a
sleep 5
cpu_ns "${PID[vmA]}" >/tmp/selftest.$$.b; cpu_ns "${PID[vmB]}" >>/tmp/selftest.$$.b
echo "--- vCPU thread CPU use over 5 s (3 busy vCPUs on $(nproc) host cores, plus any other load):"
while read -r tid ns0; do
    ns1=$(awk -v t="$tid" '$1 == t {print $2}' /tmp/selftest.$$.b)
    rate=$(awk -v a="$ns0" -v b="$ns1" 'BEGIN{printf "%.3f", (b - a) / 5e9}')
    check "tid $tid burns CPU: $rate s/s (>= 0.25)" awk -v r="$rate" 'BEGIN{exit !(r >= 0.25)}'
done </tmp/selftest.$$.a
rm -f /tmp/selftest.$$.a /tmp/selftest.$$.b

"$T/stop-vm.sh" vmB
"$T/start-vm.sh" vmN 2 --numa2 --cmdline shownuma=1 >/dev/null
echo "--- vmN (--numa2) boot $(cat "$RUN/vmN/boot.seconds")s, guest serial:"
sed -n '/^NUMA node/,/^NUMA-END/p' "$RUN/vmN/serial.log" | sed 's/^/    /'
numa=$(tr -d '\r' <"$RUN/vmN/serial.log" | grep '^NUMA node' | xargs)  # serial lines end in \r\n
check "vmN: guest sees node0 and node1" [ "$numa" = "NUMA node0 cpulist=0 NUMA node1 cpulist=1" ]

"$T/stop-all.sh"
left=$(pgrep -f "[q]emu-system-x86_64 .*$RUN/" | xargs || true)
check "no qemu left after stop-all.sh${left:+ (left: $left)}" [ -z "$left" ]
echo "selftest: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
