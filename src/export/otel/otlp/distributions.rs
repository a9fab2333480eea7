//! The sampled fields' distributions over OTLP (`--distribution`): one ExponentialHistogram metric per
//! sampled field on each entity's Resource, a data point per entity with count, sum, min, max and the
//! buckets the snapshot folded (scale, zero count, positive and negative offsets and counts).
//!
//! The name is the DCGM field's with `.distribution` appended (`DCGM_FI_DEV_POWER_USAGE.distribution`),
//! in every `--otel-metric-names` mode: the field's own instrument keeps its name (`hw.power` or
//! `DCGM_FI_DEV_POWER_USAGE`, a gauge), and one name may not be two instruments of different types in
//! a scope; no semantic convention defines a sampled distribution, so by the table's prefix rule
//! (`hw.*` follows the conventions, `DCGM_*` is DCGM's field in DCGM's unit) it keeps the DCGM name.
//! The unit is the field's UCUM unit (`W`).
//!
//! The one-measurement rule holds as for the field's own points: a board-level field (power) of a MIG
//! GPU is written once, by the member the request builder lets write board-level rows; a
//! per-instance field (`DCGM_FI_PROF_*`) on each instance.
//!
//! Temporality follows `--otlp-temporality` as OTel's preference defines it for histograms: with
//! `delta` each point holds the samples since the previous collection (start: that collection's
//! time); otherwise (cumulative, the default) every sample since the entity's first, from its first
//! sample's time — what a collector's Prometheus exporter accepts.

use opentelemetry_proto::tonic::common::v1::KeyValue as PKeyValue;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, AggregationTemporality, ExponentialHistogram, ExponentialHistogramDataPoint,
    Metric,
};

use crate::export::otel::units::field_unit;
use crate::fields::catalog;
use crate::snapshot::distribution::{EntityDistribution, Summary};
use crate::snapshot::Snapshot;

/// `DCGM_FI_DEV_POWER_USAGE.distribution`.
pub fn metric_name(field_name: &str) -> String {
    format!("{field_name}.distribution")
}

/// Append to `metrics` one histogram per sampled field with a point on this Resource: for each
/// member `(entity, set)`, `attributes(entity, set, per_instance)` gives the point attributes when
/// that member writes a field of that kind (`None`: another member does). Returns the points written.
pub fn write<'a>(
    snap: &Snapshot,
    members: &[(usize, usize)],
    attributes: impl Fn(usize, usize, bool) -> Option<&'a [PKeyValue]>,
    delta: bool,
    metrics: &mut Vec<Metric>,
) -> usize {
    let d = &snap.distributions;
    if d.entries.is_empty() {
        return 0;
    }
    let time = nanos_of(snap.taken_at);
    let mut written = 0;
    for (s, spec) in d.specs.iter().enumerate() {
        let field = catalog().by_id(spec.field);
        let per_instance = field.is_some_and(|f| f.level.measured_per_gpu_instance());
        let mut points = Vec::new();
        for &(e, set) in members {
            let Ok(at) = d
                .entries
                .binary_search_by_key(&(e, s), |x| (x.entity, x.spec))
            else {
                continue;
            };
            let Some(attrs) = attributes(e, set, per_instance) else {
                continue;
            };
            let entry = &d.entries[at];
            let start_us = if delta && d.interval_start_us > 0 {
                d.interval_start_us
            } else {
                entry.start_us
            };
            points.push(point(entry, delta, attrs, start_us, time));
        }
        if points.is_empty() {
            continue;
        }
        written += points.len();
        metrics.push(Metric {
            name: metric_name(&spec.name),
            description: format!(
                "Every {} sample, taken every {:?}, as an exponential histogram per entity.",
                spec.name, spec.every
            ),
            unit: field.and_then(field_unit).unwrap_or("").to_string(),
            metadata: Vec::new(),
            data: Some(Data::ExponentialHistogram(ExponentialHistogram {
                data_points: points,
                aggregation_temporality: if delta {
                    AggregationTemporality::Delta as i32
                } else {
                    AggregationTemporality::Cumulative as i32
                },
            })),
        });
    }
    written
}

fn point(
    entry: &EntityDistribution,
    delta: bool,
    attributes: &[PKeyValue],
    start_us: i64,
    time: u64,
) -> ExponentialHistogramDataPoint {
    let s: &Summary = if delta { &entry.interval } else { &entry.total };
    let h = &s.histogram;
    let buckets = |offset: i32, counts: &Vec<u64>| {
        (!counts.is_empty()).then(|| Buckets {
            offset,
            bucket_counts: counts.clone(),
        })
    };
    ExponentialHistogramDataPoint {
        attributes: attributes.to_vec(),
        // A source's sample clock may run ahead of the collection's time: never start after it.
        start_time_unix_nano: (start_us.max(0) as u64).saturating_mul(1000).min(time),
        time_unix_nano: time,
        count: s.count,
        sum: Some(s.sum),
        scale: h.scale,
        zero_count: h.zero_count,
        positive: buckets(h.positive_offset, &h.positive),
        negative: buckets(h.negative_offset, &h.negative),
        flags: 0,
        exemplars: Vec::new(),
        min: Some(s.min),
        max: Some(s.max),
        zero_threshold: 0.0,
    }
}

fn nanos_of(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
