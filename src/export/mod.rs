//! Exporters: everything that turns published snapshots into something a user reads.
//!
//! [`prometheus`] renders dcgm-exporter-compatible text, which [`metrics_body`] makes at the first
//! scrape after each collection and keeps for the HTTP server; [`otel`] pushes OTLP; [`dump`] writes bodies to files (into a [`dump_dir`] private to the exporter's user); [`plan`] builds them all.
//! Exporters read snapshots only; what an enricher attributed reaches them as open attribute sets.

pub mod distribution_series;
pub mod dump;
pub mod dump_dir;
pub mod entity_labels;
pub mod metrics_body;
pub mod otel;
pub mod plan;
pub mod process_series;
pub mod prometheus;

use std::sync::Arc;

use crate::snapshot::Snapshot;

/// Something that reacts to each newly published snapshot, on the collector thread, after publication.
/// Implementations must be quick and must never panic; they never block the HTTP server.
pub trait SnapshotConsumer: Send + Sync {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>);
}
