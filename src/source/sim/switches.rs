//! Simulated NvSwitches (an HGX baseboard's switch chips) and their NvLink ports: temperature and rail
//! power follow the traffic, per-port transmit/receive counters grow with the GPUs' mean utilization
//! (the traffic an all-reduce puts on the fabric, from what they held at start), error counters stay at
//! zero; fields not modelled (IDDQ currents, latency histograms) are absent. Link-level fields read
//! on a switch itself answer the sum over its ports. Deterministic, like the GPU model.

use crate::fields::{FieldId, ValueType};
use crate::snapshot::{Absent, FieldValue};

/// DCGM numbers switch ports in the packed link id; the simulator uses its own dense numbering.
pub const PORT_ID_STRIDE: u32 = 64;

/// One simulated NvSwitch.
#[derive(Debug)]
pub struct SimSwitch {
    /// DCGM switch id.
    pub id: u32,
    /// Ports that are up (0-based port numbers `0..ports`).
    pub ports: u32,
    phase: f64,
    temp_c: f64,
    power_vdd_w: f64,
    tx_kib: Vec<f64>,
    rx_kib: Vec<f64>,
}

/// The simulator's entity id of port `port` of switch `switch` (the fake libdcgm packs real DCGM link
/// ids and maps them to these).
pub fn port_entity_id(switch: u32, port: u32) -> u32 {
    switch * PORT_ID_STRIDE + port
}

/// DCGM fields measured per NvSwitch port (the `DCGM_FI_DEV_NVSWITCH_LINK_*` family); the other
/// link-level fields are NVML's per-GPU-link counters.
pub fn is_switch_port_field(field: FieldId) -> bool {
    (780..=878).contains(&field)
}

/// A port's error counters (fatal, non-fatal, replay, recovery, flit, CRC, ECC; per-lane CRC and ECC):
/// 0 on a healthy fabric. Its latency histograms and per-lane throughputs are not modelled.
fn port_error_counter(field: FieldId) -> bool {
    (782..=788).contains(&field) || (809..=824).contains(&field)
}

impl SimSwitch {
    /// Switch `id` with `ports` ports up; `start_kib`: what each port's counters hold at start (the
    /// traffic since the driver loaded).
    pub fn new(id: u32, ports: u32, phase: f64, start_kib: f64) -> SimSwitch {
        SimSwitch {
            id,
            ports,
            phase,
            temp_c: 34.0,
            power_vdd_w: 18.0,
            tx_kib: vec![start_kib; ports as usize],
            rx_kib: vec![start_kib; ports as usize],
        }
    }

    /// Advance by `dt` seconds with the GPUs' mean utilization `util` (0..=100); `jitter(k)` is the
    /// fleet's deterministic noise in -0.5..0.5.
    pub fn advance(&mut self, dt: f64, util: f64, jitter: &dyn Fn(u64) -> f64) {
        let u = (util / 100.0).clamp(0.0, 1.0);
        // An NVLink 4 port carries up to 25 GB/s each way; the fabric sees about 60 % of it under load.
        let per_port = 25.0e9 * 0.6 * u / 1024.0;
        for (p, (tx, rx)) in self.tx_kib.iter_mut().zip(&mut self.rx_kib).enumerate() {
            let skew = 1.0 + 0.1 * jitter(50 + p as u64) + 0.05 * (self.phase + p as f64).sin();
            *tx += per_port * skew * dt;
            *rx += per_port * (2.0 - skew) * dt;
        }
        self.power_vdd_w = 18.0 + 40.0 * u + 1.5 * jitter(60);
        let target = 33.0 + 22.0 * u;
        let alpha = if dt > 0.0 {
            1.0 - (-dt / 60.0).exp()
        } else {
            1.0
        };
        self.temp_c += (target - self.temp_c) * alpha;
    }

    /// The value of a switch-level or (summed over the ports) link-level field on the switch.
    pub fn switch_value(&self, field: FieldId, ty: ValueType) -> FieldValue {
        match field {
            701 => FieldValue::Int(850),
            705 => FieldValue::Int(self.power_vdd_w.round() as i64),
            706 => FieldValue::Int((self.power_vdd_w * 0.45).round() as i64),
            707 => FieldValue::Int((self.power_vdd_w * 0.2).round() as i64),
            856 | 857 | 864 => FieldValue::Int(0),
            858 => FieldValue::Int(self.temp_c.round() as i64),
            859 => FieldValue::Int(95),
            860 => FieldValue::Int(105),
            861 => FieldValue::Int(self.tx_kib.iter().sum::<f64>() as i64),
            862 => FieldValue::Int(self.rx_kib.iter().sum::<f64>() as i64),
            863 => FieldValue::Int(i64::from(self.id)),
            866 | 868 | 869 => FieldValue::Int(0),
            867 => FieldValue::Int(0x5 + i64::from(self.id)),
            1524 => FieldValue::Text("96.10.6D.00.01".into()),
            780 => FieldValue::Int(self.tx_kib.iter().sum::<f64>() as i64),
            781 => FieldValue::Int(self.rx_kib.iter().sum::<f64>() as i64),
            f if port_error_counter(f) => FieldValue::Int(0),
            f if is_switch_port_field(f) => FieldValue::Absent(Absent::NotSupported),
            _ => match ty {
                ValueType::String | ValueType::Binary => FieldValue::Absent(Absent::Blank),
                _ => FieldValue::Absent(Absent::NotSupported),
            },
        }
    }

    /// The value of a link-level field on one port; `None` when the port does not exist.
    pub fn port_value(&self, port: u32, field: FieldId) -> Option<FieldValue> {
        let p = port as usize;
        let (tx, rx) = (*self.tx_kib.get(p)?, *self.rx_kib.get(p)?);
        Some(match field {
            780 => FieldValue::Int(tx as i64),
            781 => FieldValue::Int(rx as i64),
            f if port_error_counter(f) => FieldValue::Int(0),
            865 => FieldValue::Int(i64::from(port)),
            // ACTIVE
            870 => FieldValue::Int(2),
            // NSCQ device type: GPU
            871 => FieldValue::Int(1),
            // The remote GPU's PCIe domain, device and function (its bus and link are not modelled).
            872 | 874 | 875 => FieldValue::Int(0),
            873 | 876..=878 => FieldValue::Absent(Absent::Blank),
            // NVML's per-GPU-link counters do not exist on a switch port.
            _ => FieldValue::Absent(Absent::NotSupported),
        })
    }
}
