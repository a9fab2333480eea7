//! Per-process series on :9400, written after the DCGM families when the snapshot carries processes
//! (`--collect-processes`):
//!
//! | family | value |
//! |---|---|
//! | `dcgm_otel_process_gpu_memory_bytes` | GPU memory the process uses |
//! | `dcgm_otel_process_sm_utilization_percent` | SM utilization over the last interval |
//! | `dcgm_otel_process_memory_utilization_percent` | memory-controller utilization |
//! | `dcgm_otel_process_encoder_utilization_percent` | video encoder utilization |
//! | `dcgm_otel_process_decoder_utilization_percent` | video decoder utilization |
//!
//! Labels: the device's identity exactly as on its DCGM series (`gpu, UUID, pci_bus_id, device,
//! modelName, [GPU_I_PROFILE, GPU_I_ID], Hostname`), then `pid`, `process_name`, then the process's
//! attribution sorted by name (`container, namespace, pod, pod_uid`). The `other` fold of the
//! processes beyond `--max-processes-per-gpu` has no `pid` and `process_name="other"`. A process is a
//! series only while it runs. Rendered from scratch each time: a node has tens of processes, not
//! thousands.

use crate::config::LabelStyle;
use crate::snapshot::{EntityKind, ProcessReading, Snapshot};
use crate::telemetry::exposition::{push_label, write_f64};

/// One family: name, help, and how a reading gives its value.
type Family = (
    &'static str,
    &'static str,
    fn(&ProcessReading) -> Option<f64>,
);

/// The families in output order.
pub const FAMILIES: &[Family] = &[
    (
        "dcgm_otel_process_gpu_memory_bytes",
        "GPU memory used by the process (NVML), in bytes.",
        |p| p.memory_bytes.map(|b| b as f64),
    ),
    (
        "dcgm_otel_process_sm_utilization_percent",
        "SM utilization of the process over the last collect interval (NVML samples), in percent of the device.",
        |p| p.sm_util,
    ),
    (
        "dcgm_otel_process_memory_utilization_percent",
        "Memory-controller utilization of the process over the last collect interval, in percent.",
        |p| p.mem_util,
    ),
    (
        "dcgm_otel_process_encoder_utilization_percent",
        "Video encoder utilization of the process over the last collect interval, in percent.",
        |p| p.enc_util,
    ),
    (
        "dcgm_otel_process_decoder_utilization_percent",
        "Video decoder utilization of the process over the last collect interval, in percent.",
        |p| p.dec_util,
    ),
];

/// The label set of one process reading (without braces).
pub fn labels(p: &ProcessReading, snap: &Snapshot, style: &LabelStyle) -> String {
    let mut out = String::with_capacity(256);
    let mut first = true;
    let gpu = &p.entity.gpu;
    push_label(&mut out, &mut first, "gpu", &gpu.index.to_string());
    let uuid_name = if style.use_old_namespace {
        "uuid"
    } else {
        "UUID"
    };
    push_label(&mut out, &mut first, uuid_name, &gpu.uuid);
    push_label(&mut out, &mut first, "pci_bus_id", &gpu.pci_bus_id);
    push_label(&mut out, &mut first, "device", &gpu.device());
    push_label(
        &mut out,
        &mut first,
        "modelName",
        &style.model_name(&gpu.model),
    );
    if let (EntityKind::GpuInstance, Some(m)) = (p.entity.kind, &p.entity.mig) {
        push_label(&mut out, &mut first, "GPU_I_PROFILE", &m.profile);
        push_label(&mut out, &mut first, "GPU_I_ID", &m.gi_id.to_string());
    }
    if let Some(h) = snap.host.hostname.as_deref().filter(|h| !h.is_empty()) {
        push_label(&mut out, &mut first, style.hostname_label.as_str(), h);
    }
    if let Some(pid) = p.pid {
        push_label(&mut out, &mut first, "pid", &pid.to_string());
    }
    push_label(&mut out, &mut first, "process_name", &p.name);
    let mut attrs: Vec<(&str, &str)> = p
        .attribution
        .sets()
        .flatten()
        .map(|a| (a.key.prometheus_name(style.use_old_namespace), &*a.value))
        .filter(|(k, _)| !matches!(*k, "pid" | "process_name"))
        .collect();
    attrs.sort();
    attrs.dedup_by(|a, b| a.0 == b.0);
    for (k, v) in attrs {
        push_label(&mut out, &mut first, k, v);
    }
    out
}

/// Append the process families of `snap` to `out`; returns the samples written.
pub fn render(snap: &Snapshot, style: &LabelStyle, out: &mut String) -> usize {
    if snap.processes.is_empty() {
        return 0;
    }
    let labels: Vec<String> = snap
        .processes
        .iter()
        .map(|p| labels(p, snap, style))
        .collect();
    let mut samples = 0;
    for (name, help, value) in FAMILIES {
        let mut header = false;
        for (p, l) in snap.processes.iter().zip(&labels) {
            let Some(v) = value(p).filter(|v| v.is_finite()) else {
                continue;
            };
            if !header {
                out.push_str("# HELP ");
                out.push_str(name);
                out.push(' ');
                out.push_str(help);
                out.push_str("\n# TYPE ");
                out.push_str(name);
                out.push_str(" gauge\n");
                header = true;
            }
            out.push_str(name);
            out.push('{');
            out.push_str(l);
            out.push_str("} ");
            write_f64(out, v);
            out.push('\n');
            samples += 1;
        }
    }
    samples
}
