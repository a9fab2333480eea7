//! The Kubernetes flags (`Kubernetes` in `--help`), with dcgm-exporter's names and variables.

use std::path::PathBuf;

use clap::{ArgAction, Args};

use super::mapping::GpuIdType;

/// The Kubernetes flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kubernetes")]
// The field docs are --help text, not rustdoc: `<uuid>`, `<N>` and `<key>` are meant literally.
#[allow(rustdoc::invalid_html_tags)]
pub struct KubernetesArgs {
    /// Attribute GPUs and MIG instances to the pods holding them (kubelet pod-resources API).
    #[arg(short = 'k', long = "kubernetes", env = "DCGM_EXPORTER_KUBERNETES", action = ArgAction::SetTrue)]
    pub kubernetes: bool,

    /// How the device plugin names whole GPUs: uid (GPU-<uuid>) or device-name (nvidia<N>, GKE).
    #[arg(
        long = "kubernetes-gpu-id-type",
        env = "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        value_enum,
        default_value = "uid"
    )]
    pub kubernetes_gpu_id_type: GpuIdType,

    /// Add the pod_uid label (UIDs from the Kubernetes API when it is configured, else read from
    /// --kubelet-device-checkpoint).
    #[arg(long = "kubernetes-enable-pod-uid", env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
          action = ArgAction::SetTrue)]
    pub kubernetes_enable_pod_uid: bool,

    /// The kubelet's device-manager checkpoint, where --kubernetes-enable-pod-uid reads the pod UIDs the
    /// Kubernetes API does not give (the pod-resources v1 API carries none).
    #[arg(long = "kubelet-device-checkpoint", env = "DCGM_OTEL_KUBELET_DEVICE_CHECKPOINT", value_name = "PATH",
          default_value = super::checkpoint::DEFAULT_CHECKPOINT)]
    pub kubelet_device_checkpoint: PathBuf,

    /// The kubelet's pod-resources socket.
    #[arg(long = "pod-resources-kubelet-socket", env = "DCGM_POD_RESOURCES_KUBELET_SOCKET", value_name = "PATH",
          default_value = super::podresources::DEFAULT_SOCKET)]
    pub pod_resources_kubelet_socket: PathBuf,

    /// Extra extended-resource names that are NVIDIA GPUs (comma list), besides nvidia.com/gpu and
    /// nvidia.com/mig-*.
    #[arg(
        long = "nvidia-resource-names",
        env = "NVIDIA_RESOURCE_NAMES",
        value_name = "NAMES",
        value_delimiter = ','
    )]
    pub nvidia_resource_names: Vec<String>,

    /// Add the pods' labels (sanitized as Prometheus label names; k8s.pod.label.<key> on OTLP), from the
    /// Kubernetes API (in-cluster or KUBECONFIG; a watch on this node's pods).
    #[arg(long = "kubernetes-enable-pod-labels", env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
          action = ArgAction::SetTrue)]
    pub kubernetes_enable_pod_labels: bool,

    /// Only pod labels whose key matches one of these regular expressions (comma list; none: all).
    #[arg(
        long = "kubernetes-pod-label-allowlist-regex",
        env = "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        value_name = "REGEXES",
        value_delimiter = ','
    )]
    pub kubernetes_pod_label_allowlist_regex: Vec<String>,

    /// Shared GPUs (time slicing, MPS): add the vgpu label (the replica) to each sharing pod's series;
    /// with per-process readings, each pod's own DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED.
    #[arg(long = "kubernetes-virtual-gpus", env = "KUBERNETES_VIRTUAL_GPUS", action = ArgAction::SetTrue)]
    pub kubernetes_virtual_gpus: bool,

    /// Attribute GPUs and MIG instances allocated through Dynamic Resource Allocation (dra_* labels).
    #[arg(long = "kubernetes-enable-dra", env = "KUBERNETES_ENABLE_DRA", action = ArgAction::SetTrue)]
    pub kubernetes_enable_dra: bool,

    /// Percent utilization below which a held GPU counts as idle (dcgm_otel_pod_gpu_idle_seconds_total).
    #[arg(long = "idle-utilization-threshold", env = "DCGM_OTEL_IDLE_UTILIZATION_THRESHOLD",
          value_name = "PERCENT", default_value = "5", value_parser = parse_percent)]
    pub idle_utilization_threshold: f64,

    /// How long a departed pod's cost series are kept (Go duration).
    #[arg(long = "pod-series-retention", env = "DCGM_OTEL_POD_SERIES_RETENTION", value_name = "DURATION",
          default_value = "10m", value_parser = parse_retention)]
    pub pod_series_retention: std::time::Duration,
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a percentage from 0 to 100")),
    }
}

fn parse_retention(s: &str) -> Result<std::time::Duration, String> {
    let d = crate::config::duration::parse_go_duration(s)?;
    if d.is_zero() {
        return Err("the retention must be positive (e.g. 10m)".into());
    }
    Ok(d)
}
