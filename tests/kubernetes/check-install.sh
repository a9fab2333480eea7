#!/usr/bin/env bash
# Offline checks of the ways to install dcgm-otel on Kubernetes besides the plain manifests
# (check-manifests.sh), run by tests/run-all.sh:
#  1. the GPU Operator drop-in: the ClusterPolicy of docs/gpu-operator.md validates against the operator's
#     vendored CRD schema (tests/kubernetes/check_gpu_operator.py; unknown keys refused).
# Usage: tests/kubernetes/check-install.sh [path/to/dcgm-otel]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv/bin
bin=${1:-target/debug/dcgm-otel}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. GPU Operator ClusterPolicy
"$venv/python" tests/kubernetes/check_gpu_operator.py "$tmp" "$bin" "$venv/check-jsonschema"
