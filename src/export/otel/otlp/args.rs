//! The OTLP flags (`OTLP` in `--help`). A flag wins over the standard `OTEL_*` variable named in its help
//! line; [`super::settings`] resolves the two together.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::config::flags::parse_go_bool;
use crate::export::otel::naming::{OtelAttributeStyle, OtelResourceMode};
use crate::export::otel::semconv::MetricNames;

/// How OTLP requests are built: `direct` is the only pipeline; `sdk` (the OpenTelemetry SDK path of
/// 0.1) is still parsed so that a configuration naming it gets one clear start-up error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtlpPipeline {
    /// Straight from the published snapshot.
    Direct,
    /// No longer built: refused at start.
    #[value(hide = true)]
    Sdk,
}

/// The OTLP flags. `Debug` leaves out the headers' values (they carry API keys).
#[derive(Clone, Args)]
#[command(next_help_heading = "OTLP")]
pub struct OtlpArgs {
    /// Push metrics over OTLP; without an endpoint, to http://localhost:4317 (grpc) or :4318 (http/protobuf).
    /// OTLP is also on whenever an endpoint is set.
    #[arg(long = "otlp", env = "DCGM_OTEL_OTLP", action = clap::ArgAction::SetTrue)]
    pub otlp: bool,

    /// OTLP endpoint base URL (http:// or https://), like OTEL_EXPORTER_OTLP_ENDPOINT: for http/protobuf,
    /// /v1/metrics and /v1/logs are appended [env: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT and
    /// OTEL_EXPORTER_OTLP_LOGS_ENDPOINT (full URLs, used as they are), OTEL_EXPORTER_OTLP_ENDPOINT].
    #[arg(long = "otlp-endpoint", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// grpc or http/protobuf [default: grpc] [env: OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)PROTOCOL].
    #[arg(long = "otlp-protocol", value_name = "PROTOCOL")]
    pub otlp_protocol: Option<String>,

    /// Extra request headers / gRPC metadata: k=v,k2=v2 (URL-encoded)
    /// [env: OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)HEADERS].
    #[arg(long = "otlp-headers", value_name = "LIST")]
    pub otlp_headers: Option<String>,

    /// Timeout of one export request in milliseconds [default: 10000] [env: OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)TIMEOUT].
    #[arg(long = "otlp-timeout", value_name = "MS")]
    pub otlp_timeout: Option<u64>,

    /// gzip or none [default: none] [env: OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)COMPRESSION].
    #[arg(long = "otlp-compression", value_name = "ALGO")]
    pub otlp_compression: Option<String>,

    /// PEM CA bundle trusted in addition to the system roots [env: OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)CERTIFICATE].
    #[arg(long = "otlp-certificate", value_name = "PATH")]
    pub otlp_certificate: Option<PathBuf>,

    /// PEM client certificate for mTLS [env: OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)CLIENT_CERTIFICATE].
    #[arg(long = "otlp-client-certificate", value_name = "PATH")]
    pub otlp_client_certificate: Option<PathBuf>,

    /// PEM private key of the client certificate [env: OTEL_EXPORTER_OTLP_(METRICS_|LOGS_)CLIENT_KEY].
    #[arg(long = "otlp-client-key", value_name = "PATH")]
    pub otlp_client_key: Option<PathBuf>,

    /// Send GPU incidents (XIDs, clock events, health transitions) as OTLP log records whenever OTLP is on;
    /// --otlp-logs=false turns them off.
    #[arg(long = "otlp-logs", env = "DCGM_OTEL_OTLP_LOGS", value_name = "BOOL",
          default_value = "true", num_args = 0..=1, default_missing_value = "true", require_equals = true,
          value_parser = parse_go_bool)]
    pub otlp_logs: bool,

    /// Export interval in milliseconds [default: the collect interval] [env: OTEL_METRIC_EXPORT_INTERVAL].
    #[arg(long = "otlp-export-interval", value_name = "MS")]
    pub otlp_export_interval: Option<u64>,

    /// cumulative, delta or lowmemory [default: cumulative]
    /// [env: OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE].
    #[arg(long = "otlp-temporality", value_name = "PREFERENCE")]
    pub otlp_temporality: Option<String>,

    /// Export requests kept while the collector is unreachable; the oldest is dropped beyond this.
    #[arg(long = "otlp-max-pending", env = "DCGM_OTEL_OTLP_MAX_PENDING", value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub otlp_max_pending: u64,

    /// direct: build each request straight from the newest snapshot (the only pipeline; the
    /// OpenTelemetry SDK pipeline of 0.1, `sdk`, is no longer built and refused at start).
    #[arg(
        long = "otlp-pipeline",
        env = "DCGM_OTEL_OTLP_PIPELINE",
        value_enum,
        default_value = "direct"
    )]
    pub otlp_pipeline: OtlpPipeline,

    /// per-entity: one OTLP Resource per GPU / MIG instance (and pod); host: one host Resource, entity
    /// identity as data-point attributes.
    #[arg(
        long = "otel-resource-mode",
        env = "DCGM_OTEL_RESOURCE_MODE",
        value_enum,
        default_value = "per-entity"
    )]
    pub otel_resource_mode: OtelResourceMode,

    /// otel: semantic-convention names (hw.id, k8s.pod.name, nvidia.*); dcgm: dcgm-exporter label names
    /// (gpu, UUID, modelName, pod, ...).
    #[arg(
        long = "otel-attribute-style",
        env = "DCGM_OTEL_ATTRIBUTE_STYLE",
        value_enum,
        default_value = "otel"
    )]
    pub otel_attribute_style: OtelAttributeStyle,

    /// dcgm: one metric per counters row, named after the DCGM field; semconv: OpenTelemetry
    /// semantic-convention names (hw.gpu.utilization, hw.energy, ...) where one exists, DCGM names for
    /// the other fields; both: the two sets in one request. semconv and both need
    /// --otel-attribute-style otel.
    #[arg(
        long = "otel-metric-names",
        env = "DCGM_OTEL_METRIC_NAMES",
        value_enum,
        default_value = "dcgm"
    )]
    pub otel_metric_names: MetricNames,

    /// service.name of the pushed resources [default: dcgm-otel] [env: OTEL_SERVICE_NAME].
    #[arg(long = "otel-service-name", value_name = "NAME")]
    pub otel_service_name: Option<String>,
}

impl std::fmt::Debug for OtlpArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpArgs")
            .field("otlp", &self.otlp)
            .field("otlp_endpoint", &self.otlp_endpoint)
            .field("otlp_protocol", &self.otlp_protocol)
            .field(
                "otlp_headers",
                &self.otlp_headers.as_ref().map(|_| "<redacted>"),
            )
            .field("otlp_certificate", &self.otlp_certificate)
            .field("otlp_client_certificate", &self.otlp_client_certificate)
            .field("otlp_client_key", &self.otlp_client_key)
            .finish_non_exhaustive()
    }
}
