//! Per-process data points in the direct OTLP request (`--collect-processes`): the five per-process
//! values of :9400, under OTel names (`nvidia.process.gpu.memory.usage` in `By`, the utilizations as
//! ratios in `1`; :9400's `dcgm_otel_process_*` names are listed beside them in the README).
//!
//! A process is its holder's: it goes on the Resource of its pod (the pod's attribution attributes;
//! [`super::holders`]), or on the host's Resource when it belongs to no pod, never on the
//! device's Resource — the device's own readings are there, once. Its points carry the device's
//! identity (`hw.id`, `nvidia.gpu.index`, the MIG profile, ...), `process.pid` (int) and
//! `process.executable.name` (`pid`, `process_name` and dcgm-exporter's label names with
//! `--otel-attribute-style dcgm`); the `other` fold has no pid and the name `other`. In host resource
//! mode the pod's attributes join the points. Only the direct pipeline (the default) sends them.

use std::sync::Arc;

use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::KeyValue as PKeyValue;
use opentelemetry_proto::tonic::metrics::v1::{number_data_point, NumberDataPoint};

use super::holders::{HolderMetric, Holders};
use crate::export::otel::naming::{HolderAttributes, Naming, OtelAttributeStyle};
use crate::export::otel::otlp::proto::pkv;
use crate::export::process_series::{FAMILIES, SPLIT_FAMILIES};
use crate::snapshot::{pod_split, Snapshot};

/// What the points need from the request builder.
pub struct Context<'a> {
    pub naming: &'a Naming,
    pub time: u64,
    pub start: u64,
}

/// The OTLP name, unit and divisor of each of [`FAMILIES`] (index-aligned): percentages become
/// ratios, as the semantic conventions write utilization.
pub const OTEL_FAMILIES: &[(&str, &str, f64)] = &[
    ("nvidia.process.gpu.memory.usage", "By", 1.0),
    ("nvidia.process.gpu.sm.utilization", "1", 100.0),
    (
        "nvidia.process.gpu.memory_controller.utilization",
        "1",
        100.0,
    ),
    ("nvidia.process.gpu.encoder.utilization", "1", 100.0),
    ("nvidia.process.gpu.decoder.utilization", "1", 100.0),
];

/// The OTLP name, unit and divisor of each of the :9400 per-pod split families (index-aligned with
/// [`SPLIT_FAMILIES`]).
pub const OTEL_SPLIT_FAMILIES: &[(&str, &str, f64)] = &[
    ("nvidia.pod.gpu.utilization", "1", 100.0),
    ("nvidia.pod.gpu.memory.usage", "By", 1.0),
    ("nvidia.pod.gpu.power", "W", 1.0),
];

/// Add every process's points, and each pod's split of a device it runs on, to its holder's
/// Resource in `holders`.
pub(crate) fn emit(ctx: &Context, snap: &Snapshot, holders: &mut Holders) {
    if snap.processes.is_empty() {
        return;
    }
    let (pid_key, name_key) = match ctx.naming.style() {
        OtelAttributeStyle::Otel => ("process.pid", "process.executable.name"),
        OtelAttributeStyle::Dcgm => ("pid", "process_name"),
    };
    for p in &snap.processes {
        let holder = p
            .attribution
            .sets()
            .next()
            .map(|set| ctx.naming.holder_attributes(set))
            .unwrap_or_default();
        let mut point = ctx.naming.device_attributes(&p.entity);
        if let Some(pid) = p.pid {
            point.push(KeyValue::new(
                Key::from_static_str(pid_key),
                Value::I64(i64::from(pid)),
            ));
        }
        point.push(KeyValue::new(
            Key::from_static_str(name_key),
            Value::String(Arc::<str>::clone(&p.name).into()),
        ));
        let values =
            FAMILIES
                .iter()
                .zip(OTEL_FAMILIES)
                .map(|((_, help, value), (name, unit, divisor))| {
                    (*name, *help, *unit, value(p).map(|v| v / divisor))
                });
        push_gauges(ctx, holders, &holder, point, values);
    }
    // Each pod's part of a device it runs processes on, on the Resource of its processes.
    for (device, shares) in pod_split::snapshot_shares(snap) {
        for share in shares {
            let Some(holder_set) = snap
                .processes
                .iter()
                .filter(|p| *p.entity == *device)
                .filter_map(|p| p.attribution.sets().next())
                .find(|set| {
                    let get = |k: &str| {
                        set.iter()
                            .find(|a| a.key.prometheus == k)
                            .map(|a| &*a.value)
                    };
                    get("namespace") == Some(share.pod.namespace.as_str())
                        && get("pod") == Some(share.pod.pod.as_str())
                })
            else {
                continue;
            };
            let holder = ctx.naming.holder_attributes(holder_set);
            let point = ctx.naming.device_attributes(&device);
            let values = SPLIT_FAMILIES.iter().zip(OTEL_SPLIT_FAMILIES).map(
                |((_, help, value), (name, unit, divisor))| {
                    (*name, *help, *unit, value(&share).map(|v| v / divisor))
                },
            );
            push_gauges(ctx, holders, &holder, point, values);
        }
    }
}

/// One gauge point per (name, help, unit, value) with a finite value, on `holder`'s Resource: `point`
/// (the device's identity, a process's pid and name) plus what differs within the holder and, in host
/// mode, the holder's own attributes.
fn push_gauges<'a>(
    ctx: &Context,
    holders: &mut Holders,
    holder: &HolderAttributes,
    mut point: Vec<KeyValue>,
    values: impl Iterator<Item = (&'a str, &'a str, &'a str, Option<f64>)>,
) {
    point.extend(holder.within.iter().cloned());
    if holders.host_mode() {
        point.extend(holder.resource.iter().cloned());
    }
    point.sort_by(|a, b| a.key.cmp(&b.key));
    let attributes: Vec<PKeyValue> = point.iter().map(pkv).collect();
    for (name, description, unit, v) in values {
        let Some(v) = v.filter(|v| v.is_finite()) else {
            continue;
        };
        holders.push(
            holder,
            HolderMetric {
                name,
                description,
                unit,
                kind: super::Kind::Gauge,
                delta: false,
            },
            gauge_point(ctx, attributes.clone(), v),
        );
    }
}

fn gauge_point(ctx: &Context, attributes: Vec<PKeyValue>, v: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: ctx.start,
        time_unix_nano: ctx.time,
        exemplars: Vec::new(),
        flags: 0,
        value: Some(number_data_point::Value::AsDouble(v)),
    }
}
