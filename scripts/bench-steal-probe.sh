#!/usr/bin/env bash
# Issue 30: the exact guest steal episodes against `probe preempt`'s gaps,
# measured at the same time on the same CPU. The collector
# (crates/sched/examples/guest_steal, threshold 0: every advance of the
# steal clock) writes each episode with its CLOCK_MONOTONIC stamp; the
# probe's spinner on CPU (default 1) reads CLOCK_MONOTONIC too and reports
# each gap from its start_monotonic_ns. A gap's time that no guest event
# explains (`unexplained_us`: the hypervisor's) should, when over 1 ms, lie
# inside episodes: those seen on that CPU from the gap's start to SLACK_MS
# after its end (the steal clock is read at the next switch or tick, which
# can fall inside the gap when a guest thread ran in it too) hold at least
# 90 % of it. Root (BPF and tracefs).
#
#   SECS=60 CPU=1 scripts/bench-steal-probe.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-60}
CPU=${CPU:-1}
SLACK_MS=${SLACK_MS:-10}
cargo build -q -p stealscope --bin stealscope
cargo build -q -p stealscope-sched --example guest_steal
tmp=$(mktemp -d /tmp/bench-steal-probe.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
echo "== $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), files in $tmp"
STEAL_EPISODES=$tmp/episodes.jsonl target/debug/examples/guest_steal $((SECS + 4)) 1 0 \
  >"$tmp/steal.txt" &
sleep 2
target/debug/stealscope probe preempt --cpus "$CPU" --duration "${SECS}s" --json >"$tmp/probe.json"
wait
echo "== load after $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp/episodes.jsonl" "$tmp/probe.json" "$SLACK_MS" <<'PY'
import bisect, json, sys
eps = [json.loads(l) for l in open(sys.argv[1])]
probe = json.load(open(sys.argv[2]))
slack = float(sys.argv[3]) * 1e6
start = probe["start_monotonic_ns"]
by_cpu = {}
for e in eps:
    by_cpu.setdefault(e["cpu"], []).append(e)
for v in by_cpu.values():
    v.sort(key=lambda e: e["monotonic_ns"])
print(f"episodes: {len(eps)}; probe gaps listed {len(probe['gaps'])} of {probe['gaps_total']}")
rows = {}
for g in probe["gaps"]:
    hv = g["unexplained_us"] * 1e3
    if hv < 1e6:
        continue
    t0 = start + g["t_s"] * 1e9
    t1 = t0 + g["us"] * 1e3
    v = by_cpu.get(g["cpu"], [])
    i = bisect.bisect_left([e["monotonic_ns"] for e in v], t0)
    got = sum(e["ns"] for e in v[i:] if e["monotonic_ns"] <= t1 + slack)
    r = rows.setdefault(g["class"], [0, 0, []])
    r[0] += 1
    r[1] += got >= 0.9 * hv
    r[2].append((hv / 1e6, got / 1e6))
print("| gap class | gaps with over 1 ms unexplained | inside episodes | largest (unexplained ms / episodes' ms) |")
print("|---|---|---|---|")
for c, (n, k, pairs) in sorted(rows.items()):
    top = sorted(pairs, reverse=True)[:4]
    print(f"| {c} | {n} | {k} | " + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in top) + " |")
ep1 = [e for e in by_cpu.get(probe["cpus"][0]["cpu"], []) if e["ns"] >= 1e6]
print(f"episodes of 1 ms or more on the probe's CPU: {len(ep1)}")
PY
