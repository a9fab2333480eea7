//! The OTLP metrics request: each export builds the ONE `ExportMetricsServiceRequest` straight from
//! the newest published snapshot — no OpenTelemetry SDK, no per-series SDK state.
//!
//! Metric names, descriptions, UCUM units ([`units`](crate::export::otel::units)) and types follow the
//! counters CSV (`gauge` → Gauge of double points; `counter` → monotonic Sum, int points for integer
//! fields and double points otherwise); absent, text and non-finite values send no point, negative
//! values none on a counter; resources and attributes come from [`naming`](crate::export::otel::naming)
//! (both resource modes and both attribute styles). The clock and the bookkeeping:
//! - `time_unix_nano` is the snapshot's time (when the values were read); `start_time_unix_nano` is
//!   the time OTLP export started, or for a counter that went back the previous point's time (a new
//!   stream).
//! - Delta temporality (`--otlp-temporality delta`; counters only) keeps the previous value of every
//!   counter series and sends the difference, starting at the previous export of that series; a series
//!   seen for the first time sends its whole value since the start. A value lower than the previous one
//!   is a counter reset: its delta is the new value.
//! - A snapshot already exported is not exported again (no new values).
//! - No cardinality limit: every series of the snapshot is sent.
//!
//! The per-entity work — attribute sets, their split into resource identity and data-point attributes,
//! the proto `Resource`s — is cached between exports and redone only when the entity list, an entity,
//! its attribution or a `label`-row value (or the driver version) changes (`Arc` identity first, then
//! equality; the label-row attributes are not even made again while their inputs are unchanged), or
//! the counter set; as the Prometheus renderer caches its label strings. With the layout its
//! templates are made (`request/templates.rs`): the protobuf bytes of every Resource and of every
//! set's data-point attributes, and with the instruments each metric's name, description and unit. An
//! export ([`DirectBuilder::build_encoded`]) writes the field readings from them — lengths first,
//! then tags, lengths, timestamps and values around copied bytes, one resource at a time: no proto
//! value per point and, in steady state, a handful of allocations per export (none per point;
//! `cargo bench --bench otlp_alloc`). Derived families, semantic-convention metrics and holders'
//! points are still built as proto values and encoded by prost into the same request. The bytes are
//! prost's encoding of the request [`DirectBuilder::build`] builds (the previous export path,
//! `DirectBuilder::build_encoded_reference`, kept as the reference: `request/templates_tests.rs`
//! compares both byte for byte, and the golden requests are unchanged).
//!
//! The sampled fields' distributions (`--distribution`, [`super::distributions`]) are proto
//! `Metric`s too, prost-encoded inside each entity's Resource's `ScopeMetrics` after its field,
//! derived and semantic-convention metrics; in host resource mode they join the one Resource.
//!
//! The parts, one job each: `instruments` (which rows are sent, under which name and kind),
//! `readings` (how a kind observes a value, which members write an instrument), `layout` (the
//! cached per-entity work), `resource_walk` (one export's walk over the Resources, handed to a
//! sink), `derived` (where derived samples go), `point_context` (a point's start time and counter
//! bookkeeping); `templates` writes the bytes. This file holds the types they share and the
//! builder's entry points.
//!
//! [`schedule`](super::schedule) runs the exports on their own thread as collections are published;
//! encoded requests go to the bounded queue and sender ([`queue`](super::queue)). Never on the
//! collector thread or the HTTP server.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue as PKeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    number_data_point, AggregationTemporality, Metric, ResourceMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_sdk::metrics::Temporality;

use super::proto::pkv;
use crate::counters::CounterSet;
use crate::export::otel::naming::{Naming, OtelAttributeStyle, ResourceSplit};
use crate::export::otel::semconv::{self, MetricNames};
use crate::fields::FieldId;
use crate::snapshot::{Attribution, Entity, FieldValue, Snapshot};

/// How one instrument reads its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// f64 gauge.
    Gauge,
    /// Monotonic sum of an integer field: non-negative ints only, int points.
    IntCounter,
    /// Monotonic sum of a double field: non-negative finite values, double points.
    DoubleCounter,
}

/// One instrument: a counters-CSV metric row (the first row of a name wins, as in the SDK path).
struct Instrument {
    row: usize,
    /// Whether DCGM measures the field per MIG instance (else it is the board's: written once per
    /// GPU, see [`Role`]).
    per_instance: bool,
    /// The DCGM field: some give their points attributes of their own ([`Naming::value_attributes`]).
    field_id: u16,
    kind: Kind,
    /// Its index among the counter instruments (its slot in [`field_state`]); `None` for a gauge.
    counter: Option<usize>,
    name: String,
    description: String,
    unit: String,
    /// `name`, `description` and `unit` encoded ([`templates`]).
    head: Vec<u8>,
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One attribute set of one entity, ready to be written.
#[derive(Clone)]
struct SetLayout {
    /// Index into [`Layout::resources`].
    resource: usize,
    /// The data-point attributes: the non-identity ones (per-entity mode) or all of them (host mode).
    point_attributes: Vec<PKeyValue>,
    /// `hw.id` and `hw.type` of the set when they are Resource attributes: the hardware conventions
    /// make them attributes of every `hw.*` data point too (empty in host mode, where the points
    /// carry them already, and in the dcgm attribute style).
    hw_point: Vec<PKeyValue>,
    /// The whole set rendered, sorted by key: the series' key for counter state.
    series: Arc<str>,
}

/// What an entity's readings are written as under the entity model.
#[derive(Clone, Debug, PartialEq)]
enum Role {
    /// Every row on its own set (a GPU, a link, a switch, a CPU).
    Whole,
    /// A MIG instance: only the fields DCGM measures per instance; its GPU's board-level readings
    /// are written by the GPU itself or by another instance.
    Instance,
    /// A MIG instance that also speaks for its GPU's board (the GPU is not monitored itself, as in
    /// dcgm-exporter's flex mode): board-level rows go on its second set, the GPU's, read once.
    InstanceAndBoard(Arc<Entity>),
}

impl Role {
    /// Whether a row (per-instance field or not) is written on set `s` of an entity of this role.
    fn writes(&self, s: usize, per_instance: bool) -> bool {
        match self {
            Role::Whole => s == 0,
            Role::Instance => s == 0 && per_instance,
            Role::InstanceAndBoard(_) => (s == 0) == per_instance,
        }
    }

    /// The entity set `s` describes (derived inputs are looked up by it).
    fn subject<'a>(&'a self, own: &'a Arc<Entity>, s: usize) -> &'a Arc<Entity> {
        match (self, s) {
            (Role::InstanceAndBoard(gpu), 1) => gpu,
            _ => own,
        }
    }
}

/// The cached layout of one entity and what it was built from.
struct EntityLayout {
    entity: Arc<Entity>,
    attribution: Arc<Attribution>,
    /// Its label-row attributes when built (an NvLink's are its GPU's).
    labels: Vec<KeyValue>,
    /// Its own set, and for [`Role::InstanceAndBoard`] its GPU's.
    sets: Vec<SetLayout>,
    role: Role,
}

/// The per-entity work of the last export, valid while every entity still matches.
#[derive(Default)]
struct Layout {
    entities: Vec<EntityLayout>,
    /// One per distinct resource identity (one in host mode), in first-seen order.
    resources: Vec<Resource>,
    /// Per resource: its (entity, set) pairs, in entity order.
    members: Vec<Vec<(usize, usize)>>,
    /// Per resource: its identity (sorted key/value pairs), to place derived series.
    keys: HashMap<Vec<(String, String)>, usize>,
    /// GPUs in MIG mode spoken for by one of their instances: the GPU entity → (entity, set 1).
    boards: HashMap<Arc<Entity>, (usize, usize)>,
    /// The resources and attribute sets encoded.
    templates: templates::Templates,
    /// Which rebuild this is (what the template writer keeps per layout is dropped on a new one).
    generation: u64,
    /// The counter state of the field series.
    fields: field_state::FieldState,
    /// What the entities' label-row attributes were last made from: each entity's `label`-row
    /// values in turn, and the driver version.
    label_inputs: Vec<Option<FieldValue>>,
    driver_version: Option<String>,
}

/// Counter state of one series: (last value, its time, the start time of its current stream).
type SeriesState = (number_data_point::Value, u64, u64);

/// Counter state of every series, keyed by (instrument, series).
type CounterState = HashMap<(usize, Arc<str>), SeriesState>;

/// Builds requests from snapshots; keeps the cached layout and the last value of every counter
/// series (for delta temporality and for resets).
pub struct DirectBuilder {
    naming: Naming,
    /// Which attributes move into the Resource.
    split: ResourceSplit,
    base: Vec<PKeyValue>,
    scope: InstrumentationScope,
    /// `https://opentelemetry.io/schemas/<version>` with semantic-convention attribute names; empty
    /// with dcgm-exporter's label names (which follow no schema).
    schema_url: String,
    instruments: Vec<Instrument>,
    /// The counter set `instruments` was made from.
    counters: Arc<CounterSet>,
    start_nanos: u64,
    delta: bool,
    layout: Layout,
    /// Every counter series' last value, time and stream start.
    previous: CounterState,
    /// Size of the last encoded request (the next one's buffer is sized from it).
    last_len: usize,
    /// The template writer and its buffers.
    writer: templates::Writer,
    /// Layouts built so far.
    layouts_built: u64,
    /// Exports (requests built) so far.
    exports: u64,
    /// Which metric names the requests carry.
    names: MetricNames,
    /// The semantic-convention table resolved against `counters` (empty in `dcgm` mode).
    semconv: semconv::Plan,
}

/// One built request and what the self-metrics report about it.
pub struct Built {
    pub request: ExportMetricsServiceRequest,
    pub data_points: usize,
}

impl DirectBuilder {
    /// `base`: the host resource attributes; `split`: which attributes move into per-entity
    /// resources (none in host mode); `temporality`: the exporter's preference (delta applies to
    /// counters only, as the SDK's selector does; lowmemory keeps observable counters cumulative).
    pub fn new(
        naming: Naming,
        split: ResourceSplit,
        base: &[KeyValue],
        counters: Arc<CounterSet>,
        temporality: Temporality,
        start: SystemTime,
    ) -> DirectBuilder {
        let schema_url = if naming.style() == OtelAttributeStyle::Otel {
            semconv::schema_url()
        } else {
            String::new()
        };
        DirectBuilder {
            naming,
            split,
            base: base.iter().map(pkv).collect(),
            scope: InstrumentationScope {
                name: "dcgm-otel".to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                attributes: Vec::new(),
                dropped_attributes_count: 0,
            },
            schema_url,
            instruments: instruments::instruments(&counters, &[]),
            counters,
            start_nanos: nanos(start),
            delta: temporality == Temporality::Delta,
            layout: Layout::default(),
            previous: HashMap::new(),
            last_len: 0,
            writer: templates::Writer::default(),
            layouts_built: 0,
            exports: 0,
            names: MetricNames::Dcgm,
            semconv: semconv::Plan::default(),
        }
    }

    /// Send semantic-convention names (`semconv`: instead of the DCGM names of the fields that have
    /// one; `both`: besides them). `dcgm` (the default) changes nothing.
    pub fn with_metric_names(mut self, names: MetricNames) -> DirectBuilder {
        self.names = names;
        self.instruments = instruments::instruments(&self.counters, &self.replaced_fields());
        self.semconv = self.plan_for(&self.counters);
        self
    }

    /// Fields whose DCGM-named instruments are not sent.
    fn replaced_fields(&self) -> Vec<FieldId> {
        if self.names.dcgm() {
            Vec::new()
        } else {
            semconv::replaced_fields()
        }
    }

    fn plan_for(&self, counters: &CounterSet) -> semconv::Plan {
        if self.names.semconv() {
            semconv::Plan::new(counters)
        } else {
            semconv::Plan::default()
        }
    }

    /// Whether a derived family is sent under its own name.
    fn sends_family(&self, name: &str) -> bool {
        self.names.dcgm() || !semconv::replaced_families().contains(&name)
    }

    /// How many instruments (metric rows with distinct names, and semantic-convention metrics) the
    /// requests carry.
    pub fn instrument_count(&self) -> usize {
        self.instruments.len() + self.semconv.metrics.len()
    }

    /// The request for `snap` as proto values: one ResourceMetrics per identity that has at least
    /// one point. The reference of [`DirectBuilder::build_encoded`]'s bytes.
    pub fn build(&mut self, snap: &Snapshot) -> Built {
        let mut sink = resource_walk::Collect {
            resource_metrics: Vec::new(),
        };
        let data_points = self.for_each_resource(snap, &mut sink);
        Built {
            request: ExportMetricsServiceRequest {
                resource_metrics: sink.resource_metrics,
            },
            data_points,
        }
    }

    /// The encoded request for `snap`, written from the cached templates (what an export runs):
    /// the same bytes as prost's encoding of [`DirectBuilder::build`]'s request.
    pub fn build_encoded(&mut self, snap: &Snapshot) -> Encoded {
        let started = Instant::now();
        let mut writer = std::mem::take(&mut self.writer);
        writer.start(self, Vec::with_capacity(self.last_len + self.last_len / 8));
        let data_points = self.for_each_resource(snap, &mut writer);
        let (body, resources, encode_time) = writer.finish();
        self.writer = writer;
        self.last_len = body.len();
        Encoded {
            body,
            data_points,
            resources,
            build_time: started.elapsed().saturating_sub(encode_time),
            encode_time,
        }
    }

    /// The previous export path, kept as the reference of [`DirectBuilder::build_encoded`] (tests
    /// and the bench compare them): proto values built one resource at a time and encoded by prost.
    #[doc(hidden)]
    pub fn build_encoded_reference(&mut self, snap: &Snapshot) -> Encoded {
        let mut sink = resource_walk::ProstEncode {
            body: Vec::with_capacity(self.last_len + self.last_len / 8),
            resources: 0,
            encode_time: Duration::ZERO,
        };
        let started = Instant::now();
        let data_points = self.for_each_resource(snap, &mut sink);
        self.last_len = sink.body.len();
        Encoded {
            body: sink.body,
            data_points,
            resources: sink.resources,
            build_time: started.elapsed().saturating_sub(sink.encode_time),
            encode_time: sink.encode_time,
        }
    }
}

/// Where [`DirectBuilder::for_each_resource`] hands each resource.
trait ResourceSink {
    /// Layout resource `r`: its field metrics (written by the sink) and then `metrics`. Returns the
    /// field points written; a resource without any metric is not written.
    fn layout_resource(
        &mut self,
        b: &DirectBuilder,
        snap: &Snapshot,
        r: usize,
        ctx: &PointContext<'_>,
        next: &mut CounterState,
        metrics: Vec<Metric>,
    ) -> usize;

    /// Any other resource, whole.
    fn resource(&mut self, rm: ResourceMetrics);
}

/// The temporality of monotonic sums.
fn temporality(delta: bool) -> i32 {
    if delta {
        AggregationTemporality::Delta as i32
    } else {
        AggregationTemporality::Cumulative as i32
    }
}

/// What one data point needs besides its value.
struct PointContext<'a> {
    time: u64,
    start: u64,
    delta: bool,
    previous: &'a CounterState,
    /// This export's number ([`field_state`] slots written by the previous one hold its state).
    export: u64,
}

/// An encoded request and what the self-metrics report about it.
pub struct Encoded {
    pub body: Vec<u8>,
    pub data_points: usize,
    pub resources: usize,
    /// Reading the snapshot: values, counter state, proto values of what is not a field reading.
    pub build_time: Duration,
    /// Writing the protobuf bytes (templates copied, numbers written, prost's encoding of the rest).
    pub encode_time: Duration,
}

mod derived;
mod field_state;
pub(super) mod holders;
mod instruments;
mod layout;
mod point_context;
mod processes;
mod readings;
mod resource_walk;
mod semconv_metrics;
mod templates;

#[cfg(test)]
mod builder_tests;
#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod semconv_tests;
#[cfg(test)]
mod templates_tests;
