#!/usr/bin/env bash
# Offline checks of the ways to install dcgm-otel on Kubernetes besides the plain manifests
# (check-manifests.sh), run by tests/run-all.sh:
#  1. the GPU Operator drop-in: the ClusterPolicy of docs/gpu-operator.md validates against the operator's
#     vendored CRD schema (tests/kubernetes/check_gpu_operator.py; unknown keys refused);
#  2. the Helm chart deploy/helm/dcgm-otel: helm lint --strict, helm template of the defaults and of every
#     ci/*-values.yaml, kubernetes-validate --strict / the vendored Prometheus Operator CRDs, defaults equal
#     to deploy/kubernetes/, each feature's objects (tests/kubernetes/check_helm.py).
# helm and kubectl come from tests/kubernetes/install-tools.sh (into .venv/bin, once).
# Usage: tests/kubernetes/check-install.sh [path/to/dcgm-otel]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv/bin
bin=${1:-target/debug/dcgm-otel}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. GPU Operator ClusterPolicy
"$venv/python" tests/kubernetes/check_gpu_operator.py "$tmp" "$bin" "$venv/check-jsonschema"

# 2. Helm chart
tests/kubernetes/install-tools.sh
"$venv/python" tests/kubernetes/check_helm.py "$tmp" "$bin" "$venv"
