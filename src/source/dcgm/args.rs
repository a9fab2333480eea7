//! The DCGM source's flags (`Source` in `--help`): where libdcgm is and which host engine to read.

use std::path::PathBuf;

use clap::Args;

/// The DCGM flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Source")]
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
}
