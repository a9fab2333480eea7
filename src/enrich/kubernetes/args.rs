//! The Kubernetes flags (`Kubernetes` in `--help`), with dcgm-exporter's names and variables.

use std::path::PathBuf;

use clap::{ArgAction, Args};

use super::mapping::GpuIdType;

/// The Kubernetes flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Kubernetes")]
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

    /// Add the pod_uid label (UIDs read from --kubelet-device-checkpoint).
    #[arg(long = "kubernetes-enable-pod-uid", env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
          action = ArgAction::SetTrue)]
    pub kubernetes_enable_pod_uid: bool,

    /// The kubelet's device-manager checkpoint, where --kubernetes-enable-pod-uid reads pod UIDs from
    /// (the pod-resources v1 API carries none).
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
}
