#!/usr/bin/env bash
# The hardware check (docs/sources.md "Verified on hardware"): on a machine with an NVIDIA driver, compares
# `dcgm-otel --source nvml` with nvidia-smi idle and under a load it generates, and checks its OTLP push.
# Builds nothing: it runs hw-bin/dcgm-otel, made beforehand by tests/hardware/prepare.sh (the GPU machine
# has no Rust). Needs Python 3.8+ (standard library only), nvidia-smi, and libcuda.so.1 for the load.
#
#   tests/hardware/run.sh [OUT]     results in OUT (default: $OUT, else ./hw-out): table.txt and 7 more files
#
# Environment: DCGM_OTEL_BIN (default hw-bin/dcgm-otel), HWCHECK_PYTHON, HWCHECK_ARGS (more hwcheck.py
# options, e.g. "--load-seconds 20"). The whole run stops within about 5.5 minutes whatever happens.
# Exit code: 0 all checks pass, 1 a mismatch (or a check that could not run), 2 bad setup.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:-${OUT:-hw-out}}"
bin="${DCGM_OTEL_BIN:-hw-bin/dcgm-otel}"
py="${HWCHECK_PYTHON:-}"
if [ -z "$py" ]; then
  for c in /opt/torch/.venv/bin/python3 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null; then py=$c; break; fi
  done
fi
[ -n "$py" ] || { echo "run.sh: no Python 3.8+ found (set HWCHECK_PYTHON)" >&2; exit 2; }
[ -x "$bin" ] || { echo "run.sh: $bin is missing: run tests/hardware/prepare.sh first (and carry hw-bin)" >&2; exit 2; }
mkdir -p "$out"
echo "hardware check: $bin ($(cat "$(dirname "$bin")/COMMIT" 2>/dev/null || echo '?')), python $py, results in $out"
# shellcheck disable=SC2086 # HWCHECK_ARGS is a list of options
timeout -k 10 330 "$py" tests/hardware/hwcheck.py --bin "$bin" --out "$out" --python "$py" --budget 300 ${HWCHECK_ARGS:-}
rc=$?
[ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "run.sh: the check overran its 330 s limit and was stopped (partial results in $out)" >&2
exit "$rc"
