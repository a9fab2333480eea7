//! Discovery: what the host engine has (GPUs with their identity, MIG GPU instances, NvLinks, NvSwitches
//! with their NvLink ports, CPUs with their cores), as the source-independent [`Inventory`] (which turns
//! it into the monitored entities in output order). Switches, links and CPUs are only asked for when the
//! counter set reads them ([`Wanted`]).
//!
//! Run at start-up and again after every reconnect (a GPU that vanished is gone from the next list, a
//! new one appears). MIG profile names and MIG UUIDs are read once per discovery with one live
//! `dcgmEntitiesGetLatestValues` call over all GPU instances (`DCGM_FI_DEV_NAME`, `DCGM_FI_DEV_UUID`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::client::{Connection, DcgmError, EntityPair, ValueBuffer};
use super::ffi;
use super::values::Payload;
use crate::snapshot::inventory::{CpuInfo, GpuInfo, Inventory, SwitchInfo, Wanted};
use crate::snapshot::{CpuIdentity, GpuIdentity, MigIdentity};

/// `DCGM_FI_DEV_NAME`: on a GPU instance, its MIG profile name (e.g. `1g.10gb`).
const FIELD_DEV_NAME: u16 = 50;
/// `DCGM_FI_DEV_UUID`: on a GPU instance, its `MIG-...` UUID.
const FIELD_DEV_UUID: u16 = 54;

/// The `DCGM_FE_LINK` entity id of a link: the packed `dcgm_link_t` (parent entity group in byte 0, port
/// in bytes 1-2, parent id in byte 3).
pub fn link_entity_id(parent_group: u32, parent: u32, port: u32) -> u32 {
    parent_group | (port << 8) | (parent << 24)
}

/// Ask the host engine for its GPUs, their identity, MIG instances and what `wanted` asks for: NvLinks,
/// NvSwitches, CPUs.
pub fn discover(conn: &Connection, wanted: Wanted) -> Result<Inventory, DcgmError> {
    let want_links = wanted.any_links();
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
                    serial: attrs.serial,
                    vbios: attrs.vbios,
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

    let mut switch_links: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
    if want_links {
        match conn.nvlink_status() {
            Ok(status) => {
                for (gpu, states) in status.gpus {
                    let Some(g) = by_id.get_mut(&gpu) else {
                        continue;
                    };
                    for (slot, state) in states.iter().enumerate() {
                        if *state == ffi::DcgmNvLinkLinkStateUp {
                            let raw = link_entity_id(ffi::DCGM_FE_GPU, gpu, slot as u32);
                            g.links.push((raw, slot as u32 + 1));
                        }
                    }
                }
                for (switch, states) in status.switches {
                    let ports = switch_links.entry(switch).or_default();
                    for (port, state) in states.iter().enumerate() {
                        if *state == ffi::DcgmNvLinkLinkStateUp {
                            let port = port as u32;
                            ports.push((link_entity_id(ffi::DCGM_FE_SWITCH, switch, port), port));
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

    if wanted.any_switch() {
        match conn.group_entities(ffi::DCGM_FE_SWITCH) {
            Ok(ids) => {
                inv.switches = ids
                    .into_iter()
                    .map(|id| SwitchInfo {
                        id,
                        links: switch_links.remove(&id).unwrap_or_default(),
                    })
                    .collect();
                inv.switches.sort_by_key(|s| s.id);
                if inv.switches.is_empty() {
                    tracing::info!("DCGM reports no NvSwitch; not collecting NvSwitch metrics");
                }
            }
            Err(e) if e.connection_lost() => return Err(e),
            Err(e) => {
                tracing::warn!("cannot list NvSwitches, not collecting NvSwitch metrics: {e}")
            }
        }
    }

    if wanted.any_cpu() {
        match conn.cpu_hierarchy() {
            Ok(cpus) => {
                inv.cpus = cpus
                    .into_iter()
                    .map(|c| CpuInfo {
                        identity: Arc::new(CpuIdentity {
                            index: c.cpu,
                            serial: c.serial,
                        }),
                        cores: c.cores,
                    })
                    .collect();
                inv.cpus.sort_by_key(|c| c.identity.index);
                if inv.cpus.is_empty() {
                    tracing::info!("DCGM reports no CPU; not collecting CPU metrics");
                }
            }
            Err(e) if e.connection_lost() => return Err(e),
            Err(e) => {
                tracing::warn!("cannot read the CPU hierarchy, not collecting CPU metrics: {e}")
            }
        }
    }

    inv.gpus = by_id.into_values().collect();
    Ok(inv)
}
