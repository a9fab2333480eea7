#!/usr/bin/env bash
# Offline checks of deploy/kubernetes/ (no cluster needed), run by tests/run-all.sh:
#  1. `kubectl apply -f deploy/kubernetes/` works on a bare cluster: every manifest file directly in that
#     folder (kubectl reads *.yaml, *.yml, *.json there, not subfolders) holds only complete objects
#     (apiVersion, kind, metadata.name) of built-in APIs (no CRD such as the ServiceMonitor), and a
#     Namespace sorts before the files that put objects in it (kubectl applies files in name order);
#  2. those files, and optional/*.yaml objects of built-in APIs, validate with
#     `kubernetes-validate --strict` (bundled schemas);
#  3. the DaemonSet with each patches/*.yaml applied validates too (a patch alone is not a resource);
#  4. optional/servicemonitor.yaml (CRD monitoring.coreos.com/v1: kubernetes-validate has no schema for
#     it) is checked structurally against the Service it selects; optional/prometheusrule.yaml (CRD too)
#     carries exactly the groups of prometheus/rules/*.rules.yml (tests/rules/prometheusrule.py --check);
#  5. the counters ConfigMap holds exactly src/counters/default-counters.csv;
#  6. every flag variable the DaemonSet and its patches set (or show commented out) is one the binary
#     knows; the DaemonSet's scheduling, hostPath, capabilities and probes are what README.md there says.
# Usage: tests/kubernetes/check-manifests.sh [path/to/dcgm-otel]
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv/bin
bin=${1:-target/debug/dcgm-otel}
dir=deploy/kubernetes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1, 3-6: the Python checks; they also write the patched DaemonSets and list the files to validate
"$venv/python" tests/kubernetes/check_manifests.py "$dir" "$tmp" "$bin"

# 2, 3: strict schema validation of every complete built-in object, base and optional, and the variants
mapfile -t validate <"$tmp/validate.list"
"$venv/kubernetes-validate" --strict --quiet "${validate[@]}"
echo "kubernetes manifests: ${#validate[@]} files pass kubernetes-validate --strict (base, optional objects of" \
     "built-in APIs, the DaemonSet with each patch applied); CRD objects checked structurally"
