//! Incident log records through the real exporter (library level: no source fills incidents yet, so
//! the snapshots are a simulated poll of `tests/fixtures/scenarios/nvlink-pair.yaml` with synthetic
//! incidents and a pod on GPU 0) to real receivers started on 127.0.0.1 inside the test: an HTTP
//! server decoding `ExportLogsServiceRequest`/`ExportMetricsServiceRequest` by path, a tonic gRPC
//! server with `LogsService` and `MetricsService`, and the independent rotel collector. Assertions are
//! on what arrived: resources (GPU, pod), event names, severities, times, attributes, bodies; and on
//! where each signal went when `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` and `..._LOGS_ENDPOINT` differ.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::{common, peers};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::otlp::{attrs, body, value, Receiver as Sink, WAIT};
use clap::Parser;
use dcgm_otel::counters;
use dcgm_otel::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
use dcgm_otel::export::otel::otlp::log_records::RecordBuilder;
use dcgm_otel::export::otel::otlp::{logs, settings, OtlpArgs, OtlpPlan, Signal};
use dcgm_otel::export::otel::OtelContext;
use dcgm_otel::snapshot::attribution::{self, Attribute};
use dcgm_otel::snapshot::{
    Attribution, EntityKind, HealthResult, HostInfo, Incident, IncidentKind, Snapshot,
    SnapshotStore,
};
use dcgm_otel::source::sim::{Scenario, SimSource};
use dcgm_otel::source::Source;
use dcgm_otel::telemetry::self_metrics::SelfMetrics;
use opentelemetry_proto::tonic::common::v1::any_value::Value::{DoubleValue, IntValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;

// ---- snapshots with incidents --------------------------------------------------------------------

#[derive(Parser)]
struct Only {
    #[command(flatten)]
    otlp: OtlpArgs,
}

fn args(list: &[&str]) -> OtlpArgs {
    let mut v = vec!["dcgm-otel"];
    v.extend_from_slice(list);
    Only::try_parse_from(v).unwrap().otlp
}

fn env_of(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// One simulated poll of the two-GPU fixture fleet, GPU 0 held by pod `trainer-0` of namespace `ml`.
fn fleet() -> (Arc<counters::CounterSet>, Snapshot) {
    let scenario = Scenario::load(&common::fixtures_path("scenarios/nvlink-pair.yaml")).unwrap();
    let set = counters::parse(counters::DEFAULT_COUNTERS_CSV, "built-in default counters").unwrap();
    let counters = Arc::new(set);
    let mut sim = SimSource::new(
        &scenario,
        1,
        "golden-host",
        counters.clone(),
        &dcgm_otel::config::devices::Selectors::default(),
        Duration::from_millis(200),
    )
    .unwrap();
    let mut reading = sim.poll().unwrap();
    let mut pod = Attribution::default();
    pod.add(&[
        Attribute::new(&attribution::NAMESPACE, "ml"),
        Attribute::new(&attribution::POD, "trainer-0"),
        Attribute::new(&attribution::POD_UID, "uid-trainer-0"),
        Attribute::new(&attribution::CONTAINER, "main"),
    ]);
    let pod = Arc::new(pod);
    for e in &mut reading.entities {
        if e.entity.gpu_index() == Some(0) && e.entity.kind == EntityKind::Gpu {
            e.attribution = pod.clone();
        }
    }
    let snap = Snapshot {
        seq: 1,
        taken_at: at(2_000),
        counters: counters.clone(),
        host: Arc::new(HostInfo {
            hostname: Some("gpu-node-1".into()),
            node_name: None,
        }),
        driver_version: reading.driver_version.clone(),
        entities: reading.entities,
        processes: Vec::new(),
        derived: Vec::new(),
        per_set: Vec::new(),
        incidents: Vec::new(),
        distributions: Default::default(),
    };
    (counters, snap)
}

/// Snapshots 1..=3 of the fleet: XID 31 then XID 48 on GPU 0 (the pod's), a thermal clock event
/// starting and ending on a MIG instance of GPU 1, a MEM health failure there; snapshot 2 has none.
fn snapshots(base: &Snapshot) -> Vec<Arc<Snapshot>> {
    let first = |kind: EntityKind, gpu: u32| {
        base.entities
            .iter()
            .find(|e| e.entity.kind == kind && e.entity.gpu_index() == Some(gpu))
            .unwrap()
            .clone()
    };
    // GPU 0, and GPU 1's first MIG instance (a MIG GPU shows only its instances).
    let (g0, g1) = (first(EntityKind::Gpu, 0), first(EntityKind::GpuInstance, 1));
    let incident = |e: &dcgm_otel::snapshot::EntityReading, secs, kind| Incident {
        entity: e.entity.clone(),
        attribution: e.attribution.clone(),
        at: at(secs),
        kind,
    };
    let mut out = Vec::new();
    for (seq, incidents) in [
        (
            1,
            vec![
                incident(&g0, 1_001, IncidentKind::Xid { code: 31 }),
                incident(
                    &g1,
                    1_002,
                    IncidentKind::ClockEventStarted {
                        reason: "hw_thermal",
                    },
                ),
            ],
        ),
        (2, Vec::new()),
        (
            3,
            vec![
                incident(&g0, 1_003, IncidentKind::Xid { code: 48 }),
                incident(
                    &g1,
                    1_004,
                    IncidentKind::ClockEventEnded {
                        reason: "hw_thermal",
                        duration: Duration::from_secs(2),
                    },
                ),
                incident(
                    &g1,
                    1_005,
                    IncidentKind::Health {
                        watch: "MEM",
                        previous: HealthResult::Pass,
                        result: HealthResult::Fail,
                        error_code: "DCGM_FR_VOLATILE_DBE_DETECTED".into(),
                        message: "Detected 1 volatile double-bit ECC error(s) in GPU 1.".into(),
                    },
                ),
            ],
        ),
    ] {
        let mut s = base.clone();
        s.seq = seq;
        s.incidents = incidents;
        out.push(Arc::new(s));
    }
    out
}

fn builder(counters: &counters::CounterSet) -> RecordBuilder {
    let naming = Naming::new(
        OtelAttributeStyle::Otel,
        dcgm_otel::config::LabelStyle::default(),
        counters,
    );
    let split = naming.resource_split(OtelResourceMode::PerEntity);
    RecordBuilder::new(
        naming,
        split,
        &[
            opentelemetry::KeyValue::new("service.name", "dcgm-otel"),
            opentelemetry::KeyValue::new("host.name", "gpu-node-1"),
        ],
    )
}

/// Push the three snapshots through the log exporter configured by `env`; shut it down.
fn export_logs(env: Vec<(&'static str, String)>) -> Arc<SelfMetrics> {
    let (counters, base) = fleet();
    let cfg = settings::resolve_signal(
        &args(&["--otlp"]),
        Signal::Logs,
        Duration::from_secs(1),
        &env_of(env),
    )
    .unwrap()
    .unwrap();
    let registry = SelfMetrics::new();
    let export = logs::start(&cfg, builder(&counters), &registry).unwrap();
    let consumer = export.consumer();
    for s in snapshots(&base) {
        consumer.on_snapshot(&s);
    }
    export.shutdown();
    registry
}

/// What every receiver must have: the five records, exactly.
fn assert_the_five_records(records: &[(BTreeMap<String, String>, LogRecord)]) {
    let mut by_time: Vec<&(BTreeMap<String, String>, LogRecord)> = records.iter().collect();
    by_time.sort_by_key(|(_, r)| r.time_unix_nano);
    let summary: Vec<(String, String, String, i32, String, u64)> = by_time
        .iter()
        .map(|(res, r)| {
            (
                res.get("nvidia.gpu.index").cloned().unwrap_or_default(),
                res.get("k8s.pod.name").cloned().unwrap_or_default(),
                r.event_name.clone(),
                r.severity_number,
                r.severity_text.clone(),
                r.time_unix_nano / 1_000_000_000,
            )
        })
        .collect();
    let row = |gpu: &str, pod: &str, event: &str, n: i32, sev: &str, t: u64| {
        (
            gpu.to_string(),
            pod.to_string(),
            event.to_string(),
            n,
            sev.to_string(),
            t,
        )
    };
    assert_eq!(
        summary,
        vec![
            row("0", "trainer-0", "nvidia.gpu.xid", 13, "WARN", 1_001),
            row("1", "", "nvidia.gpu.clock_event", 13, "WARN", 1_002),
            row("0", "trainer-0", "nvidia.gpu.xid", 21, "FATAL", 1_003),
            row("1", "", "nvidia.gpu.clock_event", 9, "INFO", 1_004),
            row("1", "", "nvidia.gpu.health", 17, "ERROR", 1_005),
        ]
    );
    let (res, xid31) = by_time[0];
    for (k, v) in [
        ("k8s.namespace.name", "ml"),
        ("k8s.pod.uid", "uid-trainer-0"),
        ("k8s.container.name", "main"),
        ("hw.type", "gpu"),
        ("host.name", "gpu-node-1"),
        ("service.name", "dcgm-otel"),
    ] {
        assert_eq!(res.get(k).map(String::as_str), Some(v), "{k} in {res:?}");
    }
    assert!(res["hw.id"].starts_with("GPU-"), "{res:?}");
    assert_eq!(xid31.observed_time_unix_nano, 2_000_000_000_000);
    assert_eq!(
        attrs(&xid31.attributes),
        BTreeMap::from([
            ("nvidia.xid.class".into(), "other".into()),
            ("nvidia.xid.code".into(), "31".into()),
            ("nvidia.xid.message".into(), "GPU memory page fault".into()),
        ])
    );
    assert_eq!(
        value(&xid31.attributes, "nvidia.xid.code"),
        Some(&IntValue(31))
    );
    assert_eq!(body(xid31), "XID 31: GPU memory page fault");
    let (_, xid48) = by_time[2];
    assert_eq!(
        value(&xid48.attributes, "nvidia.xid.code"),
        Some(&IntValue(48))
    );
    let (gpu1, ended) = by_time[3];
    assert!(!gpu1.contains_key("k8s.pod.name"), "{gpu1:?}");
    assert_eq!(gpu1["nvidia.mig.profile"], "3g.40gb", "{gpu1:?}");
    assert_eq!(
        attrs(&ended.attributes),
        BTreeMap::from([
            ("nvidia.clock_event.duration".into(), "2".into()),
            ("nvidia.clock_event.reason".into(), "hw_thermal".into()),
            ("nvidia.clock_event.state".into(), "ended".into()),
        ])
    );
    assert_eq!(
        value(&ended.attributes, "nvidia.clock_event.duration"),
        Some(&DoubleValue(2.0))
    );
    let (_, health) = by_time[4];
    assert_eq!(
        attrs(&health.attributes),
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
        body(health),
        "Detected 1 volatile double-bit ECC error(s) in GPU 1."
    );
}

fn rendered(registry: &SelfMetrics) -> String {
    let mut out = String::new();
    registry.render(&mut out);
    out
}

#[test]
fn http_receiver_gets_every_incident_once() {
    let sink = Sink::http(0, None);
    let registry = export_logs(vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
    ]);
    let records = sink.wait_for_records(5);
    assert_eq!(records.len(), 5);
    assert_the_five_records(&records);
    assert!(sink.store.lock().unwrap().unknown.is_empty());
    let text = rendered(&registry);
    assert!(
        text.contains("dcgm_otel_otlp_log_records_dropped_total{protocol=\"http/protobuf\"} 0"),
        "{text}"
    );
    assert!(
        !text.contains("dcgm_otel_otlp_log_exports_total{protocol=\"http/protobuf\"} 0"),
        "{text}"
    );
}

#[test]
fn grpc_receiver_gets_every_incident_once() {
    let sink = Sink::grpc(0, None);
    export_logs(vec![("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", sink.url())]);
    let records = sink.wait_for_records(5);
    assert_eq!(records.len(), 5);
    assert_the_five_records(&records);
}

#[test]
fn metrics_and_logs_go_to_their_own_endpoints() {
    // Metrics over HTTP to one receiver's custom path, logs over gRPC to another: the signal
    // variables win over the generic ones, and a signal endpoint is used as it is.
    let metrics_sink = Sink::http_paths(0, None, "/v1/logs", "/custom/metrics");
    let logs_sink = Sink::grpc(0, None);
    // The generic endpoint: a port the test holds and never listens on (nothing may arrive there).
    let (_refusing, refused_port) = common::refusing_port();
    let env = env_of(vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{refused_port}"),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            format!("{}/custom/metrics", metrics_sink.url()),
        ),
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", logs_sink.url()),
        ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "100".into()),
    ]);
    let (counters, base) = fleet();
    let ctx = OtelContext {
        counters: &counters,
        labels: dcgm_otel::config::LabelStyle::default(),
        hostname: Some("gpu-node-1"),
        node_name: None,
    };
    let plan = OtlpPlan::resolve(&args(&[]), &ctx, Duration::from_secs(1), &env)
        .unwrap()
        .expect("OTLP is on: a metrics endpoint is set");
    let store = SnapshotStore::new();
    let registry = SelfMetrics::new();
    let export = plan.start(store.clone(), &registry).unwrap();
    let consumer = export.incident_consumer().expect("logs are on by default");
    // As the collector thread does: the metrics export thread is told of each publication too.
    let published = export.publication_consumer();
    for s in snapshots(&base) {
        store.publish(s.clone());
        consumer.on_snapshot(&s);
        published.on_snapshot(&s);
    }
    assert_eq!(metrics_sink.wait_for_metrics()[0], "http /custom/metrics");
    let records = logs_sink.wait_for_records(5);
    export.shutdown();
    assert_the_five_records(&records);
    let metrics_got = metrics_sink.store.lock().unwrap();
    assert!(
        metrics_got.logs.is_empty() && metrics_got.unknown.is_empty(),
        "only metrics on the metrics endpoint: {:?}",
        metrics_got.unknown
    );
    let logs_got = logs_sink.store.lock().unwrap();
    assert!(logs_got.logs.iter().all(|r| r.via == "grpc"));
}

#[test]
fn records_wait_while_the_collector_is_down() {
    // The collector's port, held by the test: refused until the collector listens on it.
    let (collector_socket, port) = common::refusing_port();
    let (counters, base) = fleet();
    let env = env_of(vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
    ]);
    let cfg = settings::resolve_signal(
        &args(&["--otlp"]),
        Signal::Logs,
        Duration::from_secs(1),
        &env,
    )
    .unwrap()
    .unwrap();
    let registry = SelfMetrics::new();
    let export = logs::start(&cfg, builder(&counters), &registry).unwrap();
    let consumer = export.consumer();
    for s in snapshots(&base) {
        consumer.on_snapshot(&s);
    }
    // Nothing listens yet: the sender retries (more times than a metrics request would be, which gives
    // up after MAX_RETRIES) while the records wait.
    let deadline = Instant::now() + WAIT;
    let retries = |text: &str| -> u32 {
        text.lines()
            .find(|l| l.starts_with("dcgm_otel_otlp_log_retries_total{"))
            .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
            .unwrap_or(0)
    };
    while retries(&rendered(&registry)) <= dcgm_otel::export::otel::otlp::queue::MAX_RETRIES {
        assert!(
            Instant::now() < deadline,
            "no retry:\n{}",
            rendered(&registry)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    collector_socket.listen(128).unwrap();
    let sink = Sink::http_on(collector_socket.into(), None);
    let records = sink.wait_for_records(5);
    export.shutdown();
    assert_eq!(records.len(), 5);
    assert_the_five_records(&records);
    let text = rendered(&registry);
    assert!(
        text.contains("dcgm_otel_otlp_log_records_dropped_total{protocol=\"http/protobuf\"} 0"),
        "{text}"
    );
    assert!(
        text.contains(
            "dcgm_otel_otlp_log_export_failures_total{protocol=\"http/protobuf\",reason=\"retries_exhausted\"} 0"
        ),
        "{text}"
    );
}

#[test]
fn otlp_logs_false_sends_no_records() {
    let (counters, _) = fleet();
    let ctx = OtelContext {
        counters: &counters,
        labels: dcgm_otel::config::LabelStyle::default(),
        hostname: None,
        node_name: None,
    };
    let plan = OtlpPlan::resolve(
        &args(&["--otlp", "--otlp-logs=false"]),
        &ctx,
        Duration::from_secs(1),
        &|_| None,
    )
    .unwrap()
    .unwrap();
    let export = plan
        .start(SnapshotStore::new(), &SelfMetrics::new())
        .unwrap();
    assert!(export.incident_consumer().is_none());
    export.shutdown();
}

// ---- rotel ---------------------------------------------------------------------------------------

#[test]
fn rotel_receives_the_records_over_grpc_and_http() {
    let dir = tempfile::tempdir().unwrap();
    let Some(rotel) = peers::Rotel::start(dir.path(), "logs") else {
        return;
    };
    let (gp, hp) = (rotel.grpc_port, rotel.http_port);
    // gRPC with a scheme-less endpoint made plaintext by INSECURE; HTTP through the generic base URL.
    let grpc = export_logs(vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("127.0.0.1:{gp}")),
        ("OTEL_EXPORTER_OTLP_INSECURE", "true".into()),
    ]);
    let http = export_logs(vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{hp}"),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
    ]);
    for (registry, protocol) in [(grpc, "grpc"), (http, "http/protobuf")] {
        let text = rendered(&registry);
        for clean in [
            format!("dcgm_otel_otlp_log_export_failures_total{{protocol=\"{protocol}\",reason=\"permanent\"}} 0"),
            format!("dcgm_otel_otlp_log_records_dropped_total{{protocol=\"{protocol}\"}} 0"),
        ] {
            assert!(text.contains(&clean), "{protocol}: lacks {clean}:\n{text}");
        }
    }
    let text = rotel.log_when("both exports", |t| {
        t.matches("nvidia.gpu.health").count() >= 2
    });
    peers::assert_rotel_logged(
        &text,
        &[
            "XID 31: GPU memory page fault",
            "XID 48: Double Bit ECC Error",
            "Detected 1 volatile double-bit ECC error(s) in GPU 1.",
            "k8s.pod.name: Str(trainer-0)",
            "nvidia.xid.code: Int(48)",
            "nvidia.health.error_code: Str(DCGM_FR_VOLATILE_DBE_DETECTED)",
            "nvidia.clock_event.reason: Str(hw_thermal)",
            "SeverityText: FATAL",
            "SeverityNumber: SEVERITY_NUMBER_FATAL(21)",
            "EventName: nvidia.gpu.health",
            "Timestamp: 1005000000000",
        ],
    );
}

/// Waiting records share their Resource: records of the same entity, in one snapshot or in later ones,
/// point at one Resource (a copy per record made 10,000 waiting records cost about 65 MiB in the soak),
/// and a request still carries it in full.
#[test]
fn records_of_one_entity_share_their_resource() {
    let (counters, base) = fleet();
    let builder = builder(&counters);
    let snaps = snapshots(&base);
    let first = builder.records(&snaps[0]);
    let again = builder.records(&snaps[0]);
    assert!(!first.is_empty());
    for (a, b) in first.iter().zip(&again) {
        assert!(Arc::ptr_eq(&a.resource, &b.resource), "a second copy");
        assert!(Arc::ptr_eq(&a.resource_key, &b.resource_key));
    }
    let request = dcgm_otel::export::otel::otlp::log_records::request(again);
    let resource = request.request.resource_logs[0].resource.as_ref().unwrap();
    assert_eq!(resource, &*first[0].resource);
    assert!(resource.attributes.iter().any(|kv| kv.key == "host.name"));
}
