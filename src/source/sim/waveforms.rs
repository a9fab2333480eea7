//! A scenario's `waveforms:`: fields that follow a known shape instead of the load model — for the
//! last value and for every sample between collections ([`super::sampling`]) — so a test knows the
//! exact distribution it must see. One shape so far: a square wave (a training step's power: low,
//! high, period, duty), on one GPU (and its MIG instances) or on all.

use serde::Deserialize;

use crate::config::duration::parse_go_duration;
use crate::fields::{catalog, FieldId, ValueType};
use crate::snapshot::{Entity, FieldValue};

/// A scenario's `waveforms:` entry: `{ field, gpu?, square: { low, high, period, duty } }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioWaveform {
    /// A numeric DCGM field, by name.
    pub field: String,
    /// One GPU (by index) and its MIG instances; every GPU when absent.
    #[serde(default)]
    pub gpu: Option<u32>,
    pub square: Square,
}

/// A square wave: `high` for the first `duty` of each `period` (from simulated time 0), `low` after.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Square {
    pub low: f64,
    pub high: f64,
    /// A Go duration (`2s`, `400ms`).
    pub period: String,
    #[serde(default = "half")]
    pub duty: f64,
}

fn half() -> f64 {
    0.5
}

impl ScenarioWaveform {
    /// A numeric field, a GPU of the scenario, a positive period, a duty strictly between 0 and 1.
    pub fn check(&self, gpus: u32) -> Result<(), String> {
        self.resolve(gpus).map(|_| ())
    }

    fn resolve(&self, gpus: u32) -> Result<Waveform, String> {
        let what = format!("waveform of {}", self.field);
        let field = catalog()
            .by_name(&self.field)
            .ok_or_else(|| format!("{what}: unknown DCGM field '{}'", self.field))?;
        if !field.value_type.is_numeric() || !field.level.applies_to_gpus() {
            return Err(format!("{what}: not a numeric GPU field"));
        }
        if let Some(g) = self.gpu.filter(|g| *g >= gpus) {
            return Err(format!(
                "{what}: GPU {g}; the scenario has GPUs 0 to {}",
                gpus - 1
            ));
        }
        let s = &self.square;
        let period = parse_go_duration(&s.period).map_err(|e| format!("{what}: period: {e}"))?;
        let period_us = period.as_micros() as i64;
        if period_us <= 0 {
            return Err(format!("{what}: period must be greater than 0"));
        }
        if !(s.duty > 0.0 && s.duty < 1.0 && s.low.is_finite() && s.high.is_finite()) {
            return Err(format!(
                "{what}: duty must be between 0 and 1 and the levels finite numbers"
            ));
        }
        Ok(Waveform {
            field: field.id,
            integer: field.value_type == ValueType::Int64,
            gpu: self.gpu,
            low: s.low,
            high: s.high,
            period_us,
            high_us: (period_us as f64 * s.duty).round() as i64,
        })
    }
}

/// A checked waveform.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Waveform {
    field: FieldId,
    integer: bool,
    gpu: Option<u32>,
    low: f64,
    high: f64,
    period_us: i64,
    high_us: i64,
}

impl Waveform {
    pub(super) fn at(&self, t_us: i64) -> f64 {
        if t_us.rem_euclid(self.period_us) < self.high_us {
            self.high
        } else {
            self.low
        }
    }
}

/// A scenario's waveforms, checked (a scenario is checked when parsed; one built in code may be
/// wrong: its bad waveforms are left out).
#[derive(Debug, Clone, Default)]
pub struct Waveforms(Vec<Waveform>);

impl Waveforms {
    pub fn new(list: &[ScenarioWaveform], gpus: u32) -> Waveforms {
        Waveforms(list.iter().filter_map(|w| w.resolve(gpus).ok()).collect())
    }

    pub(super) fn find(&self, entity: &Entity, field: FieldId) -> Option<&Waveform> {
        if self.0.is_empty() || !entity.kind.is_gpu_side() {
            return None;
        }
        let gpu = entity.gpu_index();
        self.0
            .iter()
            .find(|w| w.field == field && (w.gpu.is_none() || w.gpu == gpu))
    }

    /// The value of `field` on `entity` at simulated time `t_us`, when a waveform sets it.
    pub fn value(&self, entity: &Entity, field: FieldId, t_us: i64) -> Option<FieldValue> {
        let w = self.find(entity, field)?;
        let v = w.at(t_us);
        Some(if w.integer {
            FieldValue::Int(v.round() as i64)
        } else {
            FieldValue::Double(v)
        })
    }
}
