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
    let mut inv = Inventory::default();
    let mut by_id = gpus(conn, &mut inv.driver_version)?;
    add_instances(conn, &mut by_id)?;
    let switch_links = if wanted.any_links() {
        add_links(conn, &mut by_id)?
    } else {
        BTreeMap::new()
    };
    if wanted.any_switch() {
        inv.switches = switches(conn, switch_links)?;
    }
    if wanted.any_cpu() {
        inv.cpus = cpus(conn)?;
    }
    inv.gpus = by_id.into_values().collect();
    Ok(inv)
}

/// The supported GPUs by id, with their identity (no instances or links yet); the first non-empty
/// driver version into `driver_version`.
fn gpus(
    conn: &Connection,
    driver_version: &mut Option<String>,
) -> Result<BTreeMap<u32, GpuInfo>, DcgmError> {
    let mut by_id = BTreeMap::new();
    for id in conn.supported_gpus()? {
        let attrs = conn.device_attributes(id)?;
        if driver_version.is_none() && !attrs.driver_version.is_empty() {
            *driver_version = Some(attrs.driver_version.clone());
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
    Ok(by_id)
}

/// MIG: each GPU's GPU instances (compute instances are not monitored), with their profile name and
/// UUID, in entity id order. No MIG hierarchy (not supported, NVML not loaded) is no instance.
fn add_instances(conn: &Connection, by_id: &mut BTreeMap<u32, GpuInfo>) -> Result<(), DcgmError> {
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
    if instances.is_empty() {
        return Ok(());
    }
    let pairs: Vec<EntityPair> = instances
        .iter()
        .map(|gi| EntityPair::new(ffi::DCGM_FE_GPU_I, gi.entity_id))
        .collect();
    let mut names = instance_names(conn, &pairs)?;
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
    Ok(())
}

/// The MIG profile name and `MIG-` UUID of each GPU instance, by entity id, from one live read
/// (blank and `<<<...` values left out). A failed read other than a lost connection is logged and
/// leaves them blank.
fn instance_names(
    conn: &Connection,
    pairs: &[EntityPair],
) -> Result<BTreeMap<u32, (String, String)>, DcgmError> {
    let mut names: BTreeMap<u32, (String, String)> = BTreeMap::new();
    let mut buf = ValueBuffer::default();
    match conn.latest_values(pairs, &[FIELD_DEV_NAME, FIELD_DEV_UUID], true, &mut buf) {
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
    Ok(names)
}

/// The NvLinks that are up: each GPU's onto it (entity id, link number from 1); each switch's
/// returned (entity id, port) by switch id, for [`switches`].
fn add_links(
    conn: &Connection,
    by_id: &mut BTreeMap<u32, GpuInfo>,
) -> Result<BTreeMap<u32, Vec<(u32, u32)>>, DcgmError> {
    let mut switch_links: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
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
    Ok(switch_links)
}

/// The NvSwitches in id order, each with its links that are up.
fn switches(
    conn: &Connection,
    mut switch_links: BTreeMap<u32, Vec<(u32, u32)>>,
) -> Result<Vec<SwitchInfo>, DcgmError> {
    match conn.group_entities(ffi::DCGM_FE_SWITCH) {
        Ok(ids) => {
            let mut switches: Vec<SwitchInfo> = ids
                .into_iter()
                .map(|id| SwitchInfo {
                    id,
                    links: switch_links.remove(&id).unwrap_or_default(),
                })
                .collect();
            switches.sort_by_key(|s| s.id);
            if switches.is_empty() {
                tracing::info!("DCGM reports no NvSwitch; not collecting NvSwitch metrics");
            }
            Ok(switches)
        }
        Err(e) if e.connection_lost() => Err(e),
        Err(e) => {
            tracing::warn!("cannot list NvSwitches, not collecting NvSwitch metrics: {e}");
            Ok(Vec::new())
        }
    }
}

/// The CPUs in index order, each with its cores.
fn cpus(conn: &Connection) -> Result<Vec<CpuInfo>, DcgmError> {
    match conn.cpu_hierarchy() {
        Ok(cpus) => {
            let mut cpus: Vec<CpuInfo> = cpus
                .into_iter()
                .map(|c| CpuInfo {
                    identity: Arc::new(CpuIdentity {
                        index: c.cpu,
                        serial: c.serial,
                    }),
                    cores: c.cores,
                })
                .collect();
            cpus.sort_by_key(|c| c.identity.index);
            if cpus.is_empty() {
                tracing::info!("DCGM reports no CPU; not collecting CPU metrics");
            }
            Ok(cpus)
        }
        Err(e) if e.connection_lost() => Err(e),
        Err(e) => {
            tracing::warn!("cannot read the CPU hierarchy, not collecting CPU metrics: {e}");
            Ok(Vec::new())
        }
    }
}
