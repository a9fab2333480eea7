#!/usr/bin/env bash
# Offline checks of deploy/kubernetes/ (no cluster needed), run by tests/run-all.sh:
#  1. `kubectl apply -f deploy/kubernetes/` works on a bare cluster: every manifest file directly in that
#     folder (kubectl reads *.yaml, *.yml, *.json there, not subfolders) holds only complete objects
#     (apiVersion, kind, metadata.name) of built-in APIs (no CRD such as the ServiceMonitor), and a
#     Namespace sorts before the files that put objects in it (kubectl applies files in name order);
#  2. those files, and the components' objects of built-in APIs, validate with
#     `kubernetes-validate --strict` (bundled schemas);
#  3. deploy/kubernetes is a kustomize base (its `Kustomization` file, no .yaml extension so that
#     `kubectl apply -f` skips it) rendering exactly those objects; `kubectl kustomize` of the base with each
#     component (components/*) and with all of them validates too (kubernetes-validate --strict; the
#     ServiceMonitor and PrometheusRule against the vendored Prometheus Operator CRDs);
#  4. the ServiceMonitor is checked structurally against the Service it selects; the PrometheusRule
#     carries exactly the groups of prometheus/rules/*.rules.yml (tests/rules/prometheusrule.py --check);
#  5. the counters ConfigMap holds exactly src/counters/default-counters.csv;
#  6. every flag variable the DaemonSet and its components set (or show commented out) is one the binary
#     knows; the DaemonSet's scheduling, hostPath, capabilities and probes are what README.md there says.
# kubectl (with kustomize) comes from tests/kubernetes/install-tools.sh (into .venv/bin, once).
# Usage: tests/kubernetes/check-manifests.sh [path/to/dcgm-otel]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv/bin
bin=${1:-target/debug/dcgm-otel}
dir=deploy/kubernetes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tests/kubernetes/install-tools.sh >/dev/null
# 1, 3-6: the Python checks; they also write the kustomized variants and list the files to validate
"$venv/python" tests/kubernetes/check_manifests.py "$dir" "$tmp" "$bin" "$venv"

# 2, 3: strict schema validation of every complete built-in object, base and optional, and the variants
mapfile -t validate <"$tmp/validate.list"
"$venv/kubernetes-validate" --strict --quiet "${validate[@]}"
echo "kubernetes manifests: ${#validate[@]} files pass kubernetes-validate --strict (base, components' objects of" \
     "built-in APIs, the base kustomized with each component and with all); CRD objects against the vendored CRDs"
