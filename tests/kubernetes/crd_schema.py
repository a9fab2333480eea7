"""Validation of custom resources against a vendored CRD's openAPIV3Schema with check-jsonschema.

The API server prunes unknown keys of a structural schema silently, so a misspelt key would be lost without
an error; here objects with declared properties refuse unknown keys instead. Used by check_gpu_operator.py,
check_helm.py and check_kustomize.py.
"""
import json
import os
import re
import subprocess

import yaml


def strict(schema):
    """A copy of a structural schema where objects with properties allow no other keys."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if (schema.get("type") == "object" and "properties" in schema
                and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        if "(?i)" in str(schema.get("pattern", "")):
            # Go's inline case-insensitive flag has no ECMA-262 form: spell the letters as [xX] classes.
            out["pattern"] = re.sub(r"[A-Za-z]", lambda m: f"[{m.group().lower()}{m.group().upper()}]",
                                    schema["pattern"].replace("(?i)", ""))
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def schema_of(crd_path):
    """(apiVersion, kind, JSON schema) of the storage version of a CRD file."""
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = strict(version["schema"]["openAPIV3Schema"])
    api_version = f"{crd['spec']['group']}/{version['name']}"
    kind = crd["spec"]["names"]["kind"]
    # apiVersion/kind/metadata are the API server's, not the CRD's; pin them to this CRD.
    schema.setdefault("properties", {})
    schema["properties"]["apiVersion"] = {"const": api_version}
    schema["properties"]["kind"] = {"const": kind}
    schema["properties"]["metadata"] = {"type": "object", "required": ["name"]}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata", "spec"})
    return api_version, kind, schema


def validate(docs, crd_paths, tmp, check_jsonschema, tag):
    """Validate `docs` (objects of the CRDs' kinds) against `crd_paths`; returns failure strings."""
    fail = []
    schemas = {}
    for p in crd_paths:
        api_version, kind, schema = schema_of(p)
        path = os.path.join(tmp, f"{kind}.schema.json")
        with open(path, "w") as f:
            json.dump(schema, f)
        schemas[(api_version, kind)] = path
    by_schema = {}
    for i, d in enumerate(docs):
        key = (d.get("apiVersion"), d.get("kind"))
        if key not in schemas:
            fail.append(f"{tag}: no vendored CRD for {key[0]} {key[1]}")
            continue
        path = os.path.join(tmp, f"{tag}-{key[1]}-{i}.yaml".replace("/", "_"))
        with open(path, "w") as f:
            yaml.safe_dump(d, f)
        by_schema.setdefault(schemas[key], []).append(path)
    for schema, files in by_schema.items():
        r = subprocess.run([check_jsonschema, "--schemafile", schema, *files], capture_output=True, text=True)
        if r.returncode != 0:
            fail.append(f"{tag}: does not validate against its CRD:\n{r.stdout}{r.stderr}")
    return fail
