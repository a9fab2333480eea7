//! The incident log exporter: every published snapshot's incidents ([`crate::snapshot::Incident`]) as
//! OTLP log records (`/v1/logs`, gRPC `LogsService`), over the same transport, retries and bounded
//! queue as the metrics, with the logs' own settings (`OTEL_EXPORTER_OTLP_LOGS_*`).
//!
//! The metrics exporter reads the newest snapshot at its own interval and may skip snapshots;
//! incidents are in one snapshot only, so this exporter is a [`SnapshotConsumer`]: the collector thread
//! hands it every snapshot. There it only turns the incidents into records ([`super::log_records`],
//! nothing when there are none) and appends them to a bounded buffer — never a network wait, so a down
//! collector never delays a collection. Its own thread moves the buffer into requests (at most
//! [`MAX_RECORDS_PER_REQUEST`] each) whenever the sender's queue has room and its request in flight is
//! not failing; while the collector is down that request is retried until it answers and the records
//! wait in the buffer. Beyond [`MAX_PENDING_RECORDS`] the oldest are dropped, as are the records of a
//! request the full queue drops or the collector rejects; all are counted in
//! `dcgm_otel_otlp_log_records_dropped_total`.
//! `dcgm_otel_otlp_log_buffered_records` is the buffer's depth.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;

use super::log_records::{self, PendingRecord, RecordBuilder};
use super::queue::{ExportMetrics, Queue};
use super::settings::{OtlpConfig, Protocol};
use super::OtelError;
use crate::export::SnapshotConsumer;
use crate::lock::LockExt;
use crate::snapshot::Snapshot;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Records kept while they cannot be sent (the oldest are dropped beyond this).
pub const MAX_PENDING_RECORDS: usize = 10_000;
/// Records in one export request at most.
pub const MAX_RECORDS_PER_REQUEST: usize = 1_000;
/// How often the export thread looks again while the sender's queue is full.
const FULL_QUEUE_RECHECK: Duration = Duration::from_millis(200);

struct Buffer {
    records: VecDeque<PendingRecord>,
    closed: bool,
}

/// The records between the collector thread and the export thread.
struct Pending {
    buffer: Mutex<Buffer>,
    wake: Condvar,
    max: usize,
    metrics: Arc<ExportMetrics>,
    /// `dcgm_otel_otlp_log_buffered_records`.
    depth: Arc<Metric>,
}

impl Pending {
    fn new(
        max: usize,
        metrics: Arc<ExportMetrics>,
        registry: &SelfMetrics,
        protocol: &str,
    ) -> Self {
        Pending {
            buffer: Mutex::new(Buffer {
                records: VecDeque::new(),
                closed: false,
            }),
            wake: Condvar::new(),
            max: max.max(1),
            metrics,
            depth: registry.gauge(
                "dcgm_otel_otlp_log_buffered_records",
                "Incident log records waiting for room in the OTLP log send queue (bounded; beyond the bound the oldest are dropped and counted).",
                &[("protocol", protocol)],
            ),
        }
    }

    fn push(&self, records: Vec<PendingRecord>) {
        if records.is_empty() {
            return;
        }
        {
            let mut b = self.buffer.lock_unpoisoned();
            if b.closed {
                return;
            }
            let mut dropped = 0usize;
            for r in records {
                if b.records.len() >= self.max {
                    b.records.pop_front();
                    dropped += 1;
                }
                b.records.push_back(r);
            }
            self.depth.set(b.records.len() as f64);
            if dropped > 0 {
                if let Some(m) = &self.metrics.dropped_items {
                    m.add(dropped as f64);
                }
                tracing::debug!(
                    dropped,
                    "incident log buffer full; the oldest records are dropped"
                );
            }
        }
        self.wake.notify_one();
    }
}

/// The consumer the collector thread hands every snapshot to.
pub struct IncidentLogs {
    builder: RecordBuilder,
    pending: Arc<Pending>,
}

impl SnapshotConsumer for IncidentLogs {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>) {
        if snapshot.incidents.is_empty() {
            return;
        }
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.builder.records(snapshot)
        }));
        match built {
            Ok(records) => self.pending.push(records),
            Err(_) => tracing::error!("building incident log records panicked; they are skipped"),
        }
    }
}

/// The running log exporter.
pub struct LogsExport {
    consumer: Arc<IncidentLogs>,
    thread: std::thread::JoinHandle<()>,
    queue: Arc<Queue>,
    done: std::sync::mpsc::Receiver<()>,
    drain_timeout: Duration,
}

/// Start the sender (its transport checked now) and the export thread.
pub fn start(
    cfg: &OtlpConfig,
    builder: RecordBuilder,
    self_metrics: &SelfMetrics,
) -> Result<LogsExport, OtelError> {
    start_with_capacity(cfg, builder, self_metrics, MAX_PENDING_RECORDS)
}

/// [`start`] with a record buffer of `max_records`.
pub fn start_with_capacity(
    cfg: &OtlpConfig,
    builder: RecordBuilder,
    self_metrics: &SelfMetrics,
    max_records: usize,
) -> Result<LogsExport, OtelError> {
    let protocol = match cfg.protocol {
        Protocol::Grpc => "grpc",
        Protocol::HttpProtobuf => "http/protobuf",
    };
    let metrics = Arc::new(ExportMetrics::for_logs(self_metrics, protocol));
    let queue = Queue::for_records(cfg.max_pending, metrics.clone());
    // Records come every collection: a collector that returns gets them within an interval.
    queue.cap_retry_delay(cfg.interval);
    let done = super::spawn_sender(cfg, queue.clone(), metrics.clone())?;
    let pending = Arc::new(Pending::new(
        max_records,
        metrics.clone(),
        self_metrics,
        protocol,
    ));
    let spawned = {
        let (pending, queue) = (pending.clone(), queue.clone());
        std::thread::Builder::new()
            .name("otlp-logs".into())
            .spawn(move || run(&pending, &queue, &metrics))
    };
    let thread = spawned.map_err(|e| {
        queue.close();
        OtelError::Thread(e.to_string())
    })?;
    tracing::info!(
        endpoint = %cfg.endpoint,
        protocol,
        tls = cfg.is_tls(),
        gzip = cfg.gzip,
        "OTLP incident log records enabled"
    );
    Ok(LogsExport {
        consumer: Arc::new(IncidentLogs { builder, pending }),
        thread,
        queue,
        done,
        drain_timeout: cfg.timeout.min(Duration::from_secs(5)),
    })
}

/// The export thread: buffer → requests while the queue has room, until closed and drained.
fn run(pending: &Pending, queue: &Queue, metrics: &ExportMetrics) {
    loop {
        let batch: Vec<PendingRecord> = {
            let mut b = pending.buffer.lock_unpoisoned();
            loop {
                let closing = b.closed;
                if b.records.is_empty() {
                    if closing {
                        return;
                    }
                } else if closing || (queue.has_room() && !queue.is_failing()) {
                    break;
                }
                b = if b.records.is_empty() {
                    // Nothing to send: sleep until a snapshot brings records or shutdown.
                    match pending.wake.wait(b) {
                        Ok(b) => b,
                        Err(poisoned) => poisoned.into_inner(),
                    }
                } else {
                    // The sender is behind or its request is failing (collector down): the records
                    // wait here, bounded; look again shortly.
                    match pending.wake.wait_timeout(b, FULL_QUEUE_RECHECK) {
                        Ok((b, _)) => b,
                        Err(poisoned) => poisoned.into_inner().0,
                    }
                };
            }
            let n = b.records.len().min(MAX_RECORDS_PER_REQUEST);
            let batch = b.records.drain(..n).collect();
            pending.depth.set(b.records.len() as f64);
            batch
        };
        let started = Instant::now();
        let built = log_records::request(batch);
        let body = built.request.encode_to_vec();
        metrics.encode_seconds.set(started.elapsed().as_secs_f64());
        metrics.request_bytes.set(body.len() as f64);
        metrics.data_points.set(built.records as f64);
        metrics.resources.set(built.resources as f64);
        queue.push_items(Bytes::from(body), built.records);
    }
}

impl LogsExport {
    /// What the collector thread hands every snapshot to.
    pub fn consumer(&self) -> Arc<dyn SnapshotConsumer> {
        self.consumer.clone()
    }

    /// Send what is buffered, then give the sender up to the request timeout (at most 5 s) to deliver
    /// it. Blocks; call it outside any async runtime.
    pub fn shutdown(self) {
        let pending = &self.consumer.pending;
        pending.buffer.lock_unpoisoned().closed = true;
        pending.wake.notify_one();
        if self.thread.join().is_err() {
            tracing::warn!("the OTLP log export thread ended with a panic");
        }
        self.queue.close();
        if self.done.recv_timeout(self.drain_timeout).is_err() {
            tracing::warn!("OTLP log sender did not finish within the shutdown timeout; pending log records are dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::logs::v1::LogRecord;
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn record(t: u64) -> PendingRecord {
        PendingRecord {
            resource_key: Arc::from(Vec::new()),
            resource: Arc::new(Resource::default()),
            record: LogRecord {
                time_unix_nano: t,
                ..LogRecord::default()
            },
            schema_url: "",
        }
    }

    #[test]
    fn a_full_buffer_drops_the_oldest_records_and_counts_them() {
        let registry = SelfMetrics::default();
        let metrics = Arc::new(ExportMetrics::for_logs(&registry, "grpc"));
        let pending = Pending::new(3, metrics.clone(), &registry, "grpc");
        pending.push((1..=2).map(record).collect());
        pending.push((3..=5).map(record).collect());
        let kept: Vec<u64> = pending
            .buffer
            .lock_unpoisoned()
            .records
            .iter()
            .map(|r| r.record.time_unix_nano)
            .collect();
        assert_eq!(kept, vec![3, 4, 5]);
        let mut text = String::new();
        registry.render(&mut text);
        assert!(
            text.contains("dcgm_otel_otlp_log_records_dropped_total{protocol=\"grpc\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("dcgm_otel_otlp_log_buffered_records{protocol=\"grpc\"} 3"),
            "{text}"
        );
        // A request the full queue drops counts its records too.
        let queue = Queue::new(1, metrics.clone());
        queue.push_items(Bytes::from_static(b"a"), 4);
        queue.push_items(Bytes::from_static(b"b"), 1);
        let mut text = String::new();
        registry.render(&mut text);
        assert!(
            text.contains("dcgm_otel_otlp_log_records_dropped_total{protocol=\"grpc\"} 6"),
            "{text}"
        );
        assert!(
            text.contains("dcgm_otel_otlp_log_dropped_exports_total{protocol=\"grpc\"} 1"),
            "{text}"
        );
    }
}
