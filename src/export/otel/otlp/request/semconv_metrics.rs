//! The semantic-convention metrics of one resource (`--otel-metric-names semconv|both`): the rows of
//! [`crate::export::otel::semconv::MAPPINGS`] read from the resource's entity readings (and derived
//! families), scaled once here, written after the resource's DCGM-named metrics.
//!
//! Gauges are Gauges of doubles; updowncounters non-monotonic cumulative Sums (whatever the
//! temporality, as the SDK's UpDownCounter); counters monotonic Sums, delta per series with
//! `--otlp-temporality delta`. Points are integers when every input is an integer and the scale is a
//! whole number (bytes, error counts), doubles otherwise (ratios, joules).

use std::collections::HashMap;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue as PKeyValue};

use super::{CounterState, Kind, Layout, PointContext};
use crate::export::otel::semconv::{self, Input, Instrument, MetricPlan, Plan, Source};
use crate::snapshot::{Entity, Snapshot};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint, Sum,
};

/// Delta-state keys of semantic-convention series start here (DCGM instruments and derived families
/// use the indices below).
const KEY_BASE: usize = 1 << 20;

/// One point of a row: (value, whether an integer, an extra attribute such as `hw.state`).
type RowPoint = (f64, bool, Option<(&'static str, &'static str)>);

/// Per export: each derived-input row's value per entity (sum, or worst health result).
pub(super) type DerivedInputs<'a> = HashMap<usize, HashMap<&'a Entity, f64>>;

/// The derived families the plan reads, folded per entity.
pub(super) fn derived_inputs<'a>(plan: &Plan, snap: &'a Snapshot) -> DerivedInputs<'a> {
    let mut out: DerivedInputs<'a> = HashMap::new();
    for row in plan.metrics.iter().flat_map(|m| &m.rows) {
        let Source::Derived(family) = row.source else {
            continue;
        };
        let Some(fam) = snap.derived.iter().find(|f| f.info.name == family) else {
            continue;
        };
        let per_entity = out.entry(row.index).or_default();
        for s in &fam.samples {
            if !s.value.is_finite() {
                continue;
            }
            let slot = per_entity.entry(&*s.entity);
            match row.mapping.input {
                Input::DerivedHealth(_) => {
                    let v = slot.or_insert(s.value);
                    *v = v.max(s.value);
                }
                _ => *slot.or_insert(0.0) += s.value,
            }
        }
    }
    out
}

fn attr(key: &str, value: &str) -> PKeyValue {
    PKeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        key_strindex: 0,
    }
}

/// A scaled value as a point value of `instrument` (counters: finite and not negative).
fn point_value(instrument: Instrument, v: f64, int: bool) -> Option<number_data_point::Value> {
    if !v.is_finite() || (instrument == Instrument::Counter && v < 0.0) {
        return None;
    }
    Some(if int && instrument != Instrument::Gauge {
        number_data_point::Value::AsInt(v as i64)
    } else {
        number_data_point::Value::AsDouble(v)
    })
}

/// The semantic-convention metrics of one resource (its `members`: (entity, set) pairs), appended to
/// `out`. Returns the data points written.
#[allow(clippy::too_many_arguments)]
pub(super) fn write(
    plan: &Plan,
    snap: &Snapshot,
    layout: &Layout,
    members: &[(usize, usize)],
    derived: &DerivedInputs<'_>,
    ctx: &PointContext<'_>,
    next: &mut CounterState,
    out: &mut Vec<Metric>,
) -> usize {
    let mut written = 0;
    for metric in &plan.metrics {
        let points = metric_points(metric, snap, layout, members, derived, ctx, next);
        if points.is_empty() {
            continue;
        }
        written += points.len();
        let temporality = if ctx.delta && metric.instrument == Instrument::Counter {
            AggregationTemporality::Delta
        } else {
            AggregationTemporality::Cumulative
        };
        let data = match metric.instrument {
            Instrument::Gauge => Data::Gauge(Gauge {
                data_points: points,
            }),
            Instrument::UpDownCounter | Instrument::Counter => Data::Sum(Sum {
                data_points: points,
                aggregation_temporality: temporality as i32,
                is_monotonic: metric.instrument == Instrument::Counter,
            }),
        };
        out.push(Metric {
            name: metric.name.to_string(),
            description: metric.description.to_string(),
            unit: metric.unit.to_string(),
            metadata: Vec::new(),
            data: Some(data),
        });
    }
    written
}

fn metric_points(
    metric: &MetricPlan,
    snap: &Snapshot,
    layout: &Layout,
    members: &[(usize, usize)],
    derived: &DerivedInputs<'_>,
    ctx: &PointContext<'_>,
    next: &mut CounterState,
) -> Vec<NumberDataPoint> {
    let mut points = Vec::new();
    for &(e, s) in members {
        let (Some(reading), Some(entity)) = (snap.entities.get(e), layout.entities.get(e)) else {
            continue;
        };
        let Some(set) = entity.sets.get(s) else {
            continue;
        };
        let subject = entity.role.subject(&reading.entity, s);
        // Attribute sets already given a point for this member (fallback rows come later).
        let mut done: Vec<&[(&str, &str)]> = Vec::new();
        for row in &metric.rows {
            let m = row.mapping;
            if done.contains(&m.attributes) {
                continue;
            }
            // A MIG instance's per-instance fields on its own Resource, its board's on the GPU's.
            let per_instance = match &row.source {
                Source::Rows(rows) => rows.first().is_some_and(|r| {
                    snap.counters
                        .rows
                        .get(*r)
                        .is_some_and(|c| c.field.level.measured_per_gpu_instance())
                }),
                Source::Derived(_) => s == 0,
            };
            if !entity.role.writes(s, per_instance) {
                continue;
            }
            let values: Vec<RowPoint> = match &row.source {
                Source::Rows(rows) => match semconv::combine(&m.input, rows, &reading.values) {
                    Some((raw, ints)) => {
                        vec![(m.scale.apply(raw), ints && m.scale.keeps_integers(), None)]
                    }
                    None => continue,
                },
                Source::Derived(_) => {
                    let Some(v) = derived.get(&row.index).and_then(|per| per.get(&**subject))
                    else {
                        continue;
                    };
                    match m.input {
                        Input::DerivedHealth(_) => {
                            let current = semconv::hw_state(*v);
                            semconv::HW_STATES
                                .iter()
                                .map(|(state, _)| {
                                    let on = if *state == current { 1.0 } else { 0.0 };
                                    (on, true, Some(("hw.state", *state)))
                                })
                                .collect()
                        }
                        // Sums of counts stay integers (`hw.errors` is an int sum).
                        _ => {
                            let v = m.scale.apply(*v);
                            vec![(v, v.fract() == 0.0 && v.abs() < 9.0e15, None)]
                        }
                    }
                }
            };
            let kind = match m.instrument {
                Instrument::Counter => Kind::DoubleCounter,
                Instrument::Gauge | Instrument::UpDownCounter => Kind::Gauge,
            };
            let mut any = false;
            for (i, (v, int, extra)) in values.into_iter().enumerate() {
                let Some(value) = point_value(m.instrument, v, int) else {
                    continue;
                };
                let mut point = ctx.point(KEY_BASE + row.index * 8 + i, kind, set, value, next);
                point
                    .attributes
                    .extend(m.attributes.iter().map(|(k, v)| attr(k, v)));
                // The hardware conventions make `hw.id` and `hw.type` attributes of every `hw.*`
                // point (they stay on the Resource too).
                if metric.name.starts_with("hw.") {
                    point.attributes.extend(set.hw_point.iter().cloned());
                }
                if let Some((k, v)) = extra {
                    point.attributes.push(attr(k, v));
                }
                point.attributes.sort_by(|a, b| a.key.cmp(&b.key));
                points.push(point);
                any = true;
            }
            if any {
                done.push(m.attributes);
            }
        }
    }
    points
}
