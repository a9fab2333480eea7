//! Exporters: everything that turns published snapshots into something a user reads.
//!
//! [`prometheus`] renders dcgm-exporter-compatible text once per snapshot and keeps the bytes for the
//! HTTP server; [`self_metrics`] holds the exporter's own `dcgm_otel_*` counters and gauges.

pub mod otel;
pub mod prometheus;
pub mod self_metrics;

use std::sync::Arc;

use crate::snapshot::Snapshot;

/// Something that reacts to each newly published snapshot, on the collector thread, after publication.
/// Implementations must be quick and must never panic; they never block the HTTP server.
pub trait SnapshotConsumer: Send + Sync {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>);
}
