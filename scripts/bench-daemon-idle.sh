#!/bin/bash
# What `place daemon` costs a host where it has nothing to do: two QEMU/TCG
# VMs with one busy vCPU each on this machine's CPUs (the plan holds), the
# daemon as it ships (passes back off to max_interval_s) against the same
# daemon that never backs off (max_interval_s = interval_s), alternating,
# ROUNDS x SECS each. Per run, from the kernel's own counters: the daemon's
# CPU (every thread's run time, /proc/PID/task/*/schedstat), its collector's BPF
# programs (kernel.bpf_stats_enabled run_time_ns), its read syscalls
# (/proc/PID/io syscr) and the vCPUs' run-queue wait (schedstat), beside
# the machine's busy time outside the VMs (/proc/stat) as a validity check:
# a run where everything else took over OTHER_MAX % of a CPU is marked.
# BASE_BIN adds a third daemon: that binary, never backing off (an earlier
# build, for what a change to the close passes saved).
# Prints a Markdown table on stdout; progress on stderr.
#
#   ROUNDS=2 SECS=120 scripts/bench-daemon-idle.sh
#   BASE_BIN=/tmp/stealscope-before scripts/bench-daemon-idle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-120}
OTHER_MAX=${OTHER_MAX:-5}
BIN=${BIN:-target/release/stealscope}
export STEALSCOPE_TESTENV_RUN=${STEALSCOPE_TESTENV_RUN:-/run/stealscope-bench-idle}
[[ $(id -u) == 0 ]] || { echo "bench-daemon-idle: needs root (QEMU, BPF)" >&2; exit 1; }
[[ -x $BIN ]] || cargo build --release -q -p stealscope
work=$(mktemp -d)
cleanup() {
  [[ -n ${dpid:-} ]] && kill "$dpid" 2>/dev/null || true
  testenv/stop-vm.sh idleA >/dev/null 2>&1 || true
  testenv/stop-vm.sh idleB >/dev/null 2>&1 || true
  sysctl -q kernel.bpf_stats_enabled=0 || true
  rm -rf "$work"
}
trap cleanup EXIT
. scripts/lib.sh
clk=$(getconf CLK_TCK)

a=$(testenv/start-vm.sh idleA 1 --busy 1)
b=$(testenv/start-vm.sh idleB 1 --busy 1)
vcpus() { for p in "$a" "$b"; do for t in /proc/"$p"/task/*; do
  if grep -q '^CPU ' "$t/comm"; then echo "$t"; fi; done; done; }
mapfile -t VCPUS < <(vcpus)
printf 'manage = ["idle*"]\n' > "$work/ships.toml"
printf 'manage = ["idle*"]\nmax_interval_s = 5\n' > "$work/steady.toml"
wait_ns() { local s=0; for v in "${VCPUS[@]}"; do s=$((s + $(awk '{print $2}' "$v/schedstat"))); done; echo "$s"; }
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
vm_ticks() { echo $(( $(proc_cpu_ticks "$a") + $(proc_cpu_ticks "$b") )); }
bpf_ns() { bpftool prog show 2>/dev/null | awk '/handle_/{for(i=1;i<=NF;i++) if($i=="run_time_ns") s+=$(i+1)} END{print s+0}'; }
sysctl -q kernel.bpf_stats_enabled=1

echo "| round | daemon | passes | daemon CPU % | its BPF programs % | read syscalls/s | vCPU steal % | other work % of a CPU |"
echo "|---|---|---|---|---|---|---|---|"
MODES="ships steady${BASE_BIN:+ base}"
cp "$work/steady.toml" "$work/base.toml"
label() { case $1 in ships) echo "as shipped (backs off)" ;; steady) echo "never backs off" ;;
  base) echo "never backs off, $(basename "$BASE_BIN")" ;; esac; }
for r in $(seq 1 "$ROUNDS"); do
  for mode in $MODES; do
    bin=$BIN
    [[ $mode == base ]] && bin=$BASE_BIN
    "$bin" place daemon --config "$work/$mode.toml" --journal "$work/j-$mode-$r" --interval 5s \
      2> "$work/log-$mode-$r" &
    dpid=$!
    sleep 8  # its first pass (the collector's load, 0.4 s of verifier work) outside the window
    w0=$(wait_ns); c0=$(cat /proc/"$dpid"/task/*/schedstat | awk '{s+=$1} END{print s}'); io0=$(awk '/^syscr/{print $2}' "/proc/$dpid/io")
    p0=$(bpf_ns); b0=$(busy_ticks); v0=$(vm_ticks); t0=$(date +%s.%N)
    sleep "$SECS"
    w1=$(wait_ns); c1=$(cat /proc/"$dpid"/task/*/schedstat | awk '{s+=$1} END{print s}'); io1=$(awk '/^syscr/{print $2}' "/proc/$dpid/io")
    p1=$(bpf_ns); b1=$(busy_ticks); v1=$(vm_ticks); t1=$(date +%s.%N)
    kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=
    passes=$(grep -c ': pass [0-9]*: [0-9]* VM' "$work/log-$mode-$r" || true)
    awk -v m="$(label "$mode")" -v r="$r" -v t="$t0" -v u="$t1" -v c0="$c0" -v c1="$c1" -v p0="$p0" -v p1="$p1" \
        -v i0="$io0" -v i1="$io1" -v w0="$w0" -v w1="$w1" -v n="${#VCPUS[@]}" -v b0="$b0" -v b1="$b1" \
        -v v0="$v0" -v v1="$v1" -v clk="$clk" -v max="$OTHER_MAX" -v passes="$passes" 'BEGIN{
      s = u - t; d = 100 * (c1 - c0) / 1e9 / s; bpf = 100 * (p1 - p0) / 1e9 / s
      # The programs run in the context of the VM threads: their time is in v.
      other = 100 * ((b1 - b0) - (v1 - v0)) / clk / s - d
      flag = other > max ? " (over " max ": disturbed)" : ""
      printf "| %d | %s | %d | %.3f | %.4f | %.0f | %.2f | %.2f%s |\n", r, m, passes, d, bpf, (i1 - i0) / s, 100 * (w1 - w0) / 1e9 / s / n, other, flag }'
    echo "round $r $mode done" >&2
  done
done
