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

use std::path::{Path, PathBuf};
use std::time::Duration;

use opentelemetry_sdk::metrics::Temporality;

use super::args::OtlpArgs;
use crate::export::otel::naming::percent_decode;

/// Transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// What an exporter sends: its own variables, HTTP path and gRPC service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Metrics,
    Logs,
}

impl Signal {
    /// The signal's part of its variables' names: `OTEL_EXPORTER_OTLP_<this>_ENDPOINT`.
    pub fn env_part(self) -> &'static str {
        match self {
            Signal::Metrics => "METRICS",
            Signal::Logs => "LOGS",
        }
    }
    /// The path HTTP appends to a base URL.
    pub fn http_path(self) -> &'static str {
        match self {
            Signal::Metrics => "/v1/metrics",
            Signal::Logs => "/v1/logs",
        }
    }
    /// The gRPC method of the signal's collector service.
    pub fn grpc_path(self) -> &'static str {
        match self {
            Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            Signal::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        }
    }
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{source_name}: {message}")]
pub struct OtlpConfigError {
    /// The flag or variable the value came from.
    pub source_name: String,
    pub message: String,
}

/// PEM material for TLS, read at start-up.
#[derive(Clone, Default)]
pub struct TlsFiles {
    /// Extra trusted CA certificates (PEM), added to the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate chain and key (PEM) for mTLS.
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca_pem.is_some())
            .field("client_identity", &self.client_identity.is_some())
            .finish()
    }
}

/// Resolved OTLP settings. `Debug` shows the headers' names, never their values (API keys).
#[derive(Clone)]
pub struct OtlpConfig {
    pub signal: Signal,
    pub protocol: Protocol,
    /// For gRPC the channel URL (scheme, host, port); for HTTP the full request URL.
    pub endpoint: String,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub gzip: bool,
    pub tls: TlsFiles,
    pub interval: Duration,
    pub temporality: Temporality,
    pub max_pending: usize,
}

impl std::fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(k, _)| format!("{k}=<redacted>"))
            .collect();
        f.debug_struct("OtlpConfig")
            .field("signal", &self.signal)
            .field("protocol", &self.protocol)
            .field("endpoint", &self.endpoint)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("gzip", &self.gzip)
            .field("tls", &self.tls)
            .field("interval", &self.interval)
            .field("temporality", &self.temporality)
            .field("max_pending", &self.max_pending)
            .finish()
    }
}

impl OtlpConfig {
    pub fn is_tls(&self) -> bool {
        self.endpoint.starts_with("https://")
    }
}

/// Parse `k=v,k2=v2` headers.
pub fn parse_headers(
    text: &str,
    source_name: &str,
) -> Result<Vec<(String, String)>, OtlpConfigError> {
    let mut out = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let err = |message: String| OtlpConfigError {
            source_name: source_name.to_string(),
            message: format!("entry {} '{entry}': {message}", i + 1),
        };
        let (k, v) = entry
            .split_once('=')
            .ok_or_else(|| err("expected key=value".into()))?;
        let k = percent_decode(k.trim()).map_err(err)?.to_ascii_lowercase();
        let v = percent_decode(v.trim()).map_err(err)?;
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(err(
                "header name must be letters, digits, '-', '_' or '.'".into()
            ));
        }
        if v.bytes().any(|b| b < 0x20 && b != b'\t') {
            return Err(err("header value contains a control character".into()));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// One setting's value and where it came from.
struct Found {
    value: String,
    source_name: String,
}

fn lookup(
    flag: Option<String>,
    flag_name: &str,
    signal: Signal,
    suffix: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Found> {
    if let Some(v) = flag {
        return Some(Found {
            value: v,
            source_name: flag_name.to_string(),
        });
    }
    for name in [
        format!("OTEL_EXPORTER_OTLP_{}_{suffix}", signal.env_part()),
        format!("OTEL_EXPORTER_OTLP_{suffix}"),
    ] {
        if let Some(v) = env(&name).filter(|v| !v.trim().is_empty()) {
            return Some(Found {
                value: v.trim().to_string(),
                source_name: name,
            });
        }
    }
    None
}

fn read_pem(path: &Path, source_name: &str) -> Result<Vec<u8>, OtlpConfigError> {
    let bytes = std::fs::read(path).map_err(|e| OtlpConfigError {
        source_name: source_name.to_string(),
        message: format!("cannot read '{}': {e}", path.display()),
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(OtlpConfigError {
            source_name: source_name.to_string(),
            message: format!("'{}' is not a PEM file", path.display()),
        });
    }
    Ok(bytes)
}

fn parse_ms(found: &Found) -> Result<Duration, OtlpConfigError> {
    found
        .value
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| OtlpConfigError {
            source_name: found.source_name.clone(),
            message: format!("'{}' is not a positive number of milliseconds", found.value),
        })
}

/// Resolve the metrics settings; `Ok(None)` when OTLP is off.
pub fn resolve(
    cli: &OtlpArgs,
    collect_interval: Duration,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<OtlpConfig>, OtlpConfigError> {
    resolve_signal(cli, Signal::Metrics, collect_interval, env)
}

/// Whether a variable is set to something.
fn set(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `OTEL_EXPORTER_OTLP_(<SIGNAL>_)INSECURE`: `true` or `false` (any case); unset is `false`.
fn insecure(signal: Signal, env: &dyn Fn(&str) -> Option<String>) -> Result<bool, OtlpConfigError> {
    let Some(f) = lookup(None, "", signal, "INSECURE", env) else {
        return Ok(false);
    };
    match f.value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(OtlpConfigError {
            source_name: f.source_name,
            message: format!("'{other}' is not true or false"),
        }),
    }
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

/// `--otlp-protocol` / `OTEL_EXPORTER_OTLP_(<SIGNAL>_)PROTOCOL`; gRPC by default.
fn protocol(
    cli: &OtlpArgs,
    signal: Signal,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Protocol, OtlpConfigError> {
    let found = lookup(
        cli.otlp_protocol.clone(),
        "--otlp-protocol",
        signal,
        "PROTOCOL",
        env,
    );
    match found {
        None => Ok(Protocol::Grpc),
        Some(f) => match f.value.as_str() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            other => Err(OtlpConfigError {
                source_name: f.source_name,
                message: format!("unsupported protocol '{other}' (use grpc or http/protobuf)"),
            }),
        },
    }
}

/// The endpoint as given, and where: the signal-specific variable is used verbatim; the flag and the
/// generic variable are base URLs to which HTTP appends the signal's path.
struct GivenEndpoint {
    url: String,
    verbatim: bool,
    source_name: String,
}

fn given_endpoint(
    cli: &OtlpArgs,
    signal: Signal,
    protocol: Protocol,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<GivenEndpoint, OtlpConfigError> {
    let signal_var = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.env_part());
    let (url, verbatim, source_name) = if let Some(e) = cli.otlp_endpoint.clone() {
        (e, false, "--otlp-endpoint".to_string())
    } else if let Some(e) = set(env, &signal_var) {
        (e, true, signal_var)
    } else if let Some(e) = set(env, "OTEL_EXPORTER_OTLP_ENDPOINT") {
        (e, false, "OTEL_EXPORTER_OTLP_ENDPOINT".to_string())
    } else {
        let default = match protocol {
            Protocol::Grpc => "http://localhost:4317",
            Protocol::HttpProtobuf => "http://localhost:4318",
        };
        (default.to_string(), false, "--otlp".to_string())
    };
    // A gRPC endpoint without a scheme (host:port): TLS unless INSECURE says plaintext.
    let url = if protocol == Protocol::Grpc && !url.contains("://") {
        let scheme = if insecure(signal, env)? {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{url}")
    } else {
        url
    };
    Ok(GivenEndpoint {
        url,
        verbatim,
        source_name,
    })
}

/// The URL requests go to: for gRPC the channel URL (scheme, host, port), for HTTP the full request
/// URL. Checked here: a URL with an http(s) scheme and a host, and no signal path where none belongs.
fn endpoint(
    cli: &OtlpArgs,
    signal: Signal,
    protocol: Protocol,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, OtlpConfigError> {
    let GivenEndpoint {
        url: endpoint,
        verbatim,
        source_name,
    } = given_endpoint(cli, signal, protocol, env)?;
    let bad_endpoint = |message: &str| OtlpConfigError {
        source_name: source_name.clone(),
        message: format!("'{endpoint}': {message}"),
    };
    let uri: hyper::Uri = endpoint
        .parse()
        .map_err(|e| bad_endpoint(&format!("not a URL ({e})")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(bad_endpoint("the URL needs an http:// or https:// scheme")),
    }
    if uri
        .host()
        .is_none_or(|h| h.trim_matches(['[', ']']).is_empty())
    {
        return Err(bad_endpoint("the URL has no host"));
    }
    let path = uri.path().trim_end_matches('/');
    let signal_path = ["/v1/metrics", "/v1/logs", "/v1/traces"]
        .into_iter()
        .find(|s| path.ends_with(s));
    let authority = uri.authority().map(|a| a.as_str());
    let scheme = uri.scheme_str().unwrap_or("http");
    match (protocol, signal_path) {
        // The flag and the generic variable are base URLs (the OTel specification's rule for
        // OTEL_EXPORTER_OTLP_ENDPOINT): the signal's path is appended for HTTP. A base that already
        // ends in a signal path would post to .../v1/metrics/v1/metrics and fail every export.
        (Protocol::HttpProtobuf, Some(ends)) if !verbatim => Err(bad_endpoint(&format!(
            "a base URL, to which {} is appended; it already ends in {ends}: give the \
             base (e.g. {scheme}://{}) or set OTEL_EXPORTER_OTLP_{}_ENDPOINT to the full URL",
            signal.http_path(),
            authority.unwrap_or("collector:4318"),
            signal.env_part(),
        ))),
        // gRPC has no signal paths (the method is the service's): an endpoint ending in one was
        // meant for OTLP/HTTP, and is refused as it is for HTTP.
        (Protocol::Grpc, Some(ends)) => Err(bad_endpoint(&format!(
            "ends in {ends}, an OTLP/HTTP path; a gRPC endpoint is the collector's address \
             (e.g. {scheme}://{}), or use --otlp-protocol http/protobuf",
            authority.unwrap_or("collector:4317"),
        ))),
        (Protocol::Grpc, None) => Ok(endpoint.trim_end_matches('/').to_string()),
        (Protocol::HttpProtobuf, _) if verbatim => Ok(endpoint),
        (Protocol::HttpProtobuf, _) => Ok(format!(
            "{}{}",
            endpoint.trim_end_matches('/'),
            signal.http_path()
        )),
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

/// The CA certificate and the client certificate and key, read and checked as PEM now.
fn tls_files(
    cli: &OtlpArgs,
    signal: Signal,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TlsFiles, OtlpConfigError> {
    let path_of = |flag: &Option<PathBuf>, flag_name: &str, suffix: &str| {
        lookup(
            flag.as_ref().map(|p| p.display().to_string()),
            flag_name,
            signal,
            suffix,
            env,
        )
    };
    let ca_pem = match path_of(&cli.otlp_certificate, "--otlp-certificate", "CERTIFICATE") {
        Some(f) => Some(read_pem(Path::new(&f.value), &f.source_name)?),
        None => None,
    };
    let cert = path_of(
        &cli.otlp_client_certificate,
        "--otlp-client-certificate",
        "CLIENT_CERTIFICATE",
    );
    let key = path_of(&cli.otlp_client_key, "--otlp-client-key", "CLIENT_KEY");
    let client_identity = match (cert, key) {
        (None, None) => None,
        (Some(c), Some(k)) => Some((
            read_pem(Path::new(&c.value), &c.source_name)?,
            read_pem(Path::new(&k.value), &k.source_name)?,
        )),
        (Some(c), None) => {
            return Err(OtlpConfigError {
                source_name: c.source_name,
                message: "a client certificate needs a client key (--otlp-client-key / OTEL_EXPORTER_OTLP_CLIENT_KEY)".into(),
            })
        }
        (None, Some(k)) => {
            return Err(OtlpConfigError {
                source_name: k.source_name,
                message: "a client key needs a client certificate (--otlp-client-certificate / OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE)".into(),
            })
        }
    };
    Ok(TlsFiles {
        ca_pem,
        client_identity,
    })
}

/// A setting with a flag and one variable of its own (no per-signal spelling).
fn flag_or_var(
    flag: Option<String>,
    flag_name: &str,
    var: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Found> {
    let flag = flag.map(|value| Found {
        value,
        source_name: flag_name.into(),
    });
    flag.or_else(|| {
        env(var).filter(|v| !v.trim().is_empty()).map(|v| Found {
            value: v.trim().to_string(),
            source_name: var.into(),
        })
    })
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
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        otlp: OtlpArgs,
    }

    fn cli(args: &[&str]) -> OtlpArgs {
        let mut v = vec!["dcgm-otel"];
        v.extend_from_slice(args);
        Only::try_parse_from(v).unwrap().otlp
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    const C: Duration = Duration::from_millis(1000);

    /// Issue 35: `Debug` of the settings printed the headers, which carry API keys.
    #[test]
    fn debug_never_shows_a_header_value() {
        let args = cli(&["--otlp", "--otlp-headers", "authorization=Bearer%20s3cr3t"]);
        let text = format!("{args:?}");
        assert!(!text.contains("s3cr3t"), "{text}");
        let c = resolve(&args, C, &env_of(&[])).unwrap().unwrap();
        let text = format!("{c:?}");
        assert!(
            !text.contains("s3cr3t") && text.contains("authorization=<redacted>"),
            "{text}"
        );
    }

    #[test]
    fn off_unless_enabled_or_endpoint_set() {
        assert!(resolve(&cli(&[]), C, &env_of(&[])).unwrap().is_none());
        let c = resolve(&cli(&["--otlp"]), C, &env_of(&[]))
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://localhost:4317");
        assert_eq!(c.protocol, Protocol::Grpc);
        assert_eq!(c.interval, C);
        let c = resolve(
            &cli(&["--otlp", "--otlp-protocol", "http/protobuf"]),
            C,
            &env_of(&[]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://localhost:4318/v1/metrics");
    }

    #[test]
    fn env_precedence_and_http_paths() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b,X-Tenant=t1"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "100"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
            ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Delta"),
        ]);
        let c = resolve(&cli(&[]), C, &env).unwrap().unwrap();
        assert_eq!(c.endpoint, "http://generic:4318/v1/metrics");
        assert_eq!(
            c.headers,
            vec![
                ("api-key".into(), "a b".into()),
                ("x-tenant".into(), "t1".into())
            ]
        );
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert!(c.gzip);
        assert_eq!(c.interval, Duration::from_secs(5));
        assert_eq!(c.temporality, Temporality::Delta);
        let env = env_of(&[
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "https://collector:9999/custom/path",
            ),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
        ]);
        let c = resolve(&cli(&[]), C, &env).unwrap().unwrap();
        assert_eq!(c.endpoint, "https://collector:9999/custom/path");
        assert!(c.is_tls());
        let c = resolve(
            &cli(&[
                "--otlp-endpoint",
                "http://flag:1234",
                "--otlp-protocol",
                "grpc",
            ]),
            C,
            &env,
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://flag:1234");
        assert_eq!(c.protocol, Protocol::Grpc);
    }

    #[test]
    fn the_flag_is_a_base_url_like_the_generic_variable() {
        let http = |endpoint: &str| {
            resolve(
                &cli(&[
                    "--otlp-endpoint",
                    endpoint,
                    "--otlp-protocol",
                    "http/protobuf",
                ]),
                C,
                &env_of(&[]),
            )
        };
        let c = http("http://h:4318/prefix/").unwrap().unwrap();
        assert_eq!(c.endpoint, "http://h:4318/prefix/v1/metrics");
        let e = http("http://h:4318/v1/metrics").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--otlp-endpoint: 'http://h:4318/v1/metrics': a base URL, to which /v1/metrics is appended; \
             it already ends in /v1/metrics: give the base (e.g. http://h:4318) or set \
             OTEL_EXPORTER_OTLP_METRICS_ENDPOINT to the full URL"
        );
        // The signal variable is a full URL, used as it is.
        let c = resolve(
            &cli(&["--otlp-protocol", "http/protobuf"]),
            C,
            &env_of(&[(
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://h:4318/v1/metrics",
            )]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "http://h:4318/v1/metrics");
        for no_host in ["http://:4317", "http://[]:4317"] {
            let e = resolve(&cli(&["--otlp-endpoint", no_host]), C, &env_of(&[])).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("--otlp-endpoint: '{no_host}': the URL has no host")
            );
        }
    }

    #[test]
    fn bad_values_name_their_source() {
        let e = resolve(
            &cli(&[]),
            C,
            &env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ]),
        )
        .unwrap_err();
        assert_eq!(e.source_name, "OTEL_EXPORTER_OTLP_ENDPOINT");
        let e = resolve(
            &cli(&[]),
            C,
            &env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
                ("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "yes"),
            ]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "OTEL_EXPORTER_OTLP_METRICS_INSECURE: 'yes' is not true or false"
        );
        let e = resolve(
            &cli(&["--otlp", "--otlp-protocol", "http/json"]),
            C,
            &env_of(&[]),
        )
        .unwrap_err();
        assert_eq!(e.source_name, "--otlp-protocol");
        let e = resolve(
            &cli(&["--otlp"]),
            C,
            &env_of(&[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")]),
        )
        .unwrap_err();
        assert_eq!(e.source_name, "OTEL_EXPORTER_OTLP_HEADERS");
        let e = resolve(
            &cli(&["--otlp", "--otlp-certificate", "/nonexistent/ca.pem"]),
            C,
            &env_of(&[]),
        )
        .unwrap_err();
        assert_eq!(e.source_name, "--otlp-certificate");
        let e = resolve(
            &cli(&["--otlp"]),
            C,
            &env_of(&[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/x.pem")]),
        )
        .unwrap_err();
        assert_eq!(e.source_name, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
        let e = resolve(
            &cli(&["--otlp", "--otlp-compression", "zstd"]),
            C,
            &env_of(&[]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("zstd"));
    }

    fn logs(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> OtlpConfig {
        resolve_signal(&cli(args), Signal::Logs, C, env)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn each_signal_reads_its_own_variables_before_the_generic_ones() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318/base"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "tenant=generic"),
            ("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "tenant=logs"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "700"),
            ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "gzip"),
        ]);
        let m = resolve(&cli(&[]), C, &env).unwrap().unwrap();
        let l = logs(&[], &env);
        assert_eq!(m.signal, Signal::Metrics);
        assert_eq!(l.signal, Signal::Logs);
        // The generic endpoint is a base URL: each signal appends its own path.
        assert_eq!(m.endpoint, "http://generic:4318/base/v1/metrics");
        assert_eq!(l.endpoint, "http://generic:4318/base/v1/logs");
        assert_eq!(m.headers, vec![("tenant".into(), "generic".into())]);
        assert_eq!(l.headers, vec![("tenant".into(), "logs".into())]);
        assert_eq!(m.timeout, Duration::from_millis(2500));
        assert_eq!(l.timeout, Duration::from_millis(700));
        assert!(!m.gzip);
        assert!(l.gzip);
        // A signal endpoint is used as it is, whatever its path; the other signal keeps the generic one.
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                "http://logs:9000/ingest",
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
        ]);
        let m = resolve(&cli(&[]), C, &env).unwrap().unwrap();
        let l = logs(&[], &env);
        assert_eq!(
            (m.protocol, m.endpoint.as_str()),
            (Protocol::Grpc, "http://generic:4318")
        );
        assert_eq!(
            (l.protocol, l.endpoint.as_str()),
            (Protocol::HttpProtobuf, "http://logs:9000/ingest")
        );
        // The flag wins over every variable, as a base URL for both signals.
        let l = logs(
            &[
                "--otlp-endpoint",
                "http://flag:4318",
                "--otlp-headers",
                "a=b",
            ],
            &env,
        );
        assert_eq!(l.endpoint, "http://flag:4318/v1/logs");
        assert_eq!(l.headers, vec![("a".into(), "b".into())]);
        // A logs endpoint alone does not turn OTLP on.
        let only_logs = env_of(&[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://logs:4317")]);
        assert!(resolve_signal(&cli(&[]), Signal::Logs, C, &only_logs)
            .unwrap()
            .is_none());
        assert_eq!(logs(&["--otlp"], &only_logs).endpoint, "http://logs:4317");
        // Only the metrics variable: the log records have no endpoint the user gave, and are not sent
        // (not to localhost:4317); with --otlp the defaults are what the user asked for.
        let only_metrics =
            env_of(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics:4317")]);
        assert!(resolve(&cli(&[]), C, &only_metrics).unwrap().is_some());
        assert!(resolve_signal(&cli(&[]), Signal::Logs, C, &only_metrics)
            .unwrap()
            .is_none());
        assert_eq!(
            logs(&["--otlp"], &only_metrics).endpoint,
            "http://localhost:4317"
        );
        // gRPC refuses a signal path too, whichever way the endpoint is given.
        for (args, vars) in [
            (
                &["--otlp-endpoint", "http://h:4317/v1/metrics"][..],
                &[][..],
            ),
            (
                &[][..],
                &[(
                    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                    "http://h:4317/v1/metrics",
                )][..],
            ),
        ] {
            let e = resolve(&cli(args), C, &env_of(vars)).unwrap_err();
            assert!(
                e.to_string().ends_with(
                    "'http://h:4317/v1/metrics': ends in /v1/metrics, an OTLP/HTTP path; a gRPC \
                     endpoint is the collector's address (e.g. http://h:4317), or use \
                     --otlp-protocol http/protobuf"
                ),
                "{e}"
            );
        }
        // A base URL ending in a signal path names the signal's own variable.
        let e = resolve_signal(
            &cli(&[
                "--otlp-endpoint",
                "http://h:4318/v1/logs",
                "--otlp-protocol",
                "http/protobuf",
            ]),
            Signal::Logs,
            C,
            &env_of(&[]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--otlp-endpoint: 'http://h:4318/v1/logs': a base URL, to which /v1/logs is appended; \
             it already ends in /v1/logs: give the base (e.g. http://h:4318) or set \
             OTEL_EXPORTER_OTLP_LOGS_ENDPOINT to the full URL"
        );
    }

    #[test]
    fn otlp_logs_is_on_unless_turned_off_like_a_go_boolean() {
        assert!(cli(&[]).otlp_logs);
        assert!(cli(&["--otlp-logs"]).otlp_logs);
        assert!(!cli(&["--otlp-logs=false"]).otlp_logs);
        assert!(!cli(&["--otlp-logs=0"]).otlp_logs);
        assert!(Only::try_parse_from(["dcgm-otel", "--otlp-logs=no"]).is_err());
    }

    #[test]
    fn insecure_picks_the_scheme_of_a_grpc_endpoint_without_one() {
        let grpc = |pairs: &'static [(&'static str, &'static str)]| {
            resolve(&cli(&[]), C, &env_of(pairs))
                .unwrap()
                .unwrap()
                .endpoint
        };
        assert_eq!(
            grpc(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]),
            "https://collector:4317"
        );
        assert_eq!(
            grpc(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
                ("OTEL_EXPORTER_OTLP_INSECURE", "TRUE"),
            ]),
            "http://collector:4317"
        );
        // The signal's variable wins over the generic one.
        assert_eq!(
            grpc(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
                ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
                ("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "false"),
            ]),
            "https://collector:4317"
        );
        // A scheme says it all: INSECURE does not change it.
        assert_eq!(
            grpc(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
                ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
            ]),
            "https://collector:4317"
        );
        let l = logs(
            &["--otlp-endpoint", "collector:4317"],
            &env_of(&[("OTEL_EXPORTER_OTLP_LOGS_INSECURE", "true")]),
        );
        assert_eq!(l.endpoint, "http://collector:4317");
        assert!(!l.is_tls());
    }
}
