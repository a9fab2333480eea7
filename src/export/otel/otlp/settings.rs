//! OTLP settings: the `--otlp-*` flags and the standard `OTEL_EXPORTER_OTLP_*` variables, resolved once
//! at start-up, per signal ([`Signal`]: metrics, and the incident log records). Precedence per setting,
//! highest first: the flag, the signal's variable (`OTEL_EXPORTER_OTLP_METRICS_<X>` or
//! `OTEL_EXPORTER_OTLP_LOGS_<X>`), the generic `OTEL_EXPORTER_OTLP_<X>`, the default. Endpoints follow
//! the specification's path rule: a signal endpoint is a full URL used as it is; the flag and the
//! generic variable are base URLs to which HTTP appends `/v1/metrics` or `/v1/logs`. A gRPC endpoint
//! without a scheme is `https://` unless `OTEL_EXPORTER_OTLP_(<SIGNAL>_)INSECURE=true` makes it
//! `http://`. OTLP is off unless `--otlp` is given or a metrics endpoint (flag, generic or metrics
//! variable) is configured. Every bad value is a [`OtlpConfigError`] naming the flag or variable (exit
//! code 2 at start-up). Certificate files are read and parsed here, so a wrong path fails at start, not
//! at the first export.
//!
//! The parts: `config` (the resolved settings and their error), `sources` (where a value comes
//! from, plain value parsers), `endpoint` (protocol, path rule, scheme), `tls` (certificate files);
//! this file resolves a signal's settings from them.

use std::time::Duration;

use opentelemetry_sdk::metrics::Temporality;

use super::args::OtlpArgs;

use endpoint::{endpoint, protocol};
use sources::{flag_or_var, lookup, parse_headers, parse_ms, set};
use tls::tls_files;

mod config;
mod endpoint;
mod sources;
mod tls;

pub use config::{OtlpConfig, OtlpConfigError, Protocol, Signal, TlsFiles};

/// Resolve the metrics settings; `Ok(None)` when OTLP is off.
pub fn resolve(
    cli: &OtlpArgs,
    collect_interval: Duration,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<OtlpConfig>, OtlpConfigError> {
    resolve_signal(cli, Signal::Metrics, collect_interval, env)
}

/// Resolve one signal's settings; `Ok(None)` when OTLP is off. OTLP is on or off for both signals
/// together: a logs endpoint alone routes the log records but does not turn OTLP on. The log records
/// only go to an endpoint the user gave (flag, generic or logs variable) or, with `--otlp`, to the
/// default one: with only `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` set they are not sent (`Ok(None)`).
///
/// Every setting but the export interval and temporality (metrics variables, the same for both
/// signals) has a per-signal variable, so each step reads the signal's own first.
pub fn resolve_signal(
    cli: &OtlpArgs,
    signal: Signal,
    collect_interval: Duration,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<OtlpConfig>, OtlpConfigError> {
    if !sends(cli, signal, env) {
        return Ok(None);
    }
    let protocol = protocol(cli, signal, env)?;
    let endpoint = endpoint(cli, signal, protocol, env)?;
    let headers = match lookup(
        cli.otlp_headers.clone(),
        "--otlp-headers",
        signal,
        "HEADERS",
        env,
    ) {
        Some(f) => parse_headers(&f.value, &f.source_name)?,
        None => Vec::new(),
    };
    let timeout = match lookup(
        cli.otlp_timeout.map(|t| t.to_string()),
        "--otlp-timeout",
        signal,
        "TIMEOUT",
        env,
    ) {
        Some(f) => parse_ms(&f)?,
        None => Duration::from_secs(10),
    };
    Ok(Some(OtlpConfig {
        signal,
        protocol,
        endpoint,
        headers,
        timeout,
        gzip: gzip(cli, signal, env)?,
        tls: tls_files(cli, signal, env)?,
        interval: interval(cli, collect_interval, env)?,
        temporality: temporality(cli, env)?,
        max_pending: cli.otlp_max_pending as usize,
    }))
}

/// Whether `signal` is sent at all: OTLP is on (`--otlp` or a metrics endpoint: flag, generic or
/// metrics variable), and for the log records an endpoint of theirs or `--otlp`.
fn sends(cli: &OtlpArgs, signal: Signal, env: &dyn Fn(&str) -> Option<String>) -> bool {
    let generic = set(env, "OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    let on = cli.otlp
        || cli.otlp_endpoint.is_some()
        || set(env, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some()
        || generic;
    match signal {
        Signal::Metrics => on,
        Signal::Logs => {
            on && (cli.otlp
                || cli.otlp_endpoint.is_some()
                || set(env, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT").is_some()
                || generic)
        }
    }
}

/// `--otlp-compression` / `OTEL_EXPORTER_OTLP_(<SIGNAL>_)COMPRESSION`: gzip or none (the default).
fn gzip(
    cli: &OtlpArgs,
    signal: Signal,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<bool, OtlpConfigError> {
    let found = lookup(
        cli.otlp_compression.clone(),
        "--otlp-compression",
        signal,
        "COMPRESSION",
        env,
    );
    match found {
        None => Ok(false),
        Some(f) => match f.value.as_str() {
            "gzip" => Ok(true),
            "none" | "" => Ok(false),
            other => Err(OtlpConfigError {
                source_name: f.source_name,
                message: format!("unsupported compression '{other}' (use gzip or none)"),
            }),
        },
    }
}

/// `--otlp-export-interval` / `OTEL_METRIC_EXPORT_INTERVAL`; the collect interval by default.
fn interval(
    cli: &OtlpArgs,
    collect_interval: Duration,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Duration, OtlpConfigError> {
    let found = flag_or_var(
        cli.otlp_export_interval.map(|t| t.to_string()),
        "--otlp-export-interval",
        "OTEL_METRIC_EXPORT_INTERVAL",
        env,
    );
    match found {
        Some(f) => parse_ms(&f),
        None => Ok(collect_interval),
    }
}

/// `--otlp-temporality` / `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`; cumulative by default.
pub(crate) fn temporality(
    cli: &OtlpArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Temporality, OtlpConfigError> {
    let found = flag_or_var(
        cli.otlp_temporality.clone(),
        "--otlp-temporality",
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
        env,
    );
    match found {
        None => Ok(Temporality::Cumulative),
        Some(f) => match f.value.to_ascii_lowercase().as_str() {
            "cumulative" => Ok(Temporality::Cumulative),
            "delta" => Ok(Temporality::Delta),
            "lowmemory" => Ok(Temporality::LowMemory),
            other => Err(OtlpConfigError {
                source_name: f.source_name,
                message: format!(
                    "unsupported temporality '{other}' (use cumulative, delta or lowmemory)"
                ),
            }),
        },
    }
}

#[cfg(test)]
mod tests;
