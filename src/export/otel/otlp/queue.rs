//! The bounded queue of encoded OTLP requests and the sender that delivers it: the producers (the
//! direct builder's export thread, [`super::request`], or the SDK pipeline's reader) push encoded
//! requests; a sender thread with its own single-threaded tokio runtime delivers them through
//! [`super::transport`].
//!
//! Nothing here runs on the collector thread or on the HTTP server's runtime, so a slow or down
//! collector never delays a scrape of :9400 nor a collection. The queue holds at most `max_pending`
//! requests; when full, the oldest is dropped (cumulative data is superseded by newer data anyway) and
//! counted in `dcgm_otel_otlp_dropped_exports_total`. A retryable failure is retried at most
//! [`MAX_RETRIES`] times per request; a permanent failure is not retried. Failures are logged when the
//! state changes, not on every attempt.
//!
//! The retry schedule ([`crate::retry::Backoff`]): after a retryable failure the next attempt — a retry,
//! or the first attempt of the next request — waits, counted from the moment the failure was known (the
//! answer arrived, or the request timed out), the capped exponential backoff of the consecutive failures
//! (250 ms doubling to 5 s but never past one export interval, times a random factor in [0.5, 1]: a
//! collector that returns gets the next attempt within an interval), or the delay the server asked for
//! (gRPC `RetryInfo`, HTTP `Retry-After`; capped at 60 s) when that is longer. So a collector that
//! answers late, or accepts and never answers, gets no attempts back to back; a request queued during a
//! wait does not shorten it (only shutdown does: the last attempts go at once).
//!
//! A queue of log records ([`Queue::for_records`]) differs in one way: records are events, not a state a
//! later request supersedes, so its request in flight is retried until the collector answers (or the
//! exporter shuts down) and [`Queue::is_failing`] tells the producer to keep further records in its
//! own bounded buffer meanwhile. Records of a request given up (rejected, or unsent at shutdown) are
//! counted as dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::transport::{Delivered, SendError, Transport};
use crate::lock::LockExt;
use crate::retry::Backoff;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Retries of one request after its first attempt.
pub const MAX_RETRIES: u32 = 5;
const BACKOFF_INITIAL: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// 250 ms doubling to 5 s, lowered to the export interval by [`Queue::cap_retry_delay`].
const BACKOFF: Backoff = Backoff::new(BACKOFF_INITIAL, BACKOFF_MAX);
const SERVER_DELAY_MAX: Duration = Duration::from_secs(60);

/// The exporter's self-metrics.
pub struct ExportMetrics {
    pub exports: Arc<Metric>,
    pub failed_permanent: Arc<Metric>,
    pub failed_exhausted: Arc<Metric>,
    pub retries: Arc<Metric>,
    pub dropped: Arc<Metric>,
    pub rejected_points: Arc<Metric>,
    pub partial: Arc<Metric>,
    pub sent_bytes: Arc<Metric>,
    pub request_bytes: Arc<Metric>,
    pub data_points: Arc<Metric>,
    pub resources: Arc<Metric>,
    pub encode_seconds: Arc<Metric>,
    pub collect_seconds: Arc<Metric>,
    pub send_seconds: Arc<Metric>,
    pub pending: Arc<Metric>,
    /// Log records in requests the queue dropped and records the incident buffer dropped (the log
    /// exporter only: metrics requests supersede each other, so their points are not counted).
    pub dropped_items: Option<Arc<Metric>>,
    /// The log exporter's: a partial success counts rejected log records, not data points.
    pub records: bool,
}

/// What one exporter's self-metrics are called: the metrics exporter's `dcgm_otel_otlp_*` or the log
/// exporter's `dcgm_otel_otlp_log_*`.
struct Naming {
    prefix: &'static str,
    /// What a request carries, in metric names (`data_points`, `records`) and in help text.
    items: &'static str,
    items_text: &'static str,
    what: &'static str,
    /// Whether dropped items are counted (`<prefix><items>_dropped_total`).
    count_drops: bool,
}

impl ExportMetrics {
    /// The metrics exporter's self-metrics (`dcgm_otel_otlp_*`).
    pub fn new(r: &SelfMetrics, protocol: &str) -> ExportMetrics {
        Self::named(
            r,
            protocol,
            Naming {
                prefix: "dcgm_otel_otlp_",
                items: "data_points",
                items_text: "Data points",
                what: "OTLP export requests",
                count_drops: false,
            },
        )
    }

    /// The incident log exporter's self-metrics (`dcgm_otel_otlp_log_*`).
    pub fn for_logs(r: &SelfMetrics, protocol: &str) -> ExportMetrics {
        Self::named(
            r,
            protocol,
            Naming {
                prefix: "dcgm_otel_otlp_log_",
                items: "records",
                items_text: "Log records",
                what: "OTLP log export requests",
                count_drops: true,
            },
        )
    }

    fn named(r: &SelfMetrics, protocol: &str, n: Naming) -> ExportMetrics {
        let p = [("protocol", protocol)];
        let Naming {
            prefix,
            items,
            items_text,
            what,
            count_drops,
        } = n;
        let failures = format!("{what} given up, by reason (permanent: rejected by the receiver; retries_exhausted: still failing after the retries).");
        ExportMetrics {
            exports: r.counter(&format!("{prefix}exports_total"), &format!("{what} delivered."), &p),
            failed_permanent: r.counter(
                &format!("{prefix}export_failures_total"),
                &failures,
                &[("protocol", protocol), ("reason", "permanent")],
            ),
            failed_exhausted: r.counter(
                &format!("{prefix}export_failures_total"),
                &failures,
                &[("protocol", protocol), ("reason", "retries_exhausted")],
            ),
            retries: r.counter(
                &format!("{prefix}retries_total"),
                &format!(
                    "{} attempts that failed and were retried.",
                    what.trim_end_matches(" requests")
                ),
                &p,
            ),
            dropped: r.counter(
                &format!("{prefix}dropped_exports_total"),
                &format!("{what} dropped unsent because the pending queue was full (oldest first)."),
                &p,
            ),
            rejected_points: r.counter(
                &format!("{prefix}rejected_{items}_total"),
                &format!("{items_text} the OTLP receiver rejected in partial-success answers."),
                &p,
            ),
            partial: r.counter(
                &format!("{prefix}partial_successes_total"),
                &format!("{what} answered with a partial success."),
                &p,
            ),
            sent_bytes: r.counter(
                &format!("{prefix}sent_bytes_total"),
                "Bytes of delivered OTLP request bodies (after gzip for http/protobuf; protobuf size for gRPC).",
                &p,
            ),
            request_bytes: r.gauge(
                &format!("{prefix}request_bytes"),
                "Size of the last encoded OTLP request (protobuf, before compression).",
                &p,
            ),
            data_points: r.gauge(
                &format!("{prefix}{items}"),
                &format!("{items_text} in the last OTLP request."),
                &p,
            ),
            resources: r.gauge(&format!("{prefix}resources"), "Resources in the last OTLP request.", &p),
            encode_seconds: r.gauge(
                &format!("{prefix}encode_duration_seconds"),
                "Time to encode the last OTLP request after it was built.",
                &p,
            ),
            collect_seconds: r.gauge(
                &format!("{prefix}collect_duration_seconds"),
                "Time to build the last OTLP request from the snapshot.",
                &p,
            ),
            send_seconds: r.gauge(
                &format!("{prefix}export_duration_seconds"),
                "Time of the last delivered OTLP request, send to answer.",
                &p,
            ),
            pending: r.gauge(&format!("{prefix}pending_exports"), &format!("{what} waiting to be sent."), &p),
            dropped_items: count_drops.then(|| {
                r.counter(
                    &format!("{prefix}{items}_dropped_total"),
                    &format!("{items_text} dropped unsent: a bounded buffer was full (oldest first), or their request was rejected or still unsent at shutdown."),
                    &p,
                )
            }),
            records: count_drops,
        }
    }
}

struct QueueInner {
    /// Encoded requests and how many items (log records) each carries.
    items: VecDeque<(Bytes, usize)>,
    closed: bool,
}

/// Bounded queue of encoded requests between the reader thread and the sender thread.
pub struct Queue {
    inner: Mutex<QueueInner>,
    notify: tokio::sync::Notify,
    /// Told once when the queue closes: ends a wait between attempts.
    closing: tokio::sync::Notify,
    max: usize,
    metrics: Arc<ExportMetrics>,
    /// Longest backoff between retries, ms ([`Queue::cap_retry_delay`]).
    retry_cap_ms: AtomicU64,
    /// Retry a retryable failure until it succeeds (log records), not [`MAX_RETRIES`] times.
    persistent: bool,
    /// The request in flight is failing (set by the sender; cleared by a delivery).
    failing: AtomicBool,
}

impl Queue {
    pub fn new(max: usize, metrics: Arc<ExportMetrics>) -> Arc<Queue> {
        Self::build(max, metrics, false)
    }

    /// The queue of a log-record exporter: its request in flight is retried until delivered.
    pub fn for_records(max: usize, metrics: Arc<ExportMetrics>) -> Arc<Queue> {
        Self::build(max, metrics, true)
    }

    fn build(max: usize, metrics: Arc<ExportMetrics>, persistent: bool) -> Arc<Queue> {
        Arc::new(Queue {
            inner: Mutex::new(QueueInner {
                items: VecDeque::new(),
                closed: false,
            }),
            notify: tokio::sync::Notify::new(),
            closing: tokio::sync::Notify::new(),
            max: max.max(1),
            metrics,
            retry_cap_ms: AtomicU64::new(BACKOFF_MAX.as_millis() as u64),
            persistent,
            failing: AtomicBool::new(false),
        })
    }

    /// Whether the request in flight is failing (the collector is away): a producer of records keeps
    /// new ones in its own buffer until it is delivered.
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// Count the items of a request that will not be delivered.
    fn lost(&self, items: usize) {
        if let (true, Some(m)) = (items > 0, &self.metrics.dropped_items) {
            m.add(items as f64);
        }
    }

    /// Never wait longer than `interval` (the export interval) between retries: retries then come no
    /// faster than the exports themselves, and a collector that returns is used again within one
    /// interval (regression found by the soak, issue 18: at a 1 s interval it took up to 5 s).
    pub fn cap_retry_delay(&self, interval: Duration) {
        let cap = interval.clamp(BACKOFF_INITIAL, BACKOFF_MAX);
        self.retry_cap_ms
            .store(cap.as_millis() as u64, Ordering::Relaxed);
    }

    /// The retry schedule, its longest delay capped by [`Queue::cap_retry_delay`].
    fn backoff(&self) -> Backoff {
        BACKOFF.capped(Duration::from_millis(
            self.retry_cap_ms.load(Ordering::Relaxed),
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueInner> {
        self.inner.lock_unpoisoned()
    }

    pub fn push(&self, body: Bytes) {
        self.push_items(body, 0);
    }

    /// Push a request carrying `items` log records: dropping it counts them too.
    pub fn push_items(&self, body: Bytes, items: usize) {
        {
            let mut q = self.lock();
            if q.closed {
                return;
            }
            while q.items.len() >= self.max {
                if let (Some((_, n)), Some(m)) = (q.items.pop_front(), &self.metrics.dropped_items)
                {
                    m.add(n as f64);
                }
                self.metrics.dropped.inc();
            }
            q.items.push_back((body, items));
            self.metrics.pending.set(q.items.len() as f64);
        }
        self.notify.notify_one();
    }

    /// Whether a push would not drop anything.
    pub fn has_room(&self) -> bool {
        self.lock().items.len() < self.max
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_one();
        self.closing.notify_one();
    }

    /// Wait until `at`, or until the queue closes (a new request does not end the wait).
    async fn wait_until(&self, at: Instant) {
        if self.is_closed() {
            return;
        }
        // `close` after the check leaves a permit: this wait ends at once.
        tokio::select! {
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
            _ = self.closing.notified() => {}
        }
    }

    fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The next request and its item count, or `None` once closed and drained.
    async fn next(&self) -> Option<(Bytes, usize)> {
        loop {
            {
                let mut q = self.lock();
                if let Some(next) = q.items.pop_front() {
                    self.metrics.pending.set(q.items.len() as f64);
                    return Some(next);
                }
                if q.closed {
                    return None;
                }
            }
            self.notify.notified().await;
        }
    }
}

/// What the sender remembers between attempts.
struct SenderState {
    endpoint: String,
    /// A retryable failure is being retried (logged once until a delivery).
    failing: bool,
    /// The last permanent error logged (an identical one is only counted).
    last_permanent: Option<String>,
    /// Retryable failures in a row, across requests: the backoff step.
    failures: u32,
    /// No attempt before this (after a retryable failure).
    resume_at: Option<Instant>,
}

impl SenderState {
    /// A delivery: counted, a partial success logged, a failing state ended.
    fn delivered(&mut self, queue: &Queue, metrics: &ExportMetrics, d: Delivered, took: Duration) {
        let endpoint = &self.endpoint;
        metrics.exports.inc();
        metrics.sent_bytes.add(d.body_bytes as f64);
        metrics.send_seconds.set(took.as_secs_f64());
        if d.rejected_data_points > 0 || !d.message.is_empty() {
            metrics.partial.inc();
            metrics
                .rejected_points
                .add(d.rejected_data_points.max(0) as f64);
            let (rejected, text) = (d.rejected_data_points, &d.message);
            if metrics.records {
                tracing::warn!(%endpoint, rejected_log_records = rejected, receiver_message = %text, "OTLP receiver accepted the export only partly");
            } else {
                tracing::warn!(%endpoint, rejected_data_points = rejected, receiver_message = %text, "OTLP receiver accepted the export only partly");
            }
        }
        if self.failing || self.last_permanent.is_some() {
            tracing::info!(%endpoint, "OTLP exports delivered again");
        }
        self.answered(queue);
        self.last_permanent = None;
    }

    /// A permanent failure: counted, logged once per distinct error, not retried.
    fn rejected(&mut self, queue: &Queue, metrics: &ExportMetrics, message: String, items: usize) {
        metrics.failed_permanent.inc();
        queue.lost(items);
        self.answered(queue);
        if self.last_permanent.as_deref() != Some(message.as_str()) {
            tracing::error!(endpoint = %self.endpoint, error = %message, "OTLP export rejected; not retried (further identical errors are only counted)");
            self.last_permanent = Some(message);
        }
    }

    /// The collector answered (delivered or rejected): no more waiting.
    fn answered(&mut self, queue: &Queue) {
        self.failing = false;
        self.failures = 0;
        self.resume_at = None;
        queue.failing.store(false, Ordering::Relaxed);
    }

    /// A retryable failure known at `at` (its answer, or the timeout): the next attempt waits for the
    /// backoff of the failures in a row, or the server's delay when longer, from `at`. Returns the wait.
    fn retryable(&mut self, queue: &Queue, at: Instant, server: Option<Duration>) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let backoff = queue.backoff().jittered(self.failures);
        let delay = server.map_or(backoff, |d| d.min(SERVER_DELAY_MAX).max(backoff));
        self.resume_at = Some(at + delay);
        delay
    }
}

/// Deliver the queue until it is closed and drained.
pub async fn run_sender(
    transport: Transport,
    queue: Arc<Queue>,
    metrics: Arc<ExportMetrics>,
    endpoint: String,
) {
    let mut state = SenderState {
        endpoint,
        failing: false,
        last_permanent: None,
        failures: 0,
        resume_at: None,
    };
    while let Some((body, items)) = queue.next().await {
        let mut retry = 0u32;
        loop {
            if let Some(at) = state.resume_at {
                queue.wait_until(at).await;
            }
            let started = Instant::now();
            let sent = transport.send(&body).await;
            let ended = Instant::now();
            let (message, retry_after) = match sent {
                Ok(d) => {
                    state.delivered(&queue, &metrics, d, ended - started);
                    break;
                }
                Err(SendError::Permanent(message)) => {
                    state.rejected(&queue, &metrics, message, items);
                    break;
                }
                Err(SendError::Retryable {
                    message,
                    retry_after,
                }) => (message, retry_after),
            };
            let delay = state.retryable(&queue, ended, retry_after);
            let endpoint = &state.endpoint;
            if (retry >= MAX_RETRIES && !queue.persistent) || queue.is_closed() {
                metrics.failed_exhausted.inc();
                queue.lost(items);
                tracing::debug!(%endpoint, error = %message, retries = retry, "OTLP export given up");
                break;
            }
            queue.failing.store(true, Ordering::Relaxed);
            retry += 1;
            metrics.retries.inc();
            if !state.failing {
                tracing::warn!(%endpoint, error = %message, retry_in_ms = delay.as_millis() as u64, "OTLP export failed; retrying with backoff (further failures are only counted until it recovers)");
                state.failing = true;
            } else {
                tracing::debug!(%endpoint, error = %message, retry, retry_in_ms = delay.as_millis() as u64, "OTLP export failed again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_never_wait_past_the_export_interval() {
        let m = Arc::new(ExportMetrics::new(&SelfMetrics::default(), "grpc"));
        let q = Queue::new(2, m);
        let delays: Vec<Duration> = (1..=7).map(|r| q.backoff().delay(r)).collect();
        assert_eq!(
            delays,
            [250, 500, 1000, 2000, 4000, 5000, 5000].map(Duration::from_millis)
        );
        q.cap_retry_delay(Duration::from_secs(1));
        let delays: Vec<Duration> = (1..=6).map(|r| q.backoff().delay(r)).collect();
        assert_eq!(
            delays,
            [250, 500, 1000, 1000, 1000, 1000].map(Duration::from_millis)
        );
        // The default 30 s interval keeps the 5 s cap; a tiny one keeps the first step.
        q.cap_retry_delay(Duration::from_secs(30));
        assert_eq!(q.backoff().delay(9), Duration::from_secs(5));
        q.cap_retry_delay(Duration::from_millis(10));
        assert_eq!(q.backoff().delay(9), Duration::from_millis(250));
    }

    #[test]
    fn a_wait_counts_from_the_failure_and_is_the_longer_of_backoff_and_server_delay() {
        let m = Arc::new(ExportMetrics::new(&SelfMetrics::default(), "grpc"));
        let q = Queue::new(2, m);
        q.cap_retry_delay(Duration::from_secs(1));
        let mut state = SenderState {
            endpoint: String::new(),
            failing: false,
            last_permanent: None,
            failures: 0,
            resume_at: None,
        };
        let at = Instant::now();
        // The server's 2 s is longer than any backoff step: from the answer, 2 s.
        assert_eq!(
            state.retryable(&q, at, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(state.resume_at, Some(at + Duration::from_secs(2)));
        // A shorter (or zero) server delay does not cut the backoff: step 2 is 500 ms × [0.5, 1].
        let d = state.retryable(&q, at, Some(Duration::ZERO));
        assert!((Duration::from_millis(250)..=Duration::from_millis(500)).contains(&d));
        // Steps grow across failures (capped at the export interval); a huge delay is capped at 60 s.
        let d = state.retryable(&q, at, None);
        assert!((Duration::from_millis(500)..=Duration::from_secs(1)).contains(&d));
        assert_eq!(
            state.retryable(&q, at, Some(Duration::from_secs(3600))),
            SERVER_DELAY_MAX
        );
        // An answer ends the wait and restarts the schedule.
        state.answered(&q);
        assert_eq!((state.failures, state.resume_at), (0, None));
    }

    #[test]
    fn a_wait_ends_at_close_not_at_a_new_request() {
        let m = Arc::new(ExportMetrics::new(&SelfMetrics::default(), "grpc"));
        let q = Queue::new(2, m);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let far = Instant::now() + Duration::from_secs(600);
            // A request pushed before and during the wait leaves it running.
            q.push(Bytes::from_static(b"x"));
            let wait = q.wait_until(far);
            tokio::pin!(wait);
            let push = async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                q.push(Bytes::from_static(b"y"));
                tokio::time::sleep(Duration::from_millis(250)).await;
            };
            tokio::select! {
                _ = &mut wait => panic!("a new request ended the wait"),
                _ = push => {}
            }
            // Closing ends it at once (the 60 s only bounds a failure).
            q.close();
            let ended = tokio::time::timeout(Duration::from_secs(60), wait).await;
            assert!(ended.is_ok());
        });
    }

    #[test]
    fn queue_drops_oldest_and_counts() {
        let m = Arc::new(ExportMetrics::new(&SelfMetrics::default(), "grpc"));
        let q = Queue::new(2, m.clone());
        for i in 0..5u8 {
            q.push(Bytes::from(vec![i]));
        }
        assert_eq!(m.dropped.get(), 3.0);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        q.close();
        let got: Vec<u8> = rt.block_on(async {
            let mut v = Vec::new();
            while let Some((b, _)) = q.next().await {
                v.push(b[0]);
            }
            v
        });
        assert_eq!(got, vec![3, 4]);
    }
}
