"""The ClusterPolicy of docs/gpu-operator.md against the GPU Operator's CRD schema.

Usage: check_gpu_operator.py TMP_DIR DCGM_OTEL_BINARY CHECK_JSONSCHEMA
Extracts every ```yaml block of docs/gpu-operator.md whose kind is ClusterPolicy, writes the CRD's
openAPIV3Schema (tests/fixtures/gpu-operator/nvidia.com_clusterpolicies.yaml, vendored from
NVIDIA/gpu-operator) as a JSON schema in which objects with declared properties refuse unknown keys (the API
server would prune a misspelt key silently), and validates the blocks with check-jsonschema. Also checks
that each variable the ClusterPolicy's dcgmExporter.env sets is one `dcgm-otel --help` knows, and that the
`kubectl patch` merge patch in the document touches only keys the schema has.
"""
import json
import os
import re
import subprocess
import sys

import yaml

tmp, binary, check_jsonschema = sys.argv[1], sys.argv[2], sys.argv[3]
DOC = "docs/gpu-operator.md"
CRD = "tests/fixtures/gpu-operator/nvidia.com_clusterpolicies.yaml"
fail = []


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crd_schema import schema_of  # noqa: E402

_, _, schema = schema_of(CRD)
schema_path = os.path.join(tmp, "clusterpolicy.schema.json")
with open(schema_path, "w") as f:
    json.dump(schema, f)

text = open(DOC).read()
blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
policies = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "ClusterPolicy"]
if not policies:
    fail.append(f"{DOC}: no ClusterPolicy block")
files = []
for i, p in enumerate(policies):
    path = os.path.join(tmp, f"clusterpolicy-{i}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(p, f)
    files.append(path)
    exporter = p.get("spec", {}).get("dcgmExporter", {})
    for key in ("repository", "image", "version"):
        if not exporter.get(key):
            fail.append(f"{DOC}: ClusterPolicy {i + 1} sets no dcgmExporter.{key}")
    if exporter.get("image") != "dcgm-otel":
        fail.append(f"{DOC}: ClusterPolicy {i + 1}: dcgmExporter.image is not dcgm-otel")
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    for e in exporter.get("env", []):
        if e.get("name") not in help_text and not e.get("name", "").startswith("OTEL_"):
            fail.append(f"{DOC}: dcgmExporter.env sets {e.get('name')}, which `dcgm-otel --help` does not mention")

# The merge patch of `kubectl patch ... -p '{...}'`, applied to the first ClusterPolicy, validates too.
for j, m in enumerate(re.findall(r"kubectl patch clusterpolicies\.nvidia\.com \S+ --type merge -p \\?\s*'(\{.*?\})'", text, re.S)):
    patch = json.loads(m)
    merged = json.loads(json.dumps(policies[0])) if policies else {}

    def merge(dst, src):
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = v

    merge(merged, patch)
    path = os.path.join(tmp, f"clusterpolicy-patched-{j}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(merged, f)
    files.append(path)

r = subprocess.run([check_jsonschema, "--schemafile", schema_path, *files], capture_output=True, text=True)
if r.returncode != 0:
    fail.append(f"{DOC}: the ClusterPolicy does not validate against {CRD}:\n{r.stdout}{r.stderr}")

if fail:
    print("\n".join(fail), file=sys.stderr)
    sys.exit(1)
print(f"gpu operator: {len(files)} ClusterPolicy documents of {DOC} validate against the vendored CRD schema "
      f"(unknown keys refused)")
