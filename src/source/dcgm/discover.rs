//! Discovery: what the host engine has (GPUs with their identity, MIG GPU instances, NvLinks), and
//! which of it `-d` selects, as the ordered list of [`Entity`]s a reading reports.
//!
//! Run at start-up and again after every reconnect (a GPU that vanished is gone from the next list, a
//! new one appears). MIG profile names and MIG UUIDs are read once per discovery with one live
//! `dcgmEntitiesGetLatestValues` call over all GPU instances (`DCGM_FI_DEV_NAME`, `DCGM_FI_DEV_UUID`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::client::{Connection, DcgmError, EntityPair, ValueBuffer};
use super::ffi;
use super::values::Payload;
use crate::config::devices::{DeviceError, DeviceSelection, GpuSlots, Selected};
use crate::snapshot::{Entity, GpuIdentity, MigIdentity};

/// `DCGM_FI_DEV_NAME`: on a GPU instance, its MIG profile name (e.g. `1g.10gb`).
const FIELD_DEV_NAME: u16 = 50;
/// `DCGM_FI_DEV_UUID`: on a GPU instance, its `MIG-...` UUID.
const FIELD_DEV_UUID: u16 = 54;

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

/// Ask the host engine for its GPUs, their identity, MIG instances and (when `want_links`) NvLinks.
pub fn discover(conn: &Connection, want_links: bool) -> Result<Inventory, DcgmError> {
    let ids = conn.supported_gpus()?;
    let mut inv = Inventory::default();
    let mut by_id: BTreeMap<u32, GpuInfo> = BTreeMap::new();
    for id in ids {
        let attrs = conn.device_attributes(id)?;
        if inv.driver_version.is_none() && !attrs.driver_version.is_empty() {
            inv.driver_version = Some(attrs.driver_version.clone());
        }
        by_id.insert(
            id,
            GpuInfo {
                identity: Arc::new(GpuIdentity {
                    index: id,
                    uuid: attrs.uuid,
                    pci_bus_id: attrs.pci_bus_id,
                    model: attrs.model,
                }),
                instances: Vec::new(),
                links: Vec::new(),
            },
        );
    }

    // MIG: GPU instance rows only (compute instances are not monitored).
    let instances = match conn.gpu_instances() {
        Ok(list) => list,
        Err(e)
            if e.code == ffi::DCGM_ST_NOT_SUPPORTED || e.code == ffi::DCGM_ST_NVML_NOT_LOADED =>
        {
            tracing::debug!("no MIG hierarchy: {e}");
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    if !instances.is_empty() {
        let pairs: Vec<EntityPair> = instances
            .iter()
            .map(|gi| EntityPair::new(ffi::DCGM_FE_GPU_I, gi.entity_id))
            .collect();
        let mut names: BTreeMap<u32, (String, String)> = BTreeMap::new();
        let mut buf = ValueBuffer::default();
        match conn.latest_values(&pairs, &[FIELD_DEV_NAME, FIELD_DEV_UUID], true, &mut buf) {
            Ok(()) => {
                for v in buf.iter() {
                    let text = match (v.status(), v.payload()) {
                        (0, Payload::Text(s)) => s,
                        _ => continue,
                    };
                    if text.starts_with("<<<") {
                        continue;
                    }
                    let slot = names.entry(v.entity_id()).or_default();
                    match v.field_id() {
                        FIELD_DEV_NAME => slot.0 = text,
                        FIELD_DEV_UUID => slot.1 = text,
                        _ => {}
                    }
                }
            }
            Err(e) if e.connection_lost() => return Err(e),
            Err(e) => tracing::warn!("cannot read MIG profile names: {e}"),
        }
        for gi in instances {
            let Some(gpu) = by_id.get_mut(&gi.parent_gpu) else {
                continue;
            };
            let (profile, uuid) = names.remove(&gi.entity_id).unwrap_or_default();
            gpu.instances.push(Arc::new(MigIdentity {
                entity_id: gi.entity_id,
                gi_id: gi.gi_id,
                profile,
                uuid,
            }));
        }
        for g in by_id.values_mut() {
            g.instances.sort_by_key(|m| m.entity_id);
        }
    }

    if want_links {
        match conn.nvlink_states() {
            Ok(list) => {
                for (gpu, states) in list {
                    let Some(g) = by_id.get_mut(&gpu) else {
                        continue;
                    };
                    for (slot, state) in states.iter().enumerate() {
                        if *state == ffi::DcgmNvLinkLinkStateUp {
                            let raw = ffi::DCGM_FE_GPU | ((slot as u32) << 8) | (gpu << 24);
                            g.links.push((raw, slot as u32 + 1));
                        }
                    }
                }
            }
            Err(e) if e.connection_lost() => return Err(e),
            Err(e) => {
                tracing::warn!("cannot read NvLink status, not collecting NvLink metrics: {e}")
            }
        }
    }

    inv.gpus = by_id.into_values().collect();
    Ok(inv)
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
