//! The OpenTelemetry SDK path: one observable instrument per counters-CSV row ([`instruments`]) over
//! the published snapshots. It serves two uses:
//! - `--otlp-pipeline sdk`: the SDK's `PeriodicReader` collects the instruments, [`convert`](mod@convert) regroups
//!   the collection into one OTLP request with one Resource per entity identity, and [`QueueExporter`]
//!   hands it to the same queue and sender as the default direct pipeline. Kept for comparison: it
//!   sends the same request (tests/otlp_e2e.rs runs every case through both) at about 10× the CPU and
//!   3× the memory (docs/performance.md).
//! - `--prometheus-format otel` ([`prometheus_bridge`]): the same instruments through
//!   `opentelemetry-prometheus`.
//!
//! Each instrument keeps the SDK's default cardinality limit of 2000 attribute sets; beyond it the
//! SDK folds series into `otel.metric.overflow=true`. The SDK preallocates its tracker map to the
//! limit, so a larger limit costs memory on every instrument.

pub mod convert;
pub mod instruments;
pub mod prometheus_bridge;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;
use prost::Message;

use self::convert::convert;
use self::instruments::SnapshotView;
use super::naming::{Naming, ResourceSplit};
use super::otlp::queue::{ExportMetrics, Queue};
use crate::counters::CounterSet;
use crate::snapshot::SnapshotStore;

/// Start the SDK pipeline: instruments over `store`, collected every `interval` into `queue`.
/// Returns the provider (shut it down to export the last collection) and the number of instruments.
#[allow(clippy::too_many_arguments)]
pub fn start(
    store: Arc<SnapshotStore>,
    naming: Naming,
    split: ResourceSplit,
    base: Vec<KeyValue>,
    counters: &CounterSet,
    queue: Arc<Queue>,
    metrics: Arc<ExportMetrics>,
    temporality: Temporality,
    interval: Duration,
) -> (SdkMeterProvider, usize) {
    let view = SnapshotView::new(store, naming);
    let exporter = QueueExporter {
        view: view.clone(),
        split,
        queue,
        temporality,
        metrics,
        shut_down: AtomicBool::new(false),
    };
    let reader = PeriodicReader::builder(exporter)
        .with_interval(interval)
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
    let n = instruments::register(&meter, counters, &view);
    (provider, n)
}

/// The SDK-facing exporter: convert, encode, enqueue. Never blocks on the network.
pub struct QueueExporter {
    pub view: Arc<SnapshotView>,
    pub split: ResourceSplit,
    pub queue: Arc<Queue>,
    pub temporality: Temporality,
    pub metrics: Arc<ExportMetrics>,
    pub shut_down: AtomicBool,
}

impl QueueExporter {
    fn export_now(&self, rm: &ResourceMetrics) {
        // The collection is over: the next one observes the newest snapshot.
        if let Some(collect) = self.view.unpin() {
            self.metrics.collect_seconds.set(collect.as_secs_f64());
        }
        let started = Instant::now();
        // A reloaded counter set: instruments for its new rows, observed from the next collection on
        // (registering here, between collections, cannot deadlock on the SDK's registry lock).
        if let Some(latest) = self.view.latest() {
            self.view.register_new(&latest.counters);
        }
        let converted = convert(rm, &self.split);
        if converted.data_points == 0 {
            return;
        }
        let body = Bytes::from(converted.request.encode_to_vec());
        self.metrics
            .encode_seconds
            .set(started.elapsed().as_secs_f64());
        self.metrics.request_bytes.set(body.len() as f64);
        self.metrics.data_points.set(converted.data_points as f64);
        self.metrics
            .resources
            .set(converted.request.resource_metrics.len() as f64);
        self.queue.push(body);
    }
}

impl std::fmt::Debug for QueueExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueExporter")
    }
}

impl PushMetricExporter for QueueExporter {
    fn export(
        &self,
        metrics: &ResourceMetrics,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        if !self.shut_down.load(Ordering::Acquire) {
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.export_now(metrics)));
            if r.is_err() {
                tracing::error!("OTLP conversion panicked; this export is skipped");
            }
        }
        std::future::ready(Ok(()))
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.shut_down.store(true, Ordering::Release);
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        self.temporality
    }
}
