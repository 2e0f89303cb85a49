#!/usr/bin/env bash
# Issue 8 calibration: how the real vCPU threads of scripts/bench-fairness.sh
# behave under the host scheduler, measured rather than assumed. Starts the
# same three QEMU TCG VMs (A with 2 busy vCPUs, B and C with 1; named tvA,
# tvB, tvC so a concurrent bench-fairness run is left alone), puts them in
# per-VM cpu groups, applies MECH (equal | weights | shared-group, as
# bench-fairness does), and for WINDOW seconds records in a private tracefs
# instance sched_switch, sched_waking, sched_wakeup and sched_migrate_task,
# while sampling the kernel's per-CPU group state (/sys/kernel/debug/sched/debug:
# each group's load_avg, tg_load_avg and entity weight per CPU) every SAMPLE_MS.
# Prints scripts/trace-vcpus.py's table (per thread: run, wait, sleeps, who
# wakes it and where, migrations by cause; how long a vCPU layout lasts) and
# the group-state summary, and the other work runnable on each CPU (root-level
# load beside the VMs' groups); keeps the raw files in OUT (default a new temp
# dir). SAMPLE_MS=0 leaves the CPUs to the VMs and other work (no sampler:
# the polling is root-level load itself).
#
#   MECH=equal WINDOW=20 OUT=/tmp/tv scripts/trace-vcpus.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MECH=${MECH:-equal}
WINDOW=${WINDOW:-20}
SETTLE=${SETTLE:-5}
SAMPLE_MS=${SAMPLE_MS:-50}
OUT=${OUT:-$(mktemp -d)}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/stealscope}
export STEALSCOPE_TESTENV_RUN=${STEALSCOPE_TESTENV_RUN:-/run/stealscope-trace-vcpus}
CG=/sys/fs/cgroup/cpu
T=/sys/kernel/tracing
[[ $(id -u) == 0 ]] || { echo "trace-vcpus.sh: needs root (cgroups, tracefs)" >&2; exit 2; }
case $MECH in equal | weights | shared-group) ;; *) echo "trace-vcpus.sh: MECH must be equal, weights or shared-group, got '$MECH'" >&2; exit 2 ;; esac
[[ -d $T/instances ]] || mount -t tracefs nodev $T 2>/dev/null || { echo "trace-vcpus.sh: no tracefs at $T" >&2; exit 2; }
[[ -r /sys/kernel/debug/sched/debug ]] || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true
[[ $MECH == equal || -x $BIN ]] || { echo "trace-vcpus.sh: $BIN not built (cargo build --release)" >&2; exit 2; }
mkdir -p "$OUT"
I=$T/instances/stealscope-trace-vcpus.$$
EVENTS="sched_switch sched_waking sched_wakeup sched_migrate_task"
cleanup() {
  [[ -d $I ]] && { echo 0 > "$I/tracing_on"; for e in $EVENTS; do echo 0 > "$I/events/sched/$e/enable"; done; rmdir "$I"; } 2>/dev/null || true
  [[ $MECH == equal ]] || "$BIN" place undo --yes --config "$OUT/place.toml" --journal "$OUT/journal" >/dev/null 2>&1 || true
  testenv/stop-all.sh >/dev/null 2>&1 || true
  for g in tvA tvB tvC stealscope-trace-vcpus.shared; do rmdir "$CG/$g" 2>/dev/null || true; done
}
trap cleanup EXIT

declare -A PID
PID[tvA]=$(testenv/start-vm.sh tvA 2 --busy 2 2>/dev/null)
PID[tvB]=$(testenv/start-vm.sh tvB 1 --busy 1 2>/dev/null)
PID[tvC]=$(testenv/start-vm.sh tvC 1 --busy 1 2>/dev/null)
for vm in tvA tvB tvC; do
  mkdir -p "$CG/$vm"
  echo 1024 > "$CG/$vm/cpu.shares"
  echo "${PID[$vm]}" > "$CG/$vm/cgroup.procs"
done
if [[ $MECH != equal ]]; then
  # Threads left to the load balancer, as bench-fairness runs these mechanisms (the defaults would pin).
  printf 'manage = ["tv*"]\nfairness = "%s"\nvcpu_mapping = "pool"\nshared_group = "/stealscope-trace-vcpus.shared"\n' "$MECH" > "$OUT/place.toml"
  "$BIN" place apply --yes --config "$OUT/place.toml" --journal "$OUT/journal" --interval 1s > "$OUT/apply.txt"
fi
sleep "$SETTLE"

mkdir "$I"
echo 32768 > "$I/buffer_size_kb"
for e in $EVENTS; do echo 1 > "$I/events/sched/$e/enable"; done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# Per-thread schedstat at both ends: the steal of the window, independent of the trace.
stat() { date +%s.%N; for p in "${PID[@]}"; do for t in /proc/"$p"/task/*; do echo "$p $(basename "$t") $(cat "$t/schedstat")"; done; done; }
# Every thread's run and wait (schedstat) and nice at both ends: the other
# work's root-level load, exact where the trace is not (this kernel's trace
# drops the switches out of the idle task and out of some threads).
stat_all() {
  python3 -c '
import os, time
print(time.monotonic())
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        tids = os.listdir(f"/proc/{p}/task")
    except OSError:
        continue
    for t in tids:
        try:
            run, wait, slices = open(f"/proc/{p}/task/{t}/schedstat").read().split()[:3]
            comm = open(f"/proc/{p}/task/{t}/comm").read().strip()
            nice = os.getpriority(os.PRIO_PROCESS, int(t))
        except (OSError, ValueError):
            continue
        print(p, t, nice, run, wait, slices, comm)
print(time.monotonic())
'
}
stat > "$OUT/schedstat.start"
stat_all > "$OUT/all.start"
echo 1 > "$I/tracing_on"
if [[ $SAMPLE_MS == 0 ]]; then
  # No observer on the CPUs during the window: its polling is itself root-level load.
  sleep "$WINDOW"
else
python3 - "$WINDOW" "$SAMPLE_MS" > "$OUT/sched-debug.txt" <<'PY'
import sys, time
end = time.monotonic() + float(sys.argv[1])
step = float(sys.argv[2]) / 1000
while time.monotonic() < end:
    t = time.monotonic()
    # Only the lines the summary reads: the CPU headers, our groups' cfs_rq blocks and the root's.
    keep, out = False, [f"@ {t:.4f}"]
    for line in open("/sys/kernel/debug/sched/debug"):
        if line.startswith("cpu#") or line.startswith("cfs_rq["):
            keep = line.startswith("cpu#") or "/tv" in line or "stealscope-trace-vcpus" in line or line.rstrip().endswith(":/")
            out.append(line.rstrip())
        elif keep and any(k in line for k in (".nr_running", ".load_avg", ".tg_load_avg", ".se->load.weight", ".se->avg.load_avg", ".h_nr_queued", ".next_balance")):
            out.append(line.rstrip())
    print("\n".join(out), flush=True)
    time.sleep(max(0.0, step - (time.monotonic() - t)))
PY
fi
stat_all > "$OUT/all.end"
echo 0 > "$I/tracing_on"
stat > "$OUT/schedstat.end"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cat "$I/trace" > "$OUT/trace.txt"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) MECH=$MECH WINDOW=$WINDOW $(nproc) CPUs; load average before $load_before, after $load_after" | tee "$OUT/header.txt"
debug_args=()
[[ $SAMPLE_MS == 0 ]] || debug_args=(--sched-debug "$OUT/sched-debug.txt")
python3 scripts/trace-vcpus.py "$OUT/trace.txt" A="${PID[tvA]}" B="${PID[tvB]}" C="${PID[tvC]}" \
  --json "$OUT/trace.json" --schedstat "$OUT/schedstat.start" "$OUT/schedstat.end" \
  --all-schedstat "$OUT/all.start" "$OUT/all.end" \
  "${debug_args[@]}"
echo
echo "raw files: $OUT"
