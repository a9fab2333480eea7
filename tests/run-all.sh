#!/usr/bin/env bash
# The one test command (README "Test"): installs what the tests need on a fresh Debian machine
# (idempotently), then runs every test. CI runs exactly this through .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { printf '\n==> %s\n' "$*"; }
need_apt=()

# --- prerequisites: Debian packages ------------------------------------------------------------
command -v promtool >/dev/null || need_apt+=(prometheus)
# (more apt packages are appended here by the features that need them)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# --- prerequisites: Python tools (in a project-local venv) ---------------------------------------
# (pip installs are appended here by the features that need them)

# --- prerequisites: npm tools --------------------------------------------------------------------
# (npm installs are appended here by the features that need them)

# --- Rust: format, lint, build, tests ------------------------------------------------------------
log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
log "cargo build (workspace, incl. the fake libdcgm)"
cargo build --workspace --all-targets
log "cargo nextest"
cargo nextest run --workspace --no-fail-fast

# --- checks outside cargo ------------------------------------------------------------------------
# (stack, compose, dashboard and manifest checks are appended here)

log "all tests passed"
