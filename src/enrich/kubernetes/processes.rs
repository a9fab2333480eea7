//! Which pod a process belongs to: its cgroup gives the pod UID (and container id); the kubelet
//! mapping in use gives the pod's name, namespace and container.
//!
//! Matching, per process: the pods holding the process's GPU or MIG instance (pod-resources) whose UID
//! (from the device checkpoint, `--kubernetes-enable-pod-uid`) is the cgroup's; else any listed pod with
//! that UID; else, when exactly one pod holds the device, that pod (a process in a pod on a device only
//! one pod holds is that pod's). The container name is set when the pod holds the device from one
//! container. `pod_uid` is always the cgroup's. A process outside any pod (no kubepods cgroup) gets no
//! pod attributes, even on a GPU a pod holds.

use std::path::Path;
use std::sync::Arc;

use super::cgroup;
use super::mapping::{GpuIdType, Mapping, PodRef};
use crate::snapshot::attribution::{self, Attribute, Attribution};
use crate::snapshot::ProcessReading;

/// Attribute `processes` from their cgroups under `proc_root` and `mapping` (when the kubelet answered).
pub fn attribute(
    mapping: Option<&Mapping>,
    id_type: GpuIdType,
    proc_root: &Path,
    processes: &mut [ProcessReading],
) {
    for p in processes {
        let Some(pid) = p.pid else { continue };
        let Some(cg) = cgroup::read(proc_root, pid) else {
            continue;
        };
        let attrs = attributes_for(mapping, id_type, p, &cg);
        let mut a = Attribution::default();
        a.add(&attrs);
        p.attribution = Arc::new(a);
    }
}

fn attributes_for(
    mapping: Option<&Mapping>,
    id_type: GpuIdType,
    p: &ProcessReading,
    cg: &cgroup::CgroupPod,
) -> Vec<Attribute> {
    let mut out = Vec::new();
    if let Some(m) = mapping {
        let holders = m.pods_for(&p.entity, id_type);
        let by_uid: Vec<&PodRef> = holders.iter().filter(|r| r.uid == cg.pod_uid).collect();
        let chosen: Vec<PodRef> = if !by_uid.is_empty() {
            by_uid.into_iter().cloned().collect()
        } else {
            let anywhere: Vec<PodRef> = m.pods().filter(|r| r.uid == cg.pod_uid).cloned().collect();
            if !anywhere.is_empty() {
                anywhere
            } else {
                let first = holders.first();
                let one_pod = first.is_some_and(|f| {
                    holders
                        .iter()
                        .all(|r| r.namespace == f.namespace && r.name == f.name)
                });
                if one_pod {
                    holders.clone()
                } else {
                    Vec::new()
                }
            }
        };
        if let Some(first) = chosen.first() {
            out.push(Attribute::new(
                &attribution::NAMESPACE,
                first.namespace.as_str(),
            ));
            out.push(Attribute::new(&attribution::POD, first.name.as_str()));
            if chosen.iter().all(|r| r.container == first.container) {
                out.push(Attribute::new(
                    &attribution::CONTAINER,
                    first.container.as_str(),
                ));
            }
        }
    }
    out.push(Attribute::new(&attribution::POD_UID, cg.pod_uid.as_str()));
    out
}
