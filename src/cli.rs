//! The command line: every feature's flag group gathered into one [`Cli`], with dcgm-exporter's long
//! names, short aliases and environment variables (the variable is used when the flag is absent), Go
//! `flag` syntax ([`crate::config::flags`]), and the dcgm-exporter flags dcgm-otel accepts but does not
//! implement. Each group is defined beside the feature that owns it and reaches it as a typed value:
//! nothing below this module sees the whole command line.

use std::ffi::OsString;

use clap::{ArgAction, Parser};

use crate::config::{flags, CollectionArgs};
use crate::enrich::containers::ContainerArgs;
use crate::enrich::exp::args::ExpArgs;
use crate::enrich::hpc::HpcArgs;
use crate::enrich::kubernetes::KubernetesArgs;
use crate::export::dump::DumpArgs;
use crate::export::otel::otlp::OtlpArgs;
use crate::server::args::ServerArgs;
use crate::source::args::SourceArgs;
use crate::source::dcgm::args::DcgmArgs;
use crate::source::sim::args::SimulationArgs;
use crate::telemetry::logging::LogArgs;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "dcgm-otel",
    version = crate::VERSION_LINE,
    about = "Export NVIDIA GPU metrics read through DCGM: dcgm-exporter compatible Prometheus text on :9400, plus native OTLP push.",
    max_term_width = 110
)]
pub struct Cli {
    #[command(flatten)]
    pub collection: CollectionArgs,
    #[command(flatten)]
    pub simulation: SimulationArgs,
    #[command(flatten)]
    pub dcgm: DcgmArgs,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub logging: LogArgs,
    #[command(flatten)]
    pub kubernetes: KubernetesArgs,
    #[command(flatten)]
    pub hpc: HpcArgs,
    #[command(flatten)]
    pub containers: ContainerArgs,
    #[command(flatten)]
    pub otlp: OtlpArgs,
    #[command(flatten)]
    pub exp: ExpArgs,
    #[command(flatten)]
    pub dump: DumpArgs,
}

/// dcgm-exporter flags that dcgm-otel accepts so existing command lines and manifests keep starting,
/// but does not implement yet: (long name, short alias, env var, takes a value). Each one given is
/// reported with a warning at start-up.
pub const ACCEPTED_NOT_IMPLEMENTED: &[(&str, Option<char>, &str, bool)] = &[
    ("fake-gpus", None, "DCGM_EXPORTER_USE_FAKE_GPUS", false),
    (
        "disable-startup-validate",
        None,
        "DISABLE_STARTUP_VALIDATE",
        false,
    ),
];

/// The full command: [`Cli`] plus the accepted-but-not-implemented dcgm-exporter flags (hidden in --help).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    // dcgm-exporter prints its version with -v as well.
    let mut cmd = Cli::command().disable_version_flag(true).arg(
        clap::Arg::new("version")
            .short('V')
            .short_alias('v')
            .long("version")
            .action(ArgAction::Version)
            .help("Print version and git commit"),
    );
    for (long, short, env, takes_value) in ACCEPTED_NOT_IMPLEMENTED {
        let mut arg = clap::Arg::new(*long).long(*long).env(*env).hide(true);
        if let Some(c) = short {
            arg = arg.short(*c);
        }
        arg = if *takes_value {
            arg.action(ArgAction::Set)
        } else {
            arg.action(ArgAction::SetTrue)
        };
        cmd = cmd.arg(arg);
    }
    flags::go_booleans(cmd)
}

/// The dcgm-exporter flags from [`ACCEPTED_NOT_IMPLEMENTED`] that were actually given (flag or env).
pub fn not_implemented_given(matches: &clap::ArgMatches) -> Vec<String> {
    ACCEPTED_NOT_IMPLEMENTED
        .iter()
        .filter(|(long, _, _, takes_value)| {
            let explicit = matches
                .value_source(long)
                .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue);
            explicit && (*takes_value || matches.get_flag(long))
        })
        .map(|(long, _, _, _)| format!("--{long}"))
        .collect()
}

/// A parsed command line and what start-up needs to know about how it was given.
pub struct Parsed {
    pub cli: Cli,
    /// `-f` (or its variable) was given explicitly: a missing file is an error, not the built-in set.
    pub collectors_explicit: bool,
    /// `-c` (or its variable) was given explicitly: it overrides `--config-file`'s interval.
    pub interval_explicit: bool,
    /// `-k` (or its variable) was given explicitly, on or off: a simulated cluster then follows it.
    pub kubernetes_explicit: bool,
    /// `--distribution` came from its variable (errors name `DCGM_OTEL_DISTRIBUTIONS`).
    pub distributions_from_env: bool,
    /// Accepted-but-not-implemented dcgm-exporter flags that were given, as `--name`.
    pub not_implemented: Vec<String>,
}

/// Parse the command line (Go-style single-dash long flags included) and the environment.
pub fn parse(args: &[OsString]) -> Result<Parsed, clap::Error> {
    parse_with(command(), args).map(|(parsed, _)| parsed)
}

/// Parse `args` as the engine library does ([`crate::engine::EngineOptions`]): the same flags and
/// syntax, but no environment variable stands in for a flag (the library's caller configures it, not
/// the host process's environment). Also returns the ids of the flags given.
pub fn parse_flags_only(args: &[OsString]) -> Result<(Parsed, Vec<String>), clap::Error> {
    parse_with(command().mut_args(|a| a.env(None)), args)
}

fn parse_with(cmd: clap::Command, args: &[OsString]) -> Result<(Parsed, Vec<String>), clap::Error> {
    use clap::FromArgMatches;
    let matches = cmd
        .clone()
        .try_get_matches_from(flags::normalize_args(&cmd, args.iter().cloned()))?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.simulation.normalize();
    let explicit = |id: &str| {
        matches
            .value_source(id)
            .is_some_and(|s| s != clap::parser::ValueSource::DefaultValue)
    };
    let collectors_explicit = explicit("collectors");
    let interval_explicit = explicit("collect_interval");
    let kubernetes_explicit = explicit("kubernetes");
    let given = matches
        .ids()
        .filter(|id| explicit(id.as_str()))
        .map(|id| id.as_str().to_string())
        .collect();
    let parsed = Parsed {
        cli,
        collectors_explicit,
        interval_explicit,
        kubernetes_explicit,
        distributions_from_env: matches.value_source("distributions")
            == Some(clap::parser::ValueSource::EnvVariable),
        not_implemented: not_implemented_given(&matches),
    };
    Ok((parsed, given))
}

/// One line for a command-line error (see [`flags::describe_error`]).
pub fn describe_error(error: &clap::Error, args: &[OsString]) -> String {
    flags::describe_error(&command(), error, args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostnameLabel;
    use crate::counters::DEFAULT_COLLECTORS;
    use std::path::PathBuf;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        super::parse(&args).map(|p| p.cli)
    }

    #[test]
    fn defaults_match_dcgm_exporter() {
        let c = parse(&["dcgm-otel"]).unwrap();
        assert_eq!(c.server.address, ":9400");
        assert_eq!(c.collection.collect_interval, 30000);
        assert_eq!(c.collection.collectors, PathBuf::from(DEFAULT_COLLECTORS));
        assert_eq!(c.collection.hostname_label, HostnameLabel::Hostname);
        assert!(c.simulation.simulate.is_none());
        assert!(!c.kubernetes.kubernetes);
        assert!(c.server.web_health_auth);
    }

    #[test]
    fn go_style_single_dash_long_flags() {
        let c = parse(&[
            "dcgm-otel",
            "-collectors",
            "/x.csv",
            "-rbmn",
            "-address=:9500",
        ])
        .unwrap();
        assert_eq!(c.collection.collectors, PathBuf::from("/x.csv"));
        assert!(c.collection.replace_blanks_in_model_name);
        assert_eq!(c.server.address, ":9500");
        let c = parse(&["dcgm-otel", "-f", "/y.csv", "-c", "1000"]).unwrap();
        assert_eq!(c.collection.collectors, PathBuf::from("/y.csv"));
        assert_eq!(c.collection.collect_interval, 1000);
    }

    #[test]
    fn booleans_take_go_forms() {
        for (args, expected) in [
            (vec!["x", "-k"], true),
            (vec!["x", "--kubernetes"], true),
            (vec!["x", "--kubernetes=true"], true),
            (vec!["x", "--kubernetes=T"], true),
            (vec!["x", "-k=1"], true),
            (vec!["x", "-k=false"], false),
            (vec!["x", "--kubernetes=False"], false),
            (vec!["x", "-kubernetes=0"], false),
            (vec!["x"], false),
        ] {
            assert_eq!(
                parse(&args).unwrap().kubernetes.kubernetes,
                expected,
                "{args:?}"
            );
        }
        assert!(parse(&["x", "--kubernetes=yes"]).is_err());
        assert!(parse(&["x", "-k", "false"]).is_err());
        let c = parse(&["x", "--web-health-auth=false", "-o=true", "--otlp=t"]).unwrap();
        assert!(!c.server.web_health_auth);
        assert!(c.collection.use_old_namespace);
        assert!(c.otlp.otlp);
        // An accepted-but-unimplemented boolean takes the same forms.
        assert!(parse(&["x", "--fake-gpus=false"]).is_ok());
    }

    #[test]
    fn simulate_reads_true_and_false_as_a_switch() {
        for (value, want) in [
            ("true", Some("default")),
            ("TRUE", Some("default")),
            ("1", Some("default")),
            ("false", None),
            ("0", None),
            ("incidents", Some("incidents")),
        ] {
            let flag = format!("--simulate={value}");
            assert_eq!(
                parse(&["x", &flag]).unwrap().simulation.simulate.as_deref(),
                want,
                "{value}"
            );
        }
    }

    #[test]
    fn simulate_takes_an_optional_scenario() {
        assert_eq!(
            parse(&["x", "--simulate"])
                .unwrap()
                .simulation
                .simulate
                .as_deref(),
            Some("default")
        );
        assert_eq!(
            parse(&["x", "--simulate=large"])
                .unwrap()
                .simulation
                .simulate
                .as_deref(),
            Some("large")
        );
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(parse(&["x", "-d", "q"]).is_err());
        assert!(parse(&["x", "-c", "abc"]).is_err());
        assert!(parse(&["x", "--nope"]).is_err());
        assert!(parse(&["x", "--hostname-label", "HOST"]).is_err());
    }
}
