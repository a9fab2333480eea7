//! OTLP push: one `ExportMetricsServiceRequest` per export, with one Resource per GPU / MIG instance
//! (and per pod or job when attributed), to any OpenTelemetry collector or vendor.
//!
//! In data-flow order:
//! - [`request`]: the newest snapshot → the request, with per-entity resources cached between
//!   exports; no OpenTelemetry SDK state. [`schedule`]: its export thread, woken by each publication
//!   (every collection sent once when the export interval is the collect interval).
//! - [`queue`]: the bounded queue of encoded requests (oldest dropped, counted) and the sender loop
//!   with retries, backoff and `Retry-After`; the export self-metrics.
//! - [`transport`]: gRPC (tonic) and HTTP/protobuf (hyper + rustls), TLS and mTLS, gzip.
//! - [`args`] and [`settings`]: the `--otlp-*` flags and the `OTEL_EXPORTER_OTLP_*` variables, per
//!   signal.
//! - [`distributions`]: the sampled fields' exponential histograms, appended to each entity's Resource.
//! - [`logs`]: the second signal, GPU incidents as log records ([`log_records`], [`severity`]), fed
//!   every snapshot by the collector thread and sent through its own
//!   queue and sender.
//!
//! Start-up is two steps: [`OtlpPlan::resolve`] checks every setting without side effects (a bad one is
//! exit code 2 before anything starts), [`OtlpPlan::start`] starts the sender and the producer. The
//! export and sender threads never touch the collector thread or the :9400 server.

pub mod args;
pub mod distributions;
pub mod log_records;
#[cfg(test)]
mod log_records_tests;
pub mod logs;
#[cfg(test)]
mod process_points_tests;
pub mod proto;
pub mod queue;
pub mod request;
pub mod schedule;
pub mod settings;
pub mod severity;
pub mod transport;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::Temporality;

pub use args::{OtlpArgs, OtlpPipeline};
pub use settings::{OtlpConfig, Protocol, Signal};

use super::naming::{self, Naming, ResourceSplit};
use super::semconv::MetricNames;
use super::OtelContext;
use crate::counters::CounterSet;
use crate::export::SnapshotConsumer;
use crate::snapshot::SnapshotStore;
use crate::telemetry::self_metrics::SelfMetrics;

/// Why OTLP export could not start.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error(transparent)]
    Config(#[from] settings::OtlpConfigError),
    #[error(transparent)]
    Resource(#[from] naming::ResourceAttributesError),
    #[error(transparent)]
    Transport(#[from] transport::TransportError),
    #[error("--otel-metric-names {names}: {reason}")]
    MetricNames {
        names: &'static str,
        reason: &'static str,
    },
    #[error("--otlp-pipeline sdk: the OpenTelemetry SDK pipeline is no longer built: it kept the Resource model of dcgm-otel 0.1, which counts a shared device's and a MIG GPU's measurements more than once; drop the flag (the direct pipeline is the only one)")]
    SdkPipelineRemoved,
    #[error("cannot start the OTLP sender thread: {0}")]
    Thread(String),
}

impl OtelError {
    /// Bad flags, variables or files (exit code 2) rather than an environment failure.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, OtelError::Thread(_))
    }
}

/// What the requests look like, resolved and checked: the base Resource, the naming and Resource
/// split, the metric names, the counters the instruments are declared from, and the incident log
/// records' builder. Shared by the push ([`OtlpPlan`]) and the engine library
/// ([`crate::engine::Engine`]): both build their requests with [`OtlpFormat::metrics_builder`].
pub struct OtlpFormat {
    base: Vec<KeyValue>,
    naming: Naming,
    split: ResourceSplit,
    counters: Arc<CounterSet>,
    names: MetricNames,
    describe: String,
}

impl OtlpFormat {
    /// The format the `--otel-*` flags (and `OTEL_RESOURCE_ATTRIBUTES` / `OTEL_SERVICE_NAME` through
    /// `env`) ask for.
    pub fn resolve(
        args: &OtlpArgs,
        ctx: &OtelContext<'_>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OtlpFormat, OtelError> {
        if let Some(e) = metric_names_conflict(args) {
            return Err(e);
        }
        let (base, naming) = naming::base_and_naming(
            args.otel_attribute_style,
            args.otel_service_name.as_deref(),
            ctx,
            env,
        )?;
        let naming = naming.with_hw_attributes(args.otel_metric_names.semconv());
        let split = naming.resource_split(args.otel_resource_mode);
        let describe = format!(
            "resource_mode={:?} attribute_style={:?} metric_names={:?}",
            args.otel_resource_mode, args.otel_attribute_style, args.otel_metric_names
        );
        Ok(OtlpFormat {
            base,
            naming,
            split,
            counters: Arc::new(ctx.counters.clone()),
            names: args.otel_metric_names,
            describe,
        })
    }

    /// The metrics request builder; cumulative sums start at `start`.
    pub fn metrics_builder(
        &self,
        temporality: Temporality,
        start: std::time::SystemTime,
    ) -> request::DirectBuilder {
        request::DirectBuilder::new(
            self.naming.clone(),
            self.split.clone(),
            &self.base,
            self.counters.clone(),
            temporality,
            start,
        )
        .with_metric_names(self.names)
    }

    /// The incident log records' builder: the records' Resources are the metrics' ones.
    pub fn records_builder(&self) -> log_records::RecordBuilder {
        log_records::RecordBuilder::new(self.naming.clone(), self.split.clone(), &self.base)
    }
}

/// OTLP push, resolved and checked, not started.
pub struct OtlpPlan {
    settings: OtlpConfig,
    format: OtlpFormat,
    /// The collect interval (`-c`): which collections an export interval sends ([`schedule`]).
    collect_interval: Duration,
    /// The incident log records' settings (`None` with `--otlp-logs=false`, or when no endpoint for
    /// them is configured).
    logs: Option<OtlpConfig>,
    /// Log records are on but have no endpoint of their own (only the metrics variable is set): said
    /// once at start.
    logs_unrouted: bool,
}

/// Why `--otel-metric-names` cannot be used with the other settings (`None`: it can).
fn metric_names_conflict(args: &OtlpArgs) -> Option<OtelError> {
    let names = match args.otel_metric_names {
        MetricNames::Dcgm => return None,
        MetricNames::Semconv => "semconv",
        MetricNames::Both => "both",
    };
    let reason = if args.otel_attribute_style != naming::OtelAttributeStyle::Otel {
        "semantic-convention names need semantic-convention attributes (hw.id); use --otel-attribute-style otel (the default)"
    } else {
        return None;
    };
    Some(OtelError::MetricNames { names, reason })
}

/// `--otlp-temporality` (cumulative by default), for the engine library, which has no endpoint.
pub fn temporality(args: &OtlpArgs) -> Result<Temporality, OtelError> {
    Ok(settings::temporality(args, &|_| None)?)
}

impl OtlpPlan {
    /// Whether incident log records are sent (the source must then read every incident, whatever
    /// the counters CSV lists).
    pub fn sends_incident_logs(&self) -> bool {
        self.logs.is_some()
    }

    /// The plan, or `None` when OTLP is off (no `--otlp` and no endpoint). `env` looks up variables.
    pub fn resolve(
        args: &OtlpArgs,
        ctx: &OtelContext<'_>,
        collect_interval: Duration,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<OtlpPlan>, OtelError> {
        // Refused whether OTLP is on or not: a configuration naming it expects what it no longer does.
        if args.otlp_pipeline == OtlpPipeline::Sdk {
            return Err(OtelError::SdkPipelineRemoved);
        }
        let Some(settings) = settings::resolve(args, collect_interval, env)? else {
            return Ok(None);
        };
        let format = OtlpFormat::resolve(args, ctx, env)?;
        let logs = if args.otlp_logs {
            settings::resolve_signal(args, Signal::Logs, collect_interval, env)?
        } else {
            None
        };
        let logs_unrouted = args.otlp_logs && logs.is_none();
        Ok(Some(OtlpPlan {
            settings,
            format,
            collect_interval,
            logs,
            logs_unrouted,
        }))
    }

    /// Start the sender and the producer over the published snapshots.
    pub fn start(
        self,
        store: Arc<SnapshotStore>,
        self_metrics: &SelfMetrics,
    ) -> Result<OtelExport, OtelError> {
        let cfg = self.settings;
        let logs = match self.logs {
            Some(logs_cfg) => Some(logs::start(
                &logs_cfg,
                self.format.records_builder(),
                self_metrics,
            )?),
            None => None,
        };
        if self.logs_unrouted {
            tracing::info!("OTLP incident log records are not sent: only OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set; set OTEL_EXPORTER_OTLP_LOGS_ENDPOINT (or OTEL_EXPORTER_OTLP_ENDPOINT / --otlp-endpoint) to send them");
        }
        let protocol = match cfg.protocol {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        };
        let metrics = Arc::new(queue::ExportMetrics::new(self_metrics, protocol));
        let queue = queue::Queue::new(cfg.max_pending, metrics.clone());
        queue.cap_retry_delay(cfg.interval);
        let done = spawn_sender(&cfg, queue.clone(), metrics.clone())?;
        let builder = self
            .format
            .metrics_builder(cfg.temporality, std::time::SystemTime::now());
        let n = builder.instrument_count();
        let intervals = (cfg.interval, self.collect_interval);
        let (producer, trigger) =
            match schedule::spawn(builder, store, queue.clone(), metrics, intervals) {
                Ok(e) => e,
                Err(e) => {
                    queue.close();
                    return Err(OtelError::Thread(e.to_string()));
                }
            };
        tracing::info!(
            endpoint = %cfg.endpoint,
            protocol,
            interval_ms = cfg.interval.as_millis() as u64,
            instruments = n,
            settings = %self.format.describe,
            tls = cfg.is_tls(),
            gzip = cfg.gzip,
            "OTLP push enabled"
        );
        Ok(OtelExport {
            producer,
            trigger: Arc::new(trigger),
            logs,
            queue,
            done,
            drain_timeout: cfg.timeout.min(Duration::from_secs(5)),
        })
    }
}

/// The sender thread: builds the transport inside its own runtime and delivers the queue; reports
/// whether the transport could be built. The returned channel closes when the sender has finished.
fn spawn_sender(
    cfg: &OtlpConfig,
    queue: Arc<queue::Queue>,
    metrics: Arc<queue::ExportMetrics>,
) -> Result<mpsc::Receiver<()>, OtelError> {
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), transport::TransportError>>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let cfg = cfg.clone();
    std::thread::Builder::new()
        .name("otlp-sender".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(transport::TransportError(format!("runtime: {e}"))));
                    return;
                }
            };
            let transport = match rt.block_on(async { transport::Transport::new(&cfg) }) {
                Ok(t) => t,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            rt.block_on(queue::run_sender(
                transport,
                queue,
                metrics,
                cfg.endpoint.clone(),
            ));
            let _ = done_tx.send(());
        })
        .map_err(|e| OtelError::Thread(e.to_string()))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(done_rx),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(OtelError::Thread(
            "the sender thread ended during start-up".into(),
        )),
    }
}

/// A running OTLP export; [`OtelExport::shutdown`] sends the last collection and stops.
pub struct OtelExport {
    producer: schedule::DirectExport,
    trigger: Arc<schedule::PublicationTrigger>,
    logs: Option<logs::LogsExport>,
    queue: Arc<queue::Queue>,
    done: mpsc::Receiver<()>,
    drain_timeout: Duration,
}

impl OtelExport {
    /// What tells the export thread of each publication, for the collector thread's consumers.
    pub fn publication_consumer(&self) -> Arc<dyn SnapshotConsumer> {
        self.trigger.clone()
    }

    /// The incident log exporter, for the collector thread's consumers (`None` with
    /// `--otlp-logs=false`).
    pub fn incident_consumer(&self) -> Option<Arc<dyn SnapshotConsumer>> {
        self.logs.as_ref().map(logs::LogsExport::consumer)
    }

    /// Export the last collection, then give the sender up to the request timeout (at most 5 s) to
    /// deliver what is pending. Blocks; call it outside any async runtime.
    pub fn shutdown(self) {
        self.producer.shutdown();
        self.queue.close();
        if self.done.recv_timeout(self.drain_timeout).is_err() {
            tracing::warn!("OTLP sender did not finish within the shutdown timeout; pending exports are dropped");
        }
        if let Some(logs) = self.logs {
            logs.shutdown();
        }
    }
}
