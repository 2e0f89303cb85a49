#!/usr/bin/env python3
"""Checks `stealscope host --json` against an independent reading of the same window.

Reads every vCPU thread's /proc/<pid>/task/<tid>/schedstat and CLOCK_MONOTONIC right
before and after each `host --json --interval 20s --rate 0` run, and prints both
run/wait percentages side by side. This found the read-order bug of 2026-11-26 (a VM's
cmdline/numa_maps read between the clock and its thread times); BENCHMARKS.md, issue 6,
Session 5.

    scripts/check-host-window.py PID[,PID...] [WINDOWS] [BIN]
"""
import json
import os
import subprocess
import sys
import time

pids = sys.argv[1].split(",")
windows = int(sys.argv[2]) if len(sys.argv) > 2 else 6
binary = sys.argv[3] if len(sys.argv) > 3 else "target/release/stealscope"


def vcpu_threads():
    out = {}
    for p in pids:
        for t in os.listdir(f"/proc/{p}/task"):
            comm = open(f"/proc/{p}/task/{t}/comm").read().strip()
            if comm.startswith("CPU "):
                out[(p, t)] = f"{comm}@{p}"
    return out


def reading(threads):
    r = {"mono": time.monotonic()}
    for p, t in threads:
        run, wait = open(f"/proc/{p}/task/{t}/schedstat").read().split()[:2]
        r[(p, t)] = (int(run), int(wait))
    return r


threads = vcpu_threads()
for _ in range(windows):
    a = reading(threads)
    h = subprocess.run([binary, "host", "--json", "--interval", "20s", "--rate", "0"],
                       capture_output=True, text=True, check=True)
    b = reading(threads)
    win = b["mono"] - a["mono"]
    pct = lambda k, i: round((b[k][i] - a[k][i]) / 1e9 / win * 100, 1)
    j = json.loads(h.stdout)
    print(f"host took {win:.1f} s, its interval {j['interval_s']:.2f} s")
    print("  independent run/wait %:", [(threads[k], pct(k, 0), pct(k, 1)) for k in threads])
    print("  host --json run/wait %:",
          [(round(v["util_pct"], 1), round(v["host_steal_pct"], 1))
           for vm in j["vms"] if str(vm["pid"]) in pids for v in vm["vcpus"]])
    sys.stdout.flush()
