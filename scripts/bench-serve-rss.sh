#!/usr/bin/env bash
# Issue 29: serve's memory over a long run at 10,000 vCPU-named threads.
# bench/fakevmm.c runs as `qemu-system-x86_64 -name soakbig 10000`; the
# release `stealscope serve` is scraped once a second for SECS seconds
# (default 600) while its VmRSS and VmHWM are read each second, with the
# load average beside them so a run taken under other load can be
# rejected. Prints each minute's median RSS and the growth from the
# second minute's median to the last minute's. Root (BPF route).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-600}
PORT=${PORT:-9911}
cargo build -q --release -p stealscope
tmp=$(mktemp -d /tmp/bench-rss.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
cc -O2 -pthread -o "$tmp/qemu-system-x86_64" bench/fakevmm.c
"$tmp/qemu-system-x86_64" -name soakbig 10000 > "$tmp/fake.out" &
until grep -q ready "$tmp/fake.out"; do sleep 0.2; done
target/release/stealscope serve --listen "127.0.0.1:$PORT" > "$tmp/serve.log" 2>&1 &
pid=$!
t0=$(date +%s.%N)
for _ in $(seq 1 "$SECS"); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics"
  sleep 1
  t=$(echo "$(date +%s.%N) - $t0" | bc)
  mem=$(awk '/VmRSS/{r=$2} /VmHWM/{h=$2} END{print r, h}' "/proc/$pid/status")
  echo "$t $mem $(cut -d' ' -f1 /proc/loadavg)"
done > "$tmp/rss.txt"
python3 - "$tmp/rss.txt" <<'PY'
import statistics, sys
rows = [tuple(float(x) for x in l.split()) for l in open(sys.argv[1]) if len(l.split()) == 4]
minutes = {}
for t, rss, hwm, load in rows:
    minutes.setdefault(int(t // 60), []).append((rss, load))
med = {}
for m, v in sorted(minutes.items()):
    r = [x[0] for x in v]
    med[m] = statistics.median(r)
    print(f"minute {m}: RSS median {med[m]/1024:.1f} MiB (min {min(r)/1024:.1f}, "
          f"max {max(r)/1024:.1f}), load {min(x[1] for x in v):.2f}-{max(x[1] for x in v):.2f}, n={len(r)}")
full = [m for m, v in minutes.items() if len(v) >= 50]
if len(full) >= 3:
    print(f"growth, minute 1 to minute {full[-1]}: {(med[full[-1]] - med[1])/1024:+.1f} MiB")
print(f"VmHWM at the end: {rows[-1][2]/1024:.1f} MiB")
PY
