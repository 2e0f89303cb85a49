#!/usr/bin/env bash
# Issue 17: overhead of the scheduler-event collector at a high switch rate.
# Runs `perf bench sched pipe` (a ping-pong pair, >= 20k switches/s) alone,
# with the BPF collector (gate closed, then one thread watched), with the
# tracefs route, with bench/wait_by.bt under bpftrace, and under
# `perf sched record`; reads the kernel's own per-program cost with
# kernel.bpf_stats_enabled=1. Prints the other load on the machine from
# /proc/stat so a run taken while others built can be rejected. Root.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOPS=${LOOPS:-200000}
hold=target/release/examples/hold
cargo build -q --release -p stealscope-sched --example hold
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
pipe() { # ops/s of one run, and the machine's busy share during it
  local b0 b1; b0=$(busy)
  local ops; ops=$(perf bench sched pipe -l "$LOOPS" 2>/dev/null | awk '/ops\/sec/{print $1}')
  b1=$(busy)
  echo "$ops $(echo "$b0 $b1" | awk '{printf "%.0f%%", 100*($3-$1)/($4-$2)}')"
}
costs() { # ns/event of each program, from the kernel's own accounting
  bpftool prog show | awk '/handle_/ {for(i=1;i<=NF;i++){if($i=="name")n=$(i+1);if($i=="run_time_ns")t=$(i+1);if($i=="run_cnt")c=$(i+1)}; if(c>0) printf "   %-22s %8.1f ns/event over %d events\n", n, t/c, c}'
}
with_bpf() { # $1 label, then the tids to watch (none: gate closed)
  local label=$1; shift
  sysctl -q kernel.bpf_stats_enabled=1
  HOLD_ROUTE=bpf $hold 60 "$@" >/tmp/bench-sched-hold.log 2>&1 & holder=$!
  sleep 2
  echo "== $label: $(pipe)"
  costs
  kill "$holder" 2>/dev/null || true
  wait "$holder" 2>/dev/null || true
  sysctl -q kernel.bpf_stats_enabled=0
}
echo "== alone:          $(pipe)"
# Gate closed: the floor of a tp_btf program here (entry, stats, one lookup).
with_bpf "bpf, gate closed"
# One sleeping thread watched: every program takes its full common path.
sleep 1000 & sleeper=$!
with_bpf "bpf collector" "$sleeper"
# The tracefs route on the same thread (its reader thread runs in user space).
HOLD_ROUTE=tracefs $hold 60 "$sleeper" >/tmp/bench-sched-hold.log 2>&1 & holder=$!
sleep 2
echo "== tracefs collector: $(pipe)"
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
# Reference: the same aggregation as a bpftrace script (bench/wait_by.bt).
if command -v bpftrace >/dev/null; then
  bpftrace bench/wait_by.bt "$sleeper" >/tmp/bench-sched-bt.log 2>&1 & bt=$!
  for _ in $(seq 60); do grep -q Attaching /tmp/bench-sched-bt.log && break; sleep 1; done
  sleep 1
  echo "== bpftrace wait_by.bt: $(pipe)"
  kill -INT "$bt" 2>/dev/null || true
  wait "$bt" 2>/dev/null || true
fi
kill "$sleeper" 2>/dev/null || true
echo "== alone again:    $(pipe)"
echo "== perf sched record: $(cd /tmp && b0=$(busy); perf sched record -q -o /tmp/bench-sched.data -- perf bench sched pipe -l "$LOOPS" 2>/dev/null | awk '/ops\/sec/{print $1}'; rm -f /tmp/bench-sched.data)"
