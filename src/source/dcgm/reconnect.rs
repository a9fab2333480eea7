//! When to try the host engine again, and when to say so: one schedule for the first connection at
//! start-up and for every outage after it.
//!
//! A host engine that is not there yet (the GPU Operator starts the exporter and `nvidia-dcgm`
//! together; an embedded engine waits for the driver) and one that went away are the same case: the
//! exporter serves `/health` 200 and `/ready` 503 with the reason, and tries again — the first attempt
//! at once, then [`crate::retry::Backoff`] from [`FIRST_RETRY`] (or one collect interval, if shorter)
//! doubling up to [`RETRY_CAP_INTERVALS`] collect intervals — until it answers. It never exits for
//! it. An attempt due before the next collection asks the collector for one then ([`WakeTimer`]), so
//! a host engine a few seconds late is read a few seconds late, whatever the collect interval.
//!
//! The log says it once (a warning at the first failed attempt), then reminds at growing intervals
//! ([`REMIND`]: 30 s after the outage began, then doubling up to every 10 minutes), so an outage of
//! hours is a handful of lines, not one per collection.

use std::time::{Duration, Instant};

use crate::retry::Backoff;

/// Longest wait between reconnection attempts, in collect intervals: a host engine that returns is
/// used again within two intervals (the soak's criterion, `tests/soak/`). An attempt on a host engine
/// that is away costs one refused connect, so there is nothing to save by waiting longer (this cap
/// used to be 30 s: after a 30 s outage the series stayed away up to 30 s more).
pub const RETRY_CAP_INTERVALS: u32 = 1;

/// The first delay between attempts (when shorter than the collect interval).
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

/// When the log reminds that the host engine is still away: 30 s after the outage began, then
/// doubling up to every 10 minutes.
pub const REMIND: Backoff = Backoff::new(Duration::from_secs(30), Duration::from_secs(600));

/// What a failed attempt should log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    /// The first failure of this outage: a warning.
    First,
    /// A reminder (the outage has lasted a while): a warning with how long and how many attempts.
    Reminder,
    /// Nothing above debug.
    Quiet,
}

/// Reconnection schedule: first attempt on the poll after the loss, then doubling delays up to a cap
/// of [`RETRY_CAP_INTERVALS`] collect intervals (so, with the default cap, one attempt per collection).
/// No jitter: attempts run on the collections, which a few milliseconds would not move.
#[derive(Debug)]
pub struct Retry {
    next_at: Option<Instant>,
    first: Duration,
    /// Failed attempts in this outage.
    pub attempts: u32,
    down_since: Option<Instant>,
    /// The last attempt's error.
    last_error: Option<String>,
    /// When the next reminder is due, and how many were given.
    remind_at: Option<Instant>,
    reminders: u32,
}

impl Retry {
    pub fn new(interval: Duration) -> Self {
        Retry {
            next_at: None,
            first: interval,
            attempts: 0,
            down_since: None,
            last_error: None,
            remind_at: None,
            reminders: 0,
        }
    }

    /// The host engine is away (lost, or not reached yet): try at once.
    pub fn lost(&mut self, now: Instant) {
        self.next_at = Some(now);
        self.attempts = 0;
        if self.down_since.is_none() {
            self.down_since = Some(now);
            self.reminders = 0;
            self.remind_at = Some(now + REMIND.delay(1));
        }
    }

    /// Due, with half the first delay of slack so that a poll slightly early still tries (a
    /// collection's tick, or the early one [`WakeTimer`] asked for).
    pub fn due(&self, now: Instant) -> bool {
        match self.next_at {
            None => true,
            Some(t) => now + self.first.min(FIRST_RETRY) / 2 >= t,
        }
    }

    /// An attempt failed with `error`: schedule the next one; what to log.
    pub fn failed(&mut self, now: Instant, error: String) -> Say {
        self.attempts += 1;
        let backoff = Backoff::new(
            self.first.min(FIRST_RETRY),
            self.first * RETRY_CAP_INTERVALS,
        );
        self.next_at = Some(now + backoff.delay(self.attempts));
        self.last_error = Some(error);
        if self.attempts == 1 {
            return Say::First;
        }
        match self.remind_at {
            Some(t) if now >= t => {
                self.reminders += 1;
                self.remind_at = self
                    .down_since
                    .map(|d| d + self.reminder_offset(self.reminders + 1));
                Say::Reminder
            }
            _ => Say::Quiet,
        }
    }

    /// Time from the outage's start to reminder `n` (1-based): 30 s, 1 min, 2 min, ..., then every
    /// 10 minutes.
    fn reminder_offset(&self, n: u32) -> Duration {
        (1..=n).map(|k| REMIND.delay(k)).sum()
    }

    /// Connected: returns how long the host engine was away.
    pub fn succeeded(&mut self) -> Option<Duration> {
        self.next_at = None;
        self.attempts = 0;
        self.last_error = None;
        self.remind_at = None;
        self.down_since.take().map(|t| t.elapsed())
    }

    /// When the next attempt is due, while the host engine is away.
    pub fn next_at(&self) -> Option<Instant> {
        self.down_since.and(self.next_at)
    }

    /// How long the host engine has been away.
    pub fn down_for(&self, now: Instant) -> Duration {
        self.down_since
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// Between attempts: the last error and when the next attempt comes (the `/ready` reason).
    pub fn waiting(&self, now: Instant) -> String {
        let next = self
            .next_at
            .map_or(0.0, |t| t.saturating_duration_since(now).as_secs_f64());
        match &self.last_error {
            Some(e) => format!("{e}; next attempt in {next:.1}s"),
            None => format!("not connected; next attempt in {next:.1}s"),
        }
    }
}

/// Asks the collector for a collection when an attempt falls due between two collections: one
/// sleeping thread per armed instant (a handful per outage: the delays double up to the interval,
/// from where the collections themselves are on time).
#[derive(Debug, Default)]
pub struct WakeTimer {
    armed_for: Option<Instant>,
}

impl WakeTimer {
    /// Wake `waker` at `at`, unless a wake is already armed for that instant.
    pub fn arm(&mut self, at: Instant, waker: &crate::source::Waker) {
        if self.armed_for == Some(at) {
            return;
        }
        self.armed_for = Some(at);
        let waker = waker.clone();
        let spawned = std::thread::Builder::new()
            .name("dcgm-retry".into())
            .spawn(move || {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                waker.wake();
            });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "cannot start the reconnection timer; the next collection retries");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_start_at_one_second_and_double_up_to_the_interval() {
        let start = Instant::now();
        let mut r = Retry::new(Duration::from_secs(30));
        r.lost(start);
        let mut now = start;
        let mut delays = Vec::new();
        for _ in 0..7 {
            r.failed(now, "refused".into());
            let next = r.next_at().unwrap_or(now);
            delays.push(next.duration_since(now).as_secs());
            now = next;
        }
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        // A collect interval below a second is the first delay and the cap.
        let mut r = Retry::new(Duration::from_millis(200));
        r.lost(start);
        r.failed(start, "refused".into());
        assert_eq!(r.next_at(), Some(start + Duration::from_millis(200)));
    }

    #[test]
    fn one_attempt_per_interval_and_reminders_that_grow() {
        let interval = Duration::from_secs(1);
        let start = Instant::now();
        let mut r = Retry::new(interval);
        r.lost(start);
        assert!(r.due(start));
        let mut said = Vec::new();
        let mut now = start;
        // 25 minutes of one failed attempt per second.
        for _ in 0..1500 {
            assert!(r.due(now), "an attempt at every collection");
            let say = r.failed(now, "refused".into());
            if say != Say::Quiet {
                said.push((say, now.duration_since(start).as_secs()));
            }
            now += interval;
        }
        assert_eq!(
            said,
            [
                (Say::First, 0),
                (Say::Reminder, 30),
                (Say::Reminder, 90),
                (Say::Reminder, 210),
                (Say::Reminder, 450),
                (Say::Reminder, 930),
            ]
        );
        assert_eq!(r.waiting(now - interval), "refused; next attempt in 1.0s");
        assert_eq!(r.succeeded().map(|_| ()), Some(()));
        assert!(r.due(now));
    }
}
