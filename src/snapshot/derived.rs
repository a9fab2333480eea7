//! Derived series: metric families a collector-side stage computes from the enriched readings, which
//! are not DCGM fields (the per-pod GPU cost counters of `enrich::kubernetes::cost`).
//!
//! A [`DerivedFamily`] has its own name, help, UCUM unit and kind; each [`DerivedSample`] names the
//! entity it describes (its identity labels / resource attributes come from the entity, as for a DCGM
//! series) and its own attribution attributes (the pod). The entity may no longer be in the snapshot's
//! readings (a departed pod's series are kept for a while), so a sample carries the whole entity.
//! Exporters write derived families after the DCGM families: the Prometheus renderer as one family
//! each, the OTLP builder as one metric each on the resource of the sample's entity and attributes.

use std::sync::Arc;

use super::attribution::Attribute;
use super::entity::Entity;

/// What kind of metric a derived family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DerivedKind {
    /// A monotonic total (Prometheus `counter`, OTLP monotonic cumulative Sum of doubles).
    Counter,
    /// A value that can go up and down (Prometheus `gauge`, OTLP Gauge).
    Gauge,
}

impl DerivedKind {
    /// The Prometheus `# TYPE` word.
    pub fn as_str(self) -> &'static str {
        match self {
            DerivedKind::Counter => "counter",
            DerivedKind::Gauge => "gauge",
        }
    }
}

/// Name, help, unit and kind of a derived family (static: known when the stage is built).
#[derive(Debug, PartialEq, Eq)]
pub struct DerivedInfo {
    /// The metric name, on :9400 and OTLP alike (`dcgm_otel_pod_gpu_seconds_total`).
    pub name: &'static str,
    pub help: &'static str,
    /// UCUM unit for OTLP (`s`, `J`).
    pub unit: &'static str,
    pub kind: DerivedKind,
}

/// One series of a derived family.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedSample {
    /// The entity the series describes (identity labels, resource).
    pub entity: Arc<Entity>,
    /// Attribution of the series (a pod), in the order the exporters sort anyway.
    pub attributes: Arc<[Attribute]>,
    pub value: f64,
}

/// One derived family and its samples in output order.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedFamily {
    pub info: &'static DerivedInfo,
    pub samples: Vec<DerivedSample>,
}
