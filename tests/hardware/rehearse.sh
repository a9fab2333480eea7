#!/usr/bin/env bash
# The hardware check rehearsed without a GPU (tests/run-all.sh runs it): tests/hardware/run.sh as it runs
# on a GPU machine, with stand-ins for what only a GPU machine has — the fake libnvidia-ml of the tests
# (tests/fake-libnvml) for the driver's NVML, tests/hardware/standin/nvidia-smi (the same fake NVML read
# the way nvidia-smi reads the real one) and tests/hardware/fake-libcuda.c for libcuda.so.1 — so that on
# the GPU machine the only unknowns are the hardware's answers. It passes when the check passes and every
# phase produced its rows.
#
#   tests/hardware/rehearse.sh [OUT]    (default: a temporary folder); DCGM_OTEL_BIN as in run.sh
#                                        (default target/debug/dcgm-otel: cargo build --workspace)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${DCGM_OTEL_BIN:-target/debug/dcgm-otel}"
nvml="${FAKE_NVML_LIB:-target/debug/libfake_libnvml.so}"
if [ ! -x "$bin" ] || [ ! -f "$nvml" ]; then
  CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}" cargo build -p dcgm-otel -p fake-libnvml
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out="${1:-$tmp/out}"
ln -s "$(realpath "$nvml")" "$tmp/libnvidia-ml.so.1"
cc -shared -fPIC -o "$tmp/libcuda.so.1" tests/hardware/fake-libcuda.c
# An idle H100 until the load starts; the fake libcuda rewrites this file when its first kernel runs.
cat > "$tmp/scenario.yaml" <<'YAML'
description: hardware-check rehearsal (an idle H100)
driver_version: "580.95.05"
gpus:
  - { model: H100-SXM5-80GB, load: idle }
YAML
export DCGM_OTEL_LIBNVML="$tmp/libnvidia-ml.so.1" FAKE_NVML_SCENARIO="$tmp/scenario.yaml" FAKE_CUDA_SCENARIO="$tmp/scenario.yaml"
export PATH="$(pwd)/tests/hardware/standin:$PATH"
export DCGM_OTEL_BIN="$bin" HWCHECK_PYTHON="${HWCHECK_PYTHON:-python3}"
export HWCHECK_ARGS="--cuda-library $tmp/libcuda.so.1 --load-seconds 15 --load-rounds 3 --mib 256 ${HWCHECK_ARGS:-}"
rc=0
tests/hardware/run.sh "$out" || rc=$?
python3 - "$out" "$rc" <<'PY'
import json, sys
out, rc = sys.argv[1], int(sys.argv[2])
res = json.load(open(f"{out}/results.json"))
rows = res["rows"]
want = ["DCGM_FI_DEV_POWER_USAGE vs nvidia-smi power.draw", "DCGM_FI_DEV_FB_USED vs nvidia-smi memory.used",
        "DCGM_FI_DEV_VBIOS_VERSION", "NvLinks up vs", "rises under load", "dcgm_otel_process_gpu_memory_bytes",
        "energy growth", "under load: DCGM_FI_DEV_POWER_USAGE", "--distribution", "OTLP hw.power vs :9400", "MIG"]
missing = [w for w in want if not any(w in r["check"] for r in rows if r["result"] != "FAIL")]
files = ["table.txt", "results.json", "readings.json", "logs.txt", "metrics-idle.prom", "metrics-load.prom", "nvidia-smi-q.txt", "otlp.json"]
import os
absent = [f for f in files if not os.path.exists(os.path.join(out, f))]
if rc != 0 or missing or absent or not res["final"]:
    print(f"rehearsal FAILED: run.sh exit {rc}; rows missing or failing: {missing}; files missing: {absent}")
    sys.exit(1)
print(f"rehearsal passed: {res['summary']}; {len(files)} files in {out}")
PY
