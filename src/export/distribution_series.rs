//! The sampled fields' distributions on :9400 (`--distribution`), written after the per-process
//! families. dcgm-exporter has no such series, so they are `dcgm_otel_*` families, one set per sampled
//! field, named from the DCGM field (`DCGM_FI_` and a `DEV_` left out, lower case) — for
//! `DCGM_FI_DEV_POWER_USAGE`:
//!
//! | family | value over the samples since the previous collection |
//! |---|---|
//! | `dcgm_otel_power_usage_interval_max` | the highest sample |
//! | `dcgm_otel_power_usage_interval_min` | the lowest sample |
//! | `dcgm_otel_power_usage_interval_mean` | their mean |
//! | `dcgm_otel_power_usage_interval_p50`, `_p90`, `_p99` | the 50th, 90th, 99th percentile, from the histogram's buckets (within 2.2 %) |
//! | `dcgm_otel_power_usage_interval_samples` | how many samples were folded |
//!
//! All gauges, in the field's own unit: each collection replaces the values, as a gauge's last value
//! does, and `max_over_time(…_interval_max[1h])` is the hour's peak. Not a Prometheus histogram:
//! bucket bounds would have to fit every field's unit and range, and a cumulative histogram's
//! `histogram_quantile` answers over the scrape window, not per interval; not a summary, whose
//! `_sum`/`_count` readers expect to be counters. The OTLP side carries the full exponential histogram.
//!
//! Labels: exactly the field's own series' (the entity's identity labels, host label, label fields and
//! attributes, one series per attribute set), taken from the renderer's label cache. Nothing is
//! written when no distribution is configured.

use crate::snapshot::distribution::{DistributionSpec, EntityDistribution, QUANTILES};
use crate::snapshot::Snapshot;
use crate::telemetry::exposition::{escape_help, write_f64};

/// One family per statistic: name suffix, what its help says, and its value.
type Statistic = (&'static str, &'static str, fn(&EntityDistribution) -> f64);

const STATISTICS: &[Statistic] = &[
    ("interval_max", "Highest of the", |e| e.interval.max),
    ("interval_min", "Lowest of the", |e| e.interval.min),
    ("interval_mean", "Mean of the", |e| {
        e.interval.sum / e.interval.count.max(1) as f64
    }),
    ("interval_p50", "50th percentile of the", |e| e.quantiles[0]),
    ("interval_p90", "90th percentile of the", |e| e.quantiles[1]),
    ("interval_p99", "99th percentile of the", |e| e.quantiles[2]),
    ("interval_samples", "Number of", |e| e.interval.count as f64),
];

// The percentile families above follow `QUANTILES`.
const _: () = assert!(QUANTILES.len() == 3);

/// `dcgm_otel_<field>` for a DCGM field name: `DCGM_FI_` and then `DEV_` left out, lower case.
pub fn family_stem(field_name: &str) -> String {
    let short = field_name.strip_prefix("DCGM_FI_").unwrap_or(field_name);
    let short = short.strip_prefix("DEV_").unwrap_or(short);
    format!("dcgm_otel_{}", short.to_ascii_lowercase())
}

/// Append the distribution families of `snap`; `sets(entity)` gives the `labels} ` strings of an
/// entity's series (one per attribute set), as the field's own series are written. Returns the
/// samples written.
pub fn render<'a>(
    snap: &Snapshot,
    sets: impl Fn(usize) -> &'a [String],
    out: &mut String,
) -> usize {
    let d = &snap.distributions;
    if d.entries.is_empty() {
        return 0;
    }
    let mut samples = 0;
    for (s, spec) in d.specs.iter().enumerate() {
        if !d.entries.iter().any(|e| e.spec == s) {
            continue;
        }
        let stem = family_stem(&spec.name);
        for (suffix, what, value) in STATISTICS {
            write_header(out, &stem, suffix, what, spec);
            for e in d.entries.iter().filter(|e| e.spec == s) {
                for set in sets(e.entity) {
                    out.push_str(&stem);
                    out.push('_');
                    out.push_str(suffix);
                    out.push('{');
                    out.push_str(set);
                    write_f64(out, value(e));
                    out.push('\n');
                    samples += 1;
                }
            }
        }
    }
    samples
}

fn write_header(out: &mut String, stem: &str, suffix: &str, what: &str, spec: &DistributionSpec) {
    let unit = crate::fields::catalog()
        .by_id(spec.field)
        .and_then(|f| f.unit)
        .filter(|_| suffix != "interval_samples")
        .map(|u| format!(" ({u})"))
        .unwrap_or_default();
    let help = format!(
        "{what} {} samples{unit} since the previous collection, sampled every {:?}.",
        spec.name, spec.every
    );
    out.push_str("# HELP ");
    out.push_str(stem);
    out.push('_');
    out.push_str(suffix);
    out.push(' ');
    escape_help(&help, out);
    out.push_str("\n# TYPE ");
    out.push_str(stem);
    out.push('_');
    out.push_str(suffix);
    out.push_str(" gauge\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_read_well_in_promql() {
        assert_eq!(
            family_stem("DCGM_FI_DEV_POWER_USAGE"),
            "dcgm_otel_power_usage"
        );
        assert_eq!(
            family_stem("DCGM_FI_PROF_SM_ACTIVE"),
            "dcgm_otel_prof_sm_active"
        );
    }
}
