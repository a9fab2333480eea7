//! The collection pipeline: one OS thread that, every collect interval, polls the source, applies the
//! enrichers, publishes an immutable [`Snapshot`] with one atomic swap and hands it to the consumers
//! (the Prometheus renderer, the OTel side). Collection runs on its own schedule; nothing here is ever
//! called from a scrape. When the source fails, an empty snapshot is published (its series disappear,
//! never served stale) and `/ready` turns 503 until a poll succeeds again. `/health` (liveness) stays 200
//! through any outage the exporter recovers from by itself; it turns 503 only when the collector thread
//! has not finished a cycle for [`CollectorStatus::restart_limit`], the one case a restart cures.
//!
//! A source can also hang instead of failing (a blocked `dcgmEntitiesGetLatestValues`: real host
//! engines do this). The FFI call cannot be cancelled, so a watchdog thread beside the collector
//! watches the running poll: once it has run longer than the freshness limit (two collect intervals
//! plus 5 s, the same rule `/ready` applies to the age of the data) the watchdog publishes an empty
//! snapshot — the series disappear from /metrics and OTLP, `dcgm_otel_source_up` is 0 and `/ready`
//! says "collection stuck for N s" — and logs it once. When the call returns, the collector publishes
//! what it read and collection resumes (a lost connection then goes through the source's own
//! reconnect). Publication is serialised, so a late withdrawal never hides fresh data.
//!
//! Between two collections the collector also applies a reloaded counters CSV ([`CountersReloader`]:
//! the file changed, or SIGHUP asked): the source re-plans its reads and watches for the new set, the
//! next snapshot carries it, and the exporters rebuild what depends on it. The previous body stays
//! published until that snapshot replaces it, so there is no scrape without data in between. A
//! [`Control::CollectNow`] (SIGHUP, a GPU bind/unbind event) runs a collection before the next tick.
//!
//! The parts: `status` (the health `/health` and `/ready` read), `publisher` (publication and the
//! watchdog), `stages` (a reading through the enrichers into a snapshot), `reload` (counters reloads
//! between collections), `metrics` (the collector's self-metrics); this file holds the run loop.
//!
//! [`Snapshot`]: crate::snapshot::Snapshot

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use metrics::{PipelineMetrics, ProcessPollState, ReloadMetrics};
use publisher::{watch_polls, Outcome, Publisher};

use crate::counters::reload::CountersReloader;
use crate::counters::CounterSet;
use crate::enrich::Enricher;
use crate::export::SnapshotConsumer;
use crate::lock::LockExt;
use crate::snapshot::{HostInfo, SnapshotStore};
use crate::source::processes::ProcessSource;
use crate::source::{Source, SourceError, Waker};
use crate::telemetry::self_metrics::SelfMetrics;

mod metrics;
mod publisher;
mod reload;
mod stages;
mod status;

pub use status::CollectorStatus;

/// What the collector thread is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Finish the current collection and stop.
    Stop,
    /// Collect now instead of at the next tick (the tick after stays on schedule).
    CollectNow,
}

/// A [`Waker`] that asks the collector on `tx` for a collection.
pub fn waker(tx: &Sender<Control>) -> Waker {
    let tx = std::sync::Mutex::new(tx.clone());
    Waker::new(move || {
        let _ = tx.lock_unpoisoned().send(Control::CollectNow);
    })
}

/// Everything the collector thread needs.
pub struct Pipeline {
    pub source: Box<dyn Source>,
    pub enrichers: Vec<Box<dyn Enricher>>,
    pub consumers: Vec<Arc<dyn SnapshotConsumer>>,
    pub counters: Arc<CounterSet>,
    pub host: Arc<HostInfo>,
    pub interval: Duration,
    pub store: Arc<SnapshotStore>,
    pub status: Arc<CollectorStatus>,
    pub self_metrics: Arc<SelfMetrics>,
    /// Per-process collection (`--collect-processes`), when on.
    pub processes: Option<Box<dyn ProcessSource>>,
    /// Follows the counters file when the counters came from one.
    pub reloader: Option<CountersReloader>,
    /// Handed to the source ([`Source::attach_waker`]).
    pub waker: Option<Waker>,
}

impl Pipeline {
    /// Run collections until `control` says [`Control::Stop`] or is disconnected. Blocks the calling
    /// thread.
    pub fn run(mut self, control: Receiver<Control>) {
        let reload_metrics = ReloadMetrics::new(&self.self_metrics);
        if let Some(w) = self.waker.take() {
            self.source.attach_waker(w);
        }
        let mut metrics = PipelineMetrics::new(self.self_metrics.clone(), self.source.name());
        let publisher = self.publisher(&metrics);
        let (watchdog_stop, watchdog) = self.start_watchdog(&publisher);
        let mut next = Instant::now();
        let mut was_down = false;
        let mut process_state = ProcessPollState::new(&self.self_metrics, self.processes.is_some());
        let mut early = false;
        loop {
            let started = Instant::now();
            if let Some((trigger, loaded)) = self.reloader.as_mut().and_then(|r| r.due(started)) {
                self.apply_reload(trigger, loaded, &publisher, &mut metrics, &reload_metrics);
            }
            metrics.collects.inc();
            self.status.poll_begins();
            let polled = self.source.poll();
            self.status.poll_ended();
            if let Some(set) = self.source.counters_changed() {
                self.source_changed_counters(set, &publisher, &mut metrics);
            }
            let failed = polled.is_err();
            let (snapshot, outcome) = match polled {
                Ok(reading) => {
                    let snapshot = self.snapshot(reading, &mut metrics, &mut process_state);
                    self.source_answered(&mut metrics, &mut was_down);
                    let not_ready = self.source.not_ready();
                    (snapshot, Outcome::Read { not_ready })
                }
                Err(err) => {
                    let msg = self.source_failed(&err, &mut metrics, &mut was_down);
                    (publisher.empty_snapshot(0), Outcome::Failed(msg))
                }
            };
            {
                let _guard = publisher.lock();
                if publisher.status.stuck.load(Ordering::Acquire) {
                    tracing::info!(
                        after_s = started.elapsed().as_secs(),
                        "the stuck collection returned; collection resumes"
                    );
                }
                publisher.publish_locked(snapshot, outcome);
            }
            if failed {
                metrics.source_up.set(0.0);
            }
            self.status.cycle_done();
            // Poll, enrichment, publication and rendering: shown in the next body.
            metrics.duration.set(started.elapsed().as_secs_f64());
            if !self.wait_next(&control, &mut next, &mut early) {
                break;
            }
        }
        drop(watchdog_stop);
        if let Some(w) = watchdog {
            let _ = w.join();
        }
        self.source.shutdown();
        tracing::info!("collector stopped");
    }

    /// The publication shared by the collector loop and the watchdog (the consumers move into it).
    fn publisher(&mut self, metrics: &PipelineMetrics) -> Arc<Publisher> {
        Arc::new(Publisher {
            store: self.store.clone(),
            consumers: std::mem::take(&mut self.consumers),
            status: self.status.clone(),
            counters: arc_swap::ArcSwap::new(self.counters.clone()),
            host: self.host.clone(),
            seq: AtomicU64::new(0),
            source_up: metrics.source_up.clone(),
            stuck_total: self.self_metrics.counter(
                "dcgm_otel_collect_stuck_total",
                "Collections that ran past the freshness limit (2 collect intervals + 5 s) and had their series withdrawn while the source did not answer.",
                &[("source", self.source.name())],
            ),
        })
    }

    /// The watchdog thread ([`watch_polls`]) and the sender whose drop stops it; without a thread
    /// (it could not start: logged) a hanging source is not detected.
    fn start_watchdog(
        &self,
        publisher: &Arc<Publisher>,
    ) -> (Sender<()>, Option<std::thread::JoinHandle<()>>) {
        let (watchdog_stop, watchdog_rx) = std::sync::mpsc::channel::<()>();
        let publisher = publisher.clone();
        let interval = self.interval;
        let watchdog = std::thread::Builder::new()
            .name("collect-watchdog".into())
            .spawn(move || watch_polls(publisher, interval, watchdog_rx));
        match watchdog {
            Ok(w) => (watchdog_stop, Some(w)),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the collection watchdog; a hanging source will not be detected");
                (watchdog_stop, None)
            }
        }
    }

    /// The source answered: up, the time of this success, and a line when it was down.
    fn source_answered(&self, metrics: &mut PipelineMetrics, was_down: &mut bool) {
        if *was_down {
            tracing::info!(
                source = self.source.name(),
                "source is back; collection resumed"
            );
            *was_down = false;
        }
        metrics.source_up.set(1.0);
        metrics.last_success.set(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        );
    }

    /// The source failed: counted, down, logged once per outage. Returns the failure's message.
    fn source_failed(
        &self,
        err: &SourceError,
        metrics: &mut PipelineMetrics,
        was_down: &mut bool,
    ) -> String {
        metrics.errors.inc();
        // `dcgm_otel_source_up` goes to 0 only once the empty snapshot is published (in `run`): a
        // body rendered meanwhile from the previous snapshot must not show its series beside a 0.
        let msg = err.to_string();
        if !*was_down {
            match err {
                SourceError::Unavailable(_) => {
                    tracing::error!(source = self.source.name(), error = %msg, "source unavailable; its series are withdrawn until it is back")
                }
                SourceError::Failed(_) => {
                    tracing::error!(source = self.source.name(), error = %msg, "collection failed; series withdrawn")
                }
            }
            *was_down = true;
        } else {
            tracing::debug!(error = %msg, "source still down");
        }
        msg
    }

    /// Wait for the next tick or an early [`Control::CollectNow`]; false when the collector stops.
    fn wait_next(&self, control: &Receiver<Control>, next: &mut Instant, early: &mut bool) -> bool {
        // A collection asked for early leaves the tick it came before on schedule.
        if !*early {
            *next += self.interval;
        }
        let now = Instant::now();
        if *next < now {
            // A slow cycle: skip the missed ticks instead of bursting.
            *next = now + self.interval;
        }
        match control.recv_timeout(*next - now) {
            Err(RecvTimeoutError::Timeout) => *early = false,
            Ok(Control::CollectNow) => {
                // Requests that piled up meanwhile are answered by this one collection.
                let mut stop = false;
                while let Ok(c) = control.try_recv() {
                    stop |= c == Control::Stop;
                }
                if stop {
                    return false;
                }
                *early = true;
            }
            _ => return false,
        }
        true
    }
}
