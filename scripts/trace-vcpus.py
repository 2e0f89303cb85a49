#!/usr/bin/env python3
"""Scheduler behaviour of QEMU threads from a tracefs text trace.

Reads the `trace` file of a tracefs instance that recorded sched_switch,
sched_waking, sched_wakeup and sched_migrate_task (scripts/trace-vcpus.sh)
and prints, per thread of the given QEMU processes, what the simulator's
calibration needs: run and wait shares, sleeps per second and how long they
last, who wakes the thread and where it wakes up (previous CPU, the waker's
CPU), migrations per second by cause (wake-up placement, periodic balance
from the softirq, the stopper's active balance), and for the vCPU threads
how long a layout (which CPU each vCPU sits on) lasts.

    trace-vcpus.py TRACE NAME=PID... [--json OUT] [--schedstat START END]
                   [--sched-debug FILE]

--schedstat adds each thread's run and wait share from /proc/PID/task/TID/schedstat
read at both ends (independent of the trace); --sched-debug summarises samples of
/sys/kernel/debug/sched/debug: each VM group's entity weight per CPU against its
threads there, the kernel's own view of the split of a group's weight.
"""
import argparse
import json
import re
import statistics
import sys

LINE = re.compile(
    r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+(?:\(\s*\S+\)\s+)?\[(?P<cpu>\d+)\]\s+(?P<flags>\S{4,5})\s+"
    r"(?P<ts>[\d.]+): (?P<ev>\w+): (?P<rest>.*)$"
)
SWITCH = re.compile(
    r"prev_comm=(?P<pc>.*) prev_pid=(?P<pp>\d+) prev_prio=\d+ prev_state=(?P<st>\S+) ==> "
    r"next_comm=(?P<nc>.*) next_pid=(?P<np>\d+) next_prio=\d+"
)
WAKE = re.compile(r"comm=(?P<c>.*) pid=(?P<p>\d+) prio=\d+ target_cpu=(?P<t>\d+)")
MIGRATE = re.compile(r"comm=(?P<c>.*) pid=(?P<p>\d+) prio=\d+ orig_cpu=(?P<o>\d+) dest_cpu=(?P<d>\d+)")


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Thread:
    def __init__(self, vm, tid, comm):
        self.vm, self.tid, self.comm = vm, tid, comm
        self.cpu = None
        self.state = None  # "run", "wait", "sleep"
        self.since = None
        self.run = self.wait = 0.0
        self.sleeps = []  # durations, s
        self.waits = []  # runnable-to-running delays, s
        self.slices = []  # on-CPU stretches, s
        self.preempted = 0
        self.wakers = {}  # waker kind -> count
        self.wake_where = {"prev": 0, "waker": 0, "other": 0}
        self.wake_pending = None  # (waker cpu, waker kind, prev cpu)
        self.migr = {"wakeup": 0, "balance": 0, "active": 0, "other": 0}


def waker_kind(comm, flags, names):
    """What woke a thread: a hard interrupt (a timer), or a named thread."""
    if "h" in flags[2:3] or flags[2:3] in ("H",):
        return "irq"
    return names.get(comm, "other")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("vms", nargs="+", help="NAME=PID")
    ap.add_argument("--json")
    ap.add_argument("--schedstat", nargs=2)
    ap.add_argument("--sched-debug")
    ap.add_argument("--all-schedstat", nargs=2)
    a = ap.parse_args()
    out_json, trace = a.json, a.trace
    vms = dict(x.split("=") for x in a.vms)
    # Threads by process from the schedstat file (the VMs may be gone by now).
    if a.schedstat:
        for line in open(a.schedstat[0]).read().split("\n")[1:]:
            if line.strip():
                pid, tid = line.split()[:2]
                TGID[int(tid)] = int(pid)
    pid_vm = {int(p): n for n, p in vms.items()}
    threads = {}
    first = last = None
    names = {}
    # Task list per pid: /proc may be gone by now, so the trace names them.
    for line in open(trace, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        ts = float(m["ts"])
        first = ts if first is None else first
        last = ts
        ev, rest, cpu = m["ev"], m["rest"], int(m["cpu"])
        if ev == "sched_switch":
            s = SWITCH.match(rest)
            if not s:
                continue
            for tid, comm in ((int(s["pp"]), s["pc"]), (int(s["np"]), s["nc"])):
                ensure(threads, tid, comm, pid_vm)
            prev = threads.get(int(s["pp"]))
            if prev is not None:
                if prev.state == "run":
                    prev.run += ts - prev.since
                    prev.slices.append(ts - prev.since)
                prev.cpu = cpu
                if s["st"].startswith("R"):
                    prev.state, prev.since = "wait", ts
                    prev.preempted += 1
                else:
                    prev.state, prev.since = "sleep", ts
            nxt = threads.get(int(s["np"]))
            if nxt is not None:
                if nxt.state == "wait":
                    nxt.wait += ts - nxt.since
                    nxt.waits.append(ts - nxt.since)
                nxt.state, nxt.since, nxt.cpu = "run", ts, cpu
        elif ev == "sched_waking":
            w = WAKE.match(rest)
            t = w and threads.get(int(w["p"]))
            if t is not None:
                kind = waker_kind(m["comm"], m["flags"], names_of(threads, pid_vm))
                t.wake_pending = (cpu, kind, t.cpu)
        elif ev == "sched_wakeup":
            w = WAKE.match(rest)
            t = w and threads.get(int(w["p"]))
            if t is None:
                continue
            target = int(w["t"])
            if t.state == "sleep":
                t.sleeps.append(ts - t.since)
                t.state, t.since = "wait", ts
            if t.wake_pending:
                wcpu, kind, prev = t.wake_pending
                t.wakers[kind] = t.wakers.get(kind, 0) + 1
                where = "prev" if target == prev else "waker" if target == wcpu else "other"
                t.wake_where[where] += 1
            t.cpu = target
            t.wake_pending = None
        elif ev == "sched_migrate_task":
            g = MIGRATE.match(rest)
            t = g and threads.get(int(g["p"]))
            if t is None:
                continue
            if t.wake_pending is not None:
                kind = "wakeup"
            elif m["comm"].startswith("migration/"):
                kind = "active"
            elif "s" in m["flags"][2:3]:
                kind = "balance"
            else:
                kind = "other"
            t.migr[kind] += 1
            if t.state != "sleep":
                t.cpu = int(g["d"])
    secs = (last or 0) - (first or 0)
    report = {"secs": secs, "threads": []}
    for t in sorted((t for t in threads.values() if t.vm is not None), key=lambda t: (t.vm, t.tid)):
        if t.vm is None:
            continue
        if t.state == "run":
            t.run += last - t.since
        elif t.state == "wait":
            t.wait += last - t.since
        report["threads"].append(
            {
                "vm": t.vm,
                "tid": t.tid,
                "comm": t.comm,
                "run_pct": 100 * t.run / secs,
                "wait_pct": 100 * t.wait / secs,
                "sleeps_per_s": len(t.sleeps) / secs,
                "sleep_ms_p50": ms(pct(t.sleeps, 0.5)),
                "sleep_ms_p90": ms(pct(t.sleeps, 0.9)),
                "sleep_pct": 100 * sum(t.sleeps) / secs,
                "slice_ms_p50": ms(pct(t.slices, 0.5)),
                "slice_ms_mean": ms(statistics.mean(t.slices)) if t.slices else None,
                "wait_ms_p50": ms(pct(t.waits, 0.5)),
                "wait_ms_p90": ms(pct(t.waits, 0.9)),
                "preempted_per_s": t.preempted / secs,
                "wakers": t.wakers,
                "wake_where": t.wake_where,
                "migrations_per_s": {k: v / secs for k, v in t.migr.items()},
            }
        )
    report["layouts"] = layouts(trace, threads, pid_vm)
    report["wakeups"] = wakeups(trace, threads, pid_vm)
    report["background"] = background(trace, threads)
    if a.schedstat:
        report["schedstat"] = schedstat(*a.schedstat, threads)
    if a.all_schedstat:
        report["other_work"] = other_work(*a.all_schedstat, set(int(p) for p in vms.values()))
    if a.sched_debug:
        report["groups"] = sched_debug(a.sched_debug, vms)
    if out_json:
        json.dump(report, open(out_json, "w"), indent=1)
    print_report(report)


def ms(x):
    return None if x is None else 1000 * x


TGID = {}


def ensure(threads, tid, comm, pid_vm):
    if tid in threads:
        return
    # A thread belongs to a VM when its tid is the VM's pid or it was named
    # by QEMU (debug-threads=on: "CPU n/TCG"); the process is found through /proc.
    vm = pid_vm.get(tid, pid_vm.get(TGID.get(tid)))
    if vm is None:
        try:
            tgid = int(
                [x for x in open(f"/proc/{tid}/status") if x.startswith("Tgid:")][0].split()[1]
            )
            vm = pid_vm.get(tgid)
        except (OSError, IndexError, ValueError):
            vm = None
    threads[tid] = Thread(vm, tid, comm)


def names_of(threads, pid_vm):
    """Waker names: a VM's main loop, a vCPU thread, or other work."""
    out = {}
    for t in threads.values():
        if t.vm is None:
            continue
        if t.tid in pid_vm:
            out[t.comm] = "main-loop"
        elif "/TCG" in t.comm or "/KVM" in t.comm:
            out[t.comm] = "vcpu"
    return out


def wakeups(trace, threads, pid_vm):
    """Each wake-up of a VM thread, by who woke it (a hard interrupt: its
    timer; a thread of its own VM: a kick; anything else) and whether the
    waker ran on the thread's previous CPU: how long until it ran (per
    what ran on its CPU at the wake-up) and whether it moved."""
    vm = {t.tid: t.vm for t in threads.values() if t.vm is not None}
    mains = {t.tid for t in threads.values() if t.vm is not None and t.tid in pid_vm}
    cur, last_cpu, waking, waiting, out = {}, {}, {}, {}, {}
    for line in open(trace, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        ts, ev, rest, cpu = float(m["ts"]), m["ev"], m["rest"], int(m["cpu"])
        if ev == "sched_switch":
            s = SWITCH.match(rest)
            if not s:
                continue
            nxt = int(s["np"])
            cur[cpu] = nxt
            last_cpu[int(s["pp"])] = last_cpu[nxt] = cpu
            if nxt in waiting:
                key, t0 = waiting.pop(nxt)
                out[key]["wait"].append(ts - t0)
        elif ev == "sched_waking":
            w = WAKE.match(rest)
            p = w and int(w["p"])
            if p in vm:
                waker = int(m["pid"])
                kind = "timer" if "h" in m["flags"][2:3] else "kick" if vm.get(waker) == vm[p] else "other"
                waking[p] = (kind, cpu == last_cpu.get(p), last_cpu.get(p))
        elif ev == "sched_wakeup":
            w = WAKE.match(rest)
            p = w and int(w["p"])
            if p in waking:
                kind, same, prev = waking.pop(p)
                target = int(w["t"])
                running = cur.get(target)
                what = "idle" if not running else "own VM" if vm.get(running) == vm[p] else "other VM" if running in vm else "other work"
                key = f"{'main loop' if p in mains else 'vCPU'} / {kind} from {'its' if same else 'another'} CPU / {what} running"
                o = out.setdefault(key, {"n": 0, "moved": 0, "wait": []})
                o["n"] += 1
                o["moved"] += prev is not None and target != prev
                waiting[p] = (key, ts)
    return {
        k: {"n": v["n"], "moved": v["moved"], "wait_ms_mean": ms(statistics.mean(v["wait"])) if v["wait"] else None,
            "wait_ms_p50": ms(pct(v["wait"], 0.5)), "wait_ms_p90": ms(pct(v["wait"], 0.9))}
        for k, v in sorted(out.items())
    }


def background(trace, threads):
    """Other work per CPU, as the load balancer sees it: how many threads
    outside the VMs are runnable there (running or queued; the idle task
    left out) on average, how much of the CPU they run, and both split by
    how many of the VMs' threads sit on that CPU at the moment (a CPU
    holding the lone vCPU against one holding three). The mean runnable
    count is root-level load in nice-0 threads (PELT's load_avg / 1024 of a
    nice-0 thread alone in its autogroup). This kernel's trace loses some
    switches (out of the idle task, out of init's threads): a thread seen
    running is dropped when its CPU's lines name another, so the split is
    indicative; --all-schedstat gives exact totals."""
    vmt = {t.tid for t in threads.values() if t.vm is not None}
    vcpus = {t.tid for t in threads.values() if t.vm is not None and ("/TCG" in t.comm or "/KVM" in t.comm)}
    where = {}  # thread -> CPU it is runnable on (absent: sleeping)
    vcpu_cpu = {}
    cur = {}
    comm = {}
    per_cpu, by_comm = {}, {}
    t_prev = None

    def acc(ts):
        if t_prev is None:
            return
        dt = ts - t_prev
        counts = {}
        for tid, c in where.items():
            if tid not in vmt:
                counts[c] = counts.get(c, 0) + 1
                name = re.sub(r"\d+", "N", comm.get(tid, "?"))
                by_comm[name] = by_comm.get(name, 0.0) + dt
        nv = {}
        for c in vcpu_cpu.values():
            nv[c] = nv.get(c, 0) + 1
        for c in set(list(cur) + list(counts)):
            pc = per_cpu.setdefault(c, {"runnable": 0.0, "running": 0.0, "by_vcpus": {}})
            n = counts.get(c, 0)
            run = dt if cur.get(c) not in (None, 0) and cur.get(c) not in vmt else 0.0
            pc["runnable"] += n * dt
            pc["running"] += run
            k = pc["by_vcpus"].setdefault(nv.get(c, 0), [0.0, 0.0, 0.0])
            k[0] += dt
            k[1] += n * dt
            k[2] += run

    for line in open(trace, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        ts, ev, rest, cpu = float(m["ts"]), m["ev"], m["rest"], int(m["cpu"])
        acc(ts)
        t_prev = ts
        # Every line names the thread running on its CPU: a switch the
        # trace lost shows as another thread there (assumed gone to sleep).
        ctx = int(m["pid"])
        if cur.get(cpu, ctx) != ctx:
            old = cur[cpu]
            if where.get(old) == cpu:
                where.pop(old)
        cur[cpu] = ctx
        if ctx != 0:
            where[ctx] = cpu
        if ev == "sched_switch":
            s = SWITCH.match(rest)
            if not s:
                continue
            pp, np_ = int(s["pp"]), int(s["np"])
            comm[pp], comm[np_] = s["pc"], s["nc"]
            if pp != 0:
                if s["st"].startswith("R"):
                    where[pp] = cpu
                else:
                    where.pop(pp, None)
            if np_ != 0:
                where[np_] = cpu
            cur[cpu] = np_
            for p in (pp, np_):
                if p in vcpus and p in where:
                    vcpu_cpu[p] = where[p]
        elif ev == "sched_wakeup":
            w = WAKE.match(rest)
            if w:
                p = int(w["p"])
                comm[p] = w["c"]
                where[p] = int(w["t"])
                if p in vcpus:
                    vcpu_cpu[p] = int(w["t"])
        elif ev == "sched_migrate_task":
            g = MIGRATE.match(rest)
            if g:
                p = int(g["p"])
                if p in where:
                    where[p] = int(g["d"])
                if p in vcpus:
                    vcpu_cpu[p] = int(g["d"])
    out = {"cpus": {}, "top": []}
    # Every CPU's time adds up to the window: its split by vCPU count sums to it.
    secs = sum(v[0] for pc in per_cpu.values() for v in pc["by_vcpus"].values()) / max(len(per_cpu), 1) or 1.0
    for c, pc in sorted(per_cpu.items()):
        out["cpus"][c] = {
            "runnable_mean": pc["runnable"] / secs,
            "running_pct": 100 * pc["running"] / secs,
            "by_vcpus": {
                n: {"time_pct": 100 * v[0] / secs, "runnable_mean": v[1] / v[0] if v[0] else None,
                    "running_pct": 100 * v[2] / v[0] if v[0] else None}
                for n, v in sorted(pc["by_vcpus"].items())
            },
        }
    out["top"] = [{"comm": k, "runnable_mean": v / secs} for k, v in sorted(by_comm.items(), key=lambda kv: -kv[1])[:8]]
    return out


# sched_prio_to_weight for nice -20..19 (nice 0 weighs 1024).
NICE_WEIGHT = [88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904, 3906,
               3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45,
               36, 29, 23, 18, 15]


def other_work(start, end, vm_pids):
    """Threads outside the VMs from every thread's schedstat at both ends:
    how much they ran and were runnable (run + wait) over the window, and
    that runnable share weighted by nice (sched_prio_to_weight / 1024): the
    load they put at the root of the CPU hierarchy, in nice-0 threads (an
    upper bound for threads in an autogroup, whose entity splits 1024)."""
    def read(path):
        lines = [x for x in open(path).read().split("\n") if x.strip()]
        # The scan's clock: the middle of its first and last line.
        t, rows = (float(lines[0]) + float(lines[-1])) / 2, {}
        for line in lines[1:-1]:
            f = line.split(None, 6)
            if len(f) == 7:
                rows[int(f[1])] = (int(f[0]), int(f[2]), int(f[3]), int(f[4]), int(f[5]), f[6])
        return t, rows
    t0, a = read(start)
    t1, b = read(end)
    secs = t1 - t0
    out = {"secs": secs, "run_pct": 0.0, "runnable": 0.0, "load": 0.0, "top": []}
    rows = []
    for tid, (pid, nice, run, wait, slices, comm) in b.items():
        if pid in vm_pids or tid not in a:
            continue
        dr, dw, ds = (run - a[tid][2]) / 1e9, (wait - a[tid][3]) / 1e9, slices - a[tid][4]
        d = (dr + dw) / secs
        w = NICE_WEIGHT[max(-20, min(19, nice)) + 20] / 1024
        out["run_pct"] += 100 * dr / secs
        out["runnable"] += d
        out["load"] += d * w
        rows.append((d * w, d, nice, pid, tid, comm, ds / secs, 1e6 * dr / ds if ds else None, 1e3 * dw / ds if ds else None))
    rows.sort(key=lambda r: -r[0])
    out["top"] = [{"load": r[0], "runnable": r[1], "nice": r[2], "pid": r[3], "tid": r[4], "comm": r[5],
                   "runs_per_s": r[6], "run_us": r[7], "wait_ms": r[8]} for r in rows[:10]]
    return out


def layouts(trace, threads, pid_vm):
    """How long the vCPU threads keep one placement (CPU of each vCPU)."""
    vcpus = sorted(
        (t for t in threads.values() if t.vm is not None and "/TCG" in t.comm),
        key=lambda t: (t.vm, t.tid),
    )
    ids = {t.tid: i for i, t in enumerate(vcpus)}
    where = [None] * len(vcpus)
    cur, since, dwell, share = None, None, [], {}
    last = None
    for line in open(trace, errors="replace"):
        m = LINE.match(line)
        if not m:
            continue
        ts, ev, rest = float(m["ts"]), m["ev"], m["rest"]
        last = ts
        tid = cpu = None
        if ev == "sched_switch":
            s = SWITCH.match(rest)
            if s and int(s["np"]) in ids:
                tid, cpu = int(s["np"]), int(m["cpu"])
        elif ev == "sched_migrate_task":
            g = MIGRATE.match(rest)
            if g and int(g["p"]) in ids:
                tid, cpu = int(g["p"]), int(g["d"])
        elif ev == "sched_wakeup":
            w = WAKE.match(rest)
            if w and int(w["p"]) in ids:
                tid, cpu = int(w["p"]), int(w["t"])
        if tid is None:
            continue
        where[ids[tid]] = cpu
        if None in where:
            continue
        key = "".join(str(c) for c in where)
        if key != cur:
            if cur is not None:
                dwell.append(ts - since)
                share[cur] = share.get(cur, 0.0) + ts - since
            cur, since = key, ts
    if cur is not None and last is not None:
        dwell.append(last - since)
        share[cur] = share.get(cur, 0.0) + last - since
    total = sum(share.values()) or 1.0
    return {
        "vcpus": [f"{t.vm}:{t.comm}" for t in vcpus],
        "changes": max(len(dwell) - 1, 0),
        "dwell_ms_p50": ms(pct(dwell, 0.5)),
        "dwell_ms_p90": ms(pct(dwell, 0.9)),
        "share_pct": {k: 100 * v / total for k, v in sorted(share.items(), key=lambda kv: -kv[1])},
    }


def schedstat(start, end, threads):
    """Run and wait share per thread from schedstat read at both ends (each
    file: the time, then "pid tid run_ns wait_ns slices" per thread)."""
    def read(path):
        lines = open(path).read().split("\n")
        out = {}
        for line in lines[1:]:
            if line.strip():
                pid, tid, run, wait, _ = line.split()
                out[int(tid)] = (int(run), int(wait))
        return float(lines[0]), out
    (t0, a), (t1, b) = read(start), read(end)
    secs = t1 - t0
    out = []
    for tid, (r1, w1) in sorted(b.items()):
        t = threads.get(tid)
        if tid not in a or t is None or t.vm is None:
            continue
        r0, w0 = a[tid]
        out.append({"vm": t.vm, "comm": t.comm, "run_pct": (r1 - r0) / 1e7 / secs, "wait_pct": (w1 - w0) / 1e7 / secs})
    return out


def sched_debug(path, vms):
    """The kernel's split of each VM group's weight over the CPUs, sampled.

    Per sample and CPU: the group's queued threads there (h_nr_queued), its
    cfs_rq load_avg, tg_load_avg and contribution, and its entity's weight
    (se->load.weight, in cpu.shares units). calc_group_shares gives the weight
    from those numbers; the summary shows how often the kernel's weight for a
    CPU is far from the split by threads queued now (PELT lag)."""
    samples, cur, cpu, path_now = [], None, None, None
    for line in open(path):
        line = line.rstrip()
        if line.startswith("@ "):
            cur = {"t": float(line[2:]), "cpus": {}}
            samples.append(cur)
        elif line.startswith("cpu#"):
            cpu = int(line[4:].split(",")[0])
            cur["cpus"].setdefault(cpu, {"groups": {}})
        elif line.startswith("cfs_rq["):
            c, path_now = line[7:].split("]:", 1)
            cur["cpus"].setdefault(int(c), {"groups": {}})["groups"].setdefault(path_now, {})
            cpu = int(c)
        elif line.strip().startswith(".") and cur is not None and cpu is not None:
            k, _, v = line.strip()[1:].partition(":")
            try:
                val = float(v)
            except ValueError:
                continue
            k = k.strip()
            if path_now is not None and path_now in cur["cpus"][cpu]["groups"]:
                cur["cpus"][cpu]["groups"][path_now][k] = val
            elif k == "nr_running":
                cur["cpus"][cpu]["nr_running"] = val
    # Group of each VM: the cfs_rq path whose last component is the VM's name, or the shared one.
    names = {}
    for s in samples:
        for c in s["cpus"].values():
            for g in c["groups"]:
                last = g.rsplit("/", 1)[-1]
                for vm in vms:
                    if last.endswith(vm) or last == "tv" + vm:
                        names[g] = vm
                if "shared" in last:
                    names[g] = "shared"
    out = {}
    for g, vm in names.items():
        weights, sums, lag, queued_split = [], [], [], {}
        for s in samples:
            per = {c: v["groups"].get(g) for c, v in s["cpus"].items()}
            per = {c: x for c, x in per.items() if x and "se->load.weight" in x}
            if not per:
                continue
            tot_q = sum(x.get("h_nr_queued", 0) for x in per.values())
            wsum = 0.0
            for c, x in per.items():
                w = x["se->load.weight"] / 1024 / 1024
                wsum += w
                weights.append(w)
                if tot_q > 0:
                    lag.append(abs(w / max(sum(y["se->load.weight"] for y in per.values()) / 1024 / 1024, 1e-9) - x.get("h_nr_queued", 0) / tot_q))
            key = "+".join(str(int(per[c].get("h_nr_queued", 0))) if c in per else "0" for c in sorted(s["cpus"]))
            queued_split[key] = queued_split.get(key, 0) + 1
            sums.append(wsum)
        if not sums:
            continue
        out[vm] = {
            "path": g,
            "samples": len(sums),
            "weight_sum_mean": statistics.mean(sums),
            "weight_sum_p10": pct(sums, 0.1),
            "weight_sum_p90": pct(sums, 0.9),
            "share_vs_queued_mean_abs": statistics.mean(lag) if lag else None,
            "queued_split_pct": {k: 100 * v / len(sums) for k, v in sorted(queued_split.items(), key=lambda kv: -kv[1])},
        }
    return out


def print_report(r):
    print(f"trace of {r['secs']:.1f} s")
    print(
        "| thread | run % | wait % | sleeps/s | sleep ms p50/p90 | slice ms p50 | wait ms p50/p90 | "
        "preempted/s | woken by | wakes on prev/waker/other CPU | migrations/s wakeup/balance/active/other |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    f = lambda x: "-" if x is None else f"{x:.2f}"
    for t in r["threads"]:
        if t["run_pct"] < 0.05 and t["sleeps_per_s"] < 0.5:
            continue
        wk = ", ".join(f"{k} {v / r['secs']:.0f}/s" for k, v in sorted(t["wakers"].items(), key=lambda kv: -kv[1]))
        ww = t["wake_where"]
        mg = t["migrations_per_s"]
        print(
            f"| {t['vm']} {t['comm']} | {t['run_pct']:.1f} | {t['wait_pct']:.1f} | {t['sleeps_per_s']:.1f} | "
            f"{f(t['sleep_ms_p50'])}/{f(t['sleep_ms_p90'])} | {f(t['slice_ms_p50'])} | "
            f"{f(t['wait_ms_p50'])}/{f(t['wait_ms_p90'])} | {t['preempted_per_s']:.1f} | {wk} | "
            f"{ww['prev']}/{ww['waker']}/{ww['other']} | "
            f"{mg['wakeup']:.2f}/{mg['balance']:.2f}/{mg['active']:.2f}/{mg['other']:.2f} |"
        )
    lay = r["layouts"]
    print()
    print(
        f"vCPU layouts ({', '.join(lay['vcpus'])}; digit = CPU): {lay['changes']} changes, "
        f"dwell p50 {f(lay['dwell_ms_p50'])} ms, p90 {f(lay['dwell_ms_p90'])} ms; time share: "
        + ", ".join(f"{k} {v:.1f}%" for k, v in list(lay["share_pct"].items())[:8])
    )
    print()
    print("| wake-up (thread / waker / what ran there) | count | moved | wait ms mean | p50 | p90 |")
    print("|---|---|---|---|---|---|")
    for k, v in r["wakeups"].items():
        print(f"| {k} | {v['n']} | {v['moved']} | {f(v['wait_ms_mean'])} | {f(v['wait_ms_p50'])} | {f(v['wait_ms_p90'])} |")
    bg = r.get("background")
    if bg and bg["cpus"]:
        print()
        print("Other work (threads outside the VMs) per CPU: runnable threads on average (root-level load in nice-0 threads) "
              "and % of the CPU it ran; by how many VM vCPU threads sat on that CPU at the time (share of the window):")
        for c, v in bg["cpus"].items():
            parts = ", ".join(
                f"{n} vCPUs ({x['time_pct']:.0f}% of time): {x['runnable_mean']:.2f} runnable, ran {x['running_pct']:.1f}%"
                for n, x in v["by_vcpus"].items() if x["runnable_mean"] is not None)
            print(f"- cpu{c}: {v['runnable_mean']:.2f} runnable, ran {v['running_pct']:.1f}%; {parts}")
        print("- most runnable: " + ", ".join(f"{t['comm']} {t['runnable_mean']:.3f}" for t in bg["top"]))
    ow = r.get("other_work")
    if ow:
        print()
        print(f"Other work from every thread's schedstat over {ow['secs']:.1f} s: ran {ow['run_pct']:.1f} % of a CPU, "
              f"runnable {ow['runnable']:.3f} threads on average, load {ow['load']:.3f} nice-0 threads (weighted by nice); most: "
              + ", ".join(f"{t['comm']} ({t['pid']}/{t['tid']}, nice {t['nice']}) {t['load']:.3f}" for t in ow["top"][:6]))
        print("| other thread | nice | load | runnable | runs/s | run us per run | wait ms per run |")
        print("|---|---|---|---|---|---|---|")
        f1 = lambda x: "-" if x is None else f"{x:.2f}"
        for t in ow["top"]:
            print(f"| {t['comm']} ({t['tid']}) | {t['nice']} | {t['load']:.3f} | {t['runnable']:.3f} | {t['runs_per_s']:.1f} | "
                  f"{f1(t['run_us'])} | {f1(t['wait_ms'])} |")
    if "schedstat" in r:
        print()
        print("schedstat over the window (run % / wait %): " + ", ".join(
            f"{t['vm']} {t['comm']} {t['run_pct']:.1f}/{t['wait_pct']:.1f}" for t in r["schedstat"]
            if t["run_pct"] + t["wait_pct"] > 0.5))
    if r.get("groups"):
        print()
        print("| group | samples | entity weights summed over CPUs (cpu.shares units, mean p10-p90) | "
              "mean abs(weight share - queued share) | queued threads per CPU (cpu0+cpu1: % of samples) |")
        print("|---|---|---|---|---|")
        for vm, g in sorted(r["groups"].items()):
            qs = ", ".join(f"{k}: {v:.0f}%" for k, v in list(g["queued_split_pct"].items())[:6])
            lag = g["share_vs_queued_mean_abs"]
            print(f"| {vm} ({g['path']}) | {g['samples']} | {g['weight_sum_mean']:.2f} ({g['weight_sum_p10']:.2f}-{g['weight_sum_p90']:.2f}) | "
                  f"{'-' if lag is None else f'{lag:.2f}'} | {qs} |")


if __name__ == "__main__":
    main()
