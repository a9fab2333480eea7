#!/usr/bin/env python3
"""dcgm-exporter 4.5.3-4.8.2 and dcgm-otel side by side on the same fake libdcgm fleet, in one run.

    benches/dcgm_exporter_side_by_side.py            3 rounds x 30 s per fleet and exporter
    benches/dcgm_exporter_side_by_side.py --smoke    1 round x 3 s (what tests/run-all.sh runs; indicative only)

Fleets, both with benches/scenarios/large-counters-4.5.3.csv (the `large` counters in names dcgm-exporter
4.5.3-4.8.2 knows): `large` (8x H100, each 7 MIG instances, 18 NvLinks: about 8,000 series) and
benches/scenarios/eight-gpus.yaml (8 whole H100s: about 3,000 series). Each exporter runs embedded on the fake
libdcgm (its library found through LD_LIBRARY_PATH), `-c 1000`, on 127.0.0.1, scraped 10 times a second over
one keep-alive connection with `Accept-Encoding: gzip` (what Prometheus sends).

Measured per run, after a 3 s warm-up, over the window:
  - process CPU (utime + stime from /proc/<pid>/stat) per collection: dcgm-exporter reads DCGM and renders at
    every scrape (a collection per scrape); dcgm-otel collects once a collect interval and serves scrapes from
    the body it made (its collections from `dcgm_otel_collects_total`); the fake libdcgm runs in each process:
    the CPU it spends inside its calls (FAKE_DCGM_CPU_FILE) is shown apart, and the exporter's own CPU is the
    rest; also the CPU share at 10 scrapes/s;
  - steady RSS: the median of VmRSS sampled every second, and at the window's end how much of it is the fake
    libdcgm's (the Rss of its mapped library in /proc/<pid>/smaps, plus the heap its own allocator holds,
    FAKE_DCGM_HEAP_FILE) and how much is the exporter's program code (the Rss of its binary's mappings);
    the exporter's own RSS is the rest once the fake's is taken out;
  - scrape latency p50 / p99 (request sent to body read);
  - start-up: from spawning the process to the first /metrics carrying every series it will carry.
Rounds interleave the exporters (A B, then B A) so that the machine's drift touches both. The machine is shared:
the table shows the median and the range over rounds. No timing is asserted.

Environment:
  DCGM_EXPORTER_BIN  dcgm-exporter binary (default: target/peers/dcgm-exporter/dcgm-exporter, the pinned build
                     of tests/peers/dcgm-exporter/build.sh); without one only dcgm-otel's half runs, and says so
  DCGM_OTEL_BIN      dcgm-otel binary (default: target/release/dcgm-otel, built when missing)
  FAKE_LIBDCGM       the fake libdcgm (default: target/release/libfake_libdcgm.so, built when missing)
  SIDE_ROUNDS, SIDE_SECONDS   rounds and window seconds (default 3 and 30; --smoke: 1 and 3)
  SIDE_OUT           also write the Markdown table to this file
"""
import gzip
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import listening  # noqa: E402

RUNS = count()
COUNTERS = os.path.join(ROOT, "benches/scenarios/large-counters-4.5.3.csv")
FLEETS = [
    ("large", "large"),
    ("8 whole GPUs", os.path.join(ROOT, "benches/scenarios/eight-gpus.yaml")),
]
WARMUP_S = 3
SCRAPES_PER_S = 10
TICK = os.sysconf("SC_CLK_TCK")


# What each exporter, told `-a 127.0.0.1:0`, logs with the port it bound (tests/support/listening.py).
LISTENING_LINE = {"dcgm-otel": "serving /metrics", "dcgm-exporter": "Listening on"}


def target_dir():
    return os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))


def ensure(path, build_args, what):
    if not os.path.exists(path):
        print(f"side-by-side: building {what}: cargo {' '.join(build_args)}", file=sys.stderr)
        subprocess.run(["cargo", *build_args], cwd=ROOT, check=True)
    return path


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Scraper:
    """One keep-alive connection, gzip accepted; returns (seconds, body text)."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def get(self):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        started = time.perf_counter()
        try:
            self.conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            r = self.conn.getresponse()
            raw = r.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        took = time.perf_counter() - started
        if r.getheader("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        return took, r.status, raw.decode("utf-8", "replace")


def series(body):
    return sum(1 for line in body.splitlines() if line.startswith("DCGM_"))


def collects(body):
    for line in body.splitlines():
        if line.startswith("dcgm_otel_collects_total"):
            return float(line.rsplit(" ", 1)[1])
    return None


def run_one(kind, binary, fake_dir, scenario, seconds):
    run = next(RUNS)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LD_LIBRARY_PATH": fake_dir,
        "FAKE_DCGM_SCENARIO": scenario,
        "FAKE_DCGM_SEED": "1",
        "NODE_NAME": "bench-node",
        "FAKE_DCGM_CPU_FILE": os.path.join(fake_dir, f"cpu-{run}"),
        "FAKE_DCGM_HEAP_FILE": os.path.join(fake_dir, f"heap-{run}"),
    }
    args = [binary, "-a", "127.0.0.1:0", "-c", "1000", "-f", COUNTERS]
    if kind == "dcgm-exporter":
        args.insert(1, "--disable-startup-validate")
    else:
        env["DCGM_EXPORTER_KUBERNETES"] = "false"
    log = os.path.join(fake_dir, f"{kind}-{run}.log")
    spawned = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # Read every 5 ms, as start-up is measured from `spawned`.
        port = listening.port_in_log(log, LISTENING_LINE[kind], 60, lambda: proc.poll() is not None, 0.005)
        files = {
            "cpu": env["FAKE_DCGM_CPU_FILE"],
            "heap": env["FAKE_DCGM_HEAP_FILE"],
            "fake_lib": os.path.realpath(os.path.join(fake_dir, "libdcgm.so.4")),
            "binary": os.path.realpath(binary),
        }
        return measure(kind, proc, port, spawned, seconds, files)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def startup(proc, port, spawned):
    """Poll until a body carries series, then until their count stops growing: (seconds to full, count)."""
    scraper = Scraper(port)
    seen = []
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before serving")
        try:
            _, status, body = scraper.get()
        except OSError:
            time.sleep(0.005)
            continue
        n = series(body) if status == 200 else 0
        if n:
            seen.append((time.perf_counter() - spawned, n))
            if len(seen) >= 5 and seen[-1][0] - seen[0][0] > 1.0:
                break
        time.sleep(0.01)
    if not seen:
        raise RuntimeError("never served a body with series")
    full = max(n for _, n in seen)
    return next(t for t, n in seen if n == full), full


def mapped_rss_kib(pid, paths):
    """Rss (KiB) of the mappings of these files in /proc/<pid>/smaps, and the process's thread count."""
    total, current = 0, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and head[0][0] in "0123456789abcdef":
                current = head[5] if len(head) >= 6 else None
            elif head and head[0] == "Rss:" and current in paths:
                total += int(head[1])
    return total


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def fake_heap_kib(path):
    """The heap the fake's own allocator holds now (FAKE_DCGM_HEAP_FILE: `live peak` in bytes), KiB."""
    try:
        with open(path) as f:
            return int(f.read().split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        return 0.0


def fake_cpu_s(path):
    """CPU seconds the fake libdcgm spent inside its calls so far (FAKE_DCGM_CPU_FILE)."""
    try:
        with open(path) as f:
            return int(f.read().strip() or 0) / 1e9
    except (OSError, ValueError):
        return 0.0


def measure(kind, proc, port, spawned, seconds, files):
    """Scrape 10 times a second; the window opens and closes at scrapes (for dcgm-otel: at scrapes that
    show a new collection, so that the window holds whole collections, the fake's included)."""
    start_s, full = startup(proc, port, spawned)
    time.sleep(max(0.0, WARMUP_S - (time.perf_counter() - spawned)))
    scraper = Scraper(port)
    latencies, rss, scrapes = [], [], 0
    begin = end = None
    last_collects = None
    next_scrape = next_rss = time.perf_counter()
    while end is None:
        now = time.perf_counter()
        if begin is not None and now >= next_rss:
            rss.append(rss_kib(proc.pid))
            next_rss = now + 1.0
        if now >= next_scrape:
            took, status, body = scraper.get()
            if status != 200:
                raise RuntimeError(f"/metrics answered {status}")
            next_scrape += 1.0 / SCRAPES_PER_S
            c = collects(body)
            boundary = kind == "dcgm-exporter" or (last_collects is not None and c != last_collects)
            last_collects = c
            mark = (cpu_ticks(proc.pid), fake_cpu_s(files["cpu"]), time.perf_counter(), c, scrapes)
            if begin is None:
                if boundary:
                    begin = mark
                continue
            latencies.append(took)
            scrapes += 1
            if boundary and mark[2] - begin[2] >= seconds:
                end = mark
        time.sleep(max(0.0, min(next_scrape, next_rss if begin else next_scrape) - time.perf_counter()))
    fake_rss = mapped_rss_kib(proc.pid, {files["fake_lib"]}) + fake_heap_kib(files["heap"])
    code_rss = mapped_rss_kib(proc.pid, {files["binary"]})
    rss_mib = statistics.median(rss) / 1024 if rss else 0.0
    cpu_s = (end[0] - begin[0]) / TICK
    fake_s = end[1] - begin[1]
    if kind == "dcgm-exporter":
        collections = end[4] - begin[4]
    else:
        collections = (end[3] or 0) - (begin[3] or 0)
    n = max(collections, 1)
    latencies.sort()
    return {
        "series": full,
        "cpu_ms_per_collection": 1000 * cpu_s / n,
        "fake_ms_per_collection": 1000 * fake_s / n,
        "own_ms_per_collection": 1000 * max(cpu_s - fake_s, 0.0) / n,
        "cpu_share": 100 * cpu_s / (end[2] - begin[2]),
        "collections": collections,
        "rss_mib": rss_mib,
        "fake_rss_mib": fake_rss / 1024,
        "own_rss_mib": max(rss_mib - fake_rss / 1024, 0.0),
        "code_rss_mib": code_rss / 1024,
        "threads": threads(proc.pid),
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "start_ms": 1000 * start_s,
    }


def span(values, fmt):
    values = sorted(values)
    mid = fmt(statistics.median(values))
    return mid if len(values) == 1 else f"{mid} ({fmt(values[0])}–{fmt(values[-1])})"


def table(results, rounds):
    ms = lambda v: f"{v:.2f}" if v < 10 else f"{v:.0f}"
    cols = [
        ("CPU per collection, ms", "cpu_ms_per_collection", ms),
        ("of it in the fake libdcgm, ms", "fake_ms_per_collection", ms),
        ("the exporter's own, ms", "own_ms_per_collection", ms),
        ("CPU at 10 scrapes/s, %", "cpu_share", lambda v: f"{v:.1f}"),
        ("steady RSS, MiB", "rss_mib", lambda v: f"{v:.1f}"),
        ("of it the fake libdcgm's, MiB", "fake_rss_mib", lambda v: f"{v:.1f}"),
        ("the exporter's own, MiB", "own_rss_mib", lambda v: f"{v:.1f}"),
        ("of that its program code, MiB", "code_rss_mib", lambda v: f"{v:.1f}"),
        ("scrape p50, ms", "p50_ms", lambda v: f"{v:.2f}"),
        ("scrape p99, ms", "p99_ms", lambda v: f"{v:.2f}"),
        ("start to first full body, ms", "start_ms", lambda v: f"{v:.0f}"),
    ]
    lines = [
        "| fleet (series) | exporter | " + " | ".join(c[0] for c in cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for fleet, _ in FLEETS:
        by = {k: v for (f, k), v in results.items() if f == fleet}
        for kind, runs in by.items():
            n = runs[0]["series"]
            cells = [span([r[key] for r in runs], fmt) for _, key, fmt in cols]
            lines.append(f"| {fleet} ({n:,}) | {kind} | " + " | ".join(cells) + " |")
        if len(by) == 2:
            e, o = by["dcgm-exporter"], by["dcgm-otel"]
            def ratio(key):
                num = statistics.median(r[key] for r in e)
                den = statistics.median(r[key] for r in o)
                return f"**{num / den:.1f}×**" if den > 0 else "n/a"
            shown = ("cpu_ms_per_collection", "own_ms_per_collection", "rss_mib", "own_rss_mib", "cpu_share")
            cells = [ratio(key) if key in shown else "" for _, key, _ in cols]
            lines.append(f"| {fleet} | dcgm-exporter ÷ dcgm-otel | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"{rounds} round(s); median (range over rounds). Ratios: medians.")
    return "\n".join(lines)


def main():
    smoke = "--smoke" in sys.argv[1:]
    rounds = int(os.environ.get("SIDE_ROUNDS", "1" if smoke else "3"))
    seconds = float(os.environ.get("SIDE_SECONDS", "3" if smoke else "30"))
    tdir = target_dir()
    otel = os.environ.get("DCGM_OTEL_BIN") or ensure(
        os.path.join(tdir, "release/dcgm-otel"), ["build", "--release", "--bin", "dcgm-otel"], "dcgm-otel")
    fake = os.environ.get("FAKE_LIBDCGM") or ensure(
        os.path.join(tdir, "release/libfake_libdcgm.so"), ["build", "--release", "-p", "fake-libdcgm"],
        "the fake libdcgm")
    exporter = os.environ.get("DCGM_EXPORTER_BIN") or os.path.join(tdir, "peers/dcgm-exporter/dcgm-exporter")
    kinds = [("dcgm-otel", otel)]
    if os.path.isfile(exporter) and os.access(exporter, os.X_OK):
        kinds.insert(0, ("dcgm-exporter", exporter))
        print(f"side-by-side: dcgm-exporter {exporter} and dcgm-otel {otel}")
    else:
        print("side-by-side: no dcgm-exporter binary (set DCGM_EXPORTER_BIN, or see "
              "tests/peers/dcgm-exporter/README.md): dcgm-otel's half only")
    fake_dir = tempfile.mkdtemp(prefix="side-by-side-")
    try:
        os.symlink(os.path.abspath(fake), os.path.join(fake_dir, "libdcgm.so.4"))
        results = {}
        for r in range(rounds):
            for fleet, scenario in FLEETS:
                order = kinds if r % 2 == 0 else list(reversed(kinds))
                for kind, binary in order:
                    res = run_one(kind, binary, fake_dir, scenario, seconds)
                    print(f"  round {r + 1} {fleet} {kind}: {res}", flush=True)
                    results.setdefault((fleet, kind), []).append(res)
    finally:
        shutil.rmtree(fake_dir, ignore_errors=True)
    out = table(results, rounds)
    print(out)
    if os.environ.get("SIDE_OUT"):
        with open(os.environ["SIDE_OUT"], "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
