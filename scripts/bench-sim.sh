#!/usr/bin/env bash
# Issue 8: the simulator against the real two-CPU cgroup experiment.
# Runs `stealscope sim scenarios/calibration-2cpu.toml` with SEEDS seeds (the
# repeated runs) and sets its per-vCPU steal beside the real rounds measured by
# scripts/bench-fairness.sh (RESULTS files, given as arguments; each starts
# with a comment line holding the date and the load average during the run).
# Where the real outcome is stable (every vCPU within 5 pp over the rounds) the
# simulated mean must be within 5 pp of the real mean, per vCPU; where it is
# not, the simulated range of the spread must cover the real one. Every round
# in RESULTS passed bench-fairness.sh's validity checks (other work measured
# under 10 % of a CPU, the clocks consistent); the load average is shown only
# (the experiment's own threads make it 7-9: 4 busy vCPUs, QEMU's main loops).
# Prints a Markdown section on stdout.
#
#   SEEDS=20 scripts/bench-sim.sh /path/to/fairness-results.txt ...
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-20}
BIN=${BIN:-target/release/stealscope}
[[ -x $BIN ]] || cargo build --release -q
sim=$(mktemp)
trap 'rm -f "$sim"' EXIT
"$BIN" sim scenarios/calibration-2cpu.toml --seeds "$SEEDS" --json > "$sim"
python3 - "$sim" "$SEEDS" "$@" <<'PY'
import json, sys
sim = json.load(open(sys.argv[1]))
seeds = sys.argv[2]
runs = []  # (header, {mech: [(spread, [a0, a1, b0, c0])]})
for path in sys.argv[3:]:
    head, rounds = "", {}
    for line in open(path):
        if line.startswith("#"):
            head = line[1:].strip()
            continue
        f = line.split()
        if len(f) in (7, 8):
            load = float(f[7]) if len(f) == 8 else None
            rounds.setdefault(f[0], []).append((float(f[2]), [float(x) for x in f[3:7]], load))
    runs.append((head, rounds))
names = ["A0", "A1", "B0", "C0"]
earlier = {"equal": "33-35", "weights": "5, then 27", "shared-group": "0-2", "pinned": ""}
# Rounds recorded before 2026-12-07 name the pinned layout by the defaults of then.
label = {"stealscope": "pinned"}
print("## Issue 8: simulator against the real two-CPU experiment")
print()
print(f"Command: `SEEDS={seeds} scripts/bench-sim.sh RESULTS...`: `stealscope sim scenarios/calibration-2cpu.toml --seeds {seeds}`")
print("(2 CPUs; VM A with 2 busy vCPUs, B and C with 1; per-VM cpu groups; `weights` and `shared-group` with threads left")
print("to the load balancer, the pinned layout (one group, vCPUs pinned one per CPU balanced by demand) and the planner's defaults, applied by the")
print("planner as `place apply` does in the real experiment; 20 s windows) beside the rounds of `scripts/bench-fairness.sh`.")
print("Steal per vCPU in %; the simulated figures are the mean and, in brackets, the range over the seeds.")
print()
real_by = {}
for head, rounds in runs:
    for mech, rs in rounds.items():
        real_by.setdefault(label.get(mech, mech), []).extend(rs)
print("| mechanism | | " + " | ".join(names) + " | spread pp |")
print("|---|---|" + "---|" * (len(names) + 1))
verdicts = []
for case in sim["cases"]:
    mech = case["name"]
    v = [x for vm in case["vms"] for x in vm["vcpus"]]
    cells = [f"{x['steal_pct']['mean']:.1f} ({x['steal_pct']['min']:.1f}-{x['steal_pct']['max']:.1f})" for x in v]
    sp = case["spread_pp"]
    print(f"| {mech} | sim, {seeds} seeds | " + " | ".join(cells) + f" | {sp['mean']:.1f} ({sp['min']:.1f}-{sp['max']:.1f}) |")
    rs = real_by.get(mech, [])
    for i, (spread, vals, load) in enumerate(rs):
        note = "" if load is None else f", load {load:.1f}"
        print(f"| {mech} | real, round {i + 1}{note} | " + " | ".join(f"{x:.1f}" for x in vals) + f" | {spread:.1f} |")
    print(f"| {mech} | real, earlier (SPEC) | | | | | {earlier.get(mech, '')} |")
    if not rs:
        verdicts.append(f"- {mech}: no real round.")
        continue
    per = list(zip(*[vals for _, vals, _ in rs]))
    stable = all(max(p) - min(p) <= 5.0 for p in per)
    spreads = [s for s, _, _ in rs]
    if stable:
        diffs = [abs(sum(p) / len(p) - x["steal_pct"]["mean"]) for p, x in zip(per, v)]
        ok = max(diffs) <= 5.0
        verdicts.append(f"- {mech}: real outcome stable over {len(rs)} rounds; simulated mean per vCPU within {max(diffs):.1f} pp of the real mean: **{'met' if ok else 'not met'}** (target 5 pp).")
    else:
        lo, hi = sp["min"] - 5.0, sp["max"] + 5.0
        ok = lo <= min(spreads) and max(spreads) <= hi
        verdicts.append(f"- {mech}: real outcome varies (spread {min(spreads):.1f}-{max(spreads):.1f} pp over {len(rs)} rounds); simulated spread range {sp['min']:.1f}-{sp['max']:.1f} pp (5 pp tolerance) {'covers' if ok else 'does not cover'} it: **{'met' if ok else 'not met'}**.")
print()
for head, _ in runs:
    print(f"Real rounds: {head}.")
print()
for v in verdicts:
    print(v)
print()
print("What the model does (`[scheduler] timing = true`, scenarios/calibration/vcpu-threads.md): the kernel's rules as")
print("written (group weight split by load per CPU, the balancer's imbalance tests and intervals, cache-hot refusals)")
print("plus QEMU's main loop in each VM's group, queued far more than it runs (wake-up latency, delayed dequeue): load")
print("without CPU, which the balancer spreads like a vCPU's; and the host's other work as measured beside the")
print("shared group (`[host] background`: kernel threads and this sandbox's tools, 0.5 % of a CPU but queued 2")
print("threads on average, in stretches that come and go). Layouts in which the vCPUs' shares differ then look")
print("balanced, and which one a run keeps depends on timing: the spread varies from seed to seed as from round to")
print("round. What it misses: which VM wins (real rounds favour A's vCPUs over B's and C's under equal shares; the")
print("seeds the reverse), and real layouts change more often (60 changes in 21 s measured) than the")
print("simulated ones, which hold one layout for most of a run.")
PY
