#!/usr/bin/env bash
# Process CPU and memory per collection, baseline binary against new, for the three cases of the performance work's
# table, plus a scaling table (cost per series from 1 GPU to about 40,000 series). Everything on 127.0.0.1.
#
#   benches/collection_cost.sh            full run: 3 rounds × 30 s per case and binary, scaling table 30 s each
#   benches/collection_cost.sh --short    smoke: 1 round × 5 s, scaling 5 s each (figures indicative only)
#
# Environment:
#   NEW_BIN           binary under test (default: target/release/dcgm-otel, or under CARGO_TARGET_DIR, built
#                     from the working tree)
#   BASELINE_BIN      binary to compare against (default: built from BASELINE_REV, see below)
#   BASELINE_REV      git revision the baseline is built from when BASELINE_BIN is unset
#                     (default: main when issue 26's work began); the tree is taken with `git archive`
#                     into a temporary directory and built with `cargo build --release` there; the binary is
#                     kept as target/collection-cost/dcgm-otel-<rev> and reused by later runs
#   BASELINE_TARGET_DIR cargo target directory of that build (default: a temporary one, removed after;
#                     an existing release target directory saves rebuilding the dependencies)
#   COST_ROUNDS       rounds of the interleaved comparison           (default 3; --short: 1)
#   COST_SECONDS      measured window per case, binary and round     (default 30; --short: 5)
#   COST_WARMUP       seconds from start to the window              (default 3)
#   COST_SCALING      0 skips the scaling table                      (default 1)
#   COST_OUT          also write the tables to this file
#   COST_RUST_LOG     the exporters' RUST_LOG (default warn,dcgm_otel::server::plan=info; an older binary that
#                     logs its bound address under another module needs e.g. warn,dcgm_otel=info)
#
# The cases (issue 26), each `dcgm-otel --simulate=large -c 1000 -a 127.0.0.1:0 --no-hostname`:
#   (a) /metrics scraped with `Accept-Encoding: gzip` every 15 s
#   (b) (a) + OTLP http/protobuf every 10 s to a loopback receiver (a python3 http.server answering 200)
#   (c) scraped and exported every collection (1 s)
# Rounds are interleaved: case by case, the two binaries alternate (A B in odd rounds, B A in even ones), so
# that the machine's drift touches both alike. Per run: start, wait COST_WARMUP s, then read utime+stime from
# /proc/<pid>/stat and dcgm_otel_collects_total from /metrics at both ends of the window, and VmRSS every
# second in it. Reported: process CPU ms per collection (all rounds pooled, and the range over rounds), VmRSS
# at the end of the window (steady) and its maximum, and baseline/new per case.
# Scaling (NEW_BIN, case (a)): benches/scenarios/one-gpu.yaml, eight-gpus.yaml (the `large` counters without
# MIG), `large`, and benches/scenarios/large-x4.yaml (32 GPUs × 7 MIG instances, about 40,000 series).
#
# Caveats: CPU comes in clock ticks (10 ms; about 20 ticks a 30 s window in case (a)), and the two reads of
# the collection counter may each be one collection off. The receiver, the scraper and other users of the
# machine share its cores with the exporter. No timing is asserted: the script fails only when an exporter
# does not start or does not serve.
set -euo pipefail
cd "$(dirname "$0")/.."

# main when issue 26's work began
default_baseline_rev=cf366124a8576c76bce8498193acff31b6cc4138

short=0
[ "${1:-}" = "--short" ] && short=1
rounds=${COST_ROUNDS:-$([ $short = 1 ] && echo 1 || echo 3)}
window=${COST_SECONDS:-$([ $short = 1 ] && echo 5 || echo 30)}
warmup=${COST_WARMUP:-3}
scaling=${COST_SCALING:-1}

for tool in curl python3 git; do
  command -v "$tool" >/dev/null || { echo "collection_cost.sh: $tool is required" >&2; exit 1; }
done

new_bin=${NEW_BIN:-${CARGO_TARGET_DIR:-target}/release/dcgm-otel}
if [ -z "${NEW_BIN:-}" ]; then
  echo "collection_cost.sh: building $new_bin from the working tree" >&2
  cargo build --release --bin dcgm-otel >&2
fi
if [ -n "${BASELINE_BIN:-}" ]; then
  base_bin=$BASELINE_BIN
else
  rev=$(git rev-parse --verify "${BASELINE_REV:-$default_baseline_rev}^{commit}")
  base_bin=target/collection-cost/dcgm-otel-$rev
  if [ ! -x "$base_bin" ]; then
    echo "collection_cost.sh: building the baseline $rev (git archive + cargo build --release)" >&2
    src=$(mktemp -d)
    git archive "$rev" | tar -x -C "$src"
    target_dir=${BASELINE_TARGET_DIR:-$src/target}
    (cd "$src" && CARGO_TARGET_DIR="$target_dir" cargo build --release --bin dcgm-otel) >&2
    mkdir -p target/collection-cost
    cp "$target_dir/release/dcgm-otel" "$base_bin"
    rm -rf "$src"
  fi
fi
for b in "$base_bin" "$new_bin"; do
  [ -x "$b" ] || { echo "collection_cost.sh: $b is not an executable" >&2; exit 1; }
done

tmp=$(mktemp -d)
pid=""
scraper=""
sink=""
stop() { # pid: stop a process this script started
  if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
  fi
}
cleanup() {
  stop "$scraper"; stop "$pid"; stop "$sink"
  rm -rf "$tmp"
}
trap cleanup EXIT

# Every server here binds 127.0.0.1:0 and says which port it got (tests/support/listening.sh): the sink prints
# `listening address=127.0.0.1:PORT`, dcgm-otel logs "serving /metrics ... address=127.0.0.1:PORT".
. tests/support/listening.sh

# ---- the OTLP receiver: 200 and an empty ExportMetricsServiceResponse to every POST /v1/metrics -----------
python3 - "$tmp/sink.count" <<'PY' >"$tmp/sink.log" 2>&1 &
import http.server, sys
count_file = sys.argv[1]
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ok = self.path == "/v1/metrics"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
        if ok:
            with open(count_file, "a") as f:
                f.write("1\n")
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(f"listening address=127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
PY
sink=$!
sink_port=$(logged_port "$tmp/sink.log" "listening" "$sink" 20)

hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
collects() { curl -fsS --compressed "$1" | awk '/^dcgm_otel_collects_total/ { v = $2 } END { print v }'; }
sink_count() { [ -f "$tmp/sink.count" ] && wc -l <"$tmp/sink.count" || echo 0; }

# measure LABEL BIN SCENARIO SCRAPE_PERIOD_S OTLP_INTERVAL_MS(0: none)
# writes to $tmp/measure: cpu_ms collections rss_end_kib rss_max_kib series otlp_requests
# (not in a subshell: the EXIT trap must see $pid and $scraper)
measure() {
  local label=$1 bin=$2 scenario=$3 scrape_s=$4 otlp_ms=$5
  local port url args
  args=(--simulate="$scenario" -c 1000 -a 127.0.0.1:0 --no-hostname)
  if [ "$otlp_ms" != 0 ]; then
    args+=(--otlp-protocol http/protobuf --otlp-endpoint "http://127.0.0.1:$sink_port" --otlp-export-interval "$otlp_ms")
  fi
  # The previous case's log goes first: the `>` below truncates it in the child, after `&` has returned, so
  # the port read could otherwise be the previous exporter's (it happened: "did not serve GPU series").
  rm -f "$tmp/exporter.log"
  # warnings only, and the "serving /metrics" line (its bound address)
  RUST_LOG=${COST_RUST_LOG:-warn,dcgm_otel::server::plan=info} "$bin" "${args[@]}" >"$tmp/exporter.log" 2>&1 &
  pid=$!
  port=$(logged_port "$tmp/exporter.log" "serving /metrics" "$pid" 20) ||
    { echo "collection_cost.sh: $label: $bin did not serve" >&2; exit 1; }
  url="http://127.0.0.1:$port/metrics"
  local up=0
  # the readiness probe asks for gzip too, as the scraper does: a plain request would make the plain text
  # (2.3 MB for `large`) that a gzip-only node never holds, and the RSS figure would carry it
  for _ in $(seq 1 400); do
    if curl -fsS --compressed -o "$tmp/body.prom" "$url" 2>/dev/null && grep -q '^DCGM_FI' "$tmp/body.prom"; then up=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ $up = 0 ]; then
    echo "collection_cost.sh: $label: $bin did not serve GPU series on $url:" >&2
    cat "$tmp/exporter.log" >&2
    exit 1
  fi
  local series
  series=$(grep -c '^DCGM_FI' "$tmp/body.prom" || true)
  # the scraper, as Prometheus would: gzip, at the case's period, from the start
  (while :; do curl -fsS -H 'Accept-Encoding: gzip' -o /dev/null "$url" || true; sleep "$scrape_s"; done) &
  scraper=$!
  sleep "$warmup"
  local c0 t0 s0 rss rss_max t1 c1 s1
  c0=$(collects "$url"); t0=$(cpu_ticks); s0=$(sink_count)
  rss_max=0
  for _ in $(seq 1 "$window"); do
    sleep 1
    kill -0 "$pid" 2>/dev/null || { echo "collection_cost.sh: $label: the exporter died:" >&2; cat "$tmp/exporter.log" >&2; exit 1; }
    rss=$(rss_kib)
    [ "$rss" -gt "$rss_max" ] && rss_max=$rss
  done
  t1=$(cpu_ticks); c1=$(collects "$url"); s1=$(sink_count)
  stop "$scraper"; scraper=""
  stop "$pid"; pid=""
  echo "$(( (t1 - t0) * 1000 / hz )) $(( ${c1%.*} - ${c0%.*} )) $rss $rss_max $series $(( s1 - s0 ))" >"$tmp/measure"
}

# ---- 1. baseline against new, interleaved -------------------------------------------------------------
case_args() { # case -> scrape period (s), OTLP interval (ms)
  case $1 in a) echo "15 0" ;; b) echo "15 10000" ;; c) echo "1 1000" ;; esac
}
: >"$tmp/results"
for round in $(seq 1 "$rounds"); do
  for c in a b c; do
    read -r scrape_s otlp_ms <<<"$(case_args "$c")"
    order="baseline new"
    [ $((round % 2)) = 0 ] && order="new baseline"
    for which in $order; do
      bin=$new_bin
      [ "$which" = baseline ] && bin=$base_bin
      echo "collection_cost.sh: round $round/$rounds, case ($c), $which" >&2
      measure "($c) $which" "$bin" large "$scrape_s" "$otlp_ms"
      echo "$c $which $round $(cat "$tmp/measure")" >>"$tmp/results"
    done
  done
done

out=()
say() { out+=("$*"); echo "$*"; }
say "baseline  $base_bin"
say "new       $new_bin"
say "machine   $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1); load average $(cut -d' ' -f1-3 /proc/loadavg)"
say "runs      $rounds round(s) × ${window} s per case and binary, interleaved; CPU tick $((1000 / hz)) ms"
say ""
say "| case | binary | CPU ms / collection | range over rounds | collections | RSS steady MiB | RSS max MiB | OTLP requests |"
say "|---|---|---:|---:|---:|---:|---:|---:|"
while IFS= read -r line; do say "$line"; done < <(awk '
  { k = $1 " " $2; cpu[k] += $4; n[k] += $5; v = ($5 > 0) ? $4 / $5 : 0
    if (!(k in lo) || v < lo[k]) lo[k] = v; if (!(k in hi) || v > hi[k]) hi[k] = v
    if ($6 > rss[k]) rss[k] = $6; if ($7 > mx[k]) mx[k] = $7; req[k] += $9 }
  END {
    split("a b c", cs, " "); split("baseline new", bs, " ")
    name["a"] = "(a) scrape gzip / 15 s"; name["b"] = "(b) (a) + OTLP / 10 s"; name["c"] = "(c) scrape + OTLP every collection"
    for (i = 1; i <= 3; i++) for (j = 1; j <= 2; j++) { k = cs[i] " " bs[j]; if (!(k in n)) continue
      printf "| %s | %s | %.2f | %.2f–%.2f | %d | %.1f | %.1f | %d |\n", name[cs[i]], bs[j],
        (n[k] > 0 ? cpu[k] / n[k] : 0), lo[k], hi[k], n[k], rss[k] / 1024, mx[k] / 1024, req[k] }
  }' "$tmp/results")
say ""
say "| case | baseline / new (CPU per collection) | baseline / new (RSS steady) |"
say "|---|---:|---:|"
while IFS= read -r line; do say "$line"; done < <(awk '
  { k = $1 " " $2; cpu[k] += $4; n[k] += $5; if ($6 > rss[k]) rss[k] = $6 }
  END {
    split("a b c", cs, " ")
    for (i = 1; i <= 3; i++) { b = cs[i] " baseline"; w = cs[i] " new"
      if (n[b] == 0 || n[w] == 0 || cpu[w] == 0) { printf "| (%s) | ? | ? |\n", cs[i]; continue }
      printf "| (%s) | %.2f× | %.2f× |\n", cs[i], (cpu[b] / n[b]) / (cpu[w] / n[w]), rss[b] / rss[w] }
  }' "$tmp/results")
# (b) exports every 10 s: a shorter window may see no request
if [ "$(awk -v w="$window" '($1 == "c" || ($1 == "b" && w > 10)) && $9 == 0' "$tmp/results" | wc -l)" != 0 ]; then
  say "warning: some OTLP runs sent no request to the receiver: those runs did not export"
fi

# ---- 2. scaling: cost per series, new binary, case (a) ------------------------------------------------
if [ "$scaling" != 0 ]; then
  say ""
  say "| scenario (new binary, case (a)) | GPU series | CPU ms / collection | µs / series | µs / added series (vs the row above) | RSS steady MiB |"
  say "|---|---:|---:|---:|---:|---:|"
  prev="0 0"
  for scenario in benches/scenarios/one-gpu.yaml benches/scenarios/eight-gpus.yaml large benches/scenarios/large-x4.yaml; do
    echo "collection_cost.sh: scaling, $scenario" >&2
    measure "scaling $scenario" "$new_bin" "$scenario" 15 0
    read -r cpu n rss _ series _ <"$tmp/measure"
    row=$(awk -v s="$scenario" -v c="$cpu" -v n="$n" -v r="$rss" -v k="$series" -v p="$prev" 'BEGIN {
      ms = (n > 0) ? c / n : 0; sub(/^benches\/scenarios\//, "", s); split(p, q, " ")
      added = (q[2] > 0 && k > q[2]) ? sprintf("%.3f", (ms - q[1]) * 1000 / (k - q[2])) : "–"
      printf "%.4f %d | %s | %d | %.2f | %.3f | %s | %.1f |", ms, k, s, k, ms, (k > 0) ? ms * 1000 / k : 0, added, r / 1024 }')
    prev=${row%% |*}
    say "|${row#* |}"
  done
fi

if [ -n "${COST_OUT:-}" ]; then
  printf '%s\n' "${out[@]}" >"$COST_OUT"
fi
