#!/usr/bin/env bash
# Issue 30: each guest steal hook's cost per run, side by side in one run
# with the floor (empty programs on the same tracepoints, bench/floor.bpf.c:
# what the kernel's run-time accounting and the dispatch cost a run that
# does nothing). From kernel.bpf_stats_enabled (run_time_ns / run_cnt over
# each phase, from bpftool). Phases of SECS (default 5) each: a thread per
# CPU sleeping 100 us at a time (timers, switches, warm caches), then a
# spinner per CPU (only the tick interrupts it); with IDLE=1 first a
# phase of nothing of ours (an idle guest: every run on cold caches).
# The load average is
# printed around each phase so runs under other work can be rejected.
# Root. HOLD_DIR holds the guest_steal and floor examples (default
# target/debug/examples, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-5}
dir=${HOLD_DIR:-target/debug/examples}
[ -x "$dir/guest_steal" ] && [ -x "$dir/floor" ] ||
  cargo build -q -p stealscope-sched --example guest_steal --example floor
tmp=$(mktemp -d /tmp/bench-steal-hooks.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
clang-14 -target bpf -mcpu=v3 -O2 -c bench/floor.bpf.c -o "$tmp/floor.o"
cat >"$tmp/sleeper.c" <<'C'
#include <time.h>
int main(void) { struct timespec t = {0, 100000}; for (;;) nanosleep(&t, 0); }
C
cc -O2 -o "$tmp/sleeper" "$tmp/sleeper.c"
ids() { bpftool prog show | awk -F: '/^[0-9]+:/{print $1}' | sort; }
ids >"$tmp/before"
hold=$((4 * SECS + 30))
"$dir/floor" "$tmp/floor.o" "$hold" >/dev/null &
"$dir/guest_steal" "$hold" "$hold" >/dev/null &
sleep 5
ids | comm -13 "$tmp/before" - >"$tmp/ours"
stats() { # name run_time_ns run_cnt, for our programs
  bpftool prog show | awk -v ids="$tmp/ours" 'BEGIN{while((getline l < ids)>0) want[l]=1}
    /^[0-9]+:/ {id=$1; sub(":","",id); n=""; t=0; c=0;
      for(i=1;i<=NF;i++){if($i=="name")n=$(i+1);if($i=="run_time_ns")t=$(i+1);if($i=="run_cnt")c=$(i+1)}
      if((id in want) && n ~ /^(steal_|floor_switch|floor_hrtimer)/) print n, t, c}' | sort
}
phase() { # label, then the command to run on each CPU
  local label=$1; shift
  sysctl -q kernel.bpf_stats_enabled=1
  local l0; l0=$(cut -d' ' -f1 /proc/loadavg)
  stats >"$tmp/s0"
  local pids=()
  for c in $(seq 0 $(($(nproc) - 1))); do taskset -c "$c" "$@" & pids+=($!); done
  sleep "$SECS"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  stats >"$tmp/s1"
  echo "== $label: loadavg $l0 -> $(cut -d' ' -f1 /proc/loadavg), stats $(sysctl -n kernel.bpf_stats_enabled)"
  join "$tmp/s0" "$tmp/s1" | awk '{r=$5-$3; if (r>0) printf "   %-14s %7.1f ns a run over %8d runs\n", $1, ($4-$2)/r, r}'
}
[ "${IDLE:-0}" = 1 ] && phase "idle: nothing of ours" sleep 3600
phase "sleepers (100 us) on every CPU" "$tmp/sleeper"
phase "spinners on every CPU" sh -c 'while :; do :; done'
sysctl -q kernel.bpf_stats_enabled=0
