#!/usr/bin/env bash
# Per-event cost side by side: floor (gate closed), old and new objects,
# each with a sleeping thread watched (nothing queued) and, with QUEUED=1,
# with a spinning victim sharing CPU 1 with a hog and the ping-pong (queued
# most of the time there, so every switch on CPU 1 takes the full path).
# D holds hold-old and hold-new (crates/sched/examples/hold built at the
# two commits) and spin (spin.c next to this file). Root.
set -u
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
sleep 1000 & sleeper=$!
run() { # label binary tids...
  local label=$1 bin=$2; shift 2
  sysctl -q kernel.bpf_stats_enabled=1
  HOLD_ROUTE=bpf $bin 30 "$@" >${D:-target/bpfdbg}/hold.log 2>&1 & holder=$!
  for _ in $(seq 100); do grep -q started ${D:-target/bpfdbg}/hold.log && break; sleep 0.2; done
  sleep 0.3
  local b0 b1; b0=$(busy)
  local ops; ops=$(${PIN:-} perf bench sched pipe -l 100000 2>/dev/null | awk '/ops\/sec/{print $1}')
  b1=$(busy)
  local pct; pct=$(echo "$b0 $b1" | awk '{printf "%.0f%%", 100*($3-$1)/($4-$2)}')
  local c; c=$(bpftool prog show | awk '/handle_(switch|wakeup|irq_ent|irq_exi)/ {for(i=1;i<=NF;i++){if($i=="name")n=$(i+1);if($i=="run_time_ns")t=$(i+1);if($i=="run_cnt")c=$(i+1)}; if(c>0) printf "%s %.1f (%d) ", n, t/c, c}')
  echo "$label busy=$pct ops=$ops $c"
  kill $holder; wait $holder 2>/dev/null
  sysctl -q kernel.bpf_stats_enabled=0
}
for r in $(seq ${ROUNDS:-3}); do
  echo "-- round $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  run floor ${D:-target/bpfdbg}/hold-new
  run old-sleeper ${D:-target/bpfdbg}/hold-old $sleeper
  run new-sleeper ${D:-target/bpfdbg}/hold-new $sleeper
  if [ -n "${QUEUED:-}" ]; then
    taskset -c 1 ${D:-target/bpfdbg}/spin stlvic > ${D:-target/bpfdbg}/vic.tid & vp=$!
    taskset -c 1 ${D:-target/bpfdbg}/spin stlhog > /dev/null & hp=$!
    sleep 0.2; vt=$(cat ${D:-target/bpfdbg}/vic.tid)
    [ -n "$vt" ] || { echo "no victim tid"; continue; }
    PIN="taskset -c 1" run old-queued-cpu1 ${D:-target/bpfdbg}/hold-old $vt
    PIN="taskset -c 1" run new-queued-cpu1 ${D:-target/bpfdbg}/hold-new $vt
    PIN="taskset -c 1" run floor-cpu1 ${D:-target/bpfdbg}/hold-new
    kill $vp $hp; wait $vp $hp 2>/dev/null
  fi
done
kill $sleeper
