#!/usr/bin/env python3
"""dcgm-otel's collector configurations and its OTLP output, through a real OpenTelemetry Collector.

The collector is tests/collector's distribution (tests/collector/build.sh builds it once per machine).
tests/run-all.sh runs every step; each also runs alone:

  validate OTELCOL           every collector configuration the repository ships or shows (found by
                             collector_configs.py: otel-config/, compose files, fenced blocks in docs/ and the
                             README, the Helm chart, deploy/) passes `otelcol validate`, with the environment
                             variables it names set (ENV_VALUES), and uses no deprecated component name; the
                             distribution has every component tests/collector/builder-config.yaml lists
  cloudwatch OTELCOL BIN [S] every shipped configuration with an awsemf exporter runs with awsemf's endpoint at
                             a fake CloudWatch Logs API (fake_cloudwatch_logs.py), fed by dcgm-otel as its
                             header says (CLOUDWATCH_RUNS: OTLP push, or the prometheus receiver scraping
                             :9400) on the demo and dgx-h100-mig scenarios; the EMF awsemf wrote is checked
                             (emf_check.py): every declaration's metrics with their dimension sets, CloudWatch
                             units fitting the units sent, each measurement once per dimension set, power and
                             temperature for every physical GPU, the per-pod cost counters of every pod
  file-export OTELCOL BIN    every built-in scenario pushed (gRPC and HTTP, --distribution, processes,
                             incidents) to a collector writing what it accepted with the file exporter: the
                             points of a request equal dcgm_otel_otlp_data_points, nothing refused,
                             schema_url kept, exponential histograms accepted, log records intact
  memory-limiter OTELCOL BIN a collector whose memory_limiter refuses everything: metrics requests are retried
                             5 times and then given up, the pending queue drops the oldest beyond 8, log
                             requests are retried without end and their records wait in the buffer
                             (docs/otlp.md, docs/incidents.md)
  receiver OTELCOL BIN       the dcgm receiver (issue 36) beside the standalone binary BIN, on the simulator and on
                             the fake libdcgm: its first request, as the file exporter wrote it, equals the binary's
                             first OTLP request through the otlp receiver, timestamps aside; incident log records
                             too (receiver_checks.py; the engine library and the fake are taken from BIN's folder)
  receiver-faults OTELCOL BIN  reloads (SIGHUP) through none / one / two receivers leak no thread and no memory, a
                             panic in the engine is an error and collections go on, a hung DCGM call does not hold
                             the collector's shutdown (receiver_checks.py)

Uses the standard library and PyYAML (the project's .venv).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import collector_configs  # noqa: E402
import emf_check  # noqa: E402
import receiver_checks  # noqa: E402
from collector_run import (AWS_ENV, PortTaken, Processes, TestFailure, fail, http_get,  # noqa: E402
                           local_overlay, metric_sum, parse_prometheus, read_json_lines, self_metrics,
                           start_collector, start_dcgm_otel, telemetry_overlay, wait_log, wait_until,
                           with_collector_ports, write_yaml)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Values for the environment variables the shipped configurations name (`${env:NAME}`), as a user would set them.
ENV_VALUES = {
    "VENDOR_OTLP_ENDPOINT": "https://otlp.vendor.example",
    "VENDOR_AUTH_HEADER": "Bearer test-token",
    "AWS_REGION": "us-east-1",
    "K8S_NODE_NAME": "gpu-node-1",
}
ENV_REF = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}")


# --- 1. validate --------------------------------------------------------------------------------------------
def builder_components():
    """{kind: [module path]} of tests/collector/builder-config.yaml."""
    with open(os.path.join(ROOT, "tests/collector/builder-config.yaml")) as f:
        cfg = yaml.safe_load(f)
    return {kind: [e["gomod"].split()[0] for e in cfg.get(kind) or []]
            for kind in ("receivers", "processors", "exporters", "extensions", "connectors")}


def env_names(node):
    """The environment variables a parsed configuration refers to (`${env:NAME}`, `${NAME}`), comments aside."""
    if isinstance(node, dict):
        return set().union(set(), *(env_names(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(set(), *(env_names(v) for v in node))
    return set(ENV_REF.findall(node)) if isinstance(node, str) else set()


def old_names(cfg, current):
    """Component ids whose type is not a current name of the collector (validate accepts deprecated aliases)."""
    return sorted(f"{kind}.{cid}" for kind in current for cid in (cfg.get(kind) or {})
                  if cid.split("/", 1)[0] not in current[kind])


def cmd_validate(otelcol):
    found, unexplained = collector_configs.find(ROOT)
    errors = [f"{path}: has a receivers:/exporters: line but no collector configuration was found in it "
              f"(teach tests/collector/collector_configs.py its form)" for path in unexplained]
    if len(found) < 4:
        errors.append(f"only {len(found)} collector configurations found; otel-config/ alone has more")
    # every component of the builder configuration is in the binary; its current names (a deprecated alias,
    # such as otlphttp, still validates: the collector only warns when it starts)
    listed = yaml.safe_load(subprocess.run([otelcol, "components"], capture_output=True, text=True, check=True).stdout)
    current = {kind: {e["name"] for e in listed.get(kind) or []} for kind in builder_components()}
    modules = {e["module"].split()[0] for kind in current for e in listed.get(kind) or []}
    for kind, wanted in builder_components().items():
        for module in wanted:
            if module not in modules:
                errors.append(f"`otelcol components` does not list {module} ({kind} of builder-config.yaml): "
                              f"rerun tests/collector/generate.sh")
    with tempfile.TemporaryDirectory() as work:
        for n, c in enumerate(found):
            names = sorted(env_names(yaml.safe_load(c.text)))
            unknown = [v for v in names if v not in ENV_VALUES]
            if unknown:
                errors.append(f"{c.name}: names environment variables {unknown}: give them a value in ENV_VALUES "
                              f"of {os.path.basename(__file__)}")
                continue
            path = os.path.join(work, f"config-{n}.yaml")
            with open(path, "w") as f:
                f.write(c.text)
            env = {k: v for k, v in os.environ.items() if k not in ENV_VALUES}
            env.update({k: ENV_VALUES[k] for k in names})
            r = subprocess.run([otelcol, "validate", f"--config=file:{path}"], capture_output=True, text=True,
                               env=env, timeout=60)
            out = (r.stdout + r.stderr).strip()
            if r.returncode != 0:
                errors.append(f"{c.name}: otelcol validate failed:\n    " + out.replace("\n", "\n    "))
            elif old_names(yaml.safe_load(c.text), current):
                errors.append(f"{c.name}: deprecated component names {old_names(yaml.safe_load(c.text), current)}: "
                              f"use the current ones (`otelcol components` lists them)")
            else:
                print(f"ok: {c.name}: otelcol validate" + (f" (with {', '.join(names)} set)" if names else ""))
    if errors:
        fail("\n".join(errors))
    print(f"ok: {len(found)} collector configurations found and valid")


# --- 3. CloudWatch through awsemf ---------------------------------------------------------------------------
def field_levels():
    """{DCGM field name: entity level (GPU, GPU_I, GPU_CI, ...)} from src/fields/dcgm-fields.tsv."""
    out = {}
    with open(os.path.join(ROOT, "src/fields/dcgm-fields.tsv")) as f:
        next(f)
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) > 3:
                out[cols[0]] = cols[3]
    return out


def otlp_identity(metric, labels):
    """A measurement on the OTLP path: a device reading is the same whichever k8s.* attributes it carries; a
    pod's or process's share (nvidia.pod.*, nvidia.process.*) is the holder's own."""
    if metric.startswith(("nvidia.pod.", "nvidia.process.")):
        return tuple(sorted(labels.items()))
    return tuple(sorted((k, v) for k, v in labels.items() if not k.startswith("k8s.")))


def prometheus_identity(levels):
    """A measurement on the :9400 path (dcgm-exporter's shape): a board field (DCGM scope GPU) is the GPU's,
    whichever pod or MIG instance series repeats it; an instance field is its GPU instance's; a cost counter
    is the pod's share of its device."""
    def identity(metric, labels):
        if metric.startswith("dcgm_otel_pod_"):
            keys = ("Hostname", "UUID", "GPU_I_ID", "namespace", "pod", "container")
        elif levels.get(metric) == "GPU":
            keys = ("Hostname", "UUID")
        else:
            keys = ("Hostname", "UUID", "GPU_I_ID")
        return tuple((k, labels.get(k, "")) for k in keys)
    return identity


# How each shipped CloudWatch configuration is fed, as its header says; the names a check needs.
OTLP_NAMES = {"host": "host.name", "gpu_id": "hw.id", "gpu_index": "nvidia.gpu.index",
              "namespace": "k8s.namespace.name", "pod": "k8s.pod.name",
              "cost": ["nvidia.pod.gpu.time", "nvidia.pod.gpu.energy", "nvidia.pod.gpu.idle_time"]}
CLOUDWATCH_RUNS = {
    "otel-config/cloudwatch.yaml": dict(
        OTLP_NAMES, feed="otlp", args=["--otlp-logs=false"],
        power=("DCGM_FI_DEV_POWER_USAGE", {}), temperature=("DCGM_FI_DEV_GPU_TEMP", {})),
    "otel-config/cloudwatch-semconv.yaml": dict(
        OTLP_NAMES, feed="otlp", args=["--otlp-logs=false", "--otel-metric-names", "semconv"],
        power=("hw.power", {}), temperature=("hw.temperature", {"hw.sensor_location": "gpu"})),
    "otel-config/cloudwatch-prometheus.yaml": dict(
        feed="prometheus", args=[], host="Hostname", gpu_id="UUID", gpu_index="gpu", namespace="namespace",
        pod="pod", cost=["dcgm_otel_pod_gpu_seconds_total", "dcgm_otel_pod_gpu_energy_joules_total",
                         "dcgm_otel_pod_gpu_idle_seconds_total"],
        power=("DCGM_FI_DEV_POWER_USAGE", {}), temperature=("DCGM_FI_DEV_GPU_TEMP", {})),
}
# The scenarios every CloudWatch configuration runs on (one dcgm-otel each, its own host name): the demo
# node (a GPU time-sliced by two pods, pods on MIG instances, the DCGM_EXP_* rows and PCIe byte totals
# the semconv declarations select) and dgx-h100-mig (whole GPUs held by one pod each, a time-sliced one,
# four GPUs in MIG mode with pods on instances).
CLOUDWATCH_SCENARIOS = ("demo", "dgx-h100-mig")


def fleet_of(metrics_url):
    """(physical GPUs {(host, UUID)}, pods {(host, namespace, pod)}) as dcgm-otel's :9400 shows them."""
    s = self_metrics(metrics_url)
    gpus = {(l["Hostname"], l["UUID"]) for n, l, _ in s if n == "DCGM_FI_DEV_GPU_TEMP"}
    pods = {(l["Hostname"], l["namespace"], l["pod"]) for n, l, _ in s if n == "dcgm_otel_pod_gpu_seconds_total"}
    return gpus, pods


def coverage_errors(run, published, gpus, pods):
    """Every physical GPU publishes power and temperature in a per-GPU series; every pod its cost counters."""
    errors = []
    for what in ("power", "temperature"):
        name, must = run[what]
        have = {(s.labels.get(run["host"]), s.labels.get(run["gpu_id"])) for s in published
                if s.metric == name and run["gpu_index"] in s.dims and all(s.labels.get(k) == v for k, v in must.items())}
        for host, uuid in sorted(gpus - have):
            errors.append(f"GPU {uuid} of {host}: no {what} series ({name}) in CloudWatch")
    for name in run["cost"]:
        have = {(s.labels.get(run["namespace"]), s.labels.get(run["pod"])) for s in published
                if s.metric == name and run["pod"] in s.dims}
        for host, ns, pod in sorted(pods):
            if (ns, pod) not in have:
                errors.append(f"pod {ns}/{pod} of {host}: no {name} series in CloudWatch")
    return errors


def cloudwatch_overlay(cfg, ports, fake_url, scrape_targets, sent_path):
    """The local overlay, plus a file exporter beside awsemf in its pipeline (what the collector passed to
    awsemf, for the names and units sent)."""
    overlay = local_overlay(cfg, ports, scrape_targets=scrape_targets, cloudwatch=fake_url)
    overlay.setdefault("exporters", {})["file/sent"] = {"path": sent_path, "flush_interval": "100ms"}
    for pid, p in (cfg["service"]["pipelines"]).items():
        if any(e.split("/", 1)[0] == "awsemf" for e in p.get("exporters") or []):
            overlay["service"].setdefault("pipelines", {})[pid] = {"exporters": list(p["exporters"]) + ["file/sent"]}
    return overlay


def sent_metrics(path):
    """{metric name: unit} of what the collector passed to its exporters (file exporter JSON lines)."""
    out = {}
    for doc in read_json_lines(path):
        for rm in doc.get("resourceMetrics") or []:
            for sm in rm.get("scopeMetrics") or []:
                for m in sm.get("metrics") or []:
                    out[m["name"]] = m.get("unit", "")
    return out


def run_cloudwatch(otelcol, binary, rel, run, work):
    path = os.path.join(ROOT, rel)
    with open(path) as f:
        cfg = yaml.safe_load(f)
    emf_cfg = next(c for cid, c in cfg["exporters"].items() if cid.split("/", 1)[0] == "awsemf")
    recorded = os.path.join(work, "cloudwatch-requests.jsonl")
    sent_path = os.path.join(work, "sent.jsonl")
    with Processes(work) as procs:
        fake = procs.start("fake-cloudwatch-logs", [sys.executable, os.path.join(ROOT, "tests/collector/fake_cloudwatch_logs.py"),
                                                    "0", recorded])
        wait_log(procs, fake, r"^listening \d+", 10, "fake CloudWatch Logs API")
        with open(procs.log_of(fake)) as f:
            fake_url = "http://127.0.0.1:" + re.search(r"listening (\d+)", f.read()).group(1)

        def start(ports):
            """The nodes (pushing to the collector's OTLP port) and the collector (scraping them), again
            from the nodes on when the collector found one of its ports taken."""
            exporters = []
            for scenario in CLOUDWATCH_SCENARIOS:
                env = {"NODE_NAME": f"cw-{scenario}"}
                args = [f"--simulate={scenario}", "-c", "1000", "-k", "--kubernetes-enable-pod-labels"] + run["args"]
                if run["feed"] == "otlp":
                    args += ["--otlp", "--otlp-protocol", "grpc", "--otlp-endpoint",
                             f"http://127.0.0.1:{ports['otlp_grpc']}"]
                exporters.append(start_dcgm_otel(procs, binary, f"dcgm-otel-{scenario}", args, env))
            targets = [url.split("/")[2] for _, url in exporters]
            overlay = write_yaml(os.path.join(work, "overlay.yaml"),
                                 cloudwatch_overlay(cfg, ports, fake_url, targets, sent_path))
            env = dict(AWS_ENV)
            env.update({name: ENV_VALUES[name] for name in env_names(cfg) if name not in env})
            try:
                start_collector(procs, otelcol, "otelcol", [path, overlay], env)
            except PortTaken:
                for p, _ in exporters:
                    procs.stop(p)
                raise
            return exporters
        _, exporters = with_collector_ports(start)
        gpus, pods = set(), set()
        for _, url in exporters:
            g, p = fleet_of(url)
            gpus |= g
            pods |= p
        if not gpus or not pods:
            fail(f"{rel}: the scenarios {CLOUDWATCH_SCENARIOS} show no GPUs or no pods on :9400")

        def published_enough():
            docs, _ = emf_check.emf_events(recorded)
            got, _ = emf_check.samples(docs, emf_cfg["namespace"])
            return not coverage_errors(run, got, gpus, pods)
        try:
            wait_until(f"{rel}: power, temperature of every GPU and cost counters of every pod in CloudWatch", 90,
                       published_enough, interval_s=1)
        except TestFailure:
            pass  # the checks below say what is missing
    docs, operations = emf_check.emf_events(recorded)
    published, errors = emf_check.samples(docs, emf_cfg["namespace"])
    sent = sent_metrics(sent_path)
    errors += coverage_errors(run, published, gpus, pods)
    errors += emf_check.check_declarations(emf_cfg, published, set(sent))
    errors += emf_check.check_units(emf_cfg, published, sent if run["feed"] == "otlp" else {})
    identity = otlp_identity if run["feed"] == "otlp" else prometheus_identity(field_levels())
    errors += emf_check.check_each_measurement_once(emf_cfg, published, identity)
    calls = [op for op, _ in operations]
    for op in ("CreateLogGroup", "CreateLogStream", "PutLogEvents"):
        if op not in calls:
            errors.append(f"awsemf never called {op} (calls: {sorted(set(calls))})")
    unknown = sorted({op for op, status in operations if status != 200 and op not in
                      ("PutLogEvents", "CreateLogStream")})
    if unknown:
        errors.append(f"calls the fake refused: {unknown}")
    if errors:
        more = f"\n... and {len(errors) - 25} more" if len(errors) > 25 else ""
        fail(f"{rel}: " + f"\n{rel}: ".join(errors[:25]) + more)
    series = {(s.metric, s.dims, s.values) for s in published}
    print(f"ok: {rel}: {len(docs)} EMF events, {len(series)} CloudWatch series of {len({s.metric for s in published})} "
          f"metrics; every declaration published with its dimensions, CloudWatch units, each measurement once "
          f"per dimension set, power and temperature of {len(gpus)} GPUs, cost counters of {len(pods)} pods")


def cmd_cloudwatch(otelcol, binary, only=""):
    found, _ = collector_configs.find(ROOT)
    shipped = sorted({c.path for c in found if "awsemf" in {k.split("/", 1)[0] for k in
                                                            (yaml.safe_load(c.text).get("exporters") or {})}})
    missing = [p for p in shipped if p not in CLOUDWATCH_RUNS]
    if missing:
        fail(f"CloudWatch configurations without an entry in CLOUDWATCH_RUNS (how dcgm-otel feeds them): {missing}")
    for rel in sorted(CLOUDWATCH_RUNS):
        if rel not in shipped:
            fail(f"CLOUDWATCH_RUNS names {rel}, which is not a shipped configuration with an awsemf exporter")
        if only not in rel:
            continue
        with tempfile.TemporaryDirectory() as work:
            run_cloudwatch(otelcol, binary, rel, CLOUDWATCH_RUNS[rel], work)


# --- 4. the file exporter: what the collector accepted ---------------------------------------------------------
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
SCENARIO_ATTRIBUTE = "test.scenario"


def builtin_scenarios():
    folder = os.path.join(ROOT, "src/source/sim/scenarios")
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".yaml"))


def attr_value(v):
    for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if key in v:
            return str(v[key])
    return json.dumps(v)


def attrs_of(node):
    return {a["key"]: attr_value(a.get("value") or {}) for a in (node or {}).get("attributes") or []}


def points_of(metric):
    for kind in ("gauge", "sum", "histogram", "exponentialHistogram", "summary"):
        if kind in metric:
            return kind, metric[kind].get("dataPoints") or []
    return None, []


def summary_of(doc, top):
    """What the checks need of one request the collector wrote (a file exporter line), so that a large
    request is not kept: its scenario, item count, schema URLs, exponential histograms, log records."""
    res = doc.get(top) or []
    names = {attrs_of(r.get("resource")).get(SCENARIO_ATTRIBUTE) for r in res}
    scope_key = "scopeMetrics" if top == "resourceMetrics" else "scopeLogs"
    out = {"scenario": names.pop() if len(names) == 1 else f"mixed {sorted(map(str, names))}",
           "items": 0, "schema": set(), "histograms": 0, "problems": [], "xids": []}
    for r in res:
        out["schema"].add(r.get("schemaUrl"))
        resource = attrs_of(r.get("resource"))
        for sc in r.get(scope_key) or []:
            out["schema"].add(sc.get("schemaUrl"))
            for m in sc.get("metrics") or []:
                kind, points = points_of(m)
                out["items"] += len(points)
                if kind == "exponentialHistogram":
                    for p in points:
                        out["histograms"] += 1
                        held = sum(int(c) for side in ("positive", "negative")
                                   for c in (p.get(side) or {}).get("bucketCounts") or []) + int(p.get("zeroCount") or 0)
                        if not int(p.get("count") or 0) or int(p.get("count") or 0) != held:
                            out["problems"].append(f"{m['name']}: count {p.get('count')} but the buckets hold {held}")
            for rec in sc.get("logRecords") or []:
                out["items"] += 1
                for key in ("timeUnixNano", "severityNumber", "severityText", "eventName", "body"):
                    if not rec.get(key):
                        out["problems"].append(f"log record {rec.get('eventName')!r}: no {key}")
                if "host.name" not in resource:
                    out["problems"].append(f"log record {rec.get('eventName')!r}: its Resource has no host.name")
                xid = attrs_of(rec).get("nvidia.xid.code")
                if xid is not None:
                    out["xids"].append(xid)
    return out


class Written:
    """What a file exporter wrote (a JSON line per request), read as it grows, each line parsed once."""

    def __init__(self, path, top):
        self.path, self.top, self.offset, self.by_scenario = path, top, 0, {}

    def refresh(self):
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            for line in data[:end].splitlines():
                if line.strip():
                    summary = summary_of(json.loads(line), self.top)
                    self.by_scenario.setdefault(summary["scenario"], []).append(summary)
            self.offset += end
        return self.by_scenario

    def of(self, scenario):
        return self.refresh().get(scenario, [])


def collector_count(samples, name):
    """A counter of the collector's own metrics (named without _total since v0.1xx, with it before)."""
    return metric_sum(samples, name) + metric_sum(samples, name + "_total")


def scenario_has(scenario, key):
    with open(os.path.join(ROOT, "src/source/sim/scenarios", f"{scenario}.yaml")) as f:
        return bool((yaml.safe_load(f) or {}).get(key))


def xid_events(scenario):
    """The XID codes the scenario's events: list plays (one incident record each)."""
    with open(os.path.join(ROOT, "src/source/sim/scenarios", f"{scenario}.yaml")) as f:
        doc = yaml.safe_load(f)
    return sorted(str(e["xid"]) for e in doc.get("events") or [] if "xid" in e and "every" not in e)


def written_errors(scenario, summaries, kind, want_histograms):
    errors = []
    if not summaries:
        return [f"{scenario}: the collector wrote no {kind} request"]
    schemas = set().union(*(s["schema"] for s in summaries))
    if schemas != {SCHEMA_URL}:
        errors.append(f"{scenario}: {kind} schema URLs {sorted(map(str, schemas))}, expected {SCHEMA_URL} on every "
                      f"Resource and scope")
    problems = [p for s in summaries for p in s["problems"]]
    errors += [f"{scenario}: {p}" for p in sorted(set(problems))[:5]]
    if want_histograms and not any(s["histograms"] for s in summaries):
        errors.append(f"{scenario}: no exponential histogram accepted (--distribution is on)")
    return errors


def cmd_file_export(otelcol, binary):
    scenarios = builtin_scenarios()
    with tempfile.TemporaryDirectory() as work, Processes(work) as procs:
        metrics_file, logs_file = os.path.join(work, "metrics.jsonl"), os.path.join(work, "logs.jsonl")

        def start(ports):
            cfg = {
                "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{ports['otlp_grpc']}"},
                                                     "http": {"endpoint": f"127.0.0.1:{ports['otlp_http']}"}}}},
                "exporters": {"file/metrics": {"path": metrics_file, "flush_interval": "100ms"},
                              "file/logs": {"path": logs_file, "flush_interval": "100ms"}},
                "service": dict(telemetry_overlay(ports["telemetry"])["service"], pipelines={
                    "metrics": {"receivers": ["otlp"], "exporters": ["file/metrics"]},
                    "logs": {"receivers": ["otlp"], "exporters": ["file/logs"]}}),
            }
            return start_collector(procs, otelcol, "otelcol", [write_yaml(os.path.join(work, "collector.yaml"), cfg)])
        ports, _ = with_collector_ports(start)
        metrics, logs = Written(metrics_file, "resourceMetrics"), Written(logs_file, "resourceLogs")
        exporters = {}
        for i, scenario in enumerate(scenarios):
            grpc = i % 2 == 0
            endpoint = f"http://127.0.0.1:{ports['otlp_grpc' if grpc else 'otlp_http']}"
            args = [f"--simulate={scenario}", "-c", "250", "--otlp-export-interval", "2000",
                    "--distribution", "DCGM_FI_DEV_POWER_USAGE@50ms", "--otlp", "--otlp-endpoint", endpoint,
                    "--otlp-protocol", "grpc" if grpc else "http/protobuf",
                    "--otlp-compression", "gzip" if i % 4 in (1, 2) else "none"]
            if scenario_has(scenario, "processes"):  # without a scenario's processes it would ask NVML
                args.append("--collect-processes")
            env = {"OTEL_RESOURCE_ATTRIBUTES": f"{SCENARIO_ATTRIBUTE}={scenario}", "NODE_NAME": f"file-{scenario}"}
            exporters[scenario] = ("grpc" if grpc else "http/protobuf",) + start_dcgm_otel(
                procs, binary, f"dcgm-otel-{scenario}", args, env)
        errors = []
        for scenario, (protocol, proc, url) in exporters.items():
            wait_until(f"{scenario}: 2 OTLP exports delivered", 60,
                       lambda: metric_sum(self_metrics(url), "dcgm_otel_otlp_exports_total") >= 2)
            errors += last_request_errors(scenario, url, metrics, "points", "dcgm_otel_otlp_exports_total",
                                          "dcgm_otel_otlp_data_points", protocol)
            if xid_events(scenario):
                want = len(xid_events(scenario))
                wait_until(f"{scenario}: the scenario's {want} XIDs as log records", 60,
                           lambda: sum(len(s["xids"]) for s in logs.of(scenario)) >= want)
                errors += last_request_errors(scenario, url, logs, "records", "dcgm_otel_otlp_log_exports_total",
                                              "dcgm_otel_otlp_log_records", protocol)
                xids = sorted(x for s in logs.of(scenario) for x in s["xids"])
                if xids != sorted(xid_events(scenario)):
                    errors.append(f"{scenario}: XID log records {xids}, the scenario plays {sorted(xid_events(scenario))}")
                errors += written_errors(scenario, logs.of(scenario), "logs", False)
            procs.stop(proc)  # checked: its requests stop growing the file
            errors += written_errors(scenario, metrics.of(scenario), "metrics", True)
        # the collector's own account: nothing refused
        telemetry = parse_prometheus(http_get(f"http://127.0.0.1:{ports['telemetry']}/metrics"))
        for signal in ("metric_points", "log_records"):
            refused = collector_count(telemetry, f"otelcol_receiver_refused_{signal}")
            if refused:
                errors.append(f"the collector refused {refused:.0f} {signal.replace('_', ' ')}")
        mixed = [k for k in metrics.refresh() if k not in scenarios] + [k for k in logs.refresh() if k not in scenarios]
        if mixed:
            errors.append(f"requests of no single scenario: {mixed}")
        if errors:
            fail("\n".join(errors))
    print(f"ok: {len(scenarios)} built-in scenarios ({', '.join(scenarios)}) over gRPC and HTTP, gzip and not: the "
          f"collector accepted every data point and log record (the file exporter's count of a request equals "
          f"dcgm-otel's dcgm_otel_otlp_data_points / _log_records), schema_url kept, exponential histograms "
          f"accepted, the incidents' log records intact")


def last_request_errors(scenario, url, written, unit, exports_name, gauge_name, protocol):
    """The newest request the collector wrote for `scenario` has as many items as dcgm-otel says its last
    request had. dcgm-otel sets the gauge when it builds a request, so a reading counts only when the number
    of delivered exports and the gauge are the same before and after it (the export thread was idle)."""
    last = None
    for _ in range(30):
        before = self_metrics(url)
        delivered = int(metric_sum(before, exports_name, protocol=protocol))
        gauge = metric_sum(before, gauge_name, protocol=protocol)
        try:
            done = wait_until(f"{scenario}: {delivered} requests in the collector's file", 10,
                              lambda: written.of(scenario) if len(written.of(scenario)) >= delivered else None)
        except TestFailure as e:
            return [str(e)]
        after = self_metrics(url)
        stable = (int(metric_sum(after, exports_name, protocol=protocol)),
                  metric_sum(after, gauge_name, protocol=protocol)) == (delivered, gauge)
        if stable and len(done) == delivered and delivered:
            got = done[delivered - 1]["items"]
            if got == gauge:
                print(f"ok: {scenario}: request {delivered} ({protocol}): the collector accepted {got} {unit}, "
                      f"as {gauge_name} says")
                return []
            last = (got, gauge, delivered)
        time.sleep(0.1)
    if last is None:
        return [f"{scenario}: dcgm-otel never stood still long enough to compare {gauge_name}"]
    return [f"{scenario}: the collector wrote {last[0]} {unit} of request {last[2]}, dcgm-otel's {gauge_name} "
            f"says {last[1]}"]


# --- 5. memory_limiter refusing ---------------------------------------------------------------------------------
def cmd_memory_limiter(otelcol, binary):
    """A collector over its memory limit refuses every request (the otlp receiver answers with a retryable
    error): dcgm-otel retries each metrics request 5 times, then gives it up (retries_exhausted), keeps at
    most --otlp-max-pending requests and drops the oldest; log requests are retried until they are taken,
    and the records wait in the buffer (docs/otlp.md, docs/incidents.md)."""
    with tempfile.TemporaryDirectory() as work, Processes(work) as procs:
        written = os.path.join(work, "written.jsonl")

        def start(ports):
            cfg = {
                "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{ports['otlp_grpc']}"},
                                                     "http": {"endpoint": f"127.0.0.1:{ports['otlp_http']}"}}}},
                # A limit far below the collector's own heap: memory_limiter refuses everything, from its first check.
                "processors": {"memory_limiter": {"check_interval": "100ms", "limit_mib": 2, "spike_limit_mib": 1}},
                "exporters": {"file": {"path": written, "flush_interval": "100ms"}},
                "service": dict(telemetry_overlay(ports["telemetry"])["service"], pipelines={
                    sig: {"receivers": ["otlp"], "processors": ["memory_limiter"], "exporters": ["file"]}
                    for sig in ("metrics", "logs")}),
            }
            return start_collector(procs, otelcol, "otelcol", [write_yaml(os.path.join(work, "collector.yaml"), cfg)])
        ports, _ = with_collector_ports(start)
        # metrics over gRPC, incident log records over HTTP: both transports' answer to a refusal
        env = {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"http://127.0.0.1:{ports['otlp_http']}/v1/logs",
               "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/protobuf"}
        _, url = start_dcgm_otel(procs, binary, "dcgm-otel", [
            "--simulate=incidents", "-c", "250", "--otlp", "--otlp-protocol", "grpc",
            "--otlp-endpoint", f"http://127.0.0.1:{ports['otlp_grpc']}"], env)

        def settled():
            s = self_metrics(url)
            given_up = metric_sum(s, "dcgm_otel_otlp_export_failures_total", reason="retries_exhausted")
            dropped = metric_sum(s, "dcgm_otel_otlp_dropped_exports_total")
            log_retries = metric_sum(s, "dcgm_otel_otlp_log_retries_total")
            permanent = metric_sum(s, "dcgm_otel_otlp_export_failures_total", reason="permanent") + \
                metric_sum(s, "dcgm_otel_otlp_log_export_failures_total", reason="permanent")
            if permanent:
                fail(f"dcgm-otel gave up requests as permanently rejected ({permanent}): the collector's refusal "
                     f"is retryable")
            return s if given_up >= 2 and dropped >= 1 and log_retries >= 3 else None
        s = wait_until("2 metrics requests given up after their retries, 1 dropped, log requests retried", 90,
                       settled, interval_s=0.5)
        errors = []
        given_up = metric_sum(s, "dcgm_otel_otlp_export_failures_total", reason="retries_exhausted")
        retries = metric_sum(s, "dcgm_otel_otlp_retries_total")
        if not 5 * given_up <= retries <= 5 * given_up + 5:
            errors.append(f"{retries:.0f} metrics retries for {given_up:.0f} requests given up: 5 retries each "
                          f"(+ at most 5 of the request in flight) expected")
        for name in ("dcgm_otel_otlp_exports_total", "dcgm_otel_otlp_log_exports_total",
                     "dcgm_otel_otlp_log_export_failures_total"):
            if metric_sum(s, name):
                errors.append(f"{name} is {metric_sum(s, name):.0f} while the collector refuses everything")
        pending = metric_sum(s, "dcgm_otel_otlp_pending_exports")
        if pending > 8:
            errors.append(f"{pending:.0f} metrics requests pending: --otlp-max-pending is 8")
        if not metric_sum(s, "dcgm_otel_otlp_log_buffered_records"):
            errors.append("no incident log record waits in the buffer while the collector refuses them")
        telemetry = parse_prometheus(http_get(f"http://127.0.0.1:{ports['telemetry']}/metrics"))
        if not collector_count(telemetry, "otelcol_receiver_refused_metric_points"):
            errors.append("the collector's otelcol_receiver_refused_metric_points stayed 0")
        if read_json_lines(written):
            errors.append("the collector wrote data although its memory_limiter refuses everything")
        if errors:
            fail("\n".join(errors))
    print(f"ok: memory_limiter refusing: {given_up:.0f} metrics requests given up after {retries:.0f} retries "
          f"(5 each), {metric_sum(s, 'dcgm_otel_otlp_dropped_exports_total'):.0f} dropped from the full queue, "
          f"log requests retried {metric_sum(s, 'dcgm_otel_otlp_log_retries_total'):.0f} times and never given up, "
          f"{metric_sum(s, 'dcgm_otel_otlp_log_buffered_records'):.0f} records waiting")


def main(argv):
    commands = {"validate": cmd_validate, "cloudwatch": cmd_cloudwatch, "file-export": cmd_file_export,
                "memory-limiter": cmd_memory_limiter, "receiver": receiver_checks.cmd_receiver,
                "receiver-faults": receiver_checks.cmd_receiver_faults}
    if len(argv) < 2 or argv[1] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        commands[argv[1]](*argv[2:])
    except TestFailure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
