//! What a render keeps between snapshots: the families of the counter set with their header text,
//! and each entity's label strings (one per attribute set written on :9400) with what they were
//! built from, so that a render only copies strings and formats numbers.

use std::sync::Arc;

use super::values::ValueStyle;
use crate::counters::{CounterSet, MetricKind};
use crate::snapshot::{Attribution, Entity, EntityReading, FieldValue, HostInfo};
use crate::telemetry::exposition::{escape_help, push_label};

/// The families of a counter set in output order (by field id, then row), the first row of each metric
/// name, label rows left out — with their header text.
pub(super) fn families(counters: &CounterSet) -> Vec<FamilyLayout> {
    let mut order: Vec<usize> = (0..counters.rows.len()).collect();
    order.sort_by_key(|&i| (counters.rows[i].field.id, i));
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for i in order {
        let row = &counters.rows[i];
        if row.kind == MetricKind::Label || seen.contains(&row.name.as_str()) {
            continue;
        }
        seen.push(&row.name);
        let mut header = String::with_capacity(row.name.len() * 2 + row.help.len() + 24);
        header.push_str("# HELP ");
        header.push_str(&row.name);
        header.push(' ');
        escape_help(&row.help, &mut header);
        header.push_str("\n# TYPE ");
        header.push_str(&row.name);
        header.push(' ');
        header.push_str(row.kind.as_str());
        header.push('\n');
        let mut open = String::with_capacity(row.name.len() + 1);
        open.push_str(&row.name);
        open.push('{');
        out.push(FamilyLayout {
            row: i,
            style: ValueStyle::of(row.field.value_type),
            xid: row.field.id == crate::fields::xid::XID_FIELD_ID,
            header,
            open,
        });
    }
    out
}

/// Family headers and per-entity label strings of the last render.
#[derive(Default)]
pub(super) struct RenderCache {
    /// The counter set the families were computed from.
    pub(super) counters: Option<Arc<CounterSet>>,
    pub(super) host: Option<Arc<HostInfo>>,
    pub(super) families: Vec<FamilyLayout>,
    /// Rows of kind `label`, in row order.
    pub(super) label_rows: Vec<usize>,
    pub(super) entities: Vec<EntityLabels>,
}

/// One metric family: the row whose values it carries and its ready-made text.
pub(super) struct FamilyLayout {
    pub(super) row: usize,
    /// How its values are written: as dcgm-exporter writes the field's DCGM type.
    pub(super) style: ValueStyle,
    /// `DCGM_FI_DEV_XID_ERRORS` (whatever its CSV name): each sample also carries `err_code` and
    /// `err_msg`, the code's meaning, sorted among the attributes as dcgm-exporter does.
    pub(super) xid: bool,
    /// `# HELP …\n# TYPE …\n`.
    pub(super) header: String,
    /// `name{`.
    pub(super) open: String,
}

/// The label strings of one entity and what they were built from.
pub(super) struct EntityLabels {
    pub(super) entity: Arc<Entity>,
    pub(super) attribution: Arc<Attribution>,
    /// Text of each label row (in `RenderCache::label_rows` order) when the strings were built.
    pub(super) label_values: Vec<Option<Box<str>>>,
    /// One per attribute set written on :9400 (`Attribution::exposition_sets`; one when unattributed):
    /// `labels} `, ready to follow `name{`.
    pub(super) sets: Vec<String>,
    /// The index of each of `sets` in `Attribution::sets` (where `PerSetValues` are aligned).
    pub(super) set_index: Vec<usize>,
    /// The identity part of the sets, and each set's sorted label-class and attribute-class pairs:
    /// for families whose samples add attributes of their own (XID).
    pub(super) base: String,
    pub(super) tails: Vec<SetTail>,
    /// The XID family's label strings for the last code seen (`labels} `, one per set): rebuilt only when
    /// the code changes, which is rare.
    pub(super) xid: Option<(i64, Vec<String>)>,
    /// `labels} ` of the entity's series without attribution, for fields written per attribute set
    /// (`snapshot::PerSetValues`): made when first needed.
    pub(super) device: Option<String>,
}

/// What follows the identity labels in one series: the `label` fields with the label-class attributes
/// (pod labels), sorted by name; then the attribute-class ones (pod, namespace, hpc_job, ...), sorted.
#[derive(Debug, Clone, Default)]
pub(super) struct SetTail {
    pub(super) labels: Vec<(Box<str>, Box<str>)>,
    pub(super) attributes: Vec<(Box<str>, Box<str>)>,
}

impl SetTail {
    pub(super) fn write(&self, out: &mut String, first: &mut bool, extra: &[(&str, &str)]) {
        for (k, v) in &self.labels {
            push_label(out, first, k, v);
        }
        if extra.is_empty() {
            for (k, v) in &self.attributes {
                push_label(out, first, k, v);
            }
            return;
        }
        let mut all: Vec<(&str, &str)> = self
            .attributes
            .iter()
            .map(|(k, v)| (&**k, &**v))
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .chain(extra.iter().copied())
            .collect();
        all.sort();
        for (k, v) in all {
            push_label(out, first, k, v);
        }
    }
}

impl EntityLabels {
    pub(super) fn matches(&self, e: &EntityReading, label_rows: &[usize]) -> bool {
        (Arc::ptr_eq(&self.entity, &e.entity) || self.entity == e.entity)
            && (Arc::ptr_eq(&self.attribution, &e.attribution) || self.attribution == e.attribution)
            && label_rows.len() == self.label_values.len()
            && label_rows
                .iter()
                .zip(&self.label_values)
                .all(|(&i, old)| e.values.get(i).and_then(FieldValue::as_text) == old.as_deref())
    }
}
