//! Per-process data points in the direct OTLP request (`--collect-processes`): the same five gauges as
//! on :9400 (`dcgm_otel_process_gpu_memory_bytes` in `By`, the `*_utilization_percent` ones in `%`).
//!
//! Each process's device identity and pod go where an entity's do: in per-entity mode into the
//! Resource (one per device, and per pod on a shared device, as the device's own series), in host
//! mode onto the points. The points carry `process.pid` (int) and `process.executable.name` (semantic
//! conventions; `pid` and `process_name` with `--otel-attribute-style dcgm`); the `other` fold has no
//! pid and the name `other`. Only the direct pipeline (the default) sends them.

use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue as PKeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::proto::pkv;
use crate::export::otel::naming::{Naming, OtelAttributeStyle, ResourceSplit};
use crate::export::process_series::FAMILIES;
use crate::snapshot::{EntityReading, Snapshot};

/// What the points need from the request builder.
pub struct Context<'a> {
    pub naming: &'a Naming,
    pub split: &'a ResourceSplit,
    pub base: &'a [PKeyValue],
    pub scope: &'a InstrumentationScope,
    pub time: u64,
    pub start: u64,
}

/// One resource's attributes and its members: (process index, point attributes).
type Group = (Vec<PKeyValue>, Vec<(usize, Vec<PKeyValue>)>);

/// Hand one `ResourceMetrics` per resource with process points to `sink`; returns the data points.
pub fn emit(ctx: &Context, snap: &Snapshot, sink: &mut impl FnMut(ResourceMetrics)) -> usize {
    if snap.processes.is_empty() {
        return 0;
    }
    let (pid_key, name_key) = match ctx.naming.style() {
        OtelAttributeStyle::Otel => ("process.pid", "process.executable.name"),
        OtelAttributeStyle::Dcgm => ("pid", "process_name"),
    };
    // resource identity → (resource attributes, [(process index, point attributes)])
    let mut order: Vec<Vec<(String, String)>> = Vec::new();
    let mut groups: HashMap<Vec<(String, String)>, Group> = HashMap::new();
    for (i, p) in snap.processes.iter().enumerate() {
        let probe = EntityReading {
            entity: p.entity.clone(),
            values: Vec::new(),
            attribution: p.attribution.clone(),
        };
        let set = ctx
            .naming
            .entity_attribute_sets(&probe, Vec::new())
            .into_iter()
            .next()
            .unwrap_or_default();
        let (identity, rest): (Vec<KeyValue>, Vec<KeyValue>) = set
            .into_iter()
            .partition(|kv| ctx.split.is_identity(kv.key.as_str()));
        let key: Vec<(String, String)> = identity
            .iter()
            .map(|kv| (kv.key.as_str().to_string(), kv.value.as_str().into_owned()))
            .collect();
        let mut point: Vec<KeyValue> = rest;
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
        point.sort_by(|a, b| a.key.cmp(&b.key));
        let point: Vec<PKeyValue> = point.iter().map(pkv).collect();
        let entry = groups.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            let mut attributes: Vec<PKeyValue> = ctx
                .base
                .iter()
                .filter(|b| !identity.iter().any(|kv| kv.key.as_str() == b.key))
                .cloned()
                .collect();
            attributes.extend(identity.iter().map(pkv));
            (attributes, Vec::new())
        });
        entry.1.push((i, point));
    }
    let mut data_points = 0;
    for key in order {
        let Some((attributes, members)) = groups.remove(&key) else {
            continue;
        };
        let mut metrics = Vec::new();
        for (name, help, value) in FAMILIES {
            let points: Vec<NumberDataPoint> = members
                .iter()
                .filter_map(|(i, attrs)| {
                    let v = snap.processes.get(*i).and_then(value)?;
                    v.is_finite().then(|| NumberDataPoint {
                        attributes: attrs.clone(),
                        start_time_unix_nano: ctx.start,
                        time_unix_nano: ctx.time,
                        exemplars: Vec::new(),
                        flags: 0,
                        value: Some(number_data_point::Value::AsDouble(v)),
                    })
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            data_points += points.len();
            metrics.push(Metric {
                name: name.to_string(),
                description: help.to_string(),
                unit: if name.ends_with("_bytes") { "By" } else { "%" }.to_string(),
                metadata: Vec::new(),
                data: Some(Data::Gauge(Gauge {
                    data_points: points,
                })),
            });
        }
        if metrics.is_empty() {
            continue;
        }
        sink(ResourceMetrics {
            resource: Some(Resource {
                attributes,
                dropped_attributes_count: 0,
                entity_refs: Vec::new(),
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(ctx.scope.clone()),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    data_points
}
