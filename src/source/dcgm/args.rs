//! The DCGM source's flags (`Source` in `--help`): where libdcgm is and which host engine to read.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};

use super::log::DcgmLogLevel;
use crate::config::duration::parse_go_duration;

/// The DCGM flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Source")]
// The field docs are --help text, not rustdoc: `[IPv6]` is meant literally.
#[allow(rustdoc::broken_intra_doc_links)]
pub struct DcgmArgs {
    /// Remote nv-hostengine: HOST:PORT, [IPv6]:PORT or unix:///path. Unset: embedded host engine.
    #[arg(
        short = 'r',
        long = "remote-hostengine-info",
        env = "DCGM_REMOTE_HOSTENGINE_INFO",
        value_name = "ADDRESS"
    )]
    pub remote_hostengine_info: Option<String>,

    /// libdcgm to load instead of searching for libdcgm.so.4, then libdcgm.so.3 (LD_LIBRARY_PATH works too).
    #[arg(long = "dcgm-library", env = "DCGM_OTEL_LIBDCGM", value_name = "PATH")]
    pub dcgm_library: Option<PathBuf>,

    /// Follow GPU bind/unbind events (DCGM 4.5 or newer): when a GPU is unbound from or bound to the
    /// driver, rediscover the GPUs without a restart.
    #[arg(long = "enable-gpu-bind-unbind-watch", env = "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",
          action = ArgAction::SetTrue)]
    pub enable_gpu_bind_unbind_watch: bool,

    /// How often to look for a bind/unbind event (Go duration; DCGM recommends 1s).
    #[arg(long = "gpu-bind-unbind-poll-interval", env = "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
          value_name = "DURATION", default_value = "1s", value_parser = parse_go_duration)]
    pub gpu_bind_unbind_poll_interval: Duration,

    /// Pass DCGM's own log through (embedded host engine only; with -r it is nv-hostengine's): to
    /// standard output, or to the file __DCGM_DBG_FILE names when it is set.
    #[arg(long = "enable-dcgm-log", env = "DCGM_EXPORTER_ENABLE_DCGM_LOG", action = ArgAction::SetTrue)]
    pub enable_dcgm_log: bool,

    /// DCGM's log level with --enable-dcgm-log.
    #[arg(
        long = "dcgm-log-level",
        env = "DCGM_EXPORTER_DCGM_LOG_LEVEL",
        value_name = "LEVEL",
        value_enum,
        default_value = "NONE"
    )]
    pub dcgm_log_level: DcgmLogLevel,

    /// The node's /dev, where the NVIDIA device files (nvidia0, nvidia1, ...) say how many GPUs it has:
    /// when DCGM reports fewer, /ready answers 503 and the GPUs are rediscovered. In a container, the
    /// devices the runtime exposes (NVIDIA_VISIBLE_DEVICES=all); an empty directory turns the device
    /// count off (NVML's count and DCGM's own earlier count still apply).
    #[arg(
        long = "dev-root",
        env = "DCGM_OTEL_DEV_ROOT",
        value_name = "PATH",
        default_value = "/dev"
    )]
    pub dev_root: PathBuf,
}

impl DcgmArgs {
    /// The bind/unbind poll interval when the watch is on.
    pub fn bind_watch(&self) -> Option<Duration> {
        self.enable_gpu_bind_unbind_watch
            .then_some(self.gpu_bind_unbind_poll_interval)
    }
}
