//! The simulator's samples between collections, for the sampled fields (`--distribution`): what DCGM
//! would hold for a field watched at its own interval. Sample `k` of a field is taken at simulated
//! time `k × interval`; a collection reads every sample in `(previous collection, this one]` (the
//! first collection: the interval before it) and pushes them into the [`Accumulator`] with wall-clock
//! timestamps, as a DCGM source pushes what `dcgmGetValuesSince_v2` returns.
//!
//! Without a waveform a sample follows the load model: the line from the previous collection's value
//! to this one's, ±2 % noise, and bursts — runs of about five samples 8–28 % above the line, as a
//! training step's power or an inference batch's utilization spikes — bounded below by 0 and above by
//! 1 for ratios and 100 for integer percentages; the sample at the collection itself is the collection's
//! value, so the last value always lies within the interval's min and max. A scenario's `waveforms`
//! (a square wave: low, high, period, duty) replace the model for a field on one GPU or all (and their
//! MIG instances; [`super::waveforms`]), for the last value as for the samples, so a test knows the
//! exact answer.

use std::sync::Arc;
use std::time::Duration;

use super::fleet::{mix, unit, Fleet};
use super::waveforms::Waveforms;
use crate::fields::{catalog, EntityLevel, ValueType};
use crate::snapshot::distribution::{Accumulator, DistributionSpec, Distributions};
use crate::snapshot::Entity;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// The sampled fields of the simulated fleet: samples generated per collection, folded by the
/// [`Accumulator`].
#[derive(Debug)]
pub struct Sampler {
    acc: Accumulator,
    /// Per spec: its interval in µs, the level its field is read at, integer or not.
    every_us: Vec<i64>,
    levels: Vec<EntityLevel>,
    integer: Vec<bool>,
    /// Per entity and spec: the value at the previous collection (NaN: none).
    previous: Vec<f64>,
    /// Wall-clock µs at simulated time 0.
    base_us: i64,
    seed: u64,
    dropped: Option<Arc<Metric>>,
}

impl Sampler {
    pub fn new(
        specs: Arc<[DistributionSpec]>,
        entities: usize,
        collect: Duration,
        seed: u64,
        base_us: i64,
    ) -> Sampler {
        let info = |s: &DistributionSpec| catalog().by_id(s.field);
        Sampler {
            every_us: specs
                .iter()
                .map(|s| (s.every.as_micros() as i64).max(1))
                .collect(),
            levels: specs
                .iter()
                .map(|s| info(s).map_or(EntityLevel::Gpu, |f| f.level))
                .collect(),
            integer: specs
                .iter()
                .map(|s| info(s).is_some_and(|f| f.value_type == ValueType::Int64))
                .collect(),
            previous: vec![f64::NAN; entities * specs.len()],
            acc: Accumulator::new(specs, entities, collect),
            base_us,
            seed,
            dropped: None,
        }
    }

    /// Count samples dropped at the cap in `dcgm_otel_distribution_samples_dropped_total`.
    pub fn count_dropped(&mut self, self_metrics: &SelfMetrics) {
        self.dropped = Some(dropped_metric(self_metrics));
    }

    /// The entities changed: `previous[i]` is the old index of new entity `i` when it was there
    /// before (it keeps its cursors and cumulative view); a new one starts afresh.
    pub fn remap(&mut self, previous: &[Option<usize>]) {
        self.acc.remap(previous);
        let per = self.every_us.len();
        let old = std::mem::take(&mut self.previous);
        self.previous = vec![f64::NAN; previous.len() * per];
        for (new, was) in previous.iter().enumerate() {
            for s in 0..per {
                if let Some(v) = was.and_then(|w| old.get(w * per + s)) {
                    self.previous[new * per + s] = *v;
                }
            }
        }
    }

    /// The noise and bursts of one entity's field: a board-level field (power) is the GPU's, the same
    /// on each of its MIG instances, as DCGM reads it once per board.
    fn salt(&self, entity: &Entity, spec: usize) -> u64 {
        let board = !self.levels[spec].measured_per_gpu_instance();
        let who = match (board, entity.gpu_index()) {
            (true, Some(gpu)) => u64::from(gpu),
            _ => (u64::from(entity.kind as u8) << 32) | u64::from(entity.entity_id),
        };
        mix(self.seed ^ mix(who ^ ((spec as u64) << 40)))
    }

    /// Push every sample in `(now_us - step_us, now_us]` (simulated µs) of every entity and spec, and
    /// fold them.
    pub fn collect(
        &mut self,
        fleet: &Fleet,
        entities: &[Arc<Entity>],
        waveforms: &Waveforms,
        step_us: i64,
        now_us: i64,
    ) -> Distributions {
        let specs = self.acc.specs().clone();
        for (e, entity) in entities.iter().enumerate() {
            for (s, spec) in specs.iter().enumerate() {
                if !entity.kind.reads(self.levels[s]) {
                    continue;
                }
                let wave = waveforms.find(entity, spec.field);
                let current = match wave {
                    Some(w) => Some(w.at(now_us)),
                    None => fleet
                        .value(entity.kind, entity.entity_id, spec.field)
                        .as_f64(),
                };
                let slot = e * specs.len() + s;
                let Some(current) = current else {
                    self.previous[slot] = f64::NAN;
                    continue;
                };
                let previous = self.previous[slot];
                self.previous[slot] = current;
                let line = Line {
                    from: if previous.is_nan() { current } else { previous },
                    to: current,
                    start_us: now_us - step_us,
                    step_us,
                    integer: self.integer[s],
                    salt: self.salt(entity, s),
                };
                let every = self.every_us[s];
                let first = (now_us - step_us).div_euclid(every) + 1;
                for k in first..=now_us.div_euclid(every) {
                    let t = k * every;
                    let v = match wave {
                        Some(w) => w.at(t),
                        None if t == now_us => current,
                        None => line.sample(k, t),
                    };
                    self.acc.push(e, s, self.base_us + t, v);
                }
            }
        }
        if let Some(m) = &self.dropped {
            let n = self.acc.take_dropped();
            if n > 0 {
                m.add(n as f64);
            }
        }
        self.acc.finish(self.base_us + now_us)
    }
}

/// `dcgm_otel_distribution_samples_dropped_total`: samples over a slot's cap, not folded.
pub fn dropped_metric(self_metrics: &SelfMetrics) -> Arc<Metric> {
    self_metrics.counter(
        "dcgm_otel_distribution_samples_dropped_total",
        "Samples of a sampled field (--distribution) beyond the per-entity cap of one interval, left out of its distribution.",
        &[],
    )
}

/// The load model of one slot between two collections.
struct Line {
    from: f64,
    to: f64,
    start_us: i64,
    step_us: i64,
    integer: bool,
    salt: u64,
}

impl Line {
    /// Sample `k` at `t_us`: on the line, with noise and the burst of its run of five.
    fn sample(&self, k: i64, t_us: i64) -> f64 {
        let frac = ((t_us - self.start_us) as f64 / self.step_us.max(1) as f64).clamp(0.0, 1.0);
        let base = self.from + (self.to - self.from) * frac;
        let noise = unit(self.salt ^ mix(k as u64)) - 0.5;
        let run = k.div_euclid(5) as u64;
        let burst = if unit(self.salt ^ mix(run ^ 0xB0B0)) < 0.12 {
            0.08 + 0.2 * unit(self.salt ^ mix(run ^ 0xB1B1))
        } else {
            0.0
        };
        let v = base * (1.0 + 0.04 * noise + burst);
        let top = self.from.max(self.to);
        let ceiling = if top <= 1.0 && !self.integer {
            1.0
        } else if self.integer && top <= 100.0 {
            100.0
        } else {
            f64::INFINITY
        };
        let floor = if self.from.min(self.to) >= 0.0 {
            0.0
        } else {
            f64::NEG_INFINITY
        };
        let v = v.clamp(floor, ceiling);
        // As the fleet writes its values: whole numbers, watts to the milliwatt, ratios to 1e-6.
        if self.integer {
            v.round()
        } else if top > 1.0 {
            (v * 1e3).round() / 1e3
        } else {
            (v * 1e6).round() / 1e6
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::devices::Selectors;
    use crate::counters::CounterSet;
    use crate::source::sim::{Scenario, SimSource};
    use crate::source::Source;

    fn source(scenario: &str, specs: &[&str]) -> SimSource {
        let scenario = Scenario::parse(scenario, "test").unwrap();
        let counters = crate::counters::parse(
            "DCGM_FI_DEV_POWER_USAGE, gauge, p\nDCGM_FI_DEV_GPU_UTIL, gauge, u\n",
            "test",
        )
        .unwrap();
        let mut s = SimSource::new(
            &scenario,
            7,
            "node-a",
            Arc::new(CounterSet { ..counters }),
            &Selectors::default(),
            Duration::from_secs(1),
        )
        .unwrap();
        let specs: Vec<DistributionSpec> = specs
            .iter()
            .map(|t| crate::config::distributions::parse_spec(t).unwrap())
            .collect();
        s.sample_distributions(specs.into(), None);
        s
    }

    #[test]
    fn a_square_wave_gives_its_levels_and_the_sample_count() {
        let mut s = source(
            "gpus: [{model: H100-SXM5-80GB, load: training}]\nwaveforms:\n  - { field: DCGM_FI_DEV_POWER_USAGE, square: { low: 250, high: 650, period: 400ms } }\n",
            &["DCGM_FI_DEV_POWER_USAGE@100ms"],
        );
        for poll in 0..5 {
            let r = s.poll().unwrap();
            let e = &r.distributions.entries[0];
            assert_eq!(e.interval.count, 10, "poll {poll}");
            assert_eq!((e.interval.min, e.interval.max), (250.0, 650.0));
            let last = r.entities[0].values.get(0).unwrap().as_f64().unwrap();
            assert!(last == 250.0 || last == 650.0, "{last}");
            assert_eq!(e.total.count, 10 * (poll + 1));
        }
    }

    #[test]
    fn the_load_model_brackets_the_last_value_and_bursts() {
        let mut s = source(
            "gpus: [{model: H100-SXM5-80GB, load: inference}]\n",
            &[
                "DCGM_FI_DEV_POWER_USAGE@100ms",
                "DCGM_FI_DEV_GPU_UTIL@250ms",
            ],
        );
        let mut burst = false;
        for _ in 0..20 {
            let r = s.poll().unwrap();
            assert_eq!(r.distributions.entries.len(), 2);
            for e in &r.distributions.entries {
                let last = r.entities[0].values.get(e.spec).unwrap().as_f64().unwrap();
                assert!(e.interval.min <= last && last <= e.interval.max);
                assert_eq!(e.interval.count, [10, 4][e.spec]);
                burst |= e.spec == 0 && e.interval.max > last * 1.07;
                assert!(e.spec == 0 || e.interval.max <= 100.0);
            }
        }
        assert!(burst, "no burst above the line in 20 collections");
    }
}
