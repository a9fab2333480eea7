//! `--kubernetes-virtual-gpus` with per-process readings: each pod's own utilization and framebuffer on
//! the `DCGM_FI_DEV_GPU_UTIL` and `DCGM_FI_DEV_FB_USED` series of a device it holds, as dcgm-exporter
//! ≥ 4.5 writes them (its `transformation/process_metrics.go`).
//!
//! For those two fields only, on a GPU or MIG instance held by at least one pod, when the collection
//! has per-process readings:
//! - the device's own value stays, on one series without pod labels;
//! - each of the device's pod series carries its pod's value: `DCGM_FI_DEV_GPU_UTIL` the sum of the
//!   pod's processes' SM utilization on the device (percent, at most 100, rounded to a whole number),
//!   `DCGM_FI_DEV_FB_USED` the sum of their GPU memory in MiB (rounded down); a pod with no process
//!   there reads 0. The sums are `snapshot::pod_split::pod_usage`, the same the `dcgm_otel_pod_gpu_*`
//!   split families and the cost counters use. A pod with several series on one device (two replicas,
//!   two containers) has its sum on each, as in dcgm-exporter.
//!
//! Every other field keeps the device's value on each pod's series. Without per-process readings in a
//! collection the series are as before (the device's value on each pod's), except after an earlier
//! collection had them (per-process collection on, this poll failed): then the pod series of the two
//! fields are left out for that collection rather than showing the device's value.

use std::collections::HashMap;

use super::mapping::{GpuIdType, Mapping};
use crate::counters::CounterSet;
use crate::snapshot::attribution::{NAMESPACE, POD};
use crate::snapshot::pod_split::{self, PodKey};
use crate::snapshot::{
    Absent, EntityKind, EntityReading, FieldValue, PerSetValues, ProcessReading,
};

/// `DCGM_FI_DEV_GPU_UTIL`.
const FIELD_GPU_UTIL: u16 = 203;
/// `DCGM_FI_DEV_FB_USED` (MiB).
const FIELD_FB_USED: u16 = 252;

/// What the collection knows of processes.
#[derive(Debug, Clone, Copy)]
pub enum Processes<'a> {
    /// This collection's processes, attributed to pods.
    Read(&'a [ProcessReading]),
    /// Per-process collection worked before but not in this collection.
    Failed,
    /// No per-process reading has been seen (collection off, or never worked).
    None,
}

/// The per-pod values of the two fields on every pod-held device of `entities`, appended to `out`.
pub fn per_set_values(
    mapping: &Mapping,
    id_type: GpuIdType,
    entities: &[EntityReading],
    counters: &CounterSet,
    processes: Processes,
    out: &mut Vec<PerSetValues>,
) {
    if matches!(processes, Processes::None) {
        return;
    }
    let rows: Vec<(usize, u16)> = counters
        .rows
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c.field.id, FIELD_GPU_UTIL | FIELD_FB_USED))
        .map(|(i, c)| (i, c.field.id))
        .collect();
    if rows.is_empty() {
        return;
    }
    for (index, e) in entities.iter().enumerate() {
        if !matches!(e.entity.kind, EntityKind::Gpu | EntityKind::GpuInstance)
            || mapping.pods_for(&e.entity, id_type).is_empty()
        {
            continue;
        }
        let usage: HashMap<PodKey, pod_split::PodUsage> = match processes {
            Processes::Read(list) => pod_split::pod_usage(list, &e.entity)
                .0
                .into_iter()
                .map(|u| (u.pod.clone(), u))
                .collect(),
            _ => HashMap::new(),
        };
        for &(row, field) in &rows {
            // The device has no value: no series at all, as for any absent reading.
            if e.values.get(row).and_then(FieldValue::as_f64).is_none() {
                continue;
            }
            let per_set = e
                .attribution
                .sets()
                .map(|set| {
                    if matches!(processes, Processes::Failed) {
                        return FieldValue::Absent(Absent::Error);
                    }
                    let value = |name: &str| {
                        set.iter()
                            .find(|a| a.key.prometheus == name)
                            .map(|a| a.value.to_string())
                    };
                    let pod = match (value(&NAMESPACE.prometheus), value(&POD.prometheus)) {
                        (Some(namespace), Some(pod)) => usage.get(&PodKey { namespace, pod }),
                        _ => None,
                    };
                    FieldValue::Int(match (pod, field) {
                        (None, _) => 0,
                        (Some(u), FIELD_GPU_UTIL) => u.sm_util.clamp(0.0, 100.0).round() as i64,
                        (Some(u), _) => i64::try_from(u.memory_bytes >> 20).unwrap_or(i64::MAX),
                    })
                })
                .collect();
            out.push(PerSetValues {
                entity: index,
                row,
                per_set,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::enrich::kubernetes::mapping::MatchRules;
    use crate::enrich::kubernetes::podresources::{
        ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
    };
    use crate::snapshot::attribution::{Attribute, Attribution};
    use crate::snapshot::{Entity, GpuIdentity};

    fn pod(name: &str, id: &str) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: "ns".into(),
            containers: vec![ContainerResources {
                name: "c".into(),
                devices: vec![ContainerDevices {
                    resource_name: "nvidia.com/gpu".into(),
                    device_ids: vec![id.into()],
                    topology: None,
                }],
                dynamic_resources: vec![],
            }],
        }
    }

    /// GPU 0 shared by pods a and b (a runs one process), GPU 1 held by nobody; the counters list
    /// temperature, utilization and framebuffer.
    #[test]
    fn each_pods_sum_only_for_pod_held_devices_and_none_without_processes() {
        let gpu = |index: u32| Arc::new(Entity::gpu(Arc::new(GpuIdentity::bare(index))));
        let reply = ListPodResourcesResponse {
            pod_resources: vec![pod("a", "GPU-0::0"), pod("b", "GPU-0::1")],
        };
        let rules = MatchRules {
            extra_resource_names: vec![],
            id_type: GpuIdType::Uid,
        };
        let mapping = Mapping::build(&reply, &rules, None);
        let counters = crate::counters::parse(
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_DEV_FB_USED, gauge, f\n",
            "test",
        )
        .unwrap();
        let mut entities: Vec<EntityReading> = [gpu(0), gpu(1)]
            .into_iter()
            .map(|entity| EntityReading {
                entity,
                values: vec![
                    FieldValue::Int(60),
                    FieldValue::Int(90),
                    FieldValue::Int(50_000),
                ]
                .into(),
                attribution: Arc::default(),
            })
            .collect();
        super::super::apply(
            &mapping,
            GpuIdType::Uid,
            super::super::SharedDevices::SeriesPerPod,
            &mut entities,
        );
        let mut p = ProcessReading::new(entities[0].entity.clone(), 7, "python3");
        p.sm_util = Some(42.4);
        p.memory_bytes = Some((3 << 20) + 1000);
        let mut who = Attribution::default();
        who.add(&[Attribute::new(&NAMESPACE, "ns"), Attribute::new(&POD, "a")]);
        p.attribution = Arc::new(who);
        let run = |processes: Processes| {
            let mut out = Vec::new();
            per_set_values(
                &mapping,
                GpuIdType::Uid,
                &entities,
                &counters,
                processes,
                &mut out,
            );
            out
        };
        let set = |row: usize, per_set: Vec<FieldValue>| PerSetValues {
            entity: 0,
            row,
            per_set,
        };
        use FieldValue::Int;
        assert_eq!(
            run(Processes::Read(std::slice::from_ref(&p))),
            vec![set(1, vec![Int(42), Int(0)]), set(2, vec![Int(3), Int(0)])]
        );
        let failed = vec![FieldValue::Absent(Absent::Error); 2];
        assert_eq!(
            run(Processes::Failed),
            vec![set(1, failed.clone()), set(2, failed)]
        );
        assert!(run(Processes::None).is_empty());
    }
}
