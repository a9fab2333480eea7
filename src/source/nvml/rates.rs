//! NvLink throughput as DCGM reports it — a rate in MB/s — from NVML's cumulative per-link data
//! counters (KiB since the driver loaded): the growth of a counter between two collections divided by
//! the time between them. The first reading of a counter has no rate yet, nor has a reading after the
//! counter went backwards (a driver reload): both are absent for that collection, never a 0.

use std::collections::HashMap;
use std::time::Instant;

use crate::snapshot::{Absent, EntityKind, FieldValue};

/// Which counter: the DCGM field and the entity it is read on.
pub type RateKey = (u16, EntityKind, u32);

/// The last reading of every counter turned into a rate.
#[derive(Debug, Default)]
pub struct Rates {
    last: HashMap<RateKey, (Instant, i64)>,
}

impl Rates {
    /// The rate in MB/s (10^6 bytes per second, rounded) since the previous reading of `key`; `kib` is
    /// the counter now (KiB), read at `at`. Anything but a counter value passes through unchanged.
    pub fn rate(&mut self, key: RateKey, counter: FieldValue, at: Instant) -> FieldValue {
        let FieldValue::Int(kib) = counter else {
            return counter;
        };
        let previous = self.last.insert(key, (at, kib));
        let Some((then, was)) = previous else {
            return FieldValue::Absent(Absent::Blank);
        };
        let seconds = at.saturating_duration_since(then).as_secs_f64();
        if kib < was || seconds <= 0.0 {
            return FieldValue::Absent(Absent::Blank);
        }
        let bytes = (kib - was) as f64 * 1024.0;
        FieldValue::Int((bytes / seconds / 1e6).round() as i64)
    }

    /// Forget counters of entities no longer read (after a rediscovery).
    pub fn clear(&mut self) {
        self.last.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_counter_becomes_a_rate_from_its_second_reading() {
        let mut r = Rates::default();
        let key = (449, EntityKind::Gpu, 0);
        let t0 = Instant::now();
        // First reading: no rate, absent (not 0).
        assert_eq!(
            r.rate(key, FieldValue::Int(1_000), t0),
            FieldValue::Absent(Absent::Blank)
        );
        // 2,000,000 KiB in 2 s: 1,024 MB/s.
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(
            r.rate(key, FieldValue::Int(2_001_000), t1),
            FieldValue::Int(1024)
        );
        // Unchanged: 0 MB/s, a real 0.
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(
            r.rate(key, FieldValue::Int(2_001_000), t2),
            FieldValue::Int(0)
        );
        // Backwards (driver reload): absent, then a rate again.
        let t3 = t2 + Duration::from_secs(1);
        assert_eq!(
            r.rate(key, FieldValue::Int(10), t3),
            FieldValue::Absent(Absent::Blank)
        );
        let t4 = t3 + Duration::from_secs(1);
        assert_eq!(
            r.rate(key, FieldValue::Int(1_000_010), t4),
            FieldValue::Int(1024)
        );
        // An absent counter stays absent.
        let gone = FieldValue::Absent(Absent::NotSupported);
        assert_eq!(r.rate(key, gone.clone(), t4), gone);
    }
}
