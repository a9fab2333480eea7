//! The exporters' construction: the `:9400` renderer (always), the `--dump-*` writer and the OTLP push
//! (metrics and incident log records). Resolved from their flags without side effects — the OTLP
//! settings and resource attributes are checked here — and started over the snapshot store.
//!
//! What the exporters need from the source is declared by the plan ([`ExportPlan::source_needs`]),
//! before the source is resolved.

use std::sync::Arc;

use crate::config::{CollectionArgs, LabelStyle};
use crate::counters::CounterSet;
use crate::export::dump::{DumpArgs, DumpWriter};
use crate::export::metrics_body::MetricsBody;
use crate::export::otel::otlp::{OtelExport, OtlpArgs, OtlpPlan};
use crate::export::otel::OtelContext;
use crate::export::prometheus::Renderer;
use crate::export::SnapshotConsumer;
use crate::snapshot::SnapshotStore;
use crate::source::plan::SourceNeeds;
use crate::startup::{ResolveContext, StartContext, StartError};

/// The flag groups the exporters are resolved from.
pub struct ExportFlags<'a> {
    pub collection: &'a CollectionArgs,
    pub otlp: &'a OtlpArgs,
    pub dump: &'a DumpArgs,
}

/// The exporters, resolved and not started.
pub struct ExportPlan {
    labels: LabelStyle,
    /// The self-metrics are on `/metrics` (not `--no-self-metrics`).
    self_metrics_shown: bool,
    dump: Option<DumpArgs>,
    otlp: Option<OtlpPlan>,
}

/// The started exporters: the consumers the collector thread feeds, the body `:9400` serves, and the
/// OTLP push (stopped last, after the collector).
pub struct StartedExports {
    pub consumers: Vec<Arc<dyn SnapshotConsumer>>,
    pub body: Arc<MetricsBody>,
    pub otel: Option<OtelExport>,
}

impl ExportPlan {
    /// `counters`: the set as read (the OTLP instruments are declared from it).
    pub fn resolve(
        flags: &ExportFlags<'_>,
        counters: &CounterSet,
        ctx: &ResolveContext<'_>,
    ) -> Result<ExportPlan, StartError> {
        let otel = OtelContext {
            counters,
            labels: flags.collection.label_style(),
            hostname: ctx.host.hostname.as_deref(),
            node_name: ctx.host.node_name.as_deref(),
        };
        let otlp = OtlpPlan::resolve(flags.otlp, &otel, ctx.interval, ctx.env)
            .map_err(|e| StartError::classify(e.is_bad_input(), e))?;
        Ok(ExportPlan {
            labels: flags.collection.label_style(),
            self_metrics_shown: !flags.collection.no_self_metrics,
            dump: flags.dump.dump_enabled.then(|| flags.dump.clone()),
            otlp,
        })
    }

    /// What the exporters need the source to read beyond the counters CSV: every incident when
    /// they are sent as OTLP log records (one record per incident, even without `DCGM_EXP_*` rows).
    pub fn source_needs(&self) -> SourceNeeds {
        SourceNeeds {
            incident_events: self
                .otlp
                .as_ref()
                .is_some_and(OtlpPlan::sends_incident_logs),
        }
    }

    pub fn start(
        self,
        store: &Arc<SnapshotStore>,
        ctx: &StartContext<'_>,
    ) -> Result<StartedExports, StartError> {
        let shown = self.self_metrics_shown.then(|| ctx.self_metrics.clone());
        let body = Arc::new(MetricsBody::new(Renderer::new(self.labels, shown)));
        let mut consumers: Vec<Arc<dyn SnapshotConsumer>> = vec![body.clone()];
        // After the body: the dump has the snapshot's body made and writes it.
        if let Some(args) = &self.dump {
            let dump = DumpWriter::start(args, body.clone(), ctx.self_metrics)
                .map_err(StartError::input)?;
            consumers.push(Arc::new(dump));
        }
        let otel = match self.otlp {
            Some(plan) => Some(
                plan.start(store.clone(), ctx.self_metrics)
                    .map_err(|e| StartError::classify(e.is_bad_input(), e))?,
            ),
            None => None,
        };
        // OTLP metrics: each publication wakes the export thread (each collection sent once).
        consumers.extend(otel.as_ref().map(OtelExport::publication_consumer));
        // Incident log records: every snapshot's incidents, handed over on the collector thread.
        consumers.extend(otel.as_ref().and_then(OtelExport::incident_consumer));
        Ok(StartedExports {
            consumers,
            body,
            otel,
        })
    }
}
