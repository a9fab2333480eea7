"""Checks of deploy/kubernetes/ that kubernetes-validate cannot do (see check-manifests.sh)."""
import copy
import re
import subprocess
import sys

import yaml

src, tmp, binary = sys.argv[1], sys.argv[2], sys.argv[3]
fail = []


def load(name):
    with open(f"{src}/{name}") as f:
        return yaml.safe_load(f)


def merge_containers(base, patch):
    """Strategic merge of a container list (merge key: name)."""
    out = copy.deepcopy(base)
    for pc in patch:
        target = next((c for c in out if c["name"] == pc["name"]), None)
        if target is None:
            fail.append(f"patch names container {pc['name']!r}, which the DaemonSet does not have")
            continue
        deep_merge(target, pc)
    return out


def deep_merge(base, patch):
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            deep_merge(base[k], v)
        elif k == "containers":
            base[k] = merge_containers(base.get(k, []), v)
        else:
            base[k] = copy.deepcopy(v)


# 2. the profiling variant
ds = load("daemonset.yaml")
patch = load("patch-profiling.yaml")
patched = copy.deepcopy(ds)
deep_merge(patched, patch)
caps = patched["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
if caps.get("add") != ["SYS_ADMIN"]:
    fail.append(f"patch-profiling.yaml does not add SYS_ADMIN: {caps}")
with open(f"{tmp}/daemonset-profiling.yaml", "w") as f:
    yaml.safe_dump(patched, f)

# 3. ServiceMonitor against the Service and the DaemonSet
sm, svc = load("servicemonitor.yaml"), load("service.yaml")
if (sm.get("apiVersion"), sm.get("kind")) != ("monitoring.coreos.com/v1", "ServiceMonitor"):
    fail.append("servicemonitor.yaml: not a monitoring.coreos.com/v1 ServiceMonitor")
sel = sm["spec"]["selector"]["matchLabels"]
if any(svc["metadata"].get("labels", {}).get(k) != v for k, v in sel.items()):
    fail.append(f"ServiceMonitor selector {sel} does not select the Service (labels {svc['metadata'].get('labels')})")
if svc["metadata"]["namespace"] not in sm["spec"]["namespaceSelector"]["matchNames"]:
    fail.append("ServiceMonitor namespaceSelector misses the Service's namespace")
port_names = {p["name"] for p in svc["spec"]["ports"]}
for ep in sm["spec"]["endpoints"]:
    if ep.get("port") not in port_names:
        fail.append(f"ServiceMonitor endpoint port {ep.get('port')!r} is not a Service port {port_names}")
    for key in ("interval", "scrapeTimeout"):
        if not re.fullmatch(r"[0-9]+(ms|s|m|h)", str(ep.get(key, "1s"))):
            fail.append(f"ServiceMonitor endpoint {key} {ep.get(key)!r} is not a Prometheus duration")
pod_labels = ds["spec"]["template"]["metadata"]["labels"]
if any(pod_labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
    fail.append("Service selector does not select the DaemonSet's pods")
container_ports = {p["name"] for c in ds["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
for p in svc["spec"]["ports"]:
    if p["targetPort"] not in container_ports:
        fail.append(f"Service targetPort {p['targetPort']!r} is not a container port {container_ports}")

# 4. counters ConfigMap == the built-in default CSV
cm = load("configmap-counters.yaml")
with open("src/config/default-counters.csv") as f:
    csv = f.read()
if cm["data"]["metrics"] != csv:
    fail.append("configmap-counters.yaml data.metrics differs from src/config/default-counters.csv")

# 5. variables set or suggested by the DaemonSet are known to the binary
with open(f"{src}/daemonset.yaml") as f:
    names = set(re.findall(r"name: ((?:DCGM|NVIDIA|OTEL)_[A-Z_]+)", f.read()))
help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
for n in sorted(names):
    if n not in help_text:
        fail.append(f"daemonset.yaml sets {n}, which `dcgm-otel --help` does not mention")

if fail:
    print("\n".join("FAIL: " + m for m in fail))
    sys.exit(1)
print(f"kubernetes manifests: profiling variant built, ServiceMonitor/Service/DaemonSet wired, "
      f"ConfigMap == default CSV, {len(names)} environment variables known to the binary")
