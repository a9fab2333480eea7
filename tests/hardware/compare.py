"""The hardware check's judgements, without I/O: hwcheck.py gathers readings on a GPU machine, this
module turns them into table rows; tests/hardware/test_hwcheck.py feeds it recorded outputs.

- Parsers: nvidia-smi's CSV (`--query-gpu`, `--query-compute-apps`, header with units, `[N/A]` and the
  other bracketed answers), its `--help-query-gpu` list and `-L`/`-q` text, the exporter's /metrics text.
- FAMILIES: every DCGM family the NVML source writes (src/source/nvml/fields.rs), each either compared
  with an nvidia-smi query field (with its tolerance) or named as not comparable, with the reason.
- The checks: idle readings against nvidia-smi taken in the same second, the rise under load, the load
  generator's process memory, energy against integrated power, the power distribution, OTLP against
  :9400 of the same collection, MIG.

A row is (check, expected, got, result). Results: PASS, FAIL (a mismatch: the run exits non-zero), N/C
(not comparable, the reason in `got`), GAP (asked for by the check but not read by the NVML source),
UNSUPPORTED (documented as not supported by the NVML source), INFO, SKIP.
"""

import csv
import io
import math
import re
from dataclasses import dataclass, field

PASS, FAIL, NC, GAP, UNSUPPORTED, INFO, SKIP = "PASS", "FAIL", "N/C", "GAP", "UNSUPPORTED", "INFO", "SKIP"
MIB = 1 << 20

# ---------------------------------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------------------------------


class FormatError(ValueError):
    """Output that does not have the shape the parser expects (named with what was expected)."""


def parse_smi_csv(text):
    """nvidia-smi `--format=csv[,nounits]` output WITH its header line: a list of {field: raw text}.

    Header cells are `name [unit]`; the unit is dropped from the key. Values keep their raw text
    (`71.23 W`, `[N/A]`); `smi_number` reads them."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    header = [re.sub(r"\s*\[[^\]]*\]\s*$", "", h.strip()) for h in rows[0]]
    out = []
    for n, r in enumerate(rows[1:], start=2):
        if len(r) != len(header):
            raise FormatError(f"nvidia-smi CSV line {n}: {len(r)} values for {len(header)} header fields: {lines[n - 1]!r}")
        out.append({h: v.strip() for h, v in zip(header, r)})
    return out


def smi_absent(raw):
    """True for the answers nvidia-smi gives instead of a value: [N/A], [Not Supported], [Unknown Error] ..."""
    s = raw.strip()
    return s in ("", "N/A", "Not Supported") or (s.startswith("[") and s.endswith("]"))


_UNITS = r"(?:W|mW|MiB|KiB|GiB|B|MHz|%|C|KB/s|MB/s|J|mJ)"
_WORDS = {"yes": 1, "no": 0, "enabled": 1, "disabled": 0, "active": 1, "inactive": 0}


def smi_number(raw, name=""):
    """An nvidia-smi value as a number; None when it is absent ([N/A], ...). Reads `71.23 W`, `81559 MiB`,
    `P0` (performance state 0), `0x...01` (bit masks), `Yes`/`No`, `Enabled`/`Disabled`. Anything else
    raises FormatError naming the field."""
    if smi_absent(raw):
        return None
    s = raw.strip()
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*" + _UNITS + "?", s)
    if m:
        return float(m.group(1))
    if re.fullmatch(r"P\d{1,2}", s):
        return float(s[1:])
    if re.fullmatch(r"0x[0-9a-fA-F]+", s):
        return float(int(s, 16))
    if s.lower() in _WORDS:
        return float(_WORDS[s.lower()])
    raise FormatError(f"nvidia-smi {name or 'value'}: cannot read {raw!r} as a number")


def parse_help_query(text):
    """The field names `nvidia-smi --help-query-gpu` lists (every quoted name, aliases included)."""
    names = set()
    for line in text.splitlines():
        if line.startswith('"'):
            names.update(re.findall(r'"([A-Za-z0-9_.]+)"', line))
    return names


def parse_smi_list(text):
    """`nvidia-smi -L`: [{index, name, uuid, mig: [mig uuids]}]."""
    gpus = []
    for line in text.splitlines():
        m = re.match(r"GPU (\d+): (.*?) \(UUID: (GPU-[0-9a-fA-F-]+)\)", line.strip())
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3), "mig": []})
            continue
        m = re.search(r"\(UUID: (MIG-[0-9a-zA-Z/-]+)\)", line)
        if m and gpus:
            gpus[-1]["mig"].append(m.group(1))
    return gpus


def parse_smi_q(text):
    """`nvidia-smi -q`: per GPU bus id, the few keys the check reads ({bus id: {key: value}})."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$", line.strip())
        if m:
            cur = out.setdefault(m.group(1).upper(), {})
            continue
        m = re.match(r"\s*(Replays Since Reset|Replay Number Rollovers)\s*:\s*(.*?)\s*$", line)
        if m and cur is not None:
            cur[m.group(1)] = m.group(2)
    return out


@dataclass
class Sample:
    name: str
    labels: dict
    value: float


def _labels(text):
    out, i = {}, 0
    while i < len(text):
        m = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="').match(text, i)
        if not m:
            break
        key, i, val = m.group(1), m.end(), []
        while i < len(text) and text[i] != '"':
            if text[i] == "\\" and i + 1 < len(text):
                val.append({"n": "\n", "\\": "\\", '"': '"'}.get(text[i + 1], text[i + 1]))
                i += 2
            else:
                val.append(text[i])
                i += 1
        out[key] = "".join(val)
        i += 1
        if i < len(text) and text[i] == ",":
            i += 1
    return out


def parse_prom(text):
    """Prometheus text exposition: the samples (comments left out). Raises FormatError on a bad line."""
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(\s+-?\d+)?", line)
        if not m:
            raise FormatError(f"/metrics line {n}: {line!r}")
        try:
            v = float(m.group(3))
        except ValueError:
            raise FormatError(f"/metrics line {n}: value {m.group(3)!r}") from None
        out.append(Sample(m.group(1), _labels(m.group(2)[1:-1]) if m.group(2) else {}, v))
    return out


def self_metric(samples, name):
    """The value of a one-series self-metric (dcgm_otel_*), or None."""
    for s in samples:
        if s.name == name:
            return s.value
    return None


def gpu_series(samples, name, uuid):
    """The GPU-level sample of a family for one GPU (not a MIG instance's, not an NvLink's), or None."""
    for s in samples:
        if s.name == name and s.labels.get("UUID") == uuid and "GPU_I_ID" not in s.labels and "nvlink" not in s.labels:
            return s
    return None


def gpu_labels(samples, uuid):
    """The labels of the GPU's series (identity and label rows)."""
    for s in samples:
        if s.labels.get("UUID") == uuid and "GPU_I_ID" not in s.labels and s.name.startswith("DCGM_FI_"):
            return s.labels
    return {}


# ---------------------------------------------------------------------------------------------------
# What is compared with what
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tol:
    """How close the exporter's value must be to nvidia-smi's: exact, within `abs`, or within `rel`
    (a fraction of nvidia-smi's value)."""
    abs: float = 0.0
    rel: float = 0.0

    def ok(self, smi, got):
        return abs(smi - got) <= max(self.abs, self.rel * abs(smi)) + 1e-9

    def text(self):
        if self.rel:
            return f"±{self.rel * 100:g} %"
        if self.abs:
            return f"±{self.abs:g}"
        return "exact"


EXACT = Tol()


@dataclass
class Family:
    """A family the NVML source writes: compared with the first of `smi` this nvidia-smi knows, or,
    with `reason`, not comparable."""
    name: str
    smi: list = field(default_factory=list)
    tol: Tol = EXACT
    reason: str = ""


NO_QUERY_FIELD = "this nvidia-smi has no --query-gpu field for it"
NVLINK = "nvidia-smi --query-gpu has no NvLink counters (they are per link in `nvidia-smi nvlink -e`)"

FAMILIES = [
    Family("DCGM_FI_DEV_NVML_INDEX", ["index"]),
    Family("DCGM_FI_DEV_MIG_MODE", ["mig.mode.current"]),
    Family("DCGM_FI_DEV_SM_CLOCK", ["clocks.current.sm", "clocks.sm"], Tol(rel=0.05)),
    Family("DCGM_FI_DEV_MEM_CLOCK", ["clocks.current.memory", "clocks.mem"], Tol(rel=0.01)),
    Family("DCGM_FI_DEV_VIDEO_CLOCK", ["clocks.current.video", "clocks.video"], Tol(rel=0.05)),
    Family("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]),
    Family("DCGM_FI_DEV_MAX_SM_CLOCK", ["clocks.max.sm"]),
    Family("DCGM_FI_DEV_MAX_MEM_CLOCK", ["clocks.max.memory", "clocks.max.mem"]),
    Family("DCGM_FI_DEV_MAX_VIDEO_CLOCK", ["clocks.max.video"], reason=NO_QUERY_FIELD),
    Family("DCGM_FI_DEV_MEMORY_TEMP", ["temperature.memory"], Tol(abs=1)),
    Family("DCGM_FI_DEV_GPU_TEMP", ["temperature.gpu"], Tol(abs=1)),
    Family("DCGM_FI_DEV_POWER_USAGE", ["power.draw"], Tol(rel=0.05)),
    Family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
           reason="nvidia-smi has no energy query field; checked against the integral of power under load"),
    Family("DCGM_FI_DEV_POWER_MGMT_LIMIT", ["power.limit"], Tol(abs=0.5)),
    Family("DCGM_FI_DEV_PSTATE", ["pstate"]),
    Family("DCGM_FI_DEV_FAN_SPEED", ["fan.speed"], Tol(abs=1)),
    Family("DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
           reason="nvidia-smi --query-gpu has no PCIe throughput field (NVML's 20 ms sample; `dmon -s t` samples another window)"),
    Family("DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
           reason="nvidia-smi --query-gpu has no PCIe throughput field (NVML's 20 ms sample; `dmon -s t` samples another window)"),
    Family("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", ["-q:Replays Since Reset"]),
    Family("DCGM_FI_DEV_PCIE_LINK_GEN", ["pcie.link.gen.current"]),
    Family("DCGM_FI_DEV_PCIE_LINK_WIDTH", ["pcie.link.width.current"]),
    Family("DCGM_FI_DEV_GPU_UTIL", ["utilization.gpu"], Tol(abs=5)),
    Family("DCGM_FI_DEV_MEM_COPY_UTIL", ["utilization.memory"], Tol(abs=5)),
    Family("DCGM_FI_DEV_ENC_UTIL", ["utilization.encoder"], Tol(abs=5)),
    Family("DCGM_FI_DEV_DEC_UTIL", ["utilization.decoder"], Tol(abs=5)),
    Family("DCGM_FI_DEV_XID_ERRORS",
           reason="the last XID event since the exporter started; nvidia-smi has no XID field (the value is shown)"),
    Family("DCGM_FI_DEV_FB_TOTAL", ["memory.total"]),
    # DCGM writes free and used as bytes // MiB (DcgmCacheManager.cpp); nvidia-smi's MiB can be one more:
    # on an H100 under load it showed used 2575 = total - reserved - free where DCGM's rule gives 2574.
    Family("DCGM_FI_DEV_FB_FREE", ["memory.free"], Tol(abs=1)),
    Family("DCGM_FI_DEV_FB_USED", ["memory.used"], Tol(abs=1)),
    Family("DCGM_FI_DEV_FB_RESERVED", ["memory.reserved"]),
    Family("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", ["ecc.errors.corrected.volatile.total"]),
    Family("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", ["ecc.errors.uncorrected.volatile.total"]),
    Family("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", ["ecc.errors.corrected.aggregate.total"]),
    Family("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", ["ecc.errors.uncorrected.aggregate.total"]),
    Family("DCGM_FI_DEV_RETIRED_SBE", ["retired_pages.single_bit_ecc.count", "retired_pages.sbe"]),
    Family("DCGM_FI_DEV_RETIRED_DBE", ["retired_pages.double_bit.count", "retired_pages.dbe"]),
    Family("DCGM_FI_DEV_RETIRED_PENDING", ["retired_pages.pending"]),
    Family("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", ["remapped_rows.uncorrectable"]),
    Family("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", ["remapped_rows.correctable"]),
    Family("DCGM_FI_DEV_ROW_REMAP_FAILURE", ["remapped_rows.failure"]),
    Family("DCGM_FI_DEV_ROW_REMAP_PENDING", ["remapped_rows.pending"]),
    Family("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_GET_STATE", reason="NvLinks up, one series per link: counted against `nvidia-smi nvlink -s` (row 'NvLinks up')"),
    Family("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_PER_LINK_TOTAL", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_PER_LINK_TOTAL", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_THROUGHPUT_PER_LINK", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_PER_LINK", reason=NVLINK),
    Family("DCGM_FI_DEV_NVLINK_RX_THROUGHPUT_PER_LINK", reason=NVLINK),
]

# Text fields: the series' identity labels and the label rows, against nvidia-smi's fields.
LABELS = [
    ("DCGM_FI_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION", "driver_version"),
    ("DCGM_FI_DEV_NAME", "modelName", "name"),
    ("DCGM_FI_DEV_UUID", "UUID", "uuid"),
    ("DCGM_FI_DEV_PCI_BUSID", "pci_bus_id", "pci.bus_id"),
    ("DCGM_FI_DEV_SERIAL", "DCGM_FI_DEV_SERIAL", "serial"),
    ("DCGM_FI_DEV_VBIOS_VERSION", "DCGM_FI_DEV_VBIOS_VERSION", "vbios_version"),
    ("gpu label", "gpu", "index"),
]

# Asked for by the check, not read by the NVML source (src/source/nvml/fields.rs has no row for them):
# (what, nvidia-smi field, DCGM field). None since the PCIe link generation and width are read.
GAPS = []

# Extra nvidia-smi fields recorded for the table (power readings of another kind, ECC mode, ...).
RECORDED = ["timestamp", "count", "power.draw.average", "power.draw.instant", "ecc.mode.current",
            "persistence_mode", "compute_cap", "temperature.gpu.tlimit", "enforced.power.limit"]


def candidate_fields():
    """Every nvidia-smi field the check may ask for (aliases included)."""
    out = {"uuid"}
    for f in FAMILIES:
        out.update(c for c in f.smi if not c.startswith("-q:"))
    out.update(smi for _, _, smi in LABELS)
    out.update(smi for _, smi, _ in GAPS)
    out.update(RECORDED)
    return out


def query_fields(available):
    """The --query-gpu list for the idle comparison: every field the tables name that this nvidia-smi
    knows (from --help-query-gpu), in a fixed order."""
    want = ["uuid"]
    for f in FAMILIES:
        first = smi_field_for(f, available)
        want += [first] if first and not first.startswith("-q:") else []
    want += [smi for _, _, smi in LABELS] + [smi for _, smi, _ in GAPS] + RECORDED
    out = []
    for w in want:
        if w in available and w not in out:
            out.append(w)
    return out


def smi_field_for(fam, available):
    for c in fam.smi:
        if c.startswith("-q:") or c in available:
            return c
    return None


def fmt(v):
    if v is None:
        return "absent"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


# ---------------------------------------------------------------------------------------------------
# Idle comparison: the exporter against nvidia-smi in the same second
# ---------------------------------------------------------------------------------------------------


@dataclass
class Round:
    """One comparison round: nvidia-smi's row for the GPU and the exporter's scrapes of the collection
    before and the collection after it (the bracket)."""
    smi: dict
    before: list
    after: list


def _round_verdict(fam, fld, rnd, uuid, smi_q):
    """(ok, expected text, got text) of one family in one round."""
    if fld.startswith("-q:"):
        raw = smi_q.get(fld[3:])
        if raw is None:
            return None, "", ""
    else:
        raw = rnd.smi.get(fld)
    try:
        want = smi_number(raw, fld) if raw is not None else None
    except FormatError as e:
        return False, str(raw), str(e)
    got = [gpu_series(s, fam.name, uuid) for s in (rnd.before, rnd.after)]
    vals = [g.value for g in got if g is not None]
    if want is None and not vals:
        return True, f"{raw} (absent)", "absent"
    if want is None:
        return False, f"{raw} (absent)", f"{fmt(vals[0])} (a value where nvidia-smi has none)"
    if not vals:
        return False, fmt(want), "absent"
    ok = any(fam.tol.ok(want, v) for v in vals)
    return ok, fmt(want), " / ".join(fmt(v) for v in vals)


def compare_families(rounds, uuid, available, smi_q=None, only=None):
    """One row per family of FAMILIES (compared over every round, or N/C with its reason), then one per
    family the exporter wrote that FAMILIES does not know (FAIL: the check does not cover it). `only`:
    those families alone, without the coverage rows."""
    smi_q = smi_q or {}
    rows = []
    for fam in FAMILIES:
        if only is not None and fam.name not in only:
            continue
        fld = smi_field_for(fam, available)
        check = f"{fam.name} vs nvidia-smi {fld.replace('-q:', '-q ') if fld else ''}".rstrip()
        if fam.reason and fld is None:
            rows.append((fam.name, "-", f"{shown_value(rounds[0].before, fam.name, uuid)}; {fam.reason}", NC))
            continue
        if fld is None:
            rows.append((fam.name, "-", NO_QUERY_FIELD, NC))
            continue
        verdicts = [_round_verdict(fam, fld, r, uuid, smi_q) for r in rounds]
        verdicts = [v for v in verdicts if v[0] is not None]
        if not verdicts:
            rows.append((check, "-", "nvidia-smi gave no reading", NC))
            continue
        bad = [v for v in verdicts if not v[0]]
        shown = bad[0] if bad else verdicts[-1]
        rows.append((check + f" ({fam.tol.text()}, {len(verdicts)} rounds)", shown[1], shown[2], FAIL if bad else PASS))
    if only is not None:
        return rows
    known = {f.name for f in FAMILIES}
    written = sorted({s.name for r in rounds[:1] for s in r.before if s.name.startswith("DCGM_FI_")})
    for name in written:
        if name not in known:
            rows.append((f"{name} covered", "compared or named not comparable", "not covered by the check", FAIL))
    return rows


def shown_value(samples, name, uuid):
    """What the exporter wrote of a family not compared: the GPU's value, or how many series (per link)."""
    s = gpu_series(samples, name, uuid)
    if s is not None:
        return fmt(s.value)
    n = sum(1 for s in samples if s.name == name and uuid in (s.labels.get("UUID"), s.labels.get("gpu_uuid")))
    return f"{n} series" if n else "absent"


def compare_labels(rounds, uuid):
    rows = []
    r = rounds[0]
    labels = gpu_labels(r.before, uuid)
    for what, label, fld in LABELS:
        raw = r.smi.get(fld)
        got = labels.get(label)
        check = f"{what} ({label}) vs nvidia-smi {fld}"
        if raw is None:
            rows.append((check, "-", f"{got}; {NO_QUERY_FIELD}", NC))
        elif smi_absent(raw) and got is None:
            rows.append((check, raw, "absent", PASS))
        elif got is None:
            rows.append((check, raw, "absent", FAIL))
        else:
            same = got.strip().upper() == raw.strip().upper() if fld == "pci.bus_id" else got.strip() == raw.strip()
            rows.append((check, raw, got, PASS if same else FAIL))
    return rows


def compare_gaps(smi_row):
    rows = []
    for what, fld, dcgm in GAPS:
        raw = smi_row.get(fld)
        rows.append((f"{what} (nvidia-smi {fld})", raw if raw is not None else "-",
                     f"not read by the NVML source (no {dcgm} row in src/source/nvml/fields.rs)", GAP))
    return rows


def nvlinks_up(text):
    """Links up in `nvidia-smi nvlink -s` (lines `Link N: 26.562 GB/s`; `<inactive>` ones are down)."""
    return len(re.findall(r"Link \d+:\s*[0-9.]+\s*GB/s", text))


def compare_nvlinks(samples, uuid, nvlink_status):
    got = len([s for s in samples if s.name == "DCGM_FI_DEV_NVLINK_GET_STATE" and
               (s.labels.get("gpu_uuid") == uuid or s.labels.get("UUID") == uuid)])
    if nvlink_status is None:
        return [("NvLinks up (series of DCGM_FI_DEV_NVLINK_GET_STATE)", "-", f"{got}; `nvidia-smi nvlink -s` gave nothing", NC)]
    want = nvlinks_up(nvlink_status)
    return [("NvLinks up vs `nvidia-smi nvlink -s`", str(want), str(got), PASS if want == got else FAIL)]


# ---------------------------------------------------------------------------------------------------
# Under load
# ---------------------------------------------------------------------------------------------------


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def check_rise(idle, load, what, min_load=None, factor=None):
    """A reading rises under load: median under load >= `min_load` and above the idle median (by
    `factor` when given)."""
    i, l = median(idle), median(load)
    if i is None or l is None:
        return (f"{what} rises under load", "readings idle and under load", f"idle {fmt(i)}, load {fmt(l)}", FAIL)
    ok = l > i
    want = f"> idle {fmt(i)}"
    if factor:
        ok = ok and l >= i * factor
        want = f">= {factor:g} × idle {fmt(i)}"
    if min_load is not None:
        ok = ok and l >= min_load
        want += f" and >= {fmt(float(min_load))}"
    return (f"{what} rises under load (median of {len(load)} collections)", want, fmt(l), PASS if ok else FAIL)


def check_process(apps, samples, pid, alloc_bytes):
    """The generator's process: nvidia-smi --query-compute-apps lists it, its memory there is at least
    what it allocated, and the exporter's per-process series shows it within 1 MiB of nvidia-smi."""
    rows = []
    mine = [a for a in apps if a.get("pid", "").strip() == str(pid)]
    if not mine:
        return [(f"load generator pid {pid} in nvidia-smi --query-compute-apps", "listed", "not listed", FAIL)]
    # The query field `used_memory` comes back under the header `used_gpu_memory [MiB]`.
    raw = mine[0].get("used_gpu_memory", mine[0].get("used_memory", ""))
    used = smi_number(raw, "used_memory")
    if used is None:
        rows.append((f"pid {pid} used_memory (nvidia-smi)", "a value", raw, FAIL))
        return rows
    rows.append((f"pid {pid} used_memory (nvidia-smi) >= allocated", f">= {alloc_bytes // MIB} MiB", f"{fmt(used)} MiB",
                 PASS if used >= alloc_bytes // MIB else FAIL))
    series = [s for s in samples if s.name == "dcgm_otel_process_gpu_memory_bytes" and s.labels.get("pid") == str(pid)]
    if not series:
        rows.append((f"dcgm_otel_process_gpu_memory_bytes{{pid=\"{pid}\"}} vs nvidia-smi (±1 MiB)", f"{fmt(used)} MiB", "absent", FAIL))
        return rows
    got = series[0].value / MIB
    rows.append((f"dcgm_otel_process_gpu_memory_bytes{{pid=\"{pid}\"}} vs nvidia-smi (±1 MiB)", f"{fmt(used)} MiB",
                 f"{got:.2f} MiB", PASS if abs(got - used) <= 1.0 else FAIL))
    return rows


@dataclass
class Collection:
    """One collection of the exporter as /metrics showed it: its number and time, the GPU's energy (mJ)
    and power (W), and what else the check reads."""
    n: int
    t: float
    energy_mj: float = None
    power_w: float = None
    util: float = None
    extra: dict = field(default_factory=dict)


def check_energy(collections, tol=0.05, min_span_s=10.0):
    """Energy grows by the integral of power (trapezoid over the collections' times) within `tol`."""
    cs = [c for c in sorted(collections, key=lambda c: c.n) if c.energy_mj is not None and c.power_w is not None]
    check = f"energy growth vs ∫ power dt (±{tol * 100:g} %)"
    if len(cs) < 3 or cs[-1].t - cs[0].t < min_span_s:
        span = cs[-1].t - cs[0].t if cs else 0
        return (check, f">= 3 collections over >= {min_span_s:g} s", f"{len(cs)} collections over {span:.1f} s", FAIL)
    integral = sum((a.power_w + b.power_w) / 2 * (b.t - a.t) for a, b in zip(cs, cs[1:]))
    grown = (cs[-1].energy_mj - cs[0].energy_mj) / 1000.0
    ok = integral > 0 and abs(grown - integral) <= tol * integral
    return (check + f", {len(cs)} collections over {cs[-1].t - cs[0].t:.1f} s", f"{integral:.1f} J",
            f"{grown:.1f} J ({(grown / integral - 1) * 100:+.2f} %)" if integral > 0 else f"{grown:.1f} J", PASS if ok else FAIL)


DISTRIBUTION_WARNING = "the NVML source exports no distribution"


def check_distribution(samples, uuid, log_text):
    """--distribution DCGM_FI_DEV_POWER_USAGE@100ms: with interval series, their max >= the last value of
    the same collection (and min <= it); without them, the NVML source's documented start-up warning."""
    mx = [s for s in samples if s.name == "dcgm_otel_power_usage_interval_max" and s.labels.get("UUID") == uuid]
    last = gpu_series(samples, "DCGM_FI_DEV_POWER_USAGE", uuid)
    check = "--distribution DCGM_FI_DEV_POWER_USAGE@100ms: interval max >= last value"
    if not mx:
        if DISTRIBUTION_WARNING in log_text:
            return (check, "interval series", "none: the NVML source exports no distribution (start-up warning, docs/sources.md)", UNSUPPORTED)
        return (check, "interval series or the NVML source's warning", "neither", FAIL)
    if last is None:
        return (check, "a last value", "absent", FAIL)
    mn = [s for s in samples if s.name == "dcgm_otel_power_usage_interval_min" and s.labels.get("UUID") == uuid]
    ok = mx[0].value >= last.value and (not mn or mn[0].value <= last.value)
    return (check, f">= {fmt(last.value)}", f"max {fmt(mx[0].value)}" + (f", min {fmt(mn[0].value)}" if mn else ""), PASS if ok else FAIL)


def check_otlp(requests, collections, uuid):
    """OTLP of the same run: each request has one Resource for the GPU (hw.id = its UUID), and hw.power
    equals DCGM_FI_DEV_POWER_USAGE of the same collection on :9400 (matched by the energy counter) and
    in the same request (--otel-metric-names both)."""
    check_res = "OTLP: one Resource per request for the GPU (hw.id)"
    if not requests:
        return [(check_res, "requests", "no OTLP request received", FAIL)]
    counts = [sum(1 for r in req["resources"] if r["attributes"].get("hw.id") == uuid) for req in requests]
    rows = [(check_res + f", {len(requests)} requests", "1 in each", ",".join(sorted({str(c) for c in counts})),
             PASS if all(c == 1 for c in counts) else FAIL)]
    by_energy = {c.energy_mj: c for c in collections if c.energy_mj is not None}
    matched, bad, same_req_bad = 0, [], []
    for req in requests:
        pts = _gpu_points(req, uuid)
        e, p_dcgm, p_hw = pts.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), pts.get("DCGM_FI_DEV_POWER_USAGE"), pts.get("hw.power")
        if p_hw is not None and p_dcgm is not None and abs(p_hw - p_dcgm) > 1e-9 * max(1.0, abs(p_dcgm)):
            same_req_bad.append((p_dcgm, p_hw))
        c = by_energy.get(e)
        if c is None or p_hw is None:
            continue
        matched += 1
        # /metrics prints the shortest text that reads back as the same double, so equality is exact.
        if c.power_w is None or abs(c.power_w - p_hw) > 1e-9 * max(1.0, abs(p_hw)):
            bad.append((c.power_w, p_hw))
    check = "OTLP hw.power vs :9400 DCGM_FI_DEV_POWER_USAGE, same collection (matched by energy)"
    if not matched:
        rows.append((check, ">= 1 matched collection", "no request matched a scraped collection", FAIL))
    else:
        shown = bad[0] if bad else (None, None)
        rows.append((check + f", {matched} collections", "equal" if not bad else fmt(shown[0]),
                     "equal" if not bad else fmt(shown[1]), PASS if not bad else FAIL))
    rows.append(("OTLP hw.power vs DCGM_FI_DEV_POWER_USAGE in the same request", "equal",
                 "equal" if not same_req_bad else f"{fmt(same_req_bad[0][0])} vs {fmt(same_req_bad[0][1])}",
                 PASS if not same_req_bad else FAIL))
    return rows


def _gpu_points(req, uuid):
    """{metric name: value} of the GPU's Resource in one decoded request (first point of each)."""
    out = {}
    for r in req["resources"]:
        if r["attributes"].get("hw.id") != uuid:
            continue
        for m in r["metrics"]:
            for p in m["points"]:
                if "value" in p and m["name"] not in out:
                    out[m["name"]] = p["value"]
    return out


def check_mig(smi_rows, smi_list, samples):
    """MIG: only where it is already on (the check never changes a GPU's mode)."""
    on = [r for r in smi_rows if (r.get("mig.mode.current") or "").strip() == "Enabled"]
    if not on:
        return [("MIG instances", "-", "MIG is off on every GPU here: not checked (the check never changes GPU modes)", SKIP)]
    rows = []
    for r in on:
        uuid = r.get("uuid")
        want = next((g["mig"] for g in smi_list if g["uuid"] == uuid), [])
        got = {(s.labels.get("gpu"), s.labels.get("GPU_I_ID")) for s in samples
               if s.labels.get("UUID") == uuid and "GPU_I_ID" in s.labels}
        rows.append((f"MIG instances of {uuid} vs nvidia-smi -L", str(len(want)), str(len(got)), PASS if len(want) == len(got) else FAIL))
    return rows


# ---------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------


def table(rows):
    """The table as text: check, expected, got, result; long cells wrap (check at 90 characters, the
    others at 60)."""
    head = ("check", "expected", "got", "result")
    widths = [min(90 if i == 0 else 60, max(len(str(r[i])) for r in rows + [head])) for i in range(4)]

    def cut(s, w):
        s = str(s)
        return [s[i:i + w] for i in range(0, len(s), w)] or [""]

    out = []
    for r in [head, tuple("-" * w for w in widths)] + list(rows):
        cells = [cut(r[i], widths[i]) for i in range(4)]
        for k in range(max(len(c) for c in cells)):
            out.append(" | ".join((c[k] if k < len(c) else "").ljust(widths[i]) for i, c in enumerate(cells)).rstrip())
    return "\n".join(out)


def brief(rows, width=220):
    """The table in short, for a console that keeps only its last lines: one line per row that is not
    N/C, and the N/C families on one line (their reasons are in the table)."""
    out = []
    for check, want, got, result in rows:
        if result != NC:
            line = f"{result:<11} {check} | expected {want} | got {got}"
            out.append(line if len(line) <= width else line[:width - 3] + "...")
    nc = [r[0].split(" ")[0] for r in rows if r[3] == NC]
    if nc:
        out.append(f"{NC:<11} not comparable with nvidia-smi (reasons in table.txt): " + ", ".join(nc))
    return "\n".join(out)


def verdict(rows):
    """(exit code, summary line): non-zero when any row FAILs."""
    counts = {}
    for r in rows:
        counts[r[3]] = counts.get(r[3], 0) + 1
    summary = ", ".join(f"{counts[k]} {k}" for k in (PASS, FAIL, NC, GAP, UNSUPPORTED, INFO, SKIP) if k in counts)
    return (1 if counts.get(FAIL) else 0), summary


def finite(x):
    return x is not None and not math.isnan(x) and not math.isinf(x)
