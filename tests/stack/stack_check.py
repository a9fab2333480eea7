#!/usr/bin/env python3
"""Checks behind tests/stack/run-stack-test.sh (the compose stack's configs and dashboards).

Subcommands:
  dockerfile FILE               facts the image must keep (no Docker engine here to build it): CI's release
                                build command, the counters CSV it copies exists, final stage non-root with
                                EXPOSE 9400 and a /health HEALTHCHECK, .dockerignore keeps the build inputs
  consistency                   the compose file, prometheus.yml, collector.yaml and Grafana provisioning agree
                                (mounted files exist, scrape targets are compose services on ports they
                                listen on, rule_files are mounted rule files, datasource name/uid,
                                dashboard paths, the collector image is the version tests/collector builds);
                                run from the repo root
  otel-configs FILE...          every component a pipeline names is defined, every defined one is used, plus a
                                few settings the stack depends on (listen addresses, prometheus translation,
                                ...); an awsemf exporter gives every declared metric a CloudWatch unit
                                (metric_descriptors) and declares only metrics dcgm-otel exports by default.
                                Component types and their deprecated aliases are the real collector's business
                                (tests/collector: otelcol validate)
  collector-accepted URL        the collector whose own metrics are at URL accepted OTLP points and refused none
                                (metrics and log records)
  otlp-doc-lines DOC URL...     every line of DOC's block after `<!-- collector-test: prometheus exporter -->`
                                names a metric the collector's prometheus exporter at URL serves, with exactly
                                the label names shown (values may differ)
  dashboard-facts DIR           the 12239-equivalent dashboard keeps the original's title family, variables,
                                panels, queries and units (facts: grafana/dcgm-exporter-dashboard.json in
                                NVIDIA/dcgm-exporter, dashboard 12239 on grafana.com)
  tsc DIR TSDIR                 type-check every dashboard JSON against @grafana/schema with tsc
  prom-config SRC DST PULL OTLP [SEMCONV [DCGM_STYLE]]
                                derive the CI scrape config from prometheus/prometheus.yml: the pull-path job
                                (dcgm-otel) scraping PULL (comma-separated targets) and the OTLP-path job
                                (otel-collector) scraping OTLP (tests/stack/otlp_standin.py), 1 s intervals;
                                other jobs dropped; rule_files made absolute (SRC's folder). With SEMCONV, a copy
                                of the OTLP-path job named otel-collector-semconv scraping SEMCONV (a stand-in fed
                                by dcgm-otel --otel-metric-names semconv); with DCGM_STYLE, another named
                                otel-collector-dcgm-style (dcgm-otel --otel-attribute-style dcgm)
  rules URL TIMEOUT_S FILE...   Prometheus at URL has loaded every rule group of the rule FILEs and evaluated
                                every rule without error (/api/v1/rules: health ok), within TIMEOUT_S
  queries DIR PROM_URL          run every panel query and variable query of every dashboard through
                                Prometheus' HTTP API; each must succeed and return data (except SKIP below)
  queries-dashboard DIR PROM_URL UID VAR=VALUE...
                                every query of dashboard UID with the variables given (e.g. instance = the
                                collector dcgm-otel --otel-attribute-style dcgm pushes to): data with the labels
                                its legend names
  queries-otlp DIR PROM_URL JOB run the panel queries that use $otlp_job with $otlp_job = JOB; each must
                                succeed and return data (the OTLP-path panels in another naming mode)
  wait-series URL SELECTOR TIMEOUT_S N   wait until every series of SELECTOR has N samples (bounded)
  wait-http URL TIMEOUT_S [STATUS]       wait until GET URL answers STATUS (default 200)
  free-port                     print a TCP port on 127.0.0.1 that was free a moment ago (racy: only for the
                                collector's listeners that cannot be :0, under run-stack-test.sh's retry)

Only the standard library and PyYAML are used.
"""
import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

# ------------------------------------------------------------------------------------------------------------
# Panels whose queries must parse and run but may return nothing in CI, with the reason. Keyed by dashboard
# uid and panel title. Nothing else may come back empty: the OTLP-path panels get their data from
# dcgm-otel --otlp through the real collector (otel-config/collector.yaml's prometheus exporter).
# The live stack runs `-k --kubernetes-enable-pod-labels` on the simulated cluster of the demo scenario,
# so the per-pod panels have data too: nothing is skipped.
SKIP = {}
# Targets (not whole panels) that may be empty: (uid, panel title, refId) -> reason.
SKIP_TARGETS = {}


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


# ------------------------------------------------------------------------------------------------------------
# dockerfile
CI_RELEASE_BUILD = "cargo build --release --locked"


def dockerfile_instructions(path):
    """(line, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf, start = [], "", 0
    for n, line in enumerate(open(path), 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        word, _, rest = buf.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    return out


def cmd_dockerfile(path):
    import fnmatch
    root = os.path.dirname(os.path.abspath(path))
    ins = dockerfile_instructions(path)
    errs = []
    stages, finals = [], {}
    for line, word, rest in ins:
        if word == "FROM":
            m = re.search(r"\bAS\s+(\S+)", rest, re.I)
            stages.append(m.group(1) if m else f"#{len(stages)}")
            finals[stages[-1]] = []
        elif stages:
            finals[stages[-1]].append((line, word, rest))
        if word == "COPY":
            m = re.search(r"--from=(\S+)", rest)
            if m and m.group(1) not in stages:
                errs.append(f"line {line}: COPY --from={m.group(1)} names no earlier stage")
    runs = " ".join(rest for _, word, rest in ins if word == "RUN")
    if CI_RELEASE_BUILD not in runs:
        errs.append(f"no RUN uses CI's release build command '{CI_RELEASE_BUILD}'")
    for src in re.findall(r"install\s+(?:-m\s+\S+\s+|-\S+\s+)*(\S+)\s+/out/", runs):
        if not src.startswith("target/") and not os.path.exists(os.path.join(root, src)):
            errs.append(f"the image installs {src}, which does not exist in the repository")
    if "/etc/dcgm-exporter/default-counters.csv" not in runs:
        errs.append("the default counters CSV is not installed at /etc/dcgm-exporter/default-counters.csv")
    last = stages[-1] if stages else None
    body = finals.get(last, [])
    users = [rest for _, word, rest in body if word == "USER"]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        errs.append(f"final stage '{last}' must switch to a non-root USER")
    if not any(word == "EXPOSE" and "9400" in rest.split() for _, word, rest in body):
        errs.append(f"final stage '{last}' must EXPOSE 9400")
    hcs = [rest for _, word, rest in ins if word == "HEALTHCHECK"]
    if not hcs:
        errs.append("no HEALTHCHECK")
    for hc in hcs:
        m = re.search(r"CMD\s+(\[.*\])\s*$", hc)
        if not m:
            errs.append("HEALTHCHECK must use the exec form CMD [...]")
            continue
        try:
            argv = json.loads(m.group(1))
        except ValueError as e:
            errs.append(f"HEALTHCHECK CMD is not a JSON array: {e}")
            continue
        if "/health" not in " ".join(argv):
            errs.append("HEALTHCHECK does not probe /health")
    ignore = os.path.join(root, ".dockerignore")
    patterns = [l.strip() for l in open(ignore) if l.strip() and not l.startswith("#")] if os.path.exists(ignore) else []
    for needed in ("Cargo.toml", "Cargo.lock", "build.rs", "src/main.rs", "src/counters/default-counters.csv",
                   "benches", "tests/fake-libdcgm/Cargo.toml"):
        if not os.path.exists(os.path.join(root, needed)):
            continue
        parts = needed.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        for pat in patterns:
            if not pat.startswith("!") and any(fnmatch.fnmatch(pre, pat.strip("/")) for pre in prefixes):
                errs.append(f".dockerignore pattern '{pat}' drops {needed}, which the build needs")
    for e in errs:
        print(f"FAIL: {path}: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    installed = re.findall(r"install\s+(?:-m\s+\S+\s+|-\S+\s+)*(\S+)\s+/out/", runs)
    print(f"ok: {path}: stages {', '.join(stages)}; installs {', '.join(installed)}; "
          f"final stage '{last}' runs as {users[-1]}")


# ------------------------------------------------------------------------------------------------------------
# consistency between the stack's files
def cmd_consistency():
    errs = []
    compose = load_yaml("docker-compose.yaml")
    services = compose.get("services") or {}

    def mounts(svc):
        out = {}
        for v in services.get(svc, {}).get("volumes") or []:
            parts = v.split(":")
            if parts[0].startswith("./"):
                out[parts[1]] = parts[0]
        return out

    def container_ports(svc):
        ports = set()
        for p in services.get(svc, {}).get("ports") or []:
            ports.add(str(p).split(":")[-1].split("/")[0])
        for p in services.get(svc, {}).get("expose") or []:
            ports.add(str(p))
        return ports

    for svc in services:
        for target, src in mounts(svc).items():
            if not os.path.exists(src):
                errs.append(f"compose: {svc} mounts {src}, which does not exist")

    # Prometheus scrape targets are compose services, on ports they publish or expose
    prom_cfg_path = mounts("prometheus").get("/etc/prometheus/prometheus.yml")
    if not prom_cfg_path:
        errs.append("compose: prometheus does not mount a prometheus.yml at /etc/prometheus/prometheus.yml")
    else:
        prom = load_yaml(prom_cfg_path)
        for job in prom.get("scrape_configs") or []:
            for sc in job.get("static_configs") or []:
                for t in sc.get("targets") or []:
                    host, _, port = t.rpartition(":")
                    if host in ("127.0.0.1", "localhost"):
                        continue
                    if host not in services:
                        errs.append(f"prometheus job {job['job_name']}: target {t} is not a compose service")
                    elif port not in container_ports(host):
                        errs.append(f"prometheus job {job['job_name']}: {host} does not publish/expose {port}")

        # rule files: each rule_files pattern (relative to prometheus.yml in the container) names files
        # mounted into the prometheus service
        prom_target = "/etc/prometheus/prometheus.yml"
        for pattern in prom.get("rule_files") or []:
            in_container = os.path.normpath(os.path.join(os.path.dirname(prom_target), pattern))
            host = None
            for target, src in mounts("prometheus").items():
                if in_container.startswith(target.rstrip("/") + "/"):
                    host = os.path.join(src, os.path.relpath(in_container, target))
            if host is None:
                errs.append(f"prometheus.yml rule_files {pattern}: {in_container} is not in a mounted folder")
            elif not glob.glob(host):
                errs.append(f"prometheus.yml rule_files {pattern}: no file matches {host}")

    # the collector image is the release tests/collector builds and runs the otel-config files with
    image = services.get("otel-collector", {}).get("image")
    pinned = pinned_collector_image()
    if image != pinned:
        errs.append(f"compose: otel-collector image {image!r} is not {pinned}, the release of the collector "
                    f"tests/collector/builder-config.yaml builds (the one the configurations are tested with)")

    # the collector config mounted by compose listens where compose and prometheus expect
    col_cmd = " ".join(services.get("otel-collector", {}).get("command") or [])
    m = re.search(r"--config=(\S+)", col_cmd)
    col_src = mounts("otel-collector").get(m.group(1)) if m else None
    if not col_src:
        errs.append("compose: otel-collector's --config file is not a mounted repository file")
    else:
        col = load_yaml(col_src)
        listen = set()
        for section in ("receivers", "exporters", "extensions"):
            for c in (col.get(section) or {}).values():
                c = c or {}
                for ep in [c.get("endpoint")] + [(pc or {}).get("endpoint") for pc in (c.get("protocols") or {}).values()]:
                    if ep:
                        listen.add(str(ep).rsplit(":", 1)[-1])
        for r in ((col.get("service") or {}).get("telemetry") or {}).get("metrics", {}).get("readers") or []:
            port = (((r.get("pull") or {}).get("exporter") or {}).get("prometheus") or {}).get("port")
            if port:
                listen.add(str(port))
        for port in container_ports("otel-collector"):
            if port not in listen:
                errs.append(f"compose publishes/exposes otel-collector:{port} but {col_src} listens on {sorted(listen)}")
        env = services.get("dcgm-otel", {}).get("environment") or {}
        ep = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
        if not ep.startswith("http://otel-collector:") or ep.rsplit(":", 1)[-1] not in listen:
            errs.append(f"dcgm-otel's OTEL_EXPORTER_OTLP_ENDPOINT {ep!r} is not a port the collector listens on")

    # Grafana: datasource name/uid, dashboard provider path, home dashboard
    gmounts = mounts("grafana")
    prov = gmounts.get("/etc/grafana/provisioning")
    dash_target = next((t for t, s_ in gmounts.items() if s_.rstrip("/") == "./grafana/dashboards"), None)
    if not prov or not dash_target:
        errs.append("compose: grafana must mount ./grafana/provisioning and ./grafana/dashboards")
    else:
        ds = [d for f in glob.glob(os.path.join(prov, "datasources", "*.yaml"))
              for d in (load_yaml(f).get("datasources") or [])]
        named = [d for d in ds if d.get("name") == "Prometheus"]
        if len(named) != 1 or named[0].get("type") != "prometheus" or not named[0].get("isDefault"):
            errs.append("grafana: exactly one default prometheus datasource named 'Prometheus' is required")
        elif not str(named[0].get("url", "")).startswith("http://prometheus:9090"):
            errs.append(f"grafana: datasource url {named[0].get('url')} is not the compose prometheus service")
        else:
            uid = named[0].get("uid")
            for path, d in load_dashboards("grafana/dashboards"):
                for v in (d.get("templating") or {}).get("list") or []:
                    if v.get("type") == "datasource" and (v.get("current") or {}).get("value") != uid:
                        errs.append(f"{path}: datasource variable default is not the provisioned uid {uid}")
        paths = [(p.get("options") or {}).get("path") for f in glob.glob(os.path.join(prov, "dashboards", "*.yaml"))
                 for p in (load_yaml(f).get("providers") or [])]
        if dash_target not in paths:
            errs.append(f"grafana: no dashboard provider reads {dash_target} (providers read {paths})")
        home = (services["grafana"].get("environment") or {}).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
        if home:
            local = os.path.join("grafana/dashboards", os.path.relpath(home, dash_target))
            if not home.startswith(dash_target + "/") or not os.path.exists(local):
                errs.append(f"grafana: home dashboard {home} is not a provisioned dashboard file")
    for e in errs:
        print(f"FAIL: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print("ok: compose, prometheus.yml, collector.yaml and Grafana provisioning agree")


# ------------------------------------------------------------------------------------------------------------
# otel-configs
def pinned_collector_image():
    """The collector-contrib image of the release tests/collector builds (dist.version 0.165.0-dcgm-otel ->
    otel/opentelemetry-collector-contrib:0.165.0)."""
    version = load_yaml("tests/collector/builder-config.yaml")["dist"]["version"].split("-", 1)[0]
    return f"otel/opentelemetry-collector-contrib:{version}"


SIGNALS = {"metrics", "traces", "logs", "profiles"}
# The units CloudWatch accepts (MetricDatum.Unit). awsemf drops a metric_descriptor with any other unit,
# and passes a metric's own unit through except for a few UCUM ones (ms s us ns By bit 1).
CLOUDWATCH_UNITS = {
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes", "Terabytes",
    "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count", "Bytes/Second",
    "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second", "Terabytes/Second", "Bits/Second",
    "Kilobits/Second", "Megabits/Second", "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
}
DEFAULT_COUNTERS_CSV = "src/counters/default-counters.csv"
ENV_REF = re.compile(r"\$\{([^}]*)\}")
ENV_OK = re.compile(r"^env:[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?$")


def check_otel_config(path):
    errors = []
    text = open(path).read()
    for m in ENV_REF.finditer(text):
        if not ENV_OK.match(m.group(1)):
            errors.append(f"'${{{m.group(1)}}}' is not the collector's ${{env:NAME}} syntax")
    cfg = yaml.safe_load(text)
    if not isinstance(cfg, dict):
        return [f"not a YAML mapping"]
    allowed_top = {"receivers", "processors", "exporters", "extensions", "connectors", "service"}
    for k in cfg:
        if k not in allowed_top:
            errors.append(f"unknown top-level key '{k}'")
    defined = {}
    for section in ("receivers", "processors", "exporters", "extensions", "connectors"):
        comps = cfg.get(section) or {}
        if not isinstance(comps, dict):
            errors.append(f"{section} must be a mapping")
            comps = {}
        defined[section] = set(comps)
    service = cfg.get("service") or {}
    pipelines = service.get("pipelines") or {}
    if not pipelines:
        errors.append("service.pipelines is empty")
    used = {s: set() for s in defined}
    for pid, p in pipelines.items():
        if pid.split("/", 1)[0] not in SIGNALS:
            errors.append(f"pipeline '{pid}': the part before '/' must be one of {sorted(SIGNALS)}")
        p = p or {}
        for key in p:
            if key not in ("receivers", "processors", "exporters"):
                errors.append(f"pipeline '{pid}': unknown key '{key}'")
        for role in ("receivers", "exporters"):
            if not p.get(role):
                errors.append(f"pipeline '{pid}' has no {role}")
        for role in ("receivers", "processors", "exporters"):
            names = p.get(role) or []
            if len(names) != len(set(names)):
                errors.append(f"pipeline '{pid}': duplicate entries in {role}")
            for name in names:
                if name in defined[role]:
                    used[role].add(name)
                elif role != "processors" and name in defined["connectors"]:
                    used["connectors"].add(name)
                else:
                    errors.append(f"pipeline '{pid}' names {role[:-1]} '{name}', which is not defined")
        procs = p.get("processors") or []
        mls = [i for i, n in enumerate(procs) if n.split("/", 1)[0] == "memory_limiter"]
        if mls and mls[0] != 0:
            errors.append(f"pipeline '{pid}': memory_limiter must be the first processor")
        if "batch" in procs and mls and procs.index("batch") < mls[0]:
            errors.append(f"pipeline '{pid}': batch must come after memory_limiter")
    for ext in service.get("extensions") or []:
        if ext in defined["extensions"]:
            used["extensions"].add(ext)
        else:
            errors.append(f"service.extensions names '{ext}', which is not defined")
    for section in defined:
        for name in sorted(defined[section] - used[section]):
            errors.append(f"{section}.{name} is defined but no pipeline (or service.extensions) uses it")

    # settings the stack relies on
    for cid, c in (cfg.get("receivers") or {}).items():
        if cid.split("/", 1)[0] == "otlp":
            protos = (c or {}).get("protocols") or {}
            if not protos:
                errors.append(f"receivers.{cid}: no protocols enabled")
            for proto, pc in protos.items():
                ep = (pc or {}).get("endpoint", "localhost")
                if not str(ep).startswith("0.0.0.0:"):
                    errors.append(f"receivers.{cid}.protocols.{proto}.endpoint is '{ep}': other containers "
                                  f"cannot reach it (use 0.0.0.0:PORT)")
    for cid, c in (cfg.get("exporters") or {}).items():
        ctype = cid.split("/", 1)[0]
        c = c or {}
        if ctype == "prometheus":
            if not c.get("endpoint"):
                errors.append(f"exporters.{cid}: endpoint is required")
            if not (c.get("resource_to_telemetry_conversion") or {}).get("enabled"):
                errors.append(f"exporters.{cid}: resource_to_telemetry_conversion.enabled must be true "
                              f"(GPU identity travels as resource attributes)")
            if c.get("translation_strategy") not in ("UnderscoreEscapingWithoutSuffixes", "NoTranslation"):
                errors.append(f"exporters.{cid}: translation_strategy must keep the DCGM names "
                              f"(UnderscoreEscapingWithoutSuffixes or NoTranslation)")
        if ctype == "awsemf":
            fed_by_otlp = any(cid in (p or {}).get("exporters", []) and
                              any(r.split("/", 1)[0] == "otlp" for r in (p or {}).get("receivers", []))
                              for p in pipelines.values())
            errors += check_awsemf(f"exporters.{cid}", c, fed_by_otlp)
        if ctype in ("otlp_grpc", "otlp_http") and not c.get("endpoint"):
            errors.append(f"exporters.{cid}: endpoint is required")
    return errors


# Families dcgm-otel computes itself (not counters-CSV rows): the per-pod cost counters of -k, under their
# OTLP names (docs/otlp.md, "dcgm-otel's own families on OTLP") and their :9400 names.
DERIVED_METRICS = ["nvidia.pod.gpu.time", "nvidia.pod.gpu.energy", "nvidia.pod.gpu.idle_time",
                   "dcgm_otel_pod_gpu_seconds_total", "dcgm_otel_pod_gpu_energy_joules_total",
                   "dcgm_otel_pod_gpu_idle_seconds_total"]


def semconv_metric_names():
    """The semantic-convention metric names of docs/otlp.md's mapping table (--otel-metric-names semconv; a
    unit test keeps that table equal to the exporter's data table)."""
    with open("docs/otlp.md") as f:
        text = f.read()
    table = text.split("<!-- semconv-table:start -->", 1)[-1].split("<!-- semconv-table:end -->", 1)[0]
    return sorted({m for m in re.findall(r"^\|[^|]*\| `(hw\.[a-z._]+)` \|", table, re.M)})


def default_counter_names():
    """Metric names of the built-in counters CSV (the rows dcgm-otel exports by default), of the
    families it derives itself and of the semantic-convention names."""
    names = list(DERIVED_METRICS) + semconv_metric_names()
    with open(DEFAULT_COUNTERS_CSV) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                names.append(line.split(",", 1)[0].strip())
    return names


def declared_metrics(emf, known):
    """{metric name: [declaration indexes]} for every name in `known` some metric_name_selector matches,
    plus the selectors that match none of them."""
    out, unmatched = {}, []
    for i, decl in enumerate(emf.get("metric_declarations") or []):
        for sel in decl.get("metric_name_selectors") or []:
            try:
                rx = re.compile(sel)
            except re.error:
                continue  # reported by check_awsemf
            hits = [n for n in known if rx.search(n)]
            if not hits:
                unmatched.append((i, sel))
            for n in hits:
                out.setdefault(n, [])
                if i not in out[n]:
                    out[n].append(i)
    return out, unmatched


def check_awsemf(where, c, fed_by_otlp):
    """Settings an awsemf exporter needs to publish dcgm-otel's metrics as CloudWatch metrics."""
    errors = []
    for key in ("namespace", "log_group_name", "metric_declarations"):
        if not c.get(key):
            errors.append(f"{where}: {key} is missing")
    if fed_by_otlp and not (c.get("resource_to_telemetry_conversion") or {}).get("enabled"):
        errors.append(f"{where}: resource_to_telemetry_conversion.enabled must be true (dcgm-otel's OTLP puts "
                      f"the GPU identity on the Resource)")
    for i, decl in enumerate(c.get("metric_declarations") or []):
        dims = decl.get("dimensions")
        if not (isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims)):
            errors.append(f"{where}.metric_declarations[{i}].dimensions must be a list of lists")
        if not decl.get("metric_name_selectors"):
            errors.append(f"{where}.metric_declarations[{i}]: metric_name_selectors is empty")
        for sel in decl.get("metric_name_selectors") or []:
            try:
                re.compile(sel)
            except re.error as e:
                errors.append(f"{where}.metric_declarations[{i}]: bad regex '{sel}': {e}")
        for j, lm in enumerate(decl.get("label_matchers") or []):
            if not lm.get("label_names") or not lm.get("regex"):
                errors.append(f"{where}.metric_declarations[{i}].label_matchers[{j}] needs label_names and regex")
            else:
                try:
                    re.compile(lm["regex"])
                except re.error as e:
                    errors.append(f"{where}.metric_declarations[{i}].label_matchers[{j}]: bad regex: {e}")
    # every declared metric: one descriptor with a CloudWatch unit and overwrite: true (the UCUM units
    # dcgm-otel sends, such as % or MiB, are not CloudWatch units)
    known = default_counter_names()
    declared, unmatched = declared_metrics(c, known)
    for i, sel in unmatched:
        errors.append(f"{where}.metric_declarations[{i}]: selector '{sel}' matches no metric of "
                      f"{DEFAULT_COUNTERS_CSV} (a typo, or a metric dcgm-otel does not export by default)")
    descriptors = {}
    for j, d in enumerate(c.get("metric_descriptors") or []):
        name = (d or {}).get("metric_name")
        if name in descriptors:
            errors.append(f"{where}.metric_descriptors[{j}]: a second descriptor for {name}")
        descriptors[name] = d or {}
        if d.get("unit") not in CLOUDWATCH_UNITS:
            errors.append(f"{where}.metric_descriptors[{j}] ({name}): unit {d.get('unit')!r} is not a CloudWatch "
                          f"unit (awsemf drops the descriptor; CLOUDWATCH_UNITS in {os.path.basename(__file__)} "
                          f"lists them)")
        if d.get("overwrite") is not True:
            errors.append(f"{where}.metric_descriptors[{j}] ({name}): overwrite must be true (otherwise the unit "
                          f"dcgm-otel sends, e.g. % or MiB, is passed through)")
    for name in sorted(declared):
        if name not in descriptors:
            errors.append(f"{where}: declared metric {name} has no metric_descriptor giving it a CloudWatch unit")
    return errors


def cmd_collector_accepted(url):
    """The collector's own metrics: OTLP points accepted, none refused (metrics and log records)."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    totals = {}
    for line in text.splitlines():
        m = re.match(r"^(otelcol_receiver_(?:accepted|refused)_(?:metric_points|log_records))(?:_total)?\{[^}]*\}\s+(\S+)", line)
        if m:
            totals[m.group(1)] = totals.get(m.group(1), 0.0) + float(m.group(2))
    errs = []
    if not totals.get("otelcol_receiver_accepted_metric_points"):
        errs.append(f"accepted no metric points ({totals})")
    for kind in ("metric_points", "log_records"):
        if totals.get(f"otelcol_receiver_refused_{kind}"):
            errs.append(f"refused {totals[f'otelcol_receiver_refused_{kind}']:.0f} {kind.replace('_', ' ')}")
    for e in errs:
        print(f"FAIL: collector at {url}: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"ok: the collector accepted {totals['otelcol_receiver_accepted_metric_points']:.0f} points and "
          f"{totals.get('otelcol_receiver_accepted_log_records', 0):.0f} log records, refused none")


DOC_BLOCK = "<!-- collector-test: prometheus exporter -->"


def cmd_otlp_doc_lines(doc, *urls):
    """The doc's example of the collector's prometheus exporter output against the real ones (URLS: one per
    naming mode): each shown line's metric exists with a series whose label names are exactly those shown."""
    text = open(doc).read()
    if DOC_BLOCK not in text:
        fail(f"{doc}: no block after {DOC_BLOCK}")
    block = text.split(DOC_BLOCK, 1)[1].split("```", 2)[1].split("\n", 1)[1]
    shown = [l for l in block.splitlines() if l and not l.startswith("#")]
    served = ""
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as r:
            served += r.read().decode() + "\n"
    label_names = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')
    have = {}
    for line in served.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}", line)
        if m:
            have.setdefault(m.group(1), set()).add(frozenset(label_names.findall(m.group(2))))
    errs = []
    for line in shown:
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}", line)
        if not m:
            errs.append(f"not an exposition line: {line}")
            continue
        name, names = m.group(1), frozenset(label_names.findall(m.group(2)))
        if name not in have:
            errs.append(f"{name}: not served by the collector's prometheus exporter")
        elif names not in have[name]:
            closest = min(have[name], key=lambda s: len(s ^ names))
            errs.append(f"{name}: no series with the label names shown; the closest served has "
                        f"{sorted(closest - names)} more and {sorted(names - closest)} fewer")
    for e in errs:
        print(f"FAIL: {doc}: {e}", file=sys.stderr)
    if errs or not shown:
        fail(f"{doc}: the collector example does not match what the collector serves ({len(shown)} lines)")
    print(f"ok: {doc}: the {len(shown)} lines of the collector example match the names the collector serves")


def cmd_otel_configs(paths):
    bad = False
    for path in paths:
        errors = check_otel_config(path)
        for e in errors:
            print(f"FAIL: {path}: {e}", file=sys.stderr)
        bad |= bool(errors)
        if not errors:
            print(f"ok: {path}")
    if bad:
        sys.exit(1)


# ------------------------------------------------------------------------------------------------------------
# dashboards: helpers
def load_dashboards(directory):
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            out.append((path, json.load(f)))
    if not out:
        fail(f"no dashboards in {directory}")
    return out


def all_panels(dash):
    for p in dash.get("panels") or []:
        yield p
        for sub in p.get("panels") or []:
            yield sub


# ------------------------------------------------------------------------------------------------------------
# dashboard-facts: the 12239 equivalent
FACTS_12239 = [
    # (title, type, unit, expr, legendFormat)
    ("GPU Temperature", "timeseries", "celsius",
     'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}', "GPU {{gpu}}"),
    ("GPU Avg. Temp", "gauge", "celsius", 'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})', None),
    ("GPU Power Usage", "timeseries", "watt",
     'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}', "GPU {{gpu}}"),
    ("GPU Power Total", "gauge", "watt",
     'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})', None),
    ("GPU SM Clocks", "timeseries", "hertz",
     'DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000', "GPU {{gpu}}"),
    ("GPU Utilization", "timeseries", "percent",
     'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}', "GPU {{gpu}}"),
    ("GPU Framebuffer Mem Used", "timeseries", "decmbytes",
     'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}', "GPU {{gpu}}"),
    ("Tensor Core Utilization", "timeseries", "percentunit",
     'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}', "GPU {{gpu}}"),
]


def cmd_dashboard_facts(directory):
    path = os.path.join(directory, "nvidia-dcgm-exporter.json")
    d = json.load(open(path))
    errs = []
    if not d.get("title", "").startswith("NVIDIA DCGM Exporter Dashboard"):
        errs.append(f"title '{d.get('title')}' is not in the 'NVIDIA DCGM Exporter Dashboard' family")
    vars_ = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
    if list(vars_) != ["datasource", "instance", "gpu"]:
        errs.append(f"variables are {list(vars_)}, expected datasource, instance, gpu")
    else:
        if vars_["datasource"].get("type") != "datasource" or vars_["datasource"].get("query") != "prometheus":
            errs.append("variable datasource must be a prometheus datasource variable")
        for name in ("instance", "gpu"):
            v = vars_[name]
            want = f"label_values(DCGM_FI_DEV_GPU_TEMP, {name})"
            if v.get("query") != want or not v.get("multi") or not v.get("includeAll"):
                errs.append(f"variable {name}: want query '{want}', multi and includeAll")
    panels = [p for p in all_panels(d) if p.get("type") != "row"]
    if len(panels) != len(FACTS_12239):
        errs.append(f"{len(panels)} panels, expected {len(FACTS_12239)}")
    for (title, ptype, unit, expr, legend), p in zip(FACTS_12239, panels):
        where = f"panel '{p.get('title')}'"
        if p.get("title") != title:
            errs.append(f"{where}: expected title '{title}' (same order as the original)")
        if p.get("type") != ptype:
            errs.append(f"{where}: type {p.get('type')}, expected {ptype}")
        if p.get("fieldConfig", {}).get("defaults", {}).get("unit") != unit:
            errs.append(f"{where}: unit must be {unit}")
        if p.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
            errs.append(f"{where}: datasource must be the $datasource variable")
        ts = p.get("targets") or []
        if len(ts) != 1 or ts[0].get("expr") != expr:
            errs.append(f"{where}: query must be exactly {expr}")
        elif legend and ts[0].get("legendFormat") != legend:
            errs.append(f"{where}: legend must be {legend}")
    for e in errs:
        print(f"FAIL: {path}: {e}", file=sys.stderr)
    if errs:
        sys.exit(1)
    print(f"ok: {path} has the 12239 title family, variables, {len(FACTS_12239)} panels and queries")


# ------------------------------------------------------------------------------------------------------------
# tsc: @grafana/schema type check
def cmd_tsc(directory, tsdir):
    """Write one .gen/<run>/<name>.ts per dashboard and type-check them with tsc.

    Each run uses its own folder (several runs may share a checkout), removed again when the check passes.
    """
    import shutil
    gen = os.path.join(tsdir, ".gen", f"run-{os.getpid()}")
    os.makedirs(gen, exist_ok=True)
    paths = sorted(glob.glob(os.path.join(directory, "*.json")))
    for path in paths:
        name = re.sub(r"[^A-Za-z0-9_-]", "_", os.path.basename(path)[:-5])
        with open(path) as f:
            body = f.read().rstrip()
        json.loads(body)  # a JSON syntax error is reported here, with a clearer message than tsc's
        with open(os.path.join(gen, name + ".ts"), "w") as f:
            f.write("// generated from %s by tests/stack/stack_check.py; do not edit\n" % os.path.relpath(path))
            f.write("import type { Dashboard } from '@grafana/schema';\n")
            f.write("import type { JsonOf } from '../../schema-check.js';\n\n")
            f.write("export const dashboard: JsonOf<Dashboard> = " + body + ";\n")
    with open(os.path.join(gen, "tsconfig.json"), "w") as f:
        json.dump({"extends": "../../tsconfig.json", "include": ["../../schema-check.ts", "*.ts"]}, f)
    tsc = os.path.join(tsdir, "node_modules", ".bin", "tsc")
    r = subprocess.run([tsc, "-p", os.path.join(gen, "tsconfig.json")], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        fail("dashboards do not type-check against @grafana/schema (see tsc output above; "
             f"the generated files are in {gen})")
    shutil.rmtree(gen, ignore_errors=True)
    print(f"ok: {len(paths)} dashboards type-check against @grafana/schema")


# ------------------------------------------------------------------------------------------------------------
# prom-config
def cmd_prom_config(src, dst, pull_addr, otlp_addr, semconv_addr=None, dcgm_style_addr=None):
    cfg = load_yaml(src)
    targets = {"dcgm-otel": pull_addr.split(","), "otel-collector": [otlp_addr]}
    jobs = []
    for name, addr in targets.items():
        found = [j for j in cfg.get("scrape_configs") or [] if j.get("job_name") == name]
        if len(found) != 1:
            fail(f"{src}: expected exactly one scrape job named {name}")
        job = found[0]
        job["static_configs"] = [{"targets": addr}]
        job["scrape_interval"] = "1s"
        job["scrape_timeout"] = "1s"
        jobs.append(job)
    if semconv_addr:
        job = json.loads(json.dumps(jobs[1]))
        job["job_name"] = SEMCONV_OTLP_JOB
        job["static_configs"] = [{"targets": [semconv_addr]}]
        jobs.append(job)
    if dcgm_style_addr:
        job = json.loads(json.dumps(jobs[1]))
        job["job_name"] = DCGM_STYLE_OTLP_JOB
        job["static_configs"] = [{"targets": [dcgm_style_addr]}]
        jobs.append(job)
    cfg["global"] = dict(cfg.get("global") or {}, scrape_interval="1s", evaluation_interval="1s")
    cfg["scrape_configs"] = jobs
    base = os.path.dirname(os.path.abspath(src))
    cfg["rule_files"] = [os.path.join(base, r) for r in cfg.get("rule_files") or []]
    with open(dst, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)


# ------------------------------------------------------------------------------------------------------------
# queries
def substitute(expr, variables):
    """Replace Grafana variables the way Grafana would for 'All' / the current value."""
    macros = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m", "__interval_ms": "15000",
              "__range_s": "300", "__range_ms": "300000"}

    def value(name):
        if name in macros:
            return macros[name]
        v = variables.get(name)
        if v is None:
            fail(f"query uses undefined variable ${name}: {expr}")
        if v.get("includeAll") or v.get("multi"):
            return ".*"
        cur = (v.get("current") or {}).get("value")
        if isinstance(cur, list):
            cur = cur[0] if cur else ""
        return cur or ""

    expr = re.sub(r"\$\{(\w+)(?::\w+)?\}", lambda m: value(m.group(1)), expr)
    expr = re.sub(r"\$(\w+)", lambda m: value(m.group(1)), expr)
    return expr


def prom_get(url, path, params):
    q = urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(f"{url}{path}?{q}", timeout=10) as r:
        return json.load(r)


def cmd_queries(directory, url):
    failures, checked, skipped = [], 0, []
    for path, d in load_dashboards(directory):
        uid = d.get("uid")
        variables = {v["name"]: v for v in (d.get("templating") or {}).get("list") or []}
        for name, v in variables.items():
            if v.get("type") != "query":
                continue
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q or "")
            if not m:
                failures.append(f"{uid}: variable {name}: unsupported query '{q}'")
                continue
            match = substitute(m.group(1), variables)
            res = prom_get(url, f"/api/v1/label/{m.group(2)}/values", {"match[]": match})
            checked += 1
            if res.get("status") != "success" or not res.get("data"):
                failures.append(f"{uid}: variable {name}: '{q}' returned no values ({res})")
        for p in all_panels(d):
            if p.get("type") == "row":
                continue
            for t in p.get("targets") or []:
                expr = t.get("expr")
                if not expr:
                    failures.append(f"{uid}: panel '{p.get('title')}' target {t.get('refId')} has no expr")
                    continue
                q = substitute(expr, variables)
                res = prom_get(url, "/api/v1/query", {"query": q})
                checked += 1
                key = (uid, p.get("title"))
                reason = SKIP.get(key) or SKIP_TARGETS.get(key + (t.get("refId"),))
                if res.get("status") != "success":
                    failures.append(f"{uid}: panel '{p.get('title')}': query failed: {q}: {res}")
                elif not res["data"]["result"]:
                    if reason:
                        skipped.append(f"{uid}: '{p.get('title')}' {t.get('refId')}: empty as expected: {reason}")
                    else:
                        failures.append(f"{uid}: panel '{p.get('title')}' {t.get('refId')}: no data: {q}")
                elif reason:
                    print(f"note: {uid}: '{p.get('title')}' {t.get('refId')} has data now; its skip-list entry "
                          f"can go: {reason}")
    stale = [k for k in list(SKIP) if not any(
        d.get("uid") == k[0] and any(p.get("title") == k[1] for p in all_panels(d))
        for _, d in load_dashboards(directory))]
    for k in stale:
        failures.append(f"skip list names a panel that does not exist: {k}")
    for s in skipped:
        print(f"skip: {s}")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"ok: {checked} dashboard queries ran; all returned data except {len(skipped)} listed skips")


def cmd_rules(url, timeout_s, *paths):
    """Wait until Prometheus reports every rule of the rule files `paths` loaded and evaluated with health ok."""
    want = {}
    for pattern in paths:
        for path in glob.glob(pattern) or [pattern]:
            for g in load_yaml(path).get("groups") or []:
                want[g["name"]] = [r.get("alert") or r.get("record") for r in g.get("rules") or []]
    if not want:
        fail(f"no rule groups in {paths}")
    deadline = time.time() + float(timeout_s)
    problems = ["no answer"]
    while time.time() < deadline:
        try:
            res = prom_get(url, "/api/v1/rules", {})
        except OSError as e:
            problems = [str(e)]
            time.sleep(0.5)
            continue
        loaded = {g["name"]: g for g in (res.get("data") or {}).get("groups") or []}
        problems = []
        for name, rules in want.items():
            g = loaded.get(name)
            if g is None:
                problems.append(f"group {name} not loaded")
                continue
            got = {r.get("name"): r for r in g.get("rules") or []}
            for rule in rules:
                r = got.get(rule)
                if r is None:
                    problems.append(f"{name}: rule {rule} not loaded")
                elif r.get("health") != "ok":
                    problems.append(f"{name}: {rule} health {r.get('health')!r} {r.get('lastError') or ''}".rstrip())
        if not problems:
            n = sum(len(r) for r in want.values())
            print(f"ok: Prometheus loaded {len(want)} rule groups ({n} rules), every rule evaluated without error")
            return
        time.sleep(0.5)
    fail("rules not loaded and evaluated within %ss: %s" % (timeout_s, "; ".join(problems)))
SEMCONV_OTLP_JOB = "otel-collector-semconv"
DCGM_STYLE_OTLP_JOB = "otel-collector-dcgm-style"


def cmd_queries_dashboard(directory, url, uid, *assignments):
    """Every panel and variable query of dashboard UID with the variables set as VAR=VALUE says (e.g. the
    instance that is a collector): each returns data with the labels its legend names."""
    variables_set = dict(a.split("=", 1) for a in assignments)
    found = [d for _, d in load_dashboards(directory) if d.get("uid") == uid]
    if not found:
        fail(f"no dashboard with uid {uid} in {directory}")
    d = found[0]
    variables = {v["name"]: v for v in (d.get("templating") or {}).get("list") or []}
    for name, value in variables_set.items():
        if name not in variables:
            fail(f"{uid} has no variable {name}")
        variables[name] = dict(variables[name], includeAll=False, multi=False, current={"value": value})
    failures, checked = [], 0
    for name, v in variables.items():
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q or "") if v.get("type") == "query" else None
        if m and name not in variables_set:
            res = prom_get(url, f"/api/v1/label/{m.group(2)}/values", {"match[]": substitute(m.group(1), variables)})
            checked += 1
            if not res.get("data"):
                failures.append(f"variable {name}: '{q}' has no values")
    for p in all_panels(d):
        for t in p.get("targets") or []:
            if not t.get("expr"):
                continue
            q = substitute(t["expr"], variables)
            res = prom_get(url, "/api/v1/query", {"query": q})
            checked += 1
            result = (res.get("data") or {}).get("result") or []
            if not result:
                failures.append(f"panel '{p.get('title')}': no data: {q}")
                continue
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat") or ""):
                if not any(label in r["metric"] for r in result):
                    failures.append(f"panel '{p.get('title')}': no series has the label {label} its legend shows: {q}")
    for f in failures:
        print(f"FAIL: {uid} with {variables_set}: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"ok: {uid}: {checked} queries with {variables_set} returned data with their legends' labels")


def cmd_queries_otlp(directory, url, job):
    """The OTLP-path panels (every target using $otlp_job) with $otlp_job = `job`: each returns data."""
    failures, checked = [], 0
    for path, d in load_dashboards(directory):
        variables = {v["name"]: v for v in (d.get("templating") or {}).get("list") or []}
        if "otlp_job" not in variables:
            continue
        variables["otlp_job"] = dict(variables["otlp_job"], current={"value": job})
        for p in all_panels(d):
            for t in p.get("targets") or []:
                expr = t.get("expr") or ""
                if "$otlp_job" not in expr:
                    continue
                q = substitute(expr, variables)
                res = prom_get(url, "/api/v1/query", {"query": q})
                checked += 1
                if res.get("status") != "success":
                    failures.append(f"{d.get('uid')}: panel '{p.get('title')}': query failed: {q}: {res}")
                elif not res["data"]["result"]:
                    failures.append(f"{d.get('uid')}: panel '{p.get('title')}' {t.get('refId')}: no data "
                                    f"with otlp_job={job}: {q}")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    if failures or not checked:
        fail(f"{len(failures)} of {checked} OTLP-path queries failed with otlp_job={job}")
    print(f"ok: {checked} OTLP-path dashboard queries returned data with otlp_job={job}")


def cmd_wait_series(url, expr, timeout_s, min_samples):
    """Wait until every series of the selector `expr` has at least `min_samples` raw samples in Prometheus."""
    deadline = time.time() + float(timeout_s)
    last = None
    while time.time() < deadline:
        try:
            res = prom_get(url, "/api/v1/query", {"query": f"count_over_time({expr}[1m])"})
            result = res.get("data", {}).get("result") or []
            if result and min(float(r["value"][1]) for r in result) >= float(min_samples):
                print(f"ok: {len(result)} series of '{expr}' with >= {min_samples} samples")
                return
            last = res
        except OSError as e:
            last = e
        time.sleep(0.5)
    fail(f"no data for '{expr}' in Prometheus within {timeout_s}s (last answer: {last})")


def cmd_wait_http(url, timeout_s, want="200"):
    """Wait until GET url answers with HTTP status `want` (bounded)."""
    deadline = time.time() + float(timeout_s)
    last = None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                last = r.status
        except urllib.error.HTTPError as e:
            last = e.code
        except OSError as e:
            last = e
        if str(last) == want:
            print(f"ok: {url} answered {want}")
            return
        time.sleep(0.1)
    fail(f"{url} did not answer {want} within {timeout_s}s (last: {last})")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


def main(argv):
    if len(argv) < 2:
        fail(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "consistency":
        cmd_consistency()
    elif cmd == "dockerfile":
        cmd_dockerfile(*args)
    elif cmd == "otel-configs":
        cmd_otel_configs(args)
    elif cmd == "collector-accepted":
        cmd_collector_accepted(*args)
    elif cmd == "otlp-doc-lines":
        cmd_otlp_doc_lines(*args)
    elif cmd == "dashboard-facts":
        cmd_dashboard_facts(*args)
    elif cmd == "tsc":
        cmd_tsc(*args)
    elif cmd == "prom-config":
        cmd_prom_config(*args)
    elif cmd == "queries":
        cmd_queries(*args)
    elif cmd == "rules":
        cmd_rules(*args)
    elif cmd == "queries-dashboard":
        cmd_queries_dashboard(*args)
    elif cmd == "queries-otlp":
        cmd_queries_otlp(*args)
    elif cmd == "wait-series":
        cmd_wait_series(*args)
    elif cmd == "wait-http":
        cmd_wait_http(*args)
    elif cmd == "free-port":
        free_port()
    else:
        fail(f"unknown subcommand {cmd}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv)
