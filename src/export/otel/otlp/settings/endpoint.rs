//! The transport and the endpoint: the protocol, the specification's path rule (a signal endpoint
//! is used as it is; the flag and the generic variable are base URLs that HTTP appends the signal's
//! path to) and the scheme of a gRPC endpoint without one (`INSECURE`).

use super::config::{OtlpConfigError, Protocol, Signal};
use super::sources::{lookup, set};
use crate::export::otel::otlp::args::OtlpArgs;

/// `--otlp-protocol` / `OTEL_EXPORTER_OTLP_(<SIGNAL>_)PROTOCOL`; gRPC by default.
pub(super) fn protocol(
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

/// The endpoint as given, and where: the signal-specific variable is used verbatim; the flag and the
/// generic variable are base URLs to which HTTP appends the signal's path.
struct GivenEndpoint {
    url: String,
    verbatim: bool,
    pub(super) source_name: String,
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
pub(super) fn endpoint(
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
