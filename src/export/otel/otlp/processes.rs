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

use super::request::pkv;
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
    let mut groups: HashMap<Vec<(String, String)>, (Vec<PKeyValue>, Vec<(usize, Vec<PKeyValue>)>)> =
        HashMap::new();
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

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_sdk::metrics::Temporality;

    use super::super::request::DirectBuilder;
    use super::*;
    use crate::config::LabelStyle;
    use crate::export::otel::naming::OtelResourceMode;
    use crate::export::otel::test_fleet::{counters, pods, snapshot};
    use crate::snapshot::attribution::Attribution;
    use crate::snapshot::ProcessReading;

    fn text(kv: &PKeyValue) -> String {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            Some(any_value::Value::IntValue(i)) => i.to_string(),
            other => format!("{other:?}"),
        }
    }

    fn attrs(list: &[PKeyValue]) -> Vec<(String, String)> {
        list.iter().map(|kv| (kv.key.clone(), text(kv))).collect()
    }

    #[test]
    fn process_points_carry_pid_and_name_under_their_device_and_pod_resource() {
        let counters = counters();
        let mut snap = snapshot(counters.clone(), 1, 1000);
        let gpu0 = snap.entities[0].entity.clone();
        let mut a = ProcessReading::new(gpu0.clone(), 4242, "python3");
        a.memory_bytes = Some(1 << 30);
        a.sm_util = Some(55.0);
        let mut only_pod = pods(&["a"]);
        only_pod.remove(&crate::snapshot::attribution::CONTAINER);
        a.attribution = Arc::new(only_pod);
        let mut host = ProcessReading::new(gpu0, 5120, "nvidia-smi");
        host.memory_bytes = Some(64 << 20);
        host.attribution = Arc::new(Attribution::default());
        snap.processes = vec![a, host];
        for (style, pid_key, name_key) in [
            (
                OtelAttributeStyle::Otel,
                "process.pid",
                "process.executable.name",
            ),
            (OtelAttributeStyle::Dcgm, "pid", "process_name"),
        ] {
            let naming = Naming::new(style, LabelStyle::default(), &counters);
            let split = naming.resource_split(OtelResourceMode::PerEntity);
            let mut b = DirectBuilder::new(
                naming,
                split,
                &[KeyValue::new("service.name", "t")],
                counters.clone(),
                Temporality::Cumulative,
                SystemTime::now(),
            );
            let req = b.build(&snap).request;
            let with = |name: &str| -> Vec<(Vec<(String, String)>, Vec<(String, String)>, f64)> {
                req.resource_metrics
                    .iter()
                    .flat_map(|rm| {
                        let res = attrs(&rm.resource.as_ref().unwrap().attributes);
                        rm.scope_metrics
                            .iter()
                            .flat_map(|s| &s.metrics)
                            .filter(|m| m.name == name)
                            .flat_map(move |m| match &m.data {
                                Some(Data::Gauge(g)) => g
                                    .data_points
                                    .iter()
                                    .map(|p| {
                                        let v = match p.value {
                                            Some(number_data_point::Value::AsDouble(d)) => d,
                                            _ => f64::NAN,
                                        };
                                        (res.clone(), attrs(&p.attributes), v)
                                    })
                                    .collect::<Vec<_>>(),
                                _ => Vec::new(),
                            })
                    })
                    .collect()
            };
            let mem = with("dcgm_otel_process_gpu_memory_bytes");
            assert_eq!(mem.len(), 2, "{style:?}");
            // The pod's process: its pod in the resource (as a pod's GPU series), pid and name on the point.
            let (res, point, v) = &mem[0];
            assert_eq!(*v, (1u64 << 30) as f64);
            let mut expected = vec![
                (pid_key.to_string(), "4242".to_string()),
                (name_key.to_string(), "python3".to_string()),
            ];
            expected.sort();
            assert_eq!(point, &expected);
            let pod_key = if style == OtelAttributeStyle::Otel {
                "k8s.pod.name"
            } else {
                "pod"
            };
            assert!(
                res.contains(&(pod_key.to_string(), "a".to_string())),
                "{res:?}"
            );
            // The host process: the device's resource without a pod.
            assert!(!mem[1].0.iter().any(|(k, _)| k == pod_key));
            assert!(mem[1]
                .1
                .contains(&(pid_key.to_string(), "5120".to_string())));
            // No SM sample for the host process: one SM point.
            assert_eq!(with("dcgm_otel_process_sm_utilization_percent").len(), 1);
        }
    }
}
