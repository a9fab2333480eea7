//! Discovery through NVML: the GPUs (index, UUID, PCI bus id, name), their MIG instances (MIG device
//! handles with their GPU-instance id, `MIG-` UUID and profile) and, when the counters have link
//! fields, their active NvLinks — as the shared [`Inventory`] (so entity order and `-d` rules are the
//! DCGM source's), plus the NVML handles each entity is read through.
//!
//! Numbering follows DCGM's so that `-d` means the same with either source: the GPU id is the NVML
//! index; a GPU instance's entity id is `gpu × 8 + MIG device index`; an NvLink's entity id packs the
//! GPU and link as DCGM does. The MIG profile is the part of the MIG device's name after `MIG `
//! (`NVIDIA H100 80GB HBM3 MIG 1g.10gb` → `1g.10gb`), what DCGM reports as the instance's name.

use std::sync::Arc;

use super::client::{Nvml, NvmlError};
use super::ffi::{self, nvmlDevice_t};
use crate::snapshot::inventory::{GpuInfo, Inventory};
use crate::snapshot::{GpuIdentity, MigIdentity};

/// DCGM numbers GPU-instance entities per GPU in blocks of this size.
pub const INSTANCE_ID_STRIDE: u32 = 8;

/// One discovered GPU and its handles.
#[derive(Debug, Clone)]
pub struct GpuHandles {
    pub identity: Arc<GpuIdentity>,
    pub handle: nvmlDevice_t,
    /// MIG instances: identity and MIG device handle.
    pub instances: Vec<(Arc<MigIdentity>, nvmlDevice_t)>,
    /// Active NvLinks, 0-based.
    pub links: Vec<u32>,
}

/// What discovery found.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    pub inventory: Inventory,
    pub gpus: Vec<GpuHandles>,
    /// GPUs NVML counts but that could not be read (fallen off the bus): (index, error).
    pub unusable: Vec<(u32, NvmlError)>,
    /// `nvmlDeviceGetCount` at discovery.
    pub count: u32,
}

/// DCGM's packed NvLink entity id (`DCGM_FE_GPU | link << 8 | gpu << 24`).
pub fn link_entity_id(gpu: u32, link: u32) -> u32 {
    1 | (link << 8) | (gpu << 24)
}

/// The MIG profile in a MIG device's name.
pub fn profile_of(name: &str) -> String {
    match name.rsplit_once("MIG ") {
        Some((_, p)) => p.trim().to_string(),
        None => name.trim().to_string(),
    }
}

/// Discover every GPU. A GPU whose identity cannot be read is left out (listed in `unusable`);
/// failing to count the GPUs is an error.
pub fn discover(nvml: &Nvml, want_links: bool) -> Result<Discovered, NvmlError> {
    let sym = nvml.sym();
    let count = nvml.check("nvmlDeviceGetCount_v2", sym.device_count())?;
    let mut out = Discovered {
        count,
        inventory: Inventory {
            driver_version: sym.driver_version().ok(),
            ..Inventory::default()
        },
        ..Default::default()
    };
    for index in 0..count {
        match gpu(nvml, index, want_links) {
            Ok(g) => out.gpus.push(g),
            Err(e) => out.unusable.push((index, e)),
        }
    }
    out.inventory.gpus = out
        .gpus
        .iter()
        .map(|g| GpuInfo {
            identity: g.identity.clone(),
            instances: g.instances.iter().map(|(m, _)| m.clone()).collect(),
            links: g
                .links
                .iter()
                .map(|&l| (link_entity_id(g.identity.index, l), l + 1))
                .collect(),
        })
        .collect();
    Ok(out)
}

fn gpu(nvml: &Nvml, index: u32, want_links: bool) -> Result<GpuHandles, NvmlError> {
    let sym = nvml.sym();
    let handle = nvml.check("nvmlDeviceGetHandleByIndex_v2", sym.device_by_index(index))?;
    let uuid = nvml.check("nvmlDeviceGetUUID", sym.uuid(handle))?;
    let pci_bus_id = match sym.pci_info(handle) {
        Ok(p) => ffi::chars_to_string(&p.busId),
        Err(ffi::NVML_ERROR_GPU_IS_LOST) => {
            return Err(nvml.error("nvmlDeviceGetPciInfo_v3", ffi::NVML_ERROR_GPU_IS_LOST))
        }
        Err(_) => String::new(),
    };
    let model = sym.name(handle).unwrap_or_default();
    let identity = Arc::new(GpuIdentity {
        index,
        uuid,
        pci_bus_id,
        model,
        // Optional identity: absent (not supported, no permission) reads as unknown.
        serial: sym.serial(handle).unwrap_or_default(),
        vbios: sym.vbios_version(handle).unwrap_or_default(),
    });
    let mut instances = Vec::new();
    if matches!(sym.mig_mode(handle), Ok((ffi::NVML_DEVICE_MIG_ENABLE, _))) {
        let max = sym.max_mig_device_count(handle).unwrap_or(0).min(16);
        for i in 0..max {
            let Ok(mig) = sym.mig_device_by_index(handle, i) else {
                continue;
            };
            let Ok(gi_id) = sym.gpu_instance_id(mig) else {
                continue;
            };
            instances.push((
                Arc::new(MigIdentity {
                    entity_id: index * INSTANCE_ID_STRIDE + i,
                    gi_id,
                    profile: profile_of(&sym.name(mig).unwrap_or_default()),
                    uuid: sym.uuid(mig).unwrap_or_default(),
                }),
                mig,
            ));
        }
    }
    let mut links = Vec::new();
    if want_links {
        for l in 0..ffi::NVML_NVLINK_MAX_LINKS {
            match sym.nvlink_active(handle, l) {
                Ok(true) => links.push(l),
                Ok(false) => {}
                // No NvLink on this GPU (or no such link): stop asking.
                Err(_) => break,
            }
        }
    }
    Ok(GpuHandles {
        identity,
        handle,
        instances,
        links,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profile_from_the_device_name() {
        assert_eq!(profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), "1g.10gb");
        assert_eq!(profile_of("NVIDIA A100-SXM4-80GB MIG 3g.40gb"), "3g.40gb");
        assert_eq!(profile_of("2g.20gb"), "2g.20gb");
        assert_eq!(link_entity_id(2, 3), 1 | (3 << 8) | (2 << 24));
    }
}
