//! Bringing the render cache in line with a snapshot: the families again for a new counter set or
//! host, an entity's label strings again only when its identity, attribution or a `label`-field
//! value changed.

use std::sync::Arc;

use super::label_cache::{families, EntityLabels, RenderCache, SetTail};
use super::Renderer;
use crate::counters::MetricKind;
use crate::export::entity_labels::identity_labels;
use crate::snapshot::{EntityReading, FieldValue, HostInfo, Placement, Snapshot};
use crate::telemetry::exposition::label_names;

impl Renderer {
    /// Bring the cache in line with `snap`: rebuild what its counters, host and entities changed.
    pub(super) fn refresh(&self, cache: &mut RenderCache, snap: &Snapshot) {
        let same_counters = cache
            .counters
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, &snap.counters) || **c == *snap.counters);
        if !same_counters {
            cache.families = families(&snap.counters);
            cache.label_rows = (0..snap.counters.rows.len())
                .filter(|&i| snap.counters.rows[i].kind == MetricKind::Label)
                .collect();
            cache.counters = Some(snap.counters.clone());
            cache.entities.clear();
        }
        let same_host = cache
            .host
            .as_ref()
            .is_some_and(|h| Arc::ptr_eq(h, &snap.host) || **h == *snap.host);
        if !same_host {
            cache.host = Some(snap.host.clone());
            cache.entities.clear();
        }
        cache.entities.truncate(snap.entities.len());
        for (i, e) in snap.entities.iter().enumerate() {
            if cache
                .entities
                .get(i)
                .is_some_and(|c| c.matches(e, &cache.label_rows))
            {
                continue;
            }
            let (base, tails) = self.labels_of(e, &snap.host, snap);
            let sets = tails
                .iter()
                .map(|tail| {
                    let mut s = base.clone();
                    let mut first = s.is_empty();
                    tail.write(&mut s, &mut first, &[]);
                    s.push_str("} ");
                    s
                })
                .collect();
            let built = EntityLabels {
                entity: e.entity.clone(),
                attribution: e.attribution.clone(),
                set_index: e.attribution.exposition_sets().map(|(i, _)| i).collect(),
                label_values: cache
                    .label_rows
                    .iter()
                    .map(|&r| e.values.get(r).and_then(FieldValue::as_text).map(Box::from))
                    .collect(),
                sets,
                base,
                tails,
                xid: None,
                device: None,
            };
            if i < cache.entities.len() {
                cache.entities[i] = built;
            } else {
                cache.entities.push(built);
            }
        }
    }

    /// The labels of one entity: its identity and host label, and per attribute set (one when
    /// unattributed) what follows them.
    fn labels_of(
        &self,
        e: &EntityReading,
        host: &HostInfo,
        snap: &Snapshot,
    ) -> (String, Vec<SetTail>) {
        let base = identity_labels(&self.style, &e.entity, host.hostname.as_deref());
        self.tails_of(e, base, snap)
    }

    /// `labels} ` of an entity's series without attribution: its identity labels (`base`) and
    /// `label`-type fields.
    pub(super) fn device_labels(&self, e: &EntityReading, base: &str, snap: &Snapshot) -> String {
        let bare = EntityReading {
            entity: e.entity.clone(),
            values: e.values.clone(),
            attribution: Arc::default(),
        };
        let (mut s, tails) = self.tails_of(&bare, base.to_string(), snap);
        let mut first = s.is_empty();
        if let Some(tail) = tails.first() {
            tail.write(&mut s, &mut first, &[]);
        }
        s.push_str("} ");
        s
    }

    /// Per attribute set of an entity written on :9400, what follows its identity labels.
    fn tails_of(&self, e: &EntityReading, base: String, snap: &Snapshot) -> (String, Vec<SetTail>) {
        // label-type fields (first row per name)
        let rows = &snap.counters.rows;
        let mut label_fields: Vec<(&str, &str)> = e
            .values
            .iter()
            .filter_map(|(row, v)| Some((rows.get(row)?, v)))
            .filter(|(c, _)| c.kind == MetricKind::Label)
            .filter_map(|(c, v)| v.as_text().map(|t| (c.name.as_str(), t)))
            .collect();
        label_fields.sort();
        label_fields.dedup_by(|a, b| a.0 == b.0);
        let old = self.style.use_old_namespace;
        // An attribute or label of an identity label's name (a pod label `gpu`, `device`, `Hostname`)
        // is left out: a second label of the same name makes Prometheus reject the whole scrape.
        let identity = label_names(&base);
        let tails = e
            .attribution
            .exposition_sets()
            .map(|(_, set)| {
                let mut attributes: Vec<(Box<str>, Box<str>)> = set
                    .iter()
                    .filter(|a| a.key.placement == Placement::Attributes)
                    .map(|a| (a.key.prometheus_name(old).into(), (*a.value).into()))
                    .filter(|(k, _): &(Box<str>, Box<str>)| !identity.contains(&&**k))
                    .collect();
                attributes.sort();
                // A label-class name equal to an attribute's: the attribute wins, as in dcgm-exporter.
                let taken =
                    |k: &str| attributes.iter().any(|(a, _)| &**a == k) || identity.contains(&k);
                let mut labels: Vec<(Box<str>, Box<str>)> = label_fields
                    .iter()
                    .map(|(k, v)| (Box::from(*k), Box::from(*v)))
                    .chain(
                        set.iter()
                            .filter(|a| a.key.placement == Placement::Labels)
                            .map(|a| (a.key.prometheus_name(old).into(), (*a.value).into())),
                    )
                    .filter(|(k, _)| !taken(k))
                    .collect();
                labels.sort();
                labels.dedup_by(|a, b| a.0 == b.0);
                SetTail { labels, attributes }
            })
            .collect();
        (base, tails)
    }
}
