#!/usr/bin/env bash
# Offline checks of deploy/kubernetes/ (no cluster needed), run by tests/run-all.sh:
#  1. every core-API manifest validates with `kubernetes-validate --strict` (bundled schemas);
#  2. the DaemonSet with each patch-*.yaml applied validates too (a patch alone is not a resource);
#  3. servicemonitor.yaml (CRD monitoring.coreos.com/v1: kubernetes-validate has no schema for it) is
#     checked structurally against the Service it selects;
#  4. the counters ConfigMap holds exactly src/config/default-counters.csv;
#  5. every flag variable the DaemonSet and its patches set (or show commented out) is one the binary knows.
# Usage: tests/kubernetes/check-manifests.sh [path/to/dcgm-otel]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv/bin
bin=${1:-target/debug/dcgm-otel}
dir=deploy/kubernetes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

core=()
for f in "$dir"/*.yaml; do
  case "$(basename "$f")" in
    servicemonitor.yaml|patch-*.yaml) ;;   # checked below
    *) core+=("$f") ;;
  esac
done
"$venv/kubernetes-validate" --strict --quiet "${core[@]}"

"$venv/python" tests/kubernetes/check_manifests.py "$dir" "$tmp" "$bin"
"$venv/kubernetes-validate" --strict --quiet "$tmp"/daemonset-profiling.yaml "$tmp"/daemonset-pod-uid.yaml
echo "kubernetes manifests: ${#core[@]} core-API files and the profiling and pod-uid variants pass kubernetes-validate --strict;" \
     "servicemonitor.yaml checked structurally (no schema for the monitoring.coreos.com/v1 CRD in kubernetes-validate)"
