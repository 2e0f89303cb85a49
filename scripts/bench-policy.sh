#!/usr/bin/env bash
# Issue 27: the placement policies compared on every measure, in every
# shipped scenario. Runs `stealscope sim` on scenarios/fleet.toml at 100 and
# 1,000 hosts with seeds 1-3 (one run per seed) and on every other scenario
# with --seeds 3, then checks that the stealscope policy is at least as good
# as both `none` (the kernel alone, the scenario's first case with policy
# none) and `numad` on each measure: mean steal, VM steal p90 and p99, VMs
# over 10 %, the spread between a VM's vCPUs and between VMs, work done (a
# share of demand, the remote-memory cost counted: higher is better) and
# placement changes per host-hour (against numad only: the kernel alone
# never changes placement). A tie within the seeds' range counts:
# stealscope passes a lower-is-better measure when its best seed is no worse
# than the other policy's worst. Then the fleet at 100 hosts, seed 1, with
# the remote-memory penalty from 0.1 to 0.5 (the range of
# stealscope_placement::plan::REMOTE_PENALTY's comment).
#
#   scripts/bench-policy.sh > section.md     # the BENCHMARKS.md section
#   scripts/bench-policy.sh --readme         # only rewrite README.md's fleet table
#   HOSTS="100" SEEDS="1" scripts/bench-policy.sh   # quicker
#   PENALTIES="" scripts/bench-policy.sh            # without the penalty sweep
#   KEEP=dir scripts/bench-policy.sh; KEEP=dir scripts/bench-policy.sh --readme
#                        # runs kept in dir, and a run already there not redone
#                        # (the same binary and scenarios: the sim is deterministic)
# The fleet runs simulate every tick (`--every-tick`): summing steady
# stretches, the simulator's fast path, moves the VM steal tails by tenths
# of a point, as much as the policies differ (BENCHMARKS.md, issue 27).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/stealscope}
HOSTS=${HOSTS:-"100 1000"}
SEEDS=${SEEDS:-"1 2 3"}
PENALTIES=${PENALTIES-"0.1 0.2 0.3 0.4 0.5"}
[[ -x $BIN ]] || cargo build --release -q -p stealscope
if [[ -n ${KEEP:-} ]]; then
  out=$KEEP
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
# Runs "$@" into file $1 unless a kept run is there.
sim() {
  local f=$1
  shift
  [[ -s $f ]] || "$BIN" sim "$@" > "$f"
}
readme=false
[[ ${1:-} == --readme ]] && { readme=true; HOSTS=100; }
# From BIG_HOSTS hosts up, the cases named in BIG_SKIP are left out: the
# shared-group case (not the default) simulates 20x slower than the others
# (55 s against 2.7 s for 10 hosts), 90 minutes a seed at 1,000 hosts.
BIG_HOSTS=${BIG_HOSTS:-1000}
BIG_SKIP=${BIG_SKIP-"stealscope-shared-group"}
python3 - scenarios/fleet.toml "$out/fleet-big.toml" $BIG_SKIP <<'PY'
import re, sys
src, dst, skip = sys.argv[1], sys.argv[2], set(sys.argv[3:])
parts = re.split(r"(?m)^(?=\[\[case\]\])", open(src).read())
keep = [p for p in parts if not (p.startswith("[[case]]") and re.search(r'(?m)^name = "([^"]*)"', p).group(1) in skip)]
open(dst, "w").write("".join(keep))
PY
for h in $HOSTS; do
  scen=scenarios/fleet.toml
  (( h >= BIG_HOSTS )) && scen=$out/fleet-big.toml
  for s in $SEEDS; do
    sim "$out/fleet-$h-$s.json" "$scen" --hosts "$h" --seed "$s" --every-tick --json
  done
done
if ! $readme; then
  nseeds=$(wc -w <<< "$SEEDS")
  for f in talk-cgroups talk-numa talk-idle-vms calibration-2cpu; do
    sim "$out/$f.json" "scenarios/$f.toml" --seeds "$nseeds" --every-tick --json
  done
  for p in $PENALTIES; do
    # Without the BIG_SKIP cases: the sweep ranks the default against none and numad.
    { cat "$out/fleet-big.toml"; printf '\n[numa]\nremote_penalty = %s\n' "$p"; } > "$out/fleet-penalty.toml"
    sim "$out/penalty-$p.json" "$out/fleet-penalty.toml" --hosts 100 --seed 1 --every-tick --json
  done
fi
python3 - "$out" "$readme" "$HOSTS" "$SEEDS" <<'PY'
import json, os, re, sys
out, readme, hosts, seeds = sys.argv[1], sys.argv[2] == "true", sys.argv[3].split(), sys.argv[4].split()
# (key, title, higher is better)
MEASURES = [("steal", "mean steal %", False), ("p90", "VM steal p90 %", False), ("p99", "p99 %", False),
            ("over10", "VMs > 10 %", False), ("vspread", "vCPU spread pp", False), ("vmspread", "VM spread pp", False),
            ("work", "work % of demand", True), ("changes", "changes / host-hour", False)]

def rng(v):
    return {"mean": sum(v) / len(v), "min": min(v), "max": max(v)}

def fleet_rows(h):
    return fleet_rows_of([f"{out}/fleet-{h}-{s}.json" for s in seeds])

def fleet_rows_of(files):
    runs = [json.load(open(f))["fleet"]["cases"] for f in files]
    rows = []
    for i, c in enumerate(runs[0]):
        per = [r[i] for r in runs]
        rows.append((c["name"], c["policy"], {
            "steal": rng([x["steal_pct"] for x in per]), "p90": rng([x["vm_steal_p90"] for x in per]),
            "p99": rng([x["vm_steal_p99"] for x in per]), "over10": rng([x["vms_over_10pct"] for x in per]),
            "vspread": rng([x["vcpu_spread_pp"] for x in per]), "vmspread": rng([x["vm_spread_pp"] for x in per]),
            "work": rng([x["work_pct"] for x in per]), "changes": rng([x["changes_per_host_hour"] for x in per])}))
    return rows

def case_rows(f):
    r = json.load(open(f"{out}/{f}.json"))
    rows = []
    for c in r["cases"]:
        m = c["measures"]
        rows.append((c["name"], c["policy"], {
            "steal": c["steal_pct"], "p90": m["vm_steal_p90"], "p99": m["vm_steal_p99"], "over10": m["vms_over_10pct"],
            "vspread": m["vcpu_spread_pp"], "vmspread": m["vm_spread_pp"], "work": m["work_pct"],
            "changes": m["changes_per_host_hour"]}))
    return rows

def cell(r, digits=2):
    if abs(r["max"] - r["min"]) < 0.005:
        return f"{r['mean']:.{digits}f}"
    return f"{r['mean']:.{digits}f} ({r['min']:.{digits}f}-{r['max']:.{digits}f})"

def table(rows):
    lines = ["| case | policy | " + " | ".join(t for _, t, _ in MEASURES) + " |",
             "|---|---|" + "---|" * len(MEASURES)]
    for name, pol, m in rows:
        lines.append(f"| {name} | {pol} | " + " | ".join(cell(m[k]) for k, _, _ in MEASURES) + " |")
    return "\n".join(lines)

def ok(st, base, higher):
    # A tie within the seeds' range counts.
    return st["max"] >= base["min"] - 1e-9 if higher else st["min"] <= base["max"] + 1e-9

def verdict(rows):
    none = next((r for r in rows if r[1] == "none"), None)
    numad = next((r for r in rows if r[1] == "numad"), None)
    stealscope = [r for r in rows if r[1] == "stealscope"]
    primary = next((r for r in stealscope if r[0] == "stealscope"), stealscope[-1] if stealscope else None)
    if primary is None:
        return "no stealscope case"
    fails = []
    for base in (none, numad):
        if base is None:
            continue
        for k, t, higher in MEASURES:
            # How often placement changes is judged against numad only:
            # the kernel alone never changes it.
            if k == "changes" and base[1] == "none":
                continue
            if not ok(primary[2][k], base[2][k], higher):
                d = primary[2][k]["mean"] - base[2][k]["mean"]
                fails.append(f"{t} vs {base[0]}: {primary[2][k]['mean']:.2f} against {base[2][k]['mean']:.2f} ({d:+.2f})")
    if not fails:
        return f"**{primary[0]}: at least as good as both on every measure.**"
    return f"**{primary[0]}: behind on {len(fails)} measure(s)**: " + "; ".join(fails) + "."

if readme:
    rows = fleet_rows(hosts[0])
    lines = [f"`stealscope sim scenarios/fleet.toml --hosts {hosts[0]} --every-tick`, seeds {', '.join(seeds)} (mean, range over the seeds):", "",
             "| policy | mean steal | VM steal p90 | p99 | VMs over 10 % | vCPU spread | VM spread | work done | changes / host-hour |",
             "|---|---|---|---|---|---|---|---|---|"]
    label = {"none": "none (the kernel alone)"}
    for name, pol, m in rows:
        lines.append(f"| {label.get(name, name)} | {cell(m['steal'])} % | {cell(m['p90'])} % | {cell(m['p99'], 1)} % | "
                     f"{cell(m['over10'], 0)} | {cell(m['vspread'])} pp | {cell(m['vmspread'])} pp | {cell(m['work'], 1)} % | {cell(m['changes'], 1)} |")
    lines += ["", verdict(rows)]
    text = open("README.md").read()
    new = "<!-- fleet-table: scripts/bench-policy.sh --readme -->\n" + "\n".join(lines) + "\n<!-- /fleet-table -->"
    text, n = re.subn(r"<!-- fleet-table:.*?<!-- /fleet-table -->", lambda _: new, text, flags=re.S)
    if n != 1:
        sys.exit("README.md: no <!-- fleet-table ... --> markers")
    open("README.md", "w").write(text)
    print("\n".join(lines))
    sys.exit(0)

print("## Issue 27: placement policies on every measure, every shipped scenario")
print()
print(f"Command: `scripts/bench-policy.sh` (`stealscope sim`, fleet at {' and '.join(hosts)} hosts with seeds {', '.join(seeds)};")
print(f"the other scenarios with `--seeds {len(seeds)}`). Each figure: mean over the seeds, range in brackets. Measures:")
print("steal of all vCPU time; each VM's steal over its life at the 90th/99th percentile of VMs; VMs over 10 %;")
print("most minus least robbed vCPU of a VM (mean over VMs of 2+ vCPUs) and VM of a host; work done (run at the")
print("speed remote memory allows) as a share of the work asked for; VMs re-placed per host-hour (a VM counts")
print("once per policy pass whatever it took). A tie within the seeds' range counts.")
for h in hosts:
    rows = fleet_rows(h)
    print(f"\n### fleet.toml, {h} hosts\n")
    print(table(rows))
    print()
    print(verdict(rows))
for f in ["talk-cgroups", "talk-numa", "talk-idle-vms", "calibration-2cpu"]:
    if not os.path.exists(f"{out}/{f}.json"):
        continue
    rows = case_rows(f)
    print(f"\n### {f}.toml\n")
    print(table(rows))
    print()
    print(verdict(rows))
pen = sorted(p for p in os.listdir(out) if p.startswith("penalty-"))
if pen:
    print("\n### The ranking across the remote-memory penalty (fleet, 100 hosts, seed 1)\n")
    print("| remote_penalty | policy | mean steal % | p99 % | work % of demand | changes / host-hour |")
    print("|---|---|---|---|---|---|")
    for p in pen:
        for c in json.load(open(f"{out}/{p}"))["fleet"]["cases"]:
            print(f"| {p[8:-5]} | {c['name']} | {c['steal_pct']:.2f} | {c['vm_steal_p99']:.1f} | {c['work_pct']:.1f} | {c['changes_per_host_hour']:.1f} |")
    print()
    for p in pen:
        print(f"- remote_penalty {p[8:-5]}: {verdict(fleet_rows_of([f'{out}/{p}']))}")
PY
