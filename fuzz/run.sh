#!/usr/bin/env bash
# Build the fuzz targets once, then run each for N seconds (or N executions with --runs) from a scratch
# copy of its committed seed corpus; print execs and exec/s per target; exit non-zero on any crash,
# leak, timeout or out-of-memory. Usage: fuzz/run.sh [--seconds N] [--runs N] [--no-asan] [target...]
# (no target: all; with both limits a target stops at whichever comes first). Engine and flags: fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")"
seconds=20
runs=""
sanitizer=(--sanitizer address)
target_dir=target
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --no-asan) sanitizer=(--sanitizer none); target_dir=target/no-asan; shift ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=$(sed -n 's/^name = "\([a-z_0-9]*\)"$/\1/p' Cargo.toml | grep -v '^dcgm-otel-fuzz$' || true)
[ ${#targets[@]} -gt 0 ] || mapfile -t targets <<<"$all"

# Longest input per target: a bit over what the parser is asked to take (DCGM value: the 4,128-byte
# struct; :9400 head: the 16 KiB limit plus room for 431/413).
max_len() {
  case "$1" in
    dcgm_values) echo 4200 ;;
    http_request) echo 20000 ;;
    counters_csv | scenario_yaml | kubernetes_watch_stream) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

export RUSTC_BOOTSTRAP=1  # cargo-fuzz passes -Z flags (sanitizer, coverage); stable rustc takes them so
start=$(date +%s)
one=()
[ ${#targets[@]} -ne 1 ] || one=("${targets[0]}")
# -O -a: optimised, with debug assertions and overflow checks (an overflow is a finding, not a wrap)
# (the two builds keep separate target dirs so neither overwrites the other's binaries)
cargo fuzz build -O -a "${sanitizer[@]}" --target-dir "$target_dir" "${one[@]}"
echo "build: $(( $(date +%s) - start )) s" >&2
bin_dir=$target_dir/x86_64-unknown-linux-gnu/release
failed=0
printf '%-26s %12s %8s %10s %8s\n' target execs seconds exec/s corpus
for t in "${targets[@]}"; do
  work=work/$t
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
  cp corpus/"$t"/* "$work/corpus/" 2>/dev/null || true
  limit=(-max_total_time="$seconds")
  [ -z "$runs" ] || limit+=(-runs="$runs")
  t0=$(date +%s)
  set +e
  "$bin_dir/$t" "$work/corpus" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" >"$work/log" 2>&1
  rc=$?
  set -e
  elapsed=$(( $(date +%s) - t0 ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -n1)
  printf '%-26s %12s %8s %10s %8s\n' "$t" "${execs:-?}" "$elapsed" "${rate:-?}" "$(ls "$work/corpus" | wc -l)"
  if [ $rc -ne 0 ]; then
    failed=1
    echo "FAILED: $t (exit $rc); log $(pwd)/$work/log, input in $(pwd)/$work/artifacts/" >&2
    grep -E 'ERROR|panicked|SUMMARY' "$work/log" | head -n 5 >&2 || true
  fi
done
exit $failed
