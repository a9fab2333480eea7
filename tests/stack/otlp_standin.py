#!/usr/bin/env python3
"""A stand-in for the compose stack's OpenTelemetry Collector, for the stack test only.

No otelcol binary can be installed on the CI machine (no Debian, PyPI or npm package carries a usable one),
so the stack test cannot run otel-config/collector.yaml for real. This script plays the part of that file's
pipeline `otlp receiver (HTTP) -> prometheus exporter` closely enough for the dashboards' OTLP-path panels to
be checked against what dcgm-otel really sends:

  POST /v1/metrics   OTLP/HTTP protobuf (optionally gzip), as dcgm-otel --otlp sends it
  GET  /metrics      Prometheus text, translated the way collector.yaml configures the prometheus exporter:
                     resource_to_telemetry_conversion enabled (every resource attribute becomes a label),
                     translation_strategy UnderscoreEscapingWithoutSuffixes (names kept, invalid characters
                     -> '_', no unit or _total suffixes), job/instance from service.namespace/service.name
                     and service.instance.id, otel_scope_name/otel_scope_version labels.
  GET  /attributes   JSON: for each metric name, its kind, unit and the distinct attribute sets of its points
                     (resource attributes merged with the point's, names as sent): what a collector exporter
                     with resource_to_telemetry_conversion sees (stack_check.py cloudwatch-live reads it).

It is not a collector and not a test of one: only gauges and sums are rendered (histograms are counted and
reported on stderr), and series expire 5 minutes after their last update (the exporter's metric_expiration).

Usage: otlp_standin.py PORT    (listens on 127.0.0.1)
"""
import gzip
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

EXPIRY_S = 300
_lock = threading.Lock()
_series = {}   # (name, labels tuple) -> (kind, help, value, last update)
_stats = {"requests": 0, "points": 0, "skipped_histograms": 0}
_attribute_sets = {}   # metric name -> {"kind", "unit", "sets": {frozenset of (key, value)}}
MAX_SETS_PER_METRIC = 2000


def sanitize_name(name):
    out = re.sub(r"[^a-zA-Z0-9_:]", "_", name)
    return "_" + out if out[:1].isdigit() else out


def sanitize_label(key):
    out = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    if out[:1].isdigit():
        out = "key_" + out
    return out


def any_value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return ""
    val = getattr(v, kind)
    if kind == "bool_value":
        return "true" if val else "false"
    if kind in ("array_value", "kvlist_value", "bytes_value"):
        return str(val)
    return str(val)


def ingest(req):
    now = time.time()
    with _lock:
        _stats["requests"] += 1
        for rm in req.resource_metrics:
            res = {kv.key: any_value(kv.value) for kv in rm.resource.attributes}
            base = {sanitize_label(k): v for k, v in res.items()}
            svc = res.get("service.name", "")
            ns = res.get("service.namespace", "")
            if svc:
                base["job"] = f"{ns}/{svc}" if ns else svc
            if res.get("service.instance.id"):
                base["instance"] = res["service.instance.id"]
            for sm in rm.scope_metrics:
                scope = {}
                if sm.scope.name:
                    scope["otel_scope_name"] = sm.scope.name
                if sm.scope.version:
                    scope["otel_scope_version"] = sm.scope.version
                for m in sm.metrics:
                    data = m.WhichOneof("data")
                    if data == "gauge":
                        kind, points = "gauge", m.gauge.data_points
                    elif data == "sum":
                        kind = "counter" if m.sum.is_monotonic else "gauge"
                        points = m.sum.data_points
                    else:
                        _stats["skipped_histograms"] += 1
                        continue
                    name = sanitize_name(m.name)
                    seen = _attribute_sets.setdefault(m.name, {"kind": kind, "unit": m.unit, "sets": set()})
                    for p in points:
                        if len(seen["sets"]) < MAX_SETS_PER_METRIC:
                            attrs = dict(res)
                            attrs.update((kv.key, any_value(kv.value)) for kv in p.attributes)
                            seen["sets"].add(frozenset(attrs.items()))
                        labels = dict(base, **scope)
                        for kv in p.attributes:
                            labels[sanitize_label(kv.key)] = any_value(kv.value)
                        value = p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)
                        _series[(name, tuple(sorted(labels.items())))] = (kind, m.description, value, now)
                        _stats["points"] += 1


def escape(v):
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render():
    now = time.time()
    with _lock:
        for key in [k for k, s in _series.items() if now - s[3] > EXPIRY_S]:
            del _series[key]
        families = {}
        for (name, labels), (kind, help_, value, _) in _series.items():
            families.setdefault(name, (kind, help_, []))[2].append((labels, value))
    out = []
    for name in sorted(families):
        kind, help_, samples = families[name]
        out.append(f"# HELP {name} {help_}".rstrip() + "\n")
        out.append(f"# TYPE {name} {kind}\n")
        for labels, value in sorted(samples):
            body = ",".join(f'{k}="{escape(v)}"' for k, v in labels)
            out.append(f"{name}{{{body}}} {value!r}\n")
    return "".join(out).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep the test output quiet
        pass

    def _reply(self, code, body, ctype):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/metrics":
            return self._reply(404, b"not found", "text/plain")
        try:
            if self.headers.get("Content-Encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            req = metrics_service_pb2.ExportMetricsServiceRequest()
            req.ParseFromString(body)
            ingest(req)
        except Exception as e:  # a malformed request is the sender's bug: answer 400 and say why
            print(f"otlp_standin: bad request: {e}", file=sys.stderr)
            return self._reply(400, str(e).encode(), "text/plain")
        resp = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        self._reply(200, resp, "application/x-protobuf")

    def do_GET(self):
        if self.path == "/metrics":
            return self._reply(200, render(), "text/plain; version=0.0.4")
        if self.path == "/attributes":
            with _lock:
                doc = {name: {"kind": a["kind"], "unit": a["unit"], "sets": [dict(s) for s in a["sets"]]}
                       for name, a in _attribute_sets.items()}
            return self._reply(200, json.dumps(doc).encode(), "application/json")
        if self.path == "/stats":
            with _lock:
                return self._reply(200, repr(_stats).encode(), "text/plain")
        self._reply(404, b"not found", "text/plain")


def main():
    port = int(sys.argv[1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
