//! The OTLP request written from pre-encoded templates, as `:9400` is rendered from cached label
//! strings: the protobuf bytes of each layout Resource, of the scope, of each metric's constant part
//! (name, description, unit) and of each attribute set's data-point attributes are encoded once, when
//! the layout (or the counter set) is rebuilt, and copied into every export. An export computes each
//! message's length first (a data point is fixed-size but for its cached attributes), then writes
//! tags, lengths, timestamps and values around the copied bytes: no proto value is built for a field
//! reading, and nothing is allocated per point once the buffers have grown.
//!
//! What is not a field reading — derived families, semantic-convention metrics, holders' points,
//! the sampled fields' distributions — arrives as prost `Metric`s (or whole `ResourceMetrics`)
//! and is encoded by prost into the same request. The bytes are prost's encoding of the same request
//! ([`super::DirectBuilder::build`]): fields in tag order, defaults (a zero time, an empty schema
//! URL) left out, a value always written (a oneof); the tests compare both byte for byte.

use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::KeyValue as PKeyValue;
use opentelemetry_proto::tonic::metrics::v1::{number_data_point, Metric, ResourceMetrics};
use prost::encoding::{encode_varint, encoded_len_varint};
use prost::Message;

use super::readings::field_readings;
use super::{
    temporality, CounterState, DirectBuilder, EntityLayout, Instrument, Kind, PointContext,
    ResourceSink,
};
use crate::export::otel::naming::Naming;
use crate::export::otel::otlp::proto::pkv;
use crate::snapshot::{FieldValue, Snapshot};

/// Wire types.
const LEN: u64 = 2;
const FIXED64: u64 = 1;
const VARINT: u64 = 0;

const fn tag(field: u64, wire: u64) -> u8 {
    // Every tag written here is below 16: one byte.
    ((field << 3) | wire) as u8
}

/// `ExportMetricsServiceRequest.resource_metrics`, `ResourceMetrics.resource`,
/// `ScopeMetrics.scope`, `Gauge`/`Sum.data_points`.
const TAG_1_LEN: u8 = tag(1, LEN);
/// `ResourceMetrics.scope_metrics`, `ScopeMetrics.metrics`.
const TAG_2_LEN: u8 = tag(2, LEN);
/// `Metric.gauge`.
const TAG_GAUGE: u8 = tag(5, LEN);
/// `Metric.sum`.
const TAG_SUM: u8 = tag(7, LEN);
/// `Sum.aggregation_temporality`.
const TAG_TEMPORALITY: u8 = tag(2, VARINT);
/// `Sum.is_monotonic`.
const TAG_MONOTONIC: u8 = tag(3, VARINT);
/// `NumberDataPoint.start_time_unix_nano`, `time_unix_nano`, `as_double`, `as_int`, `attributes`.
const TAG_START: u8 = tag(2, FIXED64);
const TAG_TIME: u8 = tag(3, FIXED64);
const TAG_DOUBLE: u8 = tag(4, FIXED64);
const TAG_INT: u8 = tag(6, FIXED64);
const TAG_ATTRIBUTE: u32 = 7;

/// The encoded templates of one layout, made with it.
#[derive(Default)]
pub(super) struct Templates {
    /// Per resource: `ResourceMetrics.resource` (tag, length, `Resource`).
    resources: Vec<Vec<u8>>,
    /// Per entity, per attribute set: its data-point attributes (`NumberDataPoint.attributes`
    /// entries).
    sets: Vec<Vec<Vec<u8>>>,
}

impl Templates {
    pub(super) fn new(
        resources: &[opentelemetry_proto::tonic::resource::v1::Resource],
        entities: &[EntityLayout],
    ) -> Templates {
        Templates {
            resources: resources
                .iter()
                .map(|r| {
                    let mut out = Vec::new();
                    prost::encoding::message::encode(1, r, &mut out);
                    out
                })
                .collect(),
            sets: entities
                .iter()
                .map(|e| {
                    e.sets
                        .iter()
                        .map(|s| attributes(&s.point_attributes))
                        .collect()
                })
                .collect(),
        }
    }
}

/// Attributes as `NumberDataPoint.attributes` entries.
fn attributes(kvs: &[PKeyValue]) -> Vec<u8> {
    let mut out = Vec::new();
    for kv in kvs {
        prost::encoding::message::encode(TAG_ATTRIBUTE, kv, &mut out);
    }
    out
}

/// A metric's constant part: `Metric.name`, `description`, `unit`.
pub(super) fn metric_head(name: &str, description: &str, unit: &str) -> Vec<u8> {
    Metric {
        name: name.to_string(),
        description: description.to_string(),
        unit: unit.to_string(),
        metadata: Vec::new(),
        data: None,
    }
    .encode_to_vec()
}

/// Where a point's attributes are: its set's template, or bytes of its own in
/// [`Writer::owned`] (a value that brings attributes, XID).
#[derive(Clone)]
enum Attributes {
    Set(usize, usize),
    Own(Range<usize>),
}

/// One field point of the resource being written.
#[derive(Clone)]
struct Point {
    start: u64,
    value: number_data_point::Value,
    attributes: Attributes,
    /// Its `NumberDataPoint`'s length.
    len: usize,
}

/// One field metric of the resource being written.
struct Field {
    /// The instrument.
    k: usize,
    /// Its points in [`Writer::points`].
    points: Range<usize>,
    /// Its `Gauge` / `Sum` message's length, and its `Metric`'s.
    data_len: usize,
    len: usize,
}

/// Writes the request; its buffers are kept between exports.
#[derive(Default)]
pub(super) struct Writer {
    body: Vec<u8>,
    resources: usize,
    encode_time: Duration,
    /// The resource's field points, and its field metrics.
    points: Vec<Point>,
    metrics: Vec<Field>,
    /// Attributes of points that have their own.
    owned: Vec<u8>,
    /// Per (entity, set, instrument) whose value brings attributes: the last value and the point's
    /// attributes encoded; emptied when the layout is rebuilt.
    by_value: HashMap<(usize, usize, usize), (FieldValue, Vec<u8>)>,
    /// The layout `by_value` belongs to.
    generation: u64,
    /// The resource's other metrics, encoded (`ScopeMetrics.metrics` entries).
    others: Vec<u8>,
    /// `ScopeMetrics.scope` and the schema URL field (empty without one), of this export.
    scope: Vec<u8>,
    schema: Vec<u8>,
    time: u64,
}

impl Writer {
    /// Start an export into `body`.
    pub(super) fn start(&mut self, b: &DirectBuilder, body: Vec<u8>) {
        self.body = body;
        self.resources = 0;
        self.encode_time = Duration::ZERO;
        self.scope.clear();
        prost::encoding::message::encode(1, &b.scope, &mut self.scope);
        self.schema.clear();
        prost::encoding::string::encode(3, &b.schema_url, &mut self.schema);
        if b.schema_url.is_empty() {
            self.schema.clear();
        }
    }

    /// The request, the resources written and the time spent writing.
    pub(super) fn finish(&mut self) -> (Vec<u8>, usize, Duration) {
        (
            std::mem::take(&mut self.body),
            self.resources,
            self.encode_time,
        )
    }

    /// The field points of layout resource `r`, instrument by instrument, as
    /// [`DirectBuilder::field_points`] makes them. Returns the points.
    fn collect(
        &mut self,
        b: &DirectBuilder,
        snap: &Snapshot,
        members: &[(usize, usize)],
        ctx: &PointContext<'_>,
        next: &mut CounterState,
    ) -> usize {
        self.points.clear();
        self.metrics.clear();
        self.owned.clear();
        for (k, inst) in b.instruments.iter().enumerate() {
            let first = self.points.len();
            for (e, s, set, raw, v) in field_readings(b, snap, members, inst) {
                let slot = inst.counter.and_then(|c| b.layout.fields.slot(e, s, c));
                let (value, start) = ctx.field_value(slot, k, inst.kind, &set.series, v, next);
                let attributes = if !Naming::has_value_attributes(inst.field_id) {
                    Attributes::Set(e, s)
                } else {
                    self.value_attributes(b, (e, s, k), raw, &set.point_attributes)
                };
                let mut point = Point {
                    start,
                    value,
                    attributes,
                    len: 0,
                };
                point.len = self.point_len(b, &point);
                self.points.push(point);
            }
            if self.points.len() > first {
                self.metrics
                    .push(self.field(inst, k, first..self.points.len()));
            }
        }
        self.points.len()
    }

    /// A field metric's lengths, its points collected.
    fn field(&self, inst: &Instrument, k: usize, points: Range<usize>) -> Field {
        let mut data_len = 0;
        for p in self.points.get(points.clone()).unwrap_or(&[]) {
            data_len += 1 + encoded_len_varint(p.len as u64) + p.len;
        }
        if inst.kind != Kind::Gauge {
            // Temporality (1 or 2: one byte) and `is_monotonic: true`.
            data_len += 2 + 2;
        }
        Field {
            k,
            points,
            data_len,
            len: inst.head.len() + 1 + encoded_len_varint(data_len as u64) + data_len,
        }
    }

    /// The attributes of a point whose value brings some of its own (XID: the code and its
    /// meaning), kept per series while its value stays the same.
    fn value_attributes(
        &mut self,
        b: &DirectBuilder,
        series: (usize, usize, usize),
        raw: &FieldValue,
        set: &[PKeyValue],
    ) -> Attributes {
        if let Some((value, bytes)) = self.by_value.get(&series) {
            if value == raw {
                let from = self.owned.len();
                self.owned.extend_from_slice(bytes);
                return Attributes::Own(from..self.owned.len());
            }
        }
        let own = b
            .naming
            .value_attributes(b.instruments.get(series.2).map_or(0, |i| i.field_id), raw);
        let bytes = if own.is_empty() {
            attributes(set)
        } else {
            let mut all = set.to_vec();
            all.extend(own.iter().map(pkv));
            all.sort_by(|a, b| a.key.cmp(&b.key));
            attributes(&all)
        };
        let from = self.owned.len();
        self.owned.extend_from_slice(&bytes);
        self.by_value.insert(series, (raw.clone(), bytes));
        Attributes::Own(from..self.owned.len())
    }

    /// A point's attribute bytes.
    fn point_attributes<'a>(&'a self, b: &'a DirectBuilder, p: &Point) -> &'a [u8] {
        match &p.attributes {
            Attributes::Set(e, s) => b
                .layout
                .templates
                .sets
                .get(*e)
                .and_then(|sets| sets.get(*s))
                .map_or(&[][..], Vec::as_slice),
            Attributes::Own(range) => self.owned.get(range.clone()).unwrap_or(&[]),
        }
    }

    fn point_len(&self, b: &DirectBuilder, p: &Point) -> usize {
        let times = if p.start != 0 { 9 } else { 0 } + if self.time != 0 { 9 } else { 0 };
        times + 9 + self.point_attributes(b, p).len()
    }

    /// Write layout resource `r`: its cached Resource and scope, the field metrics collected, then
    /// the encoded others.
    fn write(&mut self, b: &DirectBuilder, r: usize) {
        let resource = b
            .layout
            .templates
            .resources
            .get(r)
            .map_or(&[][..], Vec::as_slice);
        let mut scope_len = self.scope.len() + self.others.len() + self.schema.len();
        for m in &self.metrics {
            scope_len += 1 + encoded_len_varint(m.len as u64) + m.len;
        }
        let rm_len = resource.len()
            + 1
            + encoded_len_varint(scope_len as u64)
            + scope_len
            + self.schema.len();
        let mut out = std::mem::take(&mut self.body);
        out.reserve(1 + encoded_len_varint(rm_len as u64) + rm_len);
        out.push(TAG_1_LEN);
        encode_varint(rm_len as u64, &mut out);
        out.extend_from_slice(resource);
        out.push(TAG_2_LEN);
        encode_varint(scope_len as u64, &mut out);
        out.extend_from_slice(&self.scope);
        for m in &self.metrics {
            self.write_metric(b, m, &mut out);
        }
        out.extend_from_slice(&self.others);
        out.extend_from_slice(&self.schema);
        out.extend_from_slice(&self.schema);
        self.body = out;
        self.resources += 1;
    }

    fn write_metric(&self, b: &DirectBuilder, m: &Field, out: &mut Vec<u8>) {
        let Some(inst) = b.instruments.get(m.k) else {
            return;
        };
        out.push(TAG_2_LEN);
        encode_varint(m.len as u64, out);
        out.extend_from_slice(&inst.head);
        out.push(if inst.kind == Kind::Gauge {
            TAG_GAUGE
        } else {
            TAG_SUM
        });
        encode_varint(m.data_len as u64, out);
        for p in self.points.get(m.points.clone()).unwrap_or(&[]) {
            out.push(TAG_1_LEN);
            encode_varint(p.len as u64, out);
            if p.start != 0 {
                out.push(TAG_START);
                out.extend_from_slice(&p.start.to_le_bytes());
            }
            if self.time != 0 {
                out.push(TAG_TIME);
                out.extend_from_slice(&self.time.to_le_bytes());
            }
            match p.value {
                number_data_point::Value::AsDouble(d) => {
                    out.push(TAG_DOUBLE);
                    out.extend_from_slice(&d.to_le_bytes());
                }
                number_data_point::Value::AsInt(i) => {
                    out.push(TAG_INT);
                    out.extend_from_slice(&i.to_le_bytes());
                }
            }
            out.extend_from_slice(self.point_attributes(b, p));
        }
        if inst.kind != Kind::Gauge {
            out.push(TAG_TEMPORALITY);
            encode_varint(temporality(b.delta) as u64, out);
            out.push(TAG_MONOTONIC);
            out.push(1);
        }
    }
}

impl ResourceSink for Writer {
    fn layout_resource(
        &mut self,
        b: &DirectBuilder,
        snap: &Snapshot,
        r: usize,
        ctx: &PointContext<'_>,
        next: &mut CounterState,
        metrics: Vec<Metric>,
    ) -> usize {
        let Some(members) = b.layout.members.get(r) else {
            return 0;
        };
        if self.generation != b.layout.generation {
            self.by_value.clear();
            self.generation = b.layout.generation;
        }
        self.time = ctx.time;
        let points = self.collect(b, snap, members, ctx, next);
        let t = Instant::now();
        self.others.clear();
        for m in &metrics {
            prost::encoding::message::encode(2, m, &mut self.others);
        }
        if !self.metrics.is_empty() || !metrics.is_empty() {
            self.write(b, r);
        }
        self.encode_time += t.elapsed();
        points
    }

    fn resource(&mut self, rm: ResourceMetrics) {
        let t = Instant::now();
        prost::encoding::message::encode(1, &rm, &mut self.body);
        self.resources += 1;
        self.encode_time += t.elapsed();
    }
}
