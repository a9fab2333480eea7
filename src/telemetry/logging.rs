//! Logging: `tracing` to stderr as text or JSON (`--log-format`), info level by default, debug with
//! `--debug`; `RUST_LOG` overrides both when set. Owns the `Logging` flags.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The logging flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log format on stderr.
    #[arg(
        long = "log-format",
        env = "DCGM_EXPORTER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,

    /// Log at debug level.
    #[arg(long = "debug", env = "DCGM_EXPORTER_DEBUG", action = clap::ArgAction::SetTrue)]
    pub debug: bool,
}

/// Install the subscriber (once; a second call, as in tests, is harmless).
pub fn init(args: &LogArgs) {
    let (format, debug) = (args.log_format, args.debug);
    let default = if debug { "debug" } else { "info" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let result = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    // A second initialisation (tests) is harmless.
    let _ = result;
}
