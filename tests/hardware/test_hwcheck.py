#!/usr/bin/env python3
"""Offline tests of the hardware check (no GPU): the load generator's PTX and argument handling (its
ctypes binding run against tests/hardware/fake-libcuda.c, its PTX assembled by NVIDIA's ptxas when
present), the comparison logic on recorded nvidia-smi and exporter output (tests/fixtures/hardware),
including the cases that must fail, and the OTLP sink's decoder against a recorded request.

Run: python3 -m unittest discover -s tests/hardware -p 'test_*.py'   (tests/run-all.sh does)
A test that needs a C compiler or ptxas says SKIP without it, and fails instead when CI is set.
Where ptxas is looked for: $PTXAS, .venv's nvidia-cuda-nvcc-cu12 wheel (run-all.sh installs it), PATH.
"""

import ctypes
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(ROOT, "tests", "fixtures", "hardware")
sys.path.insert(0, HERE)

import compare as C  # noqa: E402
import cuda_load  # noqa: E402
import hwcheck  # noqa: E402
import otlp_sink  # noqa: E402

UUID = "GPU-08b4fda8-c892-b50e-71dc-d3d0944f065e"


def fixture(name, mode="r"):
    with open(os.path.join(FIX, name), mode) as f:
        return f.read()


def need(what, found):
    """Skip without an outside tool, fail under CI (where tests/run-all.sh installs it)."""
    if not found:
        if os.environ.get("CI"):
            raise AssertionError(f"{what} is missing (CI is set: tests/run-all.sh installs it)")
        raise unittest.SkipTest(f"SKIP: {what} not found")


_FAKE_CUDA = {}


def fake_libcuda():
    """tests/hardware/fake-libcuda.c built into a temporary folder (once per run)."""
    if "path" not in _FAKE_CUDA:
        cc = shutil.which("cc") or shutil.which("gcc")
        need("a C compiler (cc)", cc)
        d = tempfile.mkdtemp(prefix="fake-libcuda-")
        out = os.path.join(d, "libcuda.so.1")
        subprocess.run([cc, "-Wall", "-Werror", "-shared", "-fPIC", "-o", out, os.path.join(HERE, "fake-libcuda.c")], check=True)
        _FAKE_CUDA["path"] = out
    return _FAKE_CUDA["path"]


def ptxas():
    cands = [os.environ.get("PTXAS")] + glob.glob(os.path.join(ROOT, ".venv/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas")) + [shutil.which("ptxas")]
    return next((c for c in cands if c and os.access(c, os.X_OK)), None)


# ---------------------------------------------------------------------------------------------------
# The load generator
# ---------------------------------------------------------------------------------------------------


class GeneratorPtx(unittest.TestCase):
    def test_header_lines_the_driver_jit_needs(self):
        lines = [ln.strip() for ln in cuda_load.PTX.splitlines() if ln.strip() and not ln.strip().startswith("//")]
        self.assertRegex(lines[0], r"^\.version \d+\.\d+$")
        self.assertRegex(lines[1], r"^\.target sm_\d+$")
        self.assertEqual(lines[2], ".address_size 64")
        # sm_80 needs PTX ISA 7.0 or newer; H100/H200 (sm_90) JIT-compile an sm_80 target.
        self.assertGreaterEqual(tuple(map(int, lines[0].split()[1].split("."))), (7, 0))
        self.assertLessEqual(int(lines[1].split("_")[1]), 90)

    def test_entry_and_parameters_match_the_launch(self):
        entries = cuda_load.ptx_entries(cuda_load.PTX)
        self.assertEqual(list(entries), [cuda_load.ENTRY])
        self.assertEqual(entries[cuda_load.ENTRY], [kind for _, kind in cuda_load.PARAMS])
        args = cuda_load.kernel_args(0x7F0000000000, 1 << 20, 7)
        self.assertEqual([type(a) for a in args], [ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32])
        self.assertEqual([a.value for a in args], [0x7F0000000000, 1 << 20, 7])
        # Each declared parameter is loaded once, by name, with its declared type.
        declared = re.findall(r"\.param \.(\w+) (\w+)", cuda_load.PTX)
        loaded = re.findall(r"ld\.param\.(\w+)\s+%\w+, \[(\w+)\]", cuda_load.PTX)
        self.assertEqual(sorted(declared), sorted(loaded))

    def test_registers_declared_labels_defined_braces_balanced(self):
        ptx = cuda_load.PTX
        decl = {m.group(1): int(m.group(2)) for m in re.finditer(r"\.reg \.\w+\s+%(\w+)<(\d+)>;", ptx)}
        for reg, n in re.findall(r"%(p|r|f|rd)(\d+)", ptx):
            self.assertLess(int(n), decl[reg], f"%{reg}{n} beyond %{reg}<{decl[reg]}>")
        for label in re.findall(r"bra\s+(\w+);", ptx):
            self.assertRegex(ptx, rf"\n{label}:")
        self.assertEqual(ptx.count("{"), ptx.count("}"))

    def test_ptxas_assembles_it_for_ampere_and_hopper(self):
        tool = ptxas()
        need("ptxas (pip nvidia-cuda-nvcc-cu12)", tool)
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "burn.ptx")
            with open(src, "w") as f:
                f.write(cuda_load.PTX)
            for arch in ("sm_80", "sm_90"):
                p = subprocess.run([tool, f"-arch={arch}", src, "-o", os.path.join(d, arch + ".cubin")], capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, f"{arch}: {p.stderr}")

    def test_ptxas_refuses_a_broken_kernel(self):
        tool = ptxas()
        need("ptxas (pip nvidia-cuda-nvcc-cu12)", tool)
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "bad.ptx")
            with open(src, "w") as f:
                f.write(cuda_load.PTX.replace("%r<9>", "%r<5>"))
            p = subprocess.run([tool, "-arch=sm_90", src, "-o", os.path.join(d, "x")], capture_output=True, text=True)
            self.assertNotEqual(p.returncode, 0)


class GeneratorArgs(unittest.TestCase):
    def test_defaults(self):
        a = cuda_load.parse_args([])
        self.assertEqual((a.seconds, a.mib, a.device, a.library), (30.0, 2048, 0, "libcuda.so.1"))

    def test_bad_arguments_exit_2(self):
        for argv in (["--seconds", "0"], ["--mib", "0"], ["--mib", "16384"], ["--iterations", "0"], ["--device", "-1"], ["--seconds", "x"]):
            with self.assertRaises(SystemExit) as e, open(os.devnull, "w") as null:
                stderr, sys.stderr = sys.stderr, null
                try:
                    cuda_load.parse_args(argv)
                finally:
                    sys.stderr = stderr
            self.assertEqual(e.exception.code, 2, argv)

    def test_launch_shape_covers_the_buffer(self):
        n, grid = cuda_load.launch_shape(2048 << 20)
        self.assertEqual(n, 512 << 20)
        self.assertEqual(grid * cuda_load.BLOCK, n)
        n, grid = cuda_load.launch_shape(1000)
        self.assertEqual((n, grid), (250, 1))


class GeneratorOnFakeDriver(unittest.TestCase):
    """cuda_load.py's ctypes binding, run for real against fake-libcuda.c (which checks the arguments)."""

    def run_gen(self, *args, env=None):
        lib = fake_libcuda()
        return subprocess.run([sys.executable, os.path.join(HERE, "cuda_load.py"), "--library", lib, *args],
                              capture_output=True, text=True, timeout=60, env=dict(os.environ, **(env or {})))

    def test_runs_reports_and_makes_the_fake_nvml_see_it(self):
        with tempfile.TemporaryDirectory() as d:
            ready, scen = os.path.join(d, "ready"), os.path.join(d, "scenario.yaml")
            p = self.run_gen("--seconds", "0.3", "--mib", "64", "--ready-file", ready, env={"FAKE_CUDA_SCENARIO": scen})
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = [json.loads(ln) for ln in p.stdout.splitlines()]
            self.assertEqual([x["state"] for x in lines], ["running", "done"])
            self.assertEqual(lines[0]["bytes"], 64 << 20)
            self.assertGreater(lines[1]["launches"], 1)
            with open(ready) as f:
                self.assertEqual(json.loads(f.read()), lines[0])
            with open(scen) as f:
                text = f.read()
            self.assertIn(f"pid: {lines[0]['pid']}, name: python3, gpu: 0, memory_mib: {64 + 512}", text)

    def test_stops_on_sigterm(self):
        lib = fake_libcuda()
        with tempfile.TemporaryDirectory() as d:
            ready = os.path.join(d, "ready")
            p = subprocess.Popen([sys.executable, os.path.join(HERE, "cuda_load.py"), "--library", lib, "--seconds", "60", "--ready-file", ready],
                                 stdout=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 20
            while not os.path.exists(ready) and time.monotonic() < deadline:
                time.sleep(0.05)
            p.terminate()
            out, _ = p.communicate(timeout=20)
            self.assertEqual(p.returncode, 0)
            self.assertTrue(json.loads(out.splitlines()[-1])["stopped_by_signal"])

    def test_a_kernel_that_does_not_match_the_launch_fails(self):
        lib = fake_libcuda()
        a = cuda_load.parse_args(["--library", lib, "--seconds", "0.1", "--mib", "1"])
        cases = [
            (cuda_load.PTX.replace(".param .u64 burn_param_buf", ".param .u32 burn_param_buf"), cuda_load.ENTRY, "cuLaunchKernel"),
            (cuda_load.PTX, "burn_other", "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND"),
            (cuda_load.PTX.replace(".target sm_80", ".target sm_100"), cuda_load.ENTRY, "cuModuleLoadDataEx: CUDA_ERROR_INVALID_IMAGE"),
        ]
        for ptx, entry, err in cases:
            saved = cuda_load.PTX, cuda_load.ENTRY
            cuda_load.PTX, cuda_load.ENTRY = ptx, entry
            try:
                with self.assertRaises(cuda_load.DriverError) as e, open(os.devnull, "w") as null:
                    out, sys.stdout = sys.stdout, null
                    try:
                        cuda_load.run(a, cuda_load.Driver(lib))
                    finally:
                        sys.stdout = out
                self.assertIn(err, str(e.exception))
            finally:
                cuda_load.PTX, cuda_load.ENTRY = saved

    def test_launch_values_that_are_not_the_allocation_fail(self):
        lib = fake_libcuda()
        a = cuda_load.parse_args(["--library", lib, "--seconds", "0.1", "--mib", "1"])
        saved = cuda_load.kernel_args
        cases = [
            (lambda dptr, n, it: [ctypes.c_uint64(dptr + 4), ctypes.c_uint32(n), ctypes.c_uint32(it)], "cuLaunchKernel"),
            (lambda dptr, n, it: [ctypes.c_uint64(dptr), ctypes.c_uint32(n + 1), ctypes.c_uint32(it)], "cuLaunchKernel"),
            (lambda dptr, n, it: [ctypes.c_uint64(dptr), ctypes.c_uint32(n), ctypes.c_uint32(0)], "cuLaunchKernel"),
        ]
        for args, err in cases:
            cuda_load.kernel_args = args
            try:
                with self.assertRaises(cuda_load.DriverError) as e, open(os.devnull, "w") as null:
                    out, sys.stdout = sys.stdout, null
                    try:
                        cuda_load.run(a, cuda_load.Driver(lib))
                    finally:
                        sys.stdout = out
                self.assertEqual(str(e.exception), f"{err}: CUDA_ERROR_INVALID_VALUE")
            finally:
                cuda_load.kernel_args = saved

    def test_missing_driver_is_one_line_and_exit_1(self):
        p = subprocess.run([sys.executable, os.path.join(HERE, "cuda_load.py"), "--library", "/nonexistent/libcuda.so.1", "--seconds", "1"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1)
        self.assertIn("cannot load /nonexistent/libcuda.so.1", p.stderr)


# ---------------------------------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------------------------------


class Parsers(unittest.TestCase):
    def test_query_gpu_csv_with_units_and_absent_answers(self):
        rows = C.parse_smi_csv(fixture("h100-query-gpu.csv"))
        self.assertEqual(len(rows), 1)
        r = rows[0]
        self.assertEqual(r["uuid"], UUID)
        self.assertEqual(r["power.draw"], "71.04")  # the header's " [W]" is not part of the key
        self.assertEqual(r["fan.speed"], "[N/A]")
        self.assertEqual(r["name"], "NVIDIA H100 80GB HBM3")

    def test_values(self):
        cases = {"71.23 W": 71.23, "71.23": 71.23, "81559 MiB": 81559, "45 %": 45, "1980 MHz": 1980, "P0": 0, "P8": 8,
                 "0x0000000000000001": 1, "0x00000000000000A0": 160, "Yes": 1, "No": 0, "Enabled": 1, "Disabled": 0, "-3": -3}
        for raw, want in cases.items():
            self.assertEqual(C.smi_number(raw), want, raw)
        for raw in ("[N/A]", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]", "N/A", "", "[GPU requires reset]"):
            self.assertIsNone(C.smi_number(raw), raw)
        for raw in ("71.23 furlongs", "twelve", "0xZZ"):
            with self.assertRaises(C.FormatError):
                C.smi_number(raw, "power.draw")

    def test_csv_with_a_missing_column_is_an_error(self):
        with self.assertRaises(C.FormatError):
            C.parse_smi_csv("uuid, power.draw [W]\nGPU-1\n")

    def test_help_query_gpu_names_and_aliases(self):
        names = C.parse_help_query(fixture("h100-help-query-gpu.txt"))
        for n in ("power.draw", "clocks.sm", "clocks.current.sm", "retired_pages.sbe", "memory.reserved", "mig.mode.current"):
            self.assertIn(n, names)
        self.assertNotIn("clocks.max.video", names)
        self.assertNotIn("YYYY/MM/DD HH:MM:SS.msec", names)
        fields = C.query_fields(names)
        self.assertEqual(fields[0], "uuid")
        self.assertIn("clocks.current.sm", fields)
        self.assertNotIn("clocks.sm", fields)  # the first alias a family names is enough
        self.assertEqual(len(fields), len(set(fields)))

    def test_list_q_and_nvlink(self):
        gpus = C.parse_smi_list(fixture("nvidia-smi-L.txt"))
        self.assertEqual([g["index"] for g in gpus], [0, 1])
        self.assertEqual(len(gpus[1]["mig"]), 3)
        q = C.parse_smi_q(fixture("nvidia-smi-q.txt"))
        self.assertEqual(q["00000000:18:00.0"]["Replays Since Reset"], "0")
        self.assertEqual(C.nvlinks_up(fixture("nvlink-s.txt")), 18)
        self.assertEqual(C.nvlinks_up("GPU 0: x\n\t Link 0: <inactive>\n\t Link 1: 26.562 GB/s\n"), 1)

    def test_prometheus_text(self):
        s = C.parse_prom('a{x="q\\"uo\\\\te",y="n\\nl"} 1.5\n# HELP a b\nb 7\nc{} NaN\n')
        self.assertEqual((s[0].name, s[0].labels, s[0].value), ("a", {"x": 'q"uo\\te', "y": "n\nl"}, 1.5))
        self.assertEqual((s[1].name, s[1].value), ("b", 7))
        with self.assertRaises(C.FormatError):
            C.parse_prom("not a line at all {")


# ---------------------------------------------------------------------------------------------------
# The comparison on recorded output
# ---------------------------------------------------------------------------------------------------


def recorded(smi_edit=None, prom_edit=None):
    smi = C.parse_smi_csv(fixture("h100-query-gpu.csv"))[0]
    prom = fixture("h100-metrics.prom")
    if smi_edit:
        smi = dict(smi, **smi_edit)
    if prom_edit:
        prom = prom_edit(prom)
    samples = C.parse_prom(prom)
    return [C.Round(smi, samples, samples)], C.parse_help_query(fixture("h100-help-query-gpu.txt"))


def rows_by_family(rows):
    return {r[0].split(" ")[0]: r for r in rows}


def set_value(family, value):
    return lambda text: re.sub(rf"^({family}\{{[^\n]*\}}) \S+$", rf"\g<1> {value}", text, flags=re.M)


class Compare(unittest.TestCase):
    def test_recorded_h100_passes(self):
        rounds, avail = recorded()
        rows = C.compare_families(rounds, UUID, avail, C.parse_smi_q(fixture("nvidia-smi-q.txt"))["00000000:18:00.0"])
        rows += C.compare_labels(rounds, UUID)
        bad = [r for r in rows if r[3] == C.FAIL]
        self.assertEqual(bad, [])
        fam = rows_by_family(rows)
        self.assertEqual(fam["DCGM_FI_DEV_POWER_USAGE"][3], C.PASS)
        self.assertEqual(fam["DCGM_FI_DEV_FAN_SPEED"][1:], ("[N/A] (absent)", "absent", C.PASS))
        self.assertEqual(fam["DCGM_FI_DEV_RETIRED_SBE"][3], C.PASS)
        self.assertEqual(fam["DCGM_FI_DEV_MAX_VIDEO_CLOCK"][3], C.NC)  # no such field in this nvidia-smi
        self.assertEqual(fam["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][3], C.PASS)  # from -q
        self.assertIn("18 series", fam["DCGM_FI_DEV_NVLINK_GET_STATE"][2])
        self.assertEqual(C.verdict(rows)[0], 0)

    def test_every_family_is_compared_or_not_comparable(self):
        rounds, avail = recorded()
        rows = C.compare_families(rounds, UUID, avail)
        self.assertEqual({r[3] for r in rows} - {C.PASS, C.NC}, set())
        self.assertEqual(len(rows), len(C.FAMILIES))

    def assertFails(self, family, smi_edit=None, prom_edit=None, got=None):
        rounds, avail = recorded(smi_edit, prom_edit)
        row = rows_by_family(C.compare_families(rounds, UUID, avail))[family]
        self.assertEqual(row[3], C.FAIL, row)
        if got:
            self.assertIn(got, row[2])
        self.assertEqual(C.verdict([row])[0], 1)

    def test_power_beyond_5_percent_fails_within_passes(self):
        self.assertFails("DCGM_FI_DEV_POWER_USAGE", {"power.draw": "76.40"})  # 72.51 is 5.1 % below
        rounds, avail = recorded({"power.draw": "75.90 W"})  # 4.5 % above
        self.assertEqual(rows_by_family(C.compare_families(rounds, UUID, avail))["DCGM_FI_DEV_POWER_USAGE"][3], C.PASS)

    def test_framebuffer_total_exact_free_and_used_within_dcgms_rounding(self):
        self.assertFails("DCGM_FI_DEV_FB_USED", {"memory.used": "409"})
        self.assertFails("DCGM_FI_DEV_FB_FREE", {"memory.free": "81150"})
        rounds, avail = recorded({"memory.used": "408"})  # nvidia-smi one above DCGM's bytes // MiB
        self.assertEqual(rows_by_family(C.compare_families(rounds, UUID, avail))["DCGM_FI_DEV_FB_USED"][3], C.PASS)
        self.assertFails("DCGM_FI_DEV_FB_TOTAL", prom_edit=set_value("DCGM_FI_DEV_FB_TOTAL", "81558"))

    def test_temperature_within_one_degree(self):
        self.assertFails("DCGM_FI_DEV_GPU_TEMP", {"temperature.gpu": "31"})
        rounds, avail = recorded({"temperature.gpu": "30"})
        self.assertEqual(rows_by_family(C.compare_families(rounds, UUID, avail))["DCGM_FI_DEV_GPU_TEMP"][3], C.PASS)

    def test_a_value_where_nvidia_smi_has_none_fails(self):
        self.assertFails("DCGM_FI_DEV_MEMORY_TEMP", {"temperature.memory": "[N/A]"}, got="a value where nvidia-smi has none")

    def test_absent_where_nvidia_smi_has_a_value_fails(self):
        self.assertFails("DCGM_FI_DEV_FAN_SPEED", {"fan.speed": "30 %"}, got="absent")
        self.assertFails("DCGM_FI_DEV_SM_CLOCK", prom_edit=lambda t: re.sub(r"^DCGM_FI_DEV_SM_CLOCK\{.*\n", "", t, flags=re.M))

    def test_unreadable_nvidia_smi_value_fails(self):
        self.assertFails("DCGM_FI_DEV_PSTATE", {"pstate": "Q0"}, got="cannot read")

    def test_bit_mask_and_words(self):
        self.assertFails("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", {"clocks_event_reasons.active": "0x0000000000000001"})
        self.assertFails("DCGM_FI_DEV_MIG_MODE", {"mig.mode.current": "Enabled"})
        self.assertFails("DCGM_FI_DEV_ROW_REMAP_PENDING", {"remapped_rows.pending": "Yes"})

    def test_a_match_with_either_collection_of_the_bracket_passes(self):
        smi = C.parse_smi_csv(fixture("h100-query-gpu.csv"))[0]
        before = C.parse_prom(fixture("h100-metrics.prom"))
        after = C.parse_prom(set_value("DCGM_FI_DEV_GPU_TEMP", "35")(fixture("h100-metrics.prom")))
        avail = C.parse_help_query(fixture("h100-help-query-gpu.txt"))
        smi35 = dict(smi, **{"temperature.gpu": "35"})
        row = rows_by_family(C.compare_families([C.Round(smi35, before, after)], UUID, avail))["DCGM_FI_DEV_GPU_TEMP"]
        self.assertEqual((row[2], row[3]), ("29 / 35", C.PASS))
        # ... but every round must pass.
        rounds = [C.Round(smi35, before, after), C.Round(smi35, before, before)]
        self.assertEqual(rows_by_family(C.compare_families(rounds, UUID, avail))["DCGM_FI_DEV_GPU_TEMP"][3], C.FAIL)

    def test_a_family_the_check_does_not_know_fails(self):
        rounds, avail = recorded(prom_edit=lambda t: t + f'DCGM_FI_DEV_NEW_THING{{gpu="0",UUID="{UUID}"}} 1\n')
        rows = C.compare_families(rounds, UUID, avail)
        self.assertIn(("DCGM_FI_DEV_NEW_THING covered", "compared or named not comparable", "not covered by the check", C.FAIL), rows)

    def test_labels(self):
        rounds, _ = recorded({"vbios_version": "96.00.99.00.02"})
        rows = {r[0].split(" ")[0]: r for r in C.compare_labels(rounds, UUID)}
        self.assertEqual(rows["DCGM_FI_DEV_VBIOS_VERSION"][3], C.FAIL)
        self.assertEqual(rows["DCGM_FI_DRIVER_VERSION"][3], C.PASS)
        self.assertEqual(rows["DCGM_FI_DEV_PCI_BUSID"][3], C.PASS)

    def test_nvlinks_and_gaps(self):
        samples = C.parse_prom(fixture("h100-metrics.prom"))
        self.assertEqual(C.compare_nvlinks(samples, UUID, fixture("nvlink-s.txt"))[0][3], C.PASS)
        self.assertEqual(C.compare_nvlinks(samples, UUID, "GPU 0\n\t Link 0: 26.562 GB/s\n")[0][3], C.FAIL)
        gaps = C.compare_gaps(C.parse_smi_csv(fixture("h100-query-gpu.csv"))[0])
        self.assertEqual(gaps, [])  # the PCIe link generation and width are compared as families


class CoversTheNvmlSource(unittest.TestCase):
    """FAMILIES, LABELS and nvml-counters.csv follow src/source/nvml/fields.rs: a field added there
    must be compared (or named not comparable) here."""

    def table(self):
        with open(os.path.join(ROOT, "src", "source", "nvml", "fields.rs")) as f:
            src = f.read()
        body = src[src.index("pub const TABLE"):src.index("];", src.index("pub const TABLE"))]
        return set(re.findall(r'"(DCGM_FI_[A-Z0-9_]+)"', body))

    def test_families_and_labels_cover_fields_rs(self):
        covered = {f.name for f in C.FAMILIES} | {name for name, _, _ in C.LABELS}
        self.assertEqual(self.table() - covered, set())
        self.assertEqual({f.name for f in C.FAMILIES} - self.table(), set())

    def test_counters_file_lists_every_field_but_the_identity_labels(self):
        with open(os.path.join(HERE, "nvml-counters.csv")) as f:
            rows = [ln.split(",")[0].strip() for ln in f if ln.strip() and not ln.startswith("#")]
        self.assertEqual(len(rows), len(set(rows)))
        identity = {"DCGM_FI_DEV_NAME", "DCGM_FI_DEV_UUID", "DCGM_FI_DEV_PCI_BUSID"}
        self.assertEqual(set(rows), self.table() - identity)


class RealH100Run(unittest.TestCase):
    """The first run on a real GPU (tests/fixtures/hardware/h100-run-2026-11-27/): its two FAILs were the
    check's own mistakes, replayed here on what that run recorded."""

    def load(self):
        d = "h100-run-2026-11-27"
        readings = json.loads(fixture(os.path.join(d, "readings.json")))
        return readings, C.parse_prom(fixture(os.path.join(d, "metrics-load.prom")))

    def test_the_generators_memory_is_read_under_nvidia_smis_header(self):
        readings, _ = self.load()
        apps = readings["process_check"]["compute_apps"]
        series = "".join(
            f'dcgm_otel_process_gpu_memory_bytes{{pid="{labels["pid"]}"}} {value}\n'
            for labels, value in readings["process_check"]["series"][:1]
        )
        rows = C.check_process(apps, C.parse_prom(series), readings["generator_running"]["pid"], 2048 * C.MIB)
        self.assertEqual([r[3] for r in rows], [C.PASS, C.PASS], rows)

    def test_used_framebuffer_one_mib_under_nvidia_smi_passes(self):
        readings, samples = self.load()
        smi = readings["rounds_load"][0]
        self.assertEqual(smi["memory.used"], "2575")  # DCGM's bytes // MiB gave 2574
        rows = C.compare_families([C.Round(smi, samples, samples)], smi["uuid"], list(smi), only={"DCGM_FI_DEV_FB_USED"})
        self.assertEqual([r[3] for r in rows], [C.PASS], rows)


class UnderLoad(unittest.TestCase):
    def test_process_memory(self):
        apps = C.parse_smi_csv(fixture("compute-apps.csv"))
        prom = f'dcgm_otel_process_gpu_memory_bytes{{gpu="0",UUID="{UUID}",pid="4242",process_name="python3"}} {2560 * C.MIB}\n'
        rows = C.check_process(apps, C.parse_prom(prom), 4242, 2048 * C.MIB)
        self.assertEqual([r[3] for r in rows], [C.PASS, C.PASS])
        off = prom.replace(str(2560 * C.MIB), str(2562 * C.MIB))
        self.assertEqual(C.check_process(apps, C.parse_prom(off), 4242, 2048 * C.MIB)[1][3], C.FAIL)
        self.assertEqual(C.check_process(apps, C.parse_prom(prom), 4242, 4096 * C.MIB)[0][3], C.FAIL)
        self.assertEqual(C.check_process(apps, [], 4242, 2048 * C.MIB)[1][2], "absent")
        self.assertEqual(C.check_process(apps, C.parse_prom(prom), 999, 1)[0][3], C.FAIL)

    def collections(self, watts=300.0, energy_scale=1.0, n=31):
        return [C.Collection(k, 1000.0 + k, 5e8 + energy_scale * watts * 1000 * k, watts + (k % 2) * 10) for k in range(n)]

    def test_energy_against_integrated_power(self):
        self.assertEqual(C.check_energy(self.collections(energy_scale=305 / 300))[3], C.PASS)
        self.assertEqual(C.check_energy(self.collections(energy_scale=1.07))[3], C.FAIL)
        self.assertEqual(C.check_energy(self.collections(energy_scale=0.93))[3], C.FAIL)
        self.assertEqual(C.check_energy(self.collections(n=5))[3], C.FAIL)  # 4 s is too short a window

    def test_rise(self):
        self.assertEqual(C.check_rise([0, 0, 1], [99, 100, 98], "util", min_load=50)[3], C.PASS)
        self.assertEqual(C.check_rise([0, 0, 1], [30, 40, 35], "util", min_load=50)[3], C.FAIL)
        self.assertEqual(C.check_rise([70, 72], [80, 82], "power", factor=1.2)[3], C.FAIL)
        self.assertEqual(C.check_rise([70, 72], [400, 420], "power", factor=1.2)[3], C.PASS)
        self.assertEqual(C.check_rise([], [400], "power")[3], C.FAIL)

    def test_distribution(self):
        base = f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="{UUID}"}} 400\n'
        warn = "WARN --distribution is read through DCGM (or the simulated fleet) only; the NVML source exports no distribution"
        self.assertEqual(C.check_distribution(C.parse_prom(base), UUID, warn)[3], C.UNSUPPORTED)
        self.assertEqual(C.check_distribution(C.parse_prom(base), UUID, "")[3], C.FAIL)
        ok = base + f'dcgm_otel_power_usage_interval_max{{gpu="0",UUID="{UUID}"}} 450\ndcgm_otel_power_usage_interval_min{{gpu="0",UUID="{UUID}"}} 380\n'
        self.assertEqual(C.check_distribution(C.parse_prom(ok), UUID, "")[3], C.PASS)
        self.assertEqual(C.check_distribution(C.parse_prom(ok.replace(" 450", " 399")), UUID, "")[3], C.FAIL)

    def test_mig_only_where_on(self):
        smi = C.parse_smi_csv(fixture("h100-query-gpu.csv"))
        self.assertEqual(C.check_mig(smi, [], [])[0][3], C.SKIP)
        on = [dict(smi[0], **{"mig.mode.current": "Enabled", "uuid": "GPU-e9fd6049-d65a-f21e-f672-4c5ccb810ace"})]
        gpus = C.parse_smi_list(fixture("nvidia-smi-L.txt"))
        inst = "".join(f'DCGM_FI_DEV_FB_USED{{gpu="1",UUID="GPU-e9fd6049-d65a-f21e-f672-4c5ccb810ace",GPU_I_ID="{i}"}} 1\n' for i in (1, 3, 7))
        self.assertEqual(C.check_mig(on, gpus, C.parse_prom(inst))[0][3], C.PASS)
        self.assertEqual(C.check_mig(on, gpus, C.parse_prom(inst.split("\n")[0]))[0][3], C.FAIL)


# ---------------------------------------------------------------------------------------------------
# OTLP
# ---------------------------------------------------------------------------------------------------


class Otlp(unittest.TestCase):
    def test_decoder_matches_opentelemetry_proto(self):
        mine = otlp_sink.metrics_request(fixture("otlp-request.bin", "rb"))
        want = json.loads(fixture("otlp-request.expected.json"))
        for r in mine["resources"]:
            for m in r["metrics"]:
                m.pop("monotonic", None)
                for p in m["points"]:
                    p.pop("start_time_unix_nano", None)
        self.assertEqual(mine, want)

    def test_truncated_request_is_an_error(self):
        with self.assertRaises(otlp_sink.DecodeError):
            otlp_sink.metrics_request(fixture("otlp-request.bin", "rb")[:-7])

    def request(self):
        return otlp_sink.metrics_request(fixture("otlp-request.bin", "rb"))

    def collection_of(self, req, power_delta=0.0):
        pts = C._gpu_points(req, UUID)
        return C.Collection(1, 0.0, pts["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"], pts["DCGM_FI_DEV_POWER_USAGE"] + power_delta)

    def test_hw_power_equals_the_same_collection(self):
        req = self.request()
        rows = C.check_otlp([req], [self.collection_of(req)], UUID)
        self.assertEqual([r[3] for r in rows], [C.PASS, C.PASS, C.PASS], rows)
        rows = C.check_otlp([req], [self.collection_of(req, 0.001)], UUID)
        self.assertEqual(rows[1][3], C.FAIL)
        # No scraped collection with that energy: nothing matched.
        rows = C.check_otlp([req], [C.Collection(1, 0.0, 1.0, 2.0)], UUID)
        self.assertEqual(rows[1][3], C.FAIL)
        self.assertEqual(C.check_otlp([], [], UUID)[0][3], C.FAIL)

    def test_two_resources_for_one_gpu_fail(self):
        req = self.request()
        gpu = next(r for r in req["resources"] if r["attributes"].get("hw.id") == UUID)
        req["resources"].append(json.loads(json.dumps(gpu)))
        self.assertEqual(C.check_otlp([req], [self.collection_of(req)], UUID)[0][3], C.FAIL)

    def test_hw_power_differs_from_dcgm_name_in_the_request(self):
        req = self.request()
        for r in req["resources"]:
            for m in r["metrics"]:
                if m["name"] == "hw.power" and r["attributes"].get("hw.id") == UUID:
                    m["points"][0]["value"] += 1
        self.assertEqual(C.check_otlp([req], [], UUID)[2][3], C.FAIL)

    def test_sink_receives_plain_and_gzip(self):
        with tempfile.TemporaryDirectory() as d:
            out, port_file = os.path.join(d, "otlp.jsonl"), os.path.join(d, "port")
            p = subprocess.Popen([sys.executable, os.path.join(HERE, "otlp_sink.py"), "--out", out, "--port-file", port_file, "--seconds", "30"],
                                 stdout=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 15
                while not os.path.exists(port_file) and time.monotonic() < deadline:
                    time.sleep(0.05)
                with open(port_file) as f:
                    port = int(f.read())
                body = fixture("otlp-request.bin", "rb")
                for data, headers in ((body, {}), (gzip.compress(body), {"Content-Encoding": "gzip"})):
                    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/metrics", data=data, method="POST",
                                                 headers=dict(headers, **{"Content-Type": "application/x-protobuf"}))
                    with urllib.request.urlopen(req, timeout=10) as r:
                        self.assertEqual(r.status, 200)
                with open(out) as f:
                    got = [json.loads(ln) for ln in f]
                self.assertEqual(len(got), 2)
                self.assertEqual(got[0]["resources"], got[1]["resources"])
                self.assertEqual(len(got[0]["resources"]), 5)
            finally:
                p.terminate()
                p.wait(timeout=10)


class QueryFields(unittest.TestCase):
    """hwcheck.usable: the fields nvidia-smi refuses are found by halving and left out."""

    class Stub:
        def __init__(self, refused):
            self.refused, self.calls, self.notes = refused, 0, []
            self.a = type("A", (), {"smi": "nvidia-smi"})

        def cmd(self, args, timeout):
            self.calls += 1
            asked = args[1].split("=", 1)[1].split(",")
            return {"rc": 2 if set(asked) & self.refused else 0}

        def note(self, msg):
            self.notes.append(msg)

    def test_refused_fields_are_left_out(self):
        fields = C.query_fields(C.parse_help_query(fixture("h100-help-query-gpu.txt")))
        run = self.Stub({"memory.reserved", "power.draw.instant"})
        got = hwcheck.usable(run, fields)
        self.assertEqual(got, [f for f in fields if f not in run.refused])
        self.assertEqual(len(run.notes), 2)
        self.assertLess(run.calls, 30)
        run = self.Stub(set())
        self.assertEqual(hwcheck.usable(run, fields), fields)
        self.assertEqual(run.calls, 1)


class Table(unittest.TestCase):
    def test_table_and_verdict(self):
        rows = [("a check", "1", "1", C.PASS), ("another", "2", "3", C.FAIL), ("x", "-", "why", C.NC)]
        t = C.table(rows)
        self.assertEqual(t.splitlines()[0].split(" | "), ["check  ", "expected", "got", "result"])
        self.assertEqual(C.verdict(rows), (1, "1 PASS, 1 FAIL, 1 N/C"))
        self.assertEqual(C.verdict(rows[:1])[0], 0)
        self.assertIn("N/C         not comparable with nvidia-smi (reasons in table.txt): x", C.brief(rows))


if __name__ == "__main__":
    unittest.main()
