#!/usr/bin/env bash
# Re-record dcgm-exporter's /metrics captures (tests/golden/dcgm-exporter/<case>.prom) from the binary named by
# DCGM_EXPORTER_BIN (dcgm-exporter 4.5.3-4.8.2 with cgo; this script never builds one), and the differences
# table of docs/metrics.md. A capture is rewritten only when the live output differs from it. Review the diff.
set -euo pipefail
: "${DCGM_EXPORTER_BIN:?set DCGM_EXPORTER_BIN to a dcgm-exporter 4.5.3-4.8.2 binary (tests/peers/dcgm-exporter/README.md)}"
[ -x "$DCGM_EXPORTER_BIN" ] || { echo "DCGM_EXPORTER_BIN=$DCGM_EXPORTER_BIN is not an executable file" >&2; exit 2; }
cd "$(dirname "$0")/../../.."
export DCGM_EXPORTER_BIN UPDATE_GOLDEN=1 CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
cargo test --test e2e dcgm_exporter_diff -- --nocapture
