#!/usr/bin/env bash
# Issue 3 benchmark: `stealscope probe wakeup` against cyclictest (rt-tests) and
# stress-ng --cyclic, alternating in one run on the same CPU with the same
# interval, priority and duration. Prints a Markdown section on stdout
# (scripts/bench.sh puts it into BENCHMARKS.md); progress goes to stderr.
#
#   ROUNDS=3 DUR=10 CPU=1 scripts/bench-probes.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DUR=${DUR:-10}
CPU=${CPU:-$(($(nproc) - 1))}
INTERVAL=1000
PRIO=95

need=()
command -v cyclictest >/dev/null || need+=(rt-tests)
command -v stress-ng >/dev/null || need+=(stress-ng)
command -v jq >/dev/null || need+=(jq)
if ((${#need[@]})); then
  echo "== installing ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [[ $(id -u) != 0 ]]; then
  echo "bench-probes.sh: needs root (SCHED_FIFO, mlock) for a fair comparison" >&2
  exit 2
fi

# One probe benchmark or probe test run at a time on this machine (the
# tests in crates/cli/tests/probes.rs take the same lock).
exec 9>"${TMPDIR:-/tmp}/stealscope-probe-tests.lock"
flock 9

cargo build --release --quiet -p stealscope >&2
BIN=${CARGO_TARGET_DIR:-target}/release/stealscope
tmp=$(mktemp -d)
# CPU time of each run: cgroup v1 cpuacct.usage (ns, from the scheduler's
# exact runtime) of a private group when there is one; else bash `time`,
# whose user/sys are sampled at the 250 Hz tick (+-10% on these runs).
CG=""
if [[ -d /sys/fs/cgroup/cpuacct ]] && mkdir "/sys/fs/cgroup/cpuacct/stealscope-bench-$$" 2>/dev/null; then
  CG=/sys/fs/cgroup/cpuacct/stealscope-bench-$$
  CPU_HOW="cpuacct.usage of a private cgroup (exact scheduler runtime of the process and its children)"
else
  CPU_HOW="user+system from bash \`time\` (tick-sampled)"
fi
cleanup() {
  rm -rf "$tmp"
  [[ -z $CG ]] || rmdir "$CG" "$CG-cyclictest" 2>/dev/null || true
}
trap cleanup EXIT

# busy and total ticks of $CPU in /proc/stat.
cpu_ticks() {
  awk -v c="cpu$CPU" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}

# Runs "$@" with stdout to $tmp/out, stderr to $tmp/err; prints its CPU
# seconds (with its children) and how busy $CPU was meanwhile (%: other
# work on it means no idle exit before a wake-up, which lowers latency for
# whichever tool is running).
timed() {
  local t0 t1 cpu_s
  t0=$(cpu_ticks)
  if [[ -n $CG ]]; then
    local before after
    before=$(cat "$CG/cpuacct.usage")
    sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG" "$@" >"$tmp/out" 2>"$tmp/err"
    after=$(cat "$CG/cpuacct.usage")
    cpu_s=$(awk -v a="$before" -v b="$after" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')
  else
    local TIMEFORMAT='%U %S'
    { time "$@" >"$tmp/out" 2>"$tmp/err"; } 2>"$tmp/time"
    cpu_s=$(awk '{ printf "%.6f", $1 + $2 }' "$tmp/time")
  fi
  t1=$(cpu_ticks)
  echo "$cpu_s $t0 $t1" | awk '{ d = $5 - $3; printf "%s %.0f\n", $1, (d > 0 ? 100 * ($4 - $2) / d : 0) }'
}

# cyclictest -h histogram (1 µs bins) -> "samples p50 p99 max" (µs).
cyclic_stats() {
  awk '
    /^# Total:/ { total = $3 + 0 }
    /^# Max Latencies:/ { max = $4 + 0 }
    /^# Histogram Overflows:/ { over = $4 + 0 }
    /^[0-9]+ +[0-9]+$/ { n++; bin[n] = $1 + 0; cnt[n] = $2 + 0 }
    END {
      if (total == 0) { print "0 0 0 0"; exit }
      c = 0; p50 = -1; p99 = -1
      for (i = 1; i <= n; i++) {
        c += cnt[i]
        if (p50 < 0 && c >= 0.50 * total) p50 = bin[i]
        if (p99 < 0 && c >= 0.99 * total) p99 = bin[i]
      }
      # Samples past the histogram range count as its top.
      if (p99 < 0) p99 = max
      if (p50 < 0) p50 = max
      print total, p50, p99, max
    }' "$1"
}

# stress-ng --cyclic log -> "samples p50 p99 max" (µs).
stressng_stats() {
  awk '
    /cyclic: sched .* samples/ { for (i = 1; i <= NF; i++) if ($(i+1) == "samples") s = $i }
    / max: [0-9]+ ns/ { for (i = 1; i <= NF; i++) if ($i == "max:") m = $(i+1) }
    /cyclic: +50.00%:/ { p50 = $(NF-1) }
    /cyclic: +99.00%:/ { p99 = $(NF-1) }
    END { printf "%d %.1f %.1f %.1f\n", s, p50 / 1000, p99 / 1000, m / 1000 }' "$1"
}

rows="$tmp/rows"
: >"$rows"
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS" >&2

  t=$(timed "$BIN" probe wakeup --cpus "$CPU" --interval-us "$INTERVAL" --priority "$PRIO" \
    --duration "${DUR}s" --json)
  s=$(jq -r '.cpus[0] | "\(.samples) \(.p50_us) \(.p99_us) \(.max_us)"' "$tmp/out")
  echo "$r stealscope $s $t" >>"$rows"

  # --laptop: cyclictest would otherwise hold /dev/cpu_dma_latency at 0, which
  # neither of the others does here (that comparison is the second table).
  t=$(timed cyclictest -m -q -p"$PRIO" -i"$INTERVAL" -D"$DUR" -a"$CPU" -t1 -h20000 --laptop)
  echo "$r cyclictest $(cyclic_stats "$tmp/out") $t" >>"$rows"

  t=$(timed stress-ng --cyclic 1 --cyclic-method clock_ns --cyclic-policy fifo \
    --cyclic-prio "$PRIO" --cyclic-sleep $((INTERVAL * 1000)) --taskset "$CPU" -t "${DUR}s")
  cp "$tmp/err" "$tmp/stressng.log"
  cat "$tmp/out" >>"$tmp/stressng.log"
  echo "$r stress-ng $(stressng_stats "$tmp/stressng.log") $t" >>"$rows"

  # With PM QoS held at 0 µs: ours vs cyclictest's default.
  t=$(timed "$BIN" probe wakeup --cpus "$CPU" --interval-us "$INTERVAL" --priority "$PRIO" \
    --duration "${DUR}s" --pm-qos-us 0 --json)
  s=$(jq -r '.cpus[0] | "\(.samples) \(.p50_us) \(.p99_us) \(.max_us)"' "$tmp/out")
  echo "$r stealscope+qos0 $s $t" >>"$rows"
  t=$(timed cyclictest -m -q -p"$PRIO" -i"$INTERVAL" -D"$DUR" -a"$CPU" -t1 -h20000)
  echo "$r cyclictest+qos0 $(cyclic_stats "$tmp/out") $t" >>"$rows"
done

# CPU overhead measured at the same time: both tools run together on $CPU,
# each in its own cgroup, so they share whatever the machine does meanwhile
# (sequential runs differ by +-30% in CPU time with the host's noise, since
# the wake-up path is most of it). Their deadlines meet only when the random
# phases line up (~2% of wake-ups), symmetrically.
conc="$tmp/conc"
: >"$conc"
if [[ -n $CG ]] && mkdir "$CG-cyclictest" 2>/dev/null; then
  for r in $(seq 1 "$ROUNDS"); do
    echo "== concurrent round $r/$ROUNDS" >&2
    a0=$(cat "$CG/cpuacct.usage")
    b0=$(cat "$CG-cyclictest/cpuacct.usage")
    sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG" \
      "$BIN" probe wakeup --cpus "$CPU" --interval-us "$INTERVAL" --priority "$PRIO" \
      --duration "${DUR}s" --json >"$tmp/conc-ours" 2>/dev/null &
    sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG-cyclictest" \
      cyclictest -m -q -p"$PRIO" -i"$INTERVAL" -D"$DUR" -a"$CPU" -t1 -h20000 --laptop \
      >"$tmp/conc-ct" 2>/dev/null &
    wait
    a1=$(cat "$CG/cpuacct.usage")
    b1=$(cat "$CG-cyclictest/cpuacct.usage")
    s=$(jq -r '.cpus[0] | "\(.samples) \(.p50_us) \(.p99_us) \(.max_us)"' "$tmp/conc-ours")
    echo "$r stealscope $s $(awk -v a="$a0" -v b="$a1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }') 0" >>"$conc"
    echo "$r cyclictest $(cyclic_stats "$tmp/conc-ct") $(awk -v a="$b0" -v b="$b1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }') 0" >>"$conc"
  done
fi

# Read to the end (no early exit): a closed pipe would fail the pipeline.
ver_ct=$(cyclictest --help 2>&1 | awk '/cyclictest V/ && !v {v = $3} END {print v}')
ver_sn=$(stress-ng --version 2>&1 | awk 'NR == 1 {v = $3} END {print v}')

table() { # $1 = regex of tools, $2 = rows file (default: the sequential runs)
  local rows=${2:-$rows}
  echo "| round | tool | samples | p50 µs | p99 µs | max µs | CPU ms | CPU $CPU busy % |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -v re="$1" '$2 ~ re {
      printf "| %s | %s | %d | %.1f | %.1f | %.1f | %.0f | %d |\n", $1, $2, $3, $4, $5, $6, $7 * 1000, $8 }' "$rows"
  # Medians over rounds per tool.
  # shellcheck disable=SC2013 # tool names are single words
  for tool in $(awk -v re="$1" '$2 ~ re {print $2}' "$rows" | awk '!seen[$0]++'); do
    awk -v t="$tool" '$2 == t' "$rows" | awk '
      { n++; p50[n] = $4; p99[n] = $5; mx[n] = $6; cpu[n] = $7 * 1000; s[n] = $3 }
      function med(a,   i, j, x, b) { for (i = 1; i <= n; i++) b[i] = a[i]
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { x = b[i]; b[i] = b[j]; b[j] = x }
        return b[int((n + 1) / 2)] }
      END { printf "| **median** | **%s** | %d | **%.1f** | **%.1f** | %.1f | **%.0f** | |\n",
            "'"$tool"'", med(s), med(p50), med(p99), med(mx), med(cpu) }'
  done
}

med_of() { # tool column -> median
  awk -v t="$1" -v c="$2" '$2 == t {print (c == "cpu") ? $7 * 1000 : $c}' "$rows" |
    sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'
}

ours50=$(med_of stealscope 4); ct50=$(med_of cyclictest 4)
ours99=$(med_of stealscope 5); ct99=$(med_of cyclictest 5)
oursc=$(med_of stealscope cpu); ctc=$(med_of cyclictest cpu)
q50=$(med_of stealscope+qos0 4); cq50=$(med_of cyclictest+qos0 4)
q99=$(med_of stealscope+qos0 5); cq99=$(med_of cyclictest+qos0 5)
# Median over rounds of the per-round difference a vs b (same round = same
# machine state), for column c.
paired() {
  local rows=${4:-$rows}
  awk -v a="$1" -v b="$2" -v c="$3" '{ v = (c == "cpu") ? $7 : $c }
    $2 == a {x[$1] = v} $2 == b {y[$1] = v}
    END { for (r in x) if (r in y && y[r] > 0) print 100 * (x[r] - y[r]) / y[r] }' "$rows" |
    sort -g | awk '{v[NR] = $1} END { if (NR) printf "%+.0f%%", v[int((NR + 1) / 2)]; else print "n/a" }'
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%+.0f%%", 100 * (a - b) / b }'; }

cat <<EOF
## Issue 3: probe wakeup vs cyclictest and stress-ng

Command: \`ROUNDS=$ROUNDS DUR=$DUR CPU=$CPU scripts/bench-probes.sh\` on $(date -u +%Y-%m-%d): the three
tools alternate within each round, each for ${DUR} s on CPU $CPU, interval ${INTERVAL} µs,
SCHED_FIFO $PRIO, memory locked, absolute-deadline \`clock_nanosleep\` on CLOCK_MONOTONIC:

- \`stealscope probe wakeup --cpus $CPU --interval-us $INTERVAL --priority $PRIO --duration ${DUR}s --json\`
- \`cyclictest -m -q -p$PRIO -i$INTERVAL -D$DUR -a$CPU -t1 -h20000 --laptop\` (rt-tests $ver_ct; \`--laptop\`
  so that it does not hold /dev/cpu_dma_latency at 0 µs, which the others do not do either)
- \`stress-ng --cyclic 1 --cyclic-method clock_ns --cyclic-policy fifo --cyclic-prio $PRIO
  --cyclic-sleep $((INTERVAL * 1000)) --taskset $CPU -t ${DUR}s\` (stress-ng $ver_sn; keeps at most
  10000 samples and does not lock memory)

CPU = CPU time of the whole process (start-up, report and all): $CPU_HOW.

$(table '^(stealscope|cyclictest|stress-ng)$')

Medians: p50 $ours50 vs $ct50 µs ($(pct "$ours50" "$ct50") against cyclictest), p99 $ours99 vs $ct99 µs
($(pct "$ours99" "$ct99")); CPU $oursc vs $ctc ms ($(pct "$oursc" "$ctc")). Paired by round (the tools
run back to back, so a round shares the machine's state): median per-round difference p50
$(paired stealscope cyclictest 4), p99 $(paired stealscope cyclictest 5), CPU $(paired stealscope cyclictest cpu).

With a PM QoS limit of 0 µs held during the run (\`--pm-qos-us 0\`; cyclictest's default):

$(table 'qos0')

Medians: p50 $q50 vs $cq50 µs ($(pct "$q50" "$cq50")), p99 $q99 vs $cq99 µs ($(pct "$q99" "$cq99")).
Paired by round: p50 $(paired stealscope+qos0 cyclictest+qos0 4), p99 $(paired stealscope+qos0 cyclictest+qos0 5), CPU $(paired stealscope+qos0 cyclictest+qos0 cpu).
EOF
if [[ -s $conc ]]; then
  cat <<EOF

CPU overhead with both running at the same time on CPU $CPU (same flags as the first table; the
busy column does not apply):

$(table '^(stealscope|cyclictest)$' "$conc")

Paired by round: CPU $(paired stealscope cyclictest cpu "$conc"), p50 $(paired stealscope cyclictest 4 "$conc"), p99 $(paired stealscope cyclictest 5 "$conc").
EOF
fi
cat <<'EOF'

How to read these figures: on this shared 2-vCPU KVM guest the host's noise moves p99 and max
by several times between consecutive 10 s runs of the same tool, so compare the medians and
the paired per-round differences, not single rows. CPU time is mostly the kernel's wake-up path
(timer, idle exit, VM exits), which is why it follows latency from run to run; other work on the
CPU (the busy column) spares the idle exit and lowers both for whichever tool is running. In the
concurrent table the two tools' deadlines keep one fixed phase for a whole round, so in a given
round one of them can pay for the other's wake-up; the paired median over rounds evens that out.
EOF

