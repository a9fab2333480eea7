//! SDK → OTLP proto, regrouped by entity: ONE `ExportMetricsServiceRequest` per export.
//!
//! Why the SDK path and not proto built straight from the snapshot: the instruments of
//! [`super::instruments`] are the source of truth — the SDK does the aggregation, delta/cumulative
//! temporality, start times, cardinality limits and stale-series removal — and what is sent must be
//! exactly what they observed. An SDK `MeterProvider` has one Resource, and its `ResourceMetrics` cannot
//! be split through public API, so the conversion reads the SDK data through its public getters and
//! writes proto directly (no intermediate single-resource proto): every data point's attributes are
//! partitioned into *resource keys* (entity identity, [`super::resource::Naming::resource_keys`]) and
//! the rest; data points with the same identity share one proto `ResourceMetrics`, whose resource is
//! the provider's base resource plus that identity (identity wins on equal keys). With no resource keys
//! (host mode) the result is one ResourceMetrics, as the stock exporter would send.

use std::collections::{HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::{KeyValue, Value};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, InstrumentationScope, KeyValue as PKeyValue,
};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint,
    ResourceMetrics as PResourceMetrics, ScopeMetrics as PScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource as PResource;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::Temporality;

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn any_value(v: &Value) -> AnyValue {
    let value = match v {
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::I64(i) => any_value::Value::IntValue(*i),
        Value::F64(f) => any_value::Value::DoubleValue(*f),
        Value::String(s) => any_value::Value::StringValue(s.as_str().to_string()),
        other => any_value::Value::StringValue(other.to_string()),
    };
    AnyValue { value: Some(value) }
}

fn pkv(kv: &KeyValue) -> PKeyValue {
    PKeyValue {
        key: kv.key.as_str().to_string(),
        value: Some(any_value(&kv.value)),
        key_strindex: 0,
    }
}

/// Per scope: the scope, its schema URL, and its (resource attributes, metrics) groups.
type ScopeGroups = Vec<(
    InstrumentationScope,
    String,
    Vec<(Vec<PKeyValue>, Vec<Metric>)>,
)>;

/// Identity of one output resource: its identity attributes, sorted by key, rendered for hashing.
type IdentityKey = Vec<(String, String)>;

/// Output being assembled: resources in first-seen order, each with its metrics in SDK order.
struct Builder<'a> {
    resource_keys: &'a HashSet<String>,
    base: Vec<PKeyValue>,
    schema_url: String,
    index: HashMap<IdentityKey, usize>,
    out: Vec<(Vec<PKeyValue>, Vec<Metric>)>,
    data_points: usize,
}

struct MetricHead<'a> {
    name: &'a str,
    description: &'a str,
    unit: &'a str,
}

enum Shape {
    Gauge,
    Sum { temporality: i32, monotonic: bool },
}

impl<'a> Builder<'a> {
    /// The output slot of a data point's attributes; returns the slot and the non-identity attributes.
    fn slot(&mut self, attrs: &mut dyn Iterator<Item = &KeyValue>) -> (usize, Vec<PKeyValue>) {
        let mut identity: Vec<&KeyValue> = Vec::new();
        let mut rest: Vec<PKeyValue> = Vec::new();
        for kv in attrs {
            if self.resource_keys.contains(kv.key.as_str()) {
                identity.push(kv);
            } else {
                rest.push(pkv(kv));
            }
        }
        identity.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        let key: IdentityKey = identity
            .iter()
            .map(|kv| (kv.key.as_str().to_string(), kv.value.to_string()))
            .collect();
        if let Some(&i) = self.index.get(&key) {
            return (i, rest);
        }
        let mut attrs: Vec<PKeyValue> = self
            .base
            .iter()
            .filter(|b| !identity.iter().any(|kv| kv.key.as_str() == b.key))
            .cloned()
            .collect();
        attrs.extend(identity.iter().map(|kv| pkv(kv)));
        self.out.push((attrs, Vec::new()));
        self.index.insert(key, self.out.len() - 1);
        (self.out.len() - 1, rest)
    }

    fn push_point(
        &mut self,
        head: &MetricHead<'_>,
        shape: &Shape,
        slot: usize,
        point: NumberDataPoint,
    ) {
        self.data_points += 1;
        let metrics = &mut self.out[slot].1;
        // Metrics of one resource are pushed contiguously per SDK metric, so the last one is ours
        // when it has our name.
        if let Some(m) = metrics.last_mut().filter(|m| m.name == head.name) {
            match &mut m.data {
                Some(Data::Gauge(g)) => g.data_points.push(point),
                Some(Data::Sum(s)) => s.data_points.push(point),
                _ => {}
            }
            return;
        }
        let data = match shape {
            Shape::Gauge => Data::Gauge(Gauge {
                data_points: vec![point],
            }),
            Shape::Sum {
                temporality,
                monotonic,
            } => Data::Sum(Sum {
                data_points: vec![point],
                aggregation_temporality: *temporality,
                is_monotonic: *monotonic,
            }),
        };
        metrics.push(Metric {
            name: head.name.to_string(),
            description: head.description.to_string(),
            unit: head.unit.to_string(),
            metadata: Vec::new(),
            data: Some(data),
        });
    }

    fn add<T>(&mut self, head: &MetricHead<'_>, data: &MetricData<T>)
    where
        T: Copy + Into<number_data_point::Value>,
    {
        match data {
            MetricData::Gauge(g) => {
                let start = g.start_time().map(nanos).unwrap_or(0);
                let time = nanos(g.time());
                for dp in g.data_points() {
                    let (slot, attributes) = self.slot(&mut dp.attributes());
                    let point = NumberDataPoint {
                        attributes,
                        start_time_unix_nano: start,
                        time_unix_nano: time,
                        exemplars: Vec::new(),
                        flags: 0,
                        value: Some(dp.value().into()),
                    };
                    self.push_point(head, &Shape::Gauge, slot, point);
                }
            }
            MetricData::Sum(s) => {
                let start = nanos(s.start_time());
                let time = nanos(s.time());
                let shape = Shape::Sum {
                    temporality: match s.temporality() {
                        Temporality::Delta => AggregationTemporality::Delta as i32,
                        _ => AggregationTemporality::Cumulative as i32,
                    },
                    monotonic: s.is_monotonic(),
                };
                for dp in s.data_points() {
                    let (slot, attributes) = self.slot(&mut dp.attributes());
                    let point = NumberDataPoint {
                        attributes,
                        start_time_unix_nano: start,
                        time_unix_nano: time,
                        exemplars: Vec::new(),
                        flags: 0,
                        value: Some(dp.value().into()),
                    };
                    self.push_point(head, &shape, slot, point);
                }
            }
            // The instruments are observable gauges and counters only.
            MetricData::Histogram(_) | MetricData::ExponentialHistogram(_) => {}
        }
    }
}

/// The result of one conversion.
pub struct Converted {
    pub request: ExportMetricsServiceRequest,
    pub data_points: usize,
}

/// Convert one SDK collection into one request, one ResourceMetrics per distinct identity.
pub fn convert(rm: &ResourceMetrics, resource_keys: &HashSet<String>) -> Converted {
    let mut b = Builder {
        resource_keys,
        base: rm
            .resource()
            .iter()
            .map(|(k, v)| pkv(&KeyValue::new(k.clone(), v.clone())))
            .collect(),
        schema_url: rm.resource().schema_url().unwrap_or_default().to_string(),
        index: HashMap::new(),
        out: Vec::new(),
        data_points: 0,
    };
    // One scope (the dcgm-otel meter) in practice; scopes are kept apart all the same.
    let mut scopes: ScopeGroups = Vec::new();
    for sm in rm.scope_metrics() {
        b.index.clear();
        b.out.clear();
        for m in sm.metrics() {
            let head = MetricHead {
                name: m.name(),
                description: m.description(),
                unit: m.unit(),
            };
            match m.data() {
                AggregatedMetrics::F64(d) => b.add(&head, d),
                AggregatedMetrics::U64(d) => b.add(&head, d),
                AggregatedMetrics::I64(d) => b.add(&head, d),
            }
        }
        let scope = InstrumentationScope {
            name: sm.scope().name().to_string(),
            version: sm.scope().version().unwrap_or_default().to_string(),
            attributes: sm.scope().attributes().map(pkv).collect(),
            dropped_attributes_count: 0,
        };
        scopes.push((
            scope,
            sm.scope().schema_url().unwrap_or_default().to_string(),
            std::mem::take(&mut b.out),
        ));
    }
    // Merge scopes per resource (identity attributes compared as rendered).
    let mut resources: Vec<PResourceMetrics> = Vec::new();
    let mut by_attrs: HashMap<Vec<(String, String)>, usize> = HashMap::new();
    for (scope, schema_url, groups) in scopes {
        for (attrs, metrics) in groups {
            let key: Vec<(String, String)> = attrs
                .iter()
                .map(|kv| (kv.key.clone(), format!("{:?}", kv.value)))
                .collect();
            let i = *by_attrs.entry(key).or_insert_with(|| {
                resources.push(PResourceMetrics {
                    resource: Some(PResource {
                        attributes: attrs,
                        dropped_attributes_count: 0,
                        entity_refs: Vec::new(),
                    }),
                    scope_metrics: Vec::new(),
                    schema_url: b.schema_url.clone(),
                });
                resources.len() - 1
            });
            resources[i].scope_metrics.push(PScopeMetrics {
                scope: Some(scope.clone()),
                metrics,
                schema_url: schema_url.clone(),
            });
        }
    }
    Converted {
        request: ExportMetricsServiceRequest {
            resource_metrics: resources,
        },
        data_points: b.data_points,
    }
}
