//! The resolved OTLP settings of one signal, what a signal is (its variables, HTTP path and gRPC
//! service), and the error a bad setting gives. `Debug` never shows a header value or key material.

use std::time::Duration;

use opentelemetry_sdk::metrics::Temporality;

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
