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

/// How OTLP resources are cut (see `export::otel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtelResourceMode {
    PerEntity,
    Host,
}

/// Format of the /metrics body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrometheusFormat {
    Dcgm,
    Otel,
}

/// Attribute names on OTLP resources and data points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtelAttributeStyle {
    Otel,
    Dcgm,
}

/// How OTLP requests are built (see `export::otel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtlpPipeline {
    /// Straight from the published snapshot, no OpenTelemetry SDK state.
    Direct,
    /// Through the OpenTelemetry SDK's observable instruments and PeriodicReader.
    Sdk,
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
    #[arg(
        long = "hostname-label",
        env = "DCGM_OTEL_HOSTNAME_LABEL",
        value_enum,
        default_value = "Hostname",
        help_heading = "Metrics"
    )]
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
    #[arg(
        long = "simulate-seed",
        env = "DCGM_OTEL_SIMULATE_SEED",
        value_name = "N",
        help_heading = "Source"
    )]
    pub simulate_seed: Option<u64>,

    /// Remote nv-hostengine: HOST:PORT, [IPv6]:PORT or unix:///path. Unset: embedded host engine.
    #[arg(
        short = 'r',
        long = "remote-hostengine-info",
        env = "DCGM_REMOTE_HOSTENGINE_INFO",
        value_name = "ADDRESS",
        help_heading = "Source"
    )]
    pub remote_hostengine_info: Option<String>,

    /// libdcgm to load instead of searching for libdcgm.so.4, then libdcgm.so.3 (LD_LIBRARY_PATH works too).
    #[arg(
        long = "dcgm-library",
        env = "DCGM_OTEL_LIBDCGM",
        value_name = "PATH",
        help_heading = "Source"
    )]
    pub dcgm_library: Option<PathBuf>,

    // ---------------------------------------------------------------- Server
    /// Listen address for /metrics: HOST:PORT, :PORT or [IPv6]:PORT.
    #[arg(
        short = 'a',
        long = "address",
        env = "DCGM_EXPORTER_LISTEN",
        value_name = "ADDRESS",
        default_value = ":9400",
        help_heading = "Server"
    )]
    pub address: String,

    /// Web config (Prometheus exporter-toolkit YAML): TLS, client certificates, basic auth, extra headers.
    /// Re-read on SIGHUP. Empty: plain HTTP, no auth.
    #[arg(
        long = "web-config-file",
        env = "DCGM_EXPORTER_WEB_CONFIG_FILE",
        value_name = "PATH",
        help_heading = "Server"
    )]
    pub web_config_file: Option<PathBuf>,

    /// Time to read a request's headers (also the keep-alive idle limit and the TLS handshake limit).
    /// Go duration: 10s, 500ms, 1m; 0 = none.
    #[arg(long = "web-read-timeout", env = "DCGM_EXPORTER_WEB_READ_TIMEOUT", value_name = "DURATION",
          default_value = "10s", value_parser = parse_duration, help_heading = "Server")]
    pub web_read_timeout: std::time::Duration,

    /// Time to write one response to a client. Go duration; 0 = none.
    #[arg(long = "web-write-timeout", env = "DCGM_EXPORTER_WEB_WRITE_TIMEOUT", value_name = "DURATION",
          default_value = "30s", value_parser = parse_duration, help_heading = "Server")]
    pub web_write_timeout: std::time::Duration,

    /// Open connections at most; more are answered 503 at once (plain HTTP) or closed (TLS).
    #[arg(long = "web-max-connections", env = "DCGM_OTEL_WEB_MAX_CONNECTIONS", value_name = "N",
          default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=65536),
          help_heading = "Server")]
    pub web_max_connections: u32,

    /// Requests handled at once at most; more are answered 503 at once.
    #[arg(long = "web-max-requests", env = "DCGM_OTEL_WEB_MAX_REQUESTS", value_name = "N",
          default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536),
          help_heading = "Server")]
    pub web_max_requests: u32,

    /// With basic auth on, also require it on /health and /ready (like dcgm-exporter). Kubernetes httpGet
    /// probes cannot send credentials: set false, or use tcpSocket probes.
    #[arg(long = "web-health-auth", env = "DCGM_OTEL_WEB_HEALTH_AUTH", value_name = "BOOL",
          default_value = "true", num_args = 0..=1, default_missing_value = "true", require_equals = true,
          value_parser = parse_go_bool, help_heading = "Server")]
    pub web_health_auth: bool,

    // ---------------------------------------------------------------- Logging
    /// Log format on stderr.
    #[arg(
        long = "log-format",
        env = "DCGM_EXPORTER_LOG_FORMAT",
        value_enum,
        default_value = "text",
        help_heading = "Logging"
    )]
    pub log_format: LogFormat,

    /// Log at debug level.
    #[arg(long = "debug", env = "DCGM_EXPORTER_DEBUG", action = ArgAction::SetTrue, help_heading = "Logging")]
    pub debug: bool,

    // ---- Kubernetes (src/enrich/kubernetes.rs, src/enrich/hpc.rs): pod and HPC job attribution
    /// Attribute GPUs and MIG instances to the pods holding them (kubelet pod-resources API).
    #[arg(short = 'k', long = "kubernetes", env = "DCGM_EXPORTER_KUBERNETES", action = ArgAction::SetTrue,
          help_heading = "Kubernetes")]
    pub kubernetes: bool,

    /// How the device plugin names whole GPUs: uid (GPU-<uuid>) or device-name (nvidia<N>, GKE).
    #[arg(
        long = "kubernetes-gpu-id-type",
        env = "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        value_enum,
        default_value = "uid",
        help_heading = "Kubernetes"
    )]
    pub kubernetes_gpu_id_type: crate::enrich::kubernetes::GpuIdType,

    /// Add the pod_uid label (UIDs read from --kubelet-device-checkpoint).
    #[arg(long = "kubernetes-enable-pod-uid", env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
          action = ArgAction::SetTrue, help_heading = "Kubernetes")]
    pub kubernetes_enable_pod_uid: bool,

    /// The kubelet's device-manager checkpoint, where --kubernetes-enable-pod-uid reads pod UIDs from
    /// (the pod-resources v1 API carries none).
    #[arg(long = "kubelet-device-checkpoint", env = "DCGM_OTEL_KUBELET_DEVICE_CHECKPOINT", value_name = "PATH",
          default_value = crate::enrich::kubernetes::checkpoint::DEFAULT_CHECKPOINT, help_heading = "Kubernetes")]
    pub kubelet_device_checkpoint: PathBuf,

    /// The kubelet's pod-resources socket.
    #[arg(long = "pod-resources-kubelet-socket", env = "DCGM_POD_RESOURCES_KUBELET_SOCKET", value_name = "PATH",
          default_value = crate::enrich::kubernetes::podresources::DEFAULT_SOCKET, help_heading = "Kubernetes")]
    pub pod_resources_kubelet_socket: PathBuf,

    /// Extra extended-resource names that are NVIDIA GPUs (comma list), besides nvidia.com/gpu and
    /// nvidia.com/mig-*.
    #[arg(
        long = "nvidia-resource-names",
        env = "NVIDIA_RESOURCE_NAMES",
        value_name = "NAMES",
        value_delimiter = ',',
        help_heading = "Kubernetes"
    )]
    pub nvidia_resource_names: Vec<String>,

    /// Directory of HPC job files named <gpu> or <gpu>.<GPU_I_ID>, one job id per line (hpc_job label).
    #[arg(
        long = "hpc-job-mapping-dir",
        env = "DCGM_HPC_JOB_MAPPING_DIR",
        value_name = "DIR",
        help_heading = "Kubernetes"
    )]
    pub hpc_job_mapping_dir: Option<PathBuf>,

    // ---- OTLP (src/export/otel/): flags win over the standard OTEL_* variables named in each help line
    /// Push metrics over OTLP; without an endpoint, to http://localhost:4317 (grpc) or :4318 (http/protobuf).
    /// OTLP is also on whenever an endpoint is set.
    #[arg(long = "otlp", env = "DCGM_OTEL_OTLP", action = ArgAction::SetTrue, help_heading = "OTLP")]
    pub otlp: bool,

    /// OTLP endpoint (http:// or https://); for http/protobuf, /v1/metrics is appended
    /// [env: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (used verbatim), OTEL_EXPORTER_OTLP_ENDPOINT].
    #[arg(long = "otlp-endpoint", value_name = "URL", help_heading = "OTLP")]
    pub otlp_endpoint: Option<String>,

    /// grpc or http/protobuf [default: grpc] [env: OTEL_EXPORTER_OTLP_(METRICS_)PROTOCOL].
    #[arg(long = "otlp-protocol", value_name = "PROTOCOL", help_heading = "OTLP")]
    pub otlp_protocol: Option<String>,

    /// Extra request headers / gRPC metadata: k=v,k2=v2 (URL-encoded)
    /// [env: OTEL_EXPORTER_OTLP_(METRICS_)HEADERS].
    #[arg(long = "otlp-headers", value_name = "LIST", help_heading = "OTLP")]
    pub otlp_headers: Option<String>,

    /// Timeout of one export request in milliseconds [default: 10000] [env: OTEL_EXPORTER_OTLP_(METRICS_)TIMEOUT].
    #[arg(long = "otlp-timeout", value_name = "MS", help_heading = "OTLP")]
    pub otlp_timeout: Option<u64>,

    /// gzip or none [default: none] [env: OTEL_EXPORTER_OTLP_(METRICS_)COMPRESSION].
    #[arg(long = "otlp-compression", value_name = "ALGO", help_heading = "OTLP")]
    pub otlp_compression: Option<String>,

    /// PEM CA bundle trusted in addition to the system roots [env: OTEL_EXPORTER_OTLP_(METRICS_)CERTIFICATE].
    #[arg(long = "otlp-certificate", value_name = "PATH", help_heading = "OTLP")]
    pub otlp_certificate: Option<PathBuf>,

    /// PEM client certificate for mTLS [env: OTEL_EXPORTER_OTLP_(METRICS_)CLIENT_CERTIFICATE].
    #[arg(
        long = "otlp-client-certificate",
        value_name = "PATH",
        help_heading = "OTLP"
    )]
    pub otlp_client_certificate: Option<PathBuf>,

    /// PEM private key of the client certificate [env: OTEL_EXPORTER_OTLP_(METRICS_)CLIENT_KEY].
    #[arg(long = "otlp-client-key", value_name = "PATH", help_heading = "OTLP")]
    pub otlp_client_key: Option<PathBuf>,

    /// Export interval in milliseconds [default: the collect interval] [env: OTEL_METRIC_EXPORT_INTERVAL].
    #[arg(
        long = "otlp-export-interval",
        value_name = "MS",
        help_heading = "OTLP"
    )]
    pub otlp_export_interval: Option<u64>,

    /// cumulative, delta or lowmemory [default: cumulative]
    /// [env: OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE].
    #[arg(
        long = "otlp-temporality",
        value_name = "PREFERENCE",
        help_heading = "OTLP"
    )]
    pub otlp_temporality: Option<String>,

    /// Export requests kept while the collector is unreachable; the oldest is dropped beyond this.
    #[arg(long = "otlp-max-pending", env = "DCGM_OTEL_OTLP_MAX_PENDING", value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..=1000), help_heading = "OTLP")]
    pub otlp_max_pending: u64,

    /// direct: build each request straight from the newest snapshot (fast, little memory); sdk: through
    /// the OpenTelemetry SDK's observable instruments (the earlier path; more CPU and memory per series).
    #[arg(
        long = "otlp-pipeline",
        env = "DCGM_OTEL_OTLP_PIPELINE",
        value_enum,
        default_value = "direct",
        help_heading = "OTLP"
    )]
    pub otlp_pipeline: OtlpPipeline,

    /// per-entity: one OTLP Resource per GPU / MIG instance (and pod); host: one host Resource, entity
    /// identity as data-point attributes.
    #[arg(
        long = "otel-resource-mode",
        env = "DCGM_OTEL_RESOURCE_MODE",
        value_enum,
        default_value = "per-entity",
        help_heading = "OTLP"
    )]
    pub otel_resource_mode: OtelResourceMode,

    /// otel: semantic-convention names (hw.id, k8s.pod.name, nvidia.*); dcgm: dcgm-exporter label names
    /// (gpu, UUID, modelName, pod, ...).
    #[arg(
        long = "otel-attribute-style",
        env = "DCGM_OTEL_ATTRIBUTE_STYLE",
        value_enum,
        default_value = "otel",
        help_heading = "OTLP"
    )]
    pub otel_attribute_style: OtelAttributeStyle,

    /// service.name of the pushed resources [default: dcgm-otel] [env: OTEL_SERVICE_NAME].
    #[arg(long = "otel-service-name", value_name = "NAME", help_heading = "OTLP")]
    pub otel_service_name: Option<String>,

    /// /metrics format: dcgm (dcgm-exporter's names and labels) or otel (through the OpenTelemetry
    /// Prometheus bridge: unit suffixes, _total, target_info, as an OTel Collector would write them).
    #[arg(
        long = "prometheus-format",
        env = "DCGM_OTEL_PROMETHEUS_FORMAT",
        value_enum,
        default_value = "dcgm",
        help_heading = "Server"
    )]
    pub prometheus_format: PrometheusFormat,
}

/// dcgm-exporter flags that dcgm-otel accepts so existing command lines and manifests keep starting,
/// but does not implement yet: (long name, short alias, env var, takes a value). Each one given is
/// reported with a warning at start-up.
pub const ACCEPTED_NOT_IMPLEMENTED: &[(&str, Option<char>, &str, bool)] = &[
    (
        "cpu-devices",
        Some('p'),
        "DCGM_EXPORTER_CPU_DEVICES_STR",
        true,
    ),
    (
        "switch-devices",
        Some('s'),
        "DCGM_EXPORTER_OTHER_DEVICES_STR",
        true,
    ),
    (
        "configmap-data",
        Some('m'),
        "DCGM_EXPORTER_CONFIGMAP_DATA",
        true,
    ),
    (
        "kubernetes-enable-pod-labels",
        None,
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        false,
    ),
    (
        "kubernetes-pod-label-allowlist-regex",
        None,
        "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        true,
    ),
    (
        "kubernetes-virtual-gpus",
        None,
        "KUBERNETES_VIRTUAL_GPUS",
        false,
    ),
    (
        "kubernetes-enable-dra",
        None,
        "KUBERNETES_ENABLE_DRA",
        false,
    ),
    ("fake-gpus", None, "DCGM_EXPORTER_USE_FAKE_GPUS", false),
    (
        "xid-count-window-size",
        Some('x'),
        "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
        true,
    ),
    (
        "clock-events-count-window-size",
        None,
        "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
        true,
    ),
    (
        "enable-dcgm-log",
        None,
        "DCGM_EXPORTER_ENABLE_DCGM_LOG",
        false,
    ),
    ("dcgm-log-level", None, "DCGM_EXPORTER_DCGM_LOG_LEVEL", true),
    ("dump-enabled", None, "DCGM_EXPORTER_DUMP_ENABLED", false),
    ("dump-directory", None, "DCGM_EXPORTER_DUMP_DIRECTORY", true),
    ("dump-retention", None, "DCGM_EXPORTER_DUMP_RETENTION", true),
    (
        "dump-compression",
        None,
        "DCGM_EXPORTER_DUMP_COMPRESSION",
        false,
    ),
    (
        "disable-startup-validate",
        None,
        "DISABLE_STARTUP_VALIDATE",
        false,
    ),
    (
        "enable-gpu-bind-unbind-watch",
        None,
        "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",
        false,
    ),
    (
        "gpu-bind-unbind-poll-interval",
        None,
        "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
        true,
    ),
    ("enable-pprof", None, "DCGM_EXPORTER_ENABLE_PPROF", false),
    (
        "web-systemd-socket",
        None,
        "DCGM_EXPORTER_SYSTEMD_SOCKET",
        false,
    ),
    ("config-file", None, "DCGM_EXPORTER_CONFIG_FILE", true),
    (
        "container-labels",
        None,
        "DCGM_EXPORTER_CONTAINER_LABELS",
        false,
    ),
    (
        "container-runtime-socket",
        None,
        "DCGM_CONTAINER_RUNTIME_SOCKET",
        true,
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
    go_booleans(cmd)
}

/// What Go's `strconv.ParseBool` accepts, and so what dcgm-exporter's flags and variables accept.
pub const GO_BOOL_VALUES: [&str; 12] = [
    "1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False",
];

/// Parse a boolean as Go's `strconv.ParseBool` does.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("expected one of {}", GO_BOOL_VALUES.join(" "))),
    }
}

/// Make every on/off flag behave like a Go boolean flag: `--flag`, `--flag=true`, `--flag=false`,
/// `-k=false`, and its variable takes whatever `strconv.ParseBool` takes (`1`, `t`, `TRUE`, `0`, ...).
/// A value needs the `=`: `-k false` leaves `false` as a stray argument, as in Go.
fn go_booleans(cmd: clap::Command) -> clap::Command {
    let ids: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| matches!(a.get_action(), ArgAction::SetTrue))
        .map(|a| a.get_id().clone())
        .collect();
    ids.into_iter().fold(cmd, |cmd, id| {
        cmd.mut_arg(id, |a| {
            let default = match a.get_default_values().first().and_then(|v| v.to_str()) {
                Some("true") => "true",
                _ => "false",
            };
            a.action(ArgAction::Set)
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .default_value(default)
                .value_name("BOOL")
                .hide_default_value(true)
                .hide_possible_values(true)
                .value_parser(clap::builder::ValueParser::new(parse_go_bool))
        })
    })
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

/// Parse the command line (Go-style single-dash long flags included) and the environment.
pub fn parse_args(args: &[OsString]) -> Result<(Cli, clap::ArgMatches), clap::Error> {
    use clap::FromArgMatches;
    let matches = command().try_get_matches_from(normalize_args(args.iter().cloned()))?;
    let cli = Cli::from_arg_matches(&matches)?;
    Ok((cli, matches))
}

/// One line for a command-line error: what is wrong, the flag or variable it came from, a suggestion
/// when clap has one, and "see --help" (never the usage line with all the flags).
pub fn describe_error(error: &clap::Error, args: &[OsString]) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let rendered = error.render().to_string();
    let first = rendered
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid command line");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    if matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        let given_arg = match error.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(a)) => Some(a.as_str()),
            _ => None,
        };
        let given_value = match error.get(ContextKind::InvalidValue) {
            Some(ContextValue::String(v)) => Some(v.as_str()),
            _ => None,
        };
        if let (Some(arg_text), Some(value)) = (given_arg, given_value) {
            if let Some(var) = value_from_environment(arg_text, value, args) {
                let flag = arg_text.split(['[', ' ', '=']).next().unwrap_or(arg_text);
                let reason = line
                    .split_once("': ")
                    .map(|(_, r)| r.to_string())
                    .unwrap_or_default();
                line =
                    format!("invalid value '{value}' in environment variable {var} (flag {flag})");
                if !reason.is_empty() {
                    line.push_str(": ");
                    line.push_str(&reason);
                }
            }
        }
    }
    let suggestion = match error.get(ContextKind::SuggestedArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(list)) => list.first().cloned(),
        _ => None,
    };
    if let Some(tip) = suggestion {
        line.push_str(&format!("; did you mean '{tip}'?"));
    }
    line.push_str("; see --help");
    line
}

/// When the bad value came from an environment variable (the flag is not on the command line and its
/// variable holds that value), the variable's name.
fn value_from_environment(arg_text: &str, value: &str, args: &[OsString]) -> Option<String> {
    let flag = arg_text.split(['[', ' ', '=']).next()?;
    let cmd = command();
    let arg = cmd.get_arguments().find(|a| {
        flag.strip_prefix("--")
            .is_some_and(|l| a.get_long() == Some(l))
            || flag
                .strip_prefix('-')
                .and_then(|s| s.chars().next())
                .is_some_and(|c| !flag.starts_with("--") && a.get_short() == Some(c))
    })?;
    let var = arg.get_env()?.to_str()?.to_string();
    if std::env::var(&var).ok().as_deref() != Some(value) {
        return None;
    }
    let normalized = normalize_args(args.iter().cloned());
    let on_command_line = normalized.iter().skip(1).any(|a| {
        let Some(a) = a.to_str() else { return false };
        arg.get_long()
            .is_some_and(|l| a == format!("--{l}") || a.starts_with(&format!("--{l}=")))
            || arg.get_short().is_some_and(|c| {
                !a.starts_with("--") && a.starts_with('-') && a[1..].starts_with(c)
            })
    });
    (!on_command_line).then_some(var)
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    super::duration::parse_go_duration(s)
}

fn parse_devices(s: &str) -> Result<super::devices::DeviceSelection, String> {
    super::devices::parse(s).map_err(|e| e.to_string())
}

/// Rewrite Go-style single-dash long flags (`-collectors x`, `-rbmn`) into clap's `--long` form.
/// Only names that are real long flags (or `rbmn`) are rewritten; short flags are left alone.
pub fn normalize_args<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    let cmd = command();
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
        if let Some(body) = s
            .strip_prefix('-')
            .filter(|b| !b.starts_with('-') && b.len() > 1)
        {
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let long = if name == "rbmn" {
                Some("replace-blanks-in-model-name")
            } else {
                longs
                    .iter()
                    .find(|l| l.as_str() == name)
                    .map(String::as_str)
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
            out.push(OsString::from(s.replacen(
                "--rbmn",
                "--replace-blanks-in-model-name",
                1,
            )));
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
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse_args(&args).map(|(cli, _)| cli)
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
        let c = parse(&[
            "dcgm-otel",
            "-collectors",
            "/x.csv",
            "-rbmn",
            "-address=:9500",
        ])
        .unwrap();
        assert_eq!(c.collectors, PathBuf::from("/x.csv"));
        assert!(c.replace_blanks_in_model_name);
        assert_eq!(c.address, ":9500");
        let c = parse(&["dcgm-otel", "-f", "/y.csv", "-c", "1000"]).unwrap();
        assert_eq!(c.collectors, PathBuf::from("/y.csv"));
        assert_eq!(c.collect_interval, 1000);
    }

    #[test]
    fn simulate_takes_an_optional_scenario() {
        assert_eq!(
            parse(&["x", "--simulate"]).unwrap().simulate.as_deref(),
            Some("default")
        );
        assert_eq!(
            parse(&["x", "--simulate=large"])
                .unwrap()
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
