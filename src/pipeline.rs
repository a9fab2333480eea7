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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::counters::reload::{CountersReloader, Trigger};
use crate::counters::CounterSet;
use crate::enrich::Enricher;
use crate::export::SnapshotConsumer;
use crate::lock::LockExt;
use crate::snapshot::{
    Absent, Attribute, Attribution, EntityKind, EntityReading, FieldValue, HostInfo, Incident,
    Snapshot, SnapshotStore,
};
use crate::source::processes::ProcessSource;
use crate::source::{Source, SourceError, Waker};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Health of the collection, read by `/health` and `/ready`.
pub struct CollectorStatus {
    interval: Duration,
    started: Instant,
    /// Milliseconds since `started` of the last successful collection, +1 (0 = never).
    last_success_ms: AtomicU64,
    ever_succeeded: AtomicBool,
    source_up: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// Milliseconds since `started` when the running poll began, +1 (0 = no poll running).
    poll_started_ms: AtomicU64,
    /// Number of the running (or last) poll.
    poll_number: AtomicU64,
    /// The running poll outlived the freshness limit and its series were withdrawn.
    stuck: AtomicBool,
    /// Milliseconds since `started` when the collector last finished a cycle, +1 (1 = at `started`).
    last_cycle_ms: AtomicU64,
    /// How long the collector may go without finishing a cycle before `/health` asks for a restart.
    restart_limit: Duration,
    /// Why the source, although it answered, is not ready (DCGM reports fewer GPUs than the node has).
    not_ready: Mutex<Option<String>>,
}

impl CollectorStatus {
    pub fn new(interval: Duration) -> Arc<CollectorStatus> {
        Arc::new(CollectorStatus {
            interval,
            started: Instant::now(),
            last_success_ms: AtomicU64::new(0),
            ever_succeeded: AtomicBool::new(false),
            source_up: AtomicBool::new(false),
            last_error: Mutex::new(None),
            poll_started_ms: AtomicU64::new(0),
            poll_number: AtomicU64::new(0),
            stuck: AtomicBool::new(false),
            last_cycle_ms: AtomicU64::new(1),
            restart_limit: Self::restart_limit_for(interval),
            not_ready: Mutex::new(None),
        })
    }

    /// How long the collector thread may go without finishing a cycle before `/health` (liveness) turns
    /// 503: 20 collect intervals, at least 10 minutes.
    ///
    /// A restart cures one thing the running process cannot: a call into the source that never returns
    /// (a blocked libdcgm call cannot be cancelled) or a collector thread that is gone. It cures nothing
    /// that goes away by itself: a host engine that is down or restarting (driver upgrades by the GPU
    /// Operator take minutes), a GPU in reset, a slow NVML call during XID recovery. Those make a poll
    /// fail or run long and end; the exporter reconnects by itself, and a liveness failure would only
    /// add a CrashLoopBackOff delay after DCGM is back. So the limit is far beyond any such outage
    /// (calls that DCGM times out itself end within seconds to a minute), and by 20 cycles beyond the
    /// collector's own rhythm at long intervals (a cycle sleeps at most one interval).
    pub fn restart_limit_for(interval: Duration) -> Duration {
        (interval * 20).max(Duration::from_secs(600))
    }

    /// See [`CollectorStatus::restart_limit_for`].
    pub fn restart_limit(&self) -> Duration {
        self.restart_limit
    }

    /// The same status with another restart limit (tests).
    #[cfg(test)]
    fn with_restart_limit(interval: Duration, restart_limit: Duration) -> Arc<CollectorStatus> {
        let mut s = CollectorStatus::new(interval);
        if let Some(status) = Arc::get_mut(&mut s) {
            status.restart_limit = restart_limit;
        }
        s
    }

    /// How old the data may get: two collect intervals plus 5 s. Older data makes `/ready` answer
    /// 503, and a poll running longer has its series withdrawn by the watchdog.
    pub fn freshness_limit(&self) -> Duration {
        self.interval * 2 + Duration::from_secs(5)
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// `/ready`: `Ok(())` once the first collection has been published and while the last one
    /// succeeded, is fresh (younger than [`CollectorStatus::freshness_limit`]) and the source did not
    /// say it is blind ([`Source::not_ready`]); otherwise the reason.
    pub fn ready(&self) -> Result<(), String> {
        self.fresh()?;
        if !self.ever_succeeded.load(Ordering::Acquire) {
            return Err("first collection pending".to_string());
        }
        if let Some(why) = self.not_ready.lock_unpoisoned().clone() {
            return Err(why);
        }
        Ok(())
    }

    /// `/health` (liveness): `Ok(())` unless the collector thread has not finished a cycle for
    /// [`CollectorStatus::restart_limit`] (a source call that never returns, a thread that is gone).
    /// A source that is down, slow or stale is not a liveness failure: the exporter recovers from
    /// those by itself (`/ready` reports them).
    pub fn health(&self) -> Result<(), String> {
        let last = self.last_cycle_ms.load(Ordering::Acquire);
        let since = Duration::from_millis(self.now_ms().saturating_sub(last));
        if since <= self.restart_limit {
            return Ok(());
        }
        Err(match self.running_poll() {
            Some((_, running)) => format!(
                "collection stuck for {} s in a source call that has not returned (limit {} s); restart to recover",
                running.as_secs(),
                self.restart_limit.as_secs()
            ),
            None => format!(
                "the collector has not finished a cycle for {} s (limit {} s); restart to recover",
                since.as_secs(),
                self.restart_limit.as_secs()
            ),
        })
    }

    /// The collector finished a cycle (published its outcome, success or failure).
    fn cycle_done(&self) {
        self.last_cycle_ms.store(self.now_ms(), Ordering::Release);
    }

    /// A poll begins; returns its number.
    fn poll_begins(&self) -> u64 {
        let n = self.poll_number.fetch_add(1, Ordering::AcqRel) + 1;
        self.poll_started_ms.store(self.now_ms(), Ordering::Release);
        n
    }

    fn poll_ended(&self) {
        self.poll_started_ms.store(0, Ordering::Release);
    }

    /// The running poll (its number and how long it has run), if any.
    fn running_poll(&self) -> Option<(u64, Duration)> {
        let started = self.poll_started_ms.load(Ordering::Acquire);
        (started != 0).then(|| {
            (
                self.poll_number.load(Ordering::Acquire),
                Duration::from_millis(self.now_ms().saturating_sub(started)),
            )
        })
    }

    /// `Ok(())` when the last collection succeeded and is fresh (younger than
    /// [`CollectorStatus::freshness_limit`]); otherwise the reason.
    fn fresh(&self) -> Result<(), String> {
        if self.stuck.load(Ordering::Acquire) {
            let running = self.running_poll().map(|(_, d)| d).unwrap_or_default();
            return Err(format!(
                "collection stuck for {} s: the source has not answered; series withdrawn",
                running.as_secs()
            ));
        }
        if !self.source_up.load(Ordering::Acquire) {
            let err = self.last_error.lock_unpoisoned().clone();
            return Err(match err {
                Some(e) => format!("source down: {e}"),
                None => "no collection yet".to_string(),
            });
        }
        let last = self.last_success_ms.load(Ordering::Acquire);
        let age = Duration::from_millis(
            (self.started.elapsed().as_millis() as u64).saturating_sub(last.saturating_sub(1)),
        );
        if age > self.freshness_limit() {
            return Err(format!(
                "stale: last successful collection {:.1}s ago (collect interval {:.1}s)",
                age.as_secs_f64(),
                self.interval.as_secs_f64()
            ));
        }
        Ok(())
    }

    fn record_success(&self, not_ready: Option<String>) {
        *self.not_ready.lock_unpoisoned() = not_ready;
        self.last_success_ms.store(self.now_ms(), Ordering::Release);
        self.stuck.store(false, Ordering::Release);
        self.source_up.store(true, Ordering::Release);
        if let Ok(mut e) = self.last_error.lock() {
            *e = None;
        }
    }

    /// Called after a successful snapshot has been handed to every consumer (so /metrics has it).
    fn mark_ready(&self) {
        self.ever_succeeded.store(true, Ordering::Release);
    }

    fn record_failure(&self, err: &str) {
        self.stuck.store(false, Ordering::Release);
        self.source_up.store(false, Ordering::Release);
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(err.to_string());
        }
    }
}

struct PipelineMetrics {
    registry: Arc<SelfMetrics>,
    duration: Arc<Metric>,
    last_success: Arc<Metric>,
    collects: Arc<Metric>,
    errors: Arc<Metric>,
    source_up: Arc<Metric>,
    /// Keyed by counter row index (no per-cycle key allocation).
    absent: HashMap<(usize, Absent), Arc<Metric>>,
    /// Absent values per counter row and reason in the collection being counted (kept: no
    /// allocation per collection).
    absent_scratch: Vec<[u64; 6]>,
}

impl PipelineMetrics {
    fn new(registry: Arc<SelfMetrics>, source: &str) -> Self {
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

    fn count_absent(&mut self, row: usize, field: &str, reason: Absent, n: u64) {
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
struct ProcessPollState {
    failing: bool,
    errors: Option<Arc<Metric>>,
    series: Option<Arc<Metric>>,
}

impl ProcessPollState {
    fn new(registry: &SelfMetrics, enabled: bool) -> ProcessPollState {
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

/// `dcgm_otel_config_reloads_total{result}`.
struct ReloadMetrics {
    success: Arc<Metric>,
    failure: Arc<Metric>,
}

impl ReloadMetrics {
    fn new(registry: &SelfMetrics) -> ReloadMetrics {
        const NAME: &str = "dcgm_otel_config_reloads_total";
        const HELP: &str =
            "Reloads of the counters CSV (file change or SIGHUP), by result; a failed one keeps the running counters.";
        ReloadMetrics {
            success: registry.counter(NAME, HELP, &[("result", "success")]),
            failure: registry.counter(NAME, HELP, &[("result", "failure")]),
        }
    }
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

/// How a collection ended, as the health status records it.
enum Outcome {
    /// The source was read; it may still say why it is not ready.
    Read {
        not_ready: Option<String>,
    },
    Failed(String),
}

/// Publication: the store, the consumers and the health status change together, under one lock, from
/// the collector thread and from the watchdog.
struct Publisher {
    store: Arc<SnapshotStore>,
    consumers: Vec<Arc<dyn SnapshotConsumer>>,
    status: Arc<CollectorStatus>,
    /// The counters of empty snapshots (the running set; replaced by a reload).
    counters: arc_swap::ArcSwap<CounterSet>,
    host: Arc<HostInfo>,
    /// Sequence number of the last snapshot published.
    seq: AtomicU64,
    lock: Mutex<()>,
    source_up: Arc<Metric>,
    stuck_total: Arc<Metric>,
}

impl Publisher {
    /// A snapshot without entities (its `seq` is set when it is published).
    fn empty_snapshot(&self, seq: u64) -> Snapshot {
        Snapshot {
            seq,
            taken_at: SystemTime::now(),
            counters: self.counters.load_full(),
            host: self.host.clone(),
            driver_version: None,
            entities: Vec::new(),
            processes: Vec::new(),
            derived: Vec::new(),
            per_set: Vec::new(),
            incidents: Vec::new(),
            distributions: Default::default(),
        }
    }

    /// Hand a snapshot to the store and the consumers; then record the outcome in the status (so a
    /// 503 never coexists with the previous series, and a 200 never with an empty body).
    fn publish_locked(&self, mut snapshot: Snapshot, outcome: Outcome) {
        snapshot.seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        let snapshot = Arc::new(snapshot);
        self.store.publish(snapshot.clone());
        for c in &self.consumers {
            c.on_snapshot(&snapshot);
        }
        match outcome {
            Outcome::Read { not_ready } => {
                self.status.record_success(not_ready);
                self.status.mark_ready();
            }
            Outcome::Failed(msg) => self.status.record_failure(&msg),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock_unpoisoned()
    }

    /// Watchdog: withdraw the series when poll `poll` is still running past the freshness limit.
    fn withdraw_if_stuck(&self, poll: u64) {
        let _guard = self.lock();
        let Some((running, elapsed)) = self.status.running_poll() else {
            return;
        };
        if running != poll
            || elapsed <= self.status.freshness_limit()
            || self.status.stuck.load(Ordering::Acquire)
        {
            return;
        }
        tracing::error!(
            stuck_s = elapsed.as_secs(),
            limit_s = self.status.freshness_limit().as_secs_f64(),
            "collection stuck: the source has not answered; its series are withdrawn until it does"
        );
        self.stuck_total.inc();
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        let snapshot = Arc::new(self.empty_snapshot(seq));
        self.store.publish(snapshot.clone());
        for c in &self.consumers {
            c.on_snapshot(&snapshot);
        }
        // After the empty snapshot is out, so no body shows the withdrawn series beside a 0 (a body
        // rendered from the empty snapshot before this line shows 1 for a moment: no series, no lie).
        self.source_up.set(0.0);
        self.status.source_up.store(false, Ordering::Release);
        self.status.stuck.store(true, Ordering::Release);
    }
}

/// The watchdog thread: checks the running poll a few times per interval until `stop` closes.
fn watch_polls(publisher: Arc<Publisher>, interval: Duration, stop: Receiver<()>) {
    let period = (interval / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        match stop.recv_timeout(period) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        if let Some((poll, elapsed)) = publisher.status.running_poll() {
            if elapsed > publisher.status.freshness_limit() {
                publisher.withdraw_if_stuck(poll);
            }
        }
    }
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
            lock: Mutex::new(()),
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

    /// A successful reading through the stages: enrichment, the processes, the incidents attributed,
    /// the enrichers' observations and derived families; the absent values counted.
    fn snapshot(
        &mut self,
        mut reading: crate::snapshot::Reading,
        metrics: &mut PipelineMetrics,
        process_state: &mut ProcessPollState,
    ) -> Snapshot {
        for e in &mut self.enrichers {
            e.enrich(&mut reading.entities);
        }
        let processes = self.poll_processes(&reading.entities, process_state);
        let incidents =
            attribute_incidents(std::mem::take(&mut reading.incidents), &reading.entities);
        let mut derived = Vec::new();
        for e in &mut self.enrichers {
            e.observe(&incidents, &reading.clock_samples, &reading.p2p);
        }
        for e in &mut self.enrichers {
            e.derive(&reading.entities, &self.counters, &mut derived);
        }
        let mut per_set = Vec::new();
        for e in &mut self.enrichers {
            e.per_set_values(&reading.entities, &self.counters, &mut per_set);
        }
        self.count_absent(&reading, metrics);
        Snapshot {
            seq: 0,
            taken_at: SystemTime::now(),
            counters: self.counters.clone(),
            host: self.host.clone(),
            driver_version: reading.driver_version,
            entities: reading.entities,
            processes,
            derived,
            per_set,
            incidents,
            distributions: reading.distributions,
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

    /// Poll the process source (if any) for the entities just read and let the enrichers attribute the
    /// processes. A failure withdraws the process series for this collection, logged once per outage.
    fn poll_processes(
        &mut self,
        entities: &[crate::snapshot::EntityReading],
        state: &mut ProcessPollState,
    ) -> Vec<crate::snapshot::ProcessReading> {
        let Some(source) = self.processes.as_mut() else {
            return Vec::new();
        };
        match source.poll(entities) {
            Ok(mut list) => {
                if state.failing {
                    tracing::info!(source = source.name(), "per-process collection works again");
                    state.failing = false;
                }
                for e in &mut self.enrichers {
                    e.enrich_processes(&mut list);
                }
                if let Some(m) = &state.series {
                    m.set(list.len() as f64);
                }
                list
            }
            Err(err) => {
                if let Some(m) = &state.errors {
                    m.inc();
                }
                if let Some(m) = &state.series {
                    m.set(0.0);
                }
                if !state.failing {
                    tracing::warn!(source = source.name(), error = %err, "per-process collection failed; process series withdrawn until it works again");
                    state.failing = true;
                }
                Vec::new()
            }
        }
    }

    /// Apply a reloaded counter set (or report why not): the source re-plans for it, the next
    /// snapshot carries it.
    fn apply_reload(
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
    fn source_changed_counters(
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

    fn count_absent(&self, reading: &crate::snapshot::Reading, metrics: &mut PipelineMetrics) {
        const REASONS: [Absent; 6] = [
            Absent::Blank,
            Absent::NotSupported,
            Absent::NotFound,
            Absent::NotPermissioned,
            Absent::Error,
            Absent::Unsupported,
        ];
        // Entity by entity, in the order the values lie in memory; counts per row and reason.
        let rows = self.counters.rows.len();
        let counts = &mut metrics.absent_scratch;
        counts.clear();
        counts.resize(rows, [0; 6]);
        for e in &reading.entities {
            for (row, v) in e.values.iter() {
                let FieldValue::Absent(reason) = v else {
                    continue;
                };
                if let (Some(slot), Some(row)) = (
                    REASONS.iter().position(|r| r == reason),
                    counts.get_mut(row),
                ) {
                    row[slot] += 1;
                }
            }
        }
        let counts = std::mem::take(&mut metrics.absent_scratch);
        for (i, (row, per_reason)) in self.counters.rows.iter().zip(&counts).enumerate() {
            for (slot, n) in per_reason.iter().enumerate() {
                if *n > 0 {
                    metrics.count_absent(i, &row.name, REASONS[slot], *n);
                }
            }
        }
        metrics.absent_scratch = counts;
    }
}

/// Give each incident the attribution its entity has in this collection (who held the device when the
/// incident was seen); an incident on an entity no longer read keeps the empty attribution.
fn attribute_incidents(mut incidents: Vec<Incident>, entities: &[EntityReading]) -> Vec<Incident> {
    for incident in &mut incidents {
        if let Some(reading) = entities
            .iter()
            .find(|r| Arc::ptr_eq(&r.entity, &incident.entity) || r.entity == incident.entity)
        {
            incident.attribution = reading.attribution.clone();
        } else if incident.entity.kind == EntityKind::Gpu {
            // A GPU in MIG mode has no series of its own: a clock event or health change of the
            // whole GPU hits whoever holds its instances (each distinct attribute set once).
            let index = incident.entity.gpu_index();
            let mut holders: Vec<Vec<Attribute>> = Vec::new();
            for r in entities.iter().filter(|r| {
                r.entity.kind == EntityKind::GpuInstance && r.entity.gpu_index() == index
            }) {
                for set in r.attribution.sets().filter(|s| !s.is_empty()) {
                    if !holders.iter().any(|h| h.as_slice() == set) {
                        holders.push(set.to_vec());
                    }
                }
            }
            if !holders.is_empty() {
                let mut attribution = Attribution::default();
                attribution.split(&holders);
                incident.attribution = Arc::new(attribution);
            }
        }
    }
    incidents
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_limit_is_twenty_intervals_and_at_least_ten_minutes() {
        let limit = CollectorStatus::restart_limit_for;
        assert_eq!(limit(Duration::from_secs(1)), Duration::from_secs(600));
        assert_eq!(limit(Duration::from_secs(30)), Duration::from_secs(600));
        assert_eq!(limit(Duration::from_secs(60)), Duration::from_secs(1200));
    }

    /// A source that is down keeps liveness 200 (the exporter reconnects by itself) and readiness 503;
    /// only a call that outlives the restart limit turns liveness 503, and it is 200 again once the
    /// cycle finishes.
    #[test]
    fn liveness_fails_only_past_the_restart_limit() {
        let s = CollectorStatus::with_restart_limit(
            Duration::from_millis(10),
            Duration::from_millis(300),
        );
        assert_eq!(s.health(), Ok(()));
        assert_eq!(s.ready(), Err("no collection yet".to_string()));
        s.poll_begins();
        s.poll_ended();
        s.record_failure("connection refused");
        s.cycle_done();
        assert_eq!(s.health(), Ok(()));
        assert_eq!(
            s.ready(),
            Err("source down: connection refused".to_string())
        );
        s.poll_begins();
        s.record_success(None);
        s.mark_ready();
        s.poll_ended();
        s.cycle_done();
        assert_eq!(s.ready(), Ok(()));
        s.poll_begins();
        std::thread::sleep(Duration::from_millis(400));
        let err = s.health().unwrap_err();
        assert!(
            err.starts_with(
                "collection stuck for 0 s in a source call that has not returned (limit 0 s)"
            ),
            "{err}"
        );
        s.poll_ended();
        s.record_success(None);
        s.cycle_done();
        assert_eq!(s.health(), Ok(()));
        assert_eq!(s.ready(), Ok(()));
    }

    /// A collector that stopped finishing cycles outside a source call (a thread that is gone).
    #[test]
    fn liveness_fails_when_no_cycle_finishes() {
        let s = CollectorStatus::with_restart_limit(
            Duration::from_millis(10),
            Duration::from_millis(100),
        );
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            s.health(),
            Err(
                "the collector has not finished a cycle for 0 s (limit 0 s); restart to recover"
                    .to_string()
            )
        );
    }
}
