//! The identity labels of every entity kind on `:9400`, in dcgm-exporter's exact order and spelling
//! (its `render_metrics.go` templates), ending with the host label. The renderer
//! ([`super::prometheus`]) and the per-process series ([`super::process_series`]) write what follows
//! them; no other file spells an identity label.
//!
//! - GPU: `gpu, UUID, pci_bus_id, device, modelName, Hostname` (`uuid` with `--use-old-namespace`;
//!   `modelName` with `--replace-blanks-in-model-name` applied)
//! - MIG instance: the parent GPU's labels, then `GPU_I_PROFILE, GPU_I_ID`, then `Hostname`
//! - GPU NvLink: `nvlink, gpu, gpu_uuid, pci_bus_id, device, model_name, hostname` (dcgm-exporter's link
//!   template: the host label is always `hostname` and the model name is DCGM's, blanks kept)
//! - NvSwitch: `nvswitch="nvswitch<id>"`
//! - NvSwitch NvLink: `nvlink="<port>",nvswitch="nvswitch<id>"` (its host label is always `hostname`)
//! - CPU: `cpu="<id>"`, and with the 4.8.3 label set (`--hostname-label hostname`) `cpu_serial` when
//!   DCGM knows the serial
//! - CPU core: `cpucore="<core id>",cpu="<cpu id>"`
//!
//! The host label (`Hostname`, or `hostname` per `--hostname-label`) closes every template unless the
//! host name is empty (`--no-hostname`).
//!
//! One deliberate difference: dcgm-exporter 4.x writes `nvswitch="nvswitch0"` on the series of *every*
//! switch (it prints the monitoring info's parent id, which is 0 for a switch entity), so the series of
//! a multi-switch node collide — 4.8.2 serves duplicate series and 4.8.3's renderer fails the whole
//! scrape. dcgm-otel writes each switch's own id, spelled as on the switch's link series
//! (`nvswitch<id>`), so switch and link series of one switch join on `nvswitch`.

use crate::config::{HostnameLabel, LabelStyle};
use crate::snapshot::{Entity, EntityKind, GpuIdentity};
use crate::telemetry::exposition::push_label;

/// The identity labels of an entity and its host label (`hostname`: none when `None` or empty),
/// without braces: the text between `name{` and the labels that follow (`label` fields, attributes).
pub fn identity_labels(style: &LabelStyle, entity: &Entity, hostname: Option<&str>) -> String {
    let mut out = String::with_capacity(256);
    let mut first = true;
    match (entity.kind, &entity.gpu) {
        (EntityKind::NvLink, Some(gpu)) => push_gpu_link(&mut out, &mut first, entity, gpu),
        (EntityKind::Gpu | EntityKind::GpuInstance, Some(gpu)) => {
            push_gpu(&mut out, &mut first, style, entity, gpu);
        }
        _ => push_hardware(&mut out, &mut first, entity, style.hostname_label),
    }
    // dcgm-exporter's link templates spell the host label `hostname` in every release.
    let host_label = match entity.kind {
        EntityKind::NvLink | EntityKind::NvSwitchLink => "hostname",
        _ => style.hostname_label.as_str(),
    };
    if let Some(h) = hostname.filter(|h| !h.is_empty()) {
        push_label(&mut out, &mut first, host_label, h);
    }
    out
}

/// A GPU or MIG instance: `gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID]`.
fn push_gpu(out: &mut String, first: &mut bool, style: &LabelStyle, e: &Entity, gpu: &GpuIdentity) {
    push_label(out, first, "gpu", &gpu.index.to_string());
    let uuid_name = if style.use_old_namespace {
        "uuid"
    } else {
        "UUID"
    };
    push_label(out, first, uuid_name, &gpu.uuid);
    push_label(out, first, "pci_bus_id", &gpu.pci_bus_id);
    push_label(out, first, "device", &gpu.device());
    push_label(out, first, "modelName", &style.model_name(&gpu.model));
    if let Some(m) = &e.mig {
        push_label(out, first, "GPU_I_PROFILE", &m.profile);
        push_label(out, first, "GPU_I_ID", &m.gi_id.to_string());
    }
}

/// A GPU's NvLink: `nvlink, gpu, gpu_uuid, pci_bus_id, device, model_name` (the model as DCGM gives
/// it: --replace-blanks-in-model-name applies to GPU series only).
fn push_gpu_link(out: &mut String, first: &mut bool, e: &Entity, gpu: &GpuIdentity) {
    push_label(out, first, "nvlink", &e.link.unwrap_or(0).to_string());
    push_label(out, first, "gpu", &gpu.index.to_string());
    push_label(out, first, "gpu_uuid", &gpu.uuid);
    push_label(out, first, "pci_bus_id", &gpu.pci_bus_id);
    push_label(out, first, "device", &gpu.device());
    push_label(out, first, "model_name", &gpu.model);
}

/// The entities that are not GPU-side: NvSwitch, its links, CPU, its cores (nothing for a GPU-side
/// entity without a GPU identity).
fn push_hardware(out: &mut String, first: &mut bool, e: &Entity, host: HostnameLabel) {
    match e.kind {
        EntityKind::NvSwitch => {
            push_label(out, first, "nvswitch", &switch_name(e));
        }
        EntityKind::NvSwitchLink => {
            let port = e.link.unwrap_or(e.entity_id).to_string();
            push_label(out, first, "nvlink", &port);
            push_label(out, first, "nvswitch", &switch_name(e));
        }
        EntityKind::Cpu => {
            let cpu = e.cpu.as_ref().map_or(e.entity_id, |c| c.index);
            push_label(out, first, "cpu", &cpu.to_string());
            // 4.8.3 adds the serial (from dcgmGetCpuHierarchy_v2) to CPU series, not to core series.
            if host == HostnameLabel::LowerHostname {
                if let Some(serial) = e
                    .cpu
                    .as_ref()
                    .and_then(|c| c.serial.as_deref())
                    .filter(|s| !s.is_empty())
                {
                    push_label(out, first, "cpu_serial", serial);
                }
            }
        }
        EntityKind::CpuCore => {
            push_label(out, first, "cpucore", &e.entity_id.to_string());
            let cpu = e.cpu.as_ref().map_or(0, |c| c.index);
            push_label(out, first, "cpu", &cpu.to_string());
        }
        EntityKind::Gpu | EntityKind::GpuInstance | EntityKind::NvLink => {}
    }
}

/// `nvswitch<id>`.
fn switch_name(e: &Entity) -> String {
    format!("nvswitch{}", e.nvswitch.unwrap_or(e.entity_id))
}
