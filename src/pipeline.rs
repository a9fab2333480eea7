//! The collection pipeline: one OS thread that, every collect interval, polls the source, applies the
//! enrichers, publishes an immutable [`Snapshot`] with one atomic swap and hands it to the consumers
//! (the Prometheus renderer, the OTel side). Collection runs on its own schedule; nothing here is ever
//! called from a scrape. When the source fails, an empty snapshot is published (its series disappear,
//! never served stale) and `/health` turns 503 until a poll succeeds again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;

use crate::config::counters::CounterSet;
use crate::enrich::Enricher;
use crate::export::self_metrics::{Metric, SelfMetrics};
use crate::export::SnapshotConsumer;
use crate::snapshot::{Absent, FieldValue, HostInfo, Snapshot};
use crate::source::{Source, SourceError};

/// The newest published snapshot, readable from any thread without locks.
#[derive(Default)]
pub struct SnapshotStore {
    latest: ArcSwapOption<Snapshot>,
}

impl SnapshotStore {
    pub fn new() -> Arc<SnapshotStore> {
        Arc::new(SnapshotStore::default())
    }
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.latest.load_full()
    }
    pub fn publish(&self, snap: Arc<Snapshot>) {
        self.latest.store(Some(snap));
    }
}

/// Health of the collection, read by `/health` and `/ready`.
pub struct CollectorStatus {
    interval: Duration,
    started: Instant,
    /// Milliseconds since `started` of the last successful collection, +1 (0 = never).
    last_success_ms: AtomicU64,
    ever_succeeded: AtomicBool,
    source_up: AtomicBool,
    last_error: Mutex<Option<String>>,
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
        })
    }

    /// True once the first collection has been published.
    pub fn ready(&self) -> bool {
        self.ever_succeeded.load(Ordering::Acquire)
    }

    /// `Ok(())` when the last collection succeeded and is fresh (younger than 2 intervals + 5 s);
    /// otherwise the reason.
    pub fn health(&self) -> Result<(), String> {
        if !self.source_up.load(Ordering::Acquire) {
            let err = match self.last_error.lock() {
                Ok(e) => e.clone(),
                Err(p) => p.into_inner().clone(),
            };
            return Err(match err {
                Some(e) => format!("source down: {e}"),
                None => "no collection yet".to_string(),
            });
        }
        let last = self.last_success_ms.load(Ordering::Acquire);
        let age = Duration::from_millis(
            (self.started.elapsed().as_millis() as u64).saturating_sub(last.saturating_sub(1)),
        );
        let limit = self.interval * 2 + Duration::from_secs(5);
        if age > limit {
            return Err(format!(
                "stale: last successful collection {:.1}s ago (collect interval {:.1}s)",
                age.as_secs_f64(),
                self.interval.as_secs_f64()
            ));
        }
        Ok(())
    }

    fn record_success(&self) {
        self.last_success_ms.store(
            self.started.elapsed().as_millis() as u64 + 1,
            Ordering::Release,
        );
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
}

impl PipelineMetrics {
    fn new(registry: Arc<SelfMetrics>, source: &str) -> Self {
        let labels = [("source", source)];
        PipelineMetrics {
            duration: registry.gauge(
                "dcgm_otel_collect_duration_seconds",
                "Wall time of the last collection (source poll, enrichment, publication, rendering).",
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
                    "Values not exported because DCGM reported them blank, not supported, not found, not permitted or in error, by field and reason.",
                    &[("field", field), ("reason", reason.as_str())],
                )
            });
        m.add(n as f64);
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
}

impl Pipeline {
    /// Run collections until `stop` receives a message or is disconnected. Blocks the calling thread.
    pub fn run(mut self, stop: Receiver<()>) {
        let mut metrics = PipelineMetrics::new(self.self_metrics.clone(), self.source.name());
        let mut seq = 0u64;
        let mut next = Instant::now();
        let mut was_down = false;
        let mut failure: Option<String> = None;
        loop {
            let started = Instant::now();
            seq += 1;
            metrics.collects.inc();
            let snapshot = match self.source.poll() {
                Ok(mut reading) => {
                    for e in &mut self.enrichers {
                        e.enrich(&mut reading.entities);
                    }
                    self.count_absent(&reading, &mut metrics);
                    if was_down {
                        tracing::info!(
                            source = self.source.name(),
                            "source is back; collection resumed"
                        );
                        was_down = false;
                    }
                    metrics.source_up.set(1.0);
                    metrics.last_success.set(
                        SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .map(|d| d.as_secs_f64())
                            .unwrap_or(0.0),
                    );
                    Snapshot {
                        seq,
                        taken_at: SystemTime::now(),
                        counters: self.counters.clone(),
                        host: self.host.clone(),
                        driver_version: reading.driver_version,
                        entities: reading.entities,
                    }
                }
                Err(err) => {
                    metrics.errors.inc();
                    metrics.source_up.set(0.0);
                    let msg = err.to_string();
                    if !was_down {
                        match &err {
                            SourceError::Unavailable(_) => {
                                tracing::error!(source = self.source.name(), error = %msg, "source unavailable; its series are withdrawn until it is back")
                            }
                            SourceError::Failed(_) => {
                                tracing::error!(source = self.source.name(), error = %msg, "collection failed; series withdrawn")
                            }
                        }
                        was_down = true;
                    } else {
                        tracing::debug!(error = %msg, "source still down");
                    }
                    failure = Some(msg);
                    Snapshot {
                        seq,
                        taken_at: SystemTime::now(),
                        counters: self.counters.clone(),
                        host: self.host.clone(),
                        driver_version: None,
                        entities: Vec::new(),
                    }
                }
            };
            let snapshot = Arc::new(snapshot);
            self.store.publish(snapshot.clone());
            metrics.duration.set(started.elapsed().as_secs_f64());
            for c in &self.consumers {
                c.on_snapshot(&snapshot);
            }
            // Health follows what /metrics now serves: only after the consumers rendered this snapshot
            // does /health say up (or down), so a 503 never coexists with the previous series.
            match failure.take() {
                None => {
                    self.status.record_success();
                    self.status.mark_ready();
                }
                Some(msg) => self.status.record_failure(&msg),
            }
            next += self.interval;
            let now = Instant::now();
            if next < now {
                // A slow cycle: skip the missed ticks instead of bursting.
                next = now + self.interval;
            }
            match stop.recv_timeout(next - now) {
                Err(RecvTimeoutError::Timeout) => continue,
                _ => break,
            }
        }
        self.source.shutdown();
        tracing::info!("collector stopped");
    }

    fn count_absent(&self, reading: &crate::snapshot::Reading, metrics: &mut PipelineMetrics) {
        for (i, row) in self.counters.rows.iter().enumerate() {
            let mut counts: [u64; 5] = [0; 5];
            for e in &reading.entities {
                if let Some(FieldValue::Absent(reason)) = e.values.get(i) {
                    let slot = match reason {
                        Absent::Blank => 0,
                        Absent::NotSupported => 1,
                        Absent::NotFound => 2,
                        Absent::NotPermissioned => 3,
                        Absent::Error => 4,
                        Absent::NotApplicable => continue,
                    };
                    counts[slot] += 1;
                }
            }
            for (slot, reason) in [
                Absent::Blank,
                Absent::NotSupported,
                Absent::NotFound,
                Absent::NotPermissioned,
                Absent::Error,
            ]
            .into_iter()
            .enumerate()
            {
                if counts[slot] > 0 {
                    metrics.count_absent(i, &row.name, reason, counts[slot]);
                }
            }
        }
    }
}
