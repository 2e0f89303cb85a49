#!/usr/bin/env python3
"""Issue 27 point 1: placement policies on real QEMU VMs whose demand comes
and goes, side by side with the simulator on the same workload.

Three TCG VMs (testenv/): dweb with 2 vCPUs, ddb and dbatch with 1, each
running testenv/guest/duty.c: every vCPU busy for a random stretch, idle for
another, on a schedule fixed by a seed (4 vCPUs, half busy on average, on
this machine's CPUs). Each VM is in its own autogroup, as `qemu -daemonize`
makes it. For every round and policy the VMs start afresh with the round's
seeds; the policy runs as it ships, `place daemon --yes` with
`vcpu_mapping` = pool, auto or pinned (`none`: the kernel alone; `weights`:
`fairness = "weights"`, each VM's group weighed by its vCPUs, pool mode), and over
WINDOW seconds after WARM the script reads, itself:
  - each vCPU thread's run-queue wait (/proc/PID/task/TID/schedstat): steal
    as a share of wall time, the mean over vCPUs, the most robbed VM, the
    spread between dweb's two vCPUs and between the VMs;
  - the guests' work counters (serial console): work done as a share of
    what the schedule asked for, at the speed one vCPU reaches alone
    (measured first, CALIBRATE seconds);
  - the rest of the machine: busy time outside the QEMU processes, and the
    hypervisor's steal of this machine's own CPUs. A round is valid when
    other work stayed under OTHER_MAX % of a CPU and the steal from below
    under BELOW_MAX %; a disturbed round is re-run (RETRIES).
Then the same workload goes into the simulator: each VM's demand is the
schedule rebuilt from its seed (duty.c's splitmix64), from the moment its
guest started it, in 100 ms steps; the cases are the same policies with the
same planner settings. Prints a Markdown section on stdout; raw rounds go
to RESULTS (JSON) when set.

    ROUNDS=3 WINDOW=40 scripts/bench-duty.py
    POLICIES="none pool" ROUNDS=1 scripts/bench-duty.py
    POLICIES="none pool auto pinned none2" scripts/bench-duty.py
        # none2: the kernel alone again, whose difference from none is the
        # noise the default's comparison with none allows
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = os.environ.get("BIN", str(ROOT / "target/release/stealscope"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
WINDOW = float(os.environ.get("WINDOW", "40"))
WARM = float(os.environ.get("WARM", "12"))
CALIBRATE = float(os.environ.get("CALIBRATE", "10"))
OTHER_MAX = float(os.environ.get("OTHER_MAX", "10"))
BELOW_MAX = float(os.environ.get("BELOW_MAX", "5"))
RETRIES = int(os.environ.get("RETRIES", "2"))
POLICIES = os.environ.get("POLICIES", "none pool auto pinned").split()
BUSY_MS = os.environ.get("DUTY_BUSY", "500-4000")
IDLE_MS = os.environ.get("DUTY_IDLE", "500-4000")
RUN = os.environ.get("STEALSCOPE_TESTENV_RUN", "/run/stealscope-bench-duty")
GROUP = "/stealscope-bench.duty"
VMS = [("dweb", 2), ("ddb", 1), ("dbatch", 1)]
STEP_S = 0.1
CLK = os.sysconf("SC_CLK_TCK")
MASK = (1 << 64) - 1


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# -- the schedule, as duty.c makes it ---------------------------------------


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def stretches(seed, end_s):
    """[(start_s, end_s)] of the busy stretches from 0 to end_s."""
    (bl, bh), (il, ih) = [tuple(map(int, r.split("-"))) for r in (BUSY_MS, IDLE_MS)]
    s, at, busy, out = seed, 0, True, []
    while at < end_s * 1000:
        lo, hi = (bl, bh) if busy else (il, ih)
        s, r = splitmix64(s)
        nxt = at + lo + r % (hi - lo + 1)
        if busy:
            out.append((at / 1000, nxt / 1000))
        at, busy = nxt, not busy
    return out


def busy_s(seed, t0, t1):
    """Busy seconds of the schedule between t0 and t1 (s from its start)."""
    return sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in stretches(seed, t1))


def trace(seed, offset_s, end_s):
    """Demand per STEP_S from the simulated time 0, the schedule from offset_s."""
    n = int(round(end_s / STEP_S))
    levels = []
    for i in range(n):
        a, b = i * STEP_S - offset_s, (i + 1) * STEP_S - offset_s
        levels.append(0.0 if b <= 0 else busy_s(seed, max(a, 0.0), b) / STEP_S)
    return levels


# -- the machine ------------------------------------------------------------


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, text=True, capture_output=True, **kw)


def testenv(script, *args):
    env = dict(os.environ, STEALSCOPE_TESTENV_RUN=RUN)
    return sh(str(ROOT / "testenv" / script), *args, env=env).stdout.strip()


def stat_ticks():
    """(busy, steal) jiffies of the whole machine."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return sum(v) - v[3] - v[4] - v[7], v[7]


def proc_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def vcpu_tids(pid):
    tids = []
    for t in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        m = re.match(r"CPU (\d+)/TCG", open(f"/proc/{pid}/task/{t}/comm").read().strip())
        if m:
            tids.append((int(m.group(1)), int(t)))
    return [t for _, t in sorted(tids)]


def schedstat(pid, tid):
    run, wait, _ = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
    return int(run), int(wait)


def serial(name):
    return (Path(RUN) / name / "serial.log").read_bytes().decode("latin-1")


def wait_start(name, timeout=60):
    """Host time (monotonic) at which the guest printed DUTY-START."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if "DUTY-START" in serial(name):
            return time.monotonic()
        time.sleep(0.02)
    raise SystemExit(f"bench-duty: {name}: no DUTY-START in {RUN}/{name}/serial.log")


def units_at(name, ms):
    """The guest's work units, summed over its threads, at ms after its
    start (interpolated between its once-a-second lines)."""
    pts = [(0, 0)]
    for line in serial(name).splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] == "DUTY" and f[1].isdigit():
            pts.append((int(f[1]), sum(int(x) for x in f[2:])))
    for (a, ua), (b, ub) in zip(pts, pts[1:]):
        if a <= ms <= b:
            return ua + (ub - ua) * (ms - a) / max(b - a, 1)
    raise SystemExit(f"bench-duty: {name}: no work counter at {ms:.0f} ms")


def start_vm(name, vcpus, seed, duty_s, busy=None):
    cmd = f"run=/bin/duty duty_seed={seed} duty_s={int(duty_s)}"
    cmd += f" duty_busy={busy or BUSY_MS} duty_idle={IDLE_MS if not busy else '1-1'}"
    pid = int(testenv("start-vm.sh", name, str(vcpus), "--extra", DUTY, "--cmdline", cmd))
    sh("taskset", "-a", "-p", "-c", f"0-{os.cpu_count() - 1}", str(pid))
    return pid


def stop_vms():
    testenv("stop-all.sh")


# -- one run ----------------------------------------------------------------


def planner(policy):
    """The planner settings of a policy, as (key, TOML value) pairs."""
    if policy == "weights":
        return [("fairness", '"weights"'), ("vcpu_mapping", '"pool"')]
    return [("vcpu_mapping", f'"{policy}"')]


def place_config(work, policy):
    p = Path(work) / f"place-{policy}.toml"
    p.write_text(
        'manage = ["d*"]\n'
        f'shared_group = "{GROUP}"\n'
        + "".join(f"{k} = {v}\n" for k, v in planner(policy))
        + "interval_s = 5\n"
    )
    return p


def cleanup_group():
    for base in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup"):
        d = Path(base + GROUP)
        if d.is_dir():
            try:
                d.rmdir()
            except OSError:
                pass


def run_policy(policy, rnd, work):
    seeds = {name: 1000 * rnd + i + 1 for i, (name, _) in enumerate(VMS)}
    duty_s = 3 * (WARM + WINDOW) + 60
    pids, starts = {}, {}
    for name, n in VMS:
        pids[name] = start_vm(name, n, seeds[name], duty_s)
        starts[name] = wait_start(name)
    daemon = None
    if not policy.startswith("none"):
        cfg = place_config(work, policy)
        daemon = subprocess.Popen(
            [BIN, "place", "daemon", "--yes", "--config", str(cfg), "--journal",
             f"{work}/journal-{policy}-{rnd}", "--interval", "5s"],
            stdout=open(f"{work}/daemon-{policy}-{rnd}.out", "w"),
            stderr=open(f"{work}/daemon-{policy}-{rnd}.err", "w"),
        )
    first = min(starts.values())
    time.sleep(max(0.0, max(starts.values()) + WARM - time.monotonic()))
    tids = {name: vcpu_tids(pids[name]) for name in pids}
    qemu = lambda: sum(proc_ticks(p) for p in pids.values())

    def reading():
        return {
            "t": time.monotonic(),
            "stat": stat_ticks(),
            "qemu": qemu(),
            "ss": {n: [schedstat(pids[n], t) for t in tids[n]] for n in pids},
        }

    r0 = reading()
    # Every second of the window, for the p99 of VM-seconds.
    marks = [(r0["t"], r0["ss"])]
    while time.monotonic() < r0["t"] + WINDOW - 0.5:
        time.sleep(min(1.0, r0["t"] + WINDOW - time.monotonic()))
        marks.append((time.monotonic(), {n: [schedstat(pids[n], t) for t in tids[n]] for n in pids}))
    r1 = reading()
    marks.append((r1["t"], r1["ss"]))
    r1["marks"] = marks
    if daemon:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
    time.sleep(1.5)  # the guests' once-a-second counters past the window's end
    result = measures(r0, r1, pids, starts, seeds, first)
    result.update(policy=policy, round=rnd)
    if daemon:
        for _ in range(4):
            if sh(BIN, "place", "undo", "--yes", "--config", str(cfg), "--journal",
                  f"{work}/journal-{policy}-{rnd}", check=False).returncode != 0:
                break
        result["daemon_log"] = Path(f"{work}/daemon-{policy}-{rnd}.err").read_text()[-2000:]
    stop_vms()
    cleanup_group()
    return result


def measures(r0, r1, pids, starts, seeds, first):
    wall = r1["t"] - r0["t"]
    steal = {n: [100 * (b[1] - a[1]) / 1e9 / wall for a, b in zip(r0["ss"][n], r1["ss"][n])]
             for n in pids}
    vcpus = [s for n in steal for s in steal[n]]
    vm = {n: sum(v) / len(v) for n, v in steal.items()}
    units = asked = 0.0
    for n, (_, k) in zip(pids, VMS):
        a, b = r0["t"] - starts[n], r1["t"] - starts[n]
        units += units_at(n, 1000 * b) - units_at(n, 1000 * a)
        asked += k * busy_s(seeds[n], a, b)
    busy = (r1["stat"][0] - r0["stat"][0]) / CLK
    below = (r1["stat"][1] - r0["stat"][1]) / CLK
    other = 100 * (busy - (r1["qemu"] - r0["qemu"]) / CLK) / wall
    return {
        "wall_s": wall,
        "steal_pct": steal,
        "mean_steal_pct": sum(vcpus) / len(vcpus),
        "max_vm_steal_pct": max(vm.values()),
        "p99_vm_second_pct": p99_vm_seconds(r1["marks"]),
        "vcpu_spread_pp": max(steal["dweb"]) - min(steal["dweb"]),
        "vm_spread_pp": max(vm.values()) - min(vm.values()),
        "units": units,
        "asked_busy_s": asked,
        "other_pct": max(other, 0.0),
        "below_pct": 100 * below / wall / os.cpu_count(),
        "offsets_s": {n: starts[n] - first for n in pids},
        "window_s": [r0["t"] - first, r1["t"] - first],
        "seeds": seeds,
    }


def p99_vm_seconds(marks):
    """The 99th percentile (nearest rank) of every VM's steal over every
    second of the window: the tail a VM's user feels, which a VM's mean
    over the window smooths away."""
    vals = []
    for (t0, a), (t1, b) in zip(marks, marks[1:]):
        # A thread cannot run and wait longer than the time that passed:
        # when one seems to, the reads were further apart than their stamps
        # (the script waited for a CPU between a stamp and its reads), and
        # that is the span. Without this a second read 254 % (2026-12-07).
        ran_waited = [y[0] - x[0] + y[1] - x[1] for n in a for x, y in zip(a[n], b[n])]
        span = max(t1 - t0, max(ran_waited) / 1e9)
        for n in a:
            wait = sum(y[1] - x[1] for x, y in zip(a[n], b[n])) / len(a[n])
            vals.append(100 * wait / 1e9 / span)
    vals.sort()
    return vals[max(0, -(-99 * len(vals) // 100) - 1)]


def calibrate():
    """Work units per busy second of one vCPU with the machine to itself."""
    pid = start_vm("dcal", 1, 1, CALIBRATE + 30, busy=f"{int(1000 * (CALIBRATE + 30))}-{int(1000 * (CALIBRATE + 30))}")
    t = wait_start("dcal")
    time.sleep(2)
    a = time.monotonic() - t
    time.sleep(CALIBRATE)
    b = time.monotonic() - t
    time.sleep(1.5)  # the counter line past b
    rate = (units_at("dcal", 1000 * b) - units_at("dcal", 1000 * a)) / (b - a)
    stop_vms()
    log(f"calibration: {rate:.0f} units per busy second (pid {pid})")
    return rate


def valid(r):
    if r["other_pct"] > OTHER_MAX:
        return f"other work used {r['other_pct']:.1f} % of a CPU"
    if r["below_pct"] > BELOW_MAX:
        return f"the hypervisor below stole {r['below_pct']:.1f} % of this machine's CPUs"
    return None


# -- the simulator ----------------------------------------------------------


def scenario(work, r):
    """A scenario of run r's workload (its VMs' start offsets and window),
    with r's policy as the one case."""
    end = r["window_s"][1]
    lines = [
        f'description = "bench-duty round {r["round"]}: duty-cycle VMs on {os.cpu_count()} CPUs"',
        f"duration_s = {end:.1f}",
        f"warmup_s = {r['window_s'][0]:.1f}",
        "tick_ms = 4",
        "seeds = 3",
        "[host]",
        f"cpus = {os.cpu_count()}",
        "mem_gib_per_node = 4",
        "[scheduler]",
        "timing = true",
        "hz = 250",
    ]
    for name, n in VMS:
        f = Path(work) / f"trace-{r['round']}-{r['policy']}-{name}.txt"
        f.write_text("\n".join(f"{x:.3f}" for x in trace(r["seeds"][name], r["offsets_s"][name], end)) + "\n")
        lines += [
            "[[vm]]",
            f'name = "{name}"',
            f"vcpus = {n}",
            "mem_gib = 0.25",
            "emulator = { wakeups_per_s = 500, run_us = 14, kicks = 0.63 }",
            f'demand = {{ pattern = "trace", file = "{f.name}", step_s = {STEP_S} }}',
        ]
    p = r["policy"]
    lines += ["[[case]]", f'name = "{p}"', 'cgroups = "per-vm"']
    if p.startswith("none"):
        lines.append('policy = "none"')
    else:
        keys = ", ".join(f"{k} = {v}" for k, v in planner(p))
        lines += ['policy = "stealscope"', f"planner = {{ {keys}, interval_s = 5 }}"]
    path = Path(work) / f"duty-{r['round']}-{p}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def simulate(work, r):
    """The simulator's measures of run r's workload under r's policy."""
    out = sh(BIN, "sim", str(scenario(work, r)), "--json").stdout
    for c in json.loads(out)["cases"]:
        m = c["measures"]
        vm = {v["name"]: v["steal_pct"]["mean"] for v in c["vms"]}
        web = [x["steal_pct"]["mean"] for x in next(v for v in c["vms"] if v["name"] == "dweb")["vcpus"]]
        return {
            "mean_steal_pct": c["steal_pct"]["mean"],
            "max_vm_steal_pct": max(vm.values()),
            "p99_vm_second_pct": float("nan"),
            "vcpu_spread_pp": max(web) - min(web),
            "vm_spread_pp": max(vm.values()) - min(vm.values()),
            "work_pct": m["work_pct"]["mean"],
            "changes_per_host_hour": m["changes_per_host_hour"]["mean"],
        }
    raise SystemExit("bench-duty: the simulator returned no case")


# -- the report -------------------------------------------------------------


def rank(d, key, low_is_good=True):
    return " < ".join(sorted(d, key=lambda p: d[p][key] * (1 if low_is_good else -1)))


def default_against_none(rnd, meas):
    """The default (pool) against the kernel alone on mean steal and p99.
    With `none2` in POLICIES (the kernel alone run again, the same
    schedule) the two none runs bound the noise, as the seeds' range does
    in the simulator's comparisons: the default is at least as good when it
    is no worse than the worse of them."""
    dflt, nones = meas.get("pool"), [meas[p] for p in ("none", "none2") if p in meas]
    if not dflt or not nones:
        return f"- round {rnd}: no default (pool) or no none run"
    parts, ok = [], True
    for k, name in (("mean_steal_pct", "mean steal"), ("p99_vm_second_pct", "p99 VM-second")):
        worst = max(n[k] for n in nones)
        ok &= dflt[k] <= worst
        parts.append(f"{name} {dflt[k]:.1f} against " + " / ".join(f"{n[k]:.1f}" for n in nones) + " %")
    return (f"- round {rnd}, the default (pool) against the kernel alone"
            f"{' (run twice)' if len(nones) > 1 else ''}: " + ", ".join(parts)
            + f": {'at least as good' if ok else 'BEHIND'}")


def report(rate, runs, rejected):
    cols = [("mean_steal_pct", "mean steal %"), ("max_vm_steal_pct", "worst VM %"),
            ("p99_vm_second_pct", "p99 VM-second %"),
            ("vcpu_spread_pp", "dweb vCPU spread pp"), ("vm_spread_pp", "VM spread pp"),
            ("work_pct", "work % of asked")]
    print("## Issue 27: policies on real duty-cycle VMs, and the simulator on the same workload\n")
    print(f"Command: `ROUNDS={ROUNDS} WINDOW={WINDOW:g} scripts/bench-duty.py` on {os.uname().nodename} "
          f"({os.cpu_count()} CPUs, kernel {os.uname().release}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
    print(f"VMs dweb (2 vCPUs), ddb, dbatch (1 each), busy {BUSY_MS} ms / idle {IDLE_MS} ms per stretch; "
          f"window {WINDOW:g} s after {WARM:g} s; one vCPU alone does {rate:.0f} work units per busy second.\n")
    print("| round | policy | measured: " + " | ".join(c[1] for c in cols) + " | simulated: " + " | ".join(c[1] for c in cols) + " |")
    print("|---|---|" + "---|" * (2 * len(cols)))
    for r in runs:
        s = r["sim"]
        meas = " | ".join(f"{r[k]:.1f}" for k, _ in cols)
        sim = " | ".join("-" if s[k] != s[k] else f"{s[k]:.1f}" for k, _ in cols)
        print(f"| {r['round']} | {r['policy']} | {meas} | {sim} |")
    print()
    for rnd in range(1, ROUNDS + 1):
        meas = {r["policy"]: r for r in runs if r["round"] == rnd}
        if len(meas) < len(POLICIES):
            print(f"- round {rnd}: not every policy has a valid run; no ranking")
            continue
        # The repeat of none bounds the noise; the ranking is of the policies.
        ranked = {p: r for p, r in meas.items() if p != "none2"}
        sim = {p: r["sim"] for p, r in ranked.items()}
        for key, name, low in [("mean_steal_pct", "mean steal", True), ("work_pct", "work", False)]:
            if key == "mean_steal_pct":
                print(default_against_none(rnd, meas))
            m, s = rank(ranked, key, low), rank(sim, key, low)
            print(f"- round {rnd}, {name} (best first): measured {m}; simulated {s}; "
                  f"{'same' if m == s else 'DIFFERENT'}")
    for r in rejected:
        print(f"- rejected: round {r['round']} {r['policy']}: {r['why']}")
    print()


def main():
    global DUTY
    if os.geteuid() != 0:
        raise SystemExit("bench-duty: needs root (cgroups, QEMU)")
    work = tempfile.mkdtemp(prefix="bench-duty.")
    DUTY = f"{work}/duty"
    sh("gcc", "-O2", "-static", "-pthread", str(ROOT / "testenv/guest/duty.c"), "-o", DUTY)
    if not os.access(BIN, os.X_OK):
        sh("cargo", "build", "--release", "-q", cwd=ROOT)
    stop_vms()
    try:
        rate = calibrate()
        runs, rejected = [], []
        for rnd in range(1, ROUNDS + 1):
            order = POLICIES[rnd - 1:] + POLICIES[:rnd - 1]
            for p in order:
                for attempt in range(RETRIES + 1):
                    r = run_policy(p, rnd, work)
                    r["work_pct"] = 100 * r["units"] / rate / max(r["asked_busy_s"], 1e-9)
                    why = valid(r)
                    log(f"round {rnd} {p} try {attempt + 1}: mean steal {r['mean_steal_pct']:.1f} %, "
                        f"work {r['work_pct']:.1f} %, other {r['other_pct']:.1f} %, below {r['below_pct']:.1f} %"
                        f"{': rejected: ' + why if why else ''}")
                    if why is None:
                        r["sim"] = simulate(work, r)
                        runs.append(r)
                        break
                    rejected.append({"round": rnd, "policy": p, "why": why})
        if os.environ.get("RESULTS"):
            Path(os.environ["RESULTS"]).write_text(json.dumps(
                {"rate": rate, "runs": runs, "rejected": rejected}, indent=1))
        report(rate, runs, rejected)
    finally:
        stop_vms()
        cleanup_group()
        if not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
