//! Capped exponential backoff with jitter: the one schedule for every loop that retries a peer (the
//! OTLP sender, the Kubernetes API list/watch, the connection to nv-hostengine at start-up, DCGM
//! reconnection).
//!
//! Retry `n` (1-based) waits `first` doubled `n - 1` times, at most `max`, times a random factor in
//! [0.5, 1]. The factor is drawn anew for every delay, so exporters restarted together (a DaemonSet
//! rollout, a collector that comes back) spread their attempts instead of retrying in lockstep, while
//! a retry never waits longer than the unjittered schedule says. The random numbers come from the
//! standard library's per-process random hash keys: no crate, and nothing here needs more than that.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

/// A backoff schedule: `first` doubling up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
}

impl Backoff {
    /// `first` doubling up to `max` (never below `first`).
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max }
    }

    /// The same schedule with its longest delay lowered to `cap` (never below the first delay).
    pub fn capped(self, cap: Duration) -> Backoff {
        Backoff {
            max: self.max.min(cap),
            ..self
        }
    }

    /// The delay before retry `retry` (1-based; 0 reads as 1), without jitter.
    pub fn delay(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.first
            .saturating_mul(1u32 << doublings)
            .min(self.max)
            .max(self.first)
    }

    /// [`Backoff::delay`] times a random factor in [0.5, 1], drawn anew on every call.
    pub fn jittered(&self, retry: u32) -> Duration {
        jitter(self.delay(retry))
    }
}

/// `d` times a random factor in [0.5, 1].
pub fn jitter(d: Duration) -> Duration {
    d.mul_f64(0.5 + 0.5 * unit())
}

/// A random number in [0, 1): every `RandomState` has fresh keys (seeded once per thread from the
/// operating system, then stepped), so hashing nothing with a new one gives a new random `u64`.
fn unit() -> f64 {
    let bits = RandomState::new().hash_one(()) >> 11;
    bits as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn doubles_from_first_up_to_max() {
        let b = Backoff::new(MS(250), MS(5000));
        let delays: Vec<Duration> = (0..=7).map(|n| b.delay(n)).collect();
        assert_eq!(
            delays,
            [250, 250, 500, 1000, 2000, 4000, 5000, 5000].map(MS)
        );
        assert_eq!(b.delay(u32::MAX), MS(5000));
        // A cap lowers the longest delay, never the first.
        assert_eq!(b.capped(MS(1000)).delay(9), MS(1000));
        assert_eq!(b.capped(MS(10)).delay(9), MS(250));
    }

    #[test]
    fn jitter_stays_within_half_and_whole_and_varies() {
        let b = Backoff::new(MS(1000), MS(1000));
        let delays: Vec<Duration> = (0..1000).map(|_| b.jittered(1)).collect();
        assert!(delays.iter().all(|d| (MS(500)..=MS(1000)).contains(d)));
        // Not one value per process (the old `pid % 250`): both halves of the range are drawn.
        assert!(delays.iter().any(|d| *d < MS(750)));
        assert!(delays.iter().any(|d| *d > MS(750)));
    }
}
