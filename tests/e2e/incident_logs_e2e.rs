//! Incident log records end to end: the built binary runs the scripted scenario
//! `tests/fixtures/scenarios/incidents.yaml` (XID 31 and 48 on GPU 0, a thermal clock event on GPU 1 for
//! three collections, a MEM health failure on GPU 1) and pushes metrics and log records to two
//! receivers started inside the test, routed by `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (HTTP, a custom
//! path) and `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` (gRPC). Assertions are on the records that arrived and
//! the resources they arrived under.
//! The exporter side alone is tested at library level in `tests/e2e/incident_logs.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common;

use std::collections::BTreeMap;

use crate::support::fake_lib;
use crate::support::otlp::{attrs, body, value, Receiver as Sink};
use opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue;
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
fn scripted_incidents_arrive_as_log_records_on_their_gpu() {
    let metrics = Sink::http_paths(0, None, "/v1/logs", "/custom/metrics");
    let logs = Sink::grpc(0, None);
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

    let xids: Vec<_> = on_gpu(&records, "0", "nvidia.gpu.xid")
        .iter()
        .map(|(_, r)| value(&r.attributes, "nvidia.xid.code").cloned())
        .collect();
    assert_eq!(xids, vec![Some(IntValue(31)), Some(IntValue(48))]);
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

/// Through the fake libdcgm with the default counters CSV (no `DCGM_EXP_*` row): log records alone make
/// the DCGM source read XID history, clock events and health, so the same incidents arrive.
#[test]
fn dcgm_source_reads_incidents_for_log_records_without_exp_rows() {
    let logs = Sink::http(0, None);
    let fake = fake_lib::Fake::new();
    let scenario = common::fixtures_path("scenarios/incidents.yaml");
    let exporter = fake.start(
        &["-c", "200", "--otlp"],
        &[
            ("FAKE_DCGM_SCENARIO", &scenario),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &logs.url()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ],
    );
    let records = logs.wait_for_records(5);
    drop(exporter);
    let xids: Vec<_> = on_gpu(&records, "0", "nvidia.gpu.xid")
        .iter()
        .map(|(_, r)| value(&r.attributes, "nvidia.xid.code").cloned())
        .collect();
    assert_eq!(xids, vec![Some(IntValue(31)), Some(IntValue(48))]);
    assert_eq!(on_gpu(&records, "1", "nvidia.gpu.clock_event").len(), 2);
    assert_eq!(on_gpu(&records, "1", "nvidia.gpu.health").len(), 1);
    let calls = fake.calls();
    assert!(calls
        .iter()
        .any(|c| c.starts_with("dcgmGetValuesSince_v2 ")));
    assert!(calls.iter().any(|c| c.starts_with("dcgmHealthCheck ")));
}

/// A GPU in MIG mode has no :9400 series of its own, but it has its own OTLP Resource (the entity
/// model): a clock event of the whole GPU is one record on the GPU's Resource — not one per pod
/// holding an instance, and with no pod or MIG attributes (the `demo` scenario's GPU 1).
#[test]
fn a_whole_gpu_incident_on_a_mig_gpu_is_one_record_on_the_gpu() {
    // Metrics go to a port the test holds and never listens on (refused), logs to the receiver.
    let (_refusing, refused_port) = common::refusing_port();
    let metrics_endpoint = format!("http://127.0.0.1:{refused_port}/");
    let logs = Sink::grpc(0, None);
    let exporter = common::start(
        &[
            "--simulate=demo",
            "-k",
            "-c",
            "100",
            "--otlp-logs=true",
            "--otlp-endpoint",
            &logs.url(),
        ],
        &[(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            metrics_endpoint.as_str(),
        )],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let started = loop {
        let records = logs.wait_for_records(1);
        let started: Vec<Received> = on_gpu(&records, "1", "nvidia.gpu.clock_event")
            .into_iter()
            .filter(|(_, r)| {
                attrs(&r.attributes)
                    .get("nvidia.clock_event.state")
                    .is_some_and(|s| s == "started")
            })
            .cloned()
            .collect();
        if !started.is_empty() || std::time::Instant::now() > deadline {
            break started;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    drop(exporter);
    assert!(!started.is_empty(), "no clock event on GPU 1");
    for (res, r) in &started {
        assert!(
            !res.keys()
                .any(|k| k.starts_with("k8s.pod") || k.starts_with("nvidia.mig")),
            "the GPU's Resource names no pod or instance: {res:?}"
        );
        assert!(!attrs(&r.attributes).contains_key("k8s.pod.name"));
    }
    // One record per event start (each start at its own time), not one per pod.
    let mut times: Vec<u64> = started.iter().map(|(_, r)| r.time_unix_nano).collect();
    let n = times.len();
    times.sort_unstable();
    times.dedup();
    assert_eq!(times.len(), n, "an event start arrived more than once");
}
