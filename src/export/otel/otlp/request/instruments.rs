//! The instruments of a request: which counters-CSV rows are sent, under which name, description,
//! UCUM unit and kind (gauge, int or double monotonic sum, a rate always a gauge). Made once per
//! counter set, read by every export.

use std::collections::HashSet;

use super::{templates, Instrument, Kind};
use crate::counters::{CounterSet, MetricKind};
use crate::export::otel::units::unit_for;
use crate::fields::{FieldId, ValueType};

/// Whether a row's field is a rate: its DCGM unit is per second (`MB/s`, `KB/s`).
fn is_rate(c: &crate::counters::Counter) -> bool {
    crate::export::otel::units::field_unit(&c.field).is_some_and(|u| u.ends_with("/s"))
}

/// The instruments of a counter set, but for rows of the fields in `replaced` (`semconv` names only).
pub(super) fn instruments(counters: &CounterSet, replaced: &[FieldId]) -> Vec<Instrument> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    let mut counters_seen = 0;
    for (row, c) in counters.rows.iter().enumerate() {
        if c.kind == MetricKind::Label
            || replaced.contains(&c.field.id)
            || !seen.insert(c.name.as_str())
        {
            continue;
        }
        let kind = match c.kind {
            MetricKind::Gauge => Kind::Gauge,
            // A rate (a DCGM unit per second: NVLink bandwidth in MB/s) is a gauge whatever the CSV
            // says: dcgm-exporter 4.5.3-4.8.2 types DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL `counter`, which
            // :9400 keeps, but a monotonic Sum of a rate would be read as totals.
            MetricKind::Counter if is_rate(c) => Kind::Gauge,
            MetricKind::Counter if c.field.value_type == ValueType::Int64 => Kind::IntCounter,
            MetricKind::Counter => Kind::DoubleCounter,
            MetricKind::Label => continue,
        };
        let unit = unit_for(c).to_string();
        let counter = (kind != Kind::Gauge).then_some(counters_seen);
        counters_seen += usize::from(counter.is_some());
        out.push(Instrument {
            counter,
            head: templates::metric_head(&c.name, &c.help, &unit),
            row,
            per_instance: c.field.level.measured_per_gpu_instance(),
            field_id: c.field.id,
            kind,
            name: c.name.clone(),
            description: c.help.clone(),
            unit,
        });
    }
    out
}
