//! Whether DCGM's profiling module serves the DCP (`DCGM_FI_PROF_*`) fields, asked again until it does.
//!
//! The answer is not fixed at start-up: a host engine restarted with its profiling module, a second
//! host engine that held the profiling hardware and went away, a container granted `SYS_ADMIN` later
//! all bring profiling back. So the source probes (`dcgmProfGetSupportedMetricGroups` on the first
//! GPU) after every connection it makes — start-up, reconnection, a rediscovery that finds GPUs
//! where there were none — and, while profiling is unavailable, every [`REPROBE_EVERY`] on the
//! running connection. A probe that succeeds puts the DCP rows back into the counters the source
//! reads; one that fails takes them out (one warning per change of state, naming the rows and the
//! cause). A DCP watch that DCGM refuses although the probe succeeded counts as unavailable too.
//!
//! `dcgm_otel_profiling_available` says which state the node is in: 1, or 0 with the reason as a
//! label (`module_not_loaded`, `no_permission`, `gpu_not_supported`, `watch_failed`, `error`); it
//! exists once the counters have DCP rows and a probe has answered.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{Connection, DcgmError};
use super::ffi;
use crate::counters::{Counter, CounterSet};
use crate::telemetry::self_metrics::SelfMetrics;

/// How often an unavailable profiling module is asked again on a running connection.
pub const REPROBE_EVERY: Duration = Duration::from_secs(300);

const METRIC: &str = "dcgm_otel_profiling_available";
const HELP: &str = "1 when DCGM's profiling module serves the profiling (DCP) fields the counters list, 0 (with the reason) when it does not; asked again after every connection and every 5 minutes while 0.";

/// Why profiling is unavailable: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `DCGM_ST_MODULE_NOT_LOADED`: the profiling module did not load (not installed, or another host
    /// engine holds the profiling hardware).
    ModuleNotLoaded,
    /// Root and `CAP_SYS_ADMIN` are needed.
    NoPermission,
    /// This GPU has no profiling metrics (a consumer or pre-Volta GPU): nothing to fix.
    GpuNotSupported,
    /// The probe succeeded but DCGM refused to watch the DCP fields.
    WatchFailed,
    Error,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ModuleNotLoaded => "module_not_loaded",
            Reason::NoPermission => "no_permission",
            Reason::GpuNotSupported => "gpu_not_supported",
            Reason::WatchFailed => "watch_failed",
            Reason::Error => "error",
        }
    }

    fn of(e: &DcgmError) -> Reason {
        match e.code {
            ffi::DCGM_ST_MODULE_NOT_LOADED => Reason::ModuleNotLoaded,
            ffi::DCGM_ST_REQUIRES_ROOT | ffi::DCGM_ST_NO_PERMISSION => Reason::NoPermission,
            ffi::DCGM_ST_PROFILING_NOT_SUPPORTED => Reason::GpuNotSupported,
            _ => Reason::Error,
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Reason::ModuleNotLoaded => "the profiling module is not loaded: install datacenter-gpu-manager-4-proprietary (needed for DCP on Ampere and older), and avoid a second host engine on this node",
            Reason::NoPermission => "profiling needs root and CAP_SYS_ADMIN (containers: --cap-add SYS_ADMIN)",
            Reason::GpuNotSupported => "this GPU does not support profiling metrics",
            Reason::WatchFailed => "DCGM refused to watch the profiling fields (another host engine or profiler may hold the profiling hardware)",
            Reason::Error => "profiling metrics are unavailable",
        }
    }
}

/// What the last probe said.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The counters have no DCP row: nothing asked.
    NotAsked,
    /// Not asked yet: no connection, or no GPU to ask about.
    Pending,
    /// The DCP field ids the first GPU supports.
    Supported(BTreeSet<u16>),
    Unavailable {
        reason: Reason,
        detail: String,
    },
}

/// The profiling answer of the source, its re-probe schedule and its self-metric.
pub struct Profiling {
    answer: Answer,
    /// When an unavailable module is asked again.
    next_probe: Option<Instant>,
    metrics: Option<Arc<SelfMetrics>>,
}

impl Default for Profiling {
    fn default() -> Self {
        Profiling {
            answer: Answer::Pending,
            next_probe: None,
            metrics: None,
        }
    }
}

/// Whether a counter set asks for any DCP field.
pub fn asks(counters: &CounterSet) -> bool {
    counters.rows.iter().any(|c| c.field.is_profiling())
}

impl Profiling {
    /// Publish the state in `dcgm_otel_profiling_available` from now on.
    pub fn count_in(&mut self, metrics: &Arc<SelfMetrics>) {
        self.metrics = Some(metrics.clone());
        self.publish();
    }

    pub fn answer(&self) -> &Answer {
        &self.answer
    }

    /// Whether the running connection should be asked again now (unavailable, and the time has come).
    pub fn reprobe_due(&self, now: Instant) -> bool {
        matches!(self.answer, Answer::Unavailable { .. })
            && self.next_probe.is_some_and(|t| now >= t)
    }

    /// Ask DCGM (on `conn`, about GPU `gpu`) which DCP fields it serves, when `counters` list any;
    /// `None` for `gpu`: there is no GPU to ask about yet (the answer stays pending).
    pub fn probe(&mut self, conn: &Connection, gpu: Option<u32>, counters: &CounterSet) {
        let answer = if !asks(counters) {
            Answer::NotAsked
        } else {
            match gpu {
                None => Answer::Pending,
                Some(gpu) => match conn.profiling_fields(gpu) {
                    Ok(supported) => Answer::Supported(supported),
                    Err(e) => {
                        let reason = Reason::of(&e);
                        Answer::Unavailable {
                            reason,
                            detail: format!("{e}: {}", reason.hint()),
                        }
                    }
                },
            }
        };
        self.set(answer);
    }

    /// The probe said yes but DCGM refused the DCP watch on this connection.
    pub fn watch_failed(&mut self, e: &DcgmError) {
        if matches!(self.answer, Answer::Supported(_)) {
            self.set(Answer::Unavailable {
                reason: Reason::WatchFailed,
                detail: format!("{e}: {}", Reason::WatchFailed.hint()),
            });
        }
    }

    /// The connection is gone: keep the answer (the series say it until the next probe), stop
    /// re-probing until a new connection asks.
    pub fn disconnected(&mut self) {
        self.next_probe = None;
    }

    fn set(&mut self, answer: Answer) {
        self.next_probe =
            matches!(answer, Answer::Unavailable { .. }).then(|| Instant::now() + REPROBE_EVERY);
        if answer == self.answer {
            return;
        }
        if matches!(
            (&self.answer, &answer),
            (Answer::Unavailable { .. }, Answer::Supported(_))
        ) {
            tracing::info!("DCGM's profiling module answers again: DCP metrics are collected");
        }
        self.answer = answer;
        self.publish();
    }

    fn publish(&self) {
        let Some(m) = &self.metrics else {
            return;
        };
        match &self.answer {
            Answer::NotAsked | Answer::Pending => m.clear(METRIC),
            Answer::Supported(_) => m.sole_gauge(METRIC, HELP, &[]).set(1.0),
            Answer::Unavailable { reason, .. } => m
                .sole_gauge(METRIC, HELP, &[("reason", reason.as_str())])
                .set(0.0),
        }
    }

    /// The rows of `full` this source can read: DCP rows only with a supported answer (all of them
    /// while the answer is pending: nothing is read then anyway), and of those the fields the GPU
    /// supports. Returns the set and the rows left out.
    pub fn filter(&self, full: &CounterSet) -> (CounterSet, Vec<Counter>) {
        let mut set = full.clone();
        let dropped = match &self.answer {
            Answer::NotAsked | Answer::Pending => Vec::new(),
            Answer::Supported(supported) => {
                set.retain(|c| !c.field.is_profiling() || supported.contains(&c.field.id))
            }
            Answer::Unavailable { .. } => set.retain(|c| !c.field.is_profiling()),
        };
        (set, dropped)
    }
}

/// The names of `rows`, comma-separated (for the log).
pub fn names(rows: &[Counter]) -> String {
    rows.iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable(reason: Reason) -> Answer {
        Answer::Unavailable {
            reason,
            detail: String::new(),
        }
    }

    #[test]
    fn the_metric_follows_the_answer_and_reprobes_only_while_unavailable() {
        let metrics = SelfMetrics::new();
        let mut p = Profiling::default();
        p.count_in(&metrics);
        let render = || {
            let mut s = String::new();
            metrics.render(&mut s);
            s.lines()
                .filter(|l| l.starts_with(METRIC))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert!(render().is_empty(), "pending: no series");
        p.set(unavailable(Reason::ModuleNotLoaded));
        assert_eq!(
            render(),
            ["dcgm_otel_profiling_available{reason=\"module_not_loaded\"} 0"]
        );
        let now = Instant::now();
        assert!(!p.reprobe_due(now));
        assert!(p.reprobe_due(now + REPROBE_EVERY + Duration::from_secs(1)));
        p.set(Answer::Supported(BTreeSet::from([1001])));
        assert_eq!(render(), ["dcgm_otel_profiling_available 1"]);
        assert!(!p.reprobe_due(now + REPROBE_EVERY * 2));
        p.set(Answer::NotAsked);
        assert!(render().is_empty());
    }

    #[test]
    fn reasons_from_dcgm_codes() {
        let e = |code| DcgmError {
            call: "dcgmProfGetSupportedMetricGroups",
            code,
            message: String::new(),
        };
        assert_eq!(
            Reason::of(&e(ffi::DCGM_ST_MODULE_NOT_LOADED)),
            Reason::ModuleNotLoaded
        );
        assert_eq!(
            Reason::of(&e(ffi::DCGM_ST_REQUIRES_ROOT)),
            Reason::NoPermission
        );
        assert_eq!(
            Reason::of(&e(ffi::DCGM_ST_PROFILING_NOT_SUPPORTED)),
            Reason::GpuNotSupported
        );
        assert_eq!(Reason::of(&e(ffi::DCGM_ST_GENERIC_ERROR)), Reason::Error);
    }
}
