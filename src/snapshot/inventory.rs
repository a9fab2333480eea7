//! The inventory: what a source found on the host (GPUs with their identity, MIG GPU instances, NvLinks)
//! in a source-independent shape, and the one place that turns it into the monitored entities in
//! output order (per GPU by index: the GPU when selected, then its selected instances; then the
//! NvLinks). Every source — libdcgm, the simulated fleet — builds an [`Inventory`] and asks it for its
//! entities, so the order and the `-d` rules are written once.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::entity::{Entity, GpuIdentity, MigIdentity};
use crate::config::devices::{DeviceError, DeviceSelection, GpuSlots, Selected};

/// One GPU and what hangs off it.
#[derive(Debug, Clone)]
pub struct GpuInfo {
    pub identity: Arc<GpuIdentity>,
    /// MIG GPU instances, by DCGM entity id.
    pub instances: Vec<Arc<MigIdentity>>,
    /// NvLinks that are up: (DCGM link entity id, 1-based link index).
    pub links: Vec<(u32, u32)>,
}

/// Everything the host engine reported.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pub gpus: Vec<GpuInfo>,
    pub driver_version: Option<String>,
}

impl Inventory {
    /// The shape `-d` selection works on.
    pub fn slots(&self) -> Vec<GpuSlots> {
        self.gpus
            .iter()
            .map(|g| GpuSlots {
                gpu: g.identity.index,
                instances: g.instances.iter().map(|m| m.entity_id).collect(),
            })
            .collect()
    }

    /// The monitored entities in output order: per GPU (by index) the GPU itself when selected and its
    /// selected instances; then, when `with_links`, the NvLinks of every GPU (as the simulated source
    /// orders them; dcgm-exporter selects links with `-s`, not `-d`).
    pub fn entities(&self, selected: &Selected, with_links: bool) -> Vec<Arc<Entity>> {
        let mut out = Vec::new();
        for g in &self.gpus {
            if selected.gpus.contains(&g.identity.index) {
                out.push(Arc::new(Entity::gpu(g.identity.clone())));
            }
            for m in &g.instances {
                if selected.instances.contains(&m.entity_id) {
                    out.push(Arc::new(Entity::instance(g.identity.clone(), m.clone())));
                }
            }
        }
        if with_links {
            for g in &self.gpus {
                for &(entity_id, index) in &g.links {
                    out.push(Arc::new(Entity::nvlink(
                        g.identity.clone(),
                        entity_id,
                        index,
                    )));
                }
            }
        }
        out
    }
}

/// Apply `-d` at run time (after a reconnect): ids that are no longer present are skipped, not an
/// error. Returns the selection and the ids that were asked for but are absent.
pub fn select_present(sel: &DeviceSelection, inv: &[GpuSlots]) -> (Selected, Vec<String>) {
    let mut padded = inv.to_vec();
    let mut phantom_gpus = BTreeSet::new();
    let mut phantom_instances = BTreeSet::new();
    let mut missing = Vec::new();
    // Each round adds one absent id as a phantom; bounded by the number of ids a selection can name.
    for _ in 0..=8192 {
        match sel.select(&padded) {
            Ok(mut s) => {
                s.gpus.retain(|g| !phantom_gpus.contains(g));
                s.instances.retain(|i| !phantom_instances.contains(i));
                return (s, missing);
            }
            Err(DeviceError::Absent { what, id, .. }) => {
                missing.push(format!("{what} {id}"));
                if what == "GPU" {
                    phantom_gpus.insert(id);
                    padded.push(GpuSlots {
                        gpu: id,
                        instances: vec![],
                    });
                } else {
                    phantom_instances.insert(id);
                    let holder = u32::MAX - phantom_instances.len() as u32;
                    phantom_gpus.insert(holder);
                    padded.push(GpuSlots {
                        gpu: holder,
                        instances: vec![id],
                    });
                }
            }
            Err(DeviceError::Syntax { .. }) => break,
        }
    }
    (Selected::default(), missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::devices;

    #[test]
    fn run_time_selection_skips_what_vanished() {
        let inv = vec![GpuSlots {
            gpu: 1,
            instances: vec![8, 9],
        }];
        let (s, missing) = select_present(&devices::parse("g:0,1+i:7,8").unwrap(), &inv);
        assert_eq!(s.gpus, [1].into());
        assert_eq!(s.instances, [8].into());
        assert_eq!(missing, ["GPU 0", "GPU instance (DCGM entity id) 7"]);
        let (s, missing) = select_present(&DeviceSelection::Flex, &inv);
        assert!(s.gpus.is_empty() && missing.is_empty());
        assert_eq!(s.instances, [8, 9].into());
    }
}
