//! OpenTelemetry-native export, in three jobs kept apart:
//! - [`otlp`]: the OTLP push — its flags and `OTEL_EXPORTER_OTLP_*` settings, the request builder that
//!   turns the newest snapshot into ONE `ExportMetricsServiceRequest` with one Resource per GPU / MIG
//!   instance (and per pod or job), the bounded queue, the sender and its transports. (OTLP log events
//!   and other signals belong here too.)
//! - [`sdk`]: the same data through the OpenTelemetry SDK's observable instruments — the
//!   `--otlp-pipeline sdk` alternative, kept for comparison, and the `--prometheus-format otel` bridge.
//! - shared by both: [`naming`] (attribute names in either style, per-entity attribute sets, the host
//!   base resource, what goes into a Resource), [`units`] (DCGM units to UCUM) and [`semconv`] (the
//!   semantic-convention metric names, as a data table; read by the direct request builder).

pub mod identity;
pub mod naming;
pub mod otlp;
pub mod sdk;
pub mod semconv;
pub mod units;

#[cfg(test)]
pub(crate) mod test_fleet;

use crate::config::LabelStyle;
use crate::counters::CounterSet;

/// What the OTel side needs from the rest of start-up besides its own flags.
pub struct OtelContext<'a> {
    pub counters: &'a CounterSet,
    pub labels: LabelStyle,
    /// The host label value (`None` with `--no-hostname`).
    pub hostname: Option<&'a str>,
    /// `NODE_NAME` (Kubernetes).
    pub node_name: Option<&'a str>,
}
