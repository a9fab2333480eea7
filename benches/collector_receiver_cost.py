#!/usr/bin/env python3
"""The dcgm receiver inside the collector beside the standalone exporter + OTLP path, for the `large` fleet,
in one run (issue 36; the table in docs/performance.md).

    benches/collector_receiver_cost.py OTELCOL [target/debug]           2 rounds x 20 s per path
    benches/collector_receiver_cost.py OTELCOL [target/debug] --smoke   1 round x 3 s (indicative only)

OTELCOL: tests/collector/build.sh's collector (with the dcgm receiver). The folder holds dcgm-otel and
libdcgm_otel_engine.so, built by the same cargo profile (compare like with like: both paths run that engine).

  standalone + OTLP: `dcgm-otel --simulate=large -k=false -c 1000 --otlp` (gRPC) into a collector whose otlp
                     receiver feeds a debug exporter (verbosity basic): two processes, CPU and RSS summed.
  receiver:          one collector whose dcgm receiver (source simulate, scenario large, 1s) feeds the same
                     debug exporter.

Per round, after a 5 s warm-up, over the window: CPU (utime + stime of every process of the path, from
/proc/<pid>/stat) per collection (collections: the debug exporter's lines in the window, one per request) and
RSS (VmRSS summed over the path's processes, the median of samples every second). Rounds alternate the paths
(A B, then B A). The machine is shared: figures are ratios within this run; no timing is asserted.
"""
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "collector"))
from collector_run import (Processes, logged_port, start_collector, start_dcgm_otel,  # noqa: E402
                           telemetry_overlay, wait_until, write_yaml)

TICKS = os.sysconf("SC_CLK_TCK")
REQUEST_LINE = re.compile(r"\bMetrics\b.*data points")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def requests_in(log):
    with open(log, errors="replace") as f:
        return sum(1 for line in f if REQUEST_LINE.search(line))


def collector_config(receivers, pipeline_receiver):
    return {"receivers": receivers, "exporters": {"debug": {"verbosity": "basic"}},
            # its own metrics on a port it picks (:0): never read here, only kept off :8888
            "service": dict(telemetry_overlay(0)["service"], pipelines={
                "metrics": {"receivers": [pipeline_receiver], "exporters": ["debug"]}})}


def measure(procs, pids, log, warmup_s, window_s):
    wait_until("the first requests in the debug exporter", 120, lambda: requests_in(log) >= 2)
    time.sleep(warmup_s)
    cpu0, req0, rss = sum(cpu_s(p) for p in pids), requests_in(log), []
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        rss.append(sum(rss_mib(p) for p in pids))
        time.sleep(1)
    cpu, req = sum(cpu_s(p) for p in pids) - cpu0, requests_in(log) - req0
    return {"cpu_ms": 1000 * cpu / max(req, 1), "rss": statistics.median(rss), "collections": req}


def standalone(otelcol, target, work, warmup_s, window_s):
    # :0: the OTLP receiver logs the port it bound ("Starting GRPC server" ... "endpoint": "127.0.0.1:PORT").
    cfg = collector_config({"otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}}}}, "otlp")
    with Processes(work) as procs:
        col = start_collector(procs, otelcol, "otelcol-otlp", [write_yaml(os.path.join(work, "otlp.yaml"), cfg)])
        grpc = logged_port(procs, col, "Starting GRPC server", 30, "the collector's OTLP/gRPC port")
        exp, _ = start_dcgm_otel(procs, os.path.join(target, "dcgm-otel"), "dcgm-otel", [
            "--simulate=large", "-k=false", "-c", "1000", "--otlp", "--otlp-protocol", "grpc",
            "--otlp-endpoint", f"http://127.0.0.1:{grpc}"], {"NODE_NAME": "bench"})
        return measure(procs, [col.pid, exp.pid], procs.log_of(col), warmup_s, window_s)


def receiver(otelcol, target, work, warmup_s, window_s):
    cfg = collector_config({"dcgm": {"source": "simulate", "scenario": "large", "collection_interval": "1s",
                                     "library_path": os.path.join(target, "libdcgm_otel_engine.so")}}, "dcgm")
    with Processes(work) as procs:
        col = start_collector(procs, otelcol, "otelcol-dcgm", [write_yaml(os.path.join(work, "dcgm.yaml"), cfg)],
                              {"NODE_NAME": "bench"})
        return measure(procs, [col.pid], procs.log_of(col), warmup_s, window_s)


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    smoke = "--smoke" in argv
    otelcol, target = args[0], os.path.abspath(args[1] if len(args) > 1 else "target/debug")
    rounds, warmup_s, window_s = (1, 1, 3) if smoke else (2, 5, 20)
    paths = {"standalone + OTLP": standalone, "receiver": receiver}
    results = {name: [] for name in paths}
    for r in range(rounds):
        order = list(paths) if r % 2 == 0 else list(reversed(paths))
        for name in order:
            with tempfile.TemporaryDirectory() as work:
                results[name].append(paths[name](otelcol, target, work, warmup_s, window_s))
    table = {name: {k: statistics.median(x[k] for x in runs) for k in ("cpu_ms", "rss", "collections")}
             for name, runs in results.items()}
    base = table["standalone + OTLP"]
    print(f"large fleet, engine from {target}, {rounds} round(s) x {window_s} s")
    print("| path | CPU per collection | RSS | collections in the window |")
    print("|---|---|---|---|")
    for name, t in table.items():
        print(f"| {name} | {t['cpu_ms']:.0f} ms ({t['cpu_ms'] / base['cpu_ms']:.2f}x) | {t['rss']:.0f} MiB "
              f"({t['rss'] / base['rss']:.2f}x) | {t['collections']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
