#!/usr/bin/env python3
"""`stealscope record --rate 100` side by side with its floor, the C loop of
the same reads (scripts/sample_floor.c), both started together for SECS
seconds; CPU of each from wait4's rusage (utime + stime). Validity per run:
the machine's busy share and steal over the run (/proc/stat), printed beside
each pair; a run with the machine over --max-busy is marked rejected, and so
is one in which `record` found a VM on this machine (another user's test VM:
the recording then holds vCPU reads and the scheduler-event collector that the
floor does not do).

  scripts/bench-record-floor.py BIN FLOOR [--secs 30] [--runs 3] [--max-busy 60]
                                [--root DIR]

--root records from DIR instead of "/" (e.g. a directory whose proc/stat and
proc/interrupts link to the live ones): the sampling loop, flushes and small
checkpoints without this machine's processes, counters or VMs.

BIN is a release `stealscope`, FLOOR the `cc -O2` build of sample_floor.c.
Prints one Markdown row per run on stdout."""
import argparse, os, struct, subprocess, tempfile, time


def saw_vms(path):
    """Whether the recording holds a vCPU table frame (kind 6): VMs found."""
    b = open(path, "rb").read()
    p = 8
    while p + 5 <= len(b):
        n, k = struct.unpack_from("<IB", b, p)
        if k == 6:
            return True
        p += 9 + n
    return False


def stat():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v), v[7]


def cpu_s(ru):
    return ru.ru_utime + ru.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("floor")
    p.add_argument("--secs", type=int, default=30)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--max-busy", type=float, default=60.0)
    p.add_argument("--root")
    a = p.parse_args()
    print("| run | record | floor | ratio | machine busy, steal | valid |")
    print("|---|---|---|---|---|---|")
    for i in range(a.runs):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "rec.ssr")
            b0, t0, s0 = stat()
            w0 = time.monotonic()
            rec = subprocess.Popen(
                [a.bin, "record", "-o", out, "--rate", "100", "--duration", f"{a.secs}s"]
                + (["--root", a.root] if a.root else []),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            flo = subprocess.Popen([a.floor, str(a.secs), "100", "1"],
                                   stdout=subprocess.DEVNULL)
            got = {}
            while len(got) < 2:
                pid, status, ru = os.wait4(-1, 0)
                got[pid] = (status, ru)
            wall = time.monotonic() - w0
            b1, t1, s1 = stat()
            vms = os.path.exists(out) and saw_vms(out)
        rs, rru = got[rec.pid]
        fs, fru = got[flo.pid]
        r, f = 100 * cpu_s(rru) / a.secs, 100 * cpu_s(fru) / a.secs
        busy = 100 * (b1 - b0) / max(t1 - t0, 1)
        steal = 100 * (s1 - s0) / max(t1 - t0, 1)
        ok = rs == 0 and fs == 0 and busy <= a.max_busy and not vms
        why = ("yes" if ok else "no: exit status" if rs or fs
               else "no: a VM ran" if vms else f"no: busy over {a.max_busy:.0f} %")
        print(f"| {a.secs} s #{i + 1} | {r:.3f} % | {f:.3f} % | {r / f:.2f} | "
              f"{busy:.0f} %, {steal:.2f} % | {why} |", flush=True)


if __name__ == "__main__":
    main()
