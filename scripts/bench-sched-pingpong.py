#!/usr/bin/env python3
"""Issue 17's overhead benchmark: the machine-wide cost of watching who ran
while a thread waited, at >= 20,000 context switches/s.

bench/pingpong.c pins two processes to one CPU that hand a byte back and
forth, each spinning a fixed amount per message (paced: about 12,000 round
trips/s, 24,000 switches/s). Its round trips/s is the throughput. Per round,
side by side: alone, the stealscope collector on the BPF route and on the
tracefs route (crates/sched/examples/hold, watching the ping-pong parent),
bench/wait_by.bt under bpftrace (the same aggregation), `perf sched record`,
alone again. Loss = 1 - rate / mean(alone before, alone after).

A round is valid when the two alone runs agree within 3% and the ping-pong
CPU lost under 1% to steal in every phase; invalid rounds are printed and
left out. Also printed: the other CPUs' busy share in each phase (the
tools' user space and anything else), which is the cost that moved off the
ping-pong CPU. Root. Usage: bench-sched-pingpong.py [--rounds N] [--secs S]
[--target ROUND_TRIPS_PER_S]. HOLD names a hold binary already built (the BPF
programs' cost does not depend on the build's profile), else a release one is
built.
"""
import argparse, os, re, signal, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PP = "/tmp/stealscope-pingpong"
HOLD = os.environ.get("HOLD") or os.path.join(ROOT, "target/release/examples/hold")
CPU = 1


def stat():
    """Per CPU (busy, steal, total) jiffies."""
    out = {}
    for line in open("/proc/stat"):
        m = re.match(r"cpu(\d+) (.*)", line)
        if m:
            v = [int(x) for x in m.group(2).split()]
            busy = v[0] + v[1] + v[2] + v[5] + v[6]
            out[int(m.group(1))] = (busy, v[7], sum(v[:8]))
    return out


LOG = "/tmp/stealscope-bench-tool.log"
# What each tool prints once it is attached; a phase whose tool never said
# it is rejected (it measured nothing).
READY = {"hold": "started route", "bpftrace": "Attaching"}


def run_pp(iters, warm, secs, tool=None):
    """Starts the ping-pong, then the tool (a function of the parent pid
    returning a Popen), measures; returns (rate, steal% on CPU, busy% of
    the other CPUs, whether the tool was attached)."""
    p = subprocess.Popen([PP, str(CPU), str(warm), str(secs), str(iters)],
                         stdout=subprocess.PIPE, text=True)
    pids = p.stdout.readline().split()
    t = tool(int(pids[1])) if tool else None
    time.sleep(warm)
    s0 = stat()
    out = p.stdout.read()
    s1 = stat()
    p.wait()
    if t:
        t.send_signal(signal.SIGINT)
        try:
            t.wait(timeout=20)
        except subprocess.TimeoutExpired:
            t.kill()
            t.wait()
    attached = True
    if t:
        text = open(LOG).read() if os.path.exists(LOG) else ""
        want = next((v for k, v in READY.items() if k in " ".join(t.args)), None)
        if want is not None:
            attached = want in text
        else:  # perf sched record: its data file holds the events
            attached = os.path.getsize("/tmp/stealscope-bench.data") > 100000
    rate = float(re.search(r"round_trips_per_s ([\d.]+)", out).group(1))
    d = {c: tuple(b - a for a, b in zip(s0[c], s1[c])) for c in s1}
    steal = 100.0 * d[CPU][1] / max(d[CPU][2], 1)
    others = [c for c in d if c != CPU]
    busy = 100.0 * sum(d[c][0] for c in others) / max(sum(d[c][2] for c in others), 1)
    return rate, steal, busy, attached


def hold(route):
    return lambda pid: subprocess.Popen(
        [HOLD, "600", str(pid)], env=dict(os.environ, HOLD_ROUTE=route),
        stdout=open(LOG, "w"), stderr=subprocess.STDOUT)


def bpftrace(pid):
    return subprocess.Popen(["bpftrace", os.path.join(ROOT, "bench/wait_by.bt"), str(pid)],
                            stdout=open(LOG, "w"), stderr=subprocess.STDOUT)


def perf_sched(_pid):
    return subprocess.Popen(["perf", "sched", "record", "-q", "-o", "/tmp/stealscope-bench.data",
                             "--", "sleep", "600"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/tmp")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=float, default=10)
    ap.add_argument("--warm", type=float, default=6)
    ap.add_argument("--target", type=float, default=12000, help="round trips/s alone")
    a = ap.parse_args()
    subprocess.run(["cc", "-O2", "-o", PP, os.path.join(ROOT, "bench/pingpong.c")], check=True)
    if not os.environ.get("HOLD"):
        subprocess.run(["cargo", "build", "-q", "--release", "-p", "stealscope-sched", "--example",
                        "hold"], cwd=ROOT, check=True)
    # Pace: the spin per message that gives about --target round trips/s.
    iters = 40000
    for _ in range(4):
        r = run_pp(iters, 0.5, 2)[0]
        iters = max(1000, int(iters * r / a.target))
    print(f"machine: {os.uname().release}, {os.cpu_count()} CPUs; ping-pong on CPU {CPU}, "
          f"{iters} spin iterations per message, {a.secs:.0f} s per phase after {a.warm:.0f} s warm-up")
    phases = [("bpf collector", hold("bpf")), ("tracefs collector", hold("tracefs")),
              ("bpftrace wait_by.bt", bpftrace), ("perf sched record", perf_sched)]
    losses = {n: [] for n, _ in phases}
    for rnd in range(1, a.rounds + 1):
        before = run_pp(iters, a.warm, a.secs)
        got = [(n, run_pp(iters, a.warm, a.secs, t)) for n, t in phases]
        after = run_pp(iters, a.warm, a.secs)
        base = (before[0] + after[0]) / 2
        spread = abs(before[0] - after[0]) / base * 100
        steals = [before[1], after[1]] + [g[1] for _, g in got]
        ok = spread < 3.0 and max(steals) < 1.0 and all(g[3] for _, g in got)
        print(f"round {rnd}: alone {before[0]:.0f} / {after[0]:.0f} round trips/s "
              f"({2 * base:.0f} switches/s, {1e6 / (2 * base):.1f} us a message with its switch, spread {spread:.1f}%, other CPUs {before[2]:.0f}%/"
              f"{after[2]:.0f}% busy, max steal {max(steals):.2f}%) -> {'valid' if ok else 'REJECTED'}")
        for n, (rate, steal, busy, attached) in got:
            loss = 100.0 * (1 - rate / base)
            print(f"   {n:22s} {rate:9.0f} round trips/s  loss {loss:5.1f}%  "
                  f"other CPUs {busy:4.0f}% busy  steal {steal:.2f}%"
                  + ("" if attached else "  (tool NOT attached)"))
            if ok:
                losses[n].append(loss)
    print("valid rounds, loss of throughput (min / median / max):")
    for n, l in losses.items():
        if l:
            l = sorted(l)
            print(f"   {n:22s} {l[0]:5.1f}% / {l[len(l) // 2]:5.1f}% / {l[-1]:5.1f}%  ({len(l)} rounds)")
        else:
            print(f"   {n:22s} no valid round")
    try:
        os.remove("/tmp/stealscope-bench.data")
    except OSError:
        pass


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("bench-sched-pingpong.py: needs root (BPF, tracefs, perf)")
    main()
