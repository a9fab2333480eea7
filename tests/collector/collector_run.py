"""Running the test collector, dcgm-otel and the fakes beside them: processes, ports, readiness, scrapes.

Everything listens on 127.0.0.1 on ports chosen free by the kernel; every process is stopped when the test
ends (`Processes` is a context manager) and its log is printed when the test fails. Readiness is a condition
waited for with a deadline (a log line, an HTTP answer, a counter), never a fixed sleep.
"""
import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import listening  # noqa: E402

# The CloudWatch Logs API and the EC2 metadata service are never reached: fake credentials, the fake
# endpoint, and no instance metadata lookups.
AWS_ENV = {
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "AKIDDCGMOTELTEST",
    "AWS_SECRET_ACCESS_KEY": "dcgm-otel-test-secret",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class TestFailure(Exception):
    pass


def fail(msg):
    raise TestFailure(msg)


def free_port():
    """A port that was free a moment ago: racy, another process may take it before the collector binds it.
    Only for the collector's listeners that cannot be :0 and report their port (its prometheus exporter,
    health_check and own telemetry log no bound address), always under `with_collector_ports`, which starts
    it again on fresh ports when one was taken. dcgm-otel binds :0 itself (`start_dcgm_otel`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How many times `with_collector_ports` starts the collector on fresh ports.
PORT_TRIES = 5


class PortTaken(Exception):
    """The collector could not bind a port chosen by `free_port` (another process took it in between)."""


def with_collector_ports(start):
    """start(ports) with fresh `collector_ports()`, again (PORT_TRIES times at most) when it raises PortTaken
    (`start_collector` does when the collector says "address already in use"); (ports, what start returned).
    start should stop what it started before it lets PortTaken through (`Processes.stop`)."""
    why = None
    for _ in range(PORT_TRIES):
        ports = collector_ports()
        try:
            return ports, start(ports)
        except PortTaken as e:
            why = e
    fail(f"the collector found a port taken {PORT_TRIES} times in a row; last: {why}")


def says_port_taken(text):
    return "address already in use" in text.lower()


def logged_port(procs, p, needle, timeout_s, what):
    """The port p (told to listen on :0) says it bound in the first line of its log containing needle:
    dcgm-otel's "serving /metrics", the collector's "Starting GRPC server" (tests/support/listening.py)."""
    try:
        return listening.port_in_log(procs.log_of(p), needle, timeout_s, lambda: p.poll() is not None)
    except RuntimeError as e:
        fail(f"{what}: {e}")


def wait_until(what, timeout_s, probe, interval_s=0.2):
    """Call probe() until it returns something true (returned) or timeout_s pass (then fail, naming what)."""
    deadline = time.time() + timeout_s
    last = None
    while True:
        try:
            got = probe()
            if got:
                return got
            last = got
        except (OSError, ValueError, urllib.error.URLError) as e:
            last = e
        if time.time() > deadline:
            fail(f"{what}: not within {timeout_s} s (last: {last!r})")
        time.sleep(interval_s)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text):
    """[(name, {label: value}, float)] of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = {k: bytes(v, "utf-8").decode("unicode_escape") for k, v in LABEL.findall(m.group(2) or "")}
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def metric_sum(samples, name, **labels):
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == want for k, want in labels.items()))


class Processes:
    """The processes of one test; stopped (TERM, then KILL) on exit, their logs printed when it failed."""

    def __init__(self, work):
        self.work = work
        self.procs = []

    def __enter__(self):
        return self

    def start(self, name, argv, env=None):
        log = os.path.join(self.work, f"{name}.log")
        full_env = dict(os.environ, **(env or {}))
        f = open(log, "w")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
        self.procs.append((name, p, log))
        return p

    def log_of(self, p):
        return next(log for _, q, log in self.procs if q is p)

    def stop(self, p, timeout_s=10):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __exit__(self, kind, value, tb):
        for _, p, _ in self.procs:
            self.stop(p)
        if kind is not None:
            for name, _, log in self.procs:
                with open(log, errors="replace") as f:
                    lines = f.readlines()
                print(f"--- last lines of {name}.log:", file=sys.stderr)
                sys.stderr.writelines(lines[-25:])
        return False


def wait_log(procs, p, pattern, timeout_s, what):
    """Wait for a line matching pattern in p's log (p must keep running)."""
    rx = re.compile(pattern)

    def probe():
        if p.poll() is not None:
            fail(f"{what}: the process exited with {p.returncode} (log: {procs.log_of(p)})")
        with open(procs.log_of(p), errors="replace") as f:
            return any(rx.search(line) for line in f)
    return wait_until(what, timeout_s, probe)


# --- the collector -------------------------------------------------------------------------------------------
def telemetry_overlay(port):
    """The collector's own metrics on 127.0.0.1:port (its default, :8888, may be taken by a neighbour)."""
    return {"service": {"telemetry": {"metrics": {"level": "detailed", "readers": [
        {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": port}}}}]}}}}


def start_collector(procs, otelcol, name, configs, env=None):
    """Start otelcol with the configuration files (merged in order) and wait until it runs pipelines; raises
    PortTaken when it exits saying a port was taken (see `with_collector_ports`)."""
    argv = [otelcol] + [f"--config=file:{c}" for c in configs]
    p = procs.start(name, argv, env)
    try:
        wait_log(procs, p, r"Everything is ready", 60, f"collector {name} started")
    except TestFailure:
        with open(procs.log_of(p), errors="replace") as f:
            log = f.read()
        if p.poll() is not None and says_port_taken(log):
            # gone, and its log is overwritten by the next try's: not listed with the test's processes
            procs.procs = [entry for entry in procs.procs if entry[1] is not p]
            raise PortTaken(log[-2000:])
        raise
    return p


def write_yaml(path, doc):
    with open(path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    return path


def local_overlay(cfg, ports, scrape_targets=None, cloudwatch=None):
    """What makes a shipped configuration run here, and nothing else: listen addresses on 127.0.0.1 (free
    ports), the prometheus receiver's scrape jobs pointed at dcgm-otel (their discovery replaced, their
    metric_relabel_configs kept), awsemf's endpoint at the fake CloudWatch Logs API, resource detection
    limited to `env` (ec2 would ask the instance metadata service), the batch processor's timeout 1 s.
    `ports` maps a role ("otlp_grpc", "otlp_http", "prometheus", "health_check", "telemetry") to a port."""
    out = {}

    def put(path, value):
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value

    for cid, c in (cfg.get("receivers") or {}).items():
        kind = cid.split("/", 1)[0]
        if kind == "otlp":
            for proto in ((c or {}).get("protocols") or {}):
                put(["receivers", cid, "protocols", proto, "endpoint"], f"127.0.0.1:{ports['otlp_' + proto]}")
        elif kind == "prometheus" and scrape_targets:
            jobs = []
            for job in copy.deepcopy(((c or {}).get("config") or {}).get("scrape_configs") or []):
                for key in [k for k in job if k.endswith("_sd_configs") or k == "relabel_configs"]:
                    del job[key]
                job.update(scrape_interval="1s", scrape_timeout="1s",
                           static_configs=[{"targets": list(scrape_targets)}])
                jobs.append(job)
            put(["receivers", cid, "config", "scrape_configs"], jobs)
    for cid, c in (cfg.get("processors") or {}).items():
        kind = cid.split("/", 1)[0]
        if kind == "resource_detection":
            put(["processors", cid, "detectors"], ["env"])
        elif kind == "batch":
            put(["processors", cid, "timeout"], "1s")
    for cid, c in (cfg.get("exporters") or {}).items():
        kind = cid.split("/", 1)[0]
        if kind == "prometheus":
            put(["exporters", cid, "endpoint"], f"127.0.0.1:{ports['prometheus']}")
        elif kind == "awsemf" and cloudwatch:
            put(["exporters", cid, "endpoint"], cloudwatch)
    for cid in (cfg.get("extensions") or {}):
        if cid.split("/", 1)[0] == "health_check":
            put(["extensions", cid, "endpoint"], f"127.0.0.1:{ports['health_check']}")
    out.setdefault("service", {}).update(telemetry_overlay(ports["telemetry"])["service"])
    return out


def collector_ports():
    return {role: free_port() for role in ("otlp_grpc", "otlp_http", "prometheus", "health_check", "telemetry")}


# --- dcgm-otel -----------------------------------------------------------------------------------------------
def start_dcgm_otel(procs, binary, name, args, env=None):
    """Start dcgm-otel serving :9400 on a port it picks (:0, read from its "serving /metrics" line); returns
    (process, /metrics URL) once /health answers."""
    p = procs.start(name, [binary, "-a", "127.0.0.1:0"] + list(args), env)
    port = logged_port(procs, p, "serving /metrics", 30, f"dcgm-otel {name}'s port")
    url = f"http://127.0.0.1:{port}"

    def healthy():
        if p.poll() is not None:
            fail(f"dcgm-otel {name} exited with {p.returncode} (log: {procs.log_of(p)})")
        return http_get(f"{url}/health", timeout=2) is not None
    wait_until(f"dcgm-otel {name} /health", 30, healthy)
    return p, f"{url}/metrics"


def self_metrics(url):
    return parse_prometheus(http_get(url))


def read_json_lines(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out
