//! Publication and the watchdog: a snapshot goes to the store and the consumers and its outcome to
//! the health status under one lock, from the collector thread or from the watchdog thread that
//! withdraws the series of a poll stuck past the freshness limit. Serialised, so a late withdrawal
//! never hides fresh data.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::status::CollectorStatus;
use crate::counters::CounterSet;
use crate::export::SnapshotConsumer;
use crate::lock::LockExt;
use crate::snapshot::{HostInfo, Snapshot, SnapshotStore};
use crate::telemetry::self_metrics::Metric;

/// How a collection ended, as the health status records it.
pub(super) enum Outcome {
    /// The source was read; it may still say why it is not ready.
    Read {
        not_ready: Option<String>,
    },
    Failed(String),
}

/// Publication: the store, the consumers and the health status change together, under one lock, from
/// the collector thread and from the watchdog.
pub(super) struct Publisher {
    pub(super) store: Arc<SnapshotStore>,
    pub(super) consumers: Vec<Arc<dyn SnapshotConsumer>>,
    pub(super) status: Arc<CollectorStatus>,
    /// The counters of empty snapshots (the running set; replaced by a reload).
    pub(super) counters: arc_swap::ArcSwap<CounterSet>,
    pub(super) host: Arc<HostInfo>,
    /// Sequence number of the last snapshot published.
    pub(super) seq: AtomicU64,
    pub(super) source_up: Arc<Metric>,
    pub(super) stuck_total: Arc<Metric>,
}

impl Publisher {
    /// A snapshot without entities (its `seq` is set when it is published).
    pub(super) fn empty_snapshot(&self, seq: u64) -> Snapshot {
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
    pub(super) fn publish_locked(&self, mut snapshot: Snapshot, outcome: Outcome) {
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

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.status.publication.lock_unpoisoned()
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
pub(super) fn watch_polls(publisher: Arc<Publisher>, interval: Duration, stop: Receiver<()>) {
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
