//! The entity model: what a series describes (a GPU, a MIG GPU instance, an NvLink) and the identity
//! each carries. Sources build entities from what they discover; exporters turn their identity into
//! labels and resource attributes.

use std::sync::Arc;

/// What kind of DCGM entity a series describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityKind {
    /// A whole GPU (`DCGM_FE_GPU`).
    Gpu,
    /// A MIG GPU instance (`DCGM_FE_GPU_I`).
    GpuInstance,
    /// One NvLink of a GPU (`DCGM_FE_LINK`).
    NvLink,
}

/// Identity of a physical GPU, shared by the GPU, its MIG instances and its links.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GpuIdentity {
    /// DCGM GPU id (equals the NVML index on real systems): the `gpu` label.
    pub index: u32,
    /// `GPU-xxxxxxxx-...`: the `UUID` label.
    pub uuid: String,
    /// DCGM's PCI bus id, e.g. `00000000:8D:00.0`.
    pub pci_bus_id: String,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
}

impl GpuIdentity {
    /// The `device` label: `nvidia<index>`.
    pub fn device(&self) -> String {
        format!("nvidia{}", self.index)
    }
}

/// Identity of a MIG GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MigIdentity {
    /// DCGM entity id of the GPU instance (what `-d i:<ids>` selects).
    pub entity_id: u32,
    /// NVML GPU-instance id: the `GPU_I_ID` label.
    pub gi_id: u32,
    /// Profile name, e.g. `1g.10gb`: the `GPU_I_PROFILE` label.
    pub profile: String,
    /// `MIG-xxxxxxxx-...`, what the kubelet reports for MIG devices.
    pub uuid: String,
}

/// One monitored entity. Identity only; values live in [`EntityReading`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entity {
    pub kind: EntityKind,
    /// The DCGM entity id within its kind (GPU id, GPU_I id, link id).
    pub entity_id: u32,
    /// The GPU this entity is, or belongs to.
    pub gpu: Arc<GpuIdentity>,
    /// Set for [`EntityKind::GpuInstance`].
    pub mig: Option<Arc<MigIdentity>>,
    /// Link index (1-based per GPU, as dcgm-exporter numbers them) for [`EntityKind::NvLink`].
    pub link: Option<u32>,
}

impl Entity {
    pub fn gpu(gpu: Arc<GpuIdentity>) -> Self {
        Entity {
            kind: EntityKind::Gpu,
            entity_id: gpu.index,
            gpu,
            mig: None,
            link: None,
        }
    }

    pub fn instance(gpu: Arc<GpuIdentity>, mig: Arc<MigIdentity>) -> Self {
        Entity {
            kind: EntityKind::GpuInstance,
            entity_id: mig.entity_id,
            gpu,
            mig: Some(mig),
            link: None,
        }
    }

    pub fn nvlink(gpu: Arc<GpuIdentity>, entity_id: u32, link_index: u32) -> Self {
        Entity {
            kind: EntityKind::NvLink,
            entity_id,
            gpu,
            mig: None,
            link: Some(link_index),
        }
    }

    /// A stable, human-readable key: `gpu0`, `gpu0/gi3`, `gpu0/nvlink2`.
    pub fn key(&self) -> String {
        match (self.kind, &self.mig, self.link) {
            (EntityKind::GpuInstance, Some(m), _) => format!("gpu{}/gi{}", self.gpu.index, m.gi_id),
            (EntityKind::NvLink, _, Some(l)) => format!("gpu{}/nvlink{}", self.gpu.index, l),
            _ => format!("gpu{}", self.gpu.index),
        }
    }
}
