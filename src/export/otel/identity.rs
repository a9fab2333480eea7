//! The OTel identity attributes of every entity kind, in both attribute styles: what names a GPU, a MIG
//! instance, a GPU's NvLink, an NvSwitch and its ports, a CPU and its cores on OTLP resources and data
//! points. [`super::naming`] adds the `label`-row attributes and the attribution to these.
//!
//! dcgm style (`--otel-attribute-style dcgm`): dcgm-exporter's label names (`gpu, UUID, pci_bus_id,
//! device, modelName, GPU_I_PROFILE, GPU_I_ID`, `nvlink`, `nvswitch`, `cpu`, `cpu_serial`, `cpucore`).
//!
//! Semantic-convention style (`otel`): a GPU is `hw.id` (its UUID), `hw.type=gpu`, `hw.vendor`,
//! `hw.model` and `nvidia.gpu.*`; a MIG instance is a hardware component of its own (`hw.id` its MIG
//! UUID, `hw.parent` its GPU's) with `nvidia.mig.*`; with the hardware conventions on
//! ([`super::naming::Naming::with_hw_attributes`]) also `hw.name`, `hw.serial_number` and
//! `hw.firmware_version`. An NvSwitch is `hw.type=network` (the NVLink fabric's switch ASIC; the
//! hardware conventions' type for network devices), a CPU `hw.type=cpu`; their `hw.id` is
//! `nvswitch<id>` / `cpu<id>` (unique within the host, as `hw.id` must be), DCGM's ids are
//! `nvidia.nvswitch.index` / `nvidia.cpu.index`, the CPU's serial is `hw.serial_number`.
//!
//! A child joins its parent's Resource: a GPU's NvLink carries the GPU's identity plus
//! `nvidia.nvlink.index` / `nvlink`, a switch port its switch's plus the same link attribute, a core its
//! CPU's plus `cpu.logical_number` / `cpucore`. Those child attributes ([`point_keys`]) stay on the data
//! points in `per-entity` mode; everything else here identifies the Resource.

use std::sync::Arc;

use opentelemetry::{Key, KeyValue, StringValue, Value};

use crate::config::LabelStyle;
use crate::snapshot::{Entity, EntityKind, GpuIdentity, MigIdentity};

/// Attributes that tell the points of one Resource apart (never identity): the NvLink index of a GPU
/// link or switch port, the core number of a CPU core. `otel`: semantic-convention names, else
/// dcgm-exporter's.
pub fn point_keys(otel: bool) -> &'static [&'static str] {
    if otel {
        &["nvidia.nvlink.index", "cpu.logical_number"]
    } else {
        &["nvlink", "cpucore"]
    }
}

/// The attributes that identify (rather than describe) a device on a holder's data point, in either
/// style: the hardware id and type, the GPU index, the MIG instance, the switch or CPU index.
pub const DEVICE_KEYS: &[&str] = &[
    "hw.id",
    "hw.type",
    "hw.parent",
    "nvidia.gpu.index",
    "nvidia.mig.instance_id",
    "nvidia.mig.profile",
    "nvidia.nvswitch.index",
    "nvidia.cpu.index",
    "gpu",
    "UUID",
    "device",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "nvswitch",
    "cpu",
];

/// GPU-side attribute names of one style.
struct Names {
    gpu_index: &'static str,
    uuid: &'static str,
    pci_bus_id: &'static str,
    device: &'static str,
    model: &'static str,
    mig_profile: &'static str,
    mig_instance: &'static str,
    mig_uuid: Option<&'static str>,
    nvlink: &'static str,
    /// Constant attributes of every GPU entity (`hw.type`, `hw.vendor`).
    constants: &'static [(&'static str, &'static str)],
}

const OTEL_NAMES: Names = Names {
    gpu_index: "nvidia.gpu.index",
    uuid: "hw.id",
    pci_bus_id: "nvidia.gpu.pci_bus_id",
    device: "nvidia.gpu.device",
    model: "hw.model",
    mig_profile: "nvidia.mig.profile",
    mig_instance: "nvidia.mig.instance_id",
    mig_uuid: Some("nvidia.mig.uuid"),
    nvlink: "nvidia.nvlink.index",
    constants: &[("hw.type", "gpu"), ("hw.vendor", "NVIDIA")],
};

const DCGM_NAMES: Names = Names {
    gpu_index: "gpu",
    uuid: "UUID",
    pci_bus_id: "pci_bus_id",
    device: "device",
    model: "modelName",
    mig_profile: "GPU_I_PROFILE",
    mig_instance: "GPU_I_ID",
    mig_uuid: None,
    nvlink: "nvlink",
    constants: &[],
};

fn kv(key: &'static str, value: impl Into<Arc<str>>) -> KeyValue {
    KeyValue::new(
        Key::from_static_str(key),
        Value::String(StringValue::from(value.into())),
    )
}

/// How identities are written in one run.
#[derive(Debug, Clone, Copy)]
pub struct IdentityStyle<'a> {
    /// Semantic-convention names, else dcgm-exporter's.
    pub otel: bool,
    /// The hardware conventions' complete GPU-side identity (`otel` style only).
    pub hw: bool,
    /// The model-name spelling (`--replace-blanks-in-model-name`).
    pub labels: &'a LabelStyle,
}

/// The identity attributes of an entity, in the order the request builder has always written them;
/// `None` for a GPU-side entity without a GPU identity.
pub fn identity(style: IdentityStyle<'_>, e: &Entity) -> Option<Vec<KeyValue>> {
    let n = if style.otel { &OTEL_NAMES } else { &DCGM_NAMES };
    match e.kind {
        EntityKind::Gpu | EntityKind::GpuInstance | EntityKind::NvLink => {
            e.gpu.as_ref().map(|gpu| gpu_side(style, n, e, gpu))
        }
        EntityKind::NvSwitch | EntityKind::NvSwitchLink => Some(switch(style.otel, n, e)),
        EntityKind::Cpu | EntityKind::CpuCore => Some(cpu(style.otel, e)),
    }
}

/// A GPU, a MIG instance (its GPU's identity and its own) or a GPU's NvLink (its GPU's and the link).
fn gpu_side(style: IdentityStyle<'_>, n: &Names, e: &Entity, gpu: &GpuIdentity) -> Vec<KeyValue> {
    let mut out: Vec<KeyValue> = Vec::with_capacity(12);
    out.push(kv(n.gpu_index, gpu.index.to_string()));
    if style.hw && style.otel {
        hw_gpu_identity(&mut out, e, gpu);
    } else if let (true, EntityKind::GpuInstance, Some(m)) = (style.otel, e.kind, &e.mig) {
        // A MIG instance is a hardware component of its own: its `hw.id` is its MIG UUID (never
        // its GPU's, which the board's Resource has), `hw.parent` its GPU's.
        out.push(kv(n.uuid, mig_hw_id(gpu, m)));
        out.push(kv("hw.parent", gpu.uuid.as_str()));
    } else {
        out.push(kv(n.uuid, gpu.uuid.as_str()));
    }
    out.push(kv(n.pci_bus_id, gpu.pci_bus_id.as_str()));
    out.push(kv(n.device, gpu.device()));
    out.push(kv(n.model, style.labels.model_name(&gpu.model)));
    for (k, v) in n.constants {
        out.push(kv(k, *v));
    }
    if let (EntityKind::GpuInstance, Some(m)) = (e.kind, &e.mig) {
        out.push(kv(n.mig_profile, m.profile.as_str()));
        out.push(kv(n.mig_instance, m.gi_id.to_string()));
        if let Some(k) = n.mig_uuid.filter(|_| !m.uuid.is_empty()) {
            out.push(kv(k, m.uuid.as_str()));
        }
    }
    if let (EntityKind::NvLink, Some(link)) = (e.kind, e.link) {
        out.push(kv(n.nvlink, link.to_string()));
    }
    out
}

/// The `hw.id` of a MIG instance: its MIG UUID, or `<GPU UUID>/gi<id>` when the source has none.
fn mig_hw_id(gpu: &GpuIdentity, m: &MigIdentity) -> String {
    if m.uuid.is_empty() {
        format!("{}/gi{}", gpu.uuid, m.gi_id)
    } else {
        m.uuid.clone()
    }
}

/// The hardware conventions' identity of a GPU-side entity ([`IdentityStyle::hw`]).
fn hw_gpu_identity(out: &mut Vec<KeyValue>, e: &Entity, gpu: &GpuIdentity) {
    match (e.kind, &e.mig) {
        (EntityKind::GpuInstance, Some(m)) => {
            out.push(kv("hw.id", mig_hw_id(gpu, m)));
            out.push(kv("hw.name", format!("{}/gi{}", gpu.device(), m.gi_id)));
            out.push(kv("hw.parent", gpu.uuid.as_str()));
        }
        _ => {
            out.push(kv("hw.id", gpu.uuid.as_str()));
            out.push(kv("hw.name", gpu.device()));
        }
    }
    if !gpu.serial.is_empty() {
        out.push(kv("hw.serial_number", gpu.serial.as_str()));
    }
    if !gpu.vbios.is_empty() {
        out.push(kv("hw.firmware_version", gpu.vbios.as_str()));
    }
}

/// An NvSwitch, or one of its ports (the switch's identity and the link index).
fn switch(otel: bool, n: &Names, e: &Entity) -> Vec<KeyValue> {
    let switch = e.nvswitch.unwrap_or(e.entity_id);
    let name = format!("nvswitch{switch}");
    let mut out = Vec::with_capacity(6);
    if otel {
        out.push(kv("hw.id", name.clone()));
        out.push(kv("hw.name", name));
        out.push(kv("hw.type", "network"));
        out.push(kv("hw.vendor", "NVIDIA"));
        out.push(kv("nvidia.nvswitch.index", switch.to_string()));
    } else {
        out.push(kv("nvswitch", name));
    }
    if e.kind == EntityKind::NvSwitchLink {
        out.push(kv(n.nvlink, e.link.unwrap_or(e.entity_id).to_string()));
    }
    out
}

/// A CPU, or one of its cores (the CPU's identity and the core number).
fn cpu(otel: bool, e: &Entity) -> Vec<KeyValue> {
    let cpu = e.cpu.as_ref().map_or(e.entity_id, |c| c.index);
    let serial = e
        .cpu
        .as_ref()
        .and_then(|c| c.serial.clone())
        .filter(|s| !s.is_empty());
    let mut out = Vec::with_capacity(6);
    if otel {
        out.push(kv("hw.id", format!("cpu{cpu}")));
        out.push(kv("hw.type", "cpu"));
        out.push(kv("hw.vendor", "NVIDIA"));
        out.push(kv("nvidia.cpu.index", cpu.to_string()));
        if let Some(s) = serial {
            out.push(kv("hw.serial_number", s));
        }
    } else {
        out.push(kv("cpu", cpu.to_string()));
        if let Some(s) = serial {
            out.push(kv("cpu_serial", s));
        }
    }
    if e.kind == EntityKind::CpuCore {
        let core_key = if otel {
            "cpu.logical_number"
        } else {
            "cpucore"
        };
        out.push(kv(core_key, e.entity_id.to_string()));
    }
    out
}

/// The entity whose `label`-row attributes an entity shares: a GPU link its GPU's, a switch port its
/// switch's, a core its CPU's (fields of the parent's level are not read on the child). `(kind, id)`.
pub fn label_parent(e: &Entity) -> Option<(EntityKind, u32)> {
    match e.kind {
        EntityKind::NvLink => e.gpu_index().map(|g| (EntityKind::Gpu, g)),
        EntityKind::NvSwitchLink => e.nvswitch.map(|s| (EntityKind::NvSwitch, s)),
        EntityKind::CpuCore => e.cpu.as_ref().map(|c| (EntityKind::Cpu, c.index)),
        _ => None,
    }
}

/// The key under which an entity lends its `label`-row attributes to its children.
pub fn label_owner(e: &Entity) -> Option<(EntityKind, u32)> {
    match e.kind {
        EntityKind::Gpu => e.gpu_index().map(|g| (EntityKind::Gpu, g)),
        EntityKind::NvSwitch => Some((EntityKind::NvSwitch, e.entity_id)),
        EntityKind::Cpu => e.cpu.as_ref().map(|c| (EntityKind::Cpu, c.index)),
        _ => None,
    }
}
