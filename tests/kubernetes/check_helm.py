"""Checks of the Helm chart deploy/helm/dcgm-otel (see check-install.sh).

Usage: check_helm.py TMP_DIR DCGM_OTEL_BINARY VENV_BIN
 1. Chart.yaml's version and appVersion are the crate's version (Cargo.toml);
 2. the chart's copies (files/default-counters.csv, files/rules/) equal their sources;
 3. `helm lint --strict` and `helm template` of the defaults and of every ci/*-values.yaml; each rendered
    object of a built-in API passes `kubernetes-validate --strict`, each ServiceMonitor, PodMonitor and
    PrometheusRule validates against the vendored Prometheus Operator CRD (tests/fixtures/prometheus-operator);
 4. the defaults render the objects of deploy/kubernetes/ (labels and selectors aside: the chart adds
    app.kubernetes.io/instance and its own labels; the Namespace is Helm's --create-namespace);
 5. what each values file turns on is in the rendered objects (env, mounts, RBAC, probes, Secrets), every
    variable set is one `dcgm-otel --help` knows, and the generated web config (TLS + bcrypt basic auth)
    is accepted by the binary: served over HTTPS, 401 without credentials, 200 with them.
"""
import copy
import difflib
import glob
import os
import re
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from crd_schema import validate as validate_crd  # noqa: E402
import listening  # noqa: E402

tmp, binary, venv = sys.argv[1], sys.argv[2], sys.argv[3]
helm = os.path.join(venv, "helm")
CHART = "deploy/helm/dcgm-otel"
RELEASE, NAMESPACE = "dcgm-otel", "dcgm-otel"
CRDS = sorted(glob.glob("tests/fixtures/prometheus-operator/monitoring.coreos.com_*.yaml"))
fail = []


def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        fail.append(f"{' '.join(argv)}:\n{r.stdout}{r.stderr}")
    return r.stdout


def builtin_api(api_version):
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return group == "" or "." not in group or group.endswith(".k8s.io")


# 1. versions
with open("Cargo.toml") as f:
    crate_version = re.search(r'^\[package\][^\[]*?^version = "([^"]+)"', f.read(), re.M | re.S).group(1)
with open(os.path.join(CHART, "Chart.yaml")) as f:
    chart = yaml.safe_load(f)
if (chart.get("version"), str(chart.get("appVersion"))) != (crate_version, crate_version):
    fail.append(f"{CHART}/Chart.yaml: version {chart.get('version')} / appVersion {chart.get('appVersion')} "
                f"are not the crate's version {crate_version} (Cargo.toml)")

# 2. copies
pairs = [("src/counters/default-counters.csv", f"{CHART}/files/default-counters.csv")]
sources = sorted(glob.glob("prometheus/rules/*.rules.yml"))
copies = sorted(glob.glob(f"{CHART}/files/rules/*.rules.yml"))
if [os.path.basename(p) for p in sources] != [os.path.basename(p) for p in copies]:
    fail.append(f"{CHART}/files/rules/ does not hold exactly prometheus/rules/*.rules.yml: copy them "
                f"(cp prometheus/rules/*.rules.yml {CHART}/files/rules/)")
pairs += [(s, f"{CHART}/files/rules/{os.path.basename(s)}") for s in sources]
for src, dst in pairs:
    if not os.path.exists(dst) or open(src, "rb").read() != open(dst, "rb").read():
        fail.append(f"{dst} differs from {src}: cp {src} {dst}")

# 3. lint, template, validate
cases = [("defaults", None)] + [(os.path.basename(p)[:-len("-values.yaml")], p)
                                for p in sorted(glob.glob(f"{CHART}/ci/*-values.yaml"))]
rendered = {}
builtin_files = []
help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
for name, values in cases:
    extra = ["-f", values] if values else []
    run(helm, "lint", "--strict", CHART, *extra)
    out = run(helm, "template", RELEASE, CHART, "-n", NAMESPACE, *extra)
    docs = [d for d in yaml.safe_load_all(out) if d]
    rendered[name] = docs
    crs = []
    for i, d in enumerate(docs):
        if builtin_api(d["apiVersion"]):
            path = os.path.join(tmp, f"helm-{name}-{i}-{d['kind']}.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(d, f)
            builtin_files.append(path)
        else:
            crs.append(d)
    fail += validate_crd(crs, CRDS, tmp, os.path.join(venv, "check-jsonschema"), f"helm {name}")
    for d in docs:
        if d["kind"] == "DaemonSet":
            for e in d["spec"]["template"]["spec"]["containers"][0].get("env", []):
                if e["name"] not in help_text and e["name"] not in ("NODE_NAME", "OTEL_EXPORTER_OTLP_ENDPOINT",
                                                                      "OTEL_EXPORTER_OTLP_PROTOCOL",
                                                                      "OTEL_EXPORTER_OTLP_HEADERS"):
                    fail.append(f"helm {name}: the DaemonSet sets {e['name']}, unknown to `dcgm-otel --help`")
            pod = d["spec"]["template"]["spec"]
            volumes = {v["name"] for v in pod.get("volumes", [])}
            for m in pod["containers"][0].get("volumeMounts", []):
                if m["name"] not in volumes:
                    fail.append(f"helm {name}: mount {m['name']} has no volume")
for otel in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)PROTOCOL",
             "OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)HEADERS"):
    if otel not in help_text:
        fail.append(f"`dcgm-otel --help` no longer mentions {otel}")
r = subprocess.run([os.path.join(venv, "kubernetes-validate"), "--strict", "--quiet", *builtin_files],
                   capture_output=True, text=True)
if r.returncode != 0:
    fail.append(f"kubernetes-validate --strict:\n{r.stdout}{r.stderr}")


def find(docs, kind, name=None):
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs, kind, case):
    found = find(docs, kind)
    if len(found) != 1:
        fail.append(f"helm {case}: expected one {kind}, found {len(found)}")
        return {}
    return found[0]


def container(docs, case):
    ds = one(docs, "DaemonSet", case)
    return ds.get("spec", {}).get("template", {}).get("spec", {}), \
        (ds.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}])[0]


def env_of(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


# 4. defaults == deploy/kubernetes/
def normalize(d):
    d = copy.deepcopy(d)
    d["metadata"].pop("labels", None)
    d["metadata"].pop("annotations", None)
    if d["kind"] == "DaemonSet":
        d["spec"].pop("selector", None)
        d["spec"]["template"].pop("metadata", None)
    if d["kind"] == "Service":
        d["spec"].pop("selector", None)
    return d


manifests = []
for p in sorted(glob.glob("deploy/kubernetes/*.yaml")):
    with open(p) as f:
        manifests += [d for d in yaml.safe_load_all(f) if d and d["kind"] != "Namespace"]
defaults = {(d["kind"], d["metadata"]["name"]): normalize(d) for d in rendered["defaults"]}
for m in manifests:
    key = (m["kind"], m["metadata"]["name"])
    if key not in defaults:
        fail.append(f"helm defaults: no {key[0]} {key[1]} as in deploy/kubernetes/")
    else:
        got = defaults.pop(key)
        if got != normalize(m):
            diff = difflib.unified_diff(yaml.safe_dump(normalize(m)).splitlines(), yaml.safe_dump(got).splitlines(),
                                        "deploy/kubernetes", "chart defaults", lineterm="")
            fail.append(f"helm defaults: {key[0]} {key[1]} differs from deploy/kubernetes/:\n" + "\n".join(diff))
if defaults:
    fail.append(f"helm defaults: objects not in deploy/kubernetes/: {sorted(defaults)}")
ds = one(rendered["defaults"], "DaemonSet", "defaults")
svc = one(rendered["defaults"], "Service", "defaults")
pod_labels = ds.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
for sel in (ds.get("spec", {}).get("selector", {}).get("matchLabels", {}), svc.get("spec", {}).get("selector", {})):
    if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
        fail.append(f"helm defaults: selector {sel} does not select the pods ({pod_labels})")

# 5. per values file
CLUSTER_ROLE_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                      {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
                       "verbs": ["get", "list", "watch"]}]
for case, docs in rendered.items():
    pod, c = container(docs, case)
    env = env_of(c)
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    caps = (c.get("securityContext") or {}).get("capabilities") or {}
    roles = find(docs, "ClusterRole")
    live, ready = c.get("livenessProbe", {}), c.get("readinessProbe", {})
    if case == "defaults":
        if roles or find(docs, "Secret") or pod.get("automountServiceAccountToken") is not False:
            fail.append("helm defaults: RBAC, a Secret or a mounted token")
    if case in ("pod-labels-dra", "all-features"):
        if not roles or roles[0]["rules"] != CLUSTER_ROLE_RULES:
            fail.append(f"helm {case}: the ClusterRole is not get/list/watch on pods and resourceslices only: {roles}")
        binding = find(docs, "ClusterRoleBinding")
        if not binding or binding[0]["subjects"][0]["name"] != pod.get("serviceAccountName"):
            fail.append(f"helm {case}: the ClusterRoleBinding does not bind the pods' ServiceAccount")
        if pod.get("automountServiceAccountToken") is not True:
            fail.append(f"helm {case}: the API needs the ServiceAccount token mounted")
        for k in ("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
                  "KUBERNETES_ENABLE_DRA", "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"):
            if k not in env:
                fail.append(f"helm {case}: {k} not set")
    if case == "pod-uid":
        # issue 35: UIDs from the API; nothing of the kubelet's device-plugins directory is mounted
        want = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
        if not roles or roles[0]["rules"] != want or pod.get("automountServiceAccountToken") is not True:
            fail.append(f"helm pod-uid: UIDs come from the API: get/list/watch on pods, the token mounted: {roles}")
        if env.get("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID") != "true":
            fail.append("helm pod-uid: DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID not set")
    for v in pod.get("volumes", []):
        if "device-plugins" in (v.get("hostPath") or {}).get("path", ""):
            fail.append(f"helm {case}: hostPath {v['hostPath']['path']} exposes the kubelet's device-plugin sockets")
    if (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True or mounts.get("/tmp") != "tmp":
        fail.append(f"helm {case}: readOnlyRootFilesystem must be true, with the tmp emptyDir at /tmp")
    if case == "mtls":
        # the kubelet's probes have no client certificate: an httpGet probe would fail the handshake
        if "tcpSocket" not in live or "tcpSocket" not in ready:
            fail.append(f"helm mtls: probes must be tcpSocket when a client certificate is required: {live}, {ready}")
        web = next((s["stringData"]["web-config.yml"] for s in find(docs, "Secret")
                    if s["metadata"]["name"].endswith("-web-config")), "")
        if "client_auth_type: RequireAndVerifyClientCert" not in web:
            fail.append(f"helm mtls: the web config does not require client certificates: {web}")
    if case == "no-profiling" and ("SYS_ADMIN" in (caps.get("add") or []) or caps.get("drop") != ["ALL"]):
        fail.append(f"helm no-profiling: capabilities {caps}")
    if case == "defaults" and (caps.get("add") != ["SYS_ADMIN"] or caps.get("drop") != ["ALL"]):
        fail.append(f"helm defaults: capabilities {caps}")
    if case == "otlp-only":
        if find(docs, "Service") or "DCGM_EXPORTER_KUBERNETES" in env or "/var/lib/kubelet/pod-resources" in mounts:
            fail.append("helm otlp-only: a Service or Kubernetes attribution")
        want = {"DCGM_OTEL_OTLP": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.vendor.example.com:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "DCGM_OTEL_METRIC_NAMES": "semconv",
                "DCGM_OTEL_OTLP_LOGS": "false",
                "OTEL_EXPORTER_OTLP_HEADERS": {"secretKeyRef": {"name": "otlp-vendor", "key": "headers"}}}
        for k, v in want.items():
            if env.get(k) != v:
                fail.append(f"helm otlp-only: {k} is {env.get(k)!r}, expected {v!r}")
    if case in ("all-features", "existing-counters"):
        if mounts.get("/host/proc") != "host-proc" or env.get("DCGM_OTEL_PROC_ROOT") != "/host/proc":
            fail.append(f"helm {case}: the host's /proc is not mounted at /host/proc and named")
    if case == "counters-from-api":
        role = find(docs, "Role")
        want = [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [f"{RELEASE}-counters"],
                 "verbs": ["get", "list", "watch"]}]
        if not role or role[0]["rules"] != want or not find(docs, "RoleBinding") or roles:
            fail.append(f"helm counters-from-api: the Role must be get/list/watch on the one ConfigMap: {role}")
        if env.get("DCGM_EXPORTER_CONFIGMAP_DATA") != f"{NAMESPACE}:{RELEASE}-counters" or \
                pod.get("automountServiceAccountToken") is not True:
            fail.append("helm counters-from-api: -m must name the chart's ConfigMap, with the token mounted")
    if case == "existing-counters":
        vol = next((v for v in pod.get("volumes", []) if v["name"] == "counters"), {})
        if find(docs, "ConfigMap") or vol.get("configMap") != {
                "name": "my-gpu-counters", "items": [{"key": "dcp-metrics.csv", "path": "default-counters.csv"}]}:
            fail.append(f"helm existing-counters: counters volume {vol}")
    if case == "all-features":
        for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
            one(docs, kind, case)
        # issue 35: the target's labels win by default (the GPU's arrive as exported_pod, ...)
        for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
            for m in find(docs, kind):
                if any(ep.get("honorLabels") is not False for ep in m["spec"][key]):
                    fail.append(f"helm all-features: {kind} honorLabels must default to false")
        rule = find(docs, "PrometheusRule")
        groups = []
        for p in sources:
            with open(p) as f:
                groups += yaml.safe_load(f)["groups"]
        if rule and rule[0]["spec"]["groups"] != groups:
            fail.append("helm all-features: the PrometheusRule's groups differ from prometheus/rules/")
        cm = find(docs, "ConfigMap")
        with open(f"{CHART}/ci/all-features-values.yaml") as f:
            custom = yaml.safe_load(f)["customMetrics"]
        if not cm or cm[0]["data"]["metrics"] != custom:
            fail.append("helm all-features: customMetrics is not the ConfigMap's data")
    if case in ("tls-auth", "all-features"):
        for p in (live, ready):
            if (p.get("httpGet") or {}).get("scheme") != "HTTPS":
                fail.append(f"helm {case}: probe {p} is not HTTPS")
        if env.get("DCGM_OTEL_WEB_HEALTH_AUTH") != "false":
            fail.append(f"helm {case}: probes send no credentials: /health and /ready must be open")
    if case == "tls-existing-auth-tcp":
        if "tcpSocket" not in live or "tcpSocket" not in ready or "DCGM_OTEL_WEB_HEALTH_AUTH" in env:
            fail.append("helm tls-existing-auth-tcp: probes must be tcpSocket with auth on /health")
        tls = next((v for v in pod.get("volumes", []) if v["name"] == "tls"), {})
        if (tls.get("secret") or {}).get("secretName") != "my-dcgm-otel-tls" or \
                [s for s in find(docs, "Secret") if s["metadata"]["name"].endswith("-tls")]:
            fail.append(f"helm tls-existing-auth-tcp: the existing TLS Secret is not the one mounted: {tls}")
    if case == "collector-receiver":
        # issue 36: the collector with the dcgm receiver in place of the exporter, its config from the values
        with open(f"{CHART}/values.yaml") as f:
            config = yaml.safe_load(f)["collectorReceiver"]["config"]
        cm = [m for m in find(docs, "ConfigMap") if m["metadata"]["name"] == f"{RELEASE}-collector"]
        vol = next((v for v in pod.get("volumes", []) if v["name"] == "collector-config"), {})
        if not c["image"].startswith("dcgm-otel-collector:") or c.get("args") != ["--config=/etc/otelcol-dcgm/config.yaml"]:
            fail.append(f"helm collector-receiver: the container runs {c['image']} {c.get('args')}")
        if not cm or yaml.safe_load(cm[0]["data"]["config.yaml"]) != config or \
                (vol.get("configMap") or {}).get("name") != f"{RELEASE}-collector" or \
                mounts.get("/etc/otelcol-dcgm") != "collector-config":
            fail.append("helm collector-receiver: collectorReceiver.config is not the mounted ConfigMap's config.yaml")
        if find(docs, "Service") or set(env) != {"NODE_NAME"} or mounts.get("/etc/dcgm-exporter") != "counters":
            fail.append(f"helm collector-receiver: a Service, variables other than NODE_NAME ({sorted(env)}) or no counters")
        if (live.get("httpGet") or {}).get("port") != "health" or (ready.get("httpGet") or {}).get("port") != "health":
            fail.append(f"helm collector-receiver: probes must ask the health_check extension: {live}, {ready}")
    if case == "defaults" or case == "pod-labels-dra":
        if (live.get("httpGet") or {}).get("path") != "/health" or (ready.get("httpGet") or {}).get("path") != "/ready":
            fail.append(f"helm {case}: liveness must be GET /health, readiness GET /ready")


# 5b. the generated web config works with the binary: HTTPS, bcrypt basic auth, open probes
def curl(url, *args):
    r = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", *args, url],
                       capture_output=True, text=True)
    return r.stdout


docs = rendered["tls-auth"]
secrets = {s["metadata"]["name"]: s for s in find(docs, "Secret")}
web = secrets.get(f"{RELEASE}-web-config", {}).get("stringData", {}).get("web-config.yml", "")
tls = secrets.get(f"{RELEASE}-tls", {}).get("data", {})
if not web or "tls.crt" not in tls:
    fail.append(f"helm tls-auth: no web config or TLS Secret ({sorted(secrets)})")
else:
    import base64
    tls_dir = os.path.join(tmp, "tls")
    os.makedirs(tls_dir, exist_ok=True)
    for k, v in tls.items():
        with open(os.path.join(tls_dir, k), "wb") as f:
            f.write(base64.b64decode(v))
    path = os.path.join(tmp, "web-config.yml")
    with open(path, "w") as f:
        f.write(web.replace("/etc/dcgm-otel/tls/", tls_dir + "/"))
    with open(f"{CHART}/ci/tls-auth-values.yaml") as f:
        user, password = next(iter(yaml.safe_load(f)["basicAuth"]["users"].items()))
    # :0: the binary binds a port itself and says which in its "serving /metrics" line.
    log = os.path.join(tmp, "tls-auth-dcgm-otel.log")
    with open(log, "w") as err_file:
        proc = subprocess.Popen([binary, "--simulate", "-c", "500", "-a", "127.0.0.1:0",
                                 "--web-config-file", path, "--web-health-auth=false"],
                                stdout=subprocess.DEVNULL, stderr=err_file,
                                env={**os.environ, "DCGM_EXPORTER_KUBERNETES": "false"})
    try:
        port = listening.port_in_log(log, "serving /metrics", 20, lambda: proc.poll() is not None)
        base = f"https://127.0.0.1:{port}"
        deadline = time.time() + 20
        while curl(base + "/ready") != "200" and time.time() < deadline:
            time.sleep(0.2)
        got = (curl(base + "/ready"), curl(base + "/health"), curl(base + "/metrics"),
               curl(base + "/metrics", "-u", f"{user}:{password}"), curl(base + "/metrics", "-u", f"{user}:wrong"),
               curl(f"http://127.0.0.1:{port}/metrics", "-u", f"{user}:{password}"))
        if got[:5] != ("200", "200", "401", "200", "401") or got[5] == "200":
            fail.append(f"helm tls-auth: the binary with the chart's web config answered {got} to /ready, /health, "
                        f"/metrics without, with and with wrong credentials, plain HTTP (expected 200 200 401 200 401, "
                        f"no 200 over HTTP)")
    except RuntimeError as e:
        fail.append(f"helm tls-auth: the binary with the chart's web config did not serve: {e}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if any(f.startswith("helm tls-auth: the binary") for f in fail):
        with open(log, errors="replace") as f:
            fail.append(f.read())

if fail:
    print("\n".join("FAIL: " + m for m in fail), file=sys.stderr)
    sys.exit(1)
n = sum(len(d) for d in rendered.values())
print(f"helm: chart {chart['version']} (= Cargo.toml); lint --strict and template of {len(cases)} values sets "
      f"({', '.join(c for c, _ in cases)}): {n} objects, {len(builtin_files)} pass kubernetes-validate --strict, "
      f"the Prometheus Operator objects validate against the vendored CRDs; defaults = deploy/kubernetes/; "
      f"the generated web config serves HTTPS with bcrypt basic auth")
