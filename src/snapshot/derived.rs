//! Derived series: metric families a collector-side stage computes from the enriched readings, which
//! are not DCGM fields (the per-pod GPU cost counters of `enrich::kubernetes::cost`, dcgm-exporter's
//! `DCGM_EXP_*` families of `enrich::exp`).
//!
//! A [`DerivedFamily`] has its own name, help, UCUM unit and kind; each [`DerivedSample`] names the
//! entity it describes (its identity labels / resource attributes come from the entity, as for a DCGM
//! series), its own attribution attributes (the pod) and the labels of the series itself (`xid`,
//! `clock_event`: [`SeriesLabel`]). The entity may no longer be in the snapshot's
//! readings (a departed pod's series are kept for a while), so a sample carries the whole entity.
//! Exporters write derived families after the DCGM families: the Prometheus renderer as one family
//! each, the OTLP builder as one metric each on the resource of the sample's entity and attributes.

use std::borrow::Cow;
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

/// Name, help, unit and kind of a derived family (static when the stage knows them when it is built;
/// owned when they come from the counters CSV, as a `DCGM_EXP_*` row's help and type do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DerivedInfo {
    /// The metric name, on :9400 and OTLP alike (`dcgm_otel_pod_gpu_seconds_total`).
    pub name: &'static str,
    pub help: Cow<'static, str>,
    /// UCUM unit for OTLP (`s`, `J`).
    pub unit: &'static str,
    pub kind: DerivedKind,
    /// The metric name on OTLP: dcgm-exporter's own for its families (`DCGM_EXP_*`), an OTel name
    /// (dotted, no unit or `_total` suffix: `nvidia.pod.gpu.time`) for dcgm-otel's.
    pub otel_name: &'static str,
    /// Whose measurement a sample is, which decides its OTLP Resource.
    pub subject: DerivedSubject,
}

/// Whose measurement a derived sample is (the OTLP entity model: every measurement leaves once, on the
/// Resource of what was measured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DerivedSubject {
    /// The device's (an XID count, a health result): on the entity's Resource, once per entity even
    /// when several pods share it (on :9400 the series repeats per pod, as dcgm-exporter's does).
    Device,
    /// The holder's share of a device (a pod's GPU-seconds): on the holder's own Resource (its
    /// attribution attributes), with the device's identity on the data point.
    Holder,
}

/// One series of a derived family.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedSample {
    /// The entity the series describes (identity labels, resource).
    pub entity: Arc<Entity>,
    /// Attribution of the series (a pod), in the order the exporters sort anyway.
    pub attributes: Arc<[Attribute]>,
    /// Labels of the series itself, in the order written (most families have none).
    pub labels: Vec<SeriesLabel>,
    pub value: f64,
}

/// A label a derived series has of its own (`xid="31"`, or a `label`-type CSV field's value): its name
/// on :9400 (sorted with the entity's label-class attributes, as dcgm-exporter sorts its collector
/// labels) and its attribute key on OTLP data points (`None`: not written on OTLP, where the entity's
/// resource already has it).
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesLabel {
    pub prometheus: Cow<'static, str>,
    pub otel: Option<&'static str>,
    /// Whether the OTLP attribute is an integer (`nvidia.xid.code`) rather than a string.
    pub otel_int: bool,
    pub value: Box<str>,
}

/// One derived family and its samples in output order.
#[derive(Debug, Clone, PartialEq)]
pub struct DerivedFamily {
    pub info: Cow<'static, DerivedInfo>,
    pub samples: Vec<DerivedSample>,
}
