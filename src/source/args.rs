//! The source-selection and per-process flags (`Source` in `--help`): which library reads the GPUs
//! (`--source dcgm|nvml|auto`), where NVML is, and whether and how processes are collected.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::config::flags::parse_go_bool;

/// Which library reads the GPU metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceKind {
    /// libdcgm (DCGM 4.x), as dcgm-exporter.
    #[value(name = "dcgm")]
    Dcgm,
    /// The driver's NVML (libnvidia-ml.so.1) only: hosts without DCGM.
    #[value(name = "nvml")]
    Nvml,
    /// DCGM when libdcgm loads and answers, else NVML.
    #[value(name = "auto")]
    Auto,
}

/// The source-selection and per-process flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Source")]
pub struct SourceArgs {
    /// Where GPU metrics come from: dcgm (libdcgm), nvml (the driver's libnvidia-ml only), or auto (DCGM
    /// when libdcgm loads and answers, else NVML).
    #[arg(
        long = "source",
        env = "DCGM_OTEL_SOURCE",
        value_enum,
        default_value = "dcgm"
    )]
    pub source: SourceKind,

    /// libnvidia-ml to load instead of searching for libnvidia-ml.so.1, then libnvidia-ml.so.
    #[arg(long = "nvml-library", env = "DCGM_OTEL_LIBNVML", value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,

    /// Per-process series (GPU memory and utilization of every process, with its pod on Kubernetes),
    /// read through NVML. Default: on with -k (not with --simulate), else off.
    #[arg(long = "collect-processes", env = "DCGM_OTEL_COLLECT_PROCESSES", value_name = "BOOL",
          num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::ValueParser::new(parse_go_bool))]
    pub collect_processes: Option<bool>,

    /// Process series per GPU or MIG instance; the smaller ones (by GPU memory) are summed as 'other'.
    #[arg(
        long = "max-processes-per-gpu",
        env = "DCGM_OTEL_MAX_PROCESSES_PER_GPU",
        value_name = "N",
        default_value_t = 16
    )]
    pub max_processes_per_gpu: usize,

    /// The host's /proc, where process names and cgroups (pod of a process) are read; in a container
    /// mount the host's /proc there (or run with hostPID).
    #[arg(
        long = "proc-root",
        env = "DCGM_OTEL_PROC_ROOT",
        value_name = "PATH",
        default_value = "/proc"
    )]
    pub proc_root: PathBuf,
}

impl SourceArgs {
    /// Whether processes are collected: the flag or variable, else on with Kubernetes.
    pub fn processes_on(&self, kubernetes: bool) -> bool {
        self.collect_processes.unwrap_or(kubernetes)
    }
}
