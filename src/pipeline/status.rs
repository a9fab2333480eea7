//! The collection's health as `/health` (liveness) and `/ready` (readiness) read it: when the last
//! collection succeeded, whether a poll is running and for how long, whether the collector thread
//! still finishes cycles. Written by the collector thread and its watchdog, read by the HTTP server;
//! atomics only, so a probe never waits on a collection.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::lock::LockExt;

/// Health of the collection, read by `/health` and `/ready`.
pub struct CollectorStatus {
    interval: Duration,
    started: Instant,
    /// Milliseconds since `started` of the last successful collection, +1 (0 = never).
    last_success_ms: AtomicU64,
    ever_succeeded: AtomicBool,
    pub(super) source_up: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// Milliseconds since `started` when the running poll began, +1 (0 = no poll running).
    poll_started_ms: AtomicU64,
    /// Number of the running (or last) poll.
    poll_number: AtomicU64,
    /// The running poll outlived the freshness limit and its series were withdrawn.
    pub(super) stuck: AtomicBool,
    /// Milliseconds since `started` when the collector last finished a cycle, +1 (1 = at `started`).
    last_cycle_ms: AtomicU64,
    /// How long the collector may go without finishing a cycle before `/health` asks for a restart.
    restart_limit: Duration,
    /// Why the source, although it answered, is not ready (DCGM reports fewer GPUs than the node has).
    not_ready: Mutex<Option<String>>,
    /// Held while a snapshot is handed out and its outcome recorded (the publisher's lock), so that
    /// `ready` never sees a collection that a consumer already has without its outcome: an engine's
    /// caller asking right after a collection reached it would read "no collection yet".
    pub(super) publication: Mutex<()>,
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
            publication: Mutex::new(()),
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
    ///
    /// [`Source::not_ready`]: crate::source::Source::not_ready
    pub fn ready(&self) -> Result<(), String> {
        let _publication = self.publication.lock_unpoisoned();
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
    pub(super) fn cycle_done(&self) {
        self.last_cycle_ms.store(self.now_ms(), Ordering::Release);
    }

    /// A poll begins; returns its number.
    pub(super) fn poll_begins(&self) -> u64 {
        let n = self.poll_number.fetch_add(1, Ordering::AcqRel) + 1;
        self.poll_started_ms.store(self.now_ms(), Ordering::Release);
        n
    }

    pub(super) fn poll_ended(&self) {
        self.poll_started_ms.store(0, Ordering::Release);
    }

    /// The running poll (its number and how long it has run), if any.
    pub(super) fn running_poll(&self) -> Option<(u64, Duration)> {
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

    pub(super) fn record_success(&self, not_ready: Option<String>) {
        *self.not_ready.lock_unpoisoned() = not_ready;
        self.last_success_ms.store(self.now_ms(), Ordering::Release);
        self.stuck.store(false, Ordering::Release);
        self.source_up.store(true, Ordering::Release);
        if let Ok(mut e) = self.last_error.lock() {
            *e = None;
        }
    }

    /// Called after a successful snapshot has been handed to every consumer (so /metrics has it).
    pub(super) fn mark_ready(&self) {
        self.ever_succeeded.store(true, Ordering::Release);
    }

    pub(super) fn record_failure(&self, err: &str) {
        self.stuck.store(false, Ordering::Release);
        self.source_up.store(false, Ordering::Release);
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(err.to_string());
        }
    }
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
