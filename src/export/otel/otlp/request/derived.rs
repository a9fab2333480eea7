//! Where derived samples (XID counts, health results, a pod's GPU-seconds) go in a request: onto
//! their entity's layout set, onto a Resource made for a device the readings no longer have, or
//! onto a holder's Resource; and the derived families' metrics of one Resource.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, Gauge, Metric, Sum};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::layout::{hw_point, identity_key, series_key, split_set};
use super::readings::observe;
use super::{
    holders, temporality, CounterState, DirectBuilder, Kind, Layout, PointContext, SetLayout,
};
use crate::export::otel::naming::ResourceSplit;
use crate::export::otel::otlp::proto::{entity_resource, pkv};
use crate::snapshot::{Attribution, DerivedKind, DerivedSubject, Entity, FieldValue, Snapshot};

impl DirectBuilder {
    /// Where each derived sample goes. A device's sample (an XID count, a health result): on its
    /// entity's Resource, once per entity and series (on :9400 a shared device repeats it per pod),
    /// or, for a device the readings no longer have, on a Resource built here. A holder's sample (a
    /// pod's GPU-seconds): onto the holder's Resource in `holders`, written here.
    pub(super) fn place_derived(
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
}

/// Where a derived sample's point goes: an attribute set of the layout, or its own.
#[derive(Clone)]
pub(super) enum Placed {
    Layout(usize, usize),
    Own(SetLayout),
}

/// (derived family, sample, its set).
type DerivedPoint = (usize, usize, Placed);

/// Resources made for derived series the readings no longer have, with their points.
pub(super) type ExtraResources = Vec<(Resource, Vec<DerivedPoint>)>;

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
pub(super) fn derived_metrics(
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
