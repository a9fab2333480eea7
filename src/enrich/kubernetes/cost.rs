//! Cost allocation at the source: how many GPU-seconds and joules each pod consumed, and how long it held
//! a GPU it did not use — three counter families derived on the collector thread from the attributed
//! readings, kept here with all their state (per pod × device accumulators and their retention).
//!
//! | family | unit | what |
//! |---|---|---|
//! | `dcgm_otel_pod_gpu_seconds_total` | s | GPU-seconds held: seconds × the pod's share of the physical GPU |
//! | `dcgm_otel_pod_gpu_energy_joules_total` | J | the GPU's energy over those seconds × the same share |
//! | `dcgm_otel_pod_gpu_idle_seconds_total` | s | the GPU-seconds during which utilization stayed below `--idle-utilization-threshold` |
//!
//! **Accounting.** Each collection closes the interval since the previous one; the interval is charged
//! to the pods that held the device at the previous collection (what the kubelet said then holds until
//! it says otherwise), so a pod seen at N consecutive collections is charged N intervals (the last one
//! when it is first seen gone). A device not read at the previous collection (first collection, source
//! down) charges nothing for the gap. The length of an interval is measured on the monotonic clock.
//!
//! **Shares.** A whole GPU held by one pod: 1. A MIG instance: its compute slices (the `Ng` of its
//! profile) over the GPU's (7; 4 on an A30). A device held by N pods (time slicing, MPS, a shared MIG
//! instance): 1/N each ([`equal_shares`]). Per-process data (NVML, being added separately) can replace
//! the equal split: [`CostAccumulator::collect`] takes a [`ShareSource`], whose answer per device is a
//! fraction per holder; until a source supplies one, shares are by pod count.
//!
//! **Energy** is the delta of `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (millijoules since the driver
//! loaded) over the interval — a MIG instance uses its GPU's counter — never sampled power when the
//! counter is read. When the counter is not in the counters CSV or not available on the device, the
//! energy of the interval is estimated from `DCGM_FI_DEV_POWER_USAGE` at both ends (trapezoid); with
//! neither, the interval has no energy. Every interval is counted by where its energy came from in
//! `dcgm_otel_pod_energy_intervals_total{source="counter|power|none"}`. A counter that goes backwards
//! (driver reload) gives the interval no energy.
//!
//! **Idle** uses `DCGM_FI_DEV_GPU_UTIL` (percent) read at the closing collection, else
//! `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (ratio × 100; the only utilization a MIG instance has). Without
//! either the interval is neither idle nor busy: the idle family has a series only for pods whose
//! device reported a utilization.
//!
//! **Series.** One per pod attribute set (namespace, pod, container and whatever else the pod's series
//! carry: pod labels, pod_uid, vgpu, dra_*) and device: monotonic while the pod holds the device; a pod
//! that moves to another GPU starts a series there and keeps the old one (frozen) until it expires. A
//! series not held for `--pod-series-retention` is dropped, and at most [`MAX_SERIES`] pod × device
//! series are kept (the longest unheld go first), so cardinality and memory stay bounded under churn.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::counters::CounterSet;
use crate::snapshot::attribution::POD;
use crate::snapshot::{
    Attribute, DerivedFamily, DerivedInfo, DerivedKind, DerivedSample, DerivedSubject, Entity,
    EntityKind, EntityReading, FieldValue,
};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// `dcgm_otel_pod_gpu_seconds_total`.
pub static GPU_SECONDS: DerivedInfo = DerivedInfo {
    name: "dcgm_otel_pod_gpu_seconds_total",
    help: Cow::Borrowed("GPU-seconds held by the pod: seconds held times the pod's share of the GPU (1 for a whole GPU, compute slices / GPU slices for a MIG instance, 1/N for one of N pods sharing a device)."),
    unit: "s",
    kind: DerivedKind::Counter,
    otel_name: "nvidia.pod.gpu.time",
    subject: DerivedSubject::Holder,
};

/// `dcgm_otel_pod_gpu_energy_joules_total`.
pub static GPU_ENERGY: DerivedInfo = DerivedInfo {
    name: "dcgm_otel_pod_gpu_energy_joules_total",
    help: Cow::Borrowed("Energy of the GPU while the pod held it, times the pod's share, in joules (from the GPU's energy counter)."),
    unit: "J",
    kind: DerivedKind::Counter,
    otel_name: "nvidia.pod.gpu.energy",
    subject: DerivedSubject::Holder,
};

/// `dcgm_otel_pod_gpu_idle_seconds_total`.
pub static GPU_IDLE_SECONDS: DerivedInfo = DerivedInfo {
    name: "dcgm_otel_pod_gpu_idle_seconds_total",
    help: Cow::Borrowed("GPU-seconds held by the pod while the device's utilization stayed below the idle threshold."),
    unit: "s",
    kind: DerivedKind::Counter,
    otel_name: "nvidia.pod.gpu.idle_time",
    subject: DerivedSubject::Holder,
};

/// Most pod × device series kept at once (beyond it the longest-unheld are dropped first).
pub const MAX_SERIES: usize = 20_000;

/// DCGM field ids read.
const FIELD_POWER: u16 = 155;
const FIELD_ENERGY: u16 = 156;
const FIELD_GPU_UTIL: u16 = 203;
const FIELD_GR_ENGINE_ACTIVE: u16 = 1001;

/// Settings of the cost counters.
#[derive(Debug, Clone, Copy)]
pub struct CostSettings {
    /// `--idle-utilization-threshold`, percent: below it an interval is idle.
    pub idle_threshold_percent: f64,
    /// `--pod-series-retention`: how long a series no pod holds is kept.
    pub retention: Duration,
}

/// Per-holder fractions of a device's interval when something measures them (per-process data);
/// `None` means split equally by pod count.
pub trait ShareSource {
    fn shares(&self, entity: &Entity, holders: &[Arc<[Attribute]>]) -> Option<Vec<f64>>;
}

/// No per-process data: every device is split equally.
pub struct EqualShares;

impl ShareSource for EqualShares {
    fn shares(&self, _: &Entity, _: &[Arc<[Attribute]>]) -> Option<Vec<f64>> {
        None
    }
}

/// Shares measured from the collection's per-process data (`--collect-processes`), for shared devices
/// only: a device held by one pod is all that pod's, whoever else runs on it. Between the pods holding
/// a shared device the device-seconds (and energy) are split by their processes' SM use
/// ([`crate::snapshot::pod_split::pod_usage`]), normalised over the holders so the device is charged
/// whole (a process of no pod takes no share); two containers of one pod split their pod's share.
/// When none of the holders' processes used SM (or nothing is known of them) the split stays equal.
pub struct ProcessShares<'a> {
    pub processes: &'a [crate::snapshot::ProcessReading],
}

impl ShareSource for ProcessShares<'_> {
    fn shares(&self, entity: &Entity, holders: &[Arc<[Attribute]>]) -> Option<Vec<f64>> {
        if holders.len() < 2 {
            return None;
        }
        let (usage, _) = crate::snapshot::pod_split::pod_usage(self.processes, entity);
        let pod_of = |attrs: &[Attribute]| {
            let get = |name: &str| {
                attrs
                    .iter()
                    .find(|a| a.key.prometheus == name)
                    .map(|a| a.value.to_string())
            };
            Some((get("namespace")?, get("pod")?))
        };
        let pods: Vec<Option<(String, String)>> = holders.iter().map(|h| pod_of(h)).collect();
        let raw: Vec<f64> = pods
            .iter()
            .map(|key| {
                let Some((ns, pod)) = key else { return 0.0 };
                let entries = pods
                    .iter()
                    .filter(|k| k.as_ref() == Some(&(ns.clone(), pod.clone())))
                    .count();
                usage
                    .iter()
                    .find(|u| u.pod.namespace == *ns && u.pod.pod == *pod)
                    .map_or(0.0, |u| u.sm_util.max(0.0) / entries.max(1) as f64)
            })
            .collect();
        let sum: f64 = raw.iter().sum();
        (sum > 0.0).then(|| raw.iter().map(|r| r / sum).collect())
    }
}

/// The equal split of a device between `holders` pods.
pub fn equal_shares(holders: usize) -> Vec<f64> {
    if holders == 0 {
        return Vec::new();
    }
    vec![1.0 / holders as f64; holders]
}

/// The fraction of its physical GPU an entity is: 1 for a GPU, slices / GPU slices for a MIG instance.
pub fn device_fraction(entity: &Entity) -> f64 {
    match (&entity.kind, &entity.mig) {
        (EntityKind::GpuInstance, Some(m)) => {
            let slices = profile_slices(&m.profile).unwrap_or(1);
            let total = entity.gpu.as_ref().map_or(7, |g| gpu_slices(&g.model));
            (f64::from(slices) / f64::from(total)).min(1.0)
        }
        _ => 1.0,
    }
}

/// Compute slices of a MIG profile name (`3g.40gb` → 3; `1g.10gb+me` → 1).
pub fn profile_slices(profile: &str) -> Option<u32> {
    let (n, _) = profile.split_once('g')?;
    n.parse().ok().filter(|n| *n > 0)
}

/// Compute slices of a whole GPU: 4 on an A30, 7 on every other MIG-capable GPU (A100, H100, H200,
/// B200, GH200).
pub fn gpu_slices(model: &str) -> u32 {
    if model.contains("A30") {
        4
    } else {
        7
    }
}

/// Where the interval's energy came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EnergySource {
    Counter,
    Power,
    None,
}

/// What was read on one device at one collection.
#[derive(Debug, Clone)]
struct DeviceSample {
    at: f64,
    /// The energy counter of the device's GPU, in millijoules.
    energy_mj: Option<f64>,
    power_w: Option<f64>,
    holders: Vec<Arc<[Attribute]>>,
}

/// One pod × device series.
#[derive(Debug)]
struct Account {
    entity: Arc<Entity>,
    attributes: Arc<[Attribute]>,
    seconds: f64,
    energy_j: f64,
    energy_known: bool,
    idle_s: f64,
    idle_known: bool,
    /// Monotonic time (s) this pod last held the device.
    last_held: f64,
}

struct CostMetrics {
    series: Arc<Metric>,
    dropped_retention: Arc<Metric>,
    dropped_limit: Arc<Metric>,
    from_counter: Arc<Metric>,
    from_power: Arc<Metric>,
    no_energy: Arc<Metric>,
}

impl CostMetrics {
    fn new(registry: &SelfMetrics) -> CostMetrics {
        let dropped = |reason: &str| {
            registry.counter(
                "dcgm_otel_pod_cost_series_dropped_total",
                "Pod cost series dropped: no pod held the device for --pod-series-retention (retention), or the series limit was reached (limit).",
                &[("reason", reason)],
            )
        };
        let energy = |source: &str| {
            registry.counter(
                "dcgm_otel_pod_energy_intervals_total",
                "Device intervals charged to pods, by where their energy came from: the energy counter, sampled power at both ends (the counter was not read), or none.",
                &[("source", source)],
            )
        };
        CostMetrics {
            series: registry.gauge(
                "dcgm_otel_pod_cost_series",
                "Pod x device series of the cost counters kept (held now or within --pod-series-retention).",
                &[],
            ),
            dropped_retention: dropped("retention"),
            dropped_limit: dropped("limit"),
            from_counter: energy("counter"),
            from_power: energy("power"),
            no_energy: energy("none"),
        }
    }
}

/// Column indices of the fields read, in a counter set.
#[derive(Debug, Clone, Copy, Default)]
struct Columns {
    energy: Option<usize>,
    power: Option<usize>,
    util: Option<usize>,
    engine: Option<usize>,
}

impl Columns {
    fn of(counters: &CounterSet) -> Columns {
        let find = |id: u16| counters.rows.iter().position(|r| r.field.id == id);
        Columns {
            energy: find(FIELD_ENERGY),
            power: find(FIELD_POWER),
            util: find(FIELD_GPU_UTIL),
            engine: find(FIELD_GR_ENGINE_ACTIVE),
        }
    }
}

fn value(e: &EntityReading, column: Option<usize>) -> Option<f64> {
    e.values.get(column?).and_then(FieldValue::as_f64)
}

/// The cost counters' state: per device the last collection's reading, per pod × device the totals.
pub struct CostAccumulator {
    settings: CostSettings,
    devices: HashMap<Arc<Entity>, DeviceSample>,
    accounts: Vec<Account>,
    index: HashMap<(Arc<Entity>, Arc<[Attribute]>), usize>,
    columns: Option<(Arc<CounterSet>, Columns)>,
    metrics: CostMetrics,
}

impl CostAccumulator {
    pub fn new(settings: CostSettings, registry: &SelfMetrics) -> CostAccumulator {
        CostAccumulator {
            settings,
            devices: HashMap::new(),
            accounts: Vec::new(),
            index: HashMap::new(),
            columns: None,
            metrics: CostMetrics::new(registry),
        }
    }

    fn columns(&mut self, counters: &CounterSet) -> Columns {
        match &self.columns {
            Some((c, cols)) if **c == *counters => *cols,
            _ => {
                let cols = Columns::of(counters);
                self.columns = Some((Arc::new(counters.clone()), cols));
                cols
            }
        }
    }

    /// Account one collection read at monotonic time `now` (seconds) and return the three families.
    pub fn collect(
        &mut self,
        entities: &[EntityReading],
        counters: &CounterSet,
        now: f64,
        shares: &dyn ShareSource,
    ) -> Vec<DerivedFamily> {
        let cols = self.columns(counters);
        let threshold = self.settings.idle_threshold_percent;
        // Each GPU's energy counter and power, for its MIG instances.
        let mut gpu_energy: HashMap<u32, (Option<f64>, Option<f64>)> = HashMap::new();
        for e in entities {
            if e.entity.kind == EntityKind::Gpu {
                gpu_energy.insert(
                    e.entity.gpu_index().unwrap_or(u32::MAX),
                    (value(e, cols.energy), value(e, cols.power)),
                );
            }
        }
        let mut seen: HashMap<Arc<Entity>, DeviceSample> =
            HashMap::with_capacity(self.devices.len());
        for e in entities {
            // Pods hold GPUs and MIG instances; links, NvSwitches and CPUs are nobody's.
            if !matches!(e.entity.kind, EntityKind::Gpu | EntityKind::GpuInstance) {
                continue;
            }
            let (energy_mj, power_w) = match e.entity.kind {
                EntityKind::GpuInstance => {
                    let parent = e
                        .entity
                        .gpu_index()
                        .and_then(|g| gpu_energy.get(&g).copied());
                    (
                        parent.and_then(|p| p.0).or_else(|| value(e, cols.energy)),
                        parent.and_then(|p| p.1).or_else(|| value(e, cols.power)),
                    )
                }
                _ => (value(e, cols.energy), value(e, cols.power)),
            };
            let util = value(e, cols.util).or_else(|| value(e, cols.engine).map(|r| r * 100.0));
            let holders: Vec<Arc<[Attribute]>> = e
                .attribution
                .sets()
                .filter(|set| set.iter().any(|a| a.key.prometheus == POD.prometheus))
                .map(Arc::from)
                .collect();
            for h in &holders {
                self.account(&e.entity, h, now);
            }
            if let Some(last) = self.devices.get(&e.entity) {
                let last = last.clone();
                self.charge(
                    &e.entity, &last, now, energy_mj, power_w, util, threshold, shares,
                );
            }
            seen.insert(
                e.entity.clone(),
                DeviceSample {
                    at: now,
                    energy_mj,
                    power_w,
                    holders,
                },
            );
        }
        self.devices = seen;
        self.expire(now);
        self.metrics.series.set(self.accounts.len() as f64);
        self.families()
    }

    /// Charge the interval since `last` to the pods that held the device then.
    #[allow(clippy::too_many_arguments)]
    fn charge(
        &mut self,
        entity: &Arc<Entity>,
        last: &DeviceSample,
        now: f64,
        energy_mj: Option<f64>,
        power_w: Option<f64>,
        util: Option<f64>,
        threshold: f64,
        shares: &dyn ShareSource,
    ) {
        if last.holders.is_empty() {
            return;
        }
        let dt = (now - last.at).max(0.0);
        let (energy_j, source) = match (last.energy_mj, energy_mj) {
            (Some(a), Some(b)) if b >= a => (Some((b - a) / 1000.0), EnergySource::Counter),
            (Some(_), Some(_)) => (None, EnergySource::None),
            _ => match (last.power_w, power_w) {
                (Some(a), Some(b)) => (Some((a + b) * 0.5 * dt), EnergySource::Power),
                _ => (None, EnergySource::None),
            },
        };
        match source {
            EnergySource::Counter => self.metrics.from_counter.inc(),
            EnergySource::Power => self.metrics.from_power.inc(),
            EnergySource::None => self.metrics.no_energy.inc(),
        }
        let fraction = device_fraction(entity);
        let split = shares
            .shares(entity, &last.holders)
            .filter(|s| s.len() == last.holders.len())
            .unwrap_or_else(|| equal_shares(last.holders.len()));
        let idle = util.map(|u| u < threshold);
        for (holder, share) in last.holders.iter().zip(split) {
            let w = fraction * share;
            let i = self.account(entity, holder, last.at);
            if let Some(a) = self.accounts.get_mut(i) {
                a.seconds += dt * w;
                if let Some(j) = energy_j {
                    a.energy_j += j * w;
                    a.energy_known = true;
                }
                if let Some(idle) = idle {
                    a.idle_known = true;
                    if idle {
                        a.idle_s += dt * w;
                    }
                }
            }
        }
    }

    /// The account of a pod on a device (created at 0), marked held at `at`.
    fn account(&mut self, entity: &Arc<Entity>, attributes: &Arc<[Attribute]>, at: f64) -> usize {
        let key = (entity.clone(), attributes.clone());
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                self.accounts.push(Account {
                    entity: entity.clone(),
                    attributes: attributes.clone(),
                    seconds: 0.0,
                    energy_j: 0.0,
                    energy_known: false,
                    idle_s: 0.0,
                    idle_known: false,
                    last_held: at,
                });
                self.index.insert(key, self.accounts.len() - 1);
                self.accounts.len() - 1
            }
        };
        if let Some(a) = self.accounts.get_mut(i) {
            a.last_held = a.last_held.max(at);
        }
        i
    }

    /// Drop series not held within the retention, and the longest-unheld beyond [`MAX_SERIES`].
    fn expire(&mut self, now: f64) {
        let keep_s = self.settings.retention.as_secs_f64();
        let before = self.accounts.len();
        self.accounts.retain(|a| now - a.last_held <= keep_s);
        let expired = before - self.accounts.len();
        if expired > 0 {
            self.metrics.dropped_retention.add(expired as f64);
        }
        if self.accounts.len() > MAX_SERIES {
            self.accounts
                .sort_by(|a, b| b.last_held.total_cmp(&a.last_held));
            let over = self.accounts.len() - MAX_SERIES;
            self.accounts.truncate(MAX_SERIES);
            self.metrics.dropped_limit.add(over as f64);
        }
        if self.accounts.len() != before || self.index.len() != self.accounts.len() {
            self.reindex();
        }
    }

    fn reindex(&mut self) {
        self.index.clear();
        for (i, a) in self.accounts.iter().enumerate() {
            self.index
                .insert((a.entity.clone(), a.attributes.clone()), i);
        }
    }

    /// The three families, series ordered by GPU, instance, then attributes.
    fn families(&mut self) -> Vec<DerivedFamily> {
        let mut order: Vec<usize> = (0..self.accounts.len()).collect();
        let sort_key = |a: &Account| {
            (
                a.entity.gpu_index(),
                a.entity.mig.as_ref().map_or(0, |m| m.gi_id + 1),
            )
        };
        order.sort_by(|&x, &y| {
            let (a, b) = (&self.accounts[x], &self.accounts[y]);
            sort_key(a)
                .cmp(&sort_key(b))
                .then_with(|| a.attributes.cmp(&b.attributes))
        });
        let mut seconds = Vec::with_capacity(order.len());
        let mut energy = Vec::with_capacity(order.len());
        let mut idle = Vec::with_capacity(order.len());
        for i in order {
            let a = &self.accounts[i];
            let sample = |value: f64| DerivedSample {
                entity: a.entity.clone(),
                attributes: a.attributes.clone(),
                labels: Vec::new(),
                value,
            };
            seconds.push(sample(round(a.seconds)));
            if a.energy_known {
                energy.push(sample(round(a.energy_j)));
            }
            if a.idle_known {
                idle.push(sample(round(a.idle_s)));
            }
        }
        vec![
            DerivedFamily {
                info: Cow::Borrowed(&GPU_SECONDS),
                samples: seconds,
            },
            DerivedFamily {
                info: Cow::Borrowed(&GPU_ENERGY),
                samples: energy,
            },
            DerivedFamily {
                info: Cow::Borrowed(&GPU_IDLE_SECONDS),
                samples: idle,
            },
        ]
    }
}

/// Millisecond-ish precision: totals are written with at most 6 decimals (no float noise in the text).
fn round(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::ProcessReading;

    #[test]
    fn profile_and_gpu_slices() {
        assert_eq!(profile_slices("1g.10gb"), Some(1));
        assert_eq!(profile_slices("3g.40gb"), Some(3));
        assert_eq!(profile_slices("1g.10gb+me"), Some(1));
        assert_eq!(profile_slices("x"), None);
        assert_eq!(gpu_slices("NVIDIA A30"), 4);
        assert_eq!(gpu_slices("NVIDIA H100 80GB HBM3"), 7);
        assert_eq!(equal_shares(4), vec![0.25; 4]);
        assert!(equal_shares(0).is_empty());
    }

    fn holder(ns: &str, pod: &str) -> Arc<[Attribute]> {
        use crate::snapshot::attribution::{NAMESPACE, POD};
        Arc::from(vec![
            Attribute::new(&NAMESPACE, ns),
            Attribute::new(&POD, pod),
        ])
    }

    fn process(gpu: &Arc<Entity>, pid: u32, sm: f64, pod: Option<(&str, &str)>) -> ProcessReading {
        let mut p = ProcessReading::new(gpu.clone(), pid, "python3");
        p.sm_util = Some(sm);
        if let Some((ns, name)) = pod {
            let mut a = crate::snapshot::Attribution::default();
            a.add(&holder(ns, name));
            p.attribution = Arc::new(a);
        }
        p
    }

    /// Shared devices split by the holders' SM use, normalised so the device is charged whole; one
    /// holder keeps the device whatever else runs; two containers of a pod split its share.
    #[test]
    fn process_shares_split_shared_devices_only_and_charge_them_whole() {
        let gpu = Arc::new(Entity::gpu(Arc::new(crate::snapshot::GpuIdentity {
            index: 0,
            uuid: "GPU-a".into(),
            pci_bus_id: "0".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            serial: String::new(),
            vbios: String::new(),
        })));
        let procs = vec![
            process(&gpu, 1, 60.0, Some(("ml", "a"))),
            process(&gpu, 2, 20.0, Some(("ml", "b"))),
            process(&gpu, 3, 20.0, None),
        ];
        let shares = ProcessShares { processes: &procs };
        let got = shares
            .shares(&gpu, &[holder("ml", "a"), holder("ml", "b")])
            .unwrap();
        assert!(
            (got[0] - 0.75).abs() < 1e-9 && (got[1] - 0.25).abs() < 1e-9,
            "{got:?}"
        );
        // One holder: the whole device (the equal split of one), the non-pod process takes nothing.
        assert_eq!(shares.shares(&gpu, &[holder("ml", "a")]), None);
        // Two containers of pod a (two holder entries) and pod b: a's 60 split between its entries.
        let got = shares
            .shares(
                &gpu,
                &[holder("ml", "a"), holder("ml", "a"), holder("ml", "b")],
            )
            .unwrap();
        assert!((got.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{got:?}");
        assert!(
            (got[0] - 0.375).abs() < 1e-9 && (got[2] - 0.25).abs() < 1e-9,
            "{got:?}"
        );
        // No SM use by any holder: equal split.
        let idle = vec![process(&gpu, 3, 40.0, None)];
        let shares = ProcessShares { processes: &idle };
        assert_eq!(
            shares.shares(&gpu, &[holder("ml", "a"), holder("ml", "b")]),
            None
        );
    }
}
