//! Per-process GPU use: who runs on each GPU and MIG instance, as the snapshot carries it.
//!
//! Processes are **not** entities: they come and go every few seconds and have no counter rows. A
//! snapshot carries them as a flat list of [`ProcessReading`]s beside its entities
//! (`Snapshot::processes`); each names the monitored entity it runs on (the same `Arc<Entity>` as that
//! entity's series, so exporters write the same device labels) and carries its own attribution
//! (the pod found from its cgroup), in the open attribute model every exporter already reads. A
//! process is a series only while it runs; beyond `--max-processes-per-gpu` per entity the smallest
//! (by GPU memory) are folded into one `other` reading ([`fold_beyond`]), so cardinality stays bounded.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::attribution::Attribution;
use super::entity::Entity;

/// One process on one GPU or MIG instance, or the `other` fold of several.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessReading {
    /// The GPU or MIG instance it runs on.
    pub entity: Arc<Entity>,
    /// Host pid; `None` for the `other` fold.
    pub pid: Option<u32>,
    /// Executable name (`other` for the fold).
    pub name: Arc<str>,
    /// GPU memory used, in bytes (`None`: not reported, e.g. under WDDM).
    pub memory_bytes: Option<u64>,
    /// Percent of the last interval (mean of the driver's samples since the previous collection);
    /// `None` when the driver gave no sample or does not support it (MIG).
    pub sm_util: Option<f64>,
    pub mem_util: Option<f64>,
    pub enc_util: Option<f64>,
    pub dec_util: Option<f64>,
    /// Who the process belongs to (pod, namespace, container, pod UID).
    pub attribution: Arc<Attribution>,
    /// Processes summed into this reading: 1 for a process, N for the `other` fold.
    pub count: u32,
}

impl ProcessReading {
    /// A plain process with no values yet.
    pub fn new(entity: Arc<Entity>, pid: u32, name: impl Into<Arc<str>>) -> ProcessReading {
        ProcessReading {
            entity,
            pid: Some(pid),
            name: name.into(),
            memory_bytes: None,
            sm_util: None,
            mem_util: None,
            enc_util: None,
            dec_util: None,
            attribution: Arc::new(Attribution::default()),
            count: 1,
        }
    }

    /// True for the `other` fold.
    pub fn is_other(&self) -> bool {
        self.pid.is_none()
    }
}

/// The name of the fold of the processes beyond the cap.
pub const OTHER: &str = "other";

fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
    }
}

/// Keep at most `max` processes per entity (the largest by GPU memory, ties by pid) and sum the rest
/// into one `other` reading per entity (memory and utilization summed, no attribution). Order: entity
/// by entity as they first appear, processes by pid, `other` last. `max == 0` folds everything.
pub fn fold_beyond(processes: Vec<ProcessReading>, max: usize) -> Vec<ProcessReading> {
    let mut groups: Vec<(Arc<Entity>, Vec<ProcessReading>)> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for p in processes {
        let key = p.entity.key();
        let i = *index.entry(key).or_insert_with(|| {
            groups.push((p.entity.clone(), Vec::new()));
            groups.len() - 1
        });
        if let Some(g) = groups.get_mut(i) {
            g.1.push(p);
        }
    }
    let mut out = Vec::new();
    for (entity, mut list) in groups {
        list.sort_by(|a, b| {
            b.memory_bytes
                .unwrap_or(0)
                .cmp(&a.memory_bytes.unwrap_or(0))
                .then(a.pid.cmp(&b.pid))
        });
        let rest = if list.len() > max {
            list.split_off(max)
        } else {
            Vec::new()
        };
        list.sort_by_key(|p| p.pid);
        out.extend(list);
        if !rest.is_empty() {
            let mut other = ProcessReading {
                entity: entity.clone(),
                pid: None,
                name: Arc::from(OTHER),
                memory_bytes: None,
                sm_util: None,
                mem_util: None,
                enc_util: None,
                dec_util: None,
                attribution: Arc::new(Attribution::default()),
                count: 0,
            };
            for p in rest {
                other.memory_bytes = match (other.memory_bytes, p.memory_bytes) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                };
                other.sm_util = add(other.sm_util, p.sm_util);
                other.mem_util = add(other.mem_util, p.mem_util);
                other.enc_util = add(other.enc_util, p.enc_util);
                other.dec_util = add(other.dec_util, p.dec_util);
                other.count += p.count;
            }
            out.push(other);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::GpuIdentity;

    fn gpu(i: u32) -> Arc<Entity> {
        Arc::new(Entity::gpu(Arc::new(GpuIdentity {
            index: i,
            uuid: format!("GPU-{i}"),
            pci_bus_id: String::new(),
            model: "m".into(),
            serial: String::new(),
            vbios: String::new(),
        })))
    }

    fn proc(e: &Arc<Entity>, pid: u32, mib: u64, sm: f64) -> ProcessReading {
        let mut p = ProcessReading::new(e.clone(), pid, format!("p{pid}"));
        p.memory_bytes = Some(mib << 20);
        p.sm_util = Some(sm);
        p
    }

    #[test]
    fn the_smallest_are_folded_into_other_per_entity() {
        let (a, b) = (gpu(0), gpu(1));
        let list = vec![
            proc(&a, 30, 100, 10.0),
            proc(&a, 10, 300, 20.0),
            proc(&b, 5, 1, 1.0),
            proc(&a, 20, 200, 5.0),
            proc(&a, 40, 50, 2.5),
        ];
        let out = fold_beyond(list, 2);
        type Row = (String, Option<u32>, Option<u64>, Option<f64>, u32);
        let rows: Vec<Row> = out
            .iter()
            .map(|p| {
                (
                    p.entity.key(),
                    p.pid,
                    p.memory_bytes.map(|b| b >> 20),
                    p.sm_util,
                    p.count,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("gpu0".into(), Some(10), Some(300), Some(20.0), 1),
                ("gpu0".into(), Some(20), Some(200), Some(5.0), 1),
                ("gpu0".into(), None, Some(150), Some(12.5), 2),
                ("gpu1".into(), Some(5), Some(1), Some(1.0), 1),
            ]
        );
        assert_eq!(&*out[2].name, "other");
        assert_eq!(fold_beyond(vec![proc(&a, 1, 1, 1.0)], 0)[0].count, 1);
        assert!(fold_beyond(vec![proc(&a, 1, 1, 1.0)], 0)[0].is_other());
    }
}
