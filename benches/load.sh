#!/usr/bin/env bash
# End-to-end load and soak of the exporter (issue 8), everything on 127.0.0.1.
#
#   benches/load.sh            full run: release binary, 20 s of wrk per case, 120 s soak
#   benches/load.sh --short    CI smoke: 3 s of wrk per case, 10 s soak (figures indicative only)
#
# Environment:
#   DCGM_OTEL_BIN    binary to run (default: target/release/dcgm-otel, built if missing)
#   LOAD_SECONDS     wrk duration per case             (default 20; --short: 3)
#   SOAK_SECONDS     soak duration (long soak: 3600)   (default 120; --short: 10)
#   LOAD_CONNS       wrk connections                   (default 4)
#   LOAD_SCENARIO    --simulate scenario               (default large)
#   LOAD_OUT         also write the summary to this file
#
# What it does:
#   1. starts `dcgm-otel --simulate=$LOAD_SCENARIO -c 1000 -a 127.0.0.1:0` (it binds a port itself and
#      says which in its log: tests/support/listening.sh) and measures the time from spawn to the first
#      /metrics that carries GPU series (its log and curl, polled every 5 ms);
#   2. drives /metrics with wrk (1 thread, LOAD_CONNS keep-alive connections) with and without
#      `Accept-Encoding: gzip`, and records p50/p99 latency and scrapes/s;
#   3. soaks: no load, one collection per second, for SOAK_SECONDS, sampling the exporter's RSS (VmRSS)
#      and CPU time (utime+stime) from /proc/<pid> every second; reports CPU per collect cycle,
#      RSS at start/max/end and its growth.
# Exporter and wrk share the machine's cores: the figures are for that setup (see docs/performance.md).
# No timing is asserted: the script fails only when the exporter does not start or does not serve, or a
# wrk run fails (wrk's exit status, a non-2xx answer, a connect/read/write error).
set -euo pipefail
cd "$(dirname "$0")/.."

short=0
[ "${1:-}" = "--short" ] && short=1
load_s=${LOAD_SECONDS:-$([ $short = 1 ] && echo 3 || echo 20)}
soak_s=${SOAK_SECONDS:-$([ $short = 1 ] && echo 10 || echo 120)}
conns=${LOAD_CONNS:-4}
scenario=${LOAD_SCENARIO:-large}
bin=${DCGM_OTEL_BIN:-target/release/dcgm-otel}

for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "load.sh: $tool is required (apt-get install $tool)" >&2; exit 1; }
done
if [ ! -x "$bin" ]; then
  echo "load.sh: building $bin" >&2
  cargo build --release --bin dcgm-otel >&2
fi

. tests/support/listening.sh
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

summary=()
say() { summary+=("$*"); echo "$*"; }

# ---- 1. start to first /metrics -------------------------------------------------------------------
t0=$(date +%s%N)
# warnings only, and the "serving /metrics" line (its bound address)
RUST_LOG=warn,dcgm_otel::server::plan=info "$bin" --simulate="$scenario" -c 1000 -a 127.0.0.1:0 >"$tmp/exporter.log" 2>&1 &
pid=$!
port=$(logged_port "$tmp/exporter.log" "serving /metrics" "$pid" 20) || { echo "load.sh: exporter did not serve" >&2; exit 1; }
url="http://127.0.0.1:$port/metrics"
first_ms=""
for _ in $(seq 1 4000); do
  if curl -fsS -o "$tmp/first.prom" "$url" 2>/dev/null && grep -q '^DCGM_FI' "$tmp/first.prom"; then
    first_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    break
  fi
  kill -0 "$pid" 2>/dev/null || { echo "load.sh: exporter exited:" >&2; cat "$tmp/exporter.log" >&2; exit 1; }
  sleep 0.005
done
[ -n "$first_ms" ] || { echo "load.sh: no /metrics within 20 s" >&2; exit 1; }
series=$(grep -c '^DCGM_FI' "$tmp/first.prom" || true)
bytes=$(wc -c <"$tmp/first.prom")
gz_bytes=$(curl -fsS -H 'Accept-Encoding: gzip' "$url" | wc -c)
say "binary                 $bin"
say "machine                $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
say "scenario               $scenario: $series GPU series, body $bytes bytes, gzip $gz_bytes bytes"
say "start to first /metrics ${first_ms} ms (spawn → first body with GPU series; curl polls every 5 ms)"

# ---- 2. load -----------------------------------------------------------------------------------------
run_wrk() { # name, connections, extra wrk args...
  local name=$1 c=$2; shift 2
  # A wrk that fails, a scrape not answered 200, or a connection that fails is a failure of the run (issue
  # 40: `|| true` let a run with every scrape refused pass); wrk's timeouts (an answer slower than 2 s) are
  # timing, reported but not failed.
  wrk_failed() { echo "load.sh: wrk $name ($c conns): $1" >&2; cat "$tmp/wrk.txt" >&2; exit 1; }
  wrk -t1 -c"$c" -d"${load_s}s" --latency "$@" "$url" >"$tmp/wrk.txt" 2>&1 || wrk_failed "exit status $?"
  local rps p50 p99 errs
  rps=$(awk '/^Requests\/sec/ {print $2}' "$tmp/wrk.txt")
  [ -n "$rps" ] || wrk_failed "no Requests/sec line"
  ! grep -q 'Non-2xx' "$tmp/wrk.txt" || wrk_failed "scrapes not answered 2xx"
  awk '/Socket errors/ { gsub(",", ""); if ($4 + $6 + $8 > 0) bad = 1 } END { exit bad }' "$tmp/wrk.txt" \
    || wrk_failed "connect/read/write errors"
  p50=$(awk '$1=="50%" {print $2}' "$tmp/wrk.txt")
  p99=$(awk '$1=="99%" {print $2}' "$tmp/wrk.txt")
  errs=$(awk '/Non-2xx|Socket errors/ {print}' "$tmp/wrk.txt" | tr '\n' ' ')
  say "$(printf 'wrk %-18s %s conns, %ss: %10s scrapes/s  p50 %8s  p99 %8s %s' "$name" "$c" "$load_s" "${rps:-?}" "${p50:-?}" "${p99:-?}" "$errs")"
}
run_wrk "gzip" "$conns" -H 'Accept-Encoding: gzip'
run_wrk "identity" "$conns"
run_wrk "gzip" 1 -H 'Accept-Encoding: gzip'

# ---- 3. soak -----------------------------------------------------------------------------------------
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
seq_now() { curl -fsS "http://127.0.0.1:$port/metrics" | awk '/^dcgm_otel_collects_total/ {print $2; exit}'; }
c0=$(seq_now || echo 0)
t_start=$(cpu_ticks)
rss_start=$(rss_kib); rss_max=$rss_start; rss_end=$rss_start
for _ in $(seq 1 "$soak_s"); do
  sleep 1
  kill -0 "$pid" 2>/dev/null || { echo "load.sh: exporter died during the soak" >&2; exit 1; }
  rss_end=$(rss_kib)
  [ "$rss_end" -gt "$rss_max" ] && rss_max=$rss_end
done
t_end=$(cpu_ticks)
c1=$(seq_now || echo 0)
cycles=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%d", b - a }')
cpu_ms=$(( (t_end - t_start) * 1000 / hz ))
per_cycle=$(awk -v c="$cpu_ms" -v n="$cycles" 'BEGIN { if (n > 0) printf "%.2f", c / n; else print "?" }')
say "soak ${soak_s}s, idle      $cycles collect cycles, process CPU ${cpu_ms} ms = ${per_cycle} ms/cycle (no scrapes in between; CPU tick = $((1000 / hz)) ms)"
say "RSS (VmRSS)            start $rss_start KiB, max $rss_max KiB, end $rss_end KiB, growth $((rss_end - rss_start)) KiB"

if [ -n "${LOAD_OUT:-}" ]; then
  printf '%s\n' "${summary[@]}" >"$LOAD_OUT"
fi
