//! The attribute sets of the OTel side: each entity's identity ([`super::identity`], in either
//! attribute style) with its `label`-row attributes and its attribution, what goes into a Resource, the
//! attributes a data point takes from its value (XID), and the host-level base resource.
//!
//! Every observed data point carries its entity's identity attributes. In `per-entity` resource mode the
//! OTLP exporter moves them (all but the few [`ResourceSplit`] keeps on the points) into one Resource
//! per distinct identity (GPU, MIG instance, switch, CPU, and each attribution set: pod, job, whatever
//! an enricher added); in `host` mode they stay on the data points under the single host Resource.
//!
//! Resource attribute precedence, lowest first: built-in (`service.name=dcgm-otel`, `service.version`,
//! `host.name` (or the dcgm host label), `k8s.node.name`, `telemetry.sdk.*`) < `OTEL_RESOURCE_ATTRIBUTES`
//! < `OTEL_SERVICE_NAME` < `--otel-service-name` < the entity's own attributes (per-entity mode).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use opentelemetry::{Key, KeyValue, StringValue, Value};

use clap::ValueEnum;

use super::identity::{self, IdentityStyle};
use crate::config::LabelStyle;
use crate::counters::{CounterSet, MetricKind};
use crate::snapshot::{
    AttributeKey, Attribution, EntityKind, EntityReading, EntityValues, Snapshot,
};

/// Attribute names on OTLP resources and data points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtelAttributeStyle {
    /// Semantic-convention names (`hw.id`, `k8s.pod.name`, `nvidia.*`).
    Otel,
    /// dcgm-exporter's label names (`gpu`, `UUID`, `modelName`, `pod`, ...).
    Dcgm,
}

/// How OTLP resources are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OtelResourceMode {
    /// One Resource per GPU / MIG instance (and per attribution set: pod, job).
    PerEntity,
    /// One host Resource; entity identity as data-point attributes.
    Host,
}

/// Which attributes of a data point move into its Resource. Per entity, everything identifies the
/// resource but the few attributes that tell points of one entity apart (the NvLink index, the XID
/// code): attribution attributes an enricher adds are identity without being listed anywhere.
#[derive(Debug, Clone)]
pub enum ResourceSplit {
    /// Host mode: every attribute stays on the data points.
    Host,
    /// Per-entity mode: all but `point_keys` go into the resource.
    PerEntity { point_keys: HashSet<String> },
}

impl ResourceSplit {
    pub fn is_identity(&self, key: &str) -> bool {
        match self {
            ResourceSplit::Host => false,
            ResourceSplit::PerEntity { point_keys } => !point_keys.contains(key),
        }
    }
}

/// The attributes a data point of `DCGM_FI_DEV_XID_ERRORS` takes from its value: the code and its
/// meaning (never identity: they stay on the points).
fn xid_keys(style: OtelAttributeStyle) -> [&'static str; 2] {
    match style {
        OtelAttributeStyle::Otel => ["nvidia.xid.code", "nvidia.xid.message"],
        OtelAttributeStyle::Dcgm => ["err_code", "err_msg"],
    }
}

/// DCGM field id of the driver version (`DCGM_FI_DRIVER_VERSION`).
const DRIVER_VERSION_FIELD: u16 = 1;

/// Semantic-convention names of switch and CPU `label` rows: the NvSwitch firmware version
/// (`DCGM_FI_DEV_NVSWITCH_FIRMWARE_VERSION`) and the CPU model (`DCGM_FI_DEV_CPU_MODEL`).
fn hw_label_key(field: u16) -> Option<&'static str> {
    match field {
        1524 => Some("hw.firmware_version"),
        1141 => Some("hw.model"),
        _ => None,
    }
}

fn kv(key: &'static str, value: impl Into<Arc<str>>) -> KeyValue {
    KeyValue::new(
        Key::from_static_str(key),
        Value::String(StringValue::from(value.into())),
    )
}

/// A holder's attributes ([`Naming::holder_attributes`]), each sorted by key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HolderAttributes {
    /// What tells holders apart (key, value): the pod's namespace and name, or the job.
    pub identity: Vec<(String, String)>,
    /// The holder's Resource: its identity and what describes it whole (pod uid, pod labels).
    pub resource: Vec<KeyValue>,
    /// What differs within the holder (a container, a device replica): on its data points.
    pub within: Vec<KeyValue>,
}

/// Attribute naming for one run.
#[derive(Clone)]
pub struct Naming {
    style: OtelAttributeStyle,
    labels: LabelStyle,
    /// Attribute key of each `label` row, index-aligned with the counter rows (None: not a label row).
    label_keys: Vec<Option<Key>>,
    /// (row, field) of each `label` row `label_keys` was made for.
    label_rows: Vec<(usize, u16)>,
    /// The hardware conventions' identity on GPU-side entities (with semantic-convention metric
    /// names, `otel` style only): see [`Naming::with_hw_attributes`].
    hw: bool,
}

fn label_rows(counters: &CounterSet) -> Vec<(usize, u16)> {
    counters
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.kind == MetricKind::Label)
        .map(|(i, r)| (i, r.field.id))
        .collect()
}

/// The attribute key of each `label` row of a counter set (None: not a label row).
fn label_keys(style: OtelAttributeStyle, counters: &CounterSet) -> Vec<Option<Key>> {
    counters
        .rows
        .iter()
        .map(|row| {
            (row.kind == MetricKind::Label).then(|| {
                if style == OtelAttributeStyle::Otel && row.field.id == DRIVER_VERSION_FIELD {
                    Key::from_static_str("nvidia.driver.version")
                } else if let Some(k) = (style == OtelAttributeStyle::Otel)
                    .then(|| hw_label_key(row.field.id))
                    .flatten()
                {
                    Key::from_static_str(k)
                } else {
                    Key::from(row.name.clone())
                }
            })
        })
        .collect()
}

impl Naming {
    pub fn new(style: OtelAttributeStyle, labels: LabelStyle, counters: &CounterSet) -> Naming {
        Naming {
            style,
            labels,
            label_keys: label_keys(style, counters),
            label_rows: label_rows(counters),
            hw: false,
        }
    }

    /// Complete GPU-side identities as the hardware semantic conventions describe a GPU (`otel` style
    /// only; `--otel-metric-names semconv|both`): `hw.name` (`nvidia0`, `nvidia0/gi3`),
    /// `hw.serial_number` and `hw.firmware_version` (the VBIOS) where the source knows them,
    /// `hw.driver_version` (the driver-version label row, else the source's driver version). A MIG
    /// instance becomes a component of its own: `hw.id` is its MIG UUID (`<GPU UUID>/gi<id>` when
    /// unknown) and `hw.parent` its GPU's `hw.id`. Off: identities are unchanged.
    pub fn with_hw_attributes(mut self, on: bool) -> Naming {
        self.hw = on && self.style == OtelAttributeStyle::Otel;
        self
    }

    /// The label keys for `counters`: the cached ones while the label rows are those `new` saw, else
    /// computed for this counter set (after a counters reload).
    fn label_keys_for(&self, counters: &CounterSet) -> std::borrow::Cow<'_, [Option<Key>]> {
        if counters.rows.len() == self.label_keys.len() && label_rows(counters) == self.label_rows {
            std::borrow::Cow::Borrowed(&self.label_keys)
        } else {
            std::borrow::Cow::Owned(label_keys(self.style, counters))
        }
    }

    /// The attribute style (`otel` or `dcgm` names).
    pub fn style(&self) -> OtelAttributeStyle {
        self.style
    }

    /// Which attributes go into the Resource in a resource mode.
    pub fn resource_split(&self, mode: OtelResourceMode) -> ResourceSplit {
        match mode {
            OtelResourceMode::Host => ResourceSplit::Host,
            OtelResourceMode::PerEntity => {
                let otel = self.style == OtelAttributeStyle::Otel;
                ResourceSplit::PerEntity {
                    point_keys: identity::point_keys(otel)
                        .iter()
                        .chain(xid_keys(self.style).iter())
                        .map(|k| k.to_string())
                        .collect(),
                }
            }
        }
    }

    /// The OTel key of an attribution attribute in this style.
    fn attribute_key(&self, key: &AttributeKey) -> Key {
        let name = match self.style {
            OtelAttributeStyle::Otel => &key.otel,
            OtelAttributeStyle::Dcgm => &key.prometheus,
        };
        match name {
            std::borrow::Cow::Borrowed(s) => Key::from_static_str(s),
            std::borrow::Cow::Owned(s) => Key::from(s.clone()),
        }
    }

    /// The attribute sets of every entity of a snapshot, index-aligned with `snap.entities`: one set
    /// per (pod × job) combination, or one when unattributed.
    pub fn snapshot_sets(&self, snap: &Snapshot) -> Vec<Vec<Vec<KeyValue>>> {
        snap.entities
            .iter()
            .zip(self.snapshot_labels(snap))
            .map(|(e, labels)| self.entity_attribute_sets(e, labels))
            .collect()
    }

    /// The `label`-row attributes of every entity, index-aligned with `snap.entities`: an NvLink takes
    /// its GPU's, a switch port its switch's, a core its CPU's (fields of the parent's level are not
    /// read on the child, and the child joins the parent's Resource).
    pub fn snapshot_labels(&self, snap: &Snapshot) -> Vec<Vec<KeyValue>> {
        use super::identity::{label_owner, label_parent};
        let keys = self.label_keys_for(&snap.counters);
        let mut owners: HashMap<(EntityKind, u32), Vec<KeyValue>> = HashMap::new();
        for e in &snap.entities {
            if let Some(key) = label_owner(&e.entity) {
                owners.insert(key, label_attrs(&keys, e));
            }
        }
        // A GPU in MIG mode is not monitored itself: its links take its first instance's label
        // rows (the same driver), as its board's Resource does.
        for e in &snap.entities {
            if let (EntityKind::GpuInstance, Some(g)) = (e.entity.kind, e.entity.gpu_index()) {
                owners
                    .entry((EntityKind::Gpu, g))
                    .or_insert_with(|| label_attrs(&keys, e));
            }
        }
        snap.entities
            .iter()
            .map(|e| {
                let mut labels = match label_parent(&e.entity) {
                    Some(parent) => owners.get(&parent).cloned().unwrap_or_default(),
                    None => label_attrs(&keys, e),
                };
                if self.hw && e.entity.kind.is_gpu_side() {
                    self.add_hw_driver_version(&mut labels, snap.driver_version.as_deref());
                }
                labels
            })
            .collect()
    }

    /// `hw.driver_version`: the driver-version label row's value, else the source's.
    fn add_hw_driver_version(&self, labels: &mut Vec<KeyValue>, source: Option<&str>) {
        let from_row = labels
            .iter()
            .find(|kv| kv.key.as_str() == "nvidia.driver.version")
            .map(|kv| kv.value.as_str().into_owned());
        if let Some(v) = from_row.or_else(|| source.map(str::to_string)) {
            if !v.is_empty() {
                labels.push(kv("hw.driver_version", v));
            }
        }
    }

    /// The attribute sets of one entity (one per pod × job combination, or one when unattributed),
    /// each sorted by key, given its `label`-row attributes ([`Naming::label_attributes`]; an NvLink
    /// takes its GPU's).
    pub fn entity_attribute_sets(
        &self,
        e: &EntityReading,
        labels: Vec<KeyValue>,
    ) -> Vec<Vec<KeyValue>> {
        let mut sets = self.entity_sets(e, labels);
        // Sorted by key, as the SDK stores them: it then keeps one tracker key per series
        // instead of two (the given order and the sorted one), about 10 MB less at 10,000 series.
        for set in &mut sets {
            set.sort_by(|a, b| a.key.cmp(&b.key));
        }
        sets
    }

    /// The ONE attribute set of an entity under the entity model (each measurement leaves once, on the
    /// Resource of what was measured): its identity and `label`-row attributes, plus its attribution
    /// when exactly one party holds it (a GPU held by one pod is that pod's). A device held by several
    /// (time slicing, MPS, a shared MIG instance) gets none: the per-pod view travels on the pods' own
    /// Resources ([`Naming::attribution_attributes`]). Sorted by key.
    pub fn entity_set(&self, e: &EntityReading, labels: Vec<KeyValue>) -> Vec<KeyValue> {
        let shared = e.attribution.series() > 1;
        let mut set = if shared {
            let probe = EntityReading {
                entity: e.entity.clone(),
                values: EntityValues::none(),
                attribution: Arc::new(Attribution::default()),
            };
            self.entity_sets(&probe, labels)
        } else {
            self.entity_sets(e, labels)
        }
        .into_iter()
        .next()
        .unwrap_or_default();
        set.sort_by(|a, b| a.key.cmp(&b.key));
        set
    }

    /// The set of a whole GPU (the board of a GPU in MIG mode, whose instances are the monitored
    /// entities): the GPU's identity and the given `label`-row attributes, no attribution. Sorted.
    pub fn gpu_set(
        &self,
        gpu: &Arc<crate::snapshot::GpuIdentity>,
        labels: Vec<KeyValue>,
    ) -> Vec<KeyValue> {
        let probe = EntityReading {
            entity: Arc::new(crate::snapshot::Entity::gpu(gpu.clone())),
            values: EntityValues::none(),
            attribution: Arc::new(Attribution::default()),
        };
        self.entity_set(&probe, labels)
    }

    /// A device's identity alone (no `label` rows, no attribution), sorted: what a holder's data point
    /// names the device it describes by (`hw.id`, `nvidia.gpu.index`, the MIG profile, ...).
    pub fn device_attributes(&self, entity: &Arc<crate::snapshot::Entity>) -> Vec<KeyValue> {
        let probe = EntityReading {
            entity: entity.clone(),
            values: EntityValues::none(),
            attribution: Arc::new(Attribution::default()),
        };
        let mut set = self.entity_set(&probe, Vec::new());
        set.retain(|kv| identity::DEVICE_KEYS.contains(&kv.key.as_str()));
        set
    }

    /// Attribution attributes (a pod's `k8s.*`, a job) in this style, sorted by key: the identity of
    /// the Resource that carries a party's own view of a device it shares.
    pub fn attribution_attributes(
        &self,
        attributes: &[crate::snapshot::Attribute],
    ) -> Vec<KeyValue> {
        let mut out: Vec<KeyValue> = attributes
            .iter()
            .map(|a| {
                KeyValue::new(
                    self.attribute_key(&a.key),
                    Value::String(StringValue::from(a.value.clone())),
                )
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// A holder's attribution in this style, split as its own Resource needs it: one Resource per pod
    /// (or job) whatever it holds and however it was seen (the cost counters' sets name the container
    /// and the device replica, a process's set only the pod). A set that names no pod or job is its
    /// own identity, whole.
    pub fn holder_attributes(&self, attributes: &[crate::snapshot::Attribute]) -> HolderAttributes {
        use crate::snapshot::attribution::HolderPart;
        let named = |a: &crate::snapshot::Attribute| {
            KeyValue::new(
                self.attribute_key(&a.key),
                Value::String(StringValue::from(a.value.clone())),
            )
        };
        let has_identity = attributes
            .iter()
            .any(|a| a.key.holder_part() == HolderPart::Identity);
        let mut out = HolderAttributes::default();
        for a in attributes {
            let part = if has_identity {
                a.key.holder_part()
            } else {
                HolderPart::Identity
            };
            let kv = named(a);
            if part == HolderPart::Identity {
                out.identity
                    .push((kv.key.as_str().to_string(), kv.value.as_str().into_owned()));
            }
            match part {
                HolderPart::Identity | HolderPart::Whole => out.resource.push(kv),
                HolderPart::Within => out.within.push(kv),
            }
        }
        out.identity.sort();
        out.resource.sort_by(|a, b| a.key.cmp(&b.key));
        out.within.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Whether [`Naming::value_attributes`] can give the points of a field attributes.
    pub fn has_value_attributes(field_id: u16) -> bool {
        field_id == crate::fields::xid::XID_FIELD_ID
    }

    /// Attributes a data point takes from its own value: the XID code and its meaning on
    /// `DCGM_FI_DEV_XID_ERRORS` (`err_code`/`err_msg` as dcgm-exporter labels them, or
    /// `nvidia.xid.code`/`nvidia.xid.message`). Empty for every other field.
    pub fn value_attributes(
        &self,
        field_id: u16,
        v: &crate::snapshot::FieldValue,
    ) -> Vec<KeyValue> {
        use crate::fields::xid;
        use crate::snapshot::FieldValue;
        if !Self::has_value_attributes(field_id) {
            return Vec::new();
        }
        let code = match v {
            FieldValue::Int(i) => *i,
            FieldValue::Double(d) if d.is_finite() => *d as i64,
            _ => return Vec::new(),
        };
        let meaning = xid::meaning(code);
        let [code_key, message_key] = xid_keys(self.style);
        let code = match self.style {
            OtelAttributeStyle::Dcgm => Value::String(StringValue::from(code.to_string())),
            OtelAttributeStyle::Otel => Value::I64(code),
        };
        vec![
            KeyValue::new(Key::from_static_str(code_key), code),
            kv(message_key, meaning),
        ]
    }

    /// The attributes an entity's `label` rows give it (the driver version, ...), first row per key wins.
    pub fn label_attributes(&self, e: &EntityReading) -> Vec<KeyValue> {
        label_attrs(&self.label_keys, e)
    }

    /// An entity's identity ([`identity::identity`]) and `label`-row attributes, once per
    /// attribution set.
    fn entity_sets(&self, e: &EntityReading, labels: Vec<KeyValue>) -> Vec<Vec<KeyValue>> {
        let style = IdentityStyle {
            otel: self.style == OtelAttributeStyle::Otel,
            hw: self.hw,
            labels: &self.labels,
        };
        let Some(mut base) = identity::identity(style, &e.entity) else {
            return vec![labels];
        };
        base.extend(labels);
        self.attribution_sets(&e.attribution, base)
    }

    fn attribution_sets(&self, attr: &Attribution, base: Vec<KeyValue>) -> Vec<Vec<KeyValue>> {
        if attr.is_empty() {
            return vec![base];
        }
        attr.sets()
            .map(|set| {
                let mut out = base.clone();
                for a in set {
                    out.push(KeyValue::new(
                        self.attribute_key(&a.key),
                        Value::String(StringValue::from(a.value.clone())),
                    ));
                }
                out
            })
            .collect()
    }
}

/// The attributes an entity's `label` rows give it (the driver version, ...), first row per key wins.
fn label_attrs(keys: &[Option<Key>], e: &EntityReading) -> Vec<KeyValue> {
    let mut out: Vec<KeyValue> = Vec::new();
    for (row, v) in e.values.iter() {
        if let (Some(Some(key)), Some(text)) = (keys.get(row), v.as_text()) {
            if !out.iter().any(|kv| &kv.key == key) {
                out.push(KeyValue::new(
                    key.clone(),
                    Value::String(StringValue::from(Arc::<str>::from(text))),
                ));
            }
        }
    }
    out
}

/// Inputs of the host-level base resource.
pub struct BaseResourceInput<'a> {
    pub style: OtelAttributeStyle,
    /// The host label / `host.name` value (`None` with `--no-hostname`).
    pub hostname: Option<&'a str>,
    /// The dcgm-style host label name (`Hostname` or `hostname`).
    pub host_label: &'static str,
    pub node_name: Option<&'a str>,
    /// `--otel-service-name`.
    pub service_name_flag: Option<&'a str>,
}

/// Percent-decode `%XX` sequences (header and resource attribute values).
pub fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at byte {}", i + 1))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent-decoded value is not UTF-8".to_string())
}

/// A bad `OTEL_RESOURCE_ATTRIBUTES` entry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("OTEL_RESOURCE_ATTRIBUTES: entry {index} '{entry}': {message}")]
pub struct ResourceAttributesError {
    pub index: usize,
    pub entry: String,
    pub message: String,
}

/// Parse `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k2=v2`, values percent-decoded).
pub fn parse_resource_attributes(
    text: &str,
) -> Result<Vec<(String, String)>, ResourceAttributesError> {
    let mut out = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let err = |message: &str| ResourceAttributesError {
            index: i + 1,
            entry: entry.to_string(),
            message: message.to_string(),
        };
        let (k, v) = entry
            .split_once('=')
            .ok_or_else(|| err("expected key=value"))?;
        let k = k.trim();
        if k.is_empty() {
            return Err(err("empty key"));
        }
        let v = percent_decode(v.trim()).map_err(|m| err(&m))?;
        out.push((k.to_string(), v));
    }
    Ok(out)
}

/// The host base resource (flags, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`) and the attribute
/// naming for entities: what the OTLP push and the `--prometheus-format otel` bridge start from.
pub fn base_and_naming(
    style: OtelAttributeStyle,
    service_name_flag: Option<&str>,
    ctx: &super::OtelContext<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<KeyValue>, Naming), ResourceAttributesError> {
    let base = base_resource(
        &BaseResourceInput {
            style,
            hostname: ctx.hostname,
            host_label: ctx.labels.hostname_label.as_str(),
            node_name: ctx.node_name,
            service_name_flag,
        },
        env,
    )?;
    let naming = Naming::new(style, ctx.labels.clone(), ctx.counters);
    Ok((base, naming))
}

/// The base resource attributes, merged by the documented precedence. `env` looks up a variable.
pub fn base_resource(
    input: &BaseResourceInput<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<KeyValue>, ResourceAttributesError> {
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| match merged.iter_mut().find(|(mk, _)| mk == k) {
        Some(slot) => slot.1 = v,
        None => merged.push((k.to_string(), v)),
    };
    set("service.name", "dcgm-otel".to_string());
    set("service.version", env!("CARGO_PKG_VERSION").to_string());
    if let Some(h) = input.hostname.filter(|h| !h.is_empty()) {
        let key = match input.style {
            OtelAttributeStyle::Otel => "host.name",
            OtelAttributeStyle::Dcgm => input.host_label,
        };
        set(key, h.to_string());
    }
    if let Some(n) = input.node_name.filter(|n| !n.is_empty()) {
        set("k8s.node.name", n.to_string());
    }
    set("telemetry.sdk.name", "opentelemetry".to_string());
    set("telemetry.sdk.language", "rust".to_string());
    set("telemetry.sdk.version", "0.33.1".to_string());
    if let Some(text) = env("OTEL_RESOURCE_ATTRIBUTES") {
        for (k, v) in parse_resource_attributes(&text)? {
            set(&k, v);
        }
    }
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|s| !s.is_empty()) {
        set("service.name", name);
    }
    if let Some(name) = input.service_name_flag.filter(|s| !s.is_empty()) {
        set("service.name", name.to_string());
    }
    Ok(merged
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, v))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(style: OtelAttributeStyle) -> BaseResourceInput<'static> {
        BaseResourceInput {
            style,
            hostname: Some("node-a"),
            host_label: "Hostname",
            node_name: Some("k8s-node-a"),
            service_name_flag: None,
        }
    }

    fn get(attrs: &[KeyValue], k: &str) -> Option<String> {
        attrs
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    }

    #[test]
    fn a_holder_is_its_pod_whatever_else_its_set_names() {
        use crate::snapshot::attribution::{CONTAINER, HPC_JOB, NAMESPACE, POD, POD_UID};
        use crate::snapshot::{Attribute, AttributeKey, Placement};
        let replica = AttributeKey::new("vgpu", "nvidia.gpu.replica", Placement::Attributes);
        let team = AttributeKey::new("label_team", "k8s.pod.label.team", Placement::Labels);
        let naming = Naming::new(
            OtelAttributeStyle::Otel,
            LabelStyle::default(),
            &CounterSet::default(),
        );
        let names = |kvs: &[KeyValue]| -> Vec<String> {
            kvs.iter()
                .map(|kv| format!("{}={}", kv.key, kv.value))
                .collect()
        };
        // The cost counters' set (container, replica, uid, a label) and a process's (the pod only).
        let cost = naming.holder_attributes(&[
            Attribute::new(&POD, "p"),
            Attribute::new(&NAMESPACE, "ns"),
            Attribute::new(&CONTAINER, "c"),
            Attribute::new(&replica, "1"),
            Attribute::new(&POD_UID, "u"),
            Attribute::new(&team, "ml"),
        ]);
        let process = naming
            .holder_attributes(&[Attribute::new(&NAMESPACE, "ns"), Attribute::new(&POD, "p")]);
        assert_eq!(cost.identity, process.identity);
        assert_eq!(
            names(&cost.resource),
            [
                "k8s.namespace.name=ns",
                "k8s.pod.label.team=ml",
                "k8s.pod.name=p",
                "k8s.pod.uid=u"
            ]
        );
        assert_eq!(
            names(&cost.within),
            ["k8s.container.name=c", "nvidia.gpu.replica=1"]
        );
        assert!(process.within.is_empty());
        // A job is a holder too; a set naming neither is its own holder, whole.
        let job = naming.holder_attributes(&[Attribute::new(&HPC_JOB, "j1")]);
        assert_eq!(job.identity, [("hpc.job.id".to_string(), "j1".to_string())]);
        let other = naming.holder_attributes(&[Attribute::new(&CONTAINER, "c")]);
        assert_eq!(names(&other.resource), ["k8s.container.name=c"]);
        assert!(other.within.is_empty() && other.identity.len() == 1);
    }

    #[test]
    fn precedence_env_then_service_name_then_flag() {
        let env = |k: &str| match k {
            "OTEL_RESOURCE_ATTRIBUTES" => {
                Some("deployment.environment=prod,service.name=from-attrs,host.name=x%2Cy".into())
            }
            _ => None,
        };
        let r = base_resource(&input(OtelAttributeStyle::Otel), &env).unwrap();
        assert_eq!(get(&r, "service.name").as_deref(), Some("from-attrs"));
        assert_eq!(get(&r, "host.name").as_deref(), Some("x,y"));
        assert_eq!(get(&r, "deployment.environment").as_deref(), Some("prod"));
        assert_eq!(get(&r, "k8s.node.name").as_deref(), Some("k8s-node-a"));
        let env2 = |k: &str| match k {
            "OTEL_RESOURCE_ATTRIBUTES" => Some("service.name=from-attrs".into()),
            "OTEL_SERVICE_NAME" => Some("from-env".into()),
            _ => None,
        };
        let r = base_resource(&input(OtelAttributeStyle::Otel), &env2).unwrap();
        assert_eq!(get(&r, "service.name").as_deref(), Some("from-env"));
        let mut i = input(OtelAttributeStyle::Dcgm);
        i.service_name_flag = Some("from-flag");
        let r = base_resource(&i, &env2).unwrap();
        assert_eq!(get(&r, "service.name").as_deref(), Some("from-flag"));
        assert_eq!(get(&r, "Hostname").as_deref(), Some("node-a"));
        assert_eq!(get(&r, "host.name"), None);
    }

    #[test]
    fn bad_resource_attributes_name_the_entry() {
        let e = parse_resource_attributes("a=1,nokey,b=2").unwrap_err();
        assert_eq!(e.index, 2);
        assert!(e.to_string().contains("'nokey'"), "{e}");
        assert!(parse_resource_attributes("a=%zz").is_err());
    }
}
