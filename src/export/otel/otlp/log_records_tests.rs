//! The record builder on the hand-made test fleet with synthetic incidents: what a receiver would read
//! (resources with the pod attributes, event names, severities, times, attributes, bodies).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue as PKeyValue};

use super::log_records::{request, RecordBuilder};
use crate::config::LabelStyle;
use crate::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
use crate::export::otel::test_fleet::{counters, snapshot};
use crate::snapshot::{HealthResult, Incident, IncidentKind, Snapshot};

fn attrs(kvs: &[PKeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::IntValue(i)) => format!("int:{i}"),
                Some(any_value::Value::DoubleValue(d)) => format!("double:{d}"),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn builder(style: OtelAttributeStyle, mode: OtelResourceMode) -> RecordBuilder {
    let c = counters();
    let naming = Naming::new(style, LabelStyle::default(), &c);
    let split = naming.resource_split(mode);
    RecordBuilder::new(
        naming,
        split,
        &[
            KeyValue::new("service.name", "t"),
            KeyValue::new("host.name", "node-1"),
        ],
    )
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// The fleet with: XID 48 on GPU 0 (shared by pods a and b), a clock event ending on GPU 2 and a MEM
/// health failure on GPU 2.
fn with_incidents() -> Snapshot {
    let mut snap = snapshot(counters(), 1, 10);
    let gpu0 = snap.entities[0].clone();
    let gpu2 = snap.entities[4].clone();
    snap.incidents = vec![
        Incident {
            entity: gpu0.entity.clone(),
            attribution: gpu0.attribution.clone(),
            at: at(1_000),
            kind: IncidentKind::Xid { code: 48 },
        },
        Incident {
            entity: gpu2.entity.clone(),
            attribution: gpu2.attribution.clone(),
            at: at(1_001),
            kind: IncidentKind::ClockEventEnded {
                reason: "hw_thermal",
                duration: Duration::from_millis(2500),
            },
        },
        Incident {
            entity: gpu2.entity.clone(),
            attribution: gpu2.attribution.clone(),
            at: at(1_002),
            kind: IncidentKind::Health {
                watch: "MEM",
                previous: HealthResult::Pass,
                result: HealthResult::Fail,
                error_code: "DCGM_FR_VOLATILE_DBE_DETECTED".into(),
                message: "Detected 1 volatile double-bit ECC error(s) in GPU 2.".into(),
            },
        },
    ];
    snap
}

#[test]
fn per_entity_records_carry_the_pod_resource_and_the_event() {
    let snap = with_incidents();
    let b = builder(OtelAttributeStyle::Otel, OtelResourceMode::PerEntity);
    let records = b.records(&snap);
    // GPU 0 is shared by two pods: the XID is one record, on the GPU's Resource (no pod there).
    assert_eq!(records.len(), 3);
    let built = request(records);
    assert_eq!((built.records, built.resources), (3, 2));
    let rl = &built.request.resource_logs;
    assert!(rl.iter().all(|r| {
        !attrs(&r.resource.as_ref().unwrap().attributes).contains_key("k8s.pod.name")
    }));
    assert!(rl
        .iter()
        .all(|r| r.schema_url == crate::export::otel::semconv::SCHEMA_URL
            && r.scope_logs[0].schema_url == r.schema_url));
    let res_a = attrs(&rl[0].resource.as_ref().unwrap().attributes);
    assert_eq!(res_a["hw.id"], "GPU-aaa");
    assert_eq!(res_a["service.name"], "t");
    assert_eq!(res_a["nvidia.driver.version"], "550.1");
    let xid = &rl[0].scope_logs[0].log_records[0];
    assert_eq!(xid.event_name, "nvidia.gpu.xid");
    assert_eq!(
        (xid.severity_number, xid.severity_text.as_str()),
        (21, "FATAL")
    );
    assert_eq!(xid.time_unix_nano, 1_000_000_000_000);
    assert_eq!(
        xid.observed_time_unix_nano,
        snap.taken_at.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
    );
    assert_eq!(
        attrs(&xid.attributes),
        BTreeMap::from([
            ("nvidia.xid.class".into(), "uncorrectable_memory".into()),
            ("nvidia.xid.code".into(), "int:48".into()),
            ("nvidia.xid.message".into(), "Double Bit ECC Error".into()),
        ])
    );
    let body = xid.body.as_ref().and_then(|b| b.value.clone());
    assert_eq!(
        body,
        Some(any_value::Value::StringValue(
            "XID 48: Double Bit ECC Error".into()
        ))
    );
    // GPU 2: the clock event's end and the health failure, in their order, on one resource.
    let res_c = attrs(&rl[1].resource.as_ref().unwrap().attributes);
    assert_eq!(res_c["hw.id"], "GPU-ccc");
    let logs = &rl[1].scope_logs[0].log_records;
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0].event_name, "nvidia.gpu.clock_event");
    assert_eq!(logs[0].severity_text, "INFO");
    assert_eq!(
        attrs(&logs[0].attributes),
        BTreeMap::from([
            ("nvidia.clock_event.duration".into(), "double:2.5".into()),
            ("nvidia.clock_event.reason".into(), "hw_thermal".into()),
            ("nvidia.clock_event.state".into(), "ended".into()),
        ])
    );
    assert_eq!(logs[1].event_name, "nvidia.gpu.health");
    assert_eq!(
        (logs[1].severity_number, logs[1].severity_text.as_str()),
        (17, "ERROR")
    );
    assert_eq!(logs[1].time_unix_nano, 1_002_000_000_000);
    assert_eq!(
        attrs(&logs[1].attributes),
        BTreeMap::from([
            (
                "nvidia.health.error_code".into(),
                "DCGM_FR_VOLATILE_DBE_DETECTED".into()
            ),
            ("nvidia.health.previous_result".into(), "pass".into()),
            ("nvidia.health.result".into(), "fail".into()),
            ("nvidia.health.watch".into(), "MEM".into()),
        ])
    );
    assert_eq!(
        logs[1].body.as_ref().and_then(|b| b.value.clone()),
        Some(any_value::Value::StringValue(
            "Detected 1 volatile double-bit ECC error(s) in GPU 2.".into()
        ))
    );
}

#[test]
fn host_mode_puts_the_entity_on_the_record_and_dcgm_style_names_it_like_the_labels() {
    let snap = with_incidents();
    let built = request(builder(OtelAttributeStyle::Dcgm, OtelResourceMode::Host).records(&snap));
    assert_eq!(built.resources, 1);
    let rl = &built.request.resource_logs[0];
    assert_eq!(
        attrs(&rl.resource.as_ref().unwrap().attributes),
        BTreeMap::from([
            ("host.name".into(), "node-1".into()),
            ("service.name".into(), "t".into()),
        ])
    );
    assert!(
        rl.schema_url.is_empty(),
        "dcgm-exporter's names follow no schema"
    );
    let first = attrs(&rl.scope_logs[0].log_records[0].attributes);
    assert_eq!(first["UUID"], "GPU-aaa");
    // Shared by two pods: the device's record names neither.
    assert!(!first.contains_key("pod"));
    assert_eq!(first["nvidia.xid.code"], "int:48");
}

#[test]
fn no_incidents_no_records() {
    let snap = snapshot(counters(), 1, 10);
    let b = builder(OtelAttributeStyle::Otel, OtelResourceMode::PerEntity);
    assert!(b.records(&snap).is_empty());
    assert_eq!(request(Vec::new()).request.resource_logs.len(), 0);
    let _ = Arc::new(snap);
}
