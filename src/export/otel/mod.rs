//! OpenTelemetry-native export:
//! - [`otlp`]: the OTLP push — its flags and `OTEL_EXPORTER_OTLP_*` settings, the request builder that
//!   turns the newest snapshot into ONE `ExportMetricsServiceRequest` with one Resource per physical
//!   entity (and per pod or job holding one), the incident log records, the bounded queues, the senders
//!   and their transports.
//! - shared by the metrics and the log records: [`identity`] (the identity attributes of every entity
//!   kind, in either style), [`naming`] (per-entity attribute sets, the host base resource, what goes
//!   into a Resource), [`units`] (DCGM units to UCUM) and [`semconv`] (the semantic-convention metric
//!   names, as a data table).

pub mod identity;
pub mod naming;
pub mod otlp;
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
