//! SDK → OTLP proto, regrouped by entity: ONE `ExportMetricsServiceRequest` per export.
//!
//! Why the SDK path and not proto built straight from the snapshot: the instruments of
//! [`super::instruments`] are the source of truth — the SDK does the aggregation, delta/cumulative
//! temporality, start times, cardinality limits and stale-series removal — and what is sent must be
//! exactly what they observed. An SDK `MeterProvider` has one Resource, and its `ResourceMetrics` cannot
//! be split through public API, so the conversion reads the SDK data through its public getters and
//! writes proto directly (no intermediate single-resource proto): every data point's attributes are
//! partitioned into *resource keys* (entity identity, [`ResourceSplit`]) and
//! the rest; data points with the same identity share one proto `ResourceMetrics`, whose resource is
//! the provider's base resource plus that identity (identity wins on equal keys). With no resource keys
//! (host mode) the result is one ResourceMetrics, as the stock exporter would send.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::{KeyValue, Value};

use crate::export::otel::naming::ResourceSplit;
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
    split: &'a ResourceSplit,
    base: Vec<PKeyValue>,
    schema_url: String,
    /// Identity hash → (identity, output slot); collisions are told apart by comparing identities.
    index: HashMap<u64, Vec<(IdentityKey, usize)>>,
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
            if self.split.is_identity(kv.key.as_str()) {
                identity.push(kv);
            } else {
                rest.push(pkv(kv));
            }
        }
        identity.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        // Look the identity up by hash without allocating (most points hit an existing resource).
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for kv in &identity {
            kv.key.as_str().hash(&mut hasher);
            kv.value.as_str().hash(&mut hasher);
        }
        let hash = hasher.finish();
        if let Some(candidates) = self.index.get(&hash) {
            let same = |key: &IdentityKey| {
                key.len() == identity.len()
                    && key
                        .iter()
                        .zip(&identity)
                        .all(|((k, v), kv)| k == kv.key.as_str() && *v == kv.value.as_str())
            };
            if let Some((_, i)) = candidates.iter().find(|(key, _)| same(key)) {
                return (*i, rest);
            }
        }
        let key: IdentityKey = identity
            .iter()
            .map(|kv| (kv.key.as_str().to_string(), kv.value.as_str().into_owned()))
            .collect();
        let mut attrs: Vec<PKeyValue> = self
            .base
            .iter()
            .filter(|b| !identity.iter().any(|kv| kv.key.as_str() == b.key))
            .cloned()
            .collect();
        attrs.extend(identity.iter().map(|kv| pkv(kv)));
        self.out.push((attrs, Vec::new()));
        self.index
            .entry(hash)
            .or_default()
            .push((key, self.out.len() - 1));
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
pub fn convert(rm: &ResourceMetrics, split: &ResourceSplit) -> Converted {
    let mut b = Builder {
        split,
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

#[cfg(test)]
pub(crate) mod tests {
    //! The whole OTel path on a hand-made snapshot: instruments → SDK collection → conversion.
    use std::sync::{Arc, Mutex};

    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
    use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

    use super::*;
    use crate::config::LabelStyle;
    use crate::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
    use crate::export::otel::sdk::instruments::{register, SnapshotView};
    use crate::export::otel::test_fleet;
    use crate::snapshot::SnapshotStore;

    /// A push exporter that converts each SDK collection and keeps the requests (shared with the
    /// direct pipeline's tests, which compare against it).
    pub(crate) struct Capture {
        pub(crate) view: Arc<SnapshotView>,
        pub(crate) split: ResourceSplit,
        pub(crate) temporality: Temporality,
        pub(crate) out: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
    }

    impl PushMetricExporter for Capture {
        fn export(
            &self,
            rm: &ResourceMetrics,
        ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
            let _ = self.view.unpin();
            self.out
                .lock()
                .unwrap()
                .push(convert(rm, &self.split).request);
            std::future::ready(Ok(()))
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: std::time::Duration) -> OTelSdkResult {
            Ok(())
        }
        fn temporality(&self) -> Temporality {
            self.temporality
        }
    }

    fn run(style: OtelAttributeStyle, per_entity: bool) -> ExportMetricsServiceRequest {
        let counters = test_fleet::counters();
        let store = SnapshotStore::new();
        store.publish(Arc::new(test_fleet::snapshot(counters.clone(), 1, 5000)));
        let naming = Naming::new(style, LabelStyle::default(), &counters);
        let split = naming.resource_split(if per_entity {
            OtelResourceMode::PerEntity
        } else {
            OtelResourceMode::Host
        });
        let view = SnapshotView::new(store, naming);
        let out = Arc::new(Mutex::new(Vec::new()));
        let reader = PeriodicReader::builder(Capture {
            view: view.clone(),
            split,
            temporality: Temporality::Cumulative,
            out: out.clone(),
        })
        .with_interval(std::time::Duration::from_secs(3600))
        .build();
        let provider = SdkMeterProvider::builder()
            .with_resource(
                opentelemetry_sdk::Resource::builder_empty()
                    .with_attribute(KeyValue::new("service.name", "t"))
                    .build(),
            )
            .with_reader(reader)
            .build();
        register(&provider.meter("dcgm-otel"), &counters, &view);
        provider.force_flush().unwrap();
        let req = out.lock().unwrap().pop().unwrap();
        let _ = provider.shutdown();
        req
    }

    fn text(kvs: &[PKeyValue], key: &str) -> Option<String> {
        kvs.iter().find(|kv| kv.key == key).and_then(|kv| {
            match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.clone()),
                _ => None,
            }
        })
    }

    #[test]
    fn one_resource_per_entity_and_pod_links_join_their_gpu() {
        let req = run(OtelAttributeStyle::Otel, true);
        let res: Vec<&Vec<PKeyValue>> = req
            .resource_metrics
            .iter()
            .map(|r| &r.resource.as_ref().unwrap().attributes)
            .collect();
        // GPU-aaa × pods a and b, GPU-aaa without pod (its links), GPU-ccc; GPU-bbb × job-7 has no
        // usable value, so no resource.
        let mut ids: Vec<(Option<String>, Option<String>, Option<String>)> = res
            .iter()
            .map(|a| {
                (
                    text(a, "hw.id"),
                    text(a, "k8s.pod.name"),
                    text(a, "hpc.job.id"),
                )
            })
            .collect();
        ids.sort();
        assert_eq!(
            ids,
            vec![
                (Some("GPU-aaa".into()), None, None),
                (Some("GPU-aaa".into()), Some("a".into()), None),
                (Some("GPU-aaa".into()), Some("b".into()), None),
                (Some("GPU-ccc".into()), None, None),
            ],
            "GPU-bbb has only absent values, so no resource"
        );
        for a in &res {
            assert_eq!(text(a, "service.name").as_deref(), Some("t"));
            assert_eq!(text(a, "nvidia.driver.version").as_deref(), Some("550.1"));
            if text(a, "k8s.pod.name").is_some() {
                assert_eq!(text(a, "k8s.namespace.name").as_deref(), Some("ml"));
                assert_eq!(text(a, "k8s.container.name").as_deref(), Some("main"));
                assert!(text(a, "k8s.pod.uid").unwrap().starts_with("uid-"));
            }
        }
        let link_res = req
            .resource_metrics
            .iter()
            .find(|r| {
                let a = &r.resource.as_ref().unwrap().attributes;
                text(a, "k8s.pod.name").is_none() && text(a, "hw.id").as_deref() == Some("GPU-aaa")
            })
            .unwrap();
        let m = &link_res.scope_metrics[0].metrics;
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].name, "DCGM_FI_DEV_NVLINK_PPRM_OPER_RECOVERY");
        let Some(Data::Gauge(g)) = &m[0].data else {
            panic!()
        };
        let mut links: Vec<String> = g
            .data_points
            .iter()
            .filter_map(|dp| text(&dp.attributes, "nvidia.nvlink.index"))
            .collect();
        links.sort();
        assert_eq!(links, ["0", "1"]);
        // Pod a's resource: SM clock, energy counter and power, no point attributes.
        let pod_a = req
            .resource_metrics
            .iter()
            .find(|r| {
                text(&r.resource.as_ref().unwrap().attributes, "k8s.pod.name").as_deref()
                    == Some("a")
            })
            .unwrap();
        let names: Vec<&str> = pod_a.scope_metrics[0]
            .metrics
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(
            names,
            vec![
                "DCGM_FI_DEV_SM_CLOCK",
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "DCGM_FI_DEV_POWER_USAGE"
            ]
        );
        for m in &pod_a.scope_metrics[0].metrics {
            let dps = match &m.data {
                Some(Data::Gauge(g)) => &g.data_points,
                Some(Data::Sum(s)) => &s.data_points,
                _ => panic!(),
            };
            assert_eq!(dps.len(), 1);
            assert!(dps[0].attributes.is_empty());
        }
    }

    #[test]
    fn host_mode_keeps_identity_on_points_in_dcgm_names() {
        let req = run(OtelAttributeStyle::Dcgm, false);
        assert_eq!(req.resource_metrics.len(), 1);
        let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
        let sm = metrics
            .iter()
            .find(|m| m.name == "DCGM_FI_DEV_SM_CLOCK")
            .unwrap();
        let Some(Data::Gauge(g)) = &sm.data else {
            panic!()
        };
        let shared: Vec<_> = g
            .data_points
            .iter()
            .filter(|dp| text(&dp.attributes, "UUID").as_deref() == Some("GPU-aaa"))
            .collect();
        assert_eq!(shared.len(), 2, "one point per pod");
        for dp in shared {
            assert_eq!(text(&dp.attributes, "UUID").as_deref(), Some("GPU-aaa"));
            assert_eq!(
                text(&dp.attributes, "DCGM_FI_DRIVER_VERSION").as_deref(),
                Some("550.1")
            );
            assert_eq!(text(&dp.attributes, "namespace").as_deref(), Some("ml"));
            assert!(text(&dp.attributes, "pod").is_some());
        }
        let link = metrics
            .iter()
            .find(|m| m.name == "DCGM_FI_DEV_NVLINK_PPRM_OPER_RECOVERY")
            .unwrap();
        let Some(Data::Gauge(g)) = &link.data else {
            panic!()
        };
        assert_eq!(g.data_points.len(), 2);
        assert!(g
            .data_points
            .iter()
            .all(|dp| text(&dp.attributes, "nvlink").is_some()));
    }
}
