//! The holders' Resources of one OTLP request: what a pod (or an HPC job) holding a device measured
//! of it — its cost counters, its processes — as opposed to what the device measured of itself.
//!
//! Under the entity model a device's own readings leave once, on the device's Resource; a device held
//! by several pods has no pod attributes there, so each pod's share travels on a Resource of the pod:
//! the host attributes and the holder's attribution attributes (`k8s.pod.uid`, `k8s.pod.name`,
//! `k8s.namespace.name`, `k8s.container.name`, ...), with the device's identity (`hw.id`, ...) on the
//! data points. Processes that belong to no pod go on the host's own Resource the same way. In host
//! resource mode there is one Resource, and the holder attributes go onto the points too.
//!
//! One holder, one Resource: a pod is told apart by its namespace and name (a job by its id), as the
//! per-pod split keys it ([`crate::snapshot::pod_split::PodKey`]), whichever family names it — the
//! cost counters' sets carry the container and the device replica, a process's set only the pod.
//! The Resource carries what describes the pod whole (its uid and labels, from whichever set names
//! them); what differs within it (`k8s.container.name`, `nvidia.gpu.replica`, DRA claims) goes on the
//! points ([`Naming::holder_attributes`](crate::export::otel::naming::Naming::holder_attributes)).

use std::collections::HashMap;

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue as PKeyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, Gauge, Metric, NumberDataPoint, Sum};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::{temporality, Kind};
use crate::export::otel::naming::HolderAttributes;
use crate::export::otel::otlp::proto::entity_resource;

/// What a holder metric is, besides its points.
pub(crate) struct HolderMetric<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub unit: &'a str,
    pub kind: Kind,
    pub delta: bool,
}

/// One holder's Resource attributes (gathered from every set that names it) and metrics.
struct Holder {
    attributes: Vec<KeyValue>,
    metrics: Vec<Metric>,
}

/// The holders' Resources and their metrics, in first-seen order.
pub(crate) struct Holders {
    base: Vec<PKeyValue>,
    host_mode: bool,
    index: HashMap<Vec<(String, String)>, usize>,
    list: Vec<Holder>,
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

    /// Add a point of `metric` to the Resource of `holder` (its identity keys the Resource; in host
    /// mode there is one).
    pub fn push(
        &mut self,
        holder: &HolderAttributes,
        metric: HolderMetric<'_>,
        point: NumberDataPoint,
    ) {
        let key = if self.host_mode {
            Vec::new()
        } else {
            holder.identity.clone()
        };
        let slot = match self.index.get(&key) {
            Some(&slot) => slot,
            None => {
                self.list.push(Holder {
                    attributes: Vec::new(),
                    metrics: Vec::new(),
                });
                self.index.insert(key, self.list.len() - 1);
                self.list.len() - 1
            }
        };
        let Some(h) = self.list.get_mut(slot) else {
            return;
        };
        if !self.host_mode {
            for kv in &holder.resource {
                if !h.attributes.iter().any(|a| a.key == kv.key) {
                    h.attributes.push(kv.clone());
                }
            }
        }
        let metrics = &mut h.metrics;
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
        let base = &self.base;
        std::mem::take(&mut self.list)
            .into_iter()
            .map(|mut h| {
                h.attributes.sort_by(|a, b| a.key.cmp(&b.key));
                let identity: Vec<&KeyValue> = h.attributes.iter().collect();
                (entity_resource(base, &identity), h.metrics)
            })
            .collect()
    }
}
