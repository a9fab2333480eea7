//! The engine library's options: the binary's own flags, in the binary's syntax, so that every
//! setting means exactly what `dcgm-otel --help` and docs/flags.md say. Two differences:
//! - no environment variable stands in for a flag (`DCGM_EXPORTER_*`, `DCGM_OTEL_*`): the library's
//!   caller configures it, not the environment of the process that loads it. The variables that
//!   describe the host stay read as in the binary: `NODE_NAME`, `KUBERNETES_SERVICE_HOST`/`_PORT`,
//!   `KUBECONFIG`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`;
//! - the flags of what the library leaves to its caller are refused, each with one line: the :9400
//!   server and its web config, the OTLP endpoint and transport (the caller sends the requests),
//!   `--dump-*`, `--enable-pprof` and `--enable-dcgm-log` (process-wide: a signal handler, the
//!   environment).

use std::ffi::OsString;

use clap::Args;

use crate::cli::{self, Parsed};
use crate::export::dump::DumpArgs;
use crate::server::args::ServerArgs;

/// Flags of the OTLP group that are about sending (refused); the rest shape the requests (accepted).
const OTLP_TRANSPORT: &[&str] = &[
    "otlp",
    "otlp_endpoint",
    "otlp_protocol",
    "otlp_headers",
    "otlp_timeout",
    "otlp_compression",
    "otlp_certificate",
    "otlp_client_certificate",
    "otlp_client_key",
    "otlp_export_interval",
    "otlp_max_pending",
    "otlp_pipeline",
];

/// Process-wide settings the library must not change in a process it does not own.
const PROCESS_WIDE: &[&str] = &["enable_dcgm_log", "dcgm_log_level"];

/// Options the engine starts with.
pub struct EngineOptions {
    pub(super) parsed: Parsed,
}

/// Options the engine refuses: one line naming the option.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OptionsError(pub String);

impl EngineOptions {
    /// Parse `args` (without a program name: `["--simulate", "-c", "1000"]`) with the binary's flag
    /// grammar; see the module documentation for what differs.
    pub fn from_args<I, S>(args: I) -> Result<EngineOptions, OptionsError>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut all: Vec<OsString> = vec![OsString::from("dcgm-otel-engine")];
        all.extend(args.into_iter().map(Into::into));
        let (parsed, given) =
            cli::parse_flags_only(&all).map_err(|e| OptionsError(cli::describe_error(&e, &all)))?;
        if let Some(id) = given.iter().find(|id| refused(id)) {
            return Err(OptionsError(format!(
                "--{}: not an option of the engine library: {}",
                long_name(id),
                why_refused(id)
            )));
        }
        Ok(EngineOptions { parsed })
    }

    /// The collect interval the options ask for (before `--config-file`).
    pub fn interval(&self) -> std::time::Duration {
        self.parsed.cli.collection.interval()
    }
}

fn group_ids<A: Args>() -> Vec<String> {
    A::augment_args(clap::Command::new("group"))
        .get_arguments()
        .map(|a| a.get_id().as_str().to_string())
        .collect()
}

fn refused(id: &str) -> bool {
    OTLP_TRANSPORT.contains(&id)
        || PROCESS_WIDE.contains(&id)
        || group_ids::<ServerArgs>().iter().any(|g| g == id)
        || group_ids::<DumpArgs>().iter().any(|g| g == id)
}

fn why_refused(id: &str) -> &'static str {
    if OTLP_TRANSPORT.contains(&id) {
        "the caller sends the requests the engine builds"
    } else if PROCESS_WIDE.contains(&id) {
        "it changes the whole process's environment"
    } else if group_ids::<DumpArgs>().iter().any(|g| g == id) {
        "the engine writes no files; the caller has the requests"
    } else {
        "the engine serves nothing; :9400 and its settings are the standalone binary's"
    }
}

/// The flag's long name as `--help` spells it.
fn long_name(id: &str) -> String {
    cli::command()
        .get_arguments()
        .find(|a| a.get_id().as_str() == id)
        .and_then(|a| a.get_long().map(str::to_string))
        .unwrap_or_else(|| id.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(args: &[&str]) -> String {
        match EngineOptions::from_args(args.iter().copied()) {
            Ok(_) => panic!("{args:?} accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_binarys_flags_are_the_options() {
        let o = EngineOptions::from_args([
            "--simulate=large",
            "-c",
            "1000",
            "--otel-metric-names",
            "semconv",
            "-k",
            "--distribution",
            "DCGM_FI_DEV_POWER_USAGE@100ms",
        ])
        .unwrap();
        assert_eq!(o.interval(), std::time::Duration::from_secs(1));
        assert_eq!(o.parsed.cli.simulation.simulate.as_deref(), Some("large"));
        assert!(o.parsed.cli.kubernetes.kubernetes);
    }

    #[test]
    fn what_the_caller_owns_is_refused_with_one_line() {
        assert_eq!(
            refusal(&["--simulate", "--otlp-endpoint", "http://x:4317"]),
            "--otlp-endpoint: not an option of the engine library: the caller sends the requests the engine builds"
        );
        assert_eq!(
            refusal(&["-a", ":9500"]),
            "--address: not an option of the engine library: the engine serves nothing; :9400 and its settings are the standalone binary's"
        );
        assert_eq!(
            refusal(&["--enable-dcgm-log"]),
            "--enable-dcgm-log: not an option of the engine library: it changes the whole process's environment"
        );
        assert!(refusal(&["--dump-enabled"]).starts_with("--dump-enabled: "));
        assert!(
            refusal(&["--nope"]).contains("--nope"),
            "{}",
            refusal(&["--nope"])
        );
        assert!(refusal(&["-c", "abc"]).contains("abc"));
    }
}
