"""The dcgm receiver (collector/receiver/dcgmreceiver) inside the built collector, checked against the
standalone dcgm-otel binary and under faults. collector_test.py runs them (`receiver`, `receiver-faults`).

The receiver loads the engine library cargo built beside the binary (target/<profile>/libdcgm_otel_engine.so,
named in its `library_path`), so the collector binary (cached by build.sh) is always paired with the engine of
this checkout. The DCGM cases load the repository's fake libdcgm (target/<profile>/libfake_libdcgm.so, behind a
`libdcgm.so.4` symlink), which serves the simulated fleet through the DCGM C ABI.

Same output (`receiver`): for each case, one collector runs the receiver (its pipelines into file exporters) and
an otlp receiver (into other file exporters) to which the binary, started with the same flags, fleet and node
name, pushes over OTLP gRPC. The receiver's first metrics request, as the file exporter wrote it, must equal the
binary's first request (JSON, timestamps removed): same Resources and attributes, scopes, metrics, data point
attributes and values. Both read a deterministic fleet: the simulator's values are a function of the scenario,
the seed, the node name and the number of collections, and the fake libdcgm serves the same model per poll; the
first collection of each is the same collection. Incident log records are compared in order.

Faults (`receiver-faults`):
- lifecycle: a collector is reloaded (SIGHUP: the collector shuts every component down and starts the new
  configuration) through no receiver -> one -> two in one collector -> one -> ... -> none. After each reload,
  once every receiver has delivered again, the threads named by the engine (a Rust thread's name; Go's threads
  carry the process's) must be those of the first round of the same kind, none at the end; the other threads not
  more than in the first cycle plus 2 (Go keeps its idle threads); and the collector's RSS must not grow by more than
  LEAK_MARGIN_MIB from the warm rounds to the end (one `large` engine is ~7 MiB: a leaked engine per round shows).
- panic: with DCGM_OTEL_TEST_PANIC=collect@3 (a trigger only debug builds of the engine have) the collector
  keeps running; the panic is logged as an error, counted, and collections go on.
- hang: on the fake libdcgm with a poll that blocks for 10 minutes (FAKE_DCGM_FAULTS=hang_ms), SIGTERM ends
  the collector well within that (the receiver's stop_timeout, 2 s, bounds its shutdown) and exit code 0.
"""
import json
import os
import signal
import tempfile

from collector_run import (Processes, fail, http_get, parse_prometheus, start_collector, start_dcgm_otel,
                           telemetry_overlay, wait_log, wait_until, with_collector_ports, write_yaml)

ENGINE_LIBRARY = "libdcgm_otel_engine.so"
FAKE_LIBDCGM = "libfake_libdcgm.so"
NODE = "receiver-node"
TIMESTAMPS = ("timeUnixNano", "startTimeUnixNano", "observedTimeUnixNano")

# Each case: the receiver's configuration and the binary's flags that mean the same (the receiver's README
# maps each key to its flag), and the environment of both processes. `fake`: the DCGM source on the fake
# libdcgm (FAKE_DCGM_* in `env`). `records`: how many incident log records to compare, in order.
SAME_AS_BINARY = [
    dict(name="simulator, default scenario with its pods (-k), DCGM names",
         receiver={"source": "simulate", "scenario": "default", "simulate_seed": 1, "collection_interval": "60s",
                   "kubernetes": {"enabled": True}},
         flags=["--simulate=default", "--simulate-seed", "1", "-c", "60000", "-k"]),
    dict(name="simulator, dgx-h100-mig, semconv names, one host Resource, a distribution",
         receiver={"source": "simulate", "scenario": "dgx-h100-mig", "collection_interval": "60s",
                   "metric_names": "semconv", "resource_mode": "host",
                   "distributions": ["DCGM_FI_DEV_POWER_USAGE@100ms"]},
         flags=["--simulate=dgx-h100-mig", "-k=false", "-c", "60000", "--otel-metric-names", "semconv",
                "--otel-resource-mode", "host", "--distribution", "DCGM_FI_DEV_POWER_USAGE@100ms"]),
    dict(name="simulator, incidents scenario: metrics and the incident log records",
         receiver={"source": "simulate", "scenario": "incidents", "collection_interval": "200ms"},
         flags=["--simulate=incidents", "-k=false", "-c", "200"], records=3),
    dict(name="fake libdcgm, default fleet (MIG instances), DCGM attribute style",
         receiver={"source": "dcgm", "collection_interval": "1s", "attribute_style": "dcgm"},
         flags=["--source", "dcgm", "-k=false", "-c", "1000", "--otel-attribute-style", "dcgm"],
         env={"FAKE_DCGM_SCENARIO": "default", "FAKE_DCGM_SEED": "1"}, fake=True),
    dict(name="fake libdcgm, hgx-h100 (8 GPUs), another seed",
         receiver={"source": "dcgm", "collection_interval": "1s"},
         flags=["--source", "dcgm", "-k=false", "-c", "1000"],
         env={"FAKE_DCGM_SCENARIO": "hgx-h100", "FAKE_DCGM_SEED": "7"}, fake=True),
]


def libraries(binary):
    """(engine library, fake libdcgm) built by cargo beside the binary."""
    target = os.path.dirname(os.path.abspath(binary))
    found = tuple(os.path.join(target, name) for name in (ENGINE_LIBRARY, FAKE_LIBDCGM))
    missing = [p for p in found if not os.path.exists(p)]
    if missing:
        fail(f"{missing} not built: cargo build --workspace builds them beside {binary}")
    return found


def fake_libdcgm_dir(work, fake):
    """A folder whose libdcgm.so.4 is the fake (the name the loader and the source look for)."""
    folder = os.path.join(work, "fake-dcgm")
    os.makedirs(folder, exist_ok=True)
    link = os.path.join(folder, "libdcgm.so.4")
    if not os.path.exists(link):
        os.symlink(fake, link)
    return link


def without_times(node):
    if isinstance(node, dict):
        return {k: without_times(v) for k, v in node.items() if k not in TIMESTAMPS}
    if isinstance(node, list):
        return [without_times(v) for v in node]
    return node


def first_difference(a, b, path="$"):
    """Where two JSON values first differ, and how (None when equal)."""
    if type(a) is not type(b):
        return f"{path}: {json.dumps(a)[:200]} vs {json.dumps(b)[:200]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in the {'binary' if k in b else 'receiver'}'s"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path}: {len(a)} items in the receiver's, {len(b)} in the binary's"
        return None
    return None if a == b else f"{path}: receiver {json.dumps(a)[:200]}, binary {json.dumps(b)[:200]}"


def json_lines(path):
    """The complete lines a file exporter has written so far, parsed."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    return [json.loads(line) for line in data[:data.rfind(b"\n") + 1].splitlines() if line.strip()]


def line_count(path):
    """How many complete lines a file exporter has written (without parsing them: large requests)."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return f.read().count(b"\n")


def log_records(docs):
    """[[Resource, scope, record]] of file-exporter log lines, in order."""
    out = []
    for doc in docs:
        for rl in doc.get("resourceLogs") or []:
            for sl in rl.get("scopeLogs") or []:
                for rec in sl.get("logRecords") or []:
                    out.append([rl.get("resource"), sl.get("scope"), rec])
    return out


def counts(doc):
    resources = doc.get("resourceMetrics") or []
    points = sum(len(m[kind].get("dataPoints") or []) for r in resources for s in r.get("scopeMetrics") or []
                 for m in s.get("metrics") or [] for kind in m if isinstance(m[kind], dict) and kind != "metadata")
    return len(resources), points


def compare_case(otelcol, binary, case, engine, fake, work):
    files = {k: os.path.join(work, f"{k}.jsonl") for k in
             ("receiver-metrics", "receiver-logs", "binary-metrics", "binary-logs")}
    receiver = dict(case["receiver"], library_path=engine)
    flags = list(case["flags"])
    if case.get("fake"):
        library = fake_libdcgm_dir(work, fake)
        receiver["dcgm_library"] = library
        flags += ["--dcgm-library", library]

    def config(ports):
        return {
            "receivers": {"dcgm": receiver,
                          "otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{ports['otlp_grpc']}"}}}},
            "exporters": {f"file/{k}": {"path": p, "flush_interval": "100ms"} for k, p in files.items()},
            "service": dict(telemetry_overlay(ports["telemetry"])["service"], pipelines={
                "metrics/receiver": {"receivers": ["dcgm"], "exporters": ["file/receiver-metrics"]},
                "logs/receiver": {"receivers": ["dcgm"], "exporters": ["file/receiver-logs"]},
                "metrics/binary": {"receivers": ["otlp"], "exporters": ["file/binary-metrics"]},
                "logs/binary": {"receivers": ["otlp"], "exporters": ["file/binary-logs"]}}),
        }
    env = dict(case.get("env") or {}, NODE_NAME=NODE)
    records = case.get("records", 0)
    with Processes(work) as procs:
        ports, _ = with_collector_ports(lambda ports: start_collector(
            procs, otelcol, "otelcol", [write_yaml(os.path.join(work, "collector.yaml"), config(ports))], env))
        start_dcgm_otel(procs, binary, "dcgm-otel", flags + [
            "--otlp", "--otlp-protocol", "grpc", "--otlp-endpoint", f"http://127.0.0.1:{ports['otlp_grpc']}"], env)
        for side in ("receiver", "binary"):
            wait_until(f"{case['name']}: the {side}'s first metrics request in the collector's file", 60,
                       lambda: json_lines(files[f"{side}-metrics"]))
            if records:
                wait_until(f"{case['name']}: {records} incident log records from the {side}", 60,
                           lambda: len(log_records(json_lines(files[f"{side}-logs"]))) >= records)
    got, sent = (without_times(json_lines(files[f"{side}-metrics"])[0]) for side in ("receiver", "binary"))
    errors = []
    if not counts(got)[1]:
        errors.append(f"{case['name']}: the receiver's first request has no data point")
    diff = first_difference(got, sent)
    if diff:
        errors.append(f"{case['name']}: the receiver's first metrics request differs from the binary's at {diff}")
    if records:
        got_r, sent_r = (without_times(log_records(json_lines(files[f"{side}-logs"]))[:records])
                         for side in ("receiver", "binary"))
        diff = first_difference(got_r, sent_r)
        if diff:
            errors.append(f"{case['name']}: incident log records differ at {diff}")
    if errors:
        fail("\n".join(errors))
    resources, points = counts(got)
    histograms = json.dumps(got).count('"exponentialHistogram"')
    print(f"ok: {case['name']}: the receiver's first request equals the binary's ({resources} Resources, "
          f"{points} data points, {histograms} exponential histograms"
          + (f", the first {records} incident log records" if records else "") + ", timestamps aside)")


def cmd_receiver(otelcol, binary):
    engine, fake = libraries(binary)
    for case in SAME_AS_BINARY:
        with tempfile.TemporaryDirectory() as work:
            compare_case(otelcol, binary, case, engine, fake, work)


# --- faults: lifecycle, panic, hang -------------------------------------------------------------------------------
LEAK_MARGIN_MIB = 48
# The lifecycle's configurations in order: receivers per round ("none", "one", "two").
ROUNDS = ["none", "one", "two"] + ["one", "two"] * 7 + ["none"]
WARM_ROUND = 5  # RSS is compared from here (allocator arenas and the collector's own tables warmed) to the end


def sim_receiver(engine, scenario, interval):
    return {"source": "simulate", "scenario": scenario, "collection_interval": interval, "library_path": engine}


def lifecycle_config(kind, engine, files, telemetry_port):
    """No receiver (an otlp receiver keeps a pipeline), one, or two in one collector: dcgm/a (default, 200ms)
    and dcgm/b (large, 1s)."""
    receivers = {"otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}}}}  # nothing sends to it
    pipelines = {"metrics/otlp": {"receivers": ["otlp"], "exporters": ["file/otlp"]}}
    wanted = {"none": [], "one": ["a"], "two": ["a", "b"]}[kind]
    for name in wanted:
        receivers[f"dcgm/{name}"] = sim_receiver(engine, *{"a": ("default", "200ms"), "b": ("large", "1s")}[name])
        pipelines[f"metrics/{name}"] = {"receivers": [f"dcgm/{name}"], "exporters": [f"file/{name}"]}
    return {
        "receivers": receivers,
        "exporters": {f"file/{k}": {"path": p, "flush_interval": "100ms", "append": True} for k, p in files.items()},
        "service": dict(telemetry_overlay(telemetry_port)["service"], pipelines=pipelines),
    }, wanted


def threads_of(pid):
    """(total, sorted names of the threads the engine named): Go's threads carry the process's name."""
    own = open(f"/proc/{pid}/comm").read().strip()
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass  # the thread ended meanwhile
    return len(names), sorted(n for n in names if n != own)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def count_in_log(procs, p, text):
    with open(procs.log_of(p), errors="replace") as f:
        return f.read().count(text)


def lifecycle(otelcol, engine, work):
    files = {k: os.path.join(work, f"{k}.jsonl") for k in ("otlp", "a", "b")}
    path = os.path.join(work, "collector.yaml")
    samples = []
    with Processes(work) as procs:
        p = None
        telemetry = None
        for n, kind in enumerate(ROUNDS):
            if p is None:
                wanted = lifecycle_config(kind, engine, files, 0)[1]
                before = {name: line_count(files[name]) for name in wanted}

                def start(ports):
                    write_yaml(path, lifecycle_config(kind, engine, files, ports["telemetry"])[0])
                    return start_collector(procs, otelcol, "otelcol", [path], {"NODE_NAME": NODE})
                ports, p = with_collector_ports(start)
                telemetry = ports["telemetry"]
            else:
                cfg, wanted = lifecycle_config(kind, engine, files, telemetry)
                write_yaml(path, cfg)
                ready = count_in_log(procs, p, "Everything is ready")
                os.kill(p.pid, signal.SIGHUP)
                wait_until(f"round {n} ({kind}): the collector reloaded", 60,
                           lambda: p.poll() is None and count_in_log(procs, p, "Everything is ready") > ready)
                before = {name: line_count(files[name]) for name in wanted}
            for name in wanted:
                wait_until(f"round {n} ({kind}): dcgm/{name} delivers after the reload", 60,
                           lambda: line_count(files[name]) >= before[name] + 2)
            if p.poll() is not None:
                fail(f"round {n} ({kind}): the collector exited with {p.returncode}")
            total, named = threads_of(p.pid)
            go_sys = sum(v for m, _, v in parse_prometheus(http_get(f"http://127.0.0.1:{telemetry}/metrics"))
                         if m == "otelcol_process_runtime_total_sys_memory_bytes") / 1024
            samples.append((kind, total, named, rss_kib(p.pid), go_sys))
        procs.stop(p)
    errors = []
    first = {}
    # Go never ends an idle thread of its own: their number grows to what the busiest round needed (the first
    # cycle, none -> one -> two) and stays there.
    go_threads = max(total - len(named) for _, total, named, _, _ in samples[:3])
    for n, (kind, total, named, rss, _) in enumerate(samples):
        if total - len(named) > go_threads + 2:
            errors.append(f"round {n} ({kind}): {total - len(named)} threads not named by the engine, at most "
                          f"{go_threads} in the first rounds (+2 for Go's own)")
        if kind not in first:
            first[kind] = (total, named)
        elif named != first[kind][1]:
            errors.append(f"round {n} ({kind}): engine threads {named}, the first {kind} round had {first[kind][1]}")
    if samples[-1][2]:
        errors.append(f"no receiver left, yet engine threads remain: {samples[-1][2]}")
    if first["two"][1] == first["one"][1] or not first["one"][1]:
        errors.append(f"the engine's threads are not told apart (one receiver: {first['one'][1]}, two: "
                      f"{first['two'][1]}): the thread check would see no leak")
    grown = (samples[-1][3] - samples[WARM_ROUND][3]) / 1024
    if grown > LEAK_MARGIN_MIB:
        errors.append(f"RSS grew by {grown:.1f} MiB from round {WARM_ROUND} to the end (margin {LEAK_MARGIN_MIB} MiB): "
                      + ", ".join(f"{k} {r // 1024} (Go runtime {g // 1024:.0f})" for k, _, _, r, g in samples))
    if errors:
        fail("\n".join(errors))
    print(f"ok: lifecycle: {len(ROUNDS) - 1} reloads (SIGHUP) through {' -> '.join(ROUNDS)}: engine threads "
          f"{len(first['one'][1])} with one receiver, {len(first['two'][1])} with two, none at the end; the collector's "
          f"threads {first['none'][0]} / {first['one'][0]} / {first['two'][0]} (none / one / two) in the first rounds, "
          f"{samples[-1][1]} at the end (Go keeps its idle threads); "
          f"RSS {samples[WARM_ROUND][3] // 1024} MiB at round {WARM_ROUND}, {samples[-1][3] // 1024} MiB at the end "
          f"({grown:+.1f} MiB, margin {LEAK_MARGIN_MIB})")
    return samples


def panic_becomes_an_error(otelcol, engine, work):
    out = os.path.join(work, "panic.jsonl")

    def config(ports):
        return {
            "receivers": {"dcgm": sim_receiver(engine, "default", "200ms")},
            "exporters": {"file": {"path": out, "flush_interval": "100ms"}},
            "service": dict(telemetry_overlay(ports["telemetry"])["service"], pipelines={
                "metrics": {"receivers": ["dcgm"], "exporters": ["file"]}}),
        }
    with Processes(work) as procs:
        ports, p = with_collector_ports(lambda ports: start_collector(
            procs, otelcol, "otelcol", [write_yaml(os.path.join(work, "panic.yaml"), config(ports))],
            {"NODE_NAME": NODE, "DCGM_OTEL_TEST_PANIC": "collect@3"}))
        wait_log(procs, p, r"collecting from the dcgm-otel engine failed.*deliberate panic", 60,
                 "the engine's panic logged as an error")
        after = line_count(out)
        wait_until("collections go on after the panic", 60, lambda: line_count(out) >= after + 3)
        telemetry = parse_prometheus(http_get(f"http://127.0.0.1:{ports['telemetry']}/metrics"))
        errors = sum(v for n, _, v in telemetry if n.startswith("otelcol_receiver_dcgm_engine_errors"))
        if p.poll() is not None:
            fail(f"the collector exited with {p.returncode} after the engine's panic")
        if errors != 1:
            fail(f"otelcol_receiver_dcgm_engine_errors is {errors}, 1 expected (one deliberate panic)")
    print(f"ok: a panic in the engine (DCGM_OTEL_TEST_PANIC=collect@3) is one logged error, counted "
          f"(otelcol_receiver_dcgm_engine_errors 1); the collector runs on and {line_count(out) - after}+ "
          f"collections came after it")


HANG_MS = 600_000


def hang_does_not_block_shutdown(otelcol, engine, fake, work):
    calls = os.path.join(work, "calls.log")
    cfg = {
        "receivers": {"dcgm": {"source": "dcgm", "dcgm_library": fake_libdcgm_dir(work, fake),
                               "collection_interval": "200ms", "stop_timeout": "2s", "library_path": engine}},
        "exporters": {"file": {"path": os.path.join(work, "hang.jsonl"), "flush_interval": "100ms"}},
        # Its own metrics on a port it picks (:0): never read here, only kept off :8888.
        "service": dict(telemetry_overlay(0)["service"], pipelines={
            "metrics": {"receivers": ["dcgm"], "exporters": ["file"]}}),
    }
    env = {"NODE_NAME": NODE, "FAKE_DCGM_FAULTS": f"hang_ms={HANG_MS}@3", "FAKE_DCGM_CALL_LOG": calls}
    with Processes(work) as procs:
        p = start_collector(procs, otelcol, "otelcol", [write_yaml(os.path.join(work, "hang.yaml"), cfg)], env)
        wait_until("the fake libdcgm's third poll hangs", 60,
                   lambda: os.path.exists(calls) and "hang begins" in open(calls, errors="replace").read())
        p.send_signal(signal.SIGTERM)
        # The hang lasts 10 minutes: an exit within a minute is the receiver's stop_timeout at work.
        wait_until("the collector exits on SIGTERM while a DCGM call hangs", 60, lambda: p.poll() is not None)
        with open(procs.log_of(p), errors="replace") as f:
            log = f.read()
        if p.returncode != 0:
            fail(f"the collector exited with {p.returncode} while a DCGM call hung")
        if "did not stop in time" not in log:
            fail("the receiver did not say that the engine's stop timed out (the hang was not in progress?)")
    print(f"ok: a DCGM call hanging for {HANG_MS // 60000} minutes (fake libdcgm hang_ms) does not hold the "
          f"collector's shutdown: exit code 0 within the receiver's stop_timeout (2 s), the engine's thread left behind")


def cmd_receiver_faults(otelcol, binary):
    engine, fake = libraries(binary)
    with tempfile.TemporaryDirectory() as work:
        lifecycle(otelcol, engine, work)
    with tempfile.TemporaryDirectory() as work:
        panic_becomes_an_error(otelcol, engine, work)
    with tempfile.TemporaryDirectory() as work:
        hang_does_not_block_shutdown(otelcol, engine, fake, work)
