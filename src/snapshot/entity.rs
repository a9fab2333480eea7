//! The entity model: what a series describes (a GPU, a MIG GPU instance, an NvLink of a GPU, an
//! NvSwitch and its NvLink ports, a CPU and its cores) and the identity each carries. Sources build
//! entities from what they discover; exporters turn their identity into labels and resource attributes.
//! GPU-side entities carry their GPU's identity; NvSwitch and CPU entities carry none (`gpu` is `None`)
//! and are identified by their DCGM ids.

use std::sync::Arc;

use crate::fields::EntityLevel;

/// What kind of DCGM entity a series describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityKind {
    /// A whole GPU (`DCGM_FE_GPU`).
    Gpu,
    /// A MIG GPU instance (`DCGM_FE_GPU_I`).
    GpuInstance,
    /// One NvLink of a GPU (`DCGM_FE_LINK` with a GPU parent).
    NvLink,
    /// An NvSwitch (`DCGM_FE_SWITCH`).
    NvSwitch,
    /// One NvLink port of an NvSwitch (`DCGM_FE_LINK` with a switch parent).
    NvSwitchLink,
    /// A CPU (`DCGM_FE_CPU`, e.g. a Grace CPU).
    Cpu,
    /// One core of a CPU (`DCGM_FE_CPU_CORE`).
    CpuCore,
}

impl EntityKind {
    /// Whether the entity is a GPU or belongs to one (GPU, MIG instance, GPU NvLink): it then carries
    /// [`Entity::gpu`].
    pub fn is_gpu_side(self) -> bool {
        matches!(
            self,
            EntityKind::Gpu | EntityKind::GpuInstance | EntityKind::NvLink
        )
    }

    /// Whether a field of DCGM entity level `level` is read on entities of this kind: dcgm-exporter's
    /// routing (`shouldIncludeField`). Global fields (driver version, ...) are read on every kind; GPU,
    /// GPU-instance, compute-instance and vGPU fields on GPUs and MIG instances; link fields on the
    /// links of GPUs and switches and on the switches themselves; CPU-core fields on cores and CPUs.
    pub fn reads(self, level: EntityLevel) -> bool {
        if level == EntityLevel::Global {
            return true;
        }
        match self {
            EntityKind::Gpu | EntityKind::GpuInstance => level.applies_to_gpus(),
            EntityKind::NvLink | EntityKind::NvSwitchLink => level == EntityLevel::Link,
            EntityKind::NvSwitch => matches!(level, EntityLevel::Switch | EntityLevel::Link),
            EntityKind::Cpu => matches!(level, EntityLevel::Cpu | EntityLevel::CpuCore),
            EntityKind::CpuCore => level == EntityLevel::CpuCore,
        }
    }
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
    /// Board serial number (`DCGM_FI_DEV_SERIAL`); empty when the source does not know it.
    pub serial: String,
    /// VBIOS version (`DCGM_FI_DEV_VBIOS_VERSION`); empty when the source does not know it.
    pub vbios: String,
}

impl GpuIdentity {
    /// A bare identity for unit tests: `GPU-<index>`, model `m`, nothing else known.
    #[cfg(test)]
    pub fn bare(index: u32) -> GpuIdentity {
        GpuIdentity {
            index,
            uuid: format!("GPU-{index}"),
            pci_bus_id: String::new(),
            model: "m".into(),
            serial: String::new(),
            vbios: String::new(),
        }
    }

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

/// One monitored entity. Identity only; values live in [`EntityReading`](super::EntityReading).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entity {
    pub kind: EntityKind,
    /// The DCGM entity id within its kind (GPU id, GPU_I id, link id, switch id, CPU id, core id).
    pub entity_id: u32,
    /// The GPU this entity is, or belongs to; `None` for NvSwitch and CPU entities.
    pub gpu: Option<Arc<GpuIdentity>>,
    /// Set for [`EntityKind::GpuInstance`].
    pub mig: Option<Arc<MigIdentity>>,
    /// Link index for [`EntityKind::NvLink`] (1-based per GPU, as dcgm-exporter numbers them) and
    /// [`EntityKind::NvSwitchLink`] (the switch's port, 0-based, as DCGM reports it).
    pub link: Option<u32>,
    /// The NvSwitch's DCGM id, for [`EntityKind::NvSwitch`] and [`EntityKind::NvSwitchLink`].
    pub nvswitch: Option<u32>,
    /// The CPU's DCGM id, for [`EntityKind::Cpu`] and [`EntityKind::CpuCore`].
    pub cpu: Option<Arc<CpuIdentity>>,
}

/// Identity of a CPU (a Grace CPU: DCGM's `DCGM_FE_CPU`), shared by the CPU and its cores.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CpuIdentity {
    /// DCGM CPU id: the `cpu` label.
    pub index: u32,
    /// Serial number from `dcgmGetCpuHierarchy_v2`, when DCGM reports one.
    pub serial: Option<String>,
}

impl Entity {
    fn bare(kind: EntityKind, entity_id: u32) -> Self {
        Entity {
            kind,
            entity_id,
            gpu: None,
            mig: None,
            link: None,
            nvswitch: None,
            cpu: None,
        }
    }

    pub fn gpu(gpu: Arc<GpuIdentity>) -> Self {
        Entity {
            gpu: Some(gpu.clone()),
            ..Entity::bare(EntityKind::Gpu, gpu.index)
        }
    }

    pub fn instance(gpu: Arc<GpuIdentity>, mig: Arc<MigIdentity>) -> Self {
        Entity {
            gpu: Some(gpu),
            mig: Some(mig.clone()),
            ..Entity::bare(EntityKind::GpuInstance, mig.entity_id)
        }
    }

    pub fn nvlink(gpu: Arc<GpuIdentity>, entity_id: u32, link_index: u32) -> Self {
        Entity {
            gpu: Some(gpu),
            link: Some(link_index),
            ..Entity::bare(EntityKind::NvLink, entity_id)
        }
    }

    /// An NvSwitch with DCGM id `switch`.
    pub fn nvswitch(switch: u32) -> Self {
        Entity {
            nvswitch: Some(switch),
            ..Entity::bare(EntityKind::NvSwitch, switch)
        }
    }

    /// Port `port` of NvSwitch `switch`; `entity_id` is the link's DCGM entity id.
    pub fn nvswitch_link(switch: u32, entity_id: u32, port: u32) -> Self {
        Entity {
            nvswitch: Some(switch),
            link: Some(port),
            ..Entity::bare(EntityKind::NvSwitchLink, entity_id)
        }
    }

    pub fn cpu(cpu: Arc<CpuIdentity>) -> Self {
        Entity {
            cpu: Some(cpu.clone()),
            ..Entity::bare(EntityKind::Cpu, cpu.index)
        }
    }

    /// Core `core` (its DCGM id) of a CPU.
    pub fn cpu_core(cpu: Arc<CpuIdentity>, core: u32) -> Self {
        Entity {
            cpu: Some(cpu),
            ..Entity::bare(EntityKind::CpuCore, core)
        }
    }

    /// The GPU id of a GPU-side entity.
    pub fn gpu_index(&self) -> Option<u32> {
        self.gpu.as_ref().map(|g| g.index)
    }

    /// A stable, human-readable key: `gpu0`, `gpu0/gi3`, `gpu0/nvlink2`, `nvswitch1`, `nvswitch1/port4`,
    /// `cpu0`, `cpu0/core17`.
    pub fn key(&self) -> String {
        let gpu = self.gpu_index().unwrap_or(self.entity_id);
        let switch = self.nvswitch.unwrap_or(self.entity_id);
        let cpu = self.cpu.as_ref().map_or(self.entity_id, |c| c.index);
        match (self.kind, &self.mig, self.link) {
            (EntityKind::GpuInstance, Some(m), _) => format!("gpu{gpu}/gi{}", m.gi_id),
            (EntityKind::NvLink, _, Some(l)) => format!("gpu{gpu}/nvlink{l}"),
            (EntityKind::NvSwitch, _, _) => format!("nvswitch{switch}"),
            (EntityKind::NvSwitchLink, _, l) => {
                format!("nvswitch{switch}/port{}", l.unwrap_or(self.entity_id))
            }
            (EntityKind::Cpu, _, _) => format!("cpu{cpu}"),
            (EntityKind::CpuCore, _, _) => format!("cpu{cpu}/core{}", self.entity_id),
            _ => format!("gpu{gpu}"),
        }
    }
}
