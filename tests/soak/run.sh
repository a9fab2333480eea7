#!/usr/bin/env bash
# The fault-matrix soak (docs/reliability.md): the release exporter on the fake libdcgm's `large` fleet
# for N minutes while its peers fail on a schedule, scraped at 50/s beside a slowloris crowd. Writes
# samples.csv, report.md, exporter.log and soak-rss-cpu.png into target/soak/ (or $SOAK_OUT) and exits
# non-zero when a pass criterion fails.
#
#   tests/soak/run.sh [--minutes N | --seconds N] [--debug] [--no-plot]
#
# --debug uses the debug exporter (no release build); --no-plot skips the PNG (and matplotlib).
# The plot needs matplotlib: installed into the project .venv (or $SOAK_VENV) only when plotting.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

seconds=1800 profile=release plot=1
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --debug) profile=debug; shift ;;
    --no-plot) plot=0; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=${SOAK_OUT:-$root/target/soak}
mkdir -p "$out"

if [ "$profile" = release ]; then
  cargo build --release --bin dcgm-otel
else
  cargo build --bin dcgm-otel
fi
# The fake libdcgm is found beside the test binary (debug).
cargo build -p fake-libdcgm
# 100 slowloris connections, 8 scrapers and the peers' sockets in one process.
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge 4096 ] || ulimit -n 4096 2>/dev/null || true

set +e
SOAK_SECONDS=$seconds SOAK_BIN="$root/target/$profile/dcgm-otel" SOAK_OUT="$out" \
  cargo test --test soak -- --ignored --nocapture
rc=$?
set -e

if [ "$plot" = 1 ] && [ -s "$out/samples.csv" ]; then
  venv=${SOAK_VENV:-$root/.venv}
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -c 'import matplotlib' 2>/dev/null || "$venv/bin/pip" install -q matplotlib==3.10.9
  "$venv/bin/python" tests/soak/plot.py "$out/samples.csv" "$out/soak-rss-cpu.png"
fi
echo "soak: report in $out/report.md (exit $rc)"
exit $rc
