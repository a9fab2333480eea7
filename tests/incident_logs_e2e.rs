//! Incident log records end to end: the built binary runs the scripted scenario
//! `tests/fixtures/scenarios/incidents.yaml` (XID 31 and 48 on GPU 0, a thermal clock event on GPU 1 for
//! three collections, a MEM health failure on GPU 1) and pushes metrics and log records to two
//! receivers started inside the test, routed by `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (HTTP, a custom
//! path) and `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` (gRPC). Assertions are on the records that arrived and
//! the resources they arrived under.
//!
//! Ignored until the simulated source plays scenario `events:` (issue 13 part 4); the exporter side is
//! tested at library level in `tests/incident_logs.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

mod common;
mod logs_sink;

use std::collections::BTreeMap;

use logs_sink::{attrs, body, Sink};
use opentelemetry_proto::tonic::logs::v1::LogRecord;

type Received = (BTreeMap<String, String>, LogRecord);

fn on_gpu<'a>(records: &'a [Received], gpu: &str, event: &str) -> Vec<&'a Received> {
    records
        .iter()
        .filter(|(res, r)| {
            res.get("nvidia.gpu.index").map(String::as_str) == Some(gpu) && r.event_name == event
        })
        .collect()
}

#[test]
#[ignore = "needs scenario events (issue 13 part 4)"]
fn scripted_incidents_arrive_as_log_records_on_their_gpu() {
    let metrics = Sink::http("/v1/logs", "/custom/metrics");
    let logs = Sink::grpc();
    let scenario = common::fixtures_path("scenarios/incidents.yaml");
    let exporter = common::start(
        &[
            &format!("--simulate={scenario}"),
            "--simulate-seed",
            "1",
            "-c",
            "200",
        ],
        &[
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                &format!("{}/custom/metrics", metrics.url()),
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &logs.url()),
            ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc"),
        ],
    );
    // XID 31, XID 48, the clock event's start and end, the health failure.
    let records = logs.wait_for_records(5);
    assert!(!metrics.wait_for_metrics().is_empty());
    drop(exporter);

    let xids: Vec<String> = on_gpu(&records, "0", "nvidia.gpu.xid")
        .iter()
        .map(|(_, r)| attrs(&r.attributes)["nvidia.xid.code"].clone())
        .collect();
    assert_eq!(xids, vec!["int:31", "int:48"]);
    let severities: Vec<&str> = on_gpu(&records, "0", "nvidia.gpu.xid")
        .iter()
        .map(|(_, r)| r.severity_text.as_str())
        .collect();
    assert_eq!(severities, vec!["WARN", "FATAL"]);
    for (res, r) in on_gpu(&records, "0", "nvidia.gpu.xid") {
        assert!(res["hw.id"].starts_with("GPU-"), "{res:?}");
        assert!(r.time_unix_nano > 0 && r.time_unix_nano <= r.observed_time_unix_nano);
    }

    let clock: Vec<BTreeMap<String, String>> = on_gpu(&records, "1", "nvidia.gpu.clock_event")
        .iter()
        .map(|(_, r)| attrs(&r.attributes))
        .collect();
    assert_eq!(clock.len(), 2, "{clock:?}");
    assert_eq!(
        (
            clock[0]["nvidia.clock_event.reason"].as_str(),
            clock[0]["nvidia.clock_event.state"].as_str()
        ),
        ("hw_thermal", "started")
    );
    assert_eq!(
        (
            clock[1]["nvidia.clock_event.reason"].as_str(),
            clock[1]["nvidia.clock_event.state"].as_str()
        ),
        ("hw_thermal", "ended")
    );
    assert!(clock[1].contains_key("nvidia.clock_event.duration"));

    let health = on_gpu(&records, "1", "nvidia.gpu.health");
    assert_eq!(health.len(), 1);
    let (_, h) = health[0];
    assert_eq!(h.severity_text, "ERROR");
    let a = attrs(&h.attributes);
    assert_eq!(a["nvidia.health.watch"], "MEM");
    assert_eq!(a["nvidia.health.result"], "fail");
    assert_eq!(
        a["nvidia.health.error_code"],
        "DCGM_FR_VOLATILE_DBE_DETECTED"
    );
    assert_eq!(
        body(h),
        "Detected 1 volatile double-bit ECC error(s) in GPU 1."
    );
    // Each signal reached only its own endpoint.
    assert!(metrics.store.lock().unwrap().logs.is_empty());
    assert!(metrics.store.lock().unwrap().unknown.is_empty());
}
