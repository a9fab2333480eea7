//! The cached per-entity layout of a request: each entity's role under the MIG entity model, its
//! attribute sets split into Resource identity and data-point attributes, the Resources themselves
//! and their templates. Kept between exports and rebuilt only when the entities, their attribution,
//! the label-row values or the counter set change ([`DirectBuilder::prepare`]): the per-entity work
//! is not redone per export.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue as PKeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::instruments::instruments;
use super::{field_state, templates, DirectBuilder, EntityLayout, Layout, Role, SetLayout};
use crate::counters::MetricKind;
use crate::export::otel::naming::ResourceSplit;
use crate::export::otel::otlp::proto::{entity_resource, pkv};
use crate::snapshot::{Entity, EntityKind, Snapshot};

/// An attribute set split into its Resource identity (sorted key/value pairs) and the rest.
pub(super) fn split_set<'a>(
    split: &ResourceSplit,
    set: &'a [KeyValue],
) -> (Vec<&'a KeyValue>, Vec<&'a KeyValue>) {
    set.iter()
        .partition(|kv| split.is_identity(kv.key.as_str()))
}

pub(super) fn identity_key(identity: &[&KeyValue]) -> Vec<(String, String)> {
    identity
        .iter()
        .map(|kv| (kv.key.as_str().to_string(), kv.value.as_str().into_owned()))
        .collect()
}

pub(super) fn series_key(set: &[KeyValue]) -> Arc<str> {
    let series: String = set
        .iter()
        .map(|kv| format!("{}={}\u{1}", kv.key.as_str(), kv.value.as_str()))
        .collect();
    Arc::from(series)
}

/// The `hw.id` / `hw.type` of an identity, as data-point attributes.
pub(super) fn hw_point(identity: &[&KeyValue]) -> Vec<PKeyValue> {
    identity
        .iter()
        .filter(|kv| matches!(kv.key.as_str(), "hw.id" | "hw.type"))
        .map(|kv| pkv(kv))
        .collect()
}

impl DirectBuilder {
    /// Label-row attributes of every entity (an NvLink takes its GPU's, a switch port its switch's, a
    /// core its CPU's), index-aligned with `snap.entities`.
    pub(super) fn labels(&self, snap: &Snapshot) -> Vec<Vec<KeyValue>> {
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
    pub(super) fn prepare(&mut self, snap: &Snapshot) {
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
}
