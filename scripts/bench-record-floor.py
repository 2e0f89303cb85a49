#!/usr/bin/env python3
"""`stealscope record --rate 100` against its floor, the C loop of the same
reads (scripts/sample_floor.c): each runs SECS seconds alone, the two
alternating within one benchmark run, round after round; CPU of each from
wait4's rusage (utime + stime), start-up included.

Why alone and alternating, not both at once: on this 2-vCPU VM a 100 Hz
sampler's cost is mostly its wake-up (~40 of ~90 µs), and two samplers
running together change each other's wake-ups. Unpinned, their timers
coalesce on one CPU when their phases come close (50 µs timer slack): the
one woken first pays the wake-up from idle, the second runs warm and costs
~40 % less, and which one is first is chance. Pinned to separate CPUs they
still move each other by up to 1.4x. Two identical floors side by side
measured 0.95-1.52x (unpinned) and 0.82-1.44x (pinned) of each other;
alone, six runs of one floor in a row were within 7 % (92-99 µs a
wake-up), but the machine moves between regimes over minutes
(bench/runs/2026-11-27/record-floor-alone.md). Alternating puts the same
drift on both; `--control` runs the floor against itself this way to
show what the method resolves.

Also printed per run: run time per wake-up from /proc/PID/schedstat between
5 s and SECS-2 s (the steady state, without start-up and end).

Validity per run: the machine's busy share and steal over the run, from
/proc/stat, without the measured process's own CPU; a run where the rest
of the machine was busier than --max-busy % is rejected, and so is one in
which `record` found a VM (another user's test VM: the recording then
holds vCPU reads and the scheduler-event collector that the floor does not
do). A round counts when both its runs are valid.

  scripts/bench-record-floor.py BIN FLOOR [--secs 30] [--rounds 6]
                                [--max-busy 5] [--root DIR] [--control]
                                [--before OLD_BIN]

--before also runs an older build in each round, in the same rotation:
before and after side by side in time, each against the same floor.

--root records from DIR instead of "/" (e.g. a directory whose proc/stat and
proc/interrupts link to the live ones): the sampling loop, flushes and small
checkpoints without this machine's processes, counters or VMs.

BIN is a release `stealscope`, FLOOR the `cc -O2` build of sample_floor.c.
Prints one Markdown row per round, then the ratio of the valid rounds'
totals and the median of their ratios."""
import argparse, os, statistics, subprocess, tempfile, time
from recording_frames import saw_vms



def stat():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v), v[7]


def schedstat(pid):
    """Run time (ns) and timeslices summed over the process's threads."""
    run = slices = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            r, _, n = map(int, open(f"/proc/{pid}/task/{t}/schedstat").read().split())
            run, slices = run + r, slices + n
    except OSError:
        return None
    return run, slices


def run_alone(cmd, secs, max_busy, out=None):
    """One command alone: (CPU %, steady µs per wake-up, busy %, steal %, why
    not valid or None)."""
    hz = os.sysconf("SC_CLK_TCK")
    b0, t0, s0 = stat()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(5)
    a = schedstat(p.pid)
    time.sleep(secs - 7)
    b = schedstat(p.pid)
    _, status, ru = os.wait4(p.pid, 0)
    b1, t1, s1 = stat()
    cpu = ru.ru_utime + ru.ru_stime
    total = max(t1 - t0, 1)
    # The rest of the machine: its busy ticks without this process's CPU.
    busy = 100 * max(b1 - b0 - cpu * hz, 0) / total
    steal = 100 * (s1 - s0) / total
    wake = ((b[0] - a[0]) / (b[1] - a[1]) / 1000
            if a and b and b[1] > a[1] else float("nan"))
    why = ("exit status" if status
           else "a VM ran" if out and os.path.exists(out) and saw_vms(out)
           else f"rest of machine {busy:.0f} % busy" if busy > max_busy else None)
    return 100 * cpu / secs, wake, busy, steal, why


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("floor")
    p.add_argument("--secs", type=int, default=30)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--max-busy", type=float, default=5.0)
    p.add_argument("--root")
    p.add_argument("--control", action="store_true",
                   help="the floor against itself: the method's own spread")
    p.add_argument("--before", help="an older build, run in each round too")
    a = p.parse_args()
    names = ["floor A" if a.control else "record"] + (["before"] if a.before else [])
    print(f"| round | {' | '.join(names)} | floor | ratio | steady µs/wake-up "
          f"| rest busy | steal | valid |")
    print("|---" * (len(names) + 7) + "|")
    floor_cmd = [a.floor, str(a.secs), "100", "1"]
    bins = [a.bin] + ([a.before] if a.before else [])
    totals, ratios = [0.0] * (len(bins) + 1), [[] for _ in bins]
    for i in range(a.rounds):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "rec.ssr")
            cmds = [floor_cmd if a.control else (
                [b, "record", "-o", out, "--rate", "100", "--duration", f"{a.secs}s"]
                + (["--root", a.root] if a.root else [])) for b in bins] + [floor_cmd]
            # The order rotates too: drift within a round evens out.
            n = len(cmds)
            runs = [None] * n
            for k in [(i + j) % n for j in range(n)]:
                if os.path.exists(out):
                    os.remove(out)
                runs[k] = run_alone(cmds[k], a.secs, a.max_busy,
                                    out if k < len(bins) and not a.control else None)
        why = next((r[4] for r in runs if r[4]), None)
        f = runs[-1][0]
        if not why:
            for k, r in enumerate(runs):
                totals[k] += r[0]
            for k in range(len(bins)):
                ratios[k].append(runs[k][0] / f)
        cpu = " | ".join(f"{r[0]:.3f} %" for r in runs)
        ratio = " / ".join(f"{r[0] / f:.2f}" for r in runs[:-1])
        wake = " / ".join(f"{r[1]:.1f}" for r in runs)
        busy = " / ".join(f"{r[2]:.1f}" for r in runs)
        steal = max(r[3] for r in runs)
        print(f"| {i + 1} | {cpu} | {ratio} | {wake} | {busy} % | {steal:.2f} % | "
              f"{'yes' if not why else 'no: ' + why} |", flush=True)
    for k, name in enumerate(names):
        if ratios[k]:
            print(f"\n{name}: {len(ratios[k])} valid rounds of {a.rounds}: totals "
                  f"{totals[k]:.3f} / {totals[-1]:.3f} = {totals[k] / totals[-1]:.2f}x the "
                  f"floor; median of the rounds {statistics.median(ratios[k]):.2f}x "
                  f"(range {min(ratios[k]):.2f}-{max(ratios[k]):.2f})")


if __name__ == "__main__":
    main()
