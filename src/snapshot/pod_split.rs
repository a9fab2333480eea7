//! The true per-pod split of a shared GPU (time-slicing, MPS: several pods on one device), computed
//! from per-process data instead of repeating the device's values on every pod.
//!
//! The model, per device (GPU or MIG instance) and collection:
//! - a pod's **utilization** is the sum of its processes' SM utilization (percent of the device over
//!   the interval, as NVML samples it), capped at 100; its **framebuffer** is the sum of its processes'
//!   GPU memory;
//! - its **SM share** is its SM utilization divided by the SM utilization of *all* processes on the
//!   device (pods, processes outside any pod, the `other` fold) — so a pod never gets what a host
//!   process used;
//! - **power and energy** split in proportion to the SM share: `power_pod = power_device × share`,
//!   `energy_pod = Δenergy_device × share` over the interval. When no process used the SM at all
//!   (an idle shared GPU) the device's power and energy are split evenly among the pods holding it:
//!   idle power is the cost of holding the device.
//!
//! Per-device values (temperature, clocks) are not split. Input: the snapshot's processes
//! ([`pod_usage`]) and the device's power and energy increment; output: one [`PodShare`] per pod
//! ([`split`]). The Prometheus renderer writes the `dcgm_otel_pod_gpu_*` split series from it; with
//! `--kubernetes-virtual-gpus` each pod's `DCGM_FI_DEV_GPU_UTIL`/`DCGM_FI_DEV_FB_USED` series carry its
//! [`pod_usage`] sums (`enrich::kubernetes::virtual_gpus`), and the per-pod cost counters split a
//! shared device by them too (their energy increment needs the previous collection's counter, which
//! those counters keep).

use std::collections::BTreeMap;

use super::{Entity, ProcessReading};

/// A pod, as `namespace/pod`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub pod: String,
}

/// What a pod's processes used on one device during one collection.
#[derive(Debug, Clone, PartialEq)]
pub struct PodUsage {
    pub pod: PodKey,
    /// Sum of its processes' SM utilization, percent of the device.
    pub sm_util: f64,
    /// Sum of its processes' GPU memory, bytes.
    pub memory_bytes: u64,
    pub processes: u32,
}

/// The device's side of the split.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DeviceUse {
    /// SM utilization of every process on the device (pods and others), percent.
    pub total_sm_util: f64,
    /// Device power draw, W.
    pub power_w: Option<f64>,
    /// Device energy over the interval, mJ (the increment of the energy counter).
    pub energy_delta_mj: Option<f64>,
}

/// One pod's part of a shared device.
#[derive(Debug, Clone, PartialEq)]
pub struct PodShare {
    pub pod: PodKey,
    /// Percent of the device (sum of its processes), at most 100.
    pub utilization: f64,
    pub memory_bytes: u64,
    /// Fraction of the device's SM use (0 to 1) that power and energy follow.
    pub share: f64,
    pub power_w: Option<f64>,
    pub energy_mj: Option<f64>,
}

/// Per-pod sums of the processes running on `entity` (processes without a pod are not a pod's),
/// and the device's total SM utilization over all its processes. Pods sorted by namespace, name.
pub fn pod_usage(processes: &[ProcessReading], entity: &Entity) -> (Vec<PodUsage>, f64) {
    let mut pods: BTreeMap<PodKey, PodUsage> = BTreeMap::new();
    let mut total = 0.0;
    for p in processes.iter().filter(|p| *p.entity == *entity) {
        let sm = p.sm_util.unwrap_or(0.0);
        total += sm;
        let mut ns = None;
        let mut name = None;
        for set in p.attribution.sets() {
            for a in set {
                match &*a.key.prometheus {
                    "namespace" => ns = Some(a.value.to_string()),
                    "pod" => name = Some(a.value.to_string()),
                    _ => {}
                }
            }
        }
        let (Some(namespace), Some(pod)) = (ns, name) else {
            continue;
        };
        let key = PodKey { namespace, pod };
        let u = pods.entry(key.clone()).or_insert(PodUsage {
            pod: key,
            sm_util: 0.0,
            memory_bytes: 0,
            processes: 0,
        });
        u.sm_util += sm;
        u.memory_bytes += p.memory_bytes.unwrap_or(0);
        u.processes += p.count;
    }
    (pods.into_values().collect(), total)
}

/// Split a device among the pods using it (see the module doc for the model). Pods that hold the device
/// without a running process can be passed with zero usage: they get a part only when nothing ran.
pub fn split(device: DeviceUse, pods: &[PodUsage]) -> Vec<PodShare> {
    let busy = device.total_sm_util > 0.0;
    let n = pods.len().max(1) as f64;
    pods.iter()
        .map(|u| {
            let share = if busy {
                (u.sm_util / device.total_sm_util).clamp(0.0, 1.0)
            } else {
                1.0 / n
            };
            PodShare {
                pod: u.pod.clone(),
                utilization: u.sm_util.min(100.0),
                memory_bytes: u.memory_bytes,
                share,
                power_w: device.power_w.map(|p| p * share),
                energy_mj: device.energy_delta_mj.map(|e| e * share),
            }
        })
        .collect()
}

/// `DCGM_FI_DEV_POWER_USAGE`, the power a device's split follows.
const POWER_USAGE_FIELD: u16 = 155;

/// Every device of `snap` that runs a pod's processes (in the order they first appear among the
/// processes), with each pod's share of it ([`pod_usage`] then [`split`], the device's power from its
/// `DCGM_FI_DEV_POWER_USAGE` reading). What the :9400 split series and the OTLP pods' Resources show.
pub fn snapshot_shares(snap: &super::Snapshot) -> Vec<(std::sync::Arc<Entity>, Vec<PodShare>)> {
    let power_row = snap
        .counters
        .rows
        .iter()
        .position(|r| r.field.id == POWER_USAGE_FIELD);
    let mut devices: Vec<std::sync::Arc<Entity>> = Vec::new();
    for p in &snap.processes {
        if !devices.iter().any(|d| **d == *p.entity) {
            devices.push(p.entity.clone());
        }
    }
    let mut out = Vec::new();
    for d in devices {
        let (pods, total) = pod_usage(&snap.processes, &d);
        if pods.is_empty() {
            continue;
        }
        let power_w = power_row.and_then(|row| {
            snap.entities
                .iter()
                .find(|e| *e.entity == *d)
                .and_then(|e| e.values.get(row))
                .and_then(|v| v.as_f64())
        });
        let shares = split(
            DeviceUse {
                total_sm_util: total,
                power_w,
                energy_delta_mj: None,
            },
            &pods,
        );
        out.push((d, shares));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::snapshot::attribution::{self, Attribute, Attribution};
    use crate::snapshot::GpuIdentity;

    fn proc(e: &Arc<Entity>, pid: u32, pod: Option<&str>, sm: f64, mib: u64) -> ProcessReading {
        let mut p = ProcessReading::new(e.clone(), pid, "p");
        p.sm_util = Some(sm);
        p.memory_bytes = Some(mib << 20);
        if let Some(pod) = pod {
            let mut a = Attribution::default();
            a.add(&[
                Attribute::new(&attribution::NAMESPACE, "ml"),
                Attribute::new(&attribution::POD, pod),
            ]);
            p.attribution = Arc::new(a);
        }
        p
    }

    #[test]
    fn a_shared_gpu_splits_by_sm_share() {
        let gpu = Arc::new(Entity::gpu(Arc::new(GpuIdentity {
            index: 0,
            uuid: "GPU-0".into(),
            pci_bus_id: String::new(),
            model: "m".into(),
            serial: String::new(),
            vbios: String::new(),
        })));
        let list = vec![
            proc(&gpu, 1, Some("a"), 30.0, 1000),
            proc(&gpu, 2, Some("a"), 10.0, 500),
            proc(&gpu, 3, Some("b"), 40.0, 2000),
            proc(&gpu, 4, None, 20.0, 100),
        ];
        let (pods, total) = pod_usage(&list, &gpu);
        assert_eq!(total, 100.0);
        assert_eq!(pods.len(), 2);
        // the pod's utilization is the sum of its processes
        assert_eq!(pods[0].sm_util, 40.0);
        assert_eq!(pods[0].memory_bytes, 1500 << 20);
        let shares = split(
            DeviceUse {
                total_sm_util: total,
                power_w: Some(500.0),
                energy_delta_mj: Some(15_000.0),
            },
            &pods,
        );
        assert_eq!(shares[0].power_w, Some(200.0));
        assert_eq!(shares[1].power_w, Some(200.0));
        assert_eq!(shares[1].energy_mj, Some(6_000.0));
        // the host process's 20 % is nobody's
        assert!((shares.iter().map(|s| s.share).sum::<f64>() - 0.8).abs() < 1e-12);
        // idle: even split of the idle power
        let idle = split(
            DeviceUse {
                total_sm_util: 0.0,
                power_w: Some(70.0),
                energy_delta_mj: None,
            },
            &pods,
        );
        assert_eq!(idle[0].power_w, Some(35.0));
        assert_eq!(idle[0].energy_mj, None);
    }
}
