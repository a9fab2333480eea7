#!/usr/bin/env bash
# Builds what tests/hardware/run.sh needs on a GPU machine that has no Rust: the release binary of
# dcgm-otel, stripped (what travels to that machine is limited to 64 MiB), into hw-bin/ (ignored by git;
# name it in the device run's `carry`). Everything else run.sh uses is Python (standard library only) and
# travels as tracked files.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
cargo build --release --locked --bin dcgm-otel
mkdir -p hw-bin
strip --strip-all -o hw-bin/dcgm-otel target/release/dcgm-otel
git rev-parse HEAD > hw-bin/COMMIT 2>/dev/null || echo unknown > hw-bin/COMMIT
ls -l hw-bin/
echo "hw-bin/ ready: $(du -sh hw-bin | cut -f1) (commit $(cat hw-bin/COMMIT))"
