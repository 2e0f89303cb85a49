#!/usr/bin/env bash
# Issue 29: per-event cost of each BPF program of the collector under a
# worst realistic mix, side by side with bench/wait_by.bt under bpftrace,
# from the kernel's own accounting (kernel.bpf_stats_enabled: run_time_ns
# over run_cnt per program). The mix, all on CPU 1 (where this VM's disk
# interrupt lands): bench/pingpong.c (two watched processes, a switch every
# few µs, like vCPUs that halt and wake), a watched spinner that waits
# behind them (long waits, long ring walks), and O_DIRECT reads of a file
# on the disk (hard and soft interrupts). Each phase prints the machine's
# busy share and load average around it so a run taken while others
# built can be rejected. Root. SECS per phase (default 20); HOLD names a
# hold binary already built (the BPF programs' cost does not depend on
# the Rust build's profile), else a release one is built. HOLD may name
# several (space-separated, e.g. before and after a change): each gets a
# phase, the list run REPS times (default 1) in turn under the one load.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-20}
hold=${HOLD:-}
if [ -z "$hold" ]; then
  hold=target/release/examples/hold
  cargo build -q --release -p stealscope-sched --example hold
fi
# The floor: empty programs on the same hooks (bench/floor.bpf.c), what a
# run that does nothing costs here, the accounting's clock reads included.
floor=${FLOOR:-target/release/examples/floor}
[ -x "$floor" ] || cargo build -q --release -p stealscope-sched --example floor
tmp=$(mktemp -d /work/bench-mix.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"; sysctl -q kernel.bpf_stats_enabled=0' EXIT
cc -O2 -o "$tmp/pingpong" bench/pingpong.c
clang-14 -target bpf -mcpu=v3 -O2 -c bench/floor.bpf.c -o "$tmp/floor.o"
dd if=/dev/zero of="$tmp/odirect.img" bs=1M count=64 oflag=direct status=none
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
share() { echo "$1 $2" | awk '{printf "%.0f%%", 100*($3-$1)/($4-$2)}'; }
prog_ids() { bpftool prog show | awk -F: '/^[0-9]+:/{print $1}' | sort; }
costs() { # ns/event of the programs whose ids are in $1 (a file)
  bpftool prog show | awk -v ids="$1" 'BEGIN{while((getline l < ids)>0) want[l]=1}
    /^[0-9]+:/ {id=$1; sub(":","",id); n=""; t=0; c=0;
      for(i=1;i<=NF;i++){if($i=="name")n=$(i+1);if($i=="run_time_ns")t=$(i+1);if($i=="run_cnt")c=$(i+1)}
      if((id in want) && c>0){printf "   %-28s %7.1f ns/event over %9d events\n", n, t/c, c; T+=t; C+=c}}
    END{if(C>0) printf "   %-28s %7.1f ns/event over %9d events\n", "ALL", T/C, C}'
}
# The load: started once, runs through both phases.
reps=${REPS:-1}
phases=$(($(echo $hold | wc -w) * reps + 2))
taskset -c 1 "$tmp/pingpong" 1 0 $((phases * (SECS + 10) + 30)) 2000 >"$tmp/pp.out" & pp=$!
sleep 0.5
read -r _ ppa ppb <"$tmp/pp.out"
taskset -c 1 sh -c 'while :; do :; done' & spinner=$!
( end=$((SECONDS + phases * (SECS + 10) + 25)); while [ $SECONDS -lt $end ]; do
    dd if="$tmp/odirect.img" of=/dev/null bs=4k iflag=direct status=none; done ) & io=$!
sysctl -q kernel.bpf_stats_enabled=1
phase() { # $1 label, then the command holding the programs
  local label=$1; shift
  # Other sessions' benchmarks switch the accounting off when they end.
  sysctl -q kernel.bpf_stats_enabled=1
  prog_ids >"$tmp/before"
  "$@" >"$tmp/hold.log" 2>&1 & holder=$!
  # Until its programs are attached (bpftrace prints "Attaching").
  for _ in $(seq 60); do
    sleep 1
    grep -q -e Attaching -e started "$tmp/hold.log" && break
  done
  sleep 1
  prog_ids | comm -13 "$tmp/before" - >"$tmp/ours"
  local b0 l0; b0=$(busy); l0=$(cut -d' ' -f1 /proc/loadavg)
  # Counters since the load: sample them at both ends of the window.
  costs "$tmp/ours" >"$tmp/c0"
  sleep "$SECS"
  costs "$tmp/ours" >"$tmp/c1"
  echo "== $label: busy $(share "$b0" "$(busy)"), loadavg $l0 -> $(cut -d' ' -f1 /proc/loadavg), stats $(sysctl -n kernel.bpf_stats_enabled)"
  cat "$tmp/c1"
  kill -INT "$holder" 2>/dev/null || true
  wait "$holder" 2>/dev/null || true
}
for _ in $(seq "$reps"); do
  for h in $hold; do
    phase "stealscope bpf $h (watching pingpong $ppa $ppb and spinner $spinner)" \
      env HOLD_ROUTE=bpf "$h" $((SECS + 5)) "$ppa" "$ppb" "$spinner"
    tail -1 "$tmp/hold.log"
  done
done
phase "floor: empty programs on the same hooks" "$floor" "$tmp/floor.o" $((SECS + 5))
if command -v bpftrace >/dev/null; then
  # bpftrace finds tracepoints through tracefs, which this VM leaves
  # unmounted; mounted for the phase (an unmount while another tool uses
  # it fails harmlessly with EBUSY).
  mounted=
  if ! mountpoint -q /sys/kernel/tracing; then
    mount -t tracefs nodev /sys/kernel/tracing && mounted=1
  fi
  phase "bpftrace bench/wait_by.bt (watching spinner $spinner)" \
    bpftrace bench/wait_by.bt "$spinner"
  [ -z "$mounted" ] || umount /sys/kernel/tracing 2>/dev/null || true
fi
kill "$pp" "$ppb" "$spinner" "$io" 2>/dev/null || true
wait "$io" 2>/dev/null || true
