//! What the library's caller collects: each publication of the collector, as the OTLP request bytes
//! the binary would push for it. A [`SnapshotConsumer`] on the collector thread notes each
//! publication and turns its incidents into log records (the binary's
//! [`crate::export::otel::otlp::logs`] does the same); the caller's [`Outbox::collect`] waits for the
//! next publication, then builds the metrics request with the binary's request builder
//! ([`DirectBuilder`]) and the log request from the records gathered since the previous call.
//!
//! Every collection is returned once; one the caller did not collect before the next was published is
//! skipped for metrics (cumulative sums carry it on, as the binary's longer export intervals do), never
//! for log records, which wait in a bounded buffer (the oldest dropped and counted beyond
//! [`MAX_PENDING_RECORDS`]).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use prost::Message;

use crate::export::otel::otlp::log_records::{self, PendingRecord, RecordBuilder};
use crate::export::otel::otlp::logs::MAX_PENDING_RECORDS;
use crate::export::otel::otlp::request::DirectBuilder;
use crate::export::SnapshotConsumer;
use crate::lock::LockExt;
use crate::snapshot::{Snapshot, SnapshotStore};

/// One collection's requests, encoded (`ExportMetricsServiceRequest`, `ExportLogsServiceRequest`).
#[derive(Debug, Default)]
pub struct Collected {
    /// The metrics request; empty when no new collection was published within the wait, or when
    /// the collection had no data point (the source was down: its series are withdrawn).
    pub metrics: Vec<u8>,
    pub data_points: usize,
    /// The incident log records since the previous call; empty when there were none.
    pub logs: Vec<u8>,
    pub log_records: usize,
    /// Log records dropped since the previous call (the buffer was full: the caller fell behind).
    pub log_records_dropped: u64,
    /// The collection's sequence number (0: none yet).
    pub seq: u64,
}

struct Pending {
    /// The newest publication's sequence number.
    published: u64,
    records: VecDeque<PendingRecord>,
    dropped: u64,
}

/// The consumer the collector thread feeds, and what the caller collects from.
pub struct Outbox {
    pending: Mutex<Pending>,
    published: Condvar,
    records: Option<RecordBuilder>,
}

impl SnapshotConsumer for Outbox {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>) {
        let records = match &self.records {
            Some(builder) if !snapshot.incidents.is_empty() => {
                let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    builder.records(snapshot)
                }));
                built.unwrap_or_else(|_| {
                    tracing::error!("building incident log records panicked; they are skipped");
                    Vec::new()
                })
            }
            _ => Vec::new(),
        };
        let mut p = self.pending.lock_unpoisoned();
        p.published = p.published.max(snapshot.seq);
        for r in records {
            if p.records.len() >= MAX_PENDING_RECORDS {
                p.records.pop_front();
                p.dropped += 1;
            }
            p.records.push_back(r);
        }
        drop(p);
        self.published.notify_all();
    }
}

/// The caller's side: the metrics builder and the last collection returned.
pub struct Collector {
    builder: DirectBuilder,
    store: Arc<SnapshotStore>,
    last_seq: u64,
}

impl Outbox {
    /// `records`: the incident log records' builder (`None`: no log records).
    pub fn new(records: Option<RecordBuilder>) -> Arc<Outbox> {
        Arc::new(Outbox {
            pending: Mutex::new(Pending {
                published: 0,
                records: VecDeque::new(),
                dropped: 0,
            }),
            published: Condvar::new(),
            records,
        })
    }

    /// Wait at most `wait` for a publication newer than the last one collected, then build its
    /// requests. Returns empty requests when none came in time.
    pub fn collect(&self, collector: &mut Collector, wait: Duration) -> Collected {
        let deadline = Instant::now() + wait;
        let mut p = self.pending.lock_unpoisoned();
        while p.published <= collector.last_seq && p.records.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            p = match self.published.wait_timeout(p, left) {
                Ok((p, _)) => p,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        let records: Vec<PendingRecord> = p.records.drain(..).collect();
        let dropped = std::mem::take(&mut p.dropped);
        drop(p);
        let mut out = Collected {
            log_records_dropped: dropped,
            ..Collected::default()
        };
        if !records.is_empty() {
            let built = log_records::request(records);
            out.log_records = built.records;
            out.logs = built.request.encode_to_vec();
        }
        if let Some(snap) = collector.store.latest() {
            if snap.seq > collector.last_seq {
                collector.last_seq = snap.seq;
                let encoded = collector.builder.build_encoded(&snap);
                if encoded.data_points > 0 {
                    out.data_points = encoded.data_points;
                    out.metrics = encoded.body;
                }
            }
            out.seq = snap.seq;
        }
        out
    }
}

impl Collector {
    pub fn new(builder: DirectBuilder, store: Arc<SnapshotStore>) -> Collector {
        Collector {
            builder,
            store,
            last_seq: 0,
        }
    }
}
