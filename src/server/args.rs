//! The `Server` flags: where /metrics listens, the exporter-toolkit web config (TLS, auth), the
//! HTTP limits and the body format; and the listen-address grammar (Go's `host:port` forms).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::config::duration::parse_go_duration;
use crate::config::flags::parse_go_bool;

/// Format of the /metrics body: dcgm-exporter's. `otel` (the OpenTelemetry Prometheus bridge of 0.1)
/// is still parsed so that a configuration naming it gets one clear start-up error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrometheusFormat {
    Dcgm,
    #[value(hide = true)]
    Otel,
}

/// The `Server` flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Server")]
// The field docs are --help text, not rustdoc: `[IPv6]` is meant literally.
#[allow(rustdoc::broken_intra_doc_links)]
pub struct ServerArgs {
    /// Listen address for /metrics: HOST:PORT, :PORT or [IPv6]:PORT.
    #[arg(
        short = 'a',
        long = "address",
        env = "DCGM_EXPORTER_LISTEN",
        value_name = "ADDRESS",
        default_value = ":9400"
    )]
    pub address: String,

    /// Web config (Prometheus exporter-toolkit YAML): TLS, client certificates, basic auth, extra headers.
    /// Re-read on SIGHUP. Empty: plain HTTP, no auth.
    #[arg(
        long = "web-config-file",
        env = "DCGM_EXPORTER_WEB_CONFIG_FILE",
        value_name = "PATH"
    )]
    pub web_config_file: Option<PathBuf>,

    /// Serve on the listening sockets systemd passes (socket activation: LISTEN_FDS, LISTEN_PID; see
    /// packaging/systemd/dcgm-otel.socket) instead of binding --address. The web config still applies.
    #[arg(
        long = "web-systemd-socket",
        env = "DCGM_EXPORTER_SYSTEMD_SOCKET",
        action = clap::ArgAction::SetTrue
    )]
    pub web_systemd_socket: bool,

    /// Serve CPU profiles at /debug/pprof/profile?seconds=N (pprof protobuf). Without --web-config-file
    /// they are open to anyone who reaches the port (as in dcgm-exporter; a warning says so); with one,
    /// it must have TLS or basic auth. Part of builds with the `pprof` cargo feature (on by default); a
    /// build without it refuses the flag.
    #[arg(
        long = "enable-pprof",
        env = "DCGM_EXPORTER_ENABLE_PPROF",
        action = clap::ArgAction::SetTrue
    )]
    pub enable_pprof: bool,

    /// Time to read a request's headers (also the keep-alive idle limit and the TLS handshake limit).
    /// Go duration: 10s, 500ms, 1m; 0 = none.
    #[arg(long = "web-read-timeout", env = "DCGM_EXPORTER_WEB_READ_TIMEOUT", value_name = "DURATION",
          default_value = "10s", value_parser = parse_go_duration)]
    pub web_read_timeout: Duration,

    /// Time to write one response to a client. Go duration; 0 = none.
    #[arg(long = "web-write-timeout", env = "DCGM_EXPORTER_WEB_WRITE_TIMEOUT", value_name = "DURATION",
          default_value = "30s", value_parser = parse_go_duration)]
    pub web_write_timeout: Duration,

    /// Open connections at most; more are answered 503 at once (plain HTTP) or closed (TLS).
    #[arg(long = "web-max-connections", env = "DCGM_OTEL_WEB_MAX_CONNECTIONS", value_name = "N",
          default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub web_max_connections: u32,

    /// Requests handled at once at most (/health and /ready have a budget of their own); more are
    /// answered 503 at once.
    #[arg(long = "web-max-requests", env = "DCGM_OTEL_WEB_MAX_REQUESTS", value_name = "N",
          default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub web_max_requests: u32,

    /// Open connections of one client address at most (idle-connection floods); more are answered 503 at
    /// once (plain HTTP) or closed (TLS).
    #[arg(long = "web-max-client-connections", env = "DCGM_OTEL_WEB_MAX_CLIENT_CONNECTIONS", value_name = "N",
          default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub web_max_client_connections: u32,

    /// With basic auth on, also require it on /health and /ready (like dcgm-exporter). Kubernetes httpGet
    /// probes cannot send credentials: set false, or use tcpSocket probes.
    #[arg(long = "web-health-auth", env = "DCGM_OTEL_WEB_HEALTH_AUTH", value_name = "BOOL",
          default_value = "true", num_args = 0..=1, default_missing_value = "true", require_equals = true,
          value_parser = parse_go_bool)]
    pub web_health_auth: bool,

    /// /metrics format: dcgm (dcgm-exporter's names and labels; the only format: for OTel-style names in
    /// Prometheus, push OTLP to a collector with a prometheus exporter).
    #[arg(
        long = "prometheus-format",
        env = "DCGM_OTEL_PROMETHEUS_FORMAT",
        value_enum,
        default_value = "dcgm"
    )]
    pub prometheus_format: PrometheusFormat,
}

impl ServerArgs {
    /// `--web-config-file`, when one is given (an empty value means none, as in dcgm-exporter).
    pub fn web_config_path(&self) -> Option<&std::path::Path> {
        self.web_config_file
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty())
    }

    pub fn limits(&self) -> super::Limits {
        super::Limits {
            read_timeout: self.web_read_timeout,
            write_timeout: self.web_write_timeout,
            max_connections: self.web_max_connections as usize,
            max_requests: self.web_max_requests as usize,
            max_client_connections: self.web_max_client_connections as usize,
        }
    }
}

/// A listen address that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid --address '{input}': {message}")]
pub struct AddressError {
    pub input: String,
    pub message: String,
}

/// Resolve a Go-style listen address (`:9400`, `host:9400`, `[::]:9400`) into socket addresses to try.
pub fn listen_addresses(input: &str) -> Result<Vec<SocketAddr>, AddressError> {
    let bad = |message: &str| AddressError {
        input: input.to_string(),
        message: message.to_string(),
    };
    if let Some(port) = input.strip_prefix(':').filter(|p| !p.contains(':')) {
        let port: u16 = port
            .parse()
            .map_err(|_| bad("port is not a number in 0..65535"))?;
        // All interfaces: IPv6 any (dual stack on Linux), then IPv4 any as a fallback.
        return Ok(vec![
            SocketAddr::from(([0u16; 8], port)),
            SocketAddr::from(([0u8; 4], port)),
        ]);
    }
    if let Ok(addr) = input.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let (host, port) = input
        .rsplit_once(':')
        .ok_or_else(|| bad("expected HOST:PORT, :PORT or [IPv6]:PORT"))?;
    if host.contains(':') && !host.starts_with('[') {
        return Err(bad("an IPv6 address needs brackets, e.g. [::1]:9400"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| bad("port is not a number in 0..65535"))?;
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(&format!("cannot resolve host: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(bad("host resolves to no address"));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_address_forms() {
        assert_eq!(listen_addresses(":9400").unwrap().len(), 2);
        assert_eq!(
            listen_addresses("127.0.0.1:9401").unwrap(),
            vec!["127.0.0.1:9401".parse().unwrap()]
        );
        assert_eq!(
            listen_addresses("[::1]:9400").unwrap(),
            vec!["[::1]:9400".parse().unwrap()]
        );
        assert!(listen_addresses("::1:9400").is_err());
        assert!(listen_addresses(":x").is_err());
        assert!(listen_addresses("9400").is_err());
    }
}
