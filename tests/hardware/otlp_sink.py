#!/usr/bin/env python3
"""An OTLP/HTTP receiver for the hardware check, standard library only (the GPU machine has no Rust
and no OpenTelemetry packages): it accepts `POST /v1/metrics` and `/v1/logs` (protobuf, gzip or not),
answers 200 with an empty export response, decodes each metrics request into plain JSON (Resources with
their attributes, metrics with their points) and appends it as one line to `--out`. Logs requests are
counted, not decoded. It listens on 127.0.0.1 on the given port (0: any; the port is printed as
`listening on 127.0.0.1:PORT` and written to `--port-file`) and exits after `--seconds`.

The protobuf wire format is decoded by hand for the messages of opentelemetry-proto's
metrics/v1/metrics.proto, resource/v1 and common/v1 that the check reads; tests/hardware/test_hwcheck.py
checks the decoder against a request recorded from the exporter.
"""

import argparse
import gzip
import json
import os
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# ---------------------------------------------------------------------------------------------------
# Protobuf wire format
# ---------------------------------------------------------------------------------------------------


class DecodeError(ValueError):
    pass


def _varint(buf, i):
    shift = value = 0
    while True:
        if i >= len(buf):
            raise DecodeError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long")


def fields(buf):
    """(field number, wire type, value) of each field of a message: varints as int, fixed64/fixed32 as
    their 8/4 raw bytes, length-delimited as bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise DecodeError(f"wire type {wt} of field {num}")
        if i > len(buf):
            raise DecodeError(f"field {num} runs past the end")
        yield num, wt, v


def _double(b):
    return struct.unpack("<d", b)[0]


def _sfixed64(b):
    return struct.unpack("<q", b)[0]


def _fixed64(b):
    return struct.unpack("<Q", b)[0]


def any_value(buf):
    """common.v1.AnyValue: string 1, bool 2, int 3, double 4, array 5, kvlist 6, bytes 7."""
    for num, wt, v in fields(buf):
        if num == 1:
            return v.decode("utf-8", errors="replace")
        if num == 2:
            return bool(v)
        if num == 3:
            return v - (1 << 64) if v >= 1 << 63 else v
        if num == 4:
            return _double(v)
        if num == 5:
            return [any_value(x) for n, _, x in fields(v) if n == 1]
        if num == 6:
            return attributes(x for n, _, x in fields(v) if n == 1)
        if num == 7:
            return v.hex()
    return None


def attributes(kvs):
    """common.v1.KeyValue list (key 1, value 2) → dict."""
    out = {}
    for kv in kvs:
        key, val = "", None
        for num, _, v in fields(kv):
            if num == 1:
                key = v.decode("utf-8", errors="replace")
            elif num == 2:
                val = any_value(v)
        out[key] = val
    return out


def number_point(buf):
    """metrics.v1.NumberDataPoint: attributes 7, start 2, time 3, as_double 4, as_int 6."""
    p, attrs = {}, []
    for num, _, v in fields(buf):
        if num == 7:
            attrs.append(v)
        elif num == 2:
            p["start_time_unix_nano"] = _fixed64(v)
        elif num == 3:
            p["time_unix_nano"] = _fixed64(v)
        elif num == 4:
            p["value"] = _double(v)
        elif num == 6:
            p["value"] = _sfixed64(v)
    p["attributes"] = attributes(attrs)
    return p


def exp_histogram_point(buf):
    """metrics.v1.ExponentialHistogramDataPoint: attributes 1, time 3, count 4, sum 5, min 12, max 13."""
    p, attrs = {}, []
    for num, _, v in fields(buf):
        if num == 1:
            attrs.append(v)
        elif num == 3:
            p["time_unix_nano"] = _fixed64(v)
        elif num == 4:
            p["count"] = _fixed64(v)
        elif num == 5:
            p["sum"] = _double(v)
        elif num == 12:
            p["min"] = _double(v)
        elif num == 13:
            p["max"] = _double(v)
    p["attributes"] = attributes(attrs)
    return p


def metric(buf):
    """metrics.v1.Metric: name 1, unit 3, gauge 5, sum 7, histogram 9, exponential_histogram 10, summary 11."""
    m = {"name": "", "unit": "", "kind": "", "points": []}
    for num, _, v in fields(buf):
        if num == 1:
            m["name"] = v.decode("utf-8", errors="replace")
        elif num == 3:
            m["unit"] = v.decode("utf-8", errors="replace")
        elif num in (5, 7):
            m["kind"] = "gauge" if num == 5 else "sum"
            for n2, _, dp in fields(v):
                if n2 == 1:
                    m["points"].append(number_point(dp))
                elif n2 == 3 and num == 7:
                    m["monotonic"] = bool(dp)
        elif num == 10:
            m["kind"] = "exponential_histogram"
            m["points"] = [exp_histogram_point(dp) for n2, _, dp in fields(v) if n2 == 1]
        elif num in (9, 11):
            m["kind"] = "histogram" if num == 9 else "summary"
    return m


def metrics_request(buf):
    """collector.metrics.v1.ExportMetricsServiceRequest → {"resources": [{attributes, schema_url, metrics}]}."""
    resources = []
    for num, _, rm in fields(buf):
        if num != 1:
            continue
        res = {"attributes": {}, "schema_url": "", "metrics": []}
        for n2, _, v in fields(rm):
            if n2 == 1:
                res["attributes"] = attributes(x for n3, _, x in fields(v) if n3 == 1)
            elif n2 == 2:
                for n3, _, x in fields(v):
                    if n3 == 2:
                        res["metrics"].append(metric(x))
            elif n2 == 3:
                res["schema_url"] = v.decode("utf-8", errors="replace")
        resources.append(res)
    return {"resources": resources}


# ---------------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------------


class Sink:
    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()
        self.metrics = self.logs = self.errors = 0


def handler(sink):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            if self.headers.get("Content-Encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            if self.path.endswith("/v1/metrics"):
                try:
                    req = metrics_request(body)
                except DecodeError as e:
                    with sink.lock:
                        sink.errors += 1
                    print(f"otlp_sink: undecodable metrics request ({len(body)} bytes): {e}", file=sys.stderr, flush=True)
                    req = None
                if req is not None:
                    req["received_unix"] = time.time()
                    with sink.lock:
                        sink.metrics += 1
                        with open(sink.out, "a") as f:
                            f.write(json.dumps(req, separators=(",", ":")) + "\n")
            elif self.path.endswith("/v1/logs"):
                with sink.lock:
                    sink.logs += 1
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    return H


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON lines, one per metrics request")
    p.add_argument("--port-file", help="write the port here once listening")
    p.add_argument("--seconds", type=float, default=600, help="exit after this long (default 600)")
    a = p.parse_args(argv)
    sink = Sink(a.out)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), handler(sink))
    srv.daemon_threads = True
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(f"{port}\n")
        os.replace(a.port_file + ".tmp", a.port_file)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    threading.Timer(a.seconds, srv.shutdown).start()
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        print(f"otlp_sink: {sink.metrics} metrics requests, {sink.logs} logs requests, {sink.errors} undecodable", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
