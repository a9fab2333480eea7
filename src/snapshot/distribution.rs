//! Sub-interval distributions: every sample of a chosen field taken between two collections, per
//! entity, folded into one summary per collection — count, sum, min, max, a few quantiles and an
//! exponential histogram in OpenTelemetry's model (scale, offset, bucket counts) — beside the last
//! value the snapshot already carries.
//!
//! The [`Accumulator`] is the sink a source pushes samples into: `push(slot, timestamp_us, value)`,
//! with one cursor per entity and field. The cursor contract is what makes a re-read safe: a sample
//! whose timestamp is at or before the slot's cursor is ignored, so a source that reads
//! `dcgmGetValuesSince_v2(since = cursor(slot))` and a reconnect that re-reads history never count a
//! sample twice, and the cursor moves to the newest timestamp pushed (cap reached or not), so nothing
//! after it is lost. [`Accumulator::finish`] folds each slot's samples of the interval into the
//! snapshot's [`Distributions`] — two passes over the samples, no sort: extremes and sum, then each
//! sample's bucket; the quantiles come from the buckets — and empties the buffers, keeping their
//! capacity: no allocation per sample, only per slot and collection. A slot keeps at most its cap of samples per interval
//! (twice the expected count, bounded); samples beyond it are counted as dropped, not folded.

use std::sync::Arc;
use std::time::Duration;

// The spec is configuration (config/ parses it); the accumulator and the snapshot's summaries are here.
pub use crate::config::distributions::DistributionSpec;

/// The quantiles every summary carries (`:9400` writes them as gauges).
pub const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// The finest histogram scale: base 2^(1/16), buckets 4.4 % wide, so a value is within 2.2 % of its
/// bucket's middle.
pub const MAX_SCALE: i32 = 4;

/// The most buckets on each side of zero; a wider range lowers the scale (each step halves the count).
pub const MAX_BUCKETS: usize = 160;

/// The coarsest scale (base 2^1024 covers every finite double).
const MIN_SCALE: i32 = -10;

/// The most samples one slot keeps per interval, whatever the intervals.
const HARD_CAP: usize = 100_000;

/// An exponential histogram (OpenTelemetry's data model): bucket `offset + i` of a side covers
/// `(base^(offset+i), base^(offset+i+1)]` of the absolute value, `base = 2^(2^-scale)`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExpHistogram {
    pub scale: i32,
    pub zero_count: u64,
    pub positive_offset: i32,
    pub positive: Vec<u64>,
    pub negative_offset: i32,
    pub negative: Vec<u64>,
}

/// Count, sum, min, max and histogram of a set of samples.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    pub histogram: ExpHistogram,
}

/// One entity's distribution of one field.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityDistribution {
    /// Index of the entity in `Snapshot::entities` (the source's output order).
    pub entity: usize,
    /// Index of the field in [`Distributions::specs`].
    pub spec: usize,
    /// The samples since the previous collection.
    pub interval: Summary,
    /// [`QUANTILES`] of the interval's samples, estimated from its histogram (the geometric middle of the bucket holding the rank; exact at the extremes).
    pub quantiles: [f64; QUANTILES.len()],
    /// Every sample since the slot started (`start_us`): the cumulative view.
    pub total: Summary,
    /// Timestamp (µs since the Unix epoch) the cumulative view starts at.
    pub start_us: i64,
}

/// The distributions of one collection. Empty when none is configured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Distributions {
    pub specs: Arc<[DistributionSpec]>,
    /// Entities with at least one sample in the interval, in entity then spec order.
    pub entries: Vec<EntityDistribution>,
    /// Start of the interval (the previous collection), µs since the Unix epoch.
    pub interval_start_us: i64,
}

impl Distributions {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What became of a pushed sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Kept for this interval's fold.
    Kept,
    /// At or before the slot's cursor: already counted (a re-read), ignored.
    Old,
    /// The slot's cap for the interval was reached: counted as dropped.
    Dropped,
    /// Not a finite number, or no such slot: ignored.
    Invalid,
}

/// One entity and field: its cursor, the interval's samples and the cumulative summary.
#[derive(Debug, Default)]
struct Slot {
    cursor_us: i64,
    samples: Vec<f64>,
    total: Summary,
    start_us: Option<i64>,
}

/// Where a source puts samples between collections; see the module documentation for the contract.
#[derive(Debug, Default)]
pub struct Accumulator {
    specs: Arc<[DistributionSpec]>,
    /// Per spec: the most samples a slot keeps per interval.
    caps: Vec<usize>,
    /// Entity-major: slot `entity * specs.len() + spec`.
    slots: Vec<Slot>,
    dropped: u64,
    interval_start_us: i64,
}

impl Accumulator {
    /// Slots for `entities` entities and every spec; each keeps up to twice the samples one collect
    /// interval holds (at least 16).
    pub fn new(specs: Arc<[DistributionSpec]>, entities: usize, collect: Duration) -> Accumulator {
        let caps = specs
            .iter()
            .map(|s| {
                let expected = collect.as_secs_f64() / s.every.as_secs_f64().max(1e-6);
                ((expected.ceil() as usize).saturating_mul(2) + 16).min(HARD_CAP)
            })
            .collect();
        let mut acc = Accumulator {
            specs,
            caps,
            ..Accumulator::default()
        };
        acc.reset(entities);
        acc
    }

    /// The fields sampled.
    pub fn specs(&self) -> &Arc<[DistributionSpec]> {
        &self.specs
    }

    /// Forget every slot: `entities` fresh slots per spec, cursors at 0.
    pub fn reset(&mut self, entities: usize) {
        self.slots.clear();
        self.slots
            .resize_with(entities * self.specs.len(), Slot::default);
    }

    /// The entities changed (rediscovery, a counters reload): `previous[i]` is the old index of new
    /// entity `i`, when it was there before. A kept entity keeps its cursors, samples and cumulative
    /// view, so a re-read after the change counts nothing twice; a new one starts at cursor 0.
    pub fn remap(&mut self, previous: &[Option<usize>]) {
        let per = self.specs.len();
        let mut old = std::mem::take(&mut self.slots);
        self.slots.resize_with(previous.len() * per, Slot::default);
        for (new, was) in previous.iter().enumerate() {
            let Some(was) = *was else { continue };
            for s in 0..per {
                if let Some(slot) = old.get_mut(was * per + s) {
                    self.slots[new * per + s] = std::mem::take(slot);
                }
            }
        }
    }

    fn slot_index(&self, entity: usize, spec: usize) -> Option<usize> {
        (spec < self.specs.len())
            .then(|| entity * self.specs.len() + spec)
            .filter(|&i| i < self.slots.len())
    }

    /// The newest timestamp counted for an entity and spec (0 before any): read values after it. A
    /// source reading DCGM's history should not go further back than one collect interval for a slot
    /// at 0 (a new entity), or its first distribution holds everything DCGM kept.
    pub fn cursor(&self, entity: usize, spec: usize) -> i64 {
        self.slot_index(entity, spec)
            .map_or(0, |i| self.slots[i].cursor_us)
    }

    /// Add one sample. Samples of a slot are pushed in time order.
    pub fn push(&mut self, entity: usize, spec: usize, ts_us: i64, value: f64) -> Pushed {
        let Some(i) = self.slot_index(entity, spec) else {
            return Pushed::Invalid;
        };
        let slot = &mut self.slots[i];
        if ts_us <= slot.cursor_us {
            return Pushed::Old;
        }
        slot.cursor_us = ts_us;
        if !value.is_finite() {
            return Pushed::Invalid;
        }
        if slot.samples.len() >= self.caps[spec] {
            self.dropped += 1;
            return Pushed::Dropped;
        }
        slot.start_us.get_or_insert(ts_us);
        slot.samples.push(value);
        Pushed::Kept
    }

    /// Samples dropped at the cap since the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// Fold every slot's samples since the previous call into the collection's distributions (the
    /// interval ends at `now_us`) and start the next interval.
    pub fn finish(&mut self, now_us: i64) -> Distributions {
        let per = self.specs.len().max(1);
        let mut entries = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.samples.is_empty() {
                continue;
            }
            let interval = summarize(&slot.samples);
            let quantiles = QUANTILES.map(|q| quantile(&interval, q));
            slot.total = merge(&slot.total, &interval);
            slot.samples.clear();
            entries.push(EntityDistribution {
                entity: i / per,
                spec: i % per,
                interval,
                quantiles,
                total: slot.total.clone(),
                start_us: slot.start_us.unwrap_or(now_us),
            });
        }
        let interval_start_us = std::mem::replace(&mut self.interval_start_us, now_us);
        Distributions {
            specs: self.specs.clone(),
            entries,
            interval_start_us,
        }
    }
}

/// Count, sum, min, max and histogram of finite samples, in two passes and no sort: the extremes of
/// each side first (they set the scale), then each sample counted in its bucket.
fn summarize(samples: &[f64]) -> Summary {
    if samples.is_empty() {
        return Summary::default();
    }
    let (mut min, mut max, mut sum, mut zeros) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0u64);
    // Smallest and largest absolute value per side: [positive, negative].
    let mut ends = [(f64::INFINITY, 0.0f64); 2];
    for &v in samples {
        min = min.min(v);
        max = max.max(v);
        sum += v;
        if v == 0.0 {
            zeros += 1;
            continue;
        }
        let side = &mut ends[usize::from(v < 0.0)];
        side.0 = side.0.min(v.abs());
        side.1 = side.1.max(v.abs());
    }
    // One scale for both sides: the coarser of what each needs.
    let scale = ends
        .iter()
        .filter(|(lo, _)| lo.is_finite())
        .map(|&(lo, hi)| fitting_scale(index(lo, MAX_SCALE), index(hi, MAX_SCALE), MAX_SCALE))
        .min()
        .unwrap_or(MAX_SCALE);
    let mut histogram = ExpHistogram {
        scale,
        zero_count: zeros,
        ..ExpHistogram::default()
    };
    let shift = MAX_SCALE - scale;
    for (negative, (lo, hi)) in [(false, ends[0]), (true, ends[1])] {
        if !lo.is_finite() {
            continue;
        }
        let offset = index(lo, MAX_SCALE) >> shift;
        let len = ((index(hi, MAX_SCALE) >> shift) - offset + 1).max(1) as usize;
        let mut counts = vec![0u64; len];
        for &v in samples {
            if v == 0.0 || (v < 0.0) != negative {
                continue;
            }
            let at = ((index(v.abs(), MAX_SCALE) >> shift) - offset).max(0) as usize;
            if let Some(c) = counts.get_mut(at.min(len - 1)) {
                *c += 1;
            }
        }
        if negative {
            (histogram.negative_offset, histogram.negative) = (offset, counts);
        } else {
            (histogram.positive_offset, histogram.positive) = (offset, counts);
        }
    }
    Summary {
        count: samples.len() as u64,
        sum,
        min,
        max,
        histogram,
    }
}

/// The value at quantile `q` (nearest rank) estimated from the histogram: the geometric middle of the
/// bucket holding the rank (within half a bucket: 2.2 % at scale 4), the exact min or max when the
/// rank falls in the lowest or highest non-empty bucket (one bucket: min below the median, else max),
/// 0 among the zeros.
fn quantile(s: &Summary, q: f64) -> f64 {
    let h = &s.histogram;
    let rank = ((q * s.count as f64).ceil() as u64).clamp(1, s.count.max(1));
    let width = (-f64::from(h.scale)).exp2();
    let middle = |i: i32| ((f64::from(i) + 0.5) * width).exp2();
    // Buckets in increasing value order: negatives (largest absolute value first), zeros, positives.
    let negatives = h
        .negative
        .iter()
        .enumerate()
        .rev()
        .map(|(k, c)| (*c, -middle(h.negative_offset + k as i32)));
    let positives = h
        .positive
        .iter()
        .enumerate()
        .map(|(k, c)| (*c, middle(h.positive_offset + k as i32)));
    let ordered = negatives
        .chain(std::iter::once((h.zero_count, 0.0)))
        .chain(positives)
        .filter(|(c, _)| *c > 0);
    let mut seen = 0;
    for (c, value) in ordered {
        let first = seen == 0;
        seen += c;
        if seen >= rank {
            let last = seen == s.count;
            return if first && (!last || q < 0.5) {
                s.min
            } else if last {
                s.max
            } else {
                value.clamp(s.min, s.max)
            };
        }
    }
    s.max
}

/// Lower `scale` from the indexes `lo..=hi` it has until they span at most [`MAX_BUCKETS`].
fn fitting_scale(mut lo: i32, mut hi: i32, mut scale: i32) -> i32 {
    while i64::from(hi) - i64::from(lo) + 1 > MAX_BUCKETS as i64 && scale > MIN_SCALE {
        lo >>= 1;
        hi >>= 1;
        scale -= 1;
    }
    scale
}

/// The bucket of a positive finite value at `scale` (>= 0 here): the `i` with
/// `base^i < v <= base^(i+1)`; exact for powers of two.
fn index(v: f64, scale: i32) -> i32 {
    let bits = v.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1023;
    let mantissa = bits & ((1u64 << 52) - 1);
    if mantissa == 0 && exponent > -1023 {
        // 2^e is the upper edge of the bucket below base^(e * 2^scale).
        return (exponent << scale) - 1;
    }
    if scale == MAX_SCALE && exponent > -1023 {
        // v = 2^e · m with 1 < m < 2: its bucket within the octave is the number of the octave's
        // inner edges 2^(t/16) below m — a few comparisons instead of a log2 and a ceil per sample.
        let m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
        let inner = OCTAVE_EDGES.partition_point(|&edge| edge < m) as i32;
        return (exponent << scale) + inner;
    }
    ((v.log2() * f64::from(1u32 << scale)).ceil() as i32) - 1
}

/// The inner bucket edges of one octave at [`MAX_SCALE`]: 2^(t/16) for t = 1..15.
static OCTAVE_EDGES: std::sync::LazyLock<[f64; (1 << MAX_SCALE) - 1]> =
    std::sync::LazyLock::new(|| {
        let mut edges = [0.0; (1 << MAX_SCALE) - 1];
        for (t, edge) in edges.iter_mut().enumerate() {
            *edge = ((t + 1) as f64 / f64::from(1u32 << MAX_SCALE)).exp2();
        }
        edges
    });

/// `a` and `b` together (the cumulative view): counts add, the histograms meet at a common scale.
fn merge(a: &Summary, b: &Summary) -> Summary {
    if a.count == 0 {
        return b.clone();
    }
    if b.count == 0 {
        return a.clone();
    }
    let (ha, hb) = (&a.histogram, &b.histogram);
    let mut scale = ha.scale.min(hb.scale);
    for (oa, ca, ob, cb) in [
        (
            ha.positive_offset,
            &ha.positive,
            hb.positive_offset,
            &hb.positive,
        ),
        (
            ha.negative_offset,
            &ha.negative,
            hb.negative_offset,
            &hb.negative,
        ),
    ] {
        let ends = [(oa, ca.len(), ha.scale), (ob, cb.len(), hb.scale)]
            .into_iter()
            .filter(|(_, n, _)| *n > 0)
            .map(|(o, n, s)| (o >> (s - scale), (o + n as i32 - 1) >> (s - scale)));
        if let Some((lo, hi)) = ends.reduce(|(l1, h1), (l2, h2)| (l1.min(l2), h1.max(h2))) {
            scale = fitting_scale(lo, hi, scale);
        }
    }
    let side = |parts: [(i32, &Vec<u64>, i32); 2]| {
        let mut offset = i32::MAX;
        let mut counts: Vec<u64> = Vec::new();
        for (o, c, s) in parts {
            for (k, n) in c.iter().enumerate() {
                if *n == 0 {
                    continue;
                }
                let i = (o + k as i32) >> (s - scale);
                if counts.is_empty() {
                    offset = i;
                } else if i < offset {
                    let grow = (offset - i) as usize;
                    counts.splice(0..0, std::iter::repeat_n(0, grow));
                    offset = i;
                }
                let at = (i - offset) as usize;
                if at >= counts.len() {
                    counts.resize(at + 1, 0);
                }
                counts[at] += n;
            }
        }
        (if counts.is_empty() { 0 } else { offset }, counts)
    };
    let (positive_offset, positive) = side([
        (ha.positive_offset, &ha.positive, ha.scale),
        (hb.positive_offset, &hb.positive, hb.scale),
    ]);
    let (negative_offset, negative) = side([
        (ha.negative_offset, &ha.negative, ha.scale),
        (hb.negative_offset, &hb.negative, hb.scale),
    ]);
    Summary {
        count: a.count + b.count,
        sum: a.sum + b.sum,
        min: a.min.min(b.min),
        max: a.max.max(b.max),
        histogram: ExpHistogram {
            scale,
            zero_count: ha.zero_count + hb.zero_count,
            positive_offset,
            positive,
            negative_offset,
            negative,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> Arc<[DistributionSpec]> {
        Arc::from(vec![DistributionSpec {
            field: 155,
            name: "DCGM_FI_DEV_POWER_USAGE".into(),
            every: Duration::from_millis(100),
        }])
    }

    #[test]
    fn powers_of_two_are_upper_edges() {
        assert_eq!(index(1.0, 0), -1);
        assert_eq!(index(2.0, 0), 0);
        assert_eq!(index(3.0, 0), 1);
        assert_eq!(index(4.0, 4), 31);
        assert_eq!(index(4.1, 4), 32);
    }

    #[test]
    fn folds_an_interval_and_ignores_what_the_cursor_passed() {
        let mut acc = Accumulator::new(specs(), 2, Duration::from_secs(1));
        for k in 1..=10 {
            let v = if k % 2 == 0 { 650.0 } else { 300.0 };
            assert_eq!(acc.push(1, 0, k * 100_000, v), Pushed::Kept);
        }
        // A reconnect re-reads history: nothing counted twice.
        assert_eq!(acc.push(1, 0, 500_000, 999.0), Pushed::Old);
        assert_eq!(acc.cursor(1, 0), 1_000_000);
        let d = acc.finish(1_000_000);
        assert_eq!(d.entries.len(), 1);
        let e = &d.entries[0];
        assert_eq!((e.entity, e.spec), (1, 0));
        assert_eq!(e.interval.count, 10);
        assert_eq!((e.interval.min, e.interval.max), (300.0, 650.0));
        assert_eq!(e.interval.sum, 4750.0);
        assert_eq!(e.quantiles, [300.0, 650.0, 650.0]);
        let h = &e.interval.histogram;
        assert_eq!(h.scale, MAX_SCALE);
        assert_eq!(h.positive.iter().sum::<u64>(), 10);
        // 300 W and 650 W at base 2^(1/16): buckets 131 and 149, each bracketing its value.
        assert_eq!(h.positive_offset, 131);
        assert_eq!(h.positive.len(), 19);
        assert_eq!((h.positive[0], h.positive[18]), (5, 5));
        let base = 2f64.powf(1.0 / 16.0);
        assert!(base.powi(131) < 300.0 && 300.0 <= base.powi(132));
        assert!(base.powi(149) < 650.0 && 650.0 <= base.powi(150));
        // The next interval starts empty; the cumulative view keeps adding.
        acc.push(1, 0, 1_100_000, 400.0);
        let d = acc.finish(1_100_000);
        assert_eq!(d.entries[0].interval.count, 1);
        assert_eq!(d.entries[0].total.count, 11);
        assert_eq!(
            d.entries[0].total.histogram.positive.iter().sum::<u64>(),
            11
        );
        assert_eq!(d.entries[0].start_us, 100_000);
        assert_eq!(d.interval_start_us, 1_000_000);
    }

    #[test]
    fn a_wide_range_lowers_the_scale_and_zeros_count_apart() {
        let mut acc = Accumulator::new(specs(), 1, Duration::from_secs(1));
        for (k, v) in [0.0, 0.001, 1.0, 1.0e6, -5.0].into_iter().enumerate() {
            acc.push(0, 0, k as i64 + 1, v);
        }
        let d = acc.finish(10);
        let h = &d.entries[0].interval.histogram;
        assert!(h.scale < MAX_SCALE);
        assert!(h.positive.len() <= MAX_BUCKETS);
        assert_eq!(h.zero_count, 1);
        assert_eq!(h.positive.iter().sum::<u64>(), 3);
        assert_eq!(h.negative.iter().sum::<u64>(), 1);
        assert_eq!(d.entries[0].interval.min, -5.0);
    }

    #[test]
    fn a_kept_entity_keeps_its_cursor_across_a_change() {
        let mut acc = Accumulator::new(specs(), 2, Duration::from_secs(1));
        acc.push(0, 0, 10, 1.0);
        acc.push(1, 0, 20, 2.0);
        acc.finish(20);
        // Entity 1 is now first; entity 0 left; a new one joined.
        acc.remap(&[Some(1), None]);
        assert_eq!((acc.cursor(0, 0), acc.cursor(1, 0)), (20, 0));
        assert_eq!(acc.push(0, 0, 20, 9.0), Pushed::Old);
        acc.push(0, 0, 30, 3.0);
        let d = acc.finish(30);
        assert_eq!(d.entries[0].total.count, 2);
    }

    #[test]
    fn quantiles_from_the_buckets_are_within_half_a_bucket() {
        let mut acc = Accumulator::new(specs(), 1, Duration::from_secs(100));
        for k in 1..=1000 {
            acc.push(0, 0, k, k as f64);
        }
        let d = acc.finish(1000);
        let e = &d.entries[0];
        for (got, want) in e.quantiles.iter().zip([500.0, 900.0, 990.0]) {
            assert!((got / want - 1.0).abs() <= 0.022, "{got} for {want}");
        }
        assert_eq!((e.interval.min, e.interval.max), (1.0, 1000.0));
    }

    #[test]
    fn the_cap_drops_and_counts() {
        let mut acc = Accumulator::new(specs(), 1, Duration::from_millis(100));
        // One sample expected per interval: the cap is 2 + 16.
        for k in 1..=20 {
            acc.push(0, 0, k, 1.0);
        }
        assert_eq!(acc.take_dropped(), 2);
        assert_eq!(acc.finish(20).entries[0].interval.count, 18);
    }

    #[test]
    fn merging_histograms_of_different_scales() {
        let mut acc = Accumulator::new(specs(), 1, Duration::from_secs(10));
        acc.push(0, 0, 1, 300.0);
        acc.finish(1);
        acc.push(0, 0, 2, 0.01);
        acc.push(0, 0, 3, 1.0e9);
        let d = acc.finish(3);
        let t = &d.entries[0].total;
        assert_eq!(t.count, 3);
        assert!(t.histogram.scale <= d.entries[0].interval.histogram.scale);
        assert_eq!(t.histogram.positive.iter().sum::<u64>(), 3);
        assert!(t.histogram.positive.len() <= MAX_BUCKETS);
    }

    /// The octave-table bucket index is the log2 formula's, but within rounding of a bucket edge.
    #[test]
    fn table_index_matches_the_log2_formula() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits((x >> 12) | (((x % 60) + 1000) << 52));
            let fast = index(v, MAX_SCALE);
            let slow = ((v.log2() * 16.0).ceil() as i32) - 1;
            if fast != slow {
                let edge = (f64::from(fast.max(slow)) / 16.0).exp2();
                assert!((v / edge - 1.0).abs() < 1e-12, "{v}: {fast} vs {slow}");
            }
        }
    }
}
