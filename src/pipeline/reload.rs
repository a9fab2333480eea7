//! Between two collections: a reloaded counters CSV applied (the source re-plans its reads, the
//! next snapshot carries the set) or reported as kept back, and the source's own change of the rows
//! it reads (profiling came back or went away).

use std::sync::Arc;
use std::time::Instant;

use super::metrics::{PipelineMetrics, ReloadMetrics};
use super::publisher::Publisher;
use super::Pipeline;
use crate::counters::reload::Trigger;
use crate::counters::CounterSet;

impl Pipeline {
    /// Apply a reloaded counter set (or report why not): the source re-plans for it, the next
    /// snapshot carries it.
    pub(super) fn apply_reload(
        &mut self,
        trigger: Trigger,
        loaded: Result<CounterSet, String>,
        publisher: &Publisher,
        metrics: &mut PipelineMetrics,
        reload: &ReloadMetrics,
    ) {
        let why = match trigger {
            Trigger::FileChanged => "the counters file changed",
            Trigger::ConfigMapChanged => "the counters ConfigMap changed",
            Trigger::Signal => "SIGHUP",
        };
        let set = match loaded {
            Ok(set) => set,
            Err(e) => {
                reload.failure.inc();
                tracing::error!(trigger = why, "{e}; keeping the running counters");
                return;
            }
        };
        for (line, name) in &set.unsupported_exporter_fields {
            tracing::warn!(origin = %set.origin, line, field = %name, "unknown DCGM_EXP_* metric (dcgm-exporter has DCGM_EXP_XID_ERRORS_COUNT, _TOTAL, DCGM_EXP_CLOCK_EVENTS_COUNT, _TOTAL, DCGM_EXP_GPU_HEALTH_STATUS, DCGM_EXP_P2P_STATUS); row skipped");
        }
        let before = self.counters.len();
        let started = Instant::now();
        match self.source.set_counters(Arc::new(set)) {
            Ok(effective) => {
                reload.success.inc();
                tracing::info!(
                    trigger = why,
                    origin = %effective.origin,
                    rows = effective.len(),
                    previous_rows = before,
                    apply_ms = started.elapsed().as_secs_f64() * 1000.0,
                    "counters reloaded"
                );
                self.counters = effective.clone();
                publisher.counters.store(effective);
                // Absent-value counters are keyed by row index, which the new set renumbers.
                metrics.absent.clear();
            }
            Err(e) => {
                reload.failure.inc();
                tracing::error!(trigger = why, error = %e, "cannot apply the reloaded counters; keeping the running counters");
            }
        }
    }

    /// The source reads other rows from this poll on (profiling came back or went away): the
    /// snapshots carry the new set, as after a reload.
    pub(super) fn source_changed_counters(
        &mut self,
        set: Arc<CounterSet>,
        publisher: &Publisher,
        metrics: &mut PipelineMetrics,
    ) {
        tracing::info!(
            source = self.source.name(),
            rows = set.len(),
            previous_rows = self.counters.len(),
            "the source changed the rows it reads"
        );
        self.counters = set.clone();
        publisher.counters.store(set);
        // Absent-value counters are keyed by row index, which the new set renumbers.
        metrics.absent.clear();
    }
}
