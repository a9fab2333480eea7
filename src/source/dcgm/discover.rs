//! Discovery: what the host engine has (GPUs with their identity, MIG GPU instances, NvLinks), as the
//! source-independent [`Inventory`] (which turns it into the monitored entities in output order).
//!
//! Run at start-up and again after every reconnect (a GPU that vanished is gone from the next list, a
//! new one appears). MIG profile names and MIG UUIDs are read once per discovery with one live
//! `dcgmEntitiesGetLatestValues` call over all GPU instances (`DCGM_FI_DEV_NAME`, `DCGM_FI_DEV_UUID`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::client::{Connection, DcgmError, EntityPair, ValueBuffer};
use super::ffi;
use super::values::Payload;
use crate::snapshot::inventory::{GpuInfo, Inventory};
use crate::snapshot::{GpuIdentity, MigIdentity};

/// `DCGM_FI_DEV_NAME`: on a GPU instance, its MIG profile name (e.g. `1g.10gb`).
const FIELD_DEV_NAME: u16 = 50;
/// `DCGM_FI_DEV_UUID`: on a GPU instance, its `MIG-...` UUID.
const FIELD_DEV_UUID: u16 = 54;

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
