//! The export thread of the metrics request: which collections are sent, and when. It is woken by
//! every publication of a snapshot (a [`PublicationTrigger`] among the collector thread's consumers),
//! not by a clock of its own, so it never races the collection it is meant to send:
//! - export interval ≤ collect interval (the default: equal): every collection is sent once, as soon
//!   as it is published;
//! - a longer export interval: a collection is sent when at least the export interval less half a
//!   collect interval has passed since the previous export (the first one that long after start), so
//!   the interval is kept in whole collections (60 s at `-c 30000` sends every second collection); the
//!   collections between are not sent on their own (cumulative sums carry them on, delta points span
//!   them).
//!
//! A collection is never sent twice. At shutdown the newest one is sent if it was not yet. Encoded
//! requests go to the bounded queue ([`super::queue`]); the builder is [`super::request`].

use std::sync::mpsc::{self, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::queue::{ExportMetrics, Queue};
use super::request::DirectBuilder;
use crate::export::SnapshotConsumer;
use crate::snapshot::{Snapshot, SnapshotStore};

/// What wakes the export thread.
enum Wake {
    Published,
    Stop,
}

/// The shortest time between two exports: none when every collection is sent (export interval at
/// most the collect interval), else the export interval less half a collect interval.
pub fn min_gap(export: Duration, collect: Duration) -> Duration {
    if export <= collect {
        Duration::ZERO
    } else {
        export - collect / 2
    }
}

/// The export thread; [`DirectExport::shutdown`] exports once more and stops.
pub struct DirectExport {
    wake: SyncSender<Wake>,
    thread: std::thread::JoinHandle<()>,
}

/// The collector thread's side: tells the export thread of each publication (never blocks: a
/// wake-up already pending covers the next one, the thread reads the newest snapshot).
pub struct PublicationTrigger {
    wake: SyncSender<Wake>,
}

impl SnapshotConsumer for PublicationTrigger {
    fn on_snapshot(&self, _: &Arc<Snapshot>) {
        let _ = self.wake.try_send(Wake::Published);
    }
}

/// What one export reports to the self-metrics and the queue.
struct Exporter {
    builder: DirectBuilder,
    store: Arc<SnapshotStore>,
    queue: Arc<Queue>,
    metrics: Arc<ExportMetrics>,
    /// The snapshot exported last (not exported twice).
    last_seq: Option<u64>,
}

impl Exporter {
    fn export(&mut self) {
        let Some(snap) = self.store.latest() else {
            return;
        };
        if self.last_seq == Some(snap.seq) {
            return;
        }
        self.last_seq = Some(snap.seq);
        let encoded = self.builder.build_encoded(&snap);
        if encoded.data_points == 0 {
            return;
        }
        self.metrics
            .collect_seconds
            .set(encoded.build_time.as_secs_f64());
        self.metrics
            .encode_seconds
            .set(encoded.encode_time.as_secs_f64());
        self.metrics.request_bytes.set(encoded.body.len() as f64);
        self.metrics.data_points.set(encoded.data_points as f64);
        self.metrics.resources.set(encoded.resources as f64);
        self.queue.push(Bytes::from(encoded.body));
    }

    /// One export; a panic (a bug) skips this export instead of ending all of them.
    fn export_guarded(&mut self) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.export()));
        if r.is_err() {
            tracing::error!("building the OTLP request panicked; this export is skipped");
        }
    }

    /// Export the publications `wake` announces, at most one per `gap` (the first no sooner than `gap`
    /// after start), until told to stop; then the newest once more.
    fn run(mut self, wake: mpsc::Receiver<Wake>, gap: Duration) {
        let mut due = Instant::now() + gap;
        loop {
            match wake.recv() {
                Ok(Wake::Published) => {
                    let now = Instant::now();
                    if now >= due {
                        self.export_guarded();
                        due = now + gap;
                    }
                }
                Ok(Wake::Stop) | Err(_) => {
                    self.export_guarded();
                    return;
                }
            }
        }
    }
}

/// Start the export thread for publications of `store`: `export` and `collect` are the two intervals
/// ([`min_gap`]). Returns the thread and the trigger the collector thread must be given.
pub fn spawn(
    builder: DirectBuilder,
    store: Arc<SnapshotStore>,
    queue: Arc<Queue>,
    metrics: Arc<ExportMetrics>,
    (export, collect): (Duration, Duration),
) -> std::io::Result<(DirectExport, PublicationTrigger)> {
    let (wake, wake_rx) = mpsc::sync_channel::<Wake>(1);
    let exporter = Exporter {
        builder,
        store,
        queue,
        metrics,
        last_seq: None,
    };
    let gap = min_gap(export, collect);
    let thread = std::thread::Builder::new()
        .name("otlp-direct".into())
        .spawn(move || exporter.run(wake_rx, gap))?;
    Ok((
        DirectExport {
            wake: wake.clone(),
            thread,
        },
        PublicationTrigger { wake },
    ))
}

impl DirectExport {
    /// Export the newest snapshot (if not exported yet) and end the thread.
    pub fn shutdown(self) {
        let _ = self.wake.send(Wake::Stop);
        if self.thread.join().is_err() {
            tracing::warn!("the OTLP export thread ended with a panic");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_collection_when_the_intervals_are_equal_else_whole_collections() {
        let s = Duration::from_secs;
        assert_eq!(min_gap(s(30), s(30)), Duration::ZERO);
        assert_eq!(min_gap(s(10), s(30)), Duration::ZERO);
        assert_eq!(min_gap(s(60), s(30)), s(45));
        assert_eq!(min_gap(s(3600), s(30)), s(3585));
    }
}
