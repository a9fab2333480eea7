//! Simulated Grace CPUs and their cores: each core's utilization follows the CPU's load pattern with
//! per-core noise, clocks rise with load, temperature and power follow the mean utilization. Core-level
//! fields read on a CPU itself answer the mean over its cores. Deterministic, like the GPU model.

use std::f64::consts::TAU;
use std::sync::Arc;

use super::scenario::Load;
use crate::fields::{FieldId, ValueType};
use crate::snapshot::{Absent, CpuIdentity, FieldValue};

/// One simulated CPU.
#[derive(Debug)]
pub struct SimCpu {
    pub identity: Arc<CpuIdentity>,
    /// DCGM core ids, ascending.
    pub cores: Vec<u32>,
    load: Load,
    phase: f64,
    period_s: f64,
    util: Vec<f64>,
    temp_c: f64,
    power_w: f64,
}

/// Grace: 3.1 GHz base, 3.4 GHz boost, 1 GHz idle (the clock field is in kHz, as cpufreq reports).
const IDLE_KHZ: f64 = 1_000_000.0;
const MAX_KHZ: f64 = 3_400_000.0;
const TDP_W: f64 = 250.0;

impl SimCpu {
    pub fn new(
        identity: Arc<CpuIdentity>,
        cores: Vec<u32>,
        load: Load,
        phase: f64,
        period_s: f64,
    ) -> SimCpu {
        let n = cores.len();
        SimCpu {
            identity,
            cores,
            load,
            phase,
            period_s,
            util: vec![0.0; n],
            temp_c: 32.0,
            power_w: 40.0,
        }
    }

    /// Advance to simulated time `t` (`dt` seconds later); `jitter(k)` is deterministic noise in
    /// -0.5..0.5.
    pub fn advance(&mut self, t: f64, dt: f64, jitter: &dyn Fn(u64) -> f64) {
        let wave = (TAU * t / self.period_s + self.phase).sin();
        let target = match self.load {
            Load::Idle => 0.01,
            Load::Training => 0.35 + 0.1 * wave,
            Load::Inference => 0.25 + 0.15 * wave,
            Load::Mixed => 0.3 + 0.25 * wave,
        };
        for (i, u) in self.util.iter_mut().enumerate() {
            *u = (target + 0.2 * jitter(100 + i as u64)).clamp(0.0, 1.0);
        }
        let mean = self.mean_util();
        self.power_w = 40.0 + (TDP_W - 40.0) * mean + 4.0 * jitter(90);
        let alpha = if dt > 0.0 {
            1.0 - (-dt / 30.0).exp()
        } else {
            1.0
        };
        self.temp_c += (30.0 + 45.0 * mean - self.temp_c) * alpha;
    }

    fn mean_util(&self) -> f64 {
        if self.util.is_empty() {
            0.0
        } else {
            self.util.iter().sum::<f64>() / self.util.len() as f64
        }
    }

    fn clock_khz(util: f64) -> i64 {
        (IDLE_KHZ + (MAX_KHZ - IDLE_KHZ) * util.sqrt()).round() as i64 / 1000 * 1000
    }

    /// A core-level field from a utilization `u` (0..=1).
    fn core_field(u: f64, field: FieldId) -> Option<FieldValue> {
        let r6 = |x: f64| (x * 1e6).round() / 1e6;
        Some(match field {
            1100 => FieldValue::Double(r6(u)),
            1101 => FieldValue::Double(r6(u * 0.86)),
            1102 => FieldValue::Double(0.0),
            1103 => FieldValue::Double(r6(u * 0.11)),
            1104 => FieldValue::Double(r6(u * 0.03)),
            1120 => FieldValue::Int(SimCpu::clock_khz(u)),
            _ => return None,
        })
    }

    /// The value of a CPU-level or (averaged over the cores) core-level field on the CPU.
    pub fn cpu_value(&self, field: FieldId, ty: ValueType) -> FieldValue {
        if let Some(v) = SimCpu::core_field(self.mean_util(), field) {
            return v;
        }
        let r3 = |x: f64| (x * 1e3).round() / 1e3;
        match field {
            1110 => FieldValue::Double(r3(self.temp_c)),
            1111 => FieldValue::Double(90.0),
            1112 => FieldValue::Double(95.0),
            1130 => FieldValue::Double(r3(self.power_w)),
            1131 => FieldValue::Double(TDP_W),
            1132 => FieldValue::Double(r3(12.0 + 8.0 * self.mean_util())),
            1133 => FieldValue::Double(r3(self.power_w + 12.0 + 8.0 * self.mean_util() + 140.0)),
            1140 => FieldValue::Text("NVIDIA".into()),
            1141 => FieldValue::Text("Grace".into()),
            _ => match ty {
                ValueType::String | ValueType::Binary => FieldValue::Absent(Absent::Blank),
                _ => FieldValue::Absent(Absent::NotSupported),
            },
        }
    }

    /// The value of a core-level field on core `core`; `None` when the CPU does not own it.
    pub fn core_value(&self, core: u32, field: FieldId) -> Option<FieldValue> {
        let i = self.cores.iter().position(|c| *c == core)?;
        Some(
            SimCpu::core_field(self.util[i], field)
                .unwrap_or(FieldValue::Absent(Absent::NotSupported)),
        )
    }
}
