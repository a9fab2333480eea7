//! The simulated fleet's physics: a value model (GPU models and MIG profiles in [`super::models`]) in
//! which utilization drives
//! power, temperature and clocks, energy is a monotonic counter and framebuffer used + free = total.
//!
//! Everything is deterministic: identities (UUIDs, serials) come from the seed and the node's name, so
//! two simulated nodes of one scenario never share a GPU UUID, and values from the seed and the
//! simulated time, which advances by exactly the collect interval per poll. Two runs with the same
//! scenario, seed, node name and number of polls produce the same numbers — what the golden-file tests
//! rely on (`NODE_NAME=golden-host`). The fake libdcgm serves this same model through the DCGM C ABI.
//!
//! Every value is modelled (from the load, or from the GPU model's specifications: power limits,
//! temperature thresholds, maximum clocks) or absent: a field the model has no story for reads blank,
//! never a made-up 0. A 0 is written only where it is the modelled truth (no XID yet, no ECC error on a
//! healthy GPU, no video engine work, an idle GPU's NvLink rate). NvLink bandwidth fields are rates, as
//! DCGM reports them (MB/s, and bytes/s for the profiling ones); the cumulative per-link data counters
//! NVML has are kept for the fake libnvidia-ml ([`Fleet::link_data_kib`]).

use std::collections::HashSet;
use std::f64::consts::TAU;
use std::sync::Arc;

use super::cpus::SimCpu;
use super::events::SimEvents;
use super::models::{mig_profile, mig_slices, model, GpuModel};
use super::scenario::{GpuGroup, Load, Scenario};
use super::switches::{is_switch_port_field, port_entity_id, SimSwitch, PORT_ID_STRIDE};
use crate::fields::{catalog, EntityLevel, FieldId};
use crate::snapshot::inventory::{CpuInfo, GpuInfo, Inventory, SwitchInfo};
use crate::snapshot::{Absent, CpuIdentity, EntityKind, FieldValue, GpuIdentity, MigIdentity};
use crate::source::incidents::HealthIncident;

/// DCGM numbers GPU-instance entities per GPU in blocks of this size.
pub const INSTANCE_ID_STRIDE: u32 = 8;

/// A MIG instance with its simulation state.
#[derive(Debug)]
struct SimInstance {
    identity: Arc<MigIdentity>,
    mem_mib: i64,
    slices: u32,
    phase: f64,
    util: f64,
}

/// One simulated GPU: identity, MIG layout and state.
#[derive(Debug)]
pub struct SimGpu {
    pub identity: Arc<GpuIdentity>,
    pub instances: Vec<Arc<MigIdentity>>,
    pub nvlinks: u32,
    model: &'static GpuModel,
    load: Load,
    xid: i64,
    phase: f64,
    period_s: f64,
    serial: String,
    mig: Vec<SimInstance>,
    // state
    util: f64,
    temp_c: f64,
    power_w: f64,
    energy_mj: f64,
    /// The instantaneous power reading (W): the averaged power with its own ripple.
    power_instant_w: f64,
    pcie_replays: i64,
    /// NvLink data rate over all links, bytes per second, half transmitted and half received.
    nvlink_bytes_per_s: f64,
    /// Per link: data transmitted and received since the driver loaded, in KiB (NVML's counters).
    link_data_kib: Vec<(f64, f64)>,
    /// PCIe bytes sent and received (the integral of the simulated PCIe rates).
    pcie_tx_bytes: f64,
    pcie_rx_bytes: f64,
}

/// The simulated fleet.
#[derive(Debug)]
pub struct Fleet {
    gpus: Vec<SimGpu>,
    switches: Vec<SimSwitch>,
    cpus: Vec<SimCpu>,
    driver_version: String,
    seed: u64,
    time_s: f64,
    step: u64,
    blank: HashSet<FieldId>,
    unsupported: HashSet<FieldId>,
    /// (GPU, instance) index of each MIG instance, indexed by its entity id (small and dense: GPU
    /// index × a stride + n): read once per value, so no hash and no search.
    by_instance: Vec<Option<(usize, usize)>>,
    events: SimEvents,
    /// Every XID so far, in time order.
    xid_log: Vec<SimXid>,
}

/// The GPU and instance index of every MIG instance, at its entity id.
fn instance_index(gpus: &[SimGpu]) -> Vec<Option<(usize, usize)>> {
    let mut index: Vec<Option<(usize, usize)>> = Vec::new();
    for (g, gpu) in gpus.iter().enumerate() {
        for (m, instance) in gpu.mig.iter().enumerate() {
            let id = instance.identity.entity_id as usize;
            if index.len() <= id {
                index.resize(id + 1, None);
            }
            if let Some(slot) = index.get_mut(id) {
                *slot = Some((g, m));
            }
        }
    }
    index
}

/// One XID occurrence of the simulated fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct SimXid {
    /// Simulated time in seconds (the collection's time; several in one collection 1 ms apart, the
    /// last at the collection's time).
    pub time_s: f64,
    pub gpu: u32,
    /// NVML GPU-instance id when it hit a MIG instance.
    pub gpu_i_id: Option<u32>,
    pub code: u32,
}

/// The seed of a fleet's identities: the value seed and the node's name (FNV-1a), so that two nodes
/// simulating the same scenario have different GPU UUIDs.
fn identity_seed(seed: u64, node: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    mix(seed ^ h)
}

/// splitmix64: a tiny, good-enough deterministic mixer.
pub(super) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The simulated board serial of GPU `salt` (13 digits, as NVIDIA boards have).
fn gpu_serial(seed: u64, salt: u64) -> String {
    format!("{:013}", mix(seed ^ (300 + salt)) % 10_000_000_000_000)
}

pub(super) fn unit(x: u64) -> f64 {
    (mix(x) >> 11) as f64 / (1u64 << 53) as f64
}

fn uuid(prefix: &str, seed: u64, salt: u64) -> String {
    let a = mix(seed ^ mix(salt));
    let b = mix(a ^ 0x5555);
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

const DGX_BUS_IDS: &[&str] = &["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"];

impl SimGpu {
    /// GPU `index` of a group: its identity and MIG instances from `ids` (the identity seed), its
    /// state from `seed`, at rest.
    fn new(model: &'static GpuModel, group: &GpuGroup, index: u32, seed: u64, ids: u64) -> SimGpu {
        let salt = u64::from(index);
        let bus = DGX_BUS_IDS
            .get(index as usize)
            .map(|b| b.to_string())
            .unwrap_or_else(|| format!("{:02X}", 0x18 + index * 0x10));
        let identity = Arc::new(GpuIdentity {
            index,
            uuid: uuid("GPU", ids, salt),
            pci_bus_id: format!("00000000:{bus}:00.0"),
            model: model.name.to_string(),
            serial: gpu_serial(ids, salt),
            vbios: model.vbios.to_string(),
        });
        let mig = sim_instances(model, &group.mig, index, seed, ids);
        let nvlinks = group.nvlinks.unwrap_or(model.nvlinks);
        SimGpu {
            instances: mig.iter().map(|m| m.identity.clone()).collect(),
            identity,
            nvlinks,
            model,
            load: group.load,
            xid: group.xid,
            phase: unit(seed ^ (100 + salt)) * TAU,
            period_s: 600.0 + 1200.0 * unit(seed ^ (200 + salt)),
            serial: gpu_serial(ids, salt),
            mig,
            util: 0.0,
            temp_c: 30.0,
            power_w: model.idle_w,
            power_instant_w: model.idle_w,
            energy_mj: 1.0e9 + 1.0e8 * unit(seed ^ (400 + salt)),
            pcie_replays: 0,
            nvlink_bytes_per_s: 0.0,
            link_data_kib: (0..nvlinks)
                .map(|l| {
                    let kib = 1.0e9 * unit(seed ^ (500 + salt) ^ (u64::from(l) << 12));
                    (kib, kib)
                })
                .collect(),
            // Traffic since the driver loaded, before the simulation starts.
            pcie_tx_bytes: 1.0e12 * unit(seed ^ (600 + salt)),
            pcie_rx_bytes: 3.0e12 * unit(seed ^ (700 + salt)),
        }
    }
}

/// The MIG instances of GPU `index` with the `profiles` of its layout (unknown ones left out), each
/// on the first GPU-instance id of its profile still free.
fn sim_instances(
    model: &'static GpuModel,
    profiles: &[String],
    index: u32,
    seed: u64,
    ids: u64,
) -> Vec<SimInstance> {
    let mut mig = Vec::new();
    let mut used_gi = HashSet::new();
    for (n, pname) in profiles.iter().enumerate() {
        let Some(p) = mig_profile(model, pname) else {
            continue;
        };
        let gi_id = p
            .gi_ids
            .iter()
            .copied()
            .find(|g| !used_gi.contains(g))
            .unwrap_or(100 + n as u32);
        used_gi.insert(gi_id);
        let entity_id = index * INSTANCE_ID_STRIDE + n as u32;
        mig.push(SimInstance {
            identity: Arc::new(MigIdentity {
                entity_id,
                gi_id,
                profile: p.name.to_string(),
                uuid: uuid("MIG", ids, 1000 + u64::from(entity_id)),
            }),
            mem_mib: p.mem_mib,
            slices: p.slices,
            phase: unit(seed ^ (7000 + u64::from(entity_id))) * TAU,
            util: 0.0,
        });
    }
    mig
}

/// The scenario's NvSwitches, numbered from 0.
fn sim_switches(scenario: &Scenario, seed: u64) -> Vec<SimSwitch> {
    let mut switches = Vec::new();
    for group in &scenario.nvswitches {
        for _ in 0..group.count {
            let id = switches.len() as u32;
            let phase = unit(seed ^ (8000 + u64::from(id))) * TAU;
            let start_kib = 1.0e9 * unit(seed ^ (8100 + u64::from(id)));
            switches.push(SimSwitch::new(
                id,
                group.links.min(PORT_ID_STRIDE),
                phase,
                start_kib,
            ));
        }
    }
    switches
}

/// The scenario's CPUs, numbered from 0, their cores numbered across them (serials from `ids`).
fn sim_cpus(scenario: &Scenario, seed: u64, ids: u64) -> Vec<SimCpu> {
    let mut cpus = Vec::new();
    let mut next_core = 0u32;
    for group in &scenario.cpus {
        for _ in 0..group.count {
            let id = cpus.len() as u32;
            let salt = 9000 + u64::from(id);
            let identity = Arc::new(CpuIdentity {
                index: id,
                serial: Some(format!("{:016X}", mix(ids ^ salt))),
            });
            let cores = (next_core..next_core + group.cores).collect();
            next_core += group.cores;
            cpus.push(SimCpu::new(
                identity,
                cores,
                group.load,
                unit(seed ^ (salt + 100)) * TAU,
                300.0 + 600.0 * unit(seed ^ (salt + 200)),
            ));
        }
    }
    cpus
}

impl Fleet {
    /// The fleet of `scenario` as node `node` simulates it: its identities from the seed and the node's
    /// name, its values from the seed.
    pub fn new(scenario: &Scenario, seed: u64, node: &str) -> Fleet {
        let ids = identity_seed(seed, node);
        let mut gpus = Vec::new();
        for group in &scenario.gpus {
            let Some(model) = model(&group.model) else {
                continue;
            };
            for _ in 0..group.count {
                gpus.push(SimGpu::new(model, group, gpus.len() as u32, seed, ids));
            }
        }
        let by_instance = instance_index(&gpus);
        let field_ids = |names: &[String]| {
            names
                .iter()
                .filter_map(|n| catalog().by_name(n).map(|f| f.id))
                .collect::<HashSet<_>>()
        };
        let mut fleet = Fleet {
            gpus,
            switches: sim_switches(scenario, seed),
            cpus: sim_cpus(scenario, seed, ids),
            driver_version: scenario.driver_version.clone(),
            seed,
            time_s: 0.0,
            step: 0,
            blank: field_ids(&scenario.blank_fields),
            unsupported: field_ids(&scenario.unsupported_fields),
            by_instance,
            // Checked when the scenario was parsed; a scenario built in code may have none.
            events: scenario.sim_events().unwrap_or_default(),
            xid_log: Vec::new(),
        };
        fleet.advance(0.0);
        fleet
    }

    pub fn gpus(&self) -> &[SimGpu] {
        &self.gpus
    }

    /// What a source would discover on this fleet.
    pub fn inventory(&self) -> Inventory {
        Inventory {
            gpus: self
                .gpus
                .iter()
                .map(|g| GpuInfo {
                    identity: g.identity.clone(),
                    instances: g.instances.clone(),
                    links: (0..g.nvlinks)
                        .map(|l| (link_entity_id(g.identity.index, l), l + 1))
                        .collect(),
                })
                .collect(),
            driver_version: Some(self.driver_version().to_string()),
            switches: self
                .switches
                .iter()
                .map(|s| SwitchInfo {
                    id: s.id,
                    links: (0..s.ports).map(|p| (port_entity_id(s.id, p), p)).collect(),
                })
                .collect(),
            cpus: self
                .cpus
                .iter()
                .map(|c| CpuInfo {
                    identity: c.identity.clone(),
                    cores: c.cores.clone(),
                })
                .collect(),
        }
    }

    /// The simulated NvSwitches.
    pub fn switches(&self) -> &[SimSwitch] {
        &self.switches
    }

    /// The simulated CPUs.
    pub fn cpus(&self) -> &[SimCpu] {
        &self.cpus
    }

    pub fn driver_version(&self) -> &str {
        &self.driver_version
    }

    /// Simulated seconds since the fleet was created.
    pub fn time(&self) -> f64 {
        self.time_s
    }

    /// The collection the fleet is at (1 for the first poll).
    pub fn collection(&self) -> u64 {
        self.step
    }

    /// Every XID so far, in time order.
    pub fn xid_log(&self) -> &[SimXid] {
        &self.xid_log
    }

    /// The clock-event bitmask (`DCGM_FI_DEV_CLOCKS_EVENT_REASONS`) of a GPU now.
    pub fn clock_mask(&self, gpu: u32) -> u64 {
        self.events.clock_mask(gpu, self.step)
    }

    /// The health incidents of a GPU now (what `dcgmHealthCheck` reports).
    pub fn health(&self, gpu: u32) -> Vec<HealthIncident> {
        self.events.health(gpu, self.step)
    }

    /// NvLink P2P status from `gpu` to `peer`: OK between two GPUs with NvLinks, NotSupported else.
    pub fn p2p_status(&self, gpu: u32, peer: u32) -> u32 {
        match (self.gpu(gpu), self.gpu(peer)) {
            (Some(a), Some(b)) if a.nvlinks > 0 && b.nvlinks > 0 => crate::fields::p2p::OK,
            _ => crate::fields::p2p::NOT_SUPPORTED,
        }
    }

    /// Append the XIDs of the collection just reached to the log; the GPU's last XID follows.
    fn record_xids(&mut self) {
        let xids = self.events.xids(self.step);
        let n = xids.len();
        for (k, (gpu, gpu_i_id, code)) in xids.into_iter().enumerate() {
            if let Some(g) = self.gpus.iter_mut().find(|g| g.identity.index == gpu) {
                g.xid = i64::from(code);
            }
            self.xid_log.push(SimXid {
                time_s: self.time_s - (n - 1 - k) as f64 * 1e-3,
                gpu,
                gpu_i_id,
                code,
            });
        }
    }

    /// Remove a GPU (a fault the fake libdcgm can inject).
    pub fn remove_gpu(&mut self, index: u32) {
        self.gpus.retain(|g| g.identity.index != index);
        self.by_instance = instance_index(&self.gpus);
    }

    /// Move simulated time forward by `dt` seconds and update every GPU's state.
    pub fn advance(&mut self, dt: f64) {
        let dt = dt.max(0.0);
        self.time_s += dt;
        self.step += 1;
        self.record_xids();
        let t = self.time_s;
        let seed = self.seed;
        let step = self.step;
        for g in &mut self.gpus {
            let salt = u64::from(g.identity.index);
            let jitter = |k: u64| unit(seed ^ mix(step ^ (k << 20) ^ salt)) - 0.5;
            let wave = (TAU * t / g.period_s + g.phase).sin();
            let target = match g.load {
                Load::Idle => 0.0,
                Load::Training => 88.0 + 8.0 * wave + 4.0 * jitter(1),
                Load::Inference => 45.0 + 30.0 * wave + 10.0 * jitter(2),
                Load::Mixed => {
                    if wave > -0.3 {
                        60.0 + 35.0 * wave + 6.0 * jitter(3)
                    } else {
                        0.0
                    }
                }
            };
            if g.mig.is_empty() {
                g.util = target.clamp(0.0, 100.0);
            } else {
                let mut weighted = 0.0;
                for (n, m) in g.mig.iter_mut().enumerate() {
                    let w = (TAU * t / g.period_s + m.phase).sin();
                    let u = if g.load == Load::Idle {
                        0.0
                    } else {
                        (55.0 + 40.0 * w + 8.0 * jitter(10 + n as u64)).clamp(0.0, 100.0)
                    };
                    m.util = u;
                    weighted += u * f64::from(m.slices);
                }
                g.util = (weighted / 7.0).clamp(0.0, 100.0);
            }
            let m = g.model;
            let u = g.util / 100.0;
            let power = m.idle_w + (m.max_w - m.idle_w) * u.powf(0.9) + 3.0 * jitter(4);
            // Energy integrates the mean power over the step (trapezoid), so it only ever grows.
            g.energy_mj += (g.power_w + power) * 0.5 * dt * 1000.0;
            g.power_w = power.max(m.idle_w * 0.8);
            // The instantaneous reading ripples around the averaged one (a few percent of the range).
            g.power_instant_w = (g.power_w + 0.04 * (m.max_w - m.idle_w) * jitter(5))
                .clamp(m.idle_w * 0.8, m.max_w * 1.05);
            let target_temp = 29.0 + 45.0 * u;
            let alpha = if dt > 0.0 {
                1.0 - (-dt / 45.0).exp()
            } else {
                1.0
            };
            g.temp_c += (target_temp - g.temp_c) * alpha;
            if g.util > 50.0 && unit(seed ^ mix(step ^ (salt << 8) ^ 99)) < 0.01 {
                g.pcie_replays += 1;
            }
            g.pcie_tx_bytes += pcie_tx_rate(u) * dt;
            g.pcie_rx_bytes += pcie_rx_rate(u) * dt;
            // NvLink traffic follows utilization: 20 GB/s at full load, spread over the links.
            g.nvlink_bytes_per_s = if g.link_data_kib.is_empty() {
                0.0
            } else {
                20.0e9 * u
            };
            let per_link_kib = g.nvlink_bytes_per_s / g.link_data_kib.len().max(1) as f64 / 2048.0;
            for (tx, rx) in &mut g.link_data_kib {
                *tx += per_link_kib * dt;
                *rx += per_link_kib * dt;
            }
        }
        let mean_util = if self.gpus.is_empty() {
            0.0
        } else {
            self.gpus.iter().map(|g| g.util).sum::<f64>() / self.gpus.len() as f64
        };
        for s in &mut self.switches {
            let salt = 0x5100 + u64::from(s.id);
            let jitter = |k: u64| unit(seed ^ mix(step ^ (k << 20) ^ salt)) - 0.5;
            s.advance(dt, mean_util, &jitter);
        }
        for c in &mut self.cpus {
            let salt = 0xC100 + u64::from(c.identity.index);
            let jitter = |k: u64| unit(seed ^ mix(step ^ (k << 20) ^ salt)) - 0.5;
            c.advance(t, dt, &jitter);
        }
    }

    fn gpu(&self, index: u32) -> Option<&SimGpu> {
        self.gpus.iter().find(|g| g.identity.index == index)
    }

    /// The latest value of `field` on an entity, as DCGM would report it.
    pub fn value(&self, kind: EntityKind, entity_id: u32, field: FieldId) -> FieldValue {
        let Some(info) = catalog().by_id(field) else {
            return FieldValue::Absent(Absent::NotFound);
        };
        if self.unsupported.contains(&field) {
            return FieldValue::Absent(Absent::NotSupported);
        }
        if self.blank.contains(&field) {
            return FieldValue::Absent(Absent::Blank);
        }
        if info.level == EntityLevel::Global {
            // Global fields (driver version, ...) read the same on every entity, as in DCGM.
            return self.global_value(field);
        }
        match kind {
            EntityKind::Gpu => match self.gpu(entity_id) {
                Some(g) => self.gpu_value(g, None, field),
                None => FieldValue::Absent(Absent::NotFound),
            },
            EntityKind::GpuInstance => match self.by_instance.get(entity_id as usize) {
                Some(&Some((gi, mi))) => {
                    let g = &self.gpus[gi];
                    self.gpu_value(g, Some(&g.mig[mi]), field)
                }
                _ => FieldValue::Absent(Absent::NotFound),
            },
            EntityKind::NvLink => {
                let gpu = entity_id / 32;
                let link = (entity_id % 32) as usize;
                match self.gpu(gpu) {
                    // NvSwitch port counters do not exist on a GPU's own links.
                    Some(g) if link < g.link_data_kib.len() && is_switch_port_field(field) => {
                        FieldValue::Absent(Absent::NotSupported)
                    }
                    Some(g) if link < g.link_data_kib.len() => self.link_value(g, field),
                    _ => FieldValue::Absent(Absent::NotFound),
                }
            }
            EntityKind::NvSwitch => match self.switches.iter().find(|s| s.id == entity_id) {
                Some(s) => s.switch_value(field, info.value_type),
                None => FieldValue::Absent(Absent::NotFound),
            },
            EntityKind::NvSwitchLink => {
                let (switch, port) = (entity_id / PORT_ID_STRIDE, entity_id % PORT_ID_STRIDE);
                self.switches
                    .iter()
                    .find(|s| s.id == switch)
                    .and_then(|s| s.port_value(port, field))
                    .unwrap_or(FieldValue::Absent(Absent::NotFound))
            }
            EntityKind::Cpu => match self.cpus.iter().find(|c| c.identity.index == entity_id) {
                Some(c) => c.cpu_value(field, info.value_type),
                None => FieldValue::Absent(Absent::NotFound),
            },
            EntityKind::CpuCore => self
                .cpus
                .iter()
                .find_map(|c| c.core_value(entity_id, field))
                .unwrap_or(FieldValue::Absent(Absent::NotFound)),
        }
    }

    /// A global field: the same on every entity.
    fn global_value(&self, field: FieldId) -> FieldValue {
        match field {
            1 => FieldValue::Text(self.driver_version.clone().into()),
            2 => FieldValue::Text(format!("12.{}", self.driver_version).into()),
            _ => FieldValue::Absent(Absent::Blank),
        }
    }

    /// Cumulative NvLink data (KiB transmitted, received) of link `link` of GPU `gpu` since the driver
    /// loaded: what NVML's per-link throughput counters hold (the fake libnvidia-ml serves them).
    pub fn link_data_kib(&self, gpu: u32, link: u32) -> Option<(f64, f64)> {
        self.gpu(gpu)?.link_data_kib.get(link as usize).copied()
    }

    fn link_value(&self, g: &SimGpu, field: FieldId) -> FieldValue {
        let per_link = g.nvlink_bytes_per_s / g.link_data_kib.len().max(1) as f64;
        match field {
            1508 => FieldValue::Int(1), // link state: up
            // Healthy links: no CRC, replay or recovery errors, no recovery or link-down event, no
            // uncorrectable or retried code word.
            1525..=1528 | 583..=585 | 587 | 588 | 590..=592 => FieldValue::Int(0),
            // Throughput in MB/s, both directions and each.
            1529 => FieldValue::Int((per_link / 1e6).round() as i64),
            1530 | 1531 => FieldValue::Int((per_link / 2e6).round() as i64),
            // The profiling counters' rates, bytes per second.
            1532 | 1533 => FieldValue::Int((per_link / 2.0).round() as i64),
            _ => FieldValue::Absent(Absent::Blank),
        }
    }

    fn gpu_value(&self, g: &SimGpu, mig: Option<&SimInstance>, field: FieldId) -> FieldValue {
        let m = g.model;
        let (util, fb_total) = match mig {
            Some(i) => (i.util, i.mem_mib),
            None => (g.util, m.fb_mib),
        };
        let u = util / 100.0;
        let busy = util > 1.0;
        // Computed in the arms that need them: most fields of a large counter set need neither.
        let fb_used = || {
            if busy {
                (fb_total as f64
                    * (0.35 + 0.5 * unit(self.seed ^ u64::from(g.identity.index) ^ 77)))
                    as i64
            } else {
                (fb_total as f64 * 0.005) as i64
            }
        };
        let not_on_mig = |v: FieldValue| {
            if mig.is_some() {
                FieldValue::Absent(Absent::NotSupported)
            } else {
                v
            }
        };
        let sm_clock = || {
            if busy {
                m.sm_max_mhz - ((1.0 - u) * 150.0) as i64
            } else {
                m.sm_idle_mhz
            }
        };
        let with_nvlink = |v: FieldValue| {
            if g.link_data_kib.is_empty() {
                FieldValue::Absent(Absent::NotSupported)
            } else {
                not_on_mig(v)
            }
        };
        match field {
            51 => FieldValue::Text("Nvidia".into()),
            53 => FieldValue::Text(g.serial.clone().into()),
            85 => FieldValue::Text(m.vbios.into()),
            100 => FieldValue::Int(sm_clock()),
            101 => FieldValue::Int(m.mem_mhz),
            112 => FieldValue::Int(self.clock_mask(g.identity.index) as i64),
            140 if !m.memory_sensor => FieldValue::Absent(Absent::NotSupported),
            140 => FieldValue::Int((g.temp_c + 4.0).round() as i64),
            150 => FieldValue::Int(g.temp_c.round() as i64),
            155 => FieldValue::Double((g.power_w * 1000.0).round() / 1000.0),
            156 => FieldValue::Int(g.energy_mj as i64),
            157 => FieldValue::Double((g.power_instant_w * 1000.0).round() / 1000.0),
            202 => FieldValue::Int(g.pcie_replays),
            203 => not_on_mig(FieldValue::Int(util.round() as i64)),
            204 => not_on_mig(FieldValue::Int((util * 0.6).round() as i64)),
            // No video engine work in the simulated loads.
            206 | 207 => not_on_mig(FieldValue::Int(0)),
            230 => FieldValue::Int(g.xid),
            250 => FieldValue::Int(fb_total),
            251 => FieldValue::Int(fb_total - fb_used()),
            252 => FieldValue::Int(fb_used()),
            253 => FieldValue::Int(if mig.is_some() { 0 } else { m.fb_reserved_mib }),
            254 => FieldValue::Double(((fb_used() as f64 / fb_total as f64) * 1e4).round() / 1e4),
            // NvLink bandwidth over all links: a rate in MB/s, as DCGM reports it.
            449 => with_nvlink(FieldValue::Int((g.nvlink_bytes_per_s / 1e6).round() as i64)),
            // vGPU licensing does not exist on a bare-metal GPU.
            526 => FieldValue::Absent(Absent::NotSupported),
            1001 => FieldValue::Double(round6(0.97 * u)),
            1002 => FieldValue::Double(round6(0.92 * u)),
            1003 => FieldValue::Double(round6(0.48 * u)),
            1004 => FieldValue::Double(round6(0.55 * u)),
            1005 => FieldValue::Double(round6(0.42 * u)),
            1006 => FieldValue::Double(round6(0.03 * u)),
            1007 => FieldValue::Double(round6(0.21 * u)),
            1008 => FieldValue::Double(round6(0.12 * u)),
            1009 => FieldValue::Double(pcie_tx_rate(u).round()),
            1010 => FieldValue::Double(pcie_rx_rate(u).round()),
            // NvLink data rates in bytes per second, each direction half of the traffic.
            1011 | 1012 => {
                with_nvlink(FieldValue::Int((g.nvlink_bytes_per_s / 2.0).round() as i64))
            }
            // Cumulative PCIe bytes: the rates above integrated over simulated time.
            1091 => FieldValue::Int(g.pcie_tx_bytes as i64),
            1092 => FieldValue::Int(g.pcie_rx_bytes as i64),
            _ => spec_value(m, field)
                .or_else(|| self.board_value(g, field, busy))
                .or_else(|| healthy_value(field, !g.link_data_kib.is_empty(), mig.is_some()))
                // A field the model has no story for is blank (as many text fields are on real
                // GPUs), never a made-up 0.
                .unwrap_or(FieldValue::Absent(Absent::Blank)),
        }
    }
}

impl Fleet {
    /// A field the board answers from what it is ([`GpuTraits`](super::models::GpuTraits)) and how it
    /// is set up (persistence on, compute mode Default, confidential computing off, P0), or its PCIe
    /// traffic; absent where the model's traits do not know it.
    fn board_value(&self, g: &SimGpu, field: FieldId, busy: bool) -> Option<FieldValue> {
        let m = g.model;
        let t = &m.traits;
        let int =
            |v: Option<i64>| v.map_or(FieldValue::Absent(Absent::NotSupported), FieldValue::Int);
        let u = g.util / 100.0;
        Some(match field {
            52 | 55 => FieldValue::Int(i64::from(g.identity.index)),
            58 => int(t.pci_device.map(|d| (i64::from(d) << 16) | 0x10DE)),
            63 => {
                let (major, minor) = t.compute_capability;
                FieldValue::Int((i64::from(major) << 32) | i64::from(minor))
            }
            65 | 74 | 190 => FieldValue::Int(0),
            66 => FieldValue::Int(1),
            67 => int(mig_slices(m).map(|_| i64::from(!g.mig.is_empty()))),
            69 => int(mig_slices(m).map(i64::from)),
            90 => int(t.bar1_mib),
            94 => FieldValue::Int(i64::from(t.gpm)),
            102 => int(t.video_mhz.map(|(idle, max)| if busy { max } else { idle })),
            115 => int(t.video_mhz.map(|(_, max)| max)),
            153 => int(m.specs.slowdown_c.map(|c| c - g.temp_c.round() as i64)),
            // PCIe throughput in KB/s (the simulated rates).
            200 => FieldValue::Int((pcie_tx_rate(u) / 1000.0).round() as i64),
            201 => FieldValue::Int((pcie_rx_rate(u) / 1000.0).round() as i64),
            235 | 237 => int(t.pcie_gen.map(i64::from)),
            236 | 238 => FieldValue::Int(16),
            _ => return None,
        })
    }
}

/// A field the GPU model's specifications answer: clocks' maxima and application clocks, power
/// limits, temperature thresholds (absent where the model's [`GpuSpecs`] does not know it).
fn spec_value(m: &GpuModel, field: FieldId) -> Option<FieldValue> {
    let s = &m.specs;
    let watts =
        |w: Option<f64>| w.map_or(FieldValue::Absent(Absent::NotSupported), FieldValue::Double);
    let celsius =
        |c: Option<i64>| c.map_or(FieldValue::Absent(Absent::NotSupported), FieldValue::Int);
    Some(match field {
        110 | 113 => FieldValue::Int(m.sm_max_mhz),
        111 | 114 => FieldValue::Int(m.mem_mhz),
        151 if !m.memory_sensor => FieldValue::Absent(Absent::NotSupported),
        151 => celsius(s.memory_max_operating_c),
        152 => celsius(s.max_operating_c),
        158 => celsius(s.slowdown_c),
        159 => celsius(s.shutdown_c),
        160 | 162..=164 => watts(s.power_limit_w),
        161 => watts(s.power_min_w),
        _ => return None,
    })
}

/// A health or error field of a healthy simulated GPU: ECC on and no ECC error, no retired page, no
/// row remapped, no NvLink error (on a GPU with NvLinks; not on MIG instances, as DCGM reports them).
fn healthy_value(field: FieldId, nvlinks: bool, mig: bool) -> Option<FieldValue> {
    Some(match field {
        300 => FieldValue::Int(1),
        301 => FieldValue::Int(1),
        310..=345 | 390..=392 => FieldValue::Int(0),
        393..=396 if mig => FieldValue::Absent(Absent::NotSupported),
        393..=396 => FieldValue::Int(0),
        400..=439 | 497..=499 if !nvlinks || mig => FieldValue::Absent(Absent::NotSupported),
        400..=439 | 497..=499 => FieldValue::Int(0),
        _ => return None,
    })
}

/// Simulated PCIe transmit and receive rates (bytes per second) at a utilization `u` in 0..=1.
fn pcie_tx_rate(u: f64) -> f64 {
    2.1e9 * u + 1.5e6
}

fn pcie_rx_rate(u: f64) -> f64 {
    6.4e9 * u + 2.5e6
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// DCGM entity id of link `link` (0-based) of GPU `gpu` in the simulated numbering.
/// The DCGM link entity id of NvLink `link` (0-based) of GPU `gpu`.
pub fn link_entity_id(gpu: u32, link: u32) -> u32 {
    gpu * 32 + link
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> Fleet {
        Fleet::new(&Scenario::load("default").unwrap(), 7, "node-a")
    }

    #[test]
    fn deterministic_for_a_seed() {
        let (mut a, mut b) = (fleet(), fleet());
        for _ in 0..5 {
            a.advance(30.0);
            b.advance(30.0);
        }
        assert_eq!(
            a.value(EntityKind::Gpu, 0, 155),
            b.value(EntityKind::Gpu, 0, 155)
        );
        assert_eq!(a.gpus()[0].identity, b.gpus()[0].identity);
    }

    #[test]
    fn energy_grows_and_fb_adds_up() {
        let mut f = fleet();
        let mut last = 0;
        for _ in 0..20 {
            f.advance(30.0);
            let FieldValue::Int(e) = f.value(EntityKind::Gpu, 0, 156) else {
                panic!()
            };
            assert!(e > last);
            last = e;
            let (FieldValue::Int(used), FieldValue::Int(free), FieldValue::Int(total)) = (
                f.value(EntityKind::Gpu, 0, 252),
                f.value(EntityKind::Gpu, 0, 251),
                f.value(EntityKind::Gpu, 0, 250),
            ) else {
                panic!()
            };
            assert_eq!(used + free, total);
        }
    }

    #[test]
    fn mig_instances_have_identities_and_no_gpu_util() {
        let f = fleet();
        let gpu1 = &f.gpus()[1];
        assert_eq!(gpu1.instances.len(), 3);
        assert!(gpu1.instances[0].uuid.starts_with("MIG-"));
        let id = gpu1.instances[0].entity_id;
        assert_eq!(
            f.value(EntityKind::GpuInstance, id, 203),
            FieldValue::Absent(Absent::NotSupported)
        );
        assert!(matches!(
            f.value(EntityKind::GpuInstance, id, 1001),
            FieldValue::Double(_)
        ));
    }
}
