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
//! [`schedule`](super::schedule) runs the exports on their own thread as collections are published;
//! encoded requests go to the bounded queue and sender ([`queue`](super::queue)). Never on the
//! collector thread or the HTTP server.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue as PKeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_sdk::metrics::Temporality;

use super::proto::{entity_resource, pkv};
use crate::counters::{CounterSet, MetricKind};
use crate::export::otel::naming::{Naming, OtelAttributeStyle, ResourceSplit};
use crate::export::otel::semconv::{self, MetricNames};
use crate::export::otel::units::unit_for;
use crate::fields::{FieldId, ValueType};
use crate::snapshot::{
    Attribution, DerivedKind, DerivedSubject, Entity, EntityKind, FieldValue, Snapshot,
};

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

/// Whether a row's field is a rate: its DCGM unit is per second (`MB/s`, `KB/s`).
fn is_rate(c: &crate::counters::Counter) -> bool {
    crate::export::otel::units::field_unit(&c.field).is_some_and(|u| u.ends_with("/s"))
}

/// The instruments of a counter set, but for rows of the fields in `replaced` (`semconv` names only).
fn instruments(counters: &CounterSet, replaced: &[FieldId]) -> Vec<Instrument> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    let mut counters_seen = 0;
    for (row, c) in counters.rows.iter().enumerate() {
        if c.kind == MetricKind::Label
            || replaced.contains(&c.field.id)
            || !seen.insert(c.name.as_str())
        {
            continue;
        }
        let kind = match c.kind {
            MetricKind::Gauge => Kind::Gauge,
            // A rate (a DCGM unit per second: NVLink bandwidth in MB/s) is a gauge whatever the CSV
            // says: dcgm-exporter 4.5.3-4.8.2 types DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL `counter`, which
            // :9400 keeps, but a monotonic Sum of a rate would be read as totals.
            MetricKind::Counter if is_rate(c) => Kind::Gauge,
            MetricKind::Counter if c.field.value_type == ValueType::Int64 => Kind::IntCounter,
            MetricKind::Counter => Kind::DoubleCounter,
            MetricKind::Label => continue,
        };
        let unit = unit_for(c).to_string();
        let counter = (kind != Kind::Gauge).then_some(counters_seen);
        counters_seen += usize::from(counter.is_some());
        out.push(Instrument {
            counter,
            head: templates::metric_head(&c.name, &c.help, &unit),
            row,
            per_instance: c.field.level.measured_per_gpu_instance(),
            field_id: c.field.id,
            kind,
            name: c.name.clone(),
            description: c.help.clone(),
            unit,
        });
    }
    out
}

/// A value as the instrument of `kind` observes it (the same filters as the SDK callbacks).
fn observe(kind: Kind, v: &FieldValue) -> Option<number_data_point::Value> {
    match kind {
        Kind::Gauge => v.as_f64().map(number_data_point::Value::AsDouble),
        Kind::IntCounter => match v {
            FieldValue::Int(i) if *i >= 0 => Some(number_data_point::Value::AsInt(*i)),
            _ => None,
        },
        Kind::DoubleCounter => v
            .as_f64()
            .filter(|f| *f >= 0.0)
            .map(number_data_point::Value::AsDouble),
    }
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

/// An attribute set split into its Resource identity (sorted key/value pairs) and the rest.
fn split_set<'a>(
    split: &ResourceSplit,
    set: &'a [KeyValue],
) -> (Vec<&'a KeyValue>, Vec<&'a KeyValue>) {
    set.iter()
        .partition(|kv| split.is_identity(kv.key.as_str()))
}

fn identity_key(identity: &[&KeyValue]) -> Vec<(String, String)> {
    identity
        .iter()
        .map(|kv| (kv.key.as_str().to_string(), kv.value.as_str().into_owned()))
        .collect()
}

fn series_key(set: &[KeyValue]) -> Arc<str> {
    let series: String = set
        .iter()
        .map(|kv| format!("{}={}\u{1}", kv.key.as_str(), kv.value.as_str()))
        .collect();
    Arc::from(series)
}

/// The `hw.id` / `hw.type` of an identity, as data-point attributes.
fn hw_point(identity: &[&KeyValue]) -> Vec<PKeyValue> {
    identity
        .iter()
        .filter(|kv| matches!(kv.key.as_str(), "hw.id" | "hw.type"))
        .map(|kv| pkv(kv))
        .collect()
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
            instruments: instruments(&counters, &[]),
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
        self.instruments = instruments(&self.counters, &self.replaced_fields());
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

    /// Label-row attributes of every entity (an NvLink takes its GPU's, a switch port its switch's, a
    /// core its CPU's), index-aligned with `snap.entities`.
    fn labels(&self, snap: &Snapshot) -> Vec<Vec<KeyValue>> {
        self.naming.snapshot_labels(snap)
    }

    /// Whether the layout's entities and attributions are the snapshot's.
    fn entities_match(&self, snap: &Snapshot) -> bool {
        self.layout.entities.len() == snap.entities.len()
            && self
                .layout
                .entities
                .iter()
                .zip(&snap.entities)
                .all(|(c, e)| {
                    (Arc::ptr_eq(&c.entity, &e.entity) || c.entity == e.entity)
                        && (Arc::ptr_eq(&c.attribution, &e.attribution)
                            || c.attribution == e.attribution)
                })
    }

    fn labels_match(&self, labels: &[Vec<KeyValue>]) -> bool {
        self.layout.entities.len() == labels.len()
            && self
                .layout
                .entities
                .iter()
                .zip(labels)
                .all(|(c, l)| c.labels == *l)
    }

    /// The `label` rows of the counter set: the label-row attributes are made from their values
    /// (and the driver version) alone.
    fn label_rows(&self) -> impl Iterator<Item = usize> + '_ {
        self.counters
            .rows
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == MetricKind::Label)
            .map(|(i, _)| i)
    }

    /// Whether the inputs of the label-row attributes are those the layout's labels were made from
    /// (then the labels are too, and are not made again).
    fn label_inputs_match(&self, snap: &Snapshot) -> bool {
        let kept = &self.layout.label_inputs;
        let mut i = 0;
        for e in &snap.entities {
            for row in self.label_rows() {
                if kept.get(i).map(Option::as_ref) != Some(e.values.get(row)) {
                    return false;
                }
                i += 1;
            }
        }
        i == kept.len() && self.layout.driver_version == snap.driver_version
    }

    /// Keep the inputs of the layout's label-row attributes.
    fn keep_label_inputs(&mut self, snap: &Snapshot) {
        let rows: Vec<usize> = self.label_rows().collect();
        self.layout.label_inputs = snap
            .entities
            .iter()
            .flat_map(|e| rows.iter().map(|&row| e.values.get(row).cloned()))
            .collect();
        self.layout.driver_version = snap.driver_version.clone();
    }

    /// The role of every entity: MIG instances keep the per-instance fields; the board-level ones
    /// are the GPU's, written by the GPU entity when it is monitored, else by its first instance.
    fn roles(snap: &Snapshot) -> Vec<Role> {
        let monitored_gpus: HashSet<&str> = snap
            .entities
            .iter()
            .filter(|e| e.entity.kind == EntityKind::Gpu)
            .filter_map(|e| e.entity.gpu.as_ref().map(|g| g.uuid.as_str()))
            .collect();
        let mut spoken_for: HashSet<&str> = HashSet::new();
        snap.entities
            .iter()
            .map(|e| match (e.entity.kind, &e.entity.gpu) {
                (EntityKind::GpuInstance, Some(gpu)) => {
                    if monitored_gpus.contains(gpu.uuid.as_str())
                        || !spoken_for.insert(gpu.uuid.as_str())
                    {
                        Role::Instance
                    } else {
                        Role::InstanceAndBoard(Arc::new(Entity::gpu(gpu.clone())))
                    }
                }
                _ => Role::Whole,
            })
            .collect()
    }

    /// A set's layout, its resource found (or made) by identity.
    fn place_set(
        &self,
        set: &[KeyValue],
        resources: &mut Vec<Resource>,
        index: &mut HashMap<Vec<(String, String)>, usize>,
    ) -> SetLayout {
        let (identity, rest) = split_set(&self.split, set);
        let resource = *index.entry(identity_key(&identity)).or_insert_with(|| {
            resources.push(entity_resource(&self.base, &identity));
            resources.len() - 1
        });
        SetLayout {
            resource,
            point_attributes: rest.into_iter().map(pkv).collect(),
            hw_point: hw_point(&identity),
            series: series_key(set),
        }
    }

    /// Rebuild the whole layout (entities, attribution or label values changed).
    fn rebuild_layout(&mut self, snap: &Snapshot, labels: Vec<Vec<KeyValue>>) {
        let mut resources: Vec<Resource> = Vec::new();
        let mut index: HashMap<Vec<(String, String)>, usize> = HashMap::new();
        let mut entities = Vec::with_capacity(snap.entities.len());
        let mut boards = HashMap::new();
        let roles = Self::roles(snap);
        for (i, ((e, labels), role)) in snap.entities.iter().zip(labels).zip(roles).enumerate() {
            let own = self.naming.entity_set(e, labels.clone());
            let mut sets = vec![self.place_set(&own, &mut resources, &mut index)];
            if let (Role::InstanceAndBoard(board), Some(gpu)) = (&role, &e.entity.gpu) {
                let set = self.naming.gpu_set(gpu, labels.clone());
                sets.push(self.place_set(&set, &mut resources, &mut index));
                boards.insert(board.clone(), (i, 1));
            }
            entities.push(EntityLayout {
                entity: e.entity.clone(),
                attribution: e.attribution.clone(),
                labels,
                sets,
                role,
            });
        }
        let mut members: Vec<Vec<(usize, usize)>> = vec![Vec::new(); resources.len()];
        for (e, layout) in entities.iter().enumerate() {
            for (s, set) in layout.sets.iter().enumerate() {
                if let Some(m) = members.get_mut(set.resource) {
                    m.push((e, s));
                }
            }
        }
        self.layouts_built += 1;
        let counters = self
            .instruments
            .iter()
            .filter(|i| i.counter.is_some())
            .count();
        let fields = field_state::FieldState::new(
            &entities,
            counters,
            &self.layout.fields,
            &self.layout.entities,
            self.exports,
        );
        self.layout = Layout {
            fields,
            generation: self.layouts_built,
            templates: templates::Templates::new(&resources, &entities),
            entities,
            resources,
            members,
            keys: index,
            boards,
            label_inputs: Vec::new(),
            driver_version: None,
        };
    }

    /// Bring instruments and layout in line with `snap`.
    fn prepare(&mut self, snap: &Snapshot) {
        if !Arc::ptr_eq(&self.counters, &snap.counters) {
            if *self.counters != *snap.counters {
                self.instruments = instruments(&snap.counters, &self.replaced_fields());
                self.semconv = self.plan_for(&snap.counters);
                self.layout = Layout::default();
                // Counter state is keyed by instrument index, which a reloaded set renumbers: the
                // next export of each counter series starts over (sends its value since the start).
                self.previous.clear();
            }
            // Equal or not, keep the snapshot's Arc: the next export compares pointers only.
            self.counters = snap.counters.clone();
        }
        if self.entities_match(snap) && self.label_inputs_match(snap) {
            return;
        }
        let labels = self.labels(snap);
        if !(self.entities_match(snap) && self.labels_match(&labels)) {
            self.rebuild_layout(snap, labels);
        }
        self.keep_label_inputs(snap);
    }

    /// A `ResourceMetrics` of one scope.
    fn resource_metrics(&self, resource: Resource, metrics: Vec<Metric>) -> ResourceMetrics {
        ResourceMetrics {
            resource: Some(resource),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(self.scope.clone()),
                metrics,
                schema_url: self.schema_url.clone(),
            }],
            schema_url: self.schema_url.clone(),
        }
    }

    /// Every resource's metrics in turn, handed to `sink` one resource at a time so that only one
    /// resource's proto values exist at once: a layout resource as its index and the metrics that
    /// follow its field metrics (derived families, semantic-convention metrics, in host mode the
    /// holders', then the sampled fields' distributions), the sink writing the field metrics; any other resource (departed
    /// devices, holders) as a `ResourceMetrics`. Returns the data points.
    fn for_each_resource(&mut self, snap: &Snapshot, sink: &mut impl ResourceSink) -> usize {
        self.prepare(snap);
        self.exports += 1;
        let ctx = PointContext {
            time: nanos(snap.taken_at),
            start: self.start_nanos,
            delta: self.delta,
            previous: &self.previous,
            export: self.exports,
        };
        let mut next_previous: CounterState = HashMap::with_capacity(self.previous.len());
        let mut data_points = 0usize;
        let first_derived = self.instruments.len();
        let (mut placed, extras, mut holders) =
            self.place_derived(snap, &ctx, first_derived, &mut next_previous);
        // Per-process points and the per-pod split (`--collect-processes`): the holders' own view.
        processes::emit(
            &processes::Context {
                naming: &self.naming,
                time: nanos(snap.taken_at),
                start: self.start_nanos,
            },
            snap,
            &mut holders,
        );
        let semconv_derived = semconv_metrics::derived_inputs(&self.semconv, snap);
        let host_mode = matches!(self.split, ResourceSplit::Host);
        for (r, members) in self.layout.members.iter().enumerate() {
            let mut metrics: Vec<Metric> = Vec::new();
            if let Some(own) = placed.get_mut(r).filter(|own| !own.is_empty()) {
                data_points += derived_metrics(
                    snap,
                    std::mem::take(own),
                    &self.layout,
                    &ctx,
                    first_derived,
                    &mut next_previous,
                    &mut metrics,
                );
            }
            if !self.semconv.metrics.is_empty() {
                data_points += semconv_metrics::write(
                    &self.semconv,
                    snap,
                    &self.layout,
                    members,
                    &semconv_derived,
                    &ctx,
                    &mut next_previous,
                    &mut metrics,
                );
            }
            if host_mode && r == 0 {
                // One host Resource: the holders' points join it.
                for (_, own) in holders.take() {
                    data_points += own.iter().map(metric_points).sum::<usize>();
                    metrics.extend(own);
                }
            }
            // The sampled fields' distributions (`--distribution`), each member as it writes fields.
            data_points += super::distributions::write(
                snap,
                members,
                |e, s, per_instance| {
                    self.layout
                        .entities
                        .get(e)
                        .filter(|l| l.role.writes(s, per_instance))
                        .and_then(|l| l.sets.get(s))
                        .map(|set| &set.point_attributes[..])
                },
                self.delta,
                &mut metrics,
            );
            data_points += sink.layout_resource(self, snap, r, &ctx, &mut next_previous, metrics);
        }
        data_points +=
            self.departed_and_holders(snap, extras, holders, &ctx, &mut next_previous, &mut |rm| {
                sink.resource(rm)
            });
        self.previous = next_previous;
        data_points
    }

    /// The metrics of one Resource's DCGM fields (one per instrument with a point): each member
    /// entity's value, with the attributes its value gives it (XID). Returns the points written.
    fn field_metrics(
        &self,
        snap: &Snapshot,
        members: &[(usize, usize)],
        ctx: &PointContext<'_>,
        next: &mut CounterState,
        metrics: &mut Vec<Metric>,
    ) -> usize {
        let mut data_points = 0;
        for (k, inst) in self.instruments.iter().enumerate() {
            let points = self.field_points(snap, members, k, inst, ctx, next);
            if points.is_empty() {
                continue;
            }
            data_points += points.len();
            let data = if inst.kind == Kind::Gauge {
                Data::Gauge(Gauge {
                    data_points: points,
                })
            } else {
                Data::Sum(Sum {
                    data_points: points,
                    aggregation_temporality: temporality(self.delta),
                    is_monotonic: true,
                })
            };
            metrics.push(Metric {
                name: inst.name.clone(),
                description: inst.description.clone(),
                unit: inst.unit.clone(),
                metadata: Vec::new(),
                data: Some(data),
            });
        }
        data_points
    }

    /// The points of instrument `k` on one Resource: one per member (entity, attribute set) whose
    /// role writes it and whose value is observed.
    fn field_points(
        &self,
        snap: &Snapshot,
        members: &[(usize, usize)],
        k: usize,
        inst: &Instrument,
        ctx: &PointContext<'_>,
        next: &mut CounterState,
    ) -> Vec<NumberDataPoint> {
        let mut points: Vec<NumberDataPoint> = Vec::new();
        for (e, s, set, raw, v) in field_readings(self, snap, members, inst) {
            let slot = inst.counter.and_then(|c| self.layout.fields.slot(e, s, c));
            let (value, start) = ctx.field_value(slot, k, inst.kind, &set.series, v, next);
            let mut point = NumberDataPoint {
                attributes: set.point_attributes.clone(),
                start_time_unix_nano: start,
                time_unix_nano: ctx.time,
                exemplars: Vec::new(),
                flags: 0,
                value: Some(value),
            };
            let own = self.naming.value_attributes(inst.field_id, raw);
            if !own.is_empty() {
                point.attributes.extend(own.iter().map(pkv));
                point.attributes.sort_by(|a, b| a.key.cmp(&b.key));
            }
            points.push(point);
        }
        points
    }

    /// After the entities' Resources: the derived series of entities the readings no longer have (a
    /// departed device), then the holders' Resources (pods, jobs; the host for processes of no pod).
    /// Returns the points written.
    fn departed_and_holders(
        &self,
        snap: &Snapshot,
        extras: ExtraResources,
        mut holders: holders::Holders,
        ctx: &PointContext<'_>,
        next: &mut CounterState,
        sink: &mut impl FnMut(ResourceMetrics),
    ) -> usize {
        let mut data_points = 0;
        for (resource, own) in extras {
            let mut metrics = Vec::new();
            data_points += derived_metrics(
                snap,
                own,
                &self.layout,
                ctx,
                self.instruments.len(),
                next,
                &mut metrics,
            );
            if metrics.is_empty() {
                continue;
            }
            sink(self.resource_metrics(resource, metrics));
        }
        for (resource, metrics) in holders.take() {
            if metrics.is_empty() {
                continue;
            }
            data_points += metrics.iter().map(metric_points).sum::<usize>();
            sink(self.resource_metrics(resource, metrics));
        }
        data_points
    }

    /// Where each derived sample goes. A device's sample (an XID count, a health result): on its
    /// entity's Resource, once per entity and series (on :9400 a shared device repeats it per pod),
    /// or, for a device the readings no longer have, on a Resource built here. A holder's sample (a
    /// pod's GPU-seconds): onto the holder's Resource in `holders`, written here.
    fn place_derived(
        &self,
        snap: &Snapshot,
        ctx: &PointContext<'_>,
        first: usize,
        next: &mut CounterState,
    ) -> (Vec<Vec<DerivedPoint>>, ExtraResources, holders::Holders) {
        let mut placed: Vec<Vec<DerivedPoint>> = vec![Vec::new(); self.layout.resources.len()];
        let mut extras: Vec<(Resource, Vec<DerivedPoint>)> = Vec::new();
        let mut holders =
            holders::Holders::new(self.base.clone(), matches!(self.split, ResourceSplit::Host));
        if snap.derived.is_empty() {
            return (placed, extras, holders);
        }
        let mut extra_index: HashMap<Vec<(String, String)>, usize> = HashMap::new();
        let by_entity: HashMap<&Entity, usize> = snap
            .entities
            .iter()
            .enumerate()
            .map(|(i, e)| (&*e.entity, i))
            .collect();
        for (f, fam) in snap.derived.iter().enumerate() {
            if !self.sends_family(fam.info.name) {
                continue;
            }
            if fam.info.subject == DerivedSubject::Holder {
                self.place_holder_family(snap, f, ctx, first, next, &mut holders);
                continue;
            }
            // (entity, set, series labels) already given a point: a shared device's repeats.
            let mut seen: HashSet<(usize, usize, String)> = HashSet::new();
            for (k, sample) in fam.samples.iter().enumerate() {
                let in_layout = by_entity
                    .get(&*sample.entity)
                    .map(|&e| (e, 0))
                    .or_else(|| self.layout.boards.get(&*sample.entity).copied());
                if let Some((e, s)) = in_layout {
                    let labels: String = sample.labels.iter().map(|l| &*l.value).collect();
                    if !seen.insert((e, s, labels)) {
                        continue;
                    }
                    let r = self
                        .layout
                        .entities
                        .get(e)
                        .and_then(|l| l.sets.get(s))
                        .map(|set| set.resource);
                    if let Some(list) = r.and_then(|r| placed.get_mut(r)) {
                        list.push((f, k, Placed::Layout(e, s)));
                    }
                    continue;
                }
                // A device the readings no longer have: its set as the readings' would be.
                let mut attribution = Attribution::default();
                attribution.add(&sample.attributes);
                let reading = crate::snapshot::EntityReading {
                    entity: sample.entity.clone(),
                    values: crate::snapshot::EntityValues::none(),
                    attribution: Arc::new(attribution),
                };
                let set = self.naming.entity_set(&reading, Vec::new());
                let (identity, rest) = split_set(&self.split, &set);
                let key = identity_key(&identity);
                let own = SetLayout {
                    resource: 0,
                    point_attributes: rest.into_iter().map(pkv).collect(),
                    hw_point: hw_point(&identity),
                    series: series_key(&set),
                };
                if let Some(&r) = self.layout.keys.get(&key) {
                    if let Some(list) = placed.get_mut(r) {
                        list.push((f, k, Placed::Own(own)));
                    }
                    continue;
                }
                let slot = *extra_index.entry(key).or_insert_with(|| {
                    extras.push((entity_resource(&self.base, &identity), Vec::new()));
                    extras.len() - 1
                });
                if let Some((_, list)) = extras.get_mut(slot) {
                    list.push((f, k, Placed::Own(own)));
                }
            }
        }
        (placed, extras, holders)
    }

    /// A holder family's samples onto the holders' Resources: the holder's attribution is the
    /// Resource, the device's identity (no `label` rows) and the series labels the point.
    fn place_holder_family(
        &self,
        snap: &Snapshot,
        f: usize,
        ctx: &PointContext<'_>,
        first: usize,
        next: &mut CounterState,
        holders: &mut holders::Holders,
    ) {
        let Some(fam) = snap.derived.get(f) else {
            return;
        };
        let kind = match fam.info.kind {
            DerivedKind::Counter => Kind::DoubleCounter,
            DerivedKind::Gauge => Kind::Gauge,
        };
        for sample in &fam.samples {
            let Some(v) = observe(kind, &FieldValue::Double(sample.value)) else {
                continue;
            };
            let holder = self.naming.holder_attributes(&sample.attributes);
            let device = self.naming.device_attributes(&sample.entity);
            let mut point: Vec<KeyValue> = device;
            point.extend(holder.within.iter().cloned());
            if holders.host_mode() {
                point.extend(holder.resource.iter().cloned());
            }
            point.sort_by(|a, b| a.key.cmp(&b.key));
            let mut full = point.clone();
            if !holders.host_mode() {
                full.extend(holder.resource.iter().cloned());
            }
            full.sort_by(|a, b| a.key.cmp(&b.key));
            let set = SetLayout {
                resource: 0,
                point_attributes: point.iter().map(pkv).collect(),
                hw_point: Vec::new(),
                series: series_key(&full),
            };
            let set = with_series_labels(&set, &sample.labels).unwrap_or(set);
            let p = ctx.point(first + f, kind, &set, v, next);
            holders.push(
                &holder,
                holders::HolderMetric {
                    name: fam.info.otel_name,
                    description: &fam.info.help,
                    unit: fam.info.unit,
                    kind,
                    delta: ctx.delta,
                },
                p,
            );
        }
    }

    /// The request for `snap` as proto values: one ResourceMetrics per identity that has at least
    /// one point. The reference of [`DirectBuilder::build_encoded`]'s bytes.
    pub fn build(&mut self, snap: &Snapshot) -> Built {
        let mut sink = Collect {
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
        let mut sink = ProstEncode {
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

/// The proto request of the layout resources' field metrics as proto values, built by prost.
fn prost_layout_resource(
    b: &DirectBuilder,
    snap: &Snapshot,
    r: usize,
    ctx: &PointContext<'_>,
    next: &mut CounterState,
    metrics: Vec<Metric>,
) -> (Option<ResourceMetrics>, usize) {
    let (Some(resource), Some(members)) = (b.layout.resources.get(r), b.layout.members.get(r))
    else {
        return (None, 0);
    };
    let mut all = Vec::new();
    let points = b.field_metrics(snap, members, ctx, next, &mut all);
    all.extend(metrics);
    if all.is_empty() {
        return (None, points);
    }
    (Some(b.resource_metrics(resource.clone(), all)), points)
}

/// The members of a Resource that write instrument `inst`, each with its attribute set's layout, its
/// raw value and the value observed from it (members whose role does not write the instrument's
/// kind of row, or without a value, are left out): what both request writers put in points.
fn field_readings<'a>(
    b: &'a DirectBuilder,
    snap: &'a Snapshot,
    members: &'a [(usize, usize)],
    inst: &'a Instrument,
) -> impl Iterator<
    Item = (
        usize,
        usize,
        &'a SetLayout,
        &'a FieldValue,
        number_data_point::Value,
    ),
> + 'a {
    members.iter().filter_map(move |&(e, s)| {
        let reading = snap.entities.get(e)?;
        let layout = b.layout.entities.get(e)?;
        if !layout.role.writes(s, inst.per_instance) {
            return None;
        }
        let raw = reading.values.get(inst.row)?;
        let v = observe(inst.kind, raw)?;
        Some((e, s, layout.sets.get(s)?, raw, v))
    })
}

/// The request as proto values ([`DirectBuilder::build`]).
struct Collect {
    resource_metrics: Vec<ResourceMetrics>,
}

impl ResourceSink for Collect {
    fn layout_resource(
        &mut self,
        b: &DirectBuilder,
        snap: &Snapshot,
        r: usize,
        ctx: &PointContext<'_>,
        next: &mut CounterState,
        metrics: Vec<Metric>,
    ) -> usize {
        let (rm, points) = prost_layout_resource(b, snap, r, ctx, next, metrics);
        self.resource_metrics.extend(rm);
        points
    }

    fn resource(&mut self, rm: ResourceMetrics) {
        self.resource_metrics.push(rm);
    }
}

/// The request encoded by prost one resource at a time
/// ([`DirectBuilder::build_encoded_reference`]).
struct ProstEncode {
    body: Vec<u8>,
    resources: usize,
    encode_time: Duration,
}

impl ResourceSink for ProstEncode {
    fn layout_resource(
        &mut self,
        b: &DirectBuilder,
        snap: &Snapshot,
        r: usize,
        ctx: &PointContext<'_>,
        next: &mut CounterState,
        metrics: Vec<Metric>,
    ) -> usize {
        let (rm, points) = prost_layout_resource(b, snap, r, ctx, next, metrics);
        if let Some(rm) = rm {
            self.resource(rm);
        }
        points
    }

    fn resource(&mut self, rm: ResourceMetrics) {
        let t = Instant::now();
        // Field 1 of ExportMetricsServiceRequest, repeated: the request is its elements in a row.
        prost::encoding::message::encode(1, &rm, &mut self.body);
        self.resources += 1;
        self.encode_time += t.elapsed();
    }
}

/// The temporality of monotonic sums.
fn temporality(delta: bool) -> i32 {
    if delta {
        AggregationTemporality::Delta as i32
    } else {
        AggregationTemporality::Cumulative as i32
    }
}

/// The data points of a metric.
fn metric_points(m: &Metric) -> usize {
    match &m.data {
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        _ => 0,
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

impl PointContext<'_> {
    /// The point of instrument `k` for one attribute set. A counter (monotonic sum) keeps its
    /// series' state in `next`: a value below the previous one is a reset (driver reload, GPU reset)
    /// and starts a new stream whose start time is the previous point's time (OTel's reset
    /// semantics); with delta temporality the point is the difference to the previous value (after
    /// a reset, the new value), starting at the previous point.
    fn point(
        &self,
        k: usize,
        kind: Kind,
        set: &SetLayout,
        v: number_data_point::Value,
        next: &mut CounterState,
    ) -> NumberDataPoint {
        let (value, start_time) = self.value(k, kind, &set.series, v, next);
        NumberDataPoint {
            attributes: set.point_attributes.clone(),
            start_time_unix_nano: start_time,
            time_unix_nano: self.time,
            exemplars: Vec::new(),
            flags: 0,
            value: Some(value),
        }
    }

    /// The value and start time of the point of instrument `k` for `series` (see
    /// [`PointContext::point`]); a counter's state goes into `next`.
    fn value(
        &self,
        k: usize,
        kind: Kind,
        series: &Arc<str>,
        v: number_data_point::Value,
        next: &mut CounterState,
    ) -> (number_data_point::Value, u64) {
        if kind == Kind::Gauge {
            (v, self.start)
        } else {
            let key = (k, series.clone());
            let (value, start_time, stream_start) = self.step(self.previous.get(&key).copied(), v);
            next.insert(key, (v, self.time, stream_start));
            (value, start_time)
        }
    }

    /// [`PointContext::value`] of a field series, its counter state in its `slot` of the layout
    /// (gauges have none).
    #[allow(clippy::too_many_arguments)]
    fn field_value(
        &self,
        slot: Option<&std::cell::Cell<field_state::Slot>>,
        k: usize,
        kind: Kind,
        series: &Arc<str>,
        v: number_data_point::Value,
        next: &mut CounterState,
    ) -> (number_data_point::Value, u64) {
        let Some(slot) = slot.filter(|_| kind != Kind::Gauge) else {
            return self.value(k, kind, series, v, next);
        };
        let was = slot.get();
        let previous = was.state.filter(|_| was.export + 1 == self.export);
        let (value, start_time, stream_start) = self.step(previous, v);
        slot.set(field_state::Slot {
            state: Some((v, self.time, stream_start)),
            export: self.export,
        });
        (value, start_time)
    }

    /// A counter's point after `previous` (its series' last value, time and stream start): the
    /// value sent, its start time, and the stream start kept.
    fn step(
        &self,
        previous: Option<SeriesState>,
        v: number_data_point::Value,
    ) -> (number_data_point::Value, u64, u64) {
        match previous {
            Some((prev, prev_time, prev_start)) => {
                let reset = below(v, prev);
                let stream_start = if reset { prev_time } else { prev_start };
                if self.delta {
                    (difference(v, prev), prev_time, stream_start)
                } else {
                    (v, stream_start, stream_start)
                }
            }
            None => (v, self.start, self.start),
        }
    }
}

/// Where a derived sample's point goes: an attribute set of the layout, or its own.
#[derive(Clone)]
enum Placed {
    Layout(usize, usize),
    Own(SetLayout),
}

/// (derived family, sample, its set).
type DerivedPoint = (usize, usize, Placed);

/// Resources made for derived series the readings no longer have, with their points.
type ExtraResources = Vec<(Resource, Vec<DerivedPoint>)>;

/// A set with the sample's own labels (`nvidia.xid.code`) added to its point attributes and series
/// key; `None` when the sample has none to write on OTLP.
fn with_series_labels(
    set: &SetLayout,
    labels: &[crate::snapshot::SeriesLabel],
) -> Option<SetLayout> {
    let own: Vec<(&str, &crate::snapshot::SeriesLabel)> = labels
        .iter()
        .filter_map(|l| l.otel.map(|k| (k, l)))
        .collect();
    if own.is_empty() {
        return None;
    }
    let mut point_attributes = set.point_attributes.clone();
    let mut series = set.series.to_string();
    for (k, l) in own {
        let v = &*l.value;
        let kv = match v.parse::<i64>() {
            Ok(i) if l.otel_int => KeyValue::new(k, i),
            _ => KeyValue::new(k, v.to_string()),
        };
        point_attributes.push(pkv(&kv));
        series.push_str(&format!("{k}={v}\u{1}"));
    }
    point_attributes.sort_by(|a, b| a.key.cmp(&b.key));
    Some(SetLayout {
        resource: set.resource,
        point_attributes,
        hw_point: set.hw_point.clone(),
        series: Arc::from(series),
    })
}

/// The derived families' metrics of one resource (one metric per family with points), appended to
/// `metrics`. Counters are monotonic sums of doubles (delta per series with delta temporality, keyed
/// as instrument `first + family`); gauges are gauges. Returns the data points written.
fn derived_metrics(
    snap: &Snapshot,
    mut points: Vec<DerivedPoint>,
    layout: &Layout,
    ctx: &PointContext<'_>,
    first: usize,
    next: &mut CounterState,
    metrics: &mut Vec<Metric>,
) -> usize {
    points.sort_by_key(|(f, k, _)| (*f, *k));
    let mut written = 0;
    let mut i = 0;
    while i < points.len() {
        let f = points[i].0;
        let Some(fam) = snap.derived.get(f) else {
            i += 1;
            continue;
        };
        let kind = match fam.info.kind {
            DerivedKind::Counter => Kind::DoubleCounter,
            DerivedKind::Gauge => Kind::Gauge,
        };
        let mut data_points = Vec::new();
        while i < points.len() && points[i].0 == f {
            let (_, k, placed) = &points[i];
            i += 1;
            let set = match placed {
                Placed::Layout(e, s) => layout.entities.get(*e).and_then(|l| l.sets.get(*s)),
                Placed::Own(set) => Some(set),
            };
            let (Some(sample), Some(set)) = (fam.samples.get(*k), set) else {
                continue;
            };
            let v = FieldValue::Double(sample.value);
            let Some(v) = observe(kind, &v) else {
                continue;
            };
            let own = with_series_labels(set, &sample.labels);
            data_points.push(ctx.point(first + f, kind, own.as_ref().unwrap_or(set), v, next));
        }
        if data_points.is_empty() {
            continue;
        }
        written += data_points.len();
        let data = if kind == Kind::Gauge {
            Data::Gauge(Gauge { data_points })
        } else {
            Data::Sum(Sum {
                data_points,
                aggregation_temporality: temporality(ctx.delta),
                is_monotonic: true,
            })
        };
        metrics.push(Metric {
            name: fam.info.otel_name.to_string(),
            description: fam.info.help.to_string(),
            unit: fam.info.unit.to_string(),
            metadata: Vec::new(),
            data: Some(data),
        });
    }
    written
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

/// Whether a counter's value is below its previous one: a reset.
fn below(v: number_data_point::Value, prev: number_data_point::Value) -> bool {
    use number_data_point::Value::{AsDouble, AsInt};
    match (v, prev) {
        (AsInt(now), AsInt(before)) => now < before,
        (AsDouble(now), AsDouble(before)) => now < before,
        _ => false,
    }
}

/// A counter's delta; a value below the previous one is a reset (the delta is the new value).
fn difference(
    v: number_data_point::Value,
    prev: number_data_point::Value,
) -> number_data_point::Value {
    use number_data_point::Value::{AsDouble, AsInt};
    match (v, prev) {
        (AsInt(now), AsInt(before)) if now >= before => AsInt(now - before),
        (AsDouble(now), AsDouble(before)) if now >= before => AsDouble(now - before),
        (now, _) => now,
    }
}

mod field_state;
pub(super) mod holders;
mod processes;
mod semconv_metrics;
mod templates;

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod semconv_tests;
#[cfg(test)]
mod templates_tests;

#[cfg(test)]
mod tests {
    //! The direct builder on hand-made snapshots: start times across resets, encoding, layout reuse.
    use prost::Message;

    use super::*;
    use crate::config::LabelStyle;
    use crate::export::otel::naming::{OtelAttributeStyle, OtelResourceMode};
    use crate::snapshot::*;
    use opentelemetry_proto::tonic::common::v1::any_value;

    use crate::export::otel::test_fleet::{counters as test_counters, snapshot};

    fn naming(counters: &CounterSet, style: OtelAttributeStyle) -> Naming {
        Naming::new(style, LabelStyle::default(), counters)
    }

    fn base() -> Vec<KeyValue> {
        vec![
            KeyValue::new("service.name", "t"),
            KeyValue::new("host.name", "node-a"),
        ]
    }

    /// A host-mode builder of the test fleet whose exports start at t = 1000 s.
    fn host_builder(counters: &Arc<CounterSet>, temporality: Temporality) -> DirectBuilder {
        DirectBuilder::new(
            naming(counters, OtelAttributeStyle::Otel),
            ResourceSplit::Host,
            &base(),
            counters.clone(),
            temporality,
            UNIX_EPOCH + Duration::from_secs(1000),
        )
    }

    #[test]
    fn a_delta_starts_at_the_previous_export_and_a_reset_restarts() {
        let counters = test_counters();
        let mut b = host_builder(&counters, Temporality::Delta);
        let mut snap = snapshot(counters.clone(), 1, 5000);
        snap.taken_at = UNIX_EPOCH + Duration::from_secs(1010);
        let first = b.build(&snap);
        let mut snap = snapshot(counters.clone(), 2, 100);
        snap.taken_at = UNIX_EPOCH + Duration::from_secs(1020);
        let second = b.build(&snap);
        let sum = |req: &ExportMetricsServiceRequest| -> Vec<(u64, u64, i64)> {
            let m = req.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .find(|m| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
                .unwrap();
            let Some(Data::Sum(s)) = &m.data else {
                panic!()
            };
            let mut v: Vec<(u64, u64, i64)> = s
                .data_points
                .iter()
                .map(|dp| {
                    let Some(number_data_point::Value::AsInt(i)) = dp.value else {
                        panic!()
                    };
                    (
                        dp.start_time_unix_nano / 1_000_000_000,
                        dp.time_unix_nano / 1_000_000_000,
                        i,
                    )
                })
                .collect();
            v.sort();
            v
        };
        // GPU 0 is shared by two pods: its energy is one series (the entity model), not one per pod.
        assert_eq!(
            sum(&first.request),
            vec![(1000, 1010, 5000), (1000, 1010, 10000)]
        );
        assert_eq!(
            sum(&second.request),
            vec![(1010, 1020, 100), (1010, 1020, 200)],
            "lower than before: a reset, the delta is the new value"
        );
    }

    /// Counter state outlives a layout rebuild (a GPU leaves) for the series still there, and a
    /// series that sent no point in an export (its value absent) starts over.
    #[test]
    fn a_delta_survives_a_new_layout_and_a_gap_restarts_it() {
        let counters = test_counters();
        let mut b = host_builder(&counters, Temporality::Delta);
        let mut got = Vec::new();
        for (seq, energy) in [(1u64, 5000i64), (2, 7000), (3, 7500), (4, 0), (5, 9000)] {
            let mut snap = snapshot(counters.clone(), seq, energy);
            snap.taken_at = UNIX_EPOCH + Duration::from_secs(1000 + 10 * seq);
            if seq >= 2 {
                // GPU-bbb leaves: the layout is made again.
                snap.entities.remove(3);
            }
            if seq == 4 {
                snap.entities[0]
                    .values
                    .set(1, FieldValue::Absent(Absent::Blank));
            }
            let req = b.build(&snap).request;
            for dp in req.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .filter(|m| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
                .flat_map(|m| match &m.data {
                    Some(Data::Sum(s)) => s.data_points.clone(),
                    _ => Vec::new(),
                })
            {
                // GPU-aaa's series only.
                let Some(number_data_point::Value::AsInt(v)) = dp.value else {
                    panic!()
                };
                if !format!("{:?}", dp.attributes).contains("GPU-aaa") {
                    continue;
                }
                got.push((
                    seq,
                    dp.start_time_unix_nano / 1_000_000_000,
                    dp.time_unix_nano / 1_000_000_000,
                    v,
                ));
            }
        }
        assert_eq!(
            got,
            vec![
                (1, 1000, 1010, 5000),
                (2, 1010, 1020, 2000),
                (3, 1020, 1030, 500),
                (5, 1000, 1050, 9000),
            ]
        );
    }

    /// A cumulative counter that goes backwards (driver reload, GPU reset) starts a new stream: its
    /// start time moves to the previous point's time and stays there while the stream lasts.
    #[test]
    fn a_cumulative_reset_starts_a_new_stream() {
        let counters = test_counters();
        let mut b = host_builder(&counters, Temporality::Cumulative);
        let mut got = Vec::new();
        for (seq, energy) in [(1u64, 5000i64), (2, 7000), (3, 100), (4, 300)] {
            let mut snap = snapshot(counters.clone(), seq, energy);
            snap.taken_at = UNIX_EPOCH + Duration::from_secs(1000 + 10 * seq);
            let req = b.build(&snap).request;
            let m = req.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .find(|m| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
                .unwrap()
                .clone();
            let Some(Data::Sum(s)) = m.data else { panic!() };
            assert_eq!(
                s.aggregation_temporality,
                AggregationTemporality::Cumulative as i32
            );
            // GPU-aaa's series (GPU-ccc reads twice as much).
            let dp = s
                .data_points
                .iter()
                .min_by_key(|dp| match dp.value {
                    Some(number_data_point::Value::AsInt(i)) => i,
                    _ => i64::MAX,
                })
                .unwrap()
                .clone();
            let Some(number_data_point::Value::AsInt(v)) = dp.value else {
                panic!()
            };
            got.push((
                dp.start_time_unix_nano / 1_000_000_000,
                dp.time_unix_nano / 1_000_000_000,
                v,
            ));
        }
        assert_eq!(
            got,
            vec![
                (1000, 1010, 5000),
                (1000, 1020, 7000),
                (1020, 1030, 100),
                (1020, 1040, 300)
            ]
        );
    }

    #[test]
    fn encoding_one_resource_at_a_time_gives_the_request_bytes() {
        let counters = test_counters();
        for per_entity in [true, false] {
            let n = naming(&counters, OtelAttributeStyle::Otel);
            let split = n.resource_split(if per_entity {
                OtelResourceMode::PerEntity
            } else {
                OtelResourceMode::Host
            });
            let mut b = DirectBuilder::new(
                n,
                split,
                &base(),
                counters.clone(),
                Temporality::Cumulative,
                SystemTime::now(),
            );
            let snap = snapshot(counters.clone(), 1, 5000);
            let built = b.build(&snap);
            let encoded = b.build_encoded(&snap);
            assert_eq!(encoded.body, built.request.encode_to_vec());
            assert_eq!(encoded.data_points, built.data_points);
            assert_eq!(encoded.resources, built.request.resource_metrics.len());
            assert_eq!(
                ExportMetricsServiceRequest::decode(&encoded.body[..]).unwrap(),
                built.request
            );
        }
    }

    #[test]
    fn layout_is_reused_until_an_entity_changes() {
        let counters = test_counters();
        let n = naming(&counters, OtelAttributeStyle::Otel);
        let split = n.resource_split(OtelResourceMode::PerEntity);
        let mut b = DirectBuilder::new(
            n,
            split,
            &base(),
            counters.clone(),
            Temporality::Cumulative,
            SystemTime::now(),
        );
        let snap = snapshot(counters.clone(), 1, 5000);
        let first = b.build(&snap).request;
        let resources = b.layout.resources.as_ptr();
        // Same entities (same Arcs), new values: the cached resources stay.
        let mut next = snap.clone();
        next.seq = 2;
        next.entities[0].values.set(0, FieldValue::Int(1500));
        let second = b.build(&next).request;
        assert_eq!(b.layout.resources.as_ptr(), resources);
        assert_eq!(first.resource_metrics.len(), second.resource_metrics.len());
        // A new driver version (a label row) changes the resources.
        let mut next = next.clone();
        next.entities[0]
            .values
            .set(4, FieldValue::Text("560.2".into()));
        let third = b.build(&next).request;
        let versions: HashSet<String> = third
            .resource_metrics
            .iter()
            .filter_map(|rm| {
                rm.resource
                    .as_ref()?
                    .attributes
                    .iter()
                    .find(|kv| kv.key == "nvidia.driver.version")
                    .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                        any_value::Value::StringValue(s) => Some(s.clone()),
                        _ => None,
                    })
            })
            .collect();
        assert!(versions.contains("560.2"), "{versions:?}");
    }
}
