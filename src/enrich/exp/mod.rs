//! dcgm-exporter's `DCGM_EXP_*` families, counted from the incidents the source hands over.
//!
//! The source reads the history (XID and clock-event samples since its cursor, one health check, the
//! P2P status) and hands every occurrence over exactly once as an [`Incident`]; this stage, which lives
//! as long as the process, keeps the counts: totals per (entity, XID) and per (GPU, clock event), the
//! recent occurrences for the two windows, the health of every watch system, the last P2P matrix. So a
//! host-engine reconnect (the source re-creates its cursors and health group) never moves a total back.
//! It writes the families that the counters CSV lists, with the CSV's type and help, in dcgm-exporter's
//! order (9001 … 9006) and with its names, labels and values. Where dcgm-exporter is known to be wrong
//! this stage is not (docs/incidents.md): an XID on a MIG instance is counted on that instance, and the
//! XID `_COUNT` counts occurrences (each XID is one DCGM sample). `DCGM_EXP_CLOCK_EVENTS_COUNT` counts,
//! as dcgm-exporter does, the bitmask samples within the window that have each reason set (so a held
//! throttle stays above 0 while it lasts; the value depends on the watch frequency, the collect
//! interval); `DCGM_EXP_CLOCK_EVENTS_TOTAL` counts the times a reason began.

pub mod args;
mod state;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::counters::exporter::{ExpFamily, ExpRow};
use crate::counters::{CounterSet, MetricKind};
use crate::fields::{health, p2p};
use crate::snapshot::{
    ClockSample, DerivedFamily, DerivedInfo, DerivedKind, DerivedSample, DerivedSubject, Entity,
    EntityKind, EntityReading, FieldValue, Incident, IncidentKind, P2pLink, SeriesLabel,
};

use super::Enricher;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};
use state::{EntityKey, State};

/// The stage: counting state plus the two windows.
pub struct ExpStage {
    xid_window: Duration,
    clock_window: Duration,
    state: State,
    /// Whole-GPU entities made for GPUs only their MIG instances represent, by GPU index.
    gpu_entities: HashMap<u32, Arc<Entity>>,
    /// `dcgm_otel_incidents_total{kind}`: XIDs, clock events begun, health transitions.
    seen: [Arc<Metric>; 3],
    /// `dcgm_otel_incidents_dropped_total{reason="xid_codes"}`: XIDs past the per-entity code bound.
    dropped_xid_codes: Arc<Metric>,
    dropped_logged: bool,
}

impl ExpStage {
    pub fn new(args: &args::ExpArgs, metrics: &SelfMetrics) -> ExpStage {
        let seen = |kind: &str| {
            metrics.counter(
                "dcgm_otel_incidents_total",
                "GPU incidents handed over by the source: XID errors, clock events that began, health-watch transitions.",
                &[("kind", kind)],
            )
        };
        let xid_window = Duration::from_millis(args.xid_count_window_size);
        let clock_window = Duration::from_millis(args.clock_events_count_window_size);
        ExpStage {
            xid_window,
            clock_window,
            state: State::new(xid_window.max(clock_window)),
            gpu_entities: HashMap::new(),
            seen: [seen("xid"), seen("clock_event"), seen("health")],
            dropped_xid_codes: metrics.counter(
                "dcgm_otel_incidents_dropped_total",
                "GPU incidents not counted: XIDs of codes past the per-entity bound of distinct XID codes (256).",
                &[("reason", "xid_codes")],
            ),
            dropped_logged: false,
        }
    }

    /// The physical GPUs of the monitored GPU-side entities, in output order.
    fn physical_gpus(&mut self, entities: &[EntityReading]) -> Vec<(Arc<Entity>, usize)> {
        let mut out: Vec<(Arc<Entity>, usize)> = Vec::new();
        for (i, r) in entities.iter().enumerate() {
            let e = &r.entity;
            let Some(gpu) = e.gpu.as_ref() else {
                continue;
            };
            if !matches!(e.kind, EntityKind::Gpu | EntityKind::GpuInstance) {
                continue;
            }
            if out.iter().any(|(g, _)| g.entity_id == gpu.index) {
                continue;
            }
            let whole = if e.kind == EntityKind::Gpu {
                e.clone()
            } else {
                self.gpu_entities
                    .entry(gpu.index)
                    .or_insert_with(|| Arc::new(Entity::gpu(gpu.clone())))
                    .clone()
            };
            out.push((whole, i));
        }
        out
    }
}

impl Enricher for ExpStage {
    fn name(&self) -> &'static str {
        "dcgm_exp"
    }

    fn enrich(&mut self, _entities: &mut [EntityReading]) {}

    fn observe(&mut self, incidents: &[Incident], clock_samples: &[ClockSample], p2p: &[P2pLink]) {
        for i in incidents {
            let kind = match i.kind {
                IncidentKind::Xid { .. } => 0,
                IncidentKind::ClockEventStarted { .. } => 1,
                IncidentKind::ClockEventEnded { .. } => continue,
                IncidentKind::Health { .. } => 2,
            };
            self.seen[kind].inc();
        }
        let before = self.state.dropped_xid_codes;
        self.state
            .observe(incidents, clock_samples, SystemTime::now());
        let dropped = self.state.dropped_xid_codes - before;
        if dropped > 0 {
            self.dropped_xid_codes.add(dropped as f64);
            if !self.dropped_logged {
                tracing::warn!(
                    bound = state::MAX_XID_CODES_PER_ENTITY,
                    "more distinct XID codes on one GPU than the bound; further codes are not counted"
                );
                self.dropped_logged = true;
            }
        }
        // A collection whose P2P read failed keeps the last matrix (a state, not an occurrence).
        if !p2p.is_empty() {
            self.state.p2p = p2p.to_vec();
        }
    }

    fn derive(
        &mut self,
        entities: &[EntityReading],
        counters: &CounterSet,
        out: &mut Vec<DerivedFamily>,
    ) {
        if counters.exporter_rows.is_empty() {
            return;
        }
        let now = SystemTime::now();
        let gpus = self.physical_gpus(entities);
        let ctx = Ctx {
            entities,
            counters,
            gpus: &gpus,
        };
        for family in ExpFamily::ALL {
            let Some(row) = counters.exporter_rows.iter().find(|r| r.family == family) else {
                continue;
            };
            let samples = match family {
                ExpFamily::XidErrorsCount => self.xid_count(&ctx, now),
                ExpFamily::XidErrorsTotal => self.xid_total(&ctx),
                ExpFamily::ClockEventsCount => self.clock_count(&ctx, now),
                ExpFamily::ClockEventsTotal => self.clock_total(&ctx),
                ExpFamily::GpuHealthStatus => self.health(&ctx),
                ExpFamily::P2pStatus => self.p2p(&ctx),
            };
            out.push(DerivedFamily {
                info: Cow::Owned(info(row)),
                samples,
            });
        }
    }
}

/// Name, CSV help and CSV type of a row; the OTLP unit of a count.
fn info(row: &ExpRow) -> DerivedInfo {
    DerivedInfo {
        name: row.family.name(),
        help: Cow::Owned(row.help.clone()),
        unit: match row.family {
            ExpFamily::GpuHealthStatus | ExpFamily::P2pStatus => "1",
            ExpFamily::XidErrorsCount | ExpFamily::XidErrorsTotal => "{error}",
            ExpFamily::ClockEventsCount | ExpFamily::ClockEventsTotal => "{event}",
        },
        kind: match row.kind {
            MetricKind::Counter => DerivedKind::Counter,
            _ => DerivedKind::Gauge,
        },
        otel_name: row.family.name(),
        subject: DerivedSubject::Device,
    }
}

/// What every family reads of the collection.
struct Ctx<'a> {
    entities: &'a [EntityReading],
    counters: &'a CounterSet,
    /// Physical GPUs and the index of the reading that represents each (for attribution).
    gpus: &'a [(Arc<Entity>, usize)],
}

impl Ctx<'_> {
    /// Samples of `entity` (reading `reading`, when monitored): one per attribution set written on
    /// :9400, each with the reading's `label`-type fields and `own` labels.
    fn samples(
        &self,
        entity: &Arc<Entity>,
        reading: Option<usize>,
        own: &[SeriesLabel],
        value: f64,
        out: &mut Vec<DerivedSample>,
    ) {
        let Some(r) = reading.and_then(|i| self.entities.get(i)) else {
            out.push(DerivedSample {
                entity: entity.clone(),
                attributes: Arc::from(Vec::new()),
                labels: own.to_vec(),
                value,
            });
            return;
        };
        let rows = &self.counters.rows;
        let mut labels: Vec<SeriesLabel> = r
            .values
            .iter()
            .filter_map(|(row, v)| Some((rows.get(row)?, v)))
            .filter(|(c, _)| c.kind == MetricKind::Label)
            .filter_map(|(c, v)| match v {
                FieldValue::Text(t) => Some(SeriesLabel {
                    prometheus: Cow::Owned(c.name.clone()),
                    otel: None,
                    otel_int: false,
                    value: t.clone(),
                }),
                _ => None,
            })
            .collect();
        labels.extend_from_slice(own);
        // As the device's DCGM series: once per set :9400 writes (a shared device once, under its
        // holder); OTLP places a device family's sample on the device's Resource anyway.
        for (_, set) in r.attribution.exposition_sets() {
            out.push(DerivedSample {
                entity: entity.clone(),
                attributes: Arc::from(set.to_vec()),
                labels: labels.clone(),
                value,
            });
        }
    }

    /// The monitored GPU-side entities counted per entity (GPUs and MIG instances).
    fn gpu_side(&self) -> impl Iterator<Item = (usize, &Arc<Entity>)> {
        self.entities
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r.entity.kind, EntityKind::Gpu | EntityKind::GpuInstance))
            .map(|(i, r)| (i, &r.entity))
    }

    fn reading_of(&self, key: &EntityKey) -> Option<usize> {
        self.entities
            .iter()
            .position(|r| EntityKey::of(&r.entity) == *key)
    }
}

fn label(prometheus: &'static str, otel: &'static str, value: impl Into<Box<str>>) -> SeriesLabel {
    SeriesLabel {
        prometheus: Cow::Borrowed(prometheus),
        otel: Some(otel),
        otel_int: false,
        value: value.into(),
    }
}

/// A label whose OTLP attribute is an integer (the XID code, the peer GPU index, the window).
fn int_label(prometheus: &'static str, otel: &'static str, value: impl ToString) -> SeriesLabel {
    SeriesLabel {
        otel_int: true,
        ..label(prometheus, otel, value.to_string())
    }
}

fn window_label(window: Duration) -> SeriesLabel {
    int_label(
        "window_size_in_ms",
        "nvidia.window.duration_ms",
        window.as_millis(),
    )
}

impl ExpStage {
    fn xid_count(&self, ctx: &Ctx<'_>, now: SystemTime) -> Vec<DerivedSample> {
        let counts = self.state.xids_within(self.xid_window, now);
        let window = window_label(self.xid_window);
        let mut out = Vec::new();
        for (i, e) in ctx.gpu_side() {
            let key = EntityKey::of(e);
            let mine: Vec<&(EntityKey, u32, u64)> =
                counts.iter().filter(|(k, _, _)| *k == key).collect();
            if mine.is_empty() {
                ctx.samples(e, Some(i), std::slice::from_ref(&window), 0.0, &mut out);
            }
            for (_, code, n) in mine {
                let own = [window.clone(), int_label("xid", "nvidia.xid.code", code)];
                ctx.samples(e, Some(i), &own, *n as f64, &mut out);
            }
        }
        // Occurrences on entities not monitored as such (a MIG GPU's own XIDs).
        for (key, code, n) in &counts {
            if ctx.gpu_side().any(|(_, e)| EntityKey::of(e) == *key) {
                continue;
            }
            if let Some(e) = self.state.entity(key) {
                let own = [window.clone(), int_label("xid", "nvidia.xid.code", code)];
                ctx.samples(e, ctx.reading_of(key), &own, *n as f64, &mut out);
            }
        }
        out
    }

    fn xid_total(&self, ctx: &Ctx<'_>) -> Vec<DerivedSample> {
        let mut out = Vec::new();
        for (key, entity, code, n) in self.state.xid_totals(|k| ctx.reading_of(k)) {
            let own = [int_label("xid", "nvidia.xid.code", code)];
            ctx.samples(entity, ctx.reading_of(&key), &own, n as f64, &mut out);
        }
        out
    }

    fn clock_count(&self, ctx: &Ctx<'_>, now: SystemTime) -> Vec<DerivedSample> {
        let counts = self.state.clock_events_within(self.clock_window, now);
        let window = window_label(self.clock_window);
        let mut out = Vec::new();
        for (gpu, i) in ctx.gpus {
            let key = EntityKey::of(gpu);
            let mine: Vec<&(EntityKey, &'static str, u64)> =
                counts.iter().filter(|(k, _, _)| *k == key).collect();
            if mine.is_empty() {
                ctx.samples(gpu, Some(*i), std::slice::from_ref(&window), 0.0, &mut out);
            }
            for (_, reason, n) in mine {
                let own = [
                    label("clock_event", "nvidia.clock_event.reason", *reason),
                    window.clone(),
                ];
                ctx.samples(gpu, Some(*i), &own, *n as f64, &mut out);
            }
        }
        out
    }

    fn clock_total(&self, ctx: &Ctx<'_>) -> Vec<DerivedSample> {
        let mut out = Vec::new();
        for (gpu, i) in ctx.gpus {
            let key = EntityKey::of(gpu);
            for (reason, n) in self.state.clock_totals(&key) {
                let own = [label("clock_event", "nvidia.clock_event.reason", reason)];
                ctx.samples(gpu, Some(*i), &own, n as f64, &mut out);
            }
        }
        out
    }

    fn health(&self, ctx: &Ctx<'_>) -> Vec<DerivedSample> {
        let mut out = Vec::new();
        for (gpu, i) in ctx.gpus {
            let watches = self.state.health_of(gpu.entity_id);
            let mut worst: (u32, Cow<'static, str>) = (0, Cow::Borrowed(health::OK_CODE));
            let mut one = |name: &'static str, value: u32, code: Cow<'static, str>| {
                let own = [
                    label("health_error_code", "nvidia.health.error_code", code),
                    label("health_watch", "nvidia.health.watch", name),
                ];
                ctx.samples(gpu, Some(*i), &own, f64::from(value), &mut out);
            };
            for (w, (_, name)) in health::WATCHES.iter().enumerate() {
                let (value, code) = match watches.and_then(|ws| ws.get(w)) {
                    Some((result, code)) => (result.value(), Cow::Owned(code.to_string())),
                    None => (0, Cow::Borrowed(health::OK_CODE)),
                };
                if value > worst.0 {
                    worst = (value, code.clone());
                }
                one(name, value, code);
            }
            one(health::ALL_NAME, worst.0, worst.1);
        }
        out
    }

    fn p2p(&self, ctx: &Ctx<'_>) -> Vec<DerivedSample> {
        let mut out = Vec::new();
        for (gpu, i) in ctx.gpus {
            for link in self
                .state
                .p2p
                .iter()
                .filter(|l| l.gpu.entity_id == gpu.entity_id)
            {
                let own = [
                    label(
                        "link_status",
                        "nvidia.p2p.link_status",
                        p2p::status_name(link.status),
                    ),
                    int_label("peer_gpu", "nvidia.p2p.peer_gpu.index", link.peer),
                ];
                ctx.samples(gpu, Some(*i), &own, f64::from(link.status), &mut out);
            }
        }
        out
    }
}
