"""What the real awsemf exporter published, read back from the fake CloudWatch Logs API, and the checks on it.

An EMF log event is a JSON object: `_aws.CloudWatchMetrics` lists directives (namespace, dimension sets,
metric names and units), the other keys are the point's labels (strings) and the metric values (numbers).
CloudWatch makes one sample per (metric, dimension set) of a directive, in the series named by the values of
that set's labels. Nothing here decides what awsemf would do: it reads what awsemf did.
"""
import json
import re

from collector_run import read_json_lines

# The units CloudWatch accepts (MetricDatum.Unit).
CLOUDWATCH_UNITS = {
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes", "Terabytes",
    "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count", "Bytes/Second",
    "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second", "Terabytes/Second", "Bits/Second",
    "Kilobits/Second", "Megabits/Second", "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
}
# The UCUM units dcgm-otel sends and the CloudWatch units that say the same (a descriptor may only rename).
UCUM_TO_CLOUDWATCH = {
    "%": {"Percent"}, "MiB": {"Megabytes"}, "By": {"Bytes"}, "By/s": {"Bytes/Second"},
    "kBy/s": {"Kilobytes/Second"}, "MBy/s": {"Megabytes/Second"}, "s": {"Seconds"}, "ms": {"Milliseconds"},
    "us": {"Microseconds"}, "1": {"None"}, "MHz": {"None"}, "Cel": {"None"}, "W": {"None"}, "mJ": {"None"},
    "J": {"None"}, "{error}": {"Count"}, "": {"None", "Count"},
}


class Sample:
    """One CloudWatch sample: metric, dimension set (sorted names), their values, timestamp, the event's
    labels, value, unit."""
    __slots__ = ("metric", "dims", "values", "ts", "labels", "value", "unit")

    def __init__(self, metric, dims, values, ts, labels, value, unit):
        self.metric, self.dims, self.values, self.ts = metric, dims, values, ts
        self.labels, self.value, self.unit = labels, value, unit


def emf_events(recorded):
    """The EMF documents of every accepted PutLogEvents call, and the operations called (in order)."""
    docs, operations = [], []
    for rec in read_json_lines(recorded):
        operations.append((rec["target"].split(".")[-1], rec["status"]))
        if rec["target"].endswith(".PutLogEvents") and rec["status"] == 200:
            for ev in rec["body"].get("logEvents") or []:
                docs.append(json.loads(ev["message"]))
    return docs, operations


def samples(docs, namespace):
    """Every sample the documents make in `namespace`; a dimension name the event lacks is an error."""
    out, errors = [], []
    for doc in docs:
        aws = doc.get("_aws") or {}
        labels = {k: v for k, v in doc.items() if isinstance(v, str) and k != "Version"}
        for directive in aws.get("CloudWatchMetrics") or []:
            if directive.get("Namespace") != namespace:
                errors.append(f"namespace {directive.get('Namespace')!r}, expected {namespace!r}")
            for dims in directive.get("Dimensions") or []:
                missing = [d for d in dims if d not in labels]
                if missing:
                    errors.append(f"dimension set {dims} names {missing}, which the event has no value for")
                    continue
                for m in directive.get("Metrics") or []:
                    name = m.get("Name")
                    if name not in doc:
                        errors.append(f"metric {name} declared in a directive but absent from the event")
                        continue
                    out.append(Sample(name, tuple(sorted(dims)), tuple(labels[d] for d in sorted(dims)),
                                      aws.get("Timestamp"), labels, doc[name], m.get("Unit")))
    return out, errors


def check_declarations(emf_cfg, published, sent_names, expect_absent=()):
    """Each metric_declarations entry yields each of its selected metrics (of those the collector received)
    with each of its dimension sets, except dimension sets listed in expect_absent (attribute names the run
    cannot have); label_matchers hold on what was published."""
    errors = []
    by_metric = {}
    for s in published:
        by_metric.setdefault(s.metric, {}).setdefault(s.dims, []).append(s)
    for i, decl in enumerate(emf_cfg.get("metric_declarations") or []):
        selectors = [re.compile(sel) for sel in decl.get("metric_name_selectors") or []]
        names = sorted(n for n in sent_names if any(rx.search(n) for rx in selectors))
        for rx in selectors:
            if not any(rx.search(n) for n in sent_names):
                errors.append(f"metric_declarations[{i}]: selector {rx.pattern!r} matches no metric the collector "
                              f"received")
        for name in names:
            for dims in decl.get("dimensions") or []:
                if any(d in expect_absent for d in dims):
                    continue
                got = by_metric.get(name, {}).get(tuple(sorted(dims)))
                if not got:
                    errors.append(f"metric_declarations[{i}]: {name} has no CloudWatch series with dimensions {dims}")
                    continue
                for lm in decl.get("label_matchers") or []:
                    rx = re.compile(lm["regex"])
                    sep = lm.get("separator") or ";"
                    bad = [s for s in got if not rx.search(sep.join(s.labels.get(k, "") for k in lm["label_names"]))]
                    # another declaration may publish the same set for the same metric without the matcher
                    others = [j for j, d in enumerate(emf_cfg["metric_declarations"]) if j != i
                              and any(re.search(sel, name) for sel in d.get("metric_name_selectors") or [])
                              and any(sorted(x) == sorted(dims) for x in d.get("dimensions") or [])]
                    if bad and not others:
                        errors.append(f"metric_declarations[{i}]: {name} {dims} published for labels the "
                                      f"label_matchers {lm} exclude, e.g. {bad[0].labels}")
    return errors


def check_units(emf_cfg, published, sent_units):
    """Every published unit is a CloudWatch unit, the one its metric_descriptor names, and says what the unit
    dcgm-otel sent says (a descriptor can rename a unit, not change its meaning)."""
    errors = []
    descriptors = {d["metric_name"]: d["unit"] for d in emf_cfg.get("metric_descriptors") or []}
    seen = {}
    for s in published:
        seen.setdefault(s.metric, set()).add(s.unit)
    for name, units in sorted(seen.items()):
        for unit in sorted(u or "" for u in units):
            if unit not in CLOUDWATCH_UNITS:
                errors.append(f"{name}: published with unit {unit!r}, which CloudWatch does not accept")
        if name in descriptors and units != {descriptors[name]}:
            errors.append(f"{name}: published with units {sorted(units)}, its metric_descriptor says {descriptors[name]!r}")
        sent = sent_units.get(name)
        if sent is not None:
            want = UCUM_TO_CLOUDWATCH.get(sent)
            if want is None:
                errors.append(f"{name}: dcgm-otel sends unit {sent!r}, which UCUM_TO_CLOUDWATCH does not know")
            elif not units <= want:
                errors.append(f"{name}: dcgm-otel sends {sent!r}, published as {sorted(units)}: expected one of {sorted(want)}")
    return errors


def check_each_measurement_once(emf_cfg, published, identity):
    """Within a declaration's first dimension set each (series, timestamp) has one sample; within every set no
    measurement contributes twice. identity(metric, labels) names the measurement a sample carries (the
    device or the holder it was read for, without the labels that only repeat it)."""
    errors = []
    first_sets = set()
    for decl in emf_cfg.get("metric_declarations") or []:
        dims = decl.get("dimensions") or []
        if dims:
            for name_rx in decl.get("metric_name_selectors") or []:
                first_sets.add((name_rx, tuple(sorted(dims[0]))))
    groups = {}
    for s in published:
        groups.setdefault((s.metric, s.dims, s.values, s.ts), []).append(s)
    for (metric, dims, values, ts), members in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        where = f"{metric} {list(dims)}={list(values)} at {ts}"
        first = any(d == dims and re.search(rx, metric) for rx, d in first_sets)
        if first and len(members) > 1:
            errors.append(f"{where}: {len(members)} samples in a series meant to be one measurement: "
                          f"{members[0].labels} and {members[1].labels}")
            continue
        ids = [identity(metric, s.labels) for s in members]
        if len(set(ids)) < len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            errors.append(f"{where}: the measurement {dict(dup)} counts {ids.count(dup)} times")
    return errors
