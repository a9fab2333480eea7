#!/usr/bin/env bash
# Rewrites tests/fixtures/dcgm/dcgm-header-facts.txt from NVIDIA's DCGM source (tests/headers/README.md).
#
#   tests/headers/regenerate-dcgm.sh DCGM_SOURCE [COMMIT]
#
# DCGM_SOURCE is either a checkout of NVIDIA/DCGM (a folder with dcgmlib/) or a git directory of it
# (bare or not), of which COMMIT (default: the DCGM 4.6.0 commit the fixtures name) is read without a
# checkout. Nothing of NVIDIA's is written into this repository: only the facts file. Needs gcc, g++ and
# Python with pycparser (installed into a private venv under target/ when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
src=${1:?usage: tests/headers/regenerate-dcgm.sh DCGM_SOURCE [COMMIT]}
commit=${2:-72fa3feaa67d716a75323a8f47c34ff3ee73f824}
out=tests/fixtures/dcgm/dcgm-header-facts.txt

python=python3
if ! "$python" -c 'import pycparser' 2>/dev/null; then
  venv=$root/target/header-probe-venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -c 'import pycparser' 2>/dev/null || "$venv/bin/pip" install -q pycparser==3.0
  python=$venv/bin/python
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -d "$src/dcgmlib" ]; then
  tree=$src
  commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "$commit")
else
  # a git directory: export the two folders the probe reads at COMMIT
  git --git-dir "$src" archive "$commit" dcgmlib sdk/nvidia/nvml | tar -x -C "$work"
  tree=$work
fi
"$python" tests/headers/probe.py dcgm --src "$tree" --commit "$commit" --out "$out"
