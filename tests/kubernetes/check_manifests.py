"""Checks of deploy/kubernetes/ that kubernetes-validate cannot do (see check-manifests.sh).

Usage: check_manifests.py DEPLOY_DIR TMP_DIR DCGM_OTEL_BINARY VENV_BIN
Writes TMP_DIR/validate.list (the files kubernetes-validate must pass): the base files, the components'
objects of built-in APIs, and `kubectl kustomize` of the base with each component and with all of them.
"""
import copy
import glob
import os
import re
import subprocess
import sys

import yaml

src, tmp, binary, venv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crd_schema import validate as validate_crd  # noqa: E402

CRDS = sorted(glob.glob("tests/fixtures/prometheus-operator/monitoring.coreos.com_*.yaml"))
COMPONENTS = ["counters-from-api", "no-profiling", "pod-labels", "pod-uid", "processes", "prometheusrule", "servicemonitor"]
fail = []
# What `kubectl apply -f DIR` reads in DIR (not recursive).
KUBECTL_EXTENSIONS = (".yaml", ".yml", ".json")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load(rel):
    docs = load_all(os.path.join(src, rel))
    if len(docs) != 1:
        fail.append(f"{rel}: expected one object, found {len(docs)}")
    return docs[0] if docs else {}


def builtin_api(api_version):
    """True for the API groups every cluster serves (core, apps, rbac.authorization.k8s.io, ...), false
    for groups that come with a CRD (monitoring.coreos.com, ...)."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return group == "" or "." not in group or group.endswith(".k8s.io")


def manifest_files(folder):
    return sorted(p for p in glob.glob(os.path.join(folder, "*"))
                  if os.path.isfile(p) and p.endswith(KUBECTL_EXTENSIONS))


# 1. `kubectl apply -f deploy/kubernetes/`: complete objects of built-in APIs, namespaces first
validate = []
base_files = manifest_files(src)
if not base_files:
    fail.append(f"no manifests directly in {src}")
namespaces_created = set()
base_objects = []
for path in base_files:
    rel = os.path.relpath(path, src)
    docs = load_all(path)
    if not docs:
        fail.append(f"{rel}: no object (kubectl apply -f {src}/ reads every *.yaml, *.yml, *.json there)")
    for i, d in enumerate(docs):
        where = f"{rel}" + (f" (document {i + 1})" if len(docs) > 1 else "")
        if not isinstance(d, dict):
            fail.append(f"{where}: not a mapping")
            continue
        missing = [k for k in ("apiVersion", "kind") if not d.get(k)]
        if not (d.get("metadata") or {}).get("name"):
            missing.append("metadata.name")
        if missing:
            fail.append(f"{where}: not a complete object (no {', '.join(missing)}): `kubectl apply -f {src}/` "
                        f"would fail on it; put variants in components/")
            continue
        if not builtin_api(d["apiVersion"]):
            fail.append(f"{where}: {d['apiVersion']} {d['kind']} needs a CRD that a bare cluster lacks; "
                        f"move it to a component in {src}/components/")
        ns = d["metadata"].get("namespace")
        if ns and ns not in namespaces_created:
            fail.append(f"{where}: {d['kind']} in namespace {ns!r}, which no earlier file (name order, as "
                        f"kubectl applies them) creates")
        if d["kind"] == "Namespace":
            namespaces_created.add(d["metadata"]["name"])
        base_objects.append((rel, d))
    validate.append(path)

# components/<name>/: kustomize components; their own objects are complete objects, validated here when
# they are of built-in APIs and against the vendored Prometheus Operator CRDs otherwise
optional = {}
found = sorted(os.path.basename(d) for d in glob.glob(os.path.join(src, "components", "*")) if os.path.isdir(d))
if found != COMPONENTS:
    fail.append(f"components/ holds {found}; this check knows {COMPONENTS} (teach it what a new one must do)")
for path in sorted(glob.glob(os.path.join(src, "components", "*", "*.yaml"))):
    rel = os.path.relpath(path, src)
    if os.path.basename(path) == "kustomization.yaml":
        k = load(rel)
        if k.get("kind") != "Component":
            fail.append(f"{rel}: not a kustomize Component")
        continue
    for d in load_all(path):
        if not (isinstance(d, dict) and d.get("apiVersion") and d.get("kind") and (d.get("metadata") or {}).get("name")):
            fail.append(f"{rel}: a component's resource files hold complete objects only")
            continue
        optional[rel] = d
        if builtin_api(d["apiVersion"]) and path not in validate:
            validate.append(path)


# 3. `kubectl kustomize` of the base alone (the same objects as the files), with each component, and with all
def kustomize(components, tag):
    root = os.path.join(tmp, f"kustomize-{tag}")
    os.makedirs(root, exist_ok=True)
    base = os.path.relpath(src, root)
    with open(os.path.join(root, "kustomization.yaml"), "w") as f:
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                        "resources": [base], "components": [f"{base}/components/{c}" for c in components]}, f)
    r = subprocess.run([os.path.join(venv, "kubectl"), "kustomize", root], capture_output=True, text=True)
    if r.returncode != 0:
        fail.append(f"kubectl kustomize with components {components}: {r.stderr.strip()}")
        return []
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    builtin = [d for d in docs if builtin_api(d["apiVersion"])]
    out = os.path.join(tmp, f"kustomized-{tag}.yaml")
    with open(out, "w") as f:
        yaml.safe_dump_all(builtin, f)
    validate.append(out)
    fail.extend(validate_crd([d for d in docs if not builtin_api(d["apiVersion"])], CRDS, tmp,
                             os.path.join(venv, "check-jsonschema"), f"kustomize {tag}"))
    return docs


def key(d):
    return (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])


base_render = sorted(kustomize([], "base"), key=key)
if base_render != sorted((d for _, d in base_objects), key=key):
    fail.append(f"`kubectl kustomize {src}` does not render exactly the objects of `kubectl apply -f {src}/` "
                f"(deploy/kubernetes/Kustomization lists the files)")
all_render = kustomize(COMPONENTS, "all")
kinds = sorted(d["kind"] for d in all_render)
# two ClusterRoles and bindings: pod-labels' (pods, ResourceSlices) and pod-uid's (pods), usable apart
if kinds != sorted(["ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ConfigMap",
                    "DaemonSet", "Namespace", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount",
                    "ServiceMonitor"]):
    fail.append(f"base with every component renders {kinds}")

ds_entry = [(rel, d) for rel, d in base_objects if d.get("kind") == "DaemonSet"]
if len(ds_entry) != 1:
    fail.append(f"expected one DaemonSet in {src}, found {[rel for rel, _ in ds_entry]}")
    print("\n".join("FAIL: " + m for m in fail))
    sys.exit(1)
ds_file, ds = ds_entry[0]
pod = ds["spec"]["template"]["spec"]
container = pod["containers"][0]
patched = {}
for name in ("counters-from-api", "no-profiling", "pod-labels", "pod-uid", "processes"):
    docs = kustomize([name], name)
    found = [d for d in docs if d["kind"] == "DaemonSet"]
    if found:
        patched[name] = found[0]
patch_files = sorted(glob.glob(os.path.join(src, "components", "*", "kustomization.yaml")))

# the pod-labels variant: the token mounted, the flags on, and RBAC that reads pods (and DRA ResourceSlices)
# and nothing else, bound to the DaemonSet's ServiceAccount
if "pod-labels" in patched:
    spec = patched["pod-labels"]["spec"]["template"]["spec"]
    c = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    if spec.get("automountServiceAccountToken") is not True:
        fail.append("components/pod-labels must mount the ServiceAccount token (automountServiceAccountToken: true)")
    if env.get("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS") != "true" or env.get("DCGM_EXPORTER_KUBERNETES") != "true":
        fail.append("components/pod-labels must add DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS to the DaemonSet's env")
    rbac_path = os.path.join(src, "components", "pod-labels", "rbac.yaml")
    docs = load_all(rbac_path) if os.path.exists(rbac_path) else []
    roles = [d for d in docs if d.get("kind") == "ClusterRole"]
    bindings = [d for d in docs if d.get("kind") == "ClusterRoleBinding"]
    if len(roles) != 1 or len(bindings) != 1:
        fail.append("components/pod-labels/rbac.yaml must hold one ClusterRole and one ClusterRoleBinding")
    else:
        rules = sorted((tuple(r.get("apiGroups")), tuple(r.get("resources")), tuple(sorted(r.get("verbs"))))
                       for r in roles[0].get("rules") or [])
        want = [(("",), ("pods",), ("get", "list", "watch")),
                (("resource.k8s.io",), ("resourceslices",), ("get", "list", "watch"))]
        if rules != want:
            fail.append(f"components/pod-labels/rbac.yaml: the ClusterRole must grant get/list/watch on pods and "
                        f"resourceslices only, got {rules}")
        b = bindings[0]
        if b.get("roleRef", {}).get("name") != roles[0]["metadata"]["name"]:
            fail.append("components/pod-labels/rbac.yaml: the binding does not name the ClusterRole")
        sa = pod.get("serviceAccountName")
        ns = ds["metadata"].get("namespace")
        if {"kind": "ServiceAccount", "name": sa, "namespace": ns} not in (b.get("subjects") or []):
            fail.append(f"components/pod-labels/rbac.yaml: the binding must name ServiceAccount {ns}/{sa}")


def caps(c):
    return (c.get("securityContext") or {}).get("capabilities") or {}


# the default: profiling on (SYS_ADMIN added, everything else dropped), as dcgm-exporter ships it
if caps(container).get("add") != ["SYS_ADMIN"] or caps(container).get("drop") != ["ALL"]:
    fail.append(f"{ds_file}: capabilities must be add [SYS_ADMIN], drop [ALL] (profiling on by default): "
                f"{caps(container)}")
for rel, d in [(ds_file, ds)] + [(f"components/{n}", m) for n, m in patched.items()]:
    for c in d["spec"]["template"]["spec"]["containers"]:
        for cap in caps(c).get("add") or []:
            if cap.startswith("CAP_"):
                fail.append(f"{rel}: capability {cap!r}: write it without CAP_ (the API server rejects "
                            f"CAP_SYS_ADMIN together with allowPrivilegeEscalation: false)")
if "no-profiling" in patched:
    c = patched["no-profiling"]["spec"]["template"]["spec"]["containers"][0]
    if caps(c).get("add") or caps(c).get("drop") != ["ALL"] or \
            (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False:
        fail.append(f"components/no-profiling must leave no added capability, drop ALL and no privilege "
                    f"escalation: {c.get('securityContext')}")
if "pod-uid" in patched:
    # issue 35: UIDs from the API (pods get/list/watch), nothing of the kubelet's device-plugins directory
    spec = patched["pod-uid"]["spec"]["template"]["spec"]
    c = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    if {v["name"] for v in spec["volumes"]} != {"pod-resources", "counters", "tmp"}:
        fail.append(f"components/pod-uid: unexpected volumes {[v['name'] for v in spec['volumes']]}")
    if "DCGM_EXPORTER_KUBERNETES" not in env or env.get("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID") != "true":
        fail.append("components/pod-uid must add DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID to the DaemonSet's env")
    if spec.get("automountServiceAccountToken") is not True:
        fail.append("components/pod-uid must mount the ServiceAccount token (the UIDs come from the API)")
    if caps(c).get("add") != ["SYS_ADMIN"]:
        fail.append("components/pod-uid changed the capabilities")
    docs = load_all(os.path.join(src, "components", "pod-uid", "rbac.yaml"))
    roles = [d for d in docs if d.get("kind") == "ClusterRole"]
    binding = [d for d in docs if d.get("kind") == "ClusterRoleBinding"]
    want = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    if len(roles) != 1 or roles[0].get("rules") != want or len(binding) != 1 or \
            {"kind": "ServiceAccount", "name": pod.get("serviceAccountName"),
             "namespace": ds["metadata"].get("namespace")} not in (binding[0].get("subjects") or []):
        fail.append("components/pod-uid/rbac.yaml: one ClusterRole with get/list/watch on pods only, bound to "
                    "the DaemonSet's ServiceAccount")
if "processes" in patched:
    spec = patched["processes"]["spec"]["template"]["spec"]
    c = spec["containers"][0]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in c["env"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    proc = mounts.get("host-proc", {})
    if not proc.get("readOnly") or (vols.get("host-proc", {}).get("hostPath") or {}).get("path") != "/proc":
        fail.append("components/processes: the host's /proc must be mounted read-only (volume host-proc)")
    if env.get("DCGM_OTEL_PROC_ROOT") != proc.get("mountPath"):
        fail.append(f"components/processes: DCGM_OTEL_PROC_ROOT ({env.get('DCGM_OTEL_PROC_ROOT')}) must be "
                    f"where the host's /proc is mounted ({proc.get('mountPath')})")
    if "DCGM_EXPORTER_KUBERNETES" not in env or "pod-resources" not in mounts:
        fail.append("components/processes replaced the DaemonSet's env or mounts instead of adding to them")
    if spec.get("hostPID"):
        fail.append("components/processes: the host's /proc is enough; no hostPID")

# 6. scheduling, host paths, probes
if pod.get("nodeSelector"):
    fail.append(f"{ds_file}: no hard nodeSelector ({pod['nodeSelector']}): GPU nodes without that label "
                f"(EKS GPU AMIs with the plain device plugin, ...) would get no exporter; use node affinity")
terms = ((((pod.get("affinity") or {}).get("nodeAffinity") or {})
          .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
term_keys = {e["key"] for t in terms for e in t.get("matchExpressions") or []}
for key in ("nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present",
            "k8s.amazonaws.com/accelerator", "cloud.google.com/gke-accelerator"):
    if key not in term_keys:
        fail.append(f"{ds_file}: the node affinity has no term on {key}")
if any(len(t.get("matchExpressions") or []) != 1 for t in terms):
    fail.append(f"{ds_file}: each node-affinity term should test one label (terms are ORed, expressions "
                f"within a term ANDed)")
for rel, d in [(ds_file, ds)] + [(f"components/{n}", m) for n, m in patched.items()]:
    for v in d["spec"]["template"]["spec"].get("volumes") or []:
        if "hostPath" in v and v["hostPath"].get("type"):
            fail.append(f"{rel}: hostPath volume {v['name']} has type {v['hostPath']['type']!r}: a node with "
                        f"another kubelet root would keep the pod from starting")
        # issue 35: the kubelet's and device plugins' sockets there can be connected through a read-only mount
        if "device-plugins" in (v.get("hostPath") or {}).get("path", ""):
            fail.append(f"{rel}: hostPath {v['hostPath']['path']} exposes the kubelet's device-plugin sockets")
    for c in d["spec"]["template"]["spec"]["containers"]:
        if (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True:
            fail.append(f"{rel}: readOnlyRootFilesystem must be true")
live, ready = container.get("livenessProbe") or {}, container.get("readinessProbe") or {}
if (live.get("httpGet") or {}).get("path") != "/health":
    fail.append(f"{ds_file}: liveness must be httpGet /health (503 only when a restart is the cure)")
if (ready.get("httpGet") or {}).get("path") != "/ready":
    fail.append(f"{ds_file}: readiness must be httpGet /ready (the data is fresh), not /health, which "
                f"stays 200 while the exporter waits for DCGM")
port_names = {p["name"] for p in container.get("ports") or []}
for probe in (live, ready):
    port = (probe.get("tcpSocket") or probe.get("httpGet") or {}).get("port")
    if port not in port_names:
        fail.append(f"{ds_file}: probe port {port!r} is not a container port {port_names}")

# 4. ServiceMonitor against the Service and the DaemonSet
svc = next((d for _, d in base_objects if d.get("kind") == "Service"), None)
sm_rel, sm = next(((r, d) for r, d in optional.items() if d.get("kind") == "ServiceMonitor"), (None, None))
if svc is None or sm is None:
    fail.append(f"expected a Service in {src} and a ServiceMonitor in {src}/components/servicemonitor/")
else:
    if sm.get("apiVersion") != "monitoring.coreos.com/v1":
        fail.append(f"{sm_rel}: not a monitoring.coreos.com/v1 ServiceMonitor")
    sel = sm["spec"]["selector"]["matchLabels"]
    if any(svc["metadata"].get("labels", {}).get(k) != v for k, v in sel.items()):
        fail.append(f"ServiceMonitor selector {sel} does not select the Service (labels {svc['metadata'].get('labels')})")
    if svc["metadata"]["namespace"] not in sm["spec"]["namespaceSelector"]["matchNames"]:
        fail.append("ServiceMonitor namespaceSelector misses the Service's namespace")
    svc_ports = {p["name"] for p in svc["spec"]["ports"]}
    for ep in sm["spec"]["endpoints"]:
        if ep.get("port") not in svc_ports:
            fail.append(f"ServiceMonitor endpoint port {ep.get('port')!r} is not a Service port {svc_ports}")
        for key in ("interval", "scrapeTimeout"):
            if not re.fullmatch(r"[0-9]+(ms|s|m|h)", str(ep.get(key, "1s"))):
                fail.append(f"ServiceMonitor endpoint {key} {ep.get(key)!r} is not a Prometheus duration")
        # issue 35: the target's labels win (dcgm-exporter's default); the GPU's arrive as exported_*
        if ep.get("honorLabels") is not False:
            fail.append(f"ServiceMonitor endpoint honorLabels is {ep.get('honorLabels')!r}: false, as "
                        f"dcgm-exporter's chart (nothing on /metrics replaces job, instance, the target's pod)")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    if any(pod_labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
        fail.append("Service selector does not select the DaemonSet's pods")
    for p in svc["spec"]["ports"]:
        if p["targetPort"] not in port_names:
            fail.append(f"Service targetPort {p['targetPort']!r} is not a container port {port_names}")

# 4b. PrometheusRule: exactly the groups of prometheus/rules/*.rules.yml, in the exporter's namespace
pr_rel, pr = next(((r, d) for r, d in optional.items() if d.get("kind") == "PrometheusRule"), (None, None))
if pr is None:
    fail.append(f"expected a PrometheusRule in {src}/components/prometheusrule/ (tests/rules/prometheusrule.py generates it)")
else:
    if pr.get("apiVersion") != "monitoring.coreos.com/v1":
        fail.append(f"{pr_rel}: not a monitoring.coreos.com/v1 PrometheusRule")
    if svc is not None and pr["metadata"].get("namespace") != svc["metadata"]["namespace"]:
        fail.append(f"{pr_rel}: namespace {pr['metadata'].get('namespace')!r} is not the exporter's")
    r = subprocess.run([sys.executable, "tests/rules/prometheusrule.py", "--check", os.path.join(src, pr_rel)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail.append((r.stderr or r.stdout).strip().removeprefix("FAIL: "))

# the counters-from-api variant: -m names the base's ConfigMap, the token is mounted, and the Role reads that
# one ConfigMap and nothing else, bound to the DaemonSet's ServiceAccount
if "counters-from-api" in patched:
    spec = patched["counters-from-api"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    cm_objects = [d for _, d in base_objects if d.get("kind") == "ConfigMap"]
    cm_name = cm_objects[0]["metadata"]["name"] if cm_objects else None
    if env.get("DCGM_EXPORTER_CONFIGMAP_DATA") != f"{ds['metadata']['namespace']}:{cm_name}" or \
            spec.get("automountServiceAccountToken") is not True:
        fail.append("components/counters-from-api: -m must name the counters ConfigMap, with the token mounted")
    docs = load_all(os.path.join(src, "components", "counters-from-api", "rbac.yaml"))
    role = next((d for d in docs if d.get("kind") == "Role"), {})
    binding = next((d for d in docs if d.get("kind") == "RoleBinding"), {})
    if role.get("rules") != [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [cm_name],
                              "verbs": ["get", "list", "watch"]}]:
        fail.append(f"components/counters-from-api: the Role must read the one ConfigMap only: {role.get('rules')}")
    if {"kind": "ServiceAccount", "name": pod.get("serviceAccountName"), "namespace": ds["metadata"]["namespace"]} \
            not in (binding.get("subjects") or []) or binding.get("roleRef", {}).get("name") != role["metadata"]["name"]:
        fail.append("components/counters-from-api: the RoleBinding must bind the Role to the DaemonSet's ServiceAccount")

# 5. counters ConfigMap == the built-in default CSV
cm = next((d for _, d in base_objects if d.get("kind") == "ConfigMap"), {})
with open("src/counters/default-counters.csv") as f:
    csv = f.read()
if (cm.get("data") or {}).get("metrics") != csv:
    fail.append("the counters ConfigMap's data.metrics differs from src/counters/default-counters.csv")
# ... and mounted as a directory: the kubelet updates it by swapping the volume's ..data symlink, which
# dcgm-otel's counters reload follows (tests/e2e/reload_e2e.rs); a subPath mount is never updated.
ds_container = ds["spec"]["template"]["spec"]["containers"][0]
counters_mounts = [m for m in ds_container.get("volumeMounts") or [] if m["name"] == "counters"]
collectors = next((e.get("value") for e in ds_container.get("env") or []
                   if e["name"] == "DCGM_EXPORTER_COLLECTORS"), None)
if any("subPath" in m or "subPathExpr" in m for m in counters_mounts):
    fail.append("the counters ConfigMap is mounted with subPath: the kubelet never updates such a mount, "
                "so a ConfigMap edit would not reach the running exporter")
if not collectors or not any(collectors.startswith(m["mountPath"].rstrip("/") + "/") for m in counters_mounts):
    fail.append(f"DCGM_EXPORTER_COLLECTORS ({collectors}) is not a file of the counters ConfigMap mount")

# 6. variables set or suggested by the DaemonSet and its components are known to the binary
names = set()
for path in [os.path.join(src, ds_file)] + patch_files:
    with open(path) as f:
        names |= set(re.findall(r"name: ((?:DCGM|NVIDIA|OTEL)_[A-Z_]+)", f.read()))
help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
for n in sorted(names):
    if n not in help_text:
        fail.append(f"the DaemonSet or a patch sets {n}, which `dcgm-otel --help` does not mention")

with open(os.path.join(tmp, "validate.list"), "w") as f:
    f.write("".join(p + "\n" for p in validate))
if fail:
    print("\n".join("FAIL: " + m for m in fail))
    sys.exit(1)
print(f"kubernetes manifests: {len(base_files)} files in {src}/ are complete objects of built-in APIs in apply "
      f"order; {len(patched)} DaemonSet variants kustomized (and all components together); ServiceMonitor/Service/DaemonSet wired; PrometheusRule == "
      f"prometheus/rules; ConfigMap == "
      f"default CSV; node affinity, hostPath, capabilities and probes as documented; {len(names)} "
      f"environment variables known to the binary")
