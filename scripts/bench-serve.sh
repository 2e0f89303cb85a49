#!/usr/bin/env bash
# Issue 7 benchmark: `stealscope serve` side by side with node_exporter on
# this machine: idle CPU (both running, nobody scraping), cost per scrape
# (back to back, and spaced so that serve encodes afresh every time), and a
# load of 100 concurrent clients for 30 s with wrk (errors, p99 latency, RSS
# growth). Prints a Markdown section on stdout (scripts/bench.sh puts it into
# BENCHMARKS.md); progress goes to stderr. Loopback only.
#
#   IDLE=60 LOAD=30 SPACED=200 scripts/bench-serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."

IDLE=${IDLE:-60}
LOAD=${LOAD:-30}
SPACED=${SPACED:-200}
CONNS=100

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
  echo "== installing ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

cargo build --release --quiet -p stealscope >&2
BIN=${CARGO_TARGET_DIR:-target}/release/stealscope
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# CPU seconds of a process, all threads, from schedstat (ns, exact).
cpu_s() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.6f", s / 1e9 }'; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' /proc/"$1"/status; }
hwm_kb() { awk '/^VmHWM:/ { print $2 }' /proc/"$1"/status; }

SPORT=$(free_port)
"$BIN" serve --listen "127.0.0.1:$SPORT" 2>"$tmp/serve.err" &
SPID=$!
pids+=("$SPID")
NPORT=$(free_port)
prometheus-node-exporter --web.listen-address="127.0.0.1:$NPORT" >/dev/null 2>&1 &
NPID=$!
pids+=("$NPID")
for port in "$SPORT" "$NPORT"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null && break; sleep 0.1; done
done
SURL="http://127.0.0.1:$SPORT/metrics"
NURL="http://127.0.0.1:$NPORT/metrics"
s_bytes=$(curl -s "$SURL" | wc -c)
n_bytes=$(curl -s "$NURL" | wc -c)
s_series=$(curl -s "$SURL" | grep -vc '^#')
n_series=$(curl -s "$NURL" | grep -vc '^#')
sleep 2

load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== idle ${IDLE} s, both running, no scrapes" >&2
s0=$(cpu_s "$SPID"); n0=$(cpu_s "$NPID")
sleep "$IDLE"
s1=$(cpu_s "$SPID"); n1=$(cpu_s "$NPID")
s_idle=$(awk -v a="$s0" -v b="$s1" -v t="$IDLE" 'BEGIN { printf "%.3f", 100 * (b - a) / t }')
n_idle=$(awk -v a="$n0" -v b="$n1" -v t="$IDLE" 'BEGIN { printf "%.3f", 100 * (b - a) / t }')
s_idle_rate=$(awk -v a="$s0" -v b="$s1" -v t="$IDLE" 'BEGIN { print (b - a) / t }')
n_idle_rate=$(awk -v a="$n0" -v b="$n1" -v t="$IDLE" 'BEGIN { print (b - a) / t }')

# Server CPU per request while wrk drives it for $2 s with $3 connections;
# the idle rate (background sampling) over the same time is subtracted.
# Prints "requests cost_us p50_ms p99_ms errors".
drive() { # pid url seconds conns threads idle_rate [wrk args...]
  local c0 c1 out
  c0=$(cpu_s "$1")
  out=$(wrk -t"$5" -c"$4" -d"$3"s --latency "${@:7}" "$2" 2>&1)
  c1=$(cpu_s "$1")
  echo "$out" >"$tmp/wrk.last"
  echo "$out" | awk -v c0="$c0" -v c1="$c1" -v t="$3" -v idle="$6" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    / 50%/ { p50 = ms($2) } / 99%/ { p99 = ms($2) }
    /requests in/ { n = $1 }
    /Non-2xx/ { err += $NF }
    /Socket errors/ { gsub(/,/, ""); err += $4 + $6 + $8 + $10 }
    END { printf "%d %.1f %.3f %.3f %d\n", n, 1e6 * ((c1 - c0) - idle * t) / (n ? n : 1), p50, p99, err }'
}

echo "== cost per scrape, back to back (1 connection, 10 s each)" >&2
read -r s_n1 s_cost1 _ _ _ <<<"$(drive "$SPID" "$SURL" 10 1 1 "$s_idle_rate")"
read -r n_n1 n_cost1 _ _ _ <<<"$(drive "$NPID" "$NURL" 10 1 1 "$n_idle_rate")"

# Spaced: one scrape every 150 ms, longer than serve's 100 ms sampling
# period, so serve's cached encoding is always stale (the case of a real
# Prometheus scraping every 15 s).
spaced() { # pid url idle_rate
  local c0 c1 t0 t1
  c0=$(cpu_s "$1"); t0=$(date +%s.%N)
  for _ in $(seq "$SPACED"); do curl -s -o /dev/null "$2"; sleep 0.15; done
  c1=$(cpu_s "$1"); t1=$(date +%s.%N)
  awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v idle="$3" -v n="$SPACED" \
    'BEGIN { printf "%.1f", 1e6 * ((c1 - c0) - idle * (t1 - t0)) / n }'
}
echo "== cost per scrape, spaced 150 ms ($SPACED scrapes each)" >&2
s_cost2=$(spaced "$SPID" "$SURL" "$s_idle_rate")
n_cost2=$(spaced "$NPID" "$NURL" "$n_idle_rate")

echo "== load: $CONNS connections, ${LOAD} s each" >&2
s_rss0=$(rss_kb "$SPID")
read -r s_n s_cost s_p50 s_p99 s_err <<<"$(drive "$SPID" "$SURL" "$LOAD" "$CONNS" 2 "$s_idle_rate")"
cp "$tmp/wrk.last" "$tmp/wrk.serve"
s_rss1=$(rss_kb "$SPID")
s_hwm=$(hwm_kb "$SPID")
n_rss0=$(rss_kb "$NPID")
read -r n_n n_cost n_p50 n_p99 n_err <<<"$(drive "$NPID" "$NURL" "$LOAD" "$CONNS" 2 "$n_idle_rate")"
n_rss1=$(rss_kb "$NPID")
# Paced: every client waits 100 ms between scrapes (1000 scrapes/s in all),
# so the latency is the time to answer, not a queue the clients built.
echo 'function delay() return 100 end' >"$tmp/pace.lua"
read -r sp_n _ sp_p50 sp_p99 sp_err <<<"$(drive "$SPID" "$SURL" "$LOAD" "$CONNS" 2 "$s_idle_rate" -s "$tmp/pace.lua")"
read -r np_n _ np_p50 np_p99 np_err <<<"$(drive "$NPID" "$NURL" "$LOAD" "$CONNS" 2 "$n_idle_rate" -s "$tmp/pace.lua")"
s_rss2=$(rss_kb "$SPID")
load1=$(cut -d' ' -f1-3 /proc/loadavg)
alive=yes
kill -0 "$SPID" 2>/dev/null || alive=no

mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
verdict() { awk -v v="$1" -v lim="$2" 'BEGIN { print (v < lim) ? "met" : "NOT met" }'; }
ne_ver=$(prometheus-node-exporter --version 2>&1 | awk 'NR == 1 { print $3 }' || true)
wrk_ver=$(wrk --version 2>&1 | awk 'NR == 1 { print $2 }' || true)

cat <<EOF
## Issue 7: serve vs node_exporter

Command: \`IDLE=$IDLE LOAD=$LOAD SPACED=$SPACED scripts/bench-serve.sh\` on $(date -u +%Y-%m-%d): \`stealscope serve\`
(defaults: 10 Hz sampling, rules every 30 s) and node_exporter $ne_ver (Debian package, default
collectors) run at the same time on loopback; wrk $wrk_ver drives the load. CPU = run time of all
the process's threads (\`/proc/PID/task/*/schedstat\`, ns); cost per scrape subtracts the idle rate
measured first. One scrape: serve $s_bytes bytes ($s_series samples), node_exporter $n_bytes bytes
($n_series samples).

| | stealscope serve | node_exporter |
|---|---|---|
| idle CPU, nobody scraping (${IDLE} s) | **${s_idle} %** of one CPU | ${n_idle} % |
| CPU per scrape, back to back (1 connection, 10 s) | ${s_cost1} µs (${s_n1} scrapes) | ${n_cost1} µs (${n_n1} scrapes) |
| CPU per scrape, one every 150 ms (fresh encoding) | **${s_cost2} µs** | ${n_cost2} µs |
| ${CONNS} clients for ${LOAD} s, as fast as they can: requests | ${s_n} | ${n_n} |
| errors (non-2xx, socket) | **${s_err}** | ${n_err} |
| latency p50 / p99 | ${s_p50} / **${s_p99} ms** | ${n_p50} / ${n_p99} ms |
| RSS before → after load (peak) | $(mb "$s_rss0") → $(mb "$s_rss1") MiB ($(mb "$s_hwm")) | $(mb "$n_rss0") → $(mb "$n_rss1") MiB |
| ${CONNS} clients for ${LOAD} s, each every 100 ms: requests | ${sp_n} | ${np_n} |
| errors (non-2xx, socket) | **${sp_err}** | ${np_err} |
| latency p50 / p99 | ${sp_p50} / **${sp_p99} ms** | ${np_p50} / ${np_p99} ms |

Targets under ${CONNS} clients for ${LOAD} s: no errors: $([[ $s_err == 0 && $sp_err == 0 && $alive == yes ]] && echo met || echo "NOT met");
p99 < 10 ms: $(verdict "$s_p99" 10) as fast as they can, $(verdict "$sp_p99" 10) paced; RSS growth < 5 MB:
$(verdict "$(((s_rss2 - s_rss0) / 1024))" 5) ($(mb $((s_rss2 - s_rss0))) MiB over both runs).

serve samples continuously (that is its idle cost: /proc/stat ten times a second, the host scan
once a second, the rules every 30 s) and answers a scrape from state it already holds, encoded
at most once per sample; node_exporter does nothing between scrapes and collects everything on
each one. wrk and both servers share this machine's $(nproc) CPUs, so the latencies under load
include waiting for a CPU; node_exporter answers at most 40 scrapes at a time by default
(\`--web.max-requests\`) and refuses the rest with 503, which is its errors column. Load average
of the machine at the start and end of the run: $load0 and $load1 (other work on it lengthens the
latency tail of both).
EOF
