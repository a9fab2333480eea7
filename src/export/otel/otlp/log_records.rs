//! Incidents → OTLP log records: one `LogRecord` per XID occurrence, clock-event reason starting or
//! ending, and health-watch transition, under the Resource of the entity it hit — built from the same
//! attribute sets as that entity's metrics ([`Naming`], both resource modes and attribute styles), so
//! the GPU or MIG instance, the host and the `k8s.*` attributes of the pod holding the device at that
//! collection are the metrics' ones. Under the entity model an incident is one record, on its
//! entity's Resource: a device shared by several pods (and the board of a GPU in MIG mode) has no pod
//! attributes there; a device held by one pod has that pod's. [`ExportLogsRequest`] groups records by Resource for one `ExportLogsServiceRequest`.
//!
//! Each record carries the event's own DCGM time (`time_unix_nano`), the collection that saw it
//! (`observed_time_unix_nano`), `event_name` (the deprecated `event.name` attribute is not sent), a
//! severity ([`super::severity`]), a short body and the event's attributes:
//! `nvidia.xid.code`, `nvidia.xid.message`, `nvidia.xid.class`; `nvidia.clock_event.reason`,
//! `nvidia.clock_event.state` (`started`/`ended`), `nvidia.clock_event.duration` (seconds, at the end);
//! `nvidia.health.watch`, `nvidia.health.result`, `nvidia.health.previous_result`,
//! `nvidia.health.error_code`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, InstrumentationScope, KeyValue as PKeyValue,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::proto::{entity_resource, pkv};
use super::severity;
use crate::export::otel::naming::{Naming, OtelAttributeStyle, ResourceSplit};
use crate::fields::xid;
use crate::lock::LockExt;
use crate::snapshot::{EntityReading, Incident, IncidentKind, Snapshot};

/// `event.name` of XID records.
pub const XID_EVENT: &str = "nvidia.gpu.xid";
/// `event.name` of clock-event records.
pub const CLOCK_EVENT: &str = "nvidia.gpu.clock_event";
/// `event.name` of health records.
pub const HEALTH_EVENT: &str = "nvidia.gpu.health";

/// One record and the Resource it belongs to.
#[derive(Debug, Clone)]
pub struct PendingRecord {
    /// The Resource's identity (its attributes, in order): records with equal keys share it.
    pub resource_key: Arc<[(String, String)]>,
    /// Shared by every record of the same Resource (a buffered record holds only its own fields: a
    /// Resource copy per record made 10,000 waiting records cost about 65 MiB in the soak).
    pub resource: Arc<Resource>,
    pub record: LogRecord,
    /// The request's schema URL (empty with dcgm-exporter's attribute names).
    pub schema_url: &'static str,
}

/// Resources already built, by identity key (cleared past this many).
const MAX_INTERNED_RESOURCES: usize = 4096;

/// A Resource's identity: its identity attributes, in order.
type ResourceKey = Arc<[(String, String)]>;

/// Builds the records of a snapshot's incidents.
pub struct RecordBuilder {
    naming: Naming,
    split: ResourceSplit,
    base: Vec<PKeyValue>,
    /// Identity key → the key and Resource made for it, reused by later records and snapshots.
    interned: Mutex<HashMap<ResourceKey, Arc<Resource>>>,
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn text(key: &str, value: impl Into<String>) -> PKeyValue {
    PKeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

fn int(key: &str, value: i64) -> PKeyValue {
    PKeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        key_strindex: 0,
    }
}

fn double(key: &str, value: f64) -> PKeyValue {
    PKeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::DoubleValue(value)),
        }),
        key_strindex: 0,
    }
}

/// The event name, body and attributes of one incident.
fn describe(kind: &IncidentKind) -> (&'static str, String, Vec<PKeyValue>) {
    match kind {
        IncidentKind::Xid { code } => {
            let meaning = xid::meaning(i64::from(*code));
            (
                XID_EVENT,
                format!("XID {code}: {meaning}"),
                vec![
                    int("nvidia.xid.code", i64::from(*code)),
                    text("nvidia.xid.message", meaning),
                    text("nvidia.xid.class", severity::xid_class(*code).name),
                ],
            )
        }
        IncidentKind::ClockEventStarted { reason } => (
            CLOCK_EVENT,
            format!("clock event {reason} started"),
            vec![
                text("nvidia.clock_event.reason", *reason),
                text("nvidia.clock_event.state", "started"),
            ],
        ),
        IncidentKind::ClockEventEnded { reason, duration } => (
            CLOCK_EVENT,
            format!(
                "clock event {reason} ended after {:.3} s",
                duration.as_secs_f64()
            ),
            vec![
                text("nvidia.clock_event.reason", *reason),
                text("nvidia.clock_event.state", "ended"),
                double("nvidia.clock_event.duration", duration.as_secs_f64()),
            ],
        ),
        IncidentKind::Health {
            watch,
            previous,
            result,
            error_code,
            message,
        } => {
            let body = if message.is_empty() {
                format!(
                    "health watch {watch}: {} (was {})",
                    result.as_str(),
                    previous.as_str()
                )
            } else {
                message.to_string()
            };
            (
                HEALTH_EVENT,
                body,
                vec![
                    text("nvidia.health.watch", *watch),
                    text("nvidia.health.result", result.as_str()),
                    text("nvidia.health.previous_result", previous.as_str()),
                    text("nvidia.health.error_code", error_code.as_ref()),
                ],
            )
        }
    }
}

impl RecordBuilder {
    /// `base`: the host resource attributes; `split`: which attributes move into the entity's Resource
    /// (none in host mode: the entity's identity is then on the records).
    pub fn new(naming: Naming, split: ResourceSplit, base: &[KeyValue]) -> RecordBuilder {
        RecordBuilder {
            naming,
            split,
            base: base.iter().map(pkv).collect(),
            interned: Mutex::new(HashMap::new()),
        }
    }

    /// The records of `snap`'s incidents, in incident order (nothing to do without incidents).
    pub fn records(&self, snap: &Snapshot) -> Vec<PendingRecord> {
        if snap.incidents.is_empty() {
            return Vec::new();
        }
        let labels = self.naming.snapshot_labels(snap);
        let observed = nanos(snap.taken_at);
        let mut out = Vec::with_capacity(snap.incidents.len());
        for incident in &snap.incidents {
            let position = snap.entities.iter().position(|e| {
                Arc::ptr_eq(&e.entity, &incident.entity) || e.entity == incident.entity
            });
            let own_labels = match position {
                Some(i) => labels.get(i).cloned().unwrap_or_default(),
                // The board of a GPU in MIG mode: its first instance's label rows, as its metrics.
                None => snap
                    .entities
                    .iter()
                    .position(|e| {
                        e.entity.kind == crate::snapshot::EntityKind::GpuInstance
                            && e.entity.gpu == incident.entity.gpu
                    })
                    .and_then(|i| labels.get(i).cloned())
                    .unwrap_or_default(),
            };
            // A device the readings do not list (the board of a GPU in MIG mode) is held by no pod
            // itself: its Resource is the GPU's, as its metrics'.
            let monitored = position.is_some();
            self.incident_records(incident, own_labels, monitored, observed, &mut out);
        }
        out
    }

    /// The interned key and Resource of an identity (built once, then shared).
    fn resource_for(
        &self,
        key: Arc<[(String, String)]>,
        identity: &[&KeyValue],
    ) -> (Arc<[(String, String)]>, Arc<Resource>) {
        let mut interned = self.interned.lock_unpoisoned();
        if let Some((k, r)) = interned.get_key_value(&key) {
            return (k.clone(), r.clone());
        }
        let resource = Arc::new(entity_resource(&self.base, identity));
        if interned.len() >= MAX_INTERNED_RESOURCES {
            interned.clear();
        }
        interned.insert(key.clone(), resource.clone());
        (key, resource)
    }

    fn incident_records(
        &self,
        incident: &Incident,
        labels: Vec<KeyValue>,
        monitored: bool,
        observed: u64,
        out: &mut Vec<PendingRecord>,
    ) {
        let reading = EntityReading {
            entity: incident.entity.clone(),
            values: crate::snapshot::EntityValues::none(),
            attribution: if monitored {
                incident.attribution.clone()
            } else {
                Arc::default()
            },
        };
        let (event, body, event_attributes) = describe(&incident.kind);
        let sev = severity::of(&incident.kind);
        let schema_url = if self.naming.style() == OtelAttributeStyle::Otel {
            crate::export::otel::semconv::SCHEMA_URL
        } else {
            ""
        };
        {
            let set = self.naming.entity_set(&reading, labels);
            let (identity, rest): (Vec<&KeyValue>, Vec<&KeyValue>) = set
                .iter()
                .partition(|kv| self.split.is_identity(kv.key.as_str()));
            let key: Arc<[(String, String)]> = identity
                .iter()
                .map(|kv| (kv.key.as_str().to_string(), kv.value.as_str().into_owned()))
                .collect();
            let (key, resource) = self.resource_for(key, &identity);
            let mut attributes: Vec<PKeyValue> = event_attributes.to_vec();
            attributes.extend(rest.into_iter().map(pkv));
            out.push(PendingRecord {
                resource_key: key,
                resource,
                record: LogRecord {
                    time_unix_nano: nanos(incident.at),
                    observed_time_unix_nano: observed,
                    severity_number: sev.number(),
                    severity_text: sev.text().to_string(),
                    body: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(body.clone())),
                    }),
                    attributes,
                    dropped_attributes_count: 0,
                    flags: 0,
                    trace_id: Vec::new(),
                    span_id: Vec::new(),
                    event_name: event.to_string(),
                },
                schema_url,
            });
        }
    }
}

/// One request built from pending records.
pub struct ExportLogsRequest {
    pub request: ExportLogsServiceRequest,
    pub records: usize,
    pub resources: usize,
}

/// Group `records` by Resource (first-seen order, records in their order) into one request.
pub fn request(records: Vec<PendingRecord>) -> ExportLogsRequest {
    let scope = InstrumentationScope {
        name: "dcgm-otel".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        attributes: Vec::new(),
        dropped_attributes_count: 0,
    };
    let n = records.len();
    let mut keys: Vec<Arc<[(String, String)]>> = Vec::new();
    let mut resource_logs: Vec<ResourceLogs> = Vec::new();
    for r in records {
        let slot = match keys.iter().position(|k| *k == r.resource_key) {
            Some(i) => i,
            None => {
                keys.push(r.resource_key.clone());
                resource_logs.push(ResourceLogs {
                    resource: Some(Arc::unwrap_or_clone(r.resource)),
                    scope_logs: vec![ScopeLogs {
                        scope: Some(scope.clone()),
                        log_records: Vec::new(),
                        schema_url: r.schema_url.to_string(),
                    }],
                    schema_url: r.schema_url.to_string(),
                });
                resource_logs.len() - 1
            }
        };
        if let Some(scope_logs) = resource_logs
            .get_mut(slot)
            .and_then(|rl| rl.scope_logs.first_mut())
        {
            scope_logs.log_records.push(r.record);
        }
    }
    ExportLogsRequest {
        resources: resource_logs.len(),
        records: n,
        request: ExportLogsServiceRequest { resource_logs },
    }
}
