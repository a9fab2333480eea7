//! `--prometheus-format otel`: :9400 served through the OpenTelemetry Prometheus bridge
//! (`opentelemetry-prometheus` + `prometheus::TextEncoder`), so the names are those an OpenTelemetry
//! Collector's Prometheus exporter would write for the same instruments: unit suffixes (`_watts`,
//! `_celsius`, `_bytes`, ...), `_total` on counters, `otel_scope_*` labels and a `target_info` series
//! with the resource attributes. Entity identity is on the samples (one Prometheus target cannot carry
//! several resources), with the names of `--otel-attribute-style` sanitized (`hw.id` → `hw_id`).
//!
//! It replaces the dcgm-exporter renderer as the snapshot consumer: after each publication, on the
//! collector thread, it gathers the bridge's registry (running the same instruments as the OTLP path
//! over that snapshot), encodes text, appends the self-metrics and publishes a [`RenderedBody`] into
//! the cell the HTTP server already reads — the server code is unchanged. The default stays the
//! dcgm-exporter format, which is exact and about 35 times cheaper (see the reference notes).

use std::io::Write as _;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::Resource;
use prometheus::Encoder as _;

use super::instruments::{register, SnapshotView};
use crate::counters::CounterSet;
use crate::export::otel::naming::{self, Naming};
use crate::export::otel::otlp::OtlpArgs;
use crate::export::otel::OtelContext;
use crate::export::prometheus::RenderedBody;
use crate::export::SnapshotConsumer;
use crate::snapshot::Snapshot;
use crate::snapshot::SnapshotStore;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// The bridge could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// `OTEL_RESOURCE_ATTRIBUTES` cannot be read (bad input).
    #[error(transparent)]
    Resource(#[from] naming::ResourceAttributesError),
    /// The OpenTelemetry Prometheus exporter could not be built.
    #[error("OpenTelemetry Prometheus bridge: {0}")]
    Build(String),
}

impl BridgeError {
    /// Bad input (exit code 2) rather than an internal failure (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, BridgeError::Resource(_))
    }
}

/// Renders /metrics bodies through the OpenTelemetry Prometheus bridge.
pub struct OtelPrometheus {
    provider: SdkMeterProvider,
    registry: prometheus::Registry,
    store: Arc<SnapshotStore>,
    view: Arc<SnapshotView>,
    body: Arc<ArcSwap<RenderedBody>>,
    self_metrics: Option<Arc<SelfMetrics>>,
    render_seconds: Option<Arc<Metric>>,
    /// The renderer's `dcgm_otel_exposition_bytes` and `dcgm_otel_series` (same names, same handles).
    body_bytes: Option<Arc<Metric>>,
    series_gauge: Option<Arc<Metric>>,
}

impl OtelPrometheus {
    /// The bridge for the OTLP naming flags (`--otel-attribute-style`, `--otel-service-name`),
    /// publishing into `body`.
    pub fn from_args(
        args: &OtlpArgs,
        ctx: &OtelContext<'_>,
        env: &dyn Fn(&str) -> Option<String>,
        body: Arc<ArcSwap<RenderedBody>>,
        self_metrics: Option<Arc<SelfMetrics>>,
    ) -> Result<OtelPrometheus, BridgeError> {
        let (base, naming) = naming::base_and_naming(
            args.otel_attribute_style,
            args.otel_service_name.as_deref(),
            ctx,
            env,
        )?;
        OtelPrometheus::new(ctx.counters, naming, base, body, self_metrics)
    }

    /// `body`: the cell the HTTP server reads; `resource`: the base resource (target_info).
    pub fn new(
        counters: &CounterSet,
        naming: Naming,
        resource: Vec<KeyValue>,
        body: Arc<ArcSwap<RenderedBody>>,
        self_metrics: Option<Arc<SelfMetrics>>,
    ) -> Result<OtelPrometheus, BridgeError> {
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .map_err(|e| BridgeError::Build(e.to_string()))?;
        let provider = SdkMeterProvider::builder()
            .with_resource(Resource::builder_empty().with_attributes(resource).build())
            .with_reader(exporter)
            .build();
        let store = SnapshotStore::new();
        let view = SnapshotView::new(store.clone(), naming);
        let meter = provider.meter_with_scope(
            InstrumentationScope::builder("dcgm-otel")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        register(&meter, counters, &view);
        let render_seconds = self_metrics.as_ref().map(|m| {
            m.gauge(
                "dcgm_otel_render_duration_seconds",
                "Time spent rendering the last /metrics body.",
                &[],
            )
        });
        let body_bytes = self_metrics.as_ref().map(|m| {
            m.gauge(
                "dcgm_otel_exposition_bytes",
                "Size of the previous /metrics body (uncompressed), in bytes.",
                &[],
            )
        });
        let series_gauge = self_metrics.as_ref().map(|m| {
            m.gauge(
                "dcgm_otel_series",
                "GPU series in the previous /metrics body.",
                &[],
            )
        });
        Ok(OtelPrometheus {
            body_bytes,
            series_gauge,
            provider,
            registry,
            store,
            view,
            body,
            self_metrics,
            render_seconds,
        })
    }

    /// Render the snapshot and publish the body.
    pub fn publish(&self, snap: &Arc<Snapshot>) {
        let started = Instant::now();
        // A reloaded counter set: instruments for its new rows, before the collection below.
        self.view.register_new(&snap.counters);
        self.store.publish(snap.clone());
        let families =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.registry.gather()));
        let _ = self.view.unpin();
        let families = match families {
            Ok(f) => f,
            Err(_) => {
                tracing::error!(
                    "OTel Prometheus bridge panicked while gathering; body not updated"
                );
                return;
            }
        };
        let series = families.iter().map(|f| f.get_metric().len()).sum();
        let mut buf = Vec::with_capacity(self.body.load().text.len() + 4096);
        if let Err(e) = prometheus::TextEncoder::new().encode(&families, &mut buf) {
            tracing::error!(error = %e, "OTel Prometheus bridge could not encode; body not updated");
            return;
        }
        if let Some(g) = &self.series_gauge {
            g.set(series as f64);
        }
        let mut text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(m) = &self.self_metrics {
            m.render(&mut text);
        }
        let gzip = {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(text.len() / 4),
                flate2::Compression::fast(),
            );
            match enc.write_all(text.as_bytes()).and_then(|_| enc.finish()) {
                Ok(v) => Bytes::from(v),
                Err(_) => Bytes::new(),
            }
        };
        if let Some(b) = &self.body_bytes {
            b.set(text.len() as f64);
        }
        self.body.store(Arc::new(RenderedBody {
            text: Bytes::from(text),
            gzip,
            seq: snap.seq,
            series,
        }));
        if let Some(r) = &self.render_seconds {
            r.set(started.elapsed().as_secs_f64());
        }
    }
}

impl SnapshotConsumer for OtelPrometheus {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>) {
        self.publish(snapshot);
    }
}

impl Drop for OtelPrometheus {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}
