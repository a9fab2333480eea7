//! One export's walk over the Resources: each layout Resource's field metrics and what follows them
//! (derived families, semantic-convention metrics, holders' points in host mode, distributions),
//! then departed devices and holders, handed one Resource at a time to a [`ResourceSink`]: the proto
//! values of [`DirectBuilder::build`], prost's encoding of the reference path, or the template
//! writer.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::derived::{derived_metrics, ExtraResources};
use super::readings::field_readings;
use super::{
    holders, nanos, processes, semconv_metrics, temporality, CounterState, DirectBuilder,
    Instrument, Kind, PointContext, ResourceSink,
};
use crate::export::otel::naming::ResourceSplit;
use crate::export::otel::otlp::proto::pkv;
use crate::snapshot::Snapshot;

impl DirectBuilder {
    /// A `ResourceMetrics` of one scope.
    pub(super) fn resource_metrics(
        &self,
        resource: Resource,
        metrics: Vec<Metric>,
    ) -> ResourceMetrics {
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
    pub(super) fn for_each_resource(
        &mut self,
        snap: &Snapshot,
        sink: &mut impl ResourceSink,
    ) -> usize {
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
            data_points += super::super::distributions::write(
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
    pub(super) fn field_points(
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

/// The request as proto values ([`DirectBuilder::build`]).
pub(super) struct Collect {
    pub(super) resource_metrics: Vec<ResourceMetrics>,
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
pub(super) struct ProstEncode {
    pub(super) body: Vec<u8>,
    pub(super) resources: usize,
    pub(super) encode_time: Duration,
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

/// The data points of a metric.
pub(super) fn metric_points(m: &Metric) -> usize {
    match &m.data {
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        _ => 0,
    }
}
