//! The holders' Resources of one OTLP request: what a pod (or an HPC job) holding a device measured
//! of it — its cost counters, its processes — as opposed to what the device measured of itself.
//!
//! Under the entity model a device's own readings leave once, on the device's Resource; a device held
//! by several pods has no pod attributes there, so each pod's share travels on a Resource of the pod:
//! the host attributes and the holder's attribution attributes (`k8s.pod.uid`, `k8s.pod.name`,
//! `k8s.namespace.name`, `k8s.container.name`, ...), with the device's identity (`hw.id`, ...) on the
//! data points. Processes that belong to no pod go on the host's own Resource the same way. In host
//! resource mode there is one Resource, and the holder attributes go onto the points too.

use std::collections::HashMap;

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue as PKeyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, Gauge, Metric, NumberDataPoint, Sum};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::{temporality, Kind};
use crate::export::otel::otlp::proto::entity_resource;

/// What a holder metric is, besides its points.
pub(crate) struct HolderMetric<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub unit: &'a str,
    pub kind: Kind,
    pub delta: bool,
}

/// The holders' Resources and their metrics, in first-seen order.
pub(crate) struct Holders {
    base: Vec<PKeyValue>,
    host_mode: bool,
    index: HashMap<Vec<(String, String)>, usize>,
    list: Vec<(Resource, Vec<Metric>)>,
}

impl Holders {
    pub fn new(base: Vec<PKeyValue>, host_mode: bool) -> Holders {
        Holders {
            base,
            host_mode,
            index: HashMap::new(),
            list: Vec::new(),
        }
    }

    /// Host resource mode: one Resource, holder attributes on the points.
    pub fn host_mode(&self) -> bool {
        self.host_mode
    }

    /// Add a point of `metric` to the Resource of `holder` (its attribution attributes, sorted).
    pub fn push(&mut self, holder: &[KeyValue], metric: HolderMetric<'_>, point: NumberDataPoint) {
        let key: Vec<(String, String)> = if self.host_mode {
            Vec::new()
        } else {
            holder
                .iter()
                .map(|kv| (kv.key.as_str().to_string(), kv.value.as_str().into_owned()))
                .collect()
        };
        let slot = match self.index.get(&key) {
            Some(&slot) => slot,
            None => {
                let identity: Vec<&KeyValue> = if self.host_mode {
                    Vec::new()
                } else {
                    holder.iter().collect()
                };
                self.list
                    .push((entity_resource(&self.base, &identity), Vec::new()));
                self.index.insert(key, self.list.len() - 1);
                self.list.len() - 1
            }
        };
        let Some((_, metrics)) = self.list.get_mut(slot) else {
            return;
        };
        if !metrics.iter().any(|m| m.name == metric.name) {
            let data = if metric.kind == Kind::Gauge {
                Data::Gauge(Gauge {
                    data_points: Vec::new(),
                })
            } else {
                Data::Sum(Sum {
                    data_points: Vec::new(),
                    aggregation_temporality: temporality(metric.delta),
                    is_monotonic: true,
                })
            };
            metrics.push(Metric {
                name: metric.name.to_string(),
                description: metric.description.to_string(),
                unit: metric.unit.to_string(),
                metadata: Vec::new(),
                data: Some(data),
            });
        }
        let Some(m) = metrics.iter_mut().find(|m| m.name == metric.name) else {
            return;
        };
        match &mut m.data {
            Some(Data::Gauge(g)) => g.data_points.push(point),
            Some(Data::Sum(s)) => s.data_points.push(point),
            _ => {}
        }
    }

    /// The Resources and their metrics (emptied).
    pub fn take(&mut self) -> Vec<(Resource, Vec<Metric>)> {
        self.index.clear();
        std::mem::take(&mut self.list)
    }
}
