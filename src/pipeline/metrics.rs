//! The collector's own self-metrics: collections, errors, source up, absent values by field and
//! reason, per-process collection health and counters-CSV reloads. Registered once when the
//! collector starts; each collection only updates them.

use std::collections::HashMap;
use std::sync::Arc;

use crate::snapshot::Absent;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

pub(super) struct PipelineMetrics {
    registry: Arc<SelfMetrics>,
    pub(super) duration: Arc<Metric>,
    pub(super) last_success: Arc<Metric>,
    pub(super) collects: Arc<Metric>,
    pub(super) errors: Arc<Metric>,
    pub(super) source_up: Arc<Metric>,
    /// Keyed by counter row index (no per-cycle key allocation).
    pub(super) absent: HashMap<(usize, Absent), Arc<Metric>>,
    /// Absent values per counter row and reason in the collection being counted (kept: no
    /// allocation per collection).
    pub(super) absent_scratch: Vec<[u64; 6]>,
}

impl PipelineMetrics {
    pub(super) fn new(registry: Arc<SelfMetrics>, source: &str) -> Self {
        let labels = [("source", source)];
        PipelineMetrics {
            duration: registry.gauge(
                "dcgm_otel_collect_duration_seconds",
                "Wall time of the previous completed collection: source poll, enrichment and publication (the /metrics body is made at the first scrape after it).",
                &[],
            ),
            last_success: registry.gauge(
                "dcgm_otel_last_collect_success_timestamp_seconds",
                "Unix time of the last successful collection.",
                &[],
            ),
            collects: registry.counter("dcgm_otel_collects_total", "Collections attempted.", &labels),
            errors: registry.counter(
                "dcgm_otel_collect_errors_total",
                "Collections that failed because the source could not be read.",
                &labels,
            ),
            source_up: registry.gauge(
                "dcgm_otel_source_up",
                "1 when the last poll of the source succeeded, else 0.",
                &labels,
            ),
            absent: HashMap::new(),
            absent_scratch: Vec::new(),
            registry,
        }
    }

    pub(super) fn count_absent(&mut self, row: usize, field: &str, reason: Absent, n: u64) {
        let registry = &self.registry;
        let m = self
            .absent
            .entry((row, reason))
            .or_insert_with(|| {
                registry.counter(
                    "dcgm_otel_absent_values_total",
                    "Values not exported because DCGM reported them blank, not supported, not found, not permitted or in error, or because the source cannot give the field at all (unsupported), by field and reason.",
                    &[("field", field), ("reason", reason.as_str())],
                )
            });
        m.add(n as f64);
    }
}

/// Health of per-process collection across collections.
/// Its self-metrics exist only when per-process collection is on.
pub(super) struct ProcessPollState {
    pub(super) failing: bool,
    pub(super) errors: Option<Arc<Metric>>,
    pub(super) series: Option<Arc<Metric>>,
}

impl ProcessPollState {
    pub(super) fn new(registry: &SelfMetrics, enabled: bool) -> ProcessPollState {
        if !enabled {
            return ProcessPollState {
                failing: false,
                errors: None,
                series: None,
            };
        }
        ProcessPollState {
            failing: false,
            errors: Some(registry.counter(
                "dcgm_otel_process_collect_errors_total",
                "Collections whose per-process poll failed (their process series were withdrawn).",
                &[],
            )),
            series: Some(registry.gauge(
                "dcgm_otel_process_readings",
                "Per-process readings (processes, plus one 'other' per capped GPU or MIG instance) in the last collection.",
                &[],
            )),
        }
    }
}

/// `dcgm_otel_config_reloads_total{result}`.
pub(super) struct ReloadMetrics {
    pub(super) success: Arc<Metric>,
    pub(super) failure: Arc<Metric>,
}

impl ReloadMetrics {
    pub(super) fn new(registry: &SelfMetrics) -> ReloadMetrics {
        const NAME: &str = "dcgm_otel_config_reloads_total";
        const HELP: &str =
            "Reloads of the counters CSV (file change or SIGHUP), by result; a failed one keeps the running counters.";
        ReloadMetrics {
            success: registry.counter(NAME, HELP, &[("result", "success")]),
            failure: registry.counter(NAME, HELP, &[("result", "failure")]),
        }
    }
}
