#!/usr/bin/env python3
"""The hardware check on a GPU machine (tests/hardware/run.sh runs it; docs/sources.md "Verified on
hardware"): it gathers readings and hands them to compare.py, which decides.

1. Idle: `dcgm-otel --source nvml` with every field NVML can give (nvml-counters.csv) against
   `nvidia-smi --query-gpu` in the same second (each round brackets nvidia-smi between the exporter's
   collection before it and the first one after it), plus identity labels, NvLinks, MIG.
2. Under load (cuda_load.py on device 0): utilization and power rise; `--collect-processes` shows the
   generator's pid with nvidia-smi's memory (±1 MiB); energy grows by ∫power; power, utilization,
   memory and SM clock against nvidia-smi again; `--distribution DCGM_FI_DEV_POWER_USAGE@100ms`.
3. OTLP of the same run (otlp_sink.py): one Resource per GPU, hw.power = DCGM_FI_DEV_POWER_USAGE of the
   same collection.

Every step has a deadline and the whole run one more (`--budget`); a step that cannot run is a FAIL row
that says why, and what was gathered so far is written after each phase. Output in `--out`: table.txt,
results.json, readings.json, logs.txt, metrics-idle.prom, metrics-load.prom, nvidia-smi-q.txt, otlp.json.
Exit code: 0 when no row FAILs, 1 when one does, 2 on bad arguments.
"""

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as C  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LOAD_ROUND_FAMILIES = ["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_SM_CLOCK"]


class OutOfTime(Exception):
    pass


class Run:
    """The run's state: its deadline, children, rows, raw readings and logs."""

    def __init__(self, a):
        self.a = a
        self.t0 = time.monotonic()
        self.deadline = self.t0 + a.budget
        self.children = []
        self.rows = []
        self.readings = {"rounds_idle": [], "rounds_load": [], "collections_load": []}
        self.logs = []
        self.env = {}
        self.timings = {}
        self.files = {}
        self.brief = ""

    # --- time -----------------------------------------------------------------------------------
    def left(self):
        return self.deadline - time.monotonic()

    def until(self, seconds):
        """A step deadline: `seconds` from now, never past the run's."""
        return min(time.monotonic() + seconds, self.deadline)

    def note(self, msg):
        line = f"[{time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        self.logs.append(line)

    def row(self, *r):
        self.rows.append(tuple(str(x) for x in r))

    # --- commands -------------------------------------------------------------------------------
    def cmd(self, args, timeout):
        """Run a command to completion within `timeout` (and the run's deadline); never raises."""
        timeout = max(1.0, min(timeout, self.left()))
        t = time.monotonic()
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, errors="replace")
            res = {"rc": p.returncode, "out": p.stdout, "err": p.stderr}
        except subprocess.TimeoutExpired as e:
            res = {"rc": None, "out": (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""),
                   "err": f"timed out after {timeout:.0f} s"}
        except OSError as e:
            res = {"rc": None, "out": "", "err": str(e)}
        res["secs"] = round(time.monotonic() - t, 3)
        self.logs.append(f"$ {' '.join(args)}  -> rc={res['rc']} in {res['secs']} s" + (f"; stderr: {res['err'].strip()[:500]}" if res["err"].strip() else ""))
        return res

    def spawn(self, name, args, env=None):
        log = os.path.join(self.a.work, name + ".log")
        f = open(log, "w")
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.children.append((name, p, log))
        self.logs.append(f"started {name} (pid {p.pid}): {' '.join(args)}")
        return p, log

    def stop(self, p, grace=5.0):
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
            except ProcessLookupError:
                pass
        return p.returncode

    def stop_all(self):
        for _, p, _ in self.children:
            try:
                self.stop(p, grace=3.0)
            except Exception:  # noqa: BLE001 - cleanup must go on
                pass


# ---------------------------------------------------------------------------------------------------
# The exporter and nvidia-smi
# ---------------------------------------------------------------------------------------------------


def scrape(port, timeout=3.0):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            return r.read().decode(errors="replace")
    except (OSError, ValueError):
        return None


class Exporter:
    """One dcgm-otel process on 127.0.0.1:0: its port (from its log) and its collections."""

    def __init__(self, run, name, extra):
        a = run.a
        self.run, self.name = run, name
        self.args = [a.bin, "--source", "nvml", "-f", a.counters, "-c", str(a.interval_ms), "-a", "127.0.0.1:0"] + extra
        self.p, self.log = run.spawn(name, self.args)
        self.port = None
        self.last = None
        self.on_collection = None  # called with each (text, samples, n) it observes

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_ready(self, seconds=25):
        """Port from the log, then a first collection with GPU series. Returns the scrape or None."""
        end = self.run.until(seconds)
        while time.monotonic() < end and self.port is None:
            m = re.search(r"serving /metrics address=\S*?:(\d+)", self.log_text())
            if m:
                self.port = int(m.group(1))
            elif self.p.poll() is not None:
                break
            else:
                time.sleep(0.1)
        while self.port and time.monotonic() < end and self.p.poll() is None:
            text = scrape(self.port)
            if text and "DCGM_FI_DEV_" in text:
                return self.observe(text)
            time.sleep(0.2)
        tail = self.log_text()[-1500:]
        self.run.note(f"{self.name}: not ready (exit code {self.p.poll()}); log tail: {tail}")
        return None

    def observe(self, text):
        samples = C.parse_prom(text)
        n = C.self_metric(samples, "dcgm_otel_collects_total")
        self.last = (text, samples, n)
        if self.on_collection:
            self.on_collection(self.last)
        return self.last

    def next_collection(self, after_n, seconds=5.0):
        """Scrape until the collection number passes `after_n`; None at the deadline."""
        end = self.run.until(seconds)
        while time.monotonic() < end:
            text = scrape(self.port)
            if text:
                got = self.observe(text)
                if got[2] is not None and (after_n is None or got[2] > after_n):
                    return got
            time.sleep(0.05)
        return None


def smi_query(run, fields, timeout=20):
    """One `nvidia-smi --query-gpu` call: (rows, raw result). Rows keyed by field name."""
    res = run.cmd([run.a.smi, "--query-gpu=" + ",".join(fields), "--format=csv,nounits"], timeout)
    rows = []
    if res["rc"] == 0:
        try:
            rows = C.parse_smi_csv(res["out"])
        except C.FormatError as e:
            res["err"] += f"; {e}"
    return rows, res


def smi_apps(run, timeout=15):
    res = run.cmd([run.a.smi, "--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,nounits"], timeout)
    try:
        return (C.parse_smi_csv(res["out"]) if res["rc"] == 0 else []), res
    except C.FormatError:
        return [], res


def bracket_round(run, exp, fields):
    """nvidia-smi between two consecutive collections of the exporter: it runs as soon as a new
    collection is seen, and the round ends at the next one. (C.Round per GPU uuid, raw result)."""
    before = exp.next_collection(exp.last[2] if exp.last else None, seconds=5.0)
    if before is None:
        return None, None
    rows, res = smi_query(run, fields)
    after = exp.next_collection(before[2], seconds=5.0)
    if not rows or after is None:
        run.note(f"round lost: nvidia-smi rc={res['rc']} {res['err'].strip()[:200]}; collection after: {after is not None}")
        return None, res
    return {r.get("uuid"): C.Round(r, before[1], after[1]) for r in rows}, res


# ---------------------------------------------------------------------------------------------------
# The phases
# ---------------------------------------------------------------------------------------------------


def environment(run):
    a = run.a
    run.env.update({"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "host": platform.node(),
                    "kernel": platform.release(), "python": sys.version.split()[0]})
    if not shutil.which(a.smi) and not os.path.exists(a.smi):
        run.row("nvidia-smi present", a.smi, "not found", C.FAIL)
        return None
    lst = run.cmd([a.smi, "-L"], 20)
    gpus = C.parse_smi_list(lst["out"])
    run.readings["nvidia_smi_L"] = lst["out"]
    helpq = run.cmd([a.smi, "--help-query-gpu"], 20)
    available = C.parse_help_query(helpq["out"])
    run.readings["help_query_fields"] = sorted(available)
    q = run.cmd([a.smi, "-q"], 30)
    run.files["nvidia-smi-q.txt"] = q["out"] + (f"\n(stderr) {q['err']}" if q["err"] else "")
    run.smi_q = C.parse_smi_q(q["out"])
    nvl = run.cmd([a.smi, "nvlink", "-s"], 15)
    run.readings["nvidia_smi_nvlink_s"] = {"rc": nvl["rc"], "out": nvl["out"][:20000], "err": nvl["err"][:2000]}
    run.nvlink_status = nvl["out"] if nvl["rc"] == 0 else None
    ver = run.cmd([a.bin, "--version"], 10)
    run.env.update({
        "gpus": gpus,
        "dcgm_otel": ((ver["out"] or ver["err"]).strip().splitlines() or [""])[0], "commit": read_text(os.path.join(os.path.dirname(a.bin), "COMMIT")).strip(),
    })
    if gpus and len(available) < 10:
        # An unexpected --help-query-gpu format: ask nvidia-smi about each field instead.
        run.note(f"--help-query-gpu gave {len(available)} names: probing the fields one by one")
        available = {f for f in C.query_fields(C.candidate_fields()) if probe(run, [f])}
    if not gpus or not available:
        run.row("nvidia-smi answers (-L, --help-query-gpu)", "GPUs and fields", f"{len(gpus)} GPUs, {len(available)} fields; {lst['err'][:200]}", C.FAIL)
        return None
    wanted = C.query_fields(available)
    fields = usable(run, wanted)
    run.readings["query_fields"] = fields
    return available - (set(wanted) - set(fields)), fields


def probe(run, fields):
    return run.cmd([run.a.smi, "--query-gpu=" + ",".join(fields), "--format=csv,nounits"], 20)["rc"] == 0


def usable(run, fields):
    """The fields one --query-gpu call can ask for together: when the whole list fails, halves are tried
    and the fields that fail alone are left out (each logged)."""
    if not fields or probe(run, fields):
        return fields
    if len(fields) == 1:
        run.note(f"nvidia-smi refuses --query-gpu={fields[0]}: left out")
        return []
    half = len(fields) // 2
    return usable(run, fields[:half]) + usable(run, fields[half:])


def idle_phase(run, available, fields):
    a = run.a
    exp = Exporter(run, "exporter-idle", [])
    first = exp.wait_ready()
    if first is None:
        run.row("dcgm-otel --source nvml starts and collects", "GPU series", "no (see logs.txt)", C.FAIL)
        return None
    run.files["metrics-idle.prom"] = first[0]
    rounds = {}
    for k in range(a.rounds):
        got, res = bracket_round(run, exp, fields)
        run.readings["rounds_idle"].append({"smi_out": res["out"] if res else None, "smi_secs": res["secs"] if res else None})
        for uuid, rnd in (got or {}).items():
            rounds.setdefault(uuid, []).append(rnd)
    if not rounds:
        run.row("idle rounds (exporter and nvidia-smi)", str(a.rounds), "0", C.FAIL)
        exp_stop(run, exp)
        return None
    env_row = next(iter(rounds.values()))[0].smi
    run.env.update({"gpu_model": env_row.get("name"), "driver": env_row.get("driver_version"),
                    "recorded": {k: env_row.get(k) for k in C.RECORDED if k in env_row}})
    multi = len(rounds) > 1
    idle = {}  # per GPU: its power and utilization readings (the load GPU's are the baseline)
    for uuid, rs in rounds.items():
        pre = f"GPU {rs[0].smi.get('index')}: " if multi else ""
        if (rs[0].smi.get("mig.mode.current") or "").strip() == "Enabled":
            # The exporter writes a MIG GPU's readings on its instances' series (as dcgm-exporter does).
            run.row(pre + "families vs nvidia-smi", "-", "MIG is on: the GPU's series are its instances' (see the MIG row)", C.SKIP)
            continue
        for r in C.compare_labels(rs, uuid) + C.compare_families(rs, uuid, available, run.smi_q.get(bus_key(rs[0].smi), {})):
            run.row(pre + r[0], *r[1:])
        for r in C.compare_nvlinks(rs[0].before, uuid, run.nvlink_status):
            run.row(pre + r[0], *r[1:])
        for r in C.compare_gaps(rs[0].smi):
            run.row(pre + r[0], *r[1:])
        idle[uuid] = {"power": [], "util": []}
        for rnd in rs:
            for samples in (rnd.before, rnd.after):
                for key, fam in (("power", "DCGM_FI_DEV_POWER_USAGE"), ("util", "DCGM_FI_DEV_GPU_UTIL")):
                    s = C.gpu_series(samples, fam, uuid)
                    if s is not None:
                        idle[uuid][key].append(s.value)
        x = C.gpu_series(rs[0].before, "DCGM_FI_DEV_XID_ERRORS", uuid)
        run.row(pre + "DCGM_FI_DEV_XID_ERRORS (no XID since start)", "0", C.fmt(x.value) if x else "absent", C.INFO)
    smi_rows = [rs[0].smi for rs in rounds.values()]
    for r in C.check_mig(smi_rows, C.parse_smi_list(run.readings.get("nvidia_smi_L", "")), first[1]):
        run.row(*r)
    absent = sorted({f"{s.labels.get('field')}/{s.labels.get('reason')}" for s in exp.last[1]
                     if s.name == "dcgm_otel_absent_values_total" and s.value > 0})
    run.row("fields NVML answered as absent (dcgm_otel_absent_values_total)", "-", ", ".join(absent) or "none", C.INFO)
    exp_stop(run, exp)
    return idle


def exp_stop(run, exp):
    rc = run.stop(exp.p)
    run.row(f"{exp.name} stops on SIGTERM", "exit code 0", str(rc), C.PASS if rc == 0 else C.FAIL)


def bus_key(smi_row):
    return (smi_row.get("pci.bus_id") or "").upper()


def start_load(run):
    """The generator on device 0: its 'running' line, or None (the rows say why)."""
    a = run.a
    ready = os.path.join(a.work, "load-ready.json")
    args = [a.python, os.path.join(HERE, "cuda_load.py"), "--seconds", str(a.load_seconds + 90), "--mib", str(a.mib),
            "--ready-file", ready] + (["--library", a.cuda_library] if a.cuda_library else [])
    # CUDA's device 0 in PCI order is NVML's GPU 0 (CUDA's own default order puts the fastest first).
    p, log = run.spawn("load-generator", args, env=dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID"))
    run.gen = p
    end = run.until(60)
    while time.monotonic() < end:
        if os.path.exists(ready):
            info = json.loads(read_text(ready))
            run.note(f"load running: {info}")
            run.readings["generator_running"] = info
            return info
        if p.poll() is not None:
            break
        time.sleep(0.1)
    run.row("load generator (libcuda driver API, PTX JIT) runs", "running", f"exit {p.poll()}: {read_text(log)[-600:]}", C.FAIL)
    return None


def wait_app(run, pid, seconds=20):
    """nvidia-smi --query-compute-apps until it lists `pid` (a new process can take a moment)."""
    end = run.until(seconds)
    apps = []
    while time.monotonic() < end:
        apps, res = smi_apps(run)
        if any(x.get("pid", "").strip() == str(pid) for x in apps):
            return apps
        time.sleep(1.0)
    return apps


def load_phase(run, available, fields, idle):
    a = run.a
    sink_out = os.path.join(a.work, "otlp.jsonl")
    port_file = os.path.join(a.work, "otlp.port")
    sink, _ = run.spawn("otlp-sink", [a.python, os.path.join(HERE, "otlp_sink.py"), "--out", sink_out, "--port-file", port_file,
                                      "--seconds", str(int(max(60, run.left())))])
    info = start_load(run)
    pid = info["pid"] if info else None
    apps = wait_app(run, pid) if pid else []
    run.readings["compute_apps_first"] = apps
    end = run.until(10)
    while not os.path.exists(port_file) and time.monotonic() < end:
        time.sleep(0.1)
    otlp_port = read_text(port_file).strip() or "4318"
    b = Exporter(run, "exporter-load", ["--distribution", "DCGM_FI_DEV_POWER_USAGE@100ms", "--otlp", "--otlp-protocol", "http/protobuf",
                                        "--otlp-endpoint", f"http://127.0.0.1:{otlp_port}", "--otel-metric-names", "both"])
    c = Exporter(run, "exporter-processes", ["--collect-processes"])
    first_b, first_c = b.wait_ready(), c.wait_ready()
    if first_b is None:
        run.row("dcgm-otel under load (exporter-load) starts", "GPU series", "no (see logs.txt)", C.FAIL)
    if pid and first_c is not None:
        process_check(run, c, pid, info["bytes"])
    elif first_c is None:
        run.row("dcgm-otel --collect-processes starts", "GPU series", "no (see logs.txt)", C.FAIL)
    run.stop(c.p)
    uuid = load_uuid(run, apps, pid)
    collections, rounds = [], []
    if first_b is not None:
        collections, rounds = load_window(run, b, fields, uuid)
    done = stop_load(run)
    time.sleep(min(2.0, max(0.0, run.left())))
    if first_b is not None:
        judge_load(run, b, collections, rounds, idle.get(uuid, {"power": [], "util": []}), uuid, bool(info and done))
    run.stop(b.p)
    run.stop(sink)
    judge_otlp(run, sink_out, collections, uuid)


def load_uuid(run, apps, pid):
    """The GPU the load runs on: where nvidia-smi lists the generator's pid, else NVML's GPU 0."""
    for x in apps:
        if x.get("pid", "").strip() == str(pid) and x.get("gpu_uuid"):
            return x["gpu_uuid"].strip()
    gpus = run.env.get("gpus") or []
    return gpus[0]["uuid"] if gpus else None


def process_check(run, c, pid, nbytes):
    end = run.until(20)
    got = None
    while time.monotonic() < end:
        got = c.next_collection(c.last[2] if c.last else None)
        if got and any(s.name == "dcgm_otel_process_gpu_memory_bytes" and s.labels.get("pid") == str(pid) for s in got[1]):
            break
        time.sleep(0.2)
    apps, _ = smi_apps(run)
    after = c.next_collection(c.last[2] if c.last else None)
    samples = after[1] if after else (got[1] if got else [])
    run.readings["process_check"] = {"compute_apps": apps, "series": [(s.labels, s.value) for s in samples if s.name.startswith("dcgm_otel_process_")]}
    for r in C.check_process(apps, samples, pid, nbytes):
        run.row(*r)


def load_window(run, b, fields, uuid):
    """Scrape exporter-load every 0.25 s for the load window; an nvidia-smi round every few seconds."""
    a = run.a
    load_fields = [f for f in fields if f in ("uuid", "index", "power.draw", "utilization.gpu", "memory.used", "clocks.current.sm", "clocks.sm", "pci.bus_id")]
    collections, rounds = {}, []
    b.on_collection = lambda got: record(collections, got, uuid)
    start = time.monotonic()
    end = min(start + a.load_seconds, run.deadline - 30)
    next_round = start + 3.0
    while time.monotonic() < end:
        b.next_collection(b.last[2] if b.last else None, seconds=3.0)
        if time.monotonic() >= next_round and len(rounds) < a.load_rounds:
            rnd, _ = bracket_round(run, b, load_fields)
            if rnd and uuid in rnd:
                rounds.append(rnd[uuid])
            next_round = time.monotonic() + max(2.0, a.load_seconds / (a.load_rounds + 1))
    b.on_collection = None
    if b.last:
        run.files["metrics-load.prom"] = b.last[0]
    cs = [collections[k] for k in sorted(collections)]
    run.readings["collections_load"] = [c.__dict__ for c in cs]
    run.readings["rounds_load"] = [r.smi for r in rounds]
    return cs, rounds


def record(collections, got, uuid):
    text, samples, n = got
    t = C.self_metric(samples, "dcgm_otel_last_collect_success_timestamp_seconds")
    if n is None or t is None or n in collections:
        return
    val = lambda fam: (lambda s: s.value if s else None)(C.gpu_series(samples, fam, uuid))  # noqa: E731
    collections[n] = C.Collection(int(n), t, val("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), val("DCGM_FI_DEV_POWER_USAGE"),
                                  val("DCGM_FI_DEV_GPU_UTIL"), {"fb_used": val("DCGM_FI_DEV_FB_USED"), "sm_clock": val("DCGM_FI_DEV_SM_CLOCK")})


def stop_load(run):
    p = getattr(run, "gen", None)
    if p is None:
        return None
    rc = run.stop(p)
    log = read_text(os.path.join(run.a.work, "load-generator.log"))
    done = [json.loads(ln) for ln in log.splitlines() if ln.startswith("{") and '"done"' in ln]
    run.readings["generator_done"] = done[-1] if done else None
    ok = rc == 0 and bool(done)
    run.row("load generator ran and stopped cleanly", "exit 0 with its summary", f"exit {rc}; {done[-1] if done else 'no summary'}", C.PASS if ok else C.FAIL)
    return ok


def judge_load(run, b, collections, rounds, idle, uuid, loaded):
    run.row(*C.check_energy(collections))  # holds with or without the load
    if not loaded:
        run.row("under-load checks", "a running load", "no load ran: not checked", C.FAIL)
    else:
        steady = [c for c in collections if c.t >= collections[0].t + 3.0] if collections else []
        run.row(*C.check_rise(idle["util"], [c.util for c in steady if c.util is not None], "DCGM_FI_DEV_GPU_UTIL", min_load=50))
        run.row(*C.check_rise(idle["power"], [c.power_w for c in steady if c.power_w is not None], "DCGM_FI_DEV_POWER_USAGE", factor=1.2))
        if rounds:
            for r in C.compare_families(rounds, uuid, set(rounds[0].smi), only=LOAD_ROUND_FAMILIES):
                run.row("under load: " + r[0], *r[1:])
        else:
            run.row("under load: nvidia-smi rounds", str(run.a.load_rounds), "0", C.FAIL)
    run.row(*C.check_distribution(b.last[1] if b.last else [], uuid, b.log_text()))


def judge_otlp(run, sink_out, collections, uuid):
    reqs = [json.loads(ln) for ln in read_text(sink_out).splitlines() if ln.strip()]
    keep = reqs[:1] + reqs[-2:] if len(reqs) > 3 else reqs
    run.files["otlp.json"] = json.dumps({"requests_received": len(reqs), "first_and_last_two": keep}, separators=(",", ":"))
    for r in C.check_otlp(reqs, collections, uuid):
        run.row(*r)


# ---------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def write_out(run, final):
    a = run.a
    os.makedirs(a.out, exist_ok=True)
    code, summary = C.verdict(run.rows)
    head = [f"dcgm-otel hardware check — {run.env.get('date_utc', '')} UTC",
            f"GPU: {run.env.get('gpu_model')}  driver: {run.env.get('driver')}  GPUs: {len(run.env.get('gpus') or [])}",
            f"dcgm-otel: {run.env.get('dcgm_otel')}" + (f" (hw-bin/COMMIT {run.env['commit']})" if run.env.get("commit") else "") + f"  host: {run.env.get('host')}",
            f"result: {'FAIL' if code else 'PASS'} ({summary}){'' if final else ' — PARTIAL, the run did not finish'}", ""]
    text = "\n".join(head) + C.table(run.rows) + "\n"
    run.brief = "\n".join(head) + C.brief(run.rows) + "\n"
    files = dict(run.files)
    files["table.txt"] = text
    files["results.json"] = json.dumps({"exit_code": code, "summary": summary, "final": final, "env": run.env,
                                        "timings_s": run.timings, "rows": [dict(zip(("check", "expected", "got", "result"), r)) for r in run.rows]}, indent=1, default=str)
    files["readings.json"] = json.dumps(run.readings, indent=1, default=str)
    logs = ["# run notes and commands"] + run.logs
    for name, _, log in run.children:
        logs += ["", f"# {name} ({log})", read_text(log)[-60000:]]
    files["logs.txt"] = "\n".join(logs)
    for name, content in files.items():
        with open(os.path.join(a.out, name), "w") as f:
            f.write(content)
    return code, text


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", required=True, help="the dcgm-otel binary")
    p.add_argument("--out", required=True, help="where the results go")
    p.add_argument("--work", help="scratch folder (default: a new one under the system's temporary folder)")
    p.add_argument("--smi", default="nvidia-smi")
    p.add_argument("--python", default=sys.executable, help="runs cuda_load.py and otlp_sink.py")
    p.add_argument("--cuda-library", help="libcuda for the load generator (default: the driver's libcuda.so.1)")
    p.add_argument("--counters", default=os.path.join(HERE, "nvml-counters.csv"))
    p.add_argument("--interval-ms", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3, help="idle rounds against nvidia-smi")
    p.add_argument("--load-seconds", type=float, default=30)
    p.add_argument("--load-rounds", type=int, default=4, help="nvidia-smi rounds under load")
    p.add_argument("--mib", type=int, default=2048, help="memory the load allocates")
    p.add_argument("--budget", type=float, default=300, help="the whole run's deadline, seconds")
    a = p.parse_args(argv)
    a.work = a.work or tempfile.mkdtemp(prefix="hwcheck-")
    if not os.access(a.bin, os.X_OK):
        p.error(f"--bin {a.bin}: not an executable file")
    if a.rounds < 1 or a.load_rounds < 1 or a.load_seconds < 10 or a.budget < 60:
        p.error("--rounds/--load-rounds >= 1, --load-seconds >= 10, --budget >= 60")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(a.work, exist_ok=True)
    run = Run(a)

    def on_term(*_):
        raise OutOfTime("terminated")

    signal.signal(signal.SIGTERM, on_term)
    final = False
    try:
        t = time.monotonic()
        got = environment(run)
        run.timings["environment"] = round(time.monotonic() - t, 1)
        write_out(run, False)
        if got:
            available, fields = got
            t = time.monotonic()
            idle = idle_phase(run, available, fields)
            run.timings["idle"] = round(time.monotonic() - t, 1)
            write_out(run, False)
            if idle is not None:
                t = time.monotonic()
                load_phase(run, available, fields, idle)
                run.timings["load"] = round(time.monotonic() - t, 1)
        final = True
    except OutOfTime as e:
        run.row("the run finished", f"within {a.budget:g} s", f"stopped: {e}", C.FAIL)
    except Exception as e:  # noqa: BLE001 - a bug here must still leave its readings behind
        import traceback
        run.logs.append(traceback.format_exc())
        run.row("the check itself ran", "no error", f"{type(e).__name__}: {e}", C.FAIL)
    finally:
        run.stop_all()
        run.timings["total"] = round(time.monotonic() - run.t0, 1)
        code, text = write_out(run, final)
    print(run.brief)
    print(f"results in {a.out} (the whole table: table.txt)")
    return code


if __name__ == "__main__":
    sys.exit(main())
