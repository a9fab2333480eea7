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


MERGE_KEYS = {"containers": "name", "env": "name", "volumes": "name", "volumeMounts": "mountPath"}


def merge_list(base, patch, key):
    """Strategic merge of a list of objects by its merge key (containers, env, volumes, mounts)."""
    out = copy.deepcopy(base)
    for item in patch:
        target = next((b for b in out if b.get(key) == item.get(key)), None)
        if target is None:
            out.append(copy.deepcopy(item))
        else:
            deep_merge(target, item)
    return out


def deep_merge(base, patch):
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            deep_merge(base[k], v)
        elif k in MERGE_KEYS and isinstance(v, list):
            base[k] = merge_list(base.get(k, []), v, MERGE_KEYS[k])
        else:
            base[k] = copy.deepcopy(v)


# 2. the patched variants: each patch only adds to the DaemonSet's one container, and the result is
# written out for kubernetes-validate
ds = load("daemonset.yaml")
ds_containers = {c["name"] for c in ds["spec"]["template"]["spec"]["containers"]}
variants = {"patch-profiling.yaml": "daemonset-profiling.yaml", "patch-pod-uid.yaml": "daemonset-pod-uid.yaml"}
patched = {}
for patch_file, out_name in variants.items():
    patch = load(patch_file)
    for c in patch["spec"]["template"]["spec"]["containers"]:
        if c["name"] not in ds_containers:
            fail.append(f"{patch_file} names container {c['name']!r}, which the DaemonSet does not have")
    merged = copy.deepcopy(ds)
    deep_merge(merged, patch)
    patched[patch_file] = merged
    with open(f"{tmp}/{out_name}", "w") as f:
        yaml.safe_dump(merged, f)
c = patched["patch-profiling.yaml"]["spec"]["template"]["spec"]["containers"][0]
if c["securityContext"]["capabilities"].get("add") != ["SYS_ADMIN"]:
    fail.append(f"patch-profiling.yaml does not add SYS_ADMIN: {c['securityContext']}")
spec = patched["patch-pod-uid.yaml"]["spec"]["template"]["spec"]
c = spec["containers"][0]
mounts = {m["name"]: m for m in c["volumeMounts"]}
if not mounts.get("device-plugins", {}).get("readOnly") or "pod-resources" not in mounts:
    fail.append("patch-pod-uid.yaml: device-plugins must be mounted read-only, next to pod-resources")
if {v["name"] for v in spec["volumes"]} != {"pod-resources", "counters", "device-plugins"}:
    fail.append(f"patch-pod-uid.yaml: unexpected volumes {[v['name'] for v in spec['volumes']]}")
if "DCGM_EXPORTER_KUBERNETES" not in {e["name"] for e in c["env"]}:
    fail.append("patch-pod-uid.yaml replaced the DaemonSet's env instead of adding to it")

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
names = set()
for name in ["daemonset.yaml", *variants]:
    with open(f"{src}/{name}") as f:
        names |= set(re.findall(r"name: ((?:DCGM|NVIDIA|OTEL)_[A-Z_]+)", f.read()))
help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
for n in sorted(names):
    if n not in help_text:
        fail.append(f"daemonset.yaml sets {n}, which `dcgm-otel --help` does not mention")

if fail:
    print("\n".join("FAIL: " + m for m in fail))
    sys.exit(1)
print(f"kubernetes manifests: profiling and pod-uid variants built, ServiceMonitor/Service/DaemonSet wired, "
      f"ConfigMap == default CSV, {len(names)} environment variables known to the binary")
