//! OpenTelemetry-native export: OTel instruments over the published snapshots, pushed over OTLP with
//! one Resource per GPU / MIG instance (and pod), in ONE request per export.
//!
//! Two pipelines build the requests (`--otlp-pipeline`):
//! - `direct` (the default, [`direct`]): each export builds the request straight from the newest
//!   snapshot, with per-entity resources cached between exports; no OpenTelemetry SDK state at all
//!   (about 10× less CPU per export and about 35 MB less memory at 10,000 series, docs/performance.md).
//! - `sdk`: OTel observable instruments collected by the SDK's `PeriodicReader`, then regrouped; kept
//!   for comparison and for what only the SDK does (its cardinality limit, its delta bookkeeping).
//!
//! Both send the same metrics, types, units, attributes and resources (tests/otlp_e2e.rs runs every
//! case through both) through the same queue and sender.
//!
//! The pieces, in data-flow order:
//! - [`direct`]: snapshot → one `ExportMetricsServiceRequest`, on its own export thread.
//! - [`instruments`]: one observable instrument per counters-CSV row; callbacks read the newest
//!   snapshot (pinned for the whole collection), never a source.
//! - [`resource`]: attribute names (semantic conventions or dcgm-exporter labels), per-entity attribute
//!   sets, the host base resource and `OTEL_RESOURCE_ATTRIBUTES` precedence.
//! - [`convert`]: SDK collection → one `ExportMetricsServiceRequest`, regrouped by entity identity.
//! - [`otlp`]: the SDK push exporter (convert, encode, bounded queue) and the sender with retries.
//! - [`transport`]: gRPC (tonic) and HTTP/protobuf (hyper + rustls), TLS and mTLS.
//! - [`config`]: `--otlp-*` flags and `OTEL_EXPORTER_OTLP_*` variables.
//! - [`units`]: DCGM unit / help text → UCUM.
//!
//! In the `sdk` pipeline, each instrument keeps the SDK's default cardinality limit of 2000 attribute sets (entities × pods ×
//! jobs); beyond it the SDK folds series into `otel.metric.overflow=true`. The SDK preallocates its
//! tracker map to the limit, so a larger limit costs memory on every instrument (100,000 cost about
//! 100 MB on the `large` scenario).
//!
//! The direct export thread (or the SDK's `PeriodicReader` thread) runs at the export interval; the sender
//! runs on another thread with its own runtime. None touches the collector thread or the :9400 server.

pub mod config;
pub mod convert;
pub mod direct;
pub mod instruments;
pub mod otlp;
pub mod prom_bridge;
pub mod resource;
pub mod transport;
pub mod units;

use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use crate::config::cli::{OtelResourceMode, OtlpPipeline};
use crate::config::counters::CounterSet;
use crate::config::{Cli, LabelStyle};
use crate::export::self_metrics::SelfMetrics;
use crate::pipeline::SnapshotStore;

pub use config::{OtlpConfig, Protocol};

/// Why OTLP export could not start.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error("{0}")]
    Config(#[from] config::OtlpConfigError),
    #[error("{0}")]
    Resource(#[from] resource::ResourceAttributesError),
    #[error("{0}")]
    Transport(#[from] transport::TransportError),
    #[error("cannot start the OTLP sender thread: {0}")]
    Thread(String),
}

impl OtelError {
    /// Bad flags, variables or files (exit code 2) rather than an environment failure.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, OtelError::Thread(_))
    }
}

/// What `start` needs from the rest of start-up.
pub struct OtelInputs<'a> {
    pub cli: &'a Cli,
    pub counters: &'a CounterSet,
    pub store: Arc<SnapshotStore>,
    pub self_metrics: Arc<SelfMetrics>,
    pub collect_interval: Duration,
    /// The host label value (`None` with `--no-hostname`).
    pub hostname: Option<&'a str>,
    pub node_name: Option<&'a str>,
}

/// What produces the requests.
enum Producer {
    Direct(direct::DirectExport),
    Sdk(SdkMeterProvider),
}

/// A running OTLP export; [`OtelExport::shutdown`] sends the last collection and stops.
pub struct OtelExport {
    producer: Producer,
    queue: Arc<otlp::Queue>,
    done: mpsc::Receiver<()>,
    drain_timeout: Duration,
}

/// The host base resource (flags, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`) and the attribute
/// naming for entities: what both the OTLP push and the `--prometheus-format otel` bridge start from.
fn base_and_naming(
    inputs: &OtelInputs<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<opentelemetry::KeyValue>, resource::Naming), OtelError> {
    let label_style = LabelStyle::from_cli(inputs.cli);
    let base = resource::base_resource(
        &resource::BaseResourceInput {
            style: inputs.cli.otel_attribute_style,
            hostname: inputs.hostname,
            host_label: label_style.hostname_label.as_str(),
            node_name: inputs.node_name,
            service_name_flag: inputs.cli.otel_service_name.as_deref(),
        },
        env,
    )?;
    let naming = resource::Naming::new(
        inputs.cli.otel_attribute_style,
        label_style,
        inputs.counters,
    );
    Ok((base, naming))
}

/// Start OTLP export when configured; `Ok(None)` when OTLP is off.
pub fn start(inputs: OtelInputs<'_>) -> Result<Option<OtelExport>, OtelError> {
    let env = |k: &str| std::env::var(k).ok();
    let Some(cfg) = config::resolve(inputs.cli, inputs.collect_interval, &env)? else {
        return Ok(None);
    };
    let (base, naming) = base_and_naming(&inputs, &env)?;
    let resource_keys = match inputs.cli.otel_resource_mode {
        OtelResourceMode::PerEntity => naming.resource_keys(),
        OtelResourceMode::Host => Default::default(),
    };
    let protocol = match cfg.protocol {
        Protocol::Grpc => "grpc",
        Protocol::HttpProtobuf => "http/protobuf",
    };
    let metrics = Arc::new(otlp::ExportMetrics::new(&inputs.self_metrics, protocol));
    let queue = otlp::Queue::new(cfg.max_pending, metrics.clone());

    // Sender thread: builds the transport inside its own runtime, reports whether that worked.
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), transport::TransportError>>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    {
        let cfg = cfg.clone();
        let queue = queue.clone();
        let metrics = metrics.clone();
        std::thread::Builder::new()
            .name("otlp-sender".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ =
                            ready_tx.send(Err(transport::TransportError(format!("runtime: {e}"))));
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
                rt.block_on(otlp::run_sender(
                    transport,
                    queue,
                    metrics,
                    cfg.endpoint.clone(),
                ));
                let _ = done_tx.send(());
            })
            .map_err(|e| OtelError::Thread(e.to_string()))?;
    }
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            return Err(OtelError::Thread(
                "the sender thread ended during start-up".into(),
            ))
        }
    }

    let pipeline = inputs.cli.otlp_pipeline;
    let (producer, n) = match pipeline {
        OtlpPipeline::Direct => {
            let counters = Arc::new(inputs.counters.clone());
            let builder = direct::DirectBuilder::new(
                naming,
                resource_keys,
                &base,
                counters.clone(),
                cfg.temporality,
                std::time::SystemTime::now(),
            );
            let n = builder.instrument_count();
            let export = direct::spawn(builder, inputs.store, queue.clone(), metrics, cfg.interval)
                .map_err(|e| OtelError::Thread(e.to_string()));
            let export = match export {
                Ok(e) => e,
                Err(e) => {
                    queue.close();
                    return Err(e);
                }
            };
            (Producer::Direct(export), n)
        }
        OtlpPipeline::Sdk => {
            let view = instruments::SnapshotView::new(inputs.store, naming);
            let exporter = otlp::QueueExporter {
                view: view.clone(),
                resource_keys,
                queue: queue.clone(),
                temporality: cfg.temporality,
                metrics,
                shut_down: AtomicBool::new(false),
            };
            let reader = PeriodicReader::builder(exporter)
                .with_interval(cfg.interval)
                .build();
            let provider = SdkMeterProvider::builder()
                .with_resource(Resource::builder_empty().with_attributes(base).build())
                .with_reader(reader)
                .build();
            let meter = provider.meter_with_scope(
                InstrumentationScope::builder("dcgm-otel")
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build(),
            );
            let n = instruments::register(&meter, inputs.counters, &view);
            (Producer::Sdk(provider), n)
        }
    };
    tracing::info!(
        endpoint = %cfg.endpoint,
        protocol,
        pipeline = ?pipeline,
        interval_ms = cfg.interval.as_millis() as u64,
        instruments = n,
        resource_mode = ?inputs.cli.otel_resource_mode,
        attribute_style = ?inputs.cli.otel_attribute_style,
        tls = cfg.is_tls(),
        gzip = cfg.gzip,
        "OTLP push enabled"
    );
    Ok(Some(OtelExport {
        producer,
        queue,
        done: done_rx,
        drain_timeout: cfg.timeout.min(Duration::from_secs(5)),
    }))
}

/// The `--prometheus-format otel` renderer, publishing into `body` (the cell the HTTP server reads).
pub fn prometheus_bridge(
    inputs: &OtelInputs<'_>,
    body: Arc<arc_swap::ArcSwap<crate::export::prometheus::RenderedBody>>,
) -> Result<Arc<prom_bridge::OtelPrometheus>, OtelError> {
    let env = |k: &str| std::env::var(k).ok();
    let (base, naming) = base_and_naming(inputs, &env)?;
    let bridge = prom_bridge::OtelPrometheus::new(
        inputs.counters,
        naming,
        base,
        body,
        (!inputs.cli.no_self_metrics).then(|| inputs.self_metrics.clone()),
    )
    .map_err(|e| OtelError::Thread(e.to_string()))?;
    Ok(Arc::new(bridge))
}

impl OtelExport {
    /// Export the last collection, then give the sender up to the request timeout (at most 5 s) to
    /// deliver what is pending. Blocks; call it outside any async runtime.
    pub fn shutdown(self) {
        match self.producer {
            Producer::Direct(d) => d.shutdown(),
            Producer::Sdk(provider) => {
                if let Err(e) = provider.shutdown() {
                    tracing::debug!(error = %e, "OTel meter provider shutdown");
                }
            }
        }
        self.queue.close();
        if self.done.recv_timeout(self.drain_timeout).is_err() {
            tracing::warn!("OTLP sender did not finish within the shutdown timeout; pending exports are dropped");
        }
    }
}
