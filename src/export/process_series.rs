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
//!
//! Then the per-pod split of every device that runs processes of a pod (`snapshot::pod_split`):
//! `dcgm_otel_pod_gpu_utilization_percent` (sum of the pod's processes' SM utilization),
//! `dcgm_otel_pod_gpu_memory_bytes` (sum of their GPU memory) and `dcgm_otel_pod_gpu_power_watts`
//! (the device's `DCGM_FI_DEV_POWER_USAGE` times the pod's SM share), labelled with the device's
//! identity, `namespace` and `pod`. On a GPU shared by several pods these are each pod's own values,
//! not the device's repeated.

use super::entity_labels::identity_labels;
use crate::config::LabelStyle;
use crate::snapshot::pod_split::{self, PodShare};
use crate::snapshot::{Entity, Placement, ProcessReading, Snapshot};
use crate::telemetry::exposition::{label_names, push_label, write_f64};

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

/// The device identity and host labels of an entity, as on its DCGM series (nothing for an entity
/// without a GPU identity).
fn device_labels(entity: &Entity, snap: &Snapshot, style: &LabelStyle, out: &mut String) {
    if entity.gpu.is_some() {
        out.push_str(&identity_labels(
            style,
            entity,
            snap.host.hostname.as_deref(),
        ));
    }
}

/// The label set of one process reading (without braces).
pub fn labels(p: &ProcessReading, snap: &Snapshot, style: &LabelStyle) -> String {
    let mut out = String::with_capacity(256);
    device_labels(&p.entity, snap, style, &mut out);
    let mut first = out.is_empty();
    if let Some(pid) = p.pid {
        push_label(&mut out, &mut first, "pid", &pid.to_string());
    }
    push_label(&mut out, &mut first, "process_name", &p.name);
    // Never a second label of a name already written (a pod label `gpu` or `pid`).
    let mut attrs: Vec<(&str, &str)> = {
        let written = label_names(&out);
        p.attribution
            .sets()
            .flatten()
            .filter(|a| a.key.placement != Placement::OtlpOnly)
            .map(|a| (a.key.prometheus_name(style.use_old_namespace), &*a.value))
            .filter(|(k, _)| !written.contains(k))
            .collect()
    };
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
    samples + render_pod_split(snap, style, out)
}

/// One family of the per-pod split: name, help, and the value of a share.
pub type SplitFamily = (&'static str, &'static str, fn(&PodShare) -> Option<f64>);

pub const SPLIT_FAMILIES: &[SplitFamily] = &[
    (
        "dcgm_otel_pod_gpu_utilization_percent",
        "SM utilization of the pod's processes on the device (their sum), in percent of the device.",
        |s| Some(s.utilization),
    ),
    (
        "dcgm_otel_pod_gpu_memory_bytes",
        "GPU memory used by the pod's processes on the device (their sum), in bytes.",
        |s| Some(s.memory_bytes as f64),
    ),
    (
        "dcgm_otel_pod_gpu_power_watts",
        "The pod's part of the device's power draw: DCGM_FI_DEV_POWER_USAGE times the pod's share of the SM utilization of all processes on it, in watts.",
        |s| s.power_w,
    ),
];

/// The per-pod split series of every device that runs a pod's processes.
fn render_pod_split(snap: &Snapshot, style: &LabelStyle, out: &mut String) -> usize {
    let mut rows: Vec<(String, PodShare)> = Vec::new();
    for (d, shares) in pod_split::snapshot_shares(snap) {
        let mut base = String::with_capacity(256);
        device_labels(&d, snap, style, &mut base);
        for share in shares {
            let mut l = base.clone();
            let mut first = l.is_empty();
            let (ns_key, pod_key) = if style.use_old_namespace {
                ("pod_namespace", "pod_name")
            } else {
                ("namespace", "pod")
            };
            push_label(&mut l, &mut first, ns_key, &share.pod.namespace);
            push_label(&mut l, &mut first, pod_key, &share.pod.pod);
            rows.push((l, share));
        }
    }
    let mut samples = 0;
    for (name, help, value) in SPLIT_FAMILIES {
        let mut header = false;
        for (l, share) in &rows {
            let Some(v) = value(share).filter(|v| v.is_finite()) else {
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
