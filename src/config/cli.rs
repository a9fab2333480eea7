//! Command-line flags and environment variables, with dcgm-exporter's names.
//!
//! Every dcgm-exporter flag keeps its long name, short alias and environment variable; the variable is
//! used when the flag is absent. Like Go's `flag` package (which dcgm-exporter's CLI library uses), long
//! names also work with a single dash (`-collectors`, `-rbmn`): [`normalize_args`] rewrites those before
//! clap sees them. Flags are grouped by feature in `--help`; each feature adds its own flags in its own
//! section of [`Cli`].

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Parser, ValueEnum};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Spelling of the host label: dcgm-exporter up to 4.8.2 wrote `Hostname`, 4.8.3 writes `hostname`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostnameLabel {
    #[value(name = "Hostname")]
    Hostname,
    #[value(name = "hostname")]
    LowerHostname,
}

impl HostnameLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            HostnameLabel::Hostname => "Hostname",
            HostnameLabel::LowerHostname => "hostname",
        }
    }
}

pub const DEFAULT_COLLECTORS: &str = "/etc/dcgm-exporter/default-counters.csv";

#[derive(Debug, Clone, Parser)]
#[command(
    name = "dcgm-otel",
    version = crate::VERSION_LINE,
    about = "Export NVIDIA GPU metrics read through DCGM: dcgm-exporter compatible Prometheus text on :9400, plus native OTLP push.",
    max_term_width = 110
)]
pub struct Cli {
    // ---------------------------------------------------------------- Metrics
    /// Counters CSV: which DCGM fields to export. When the default path does not exist, the built-in
    /// default counters are used.
    #[arg(short = 'f', long = "collectors", env = "DCGM_EXPORTER_COLLECTORS", value_name = "PATH",
          default_value = DEFAULT_COLLECTORS, help_heading = "Metrics")]
    pub collectors: PathBuf,

    /// Collect interval in milliseconds (also DCGM's watch update frequency).
    #[arg(short = 'c', long = "collect-interval", env = "DCGM_EXPORTER_INTERVAL", value_name = "MS",
          default_value_t = 30000, value_parser = clap::value_parser!(u64).range(100..=3_600_000),
          help_heading = "Metrics")]
    pub collect_interval: u64,

    /// GPUs and MIG instances to monitor: f (flex), g, i, g:0,1, i:0,2-4, g:0+i:3.
    #[arg(short = 'd', long = "devices", env = "DCGM_EXPORTER_DEVICES_STR", value_name = "SELECTION",
          default_value = "f", value_parser = parse_devices, help_heading = "Metrics")]
    pub devices: super::devices::DeviceSelection,

    /// Use dcgm-exporter 1.x label names (uuid, pod_name, pod_namespace, container_name).
    #[arg(short = 'o', long = "use-old-namespace", env = "DCGM_EXPORTER_USE_OLD_NAMESPACE",
          action = ArgAction::SetTrue, help_heading = "Metrics")]
    pub use_old_namespace: bool,

    /// Collapse whitespace in the model name and replace spaces with '-' (alias -rbmn).
    #[arg(long = "replace-blanks-in-model-name", env = "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",
          action = ArgAction::SetTrue, help_heading = "Metrics")]
    pub replace_blanks_in_model_name: bool,

    /// Do not add the host label to series.
    #[arg(short = 'n', long = "no-hostname", env = "DCGM_EXPORTER_NO_HOSTNAME", action = ArgAction::SetTrue,
          help_heading = "Metrics")]
    pub no_hostname: bool,

    /// Name of the host label: Hostname (dcgm-exporter <= 4.8.2, the default) or hostname (4.8.3).
    #[arg(long = "hostname-label", env = "DCGM_OTEL_HOSTNAME_LABEL", value_enum,
          default_value = "Hostname", help_heading = "Metrics")]
    pub hostname_label: HostnameLabel,

    /// Leave out the exporter's own dcgm_otel_* metrics.
    #[arg(long = "no-self-metrics", env = "DCGM_OTEL_NO_SELF_METRICS", action = ArgAction::SetTrue,
          help_heading = "Metrics")]
    pub no_self_metrics: bool,

    // ---------------------------------------------------------------- Source
    /// Run on a simulated GPU fleet instead of DCGM: default, dgx-h100-mig, large, or a scenario file.
    #[arg(long = "simulate", env = "DCGM_OTEL_SIMULATE", value_name = "SCENARIO", num_args = 0..=1,
          require_equals = true, default_missing_value = "default", help_heading = "Source")]
    pub simulate: Option<String>,

    /// Seed of the simulated fleet (same seed, same values).
    #[arg(long = "simulate-seed", env = "DCGM_OTEL_SIMULATE_SEED", value_name = "N", help_heading = "Source")]
    pub simulate_seed: Option<u64>,

    /// Remote nv-hostengine: HOST:PORT, [IPv6]:PORT or unix:///path. Unset: embedded host engine.
    #[arg(short = 'r', long = "remote-hostengine-info", env = "DCGM_REMOTE_HOSTENGINE_INFO",
          value_name = "ADDRESS", help_heading = "Source")]
    pub remote_hostengine_info: Option<String>,

    /// libdcgm to load instead of searching for libdcgm.so.4, then libdcgm.so.3 (LD_LIBRARY_PATH works too).
    #[arg(long = "dcgm-library", env = "DCGM_OTEL_LIBDCGM", value_name = "PATH", help_heading = "Source")]
    pub dcgm_library: Option<PathBuf>,

    // ---------------------------------------------------------------- Server
    /// Listen address for /metrics: HOST:PORT, :PORT or [IPv6]:PORT.
    #[arg(short = 'a', long = "address", env = "DCGM_EXPORTER_LISTEN", value_name = "ADDRESS",
          default_value = ":9400", help_heading = "Server")]
    pub address: String,

    // ---------------------------------------------------------------- Logging
    /// Log format on stderr.
    #[arg(long = "log-format", env = "DCGM_EXPORTER_LOG_FORMAT", value_enum, default_value = "text",
          help_heading = "Logging")]
    pub log_format: LogFormat,

    /// Log at debug level.
    #[arg(long = "debug", env = "DCGM_EXPORTER_DEBUG", action = ArgAction::SetTrue, help_heading = "Logging")]
    pub debug: bool,
}

fn parse_devices(s: &str) -> Result<super::devices::DeviceSelection, String> {
    super::devices::parse(s).map_err(|e| e.to_string())
}

/// Rewrite Go-style single-dash long flags (`-collectors x`, `-rbmn`) into clap's `--long` form.
/// Only names that are real long flags (or `rbmn`) are rewritten; short flags are left alone.
pub fn normalize_args<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let longs: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .chain(["help".to_string(), "version".to_string()])
        .collect();
    let mut out = Vec::new();
    let mut after_dashdash = false;
    for (i, arg) in args.into_iter().enumerate() {
        if i == 0 || after_dashdash {
            out.push(arg);
            continue;
        }
        let Some(s) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if s == "--" {
            after_dashdash = true;
            out.push(arg);
            continue;
        }
        if let Some(body) = s.strip_prefix('-').filter(|b| !b.starts_with('-') && b.len() > 1) {
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let long = if name == "rbmn" {
                Some("replace-blanks-in-model-name")
            } else {
                longs.iter().find(|l| l.as_str() == name).map(String::as_str)
            };
            if let Some(long) = long {
                out.push(OsString::from(match value {
                    Some(v) => format!("--{long}={v}"),
                    None => format!("--{long}"),
                }));
                continue;
            }
        }
        if s == "--rbmn" || s.starts_with("--rbmn=") {
            out.push(OsString::from(s.replacen("--rbmn", "--replace-blanks-in-model-name", 1)));
            continue;
        }
        out.push(arg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(normalize_args(args.iter().map(OsString::from)))
    }

    #[test]
    fn defaults_match_dcgm_exporter() {
        let c = parse(&["dcgm-otel"]).unwrap();
        assert_eq!(c.address, ":9400");
        assert_eq!(c.collect_interval, 30000);
        assert_eq!(c.collectors, PathBuf::from(DEFAULT_COLLECTORS));
        assert_eq!(c.hostname_label, HostnameLabel::Hostname);
        assert!(c.simulate.is_none());
    }

    #[test]
    fn go_style_single_dash_long_flags() {
        let c = parse(&["dcgm-otel", "-collectors", "/x.csv", "-rbmn", "-address=:9500"]).unwrap();
        assert_eq!(c.collectors, PathBuf::from("/x.csv"));
        assert!(c.replace_blanks_in_model_name);
        assert_eq!(c.address, ":9500");
        let c = parse(&["dcgm-otel", "-f", "/y.csv", "-c", "1000"]).unwrap();
        assert_eq!(c.collectors, PathBuf::from("/y.csv"));
        assert_eq!(c.collect_interval, 1000);
    }

    #[test]
    fn simulate_takes_an_optional_scenario() {
        assert_eq!(parse(&["x", "--simulate"]).unwrap().simulate.as_deref(), Some("default"));
        assert_eq!(parse(&["x", "--simulate=large"]).unwrap().simulate.as_deref(), Some("large"));
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(parse(&["x", "-d", "q"]).is_err());
        assert!(parse(&["x", "-c", "abc"]).is_err());
        assert!(parse(&["x", "--nope"]).is_err());
        assert!(parse(&["x", "--hostname-label", "HOST"]).is_err());
    }
}
