//! OTel identity of the entities that are not GPUs: NvSwitches (and their NvLink ports) and CPUs (and
//! their cores). Each switch and each CPU is its own Resource in `per-entity` mode; a switch port joins
//! its switch's Resource with the link index on its data points, a core its CPU's Resource with the core
//! number on its points — as a GPU's NvLinks join the GPU's.
//!
//! Semantic-convention style (`--otel-attribute-style otel`): `hw.type` is `network` for an NvSwitch
//! (the NVLink fabric's switch ASIC; the hardware conventions' type for network devices) and `cpu` for a
//! CPU, `hw.id` is `nvswitch<id>` / `cpu<id>` (unique within the host, as `hw.id` must be), `hw.vendor`
//! is NVIDIA, the CPU's serial is `hw.serial_number`, DCGM's ids are `nvidia.nvswitch.index` /
//! `nvidia.cpu.index`, the port is `nvidia.nvlink.index` and the core `cpu.logical_number`. dcgm style:
//! the Prometheus label names (`nvswitch`, `nvlink`, `cpu`, `cpu_serial`, `cpucore`).

use std::sync::Arc;

use opentelemetry::{Key, KeyValue, StringValue, Value};

use crate::snapshot::{Entity, EntityKind};

/// Data-point attributes that tell the points of one Resource apart (never identity): the core number.
/// `otel`: semantic-convention names, else dcgm-exporter's.
pub fn point_keys(otel: bool) -> &'static [&'static str] {
    if otel {
        &["cpu.logical_number"]
    } else {
        &["cpucore"]
    }
}

fn kv(key: &'static str, value: impl Into<Arc<str>>) -> KeyValue {
    KeyValue::new(
        Key::from_static_str(key),
        Value::String(StringValue::from(value.into())),
    )
}

/// The identity attributes of a switch, switch port, CPU or core; `None` for GPU-side entities.
/// `otel`: semantic-convention names, else dcgm-exporter's; `link_key` is the style's NvLink index
/// attribute (shared with GPU links).
pub fn identity(otel: bool, e: &Entity, link_key: &'static str) -> Option<Vec<KeyValue>> {
    let switch = e.nvswitch.unwrap_or(e.entity_id);
    let cpu = e.cpu.as_ref().map_or(e.entity_id, |c| c.index);
    let mut out = Vec::with_capacity(6);
    match e.kind {
        EntityKind::NvSwitch | EntityKind::NvSwitchLink => {
            let name = format!("nvswitch{switch}");
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
                out.push(kv(link_key, e.link.unwrap_or(e.entity_id).to_string()));
            }
        }
        EntityKind::Cpu | EntityKind::CpuCore => {
            let serial = e
                .cpu
                .as_ref()
                .and_then(|c| c.serial.clone())
                .filter(|s| !s.is_empty());
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
                let key = point_keys(otel)[0];
                out.push(kv(key, e.entity_id.to_string()));
            }
        }
        EntityKind::Gpu | EntityKind::GpuInstance | EntityKind::NvLink => return None,
    }
    Some(out)
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
