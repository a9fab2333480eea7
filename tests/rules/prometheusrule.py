#!/usr/bin/env python3
"""The Prometheus Operator form of prometheus/rules/*.rules.yml: one PrometheusRule object
(deploy/kubernetes/components/prometheusrule/prometheusrule.yaml) whose spec.groups are the rule files' groups, unchanged.

  prometheusrule.py                print the manifest (regenerate: > deploy/kubernetes/components/prometheusrule/prometheusrule.yaml)
  prometheusrule.py --check FILE   exit 1 when FILE is not exactly what this script prints (the two drifted)

tests/kubernetes/check_manifests.py runs the check; run from the repository root. Needs PyYAML.
"""
import glob
import sys

import yaml

RULES = "prometheus/rules/*.rules.yml"
HEADER = """\
# Generated from prometheus/rules/*.rules.yml by tests/rules/prometheusrule.py; do not edit (the Kubernetes
# manifest test fails when the two differ). The alerting rules for the Prometheus Operator (CRD
# monitoring.coreos.com/v1, e.g. kube-prometheus-stack); apply it where the operator runs:
#   kubectl apply -f deploy/kubernetes/components/prometheusrule/prometheusrule.yaml
# The operator loads a PrometheusRule only when its labels match the Prometheus object's ruleSelector
# (kube-prometheus-stack: `release: <helm release name>` unless ruleSelectorNilUsesHelmValues is false):
# add that label here. README.md "Alerts" says what each alert means.
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render():
    groups = []
    for path in sorted(glob.glob(RULES)):
        with open(path) as f:
            groups.extend(yaml.safe_load(f).get("groups") or [])
    if not groups:
        raise SystemExit(f"no rule groups in {RULES}")
    obj = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "dcgm-otel-gpu",
            "namespace": "dcgm-otel",
            "labels": {"app.kubernetes.io/name": "dcgm-otel"},
        },
        "spec": {"groups": groups},
    }
    return HEADER + yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)


def main(argv):
    if len(argv) == 1:
        sys.stdout.write(render())
    elif len(argv) == 3 and argv[1] == "--check":
        with open(argv[2]) as f:
            current = f.read()
        if current != render():
            print(f"FAIL: {argv[2]} differs from {RULES}; regenerate it: "
                  f"python3 tests/rules/prometheusrule.py > {argv[2]}", file=sys.stderr)
            sys.exit(1)
        print(f"ok: {argv[2]} carries exactly the groups of {RULES}")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
