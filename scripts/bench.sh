#!/usr/bin/env bash
# Runs the benchmarks and writes BENCHMARKS.md with the command, machine and figures.
set -euo pipefail
cd "$(dirname "$0")/.."
out=BENCHMARKS.md
tmp=$(mktemp)
{
  echo "# Benchmarks"
  echo
  echo "Written by \`scripts/bench.sh\` on $(date -u +%Y-%m-%d). Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
  virt="bare metal"
  grep -qw hypervisor /proc/cpuinfo && virt="a VM guest ($(dmesg 2>/dev/null | grep -o 'Hypervisor detected: [A-Za-z]*' | head -1 || true))"
  echo "$(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r), ${virt}."
  echo "Each section names the command that produced it; every comparison ran side by side in one run."
  echo
  cargo bench --quiet --bench sample_cost 2>/dev/null
  cargo bench --quiet --bench host_scan 2>/dev/null
  cargo bench --quiet -p stealscope-placement --bench planner 2>/dev/null
  cargo bench --quiet --bench hw_counters 2>/dev/null
  echo; cargo bench --quiet -p stealscope-output --bench html_report 2>/dev/null
  # The fairness experiment needs a quiet machine: 20 s windows of real QEMU
  # VMs competing for the CPUs. Its raw rounds are kept in scenarios/calibration/ for the simulator's comparison.
  raw=$(mktemp)
  if fairness=$(RESULTS=$raw scripts/bench-fairness.sh 2>/dev/null); then
    echo; echo "$fairness"
    cp "$raw" "scenarios/calibration/fairness-$(date -u +%Y%m%dT%H%M).txt"
  fi
  rm -f "$raw"
  echo; cargo bench --quiet -p stealscope-sim --bench fleet 2>/dev/null
  if sim=$(scripts/bench-sim.sh scenarios/calibration/fairness-*.txt 2>/dev/null); then echo; echo "$sim"; fi
  # Sections of scripts that need root and packages appear when they run cleanly.
  if probes=$(scripts/bench-probes.sh 2>/dev/null); then echo; echo "$probes"; fi
  if serve=$(scripts/bench-serve.sh 2>/dev/null); then echo; echo "$serve"; fi
  if record=$(scripts/bench-record.sh 2>/dev/null); then echo; echo "$record"; fi
} > "$tmp"
mv "$tmp" "$out"
cat "$out"
