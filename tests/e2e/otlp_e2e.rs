//! OTLP push end to end: the built binary (`--simulate --simulate-seed 1 -c 200`) pushes to real OTLP
//! receivers started inside the test on 127.0.0.1 — a tonic gRPC `MetricsService` and a hyper HTTP
//! server, both decoding `ExportMetricsServiceRequest` with opentelemetry-proto — optionally behind TLS
//! (test CA and mTLS made with rcgen), with gzip; and, when available, the independent rotel collector.
//! Assertions are on what the receiver got: resources, attribute keys and values, instrument names,
//! units, types, temporality, and values equal to those of the same simulated poll.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::otlp::{attrs, Receiver as Sink, ServerTls};
use crate::support::{common, fake_lib, peers};

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dcgm_otel::counters;
use dcgm_otel::snapshot::EntityKind;
use dcgm_otel::source::sim::{Scenario, SimSource};
use dcgm_otel::source::Source;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, Metric, NumberDataPoint,
};

// ---- receivers: support::otlp ------------------------------------------------------------------

/// A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate.
struct TestPki {
    ca_pem: String,
    server: (String, String),
    client: (String, String),
}

fn make_pki() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "dcgm-otel test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |names: Vec<String>, cn: &str| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        let cert = p.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    TestPki {
        ca_pem: ca.pem(),
        server: leaf(vec!["localhost".into(), "127.0.0.1".into()], "localhost"),
        client: leaf(vec!["dcgm-otel-client".into()], "dcgm-otel-client"),
    }
}

// ---- reading requests -----------------------------------------------------------------------------

fn value(dp: &NumberDataPoint) -> f64 {
    match dp.value {
        Some(number_data_point::Value::AsDouble(d)) => d,
        Some(number_data_point::Value::AsInt(i)) => i as f64,
        None => f64::NAN,
    }
}

fn points(m: &Metric) -> &[NumberDataPoint] {
    match &m.data {
        Some(Data::Gauge(g)) => &g.data_points,
        Some(Data::Sum(s)) => &s.data_points,
        _ => &[],
    }
}

/// One data point: resource attributes, point attributes, its metric, its value.
type Point<'a> = (
    BTreeMap<String, String>,
    BTreeMap<String, String>,
    &'a Metric,
    f64,
);

/// Every data point of a request, flattened.
fn flatten(req: &ExportMetricsServiceRequest) -> Vec<Point<'_>> {
    let mut out = Vec::new();
    for rm in &req.resource_metrics {
        let r = attrs(&rm.resource.as_ref().unwrap().attributes);
        for sm in &rm.scope_metrics {
            assert_eq!(sm.scope.as_ref().unwrap().name, "dcgm-otel");
            for m in &sm.metrics {
                for dp in points(m) {
                    out.push((r.clone(), attrs(&dp.attributes), m, value(dp)));
                }
            }
        }
    }
    out
}

// ---- expectations from the same simulated fleet ----------------------------------------------------

/// (GPU UUID, MIG GPU-instance id) → metric name → value, for simulated polls 1..=n.
type Expected = Vec<HashMap<(String, Option<u32>), HashMap<String, f64>>>;

fn expected_polls(n: usize) -> Expected {
    let scenario = Scenario::load("default").unwrap();
    let set = counters::parse(counters::DEFAULT_COUNTERS_CSV, "built-in default counters").unwrap();
    let counters = Arc::new(set);
    let devices = dcgm_otel::config::devices::Selectors::default();
    // The exporters of these tests run as node `test-node` (tests/support/common.rs).
    let mut sim = SimSource::new(
        &scenario,
        1,
        "test-node",
        counters.clone(),
        &devices,
        Duration::from_millis(200),
    )
    .unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let reading = sim.poll().unwrap();
        let mut poll = HashMap::new();
        let mut rollups: BTreeMap<String, Option<f64>> = BTreeMap::new();
        for e in &reading.entities {
            if e.entity.kind == EntityKind::NvLink {
                continue;
            }
            let key = (
                e.entity
                    .gpu
                    .as_ref()
                    .map(|g| g.uuid.clone())
                    .unwrap_or_default(),
                e.entity.mig.as_ref().map(|m| m.gi_id),
            );
            let mut values = HashMap::new();
            for (row, v) in e.values.iter() {
                let row = &counters.rows[row];
                if let Some(f) = v.as_f64() {
                    values.entry(row.name.clone()).or_insert(f);
                }
            }
            // A GPU in MIG mode: its board's Resource (no instance id) carries the board-level
            // values, read once from its first instance (the entity model).
            if e.entity.kind == EntityKind::GpuInstance {
                poll.entry((key.0.clone(), None))
                    .or_insert_with(|| values.clone());
                // The MIG roll-up on the board: the instances' GR_ENGINE_ACTIVE weighted by their
                // share of the GPU, summed in reading order.
                let share = values
                    .get("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
                    .map(|v| v * dcgm_otel::enrich::kubernetes::cost::device_fraction(&e.entity));
                let sum = rollups.entry(key.0.clone()).or_insert(Some(0.0));
                *sum = sum.zip(share).map(|(a, b)| a + b);
            }
            poll.insert(key, values);
        }
        for (uuid, sum) in rollups {
            if let (Some(sum), Some(board)) = (sum, poll.get_mut(&(uuid, None))) {
                board.insert("nvidia.gpu.mig.utilization".into(), sum.clamp(0.0, 1.0));
            }
        }
        out.push(poll);
    }
    out
}

/// Names of the identity attributes in a style.
struct Style {
    uuid: &'static str,
    mig_id: &'static str,
}

const OTEL: Style = Style {
    uuid: "hw.id",
    mig_id: "nvidia.mig.instance_id",
};
const DCGM: Style = Style {
    uuid: "UUID",
    mig_id: "GPU_I_ID",
};

/// The first simulated poll whose values all data points of `req` equal.
fn poll_of(req: &ExportMetricsServiceRequest, style: &Style, expected: &Expected) -> Option<usize> {
    let flat = flatten(req);
    let matches = |poll: &HashMap<(String, Option<u32>), HashMap<String, f64>>| {
        flat.iter().all(|(r, p, m, v)| {
            // A MIG instance's `hw.id` is its own; its GPU is `hw.parent`.
            let uuid = r
                .get("hw.parent")
                .or_else(|| p.get("hw.parent"))
                .or_else(|| r.get(style.uuid))
                .or_else(|| p.get(style.uuid))
                .cloned()
                .unwrap_or_default();
            let mig = r
                .get(style.mig_id)
                .or_else(|| p.get(style.mig_id))
                .and_then(|s| s.parse::<u32>().ok());
            poll.get(&(uuid, mig)).and_then(|vals| vals.get(&m.name)) == Some(v)
        })
    };
    expected.iter().position(matches)
}

/// Assert that every data point of `req` equals the simulated value of one and the same poll.
fn assert_values_from_one_poll(
    req: &ExportMetricsServiceRequest,
    style: &Style,
    expected: &Expected,
) {
    let flat = flatten(req);
    assert!(!flat.is_empty());
    assert!(
        poll_of(req, style, expected).is_some(),
        "no simulated poll matches all {} data points of the request (first: {:?})",
        flat.len(),
        flat.first().map(|(r, p, m, v)| (r, p, &m.name, v))
    );
}

/// The attributes a data point carries of its own in per-entity mode: the XID code and its meaning
/// (no XID happens in the simulated default fleet).
fn own_attributes(metric: &str, style: &Style) -> BTreeMap<String, String> {
    if metric != "DCGM_FI_DEV_XID_ERRORS" {
        return BTreeMap::new();
    }
    let (code, message) = if style.uuid == "hw.id" {
        ("nvidia.xid.code", "nvidia.xid.message")
    } else {
        ("err_code", "err_msg")
    };
    BTreeMap::from([
        (code.to_string(), "0".to_string()),
        (message.to_string(), "No Error".to_string()),
    ])
}

/// Resources of the default scenario's bare fleet: GPU 0, GPU 1's board (the entity model) and GPU 1's
/// three MIG instances.
const GPU_RESOURCES: usize = 5;

fn otlp_args(endpoint: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "--simulate",
        "--simulate-seed",
        "1",
        "-c",
        "200",
        "--otlp-endpoint",
        endpoint,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn start_exporter(args: &[String], env: &[(&str, &str)]) -> common::Exporter {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    common::start(&a, env)
}

const WAIT: Duration = Duration::from_secs(30);

/// `args` with `--otlp-pipeline <pipeline>` appended.
fn piped(mut args: Vec<String>, pipeline: &str) -> Vec<String> {
    args.extend(["--otlp-pipeline".to_string(), pipeline.to_string()]);
    args
}

/// One test (`<name>::direct`) running a case with the direct pipeline named explicitly
/// (`--otlp-pipeline direct` is still accepted; the SDK pipeline of 0.1 is no longer built).
macro_rules! both_pipelines {
    ($name:ident, $case:ident) => {
        mod $name {
            #[test]
            fn direct() {
                super::$case("direct");
            }
        }
    };
}

// ---- tests ---------------------------------------------------------------------------------------

both_pipelines!(
    grpc_per_entity_otel_attributes,
    grpc_per_entity_otel_attributes_case
);

fn grpc_per_entity_otel_attributes_case(pipeline: &str) {
    let sink = Sink::grpc(0, None);
    let args = piped(otlp_args(&format!("http://{}", sink.addr), &[]), pipeline);
    let exporter = start_exporter(
        &args,
        &[("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci")],
    );
    let got = sink.wait_for(3, WAIT);
    drop(exporter);
    let expected = expected_polls(400);
    let r = &got[1];
    assert_eq!(r.via, "grpc");
    assert!(!r.gzip);
    // default scenario: GPU 0, GPU 1's board and its three MIG instances (flex mode) → five
    // resources, one request (the SDK path, before the entity model, has no board Resource: four).
    let resources: Vec<BTreeMap<String, String>> = r
        .req
        .resource_metrics
        .iter()
        .map(|rm| attrs(&rm.resource.as_ref().unwrap().attributes))
        .collect();
    assert_eq!(resources.len(), GPU_RESOURCES, "{resources:#?}");
    for res in &resources {
        assert_eq!(res["service.name"], "dcgm-otel");
        assert_eq!(res["service.version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(res["host.name"], "test-node");
        assert_eq!(res["k8s.node.name"], "test-node");
        assert_eq!(res["deployment.environment"], "ci");
        assert_eq!(res["hw.type"], "gpu");
        assert_eq!(res["hw.vendor"], "NVIDIA");
        // A MIG instance is a component of its own: its MIG UUID, its GPU as `hw.parent`.
        match res.get("hw.parent") {
            Some(parent) => {
                assert!(res["hw.id"].starts_with("MIG-"), "{res:?}");
                assert!(parent.starts_with("GPU-"), "{res:?}");
            }
            None => assert!(res["hw.id"].starts_with("GPU-"), "{res:?}"),
        }
        assert!(res["hw.model"].contains("H100"), "{res:?}");
        assert_eq!(
            res["nvidia.gpu.device"],
            format!("nvidia{}", res["nvidia.gpu.index"])
        );
        assert!(res.contains_key("nvidia.gpu.pci_bus_id"));
        assert_eq!(res["nvidia.driver.version"], "550.144.03");
        assert!(!res.contains_key("UUID") && !res.contains_key("gpu"));
    }
    let mut migs: Vec<&str> = resources
        .iter()
        .filter_map(|r| r.get("nvidia.mig.profile").map(String::as_str))
        .collect();
    migs.sort();
    assert_eq!(migs, vec!["1g.10gb", "2g.20gb", "3g.40gb"]);
    for res in resources
        .iter()
        .filter(|r| r.contains_key("nvidia.mig.profile"))
    {
        assert_eq!(res["nvidia.gpu.index"], "1");
        assert!(res["nvidia.mig.instance_id"].parse::<u32>().is_ok());
        assert!(res["nvidia.mig.uuid"].starts_with("MIG-"), "{res:?}");
    }
    // instruments: names, units, descriptions, types, temporality; no data-point attributes but the
    // XID code's own.
    let flat = flatten(&r.req);
    for (_, p, m, _) in &flat {
        assert_eq!(
            p,
            &own_attributes(&m.name, &OTEL),
            "per-entity mode leaves no identity attributes on data points"
        );
    }
    let metric = |name: &str| {
        flat.iter()
            .map(|(_, _, m, _)| *m)
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("{name} not received"))
    };
    let sm = metric("DCGM_FI_DEV_SM_CLOCK");
    assert_eq!(sm.unit, "MHz");
    assert_eq!(sm.description, "SM clock frequency (in MHz).");
    assert!(matches!(sm.data, Some(Data::Gauge(_))));
    assert_eq!(metric("DCGM_FI_DEV_GPU_TEMP").unit, "Cel");
    assert_eq!(metric("DCGM_FI_DEV_POWER_USAGE").unit, "W");
    assert_eq!(metric("DCGM_FI_DEV_GPU_UTIL").unit, "%");
    assert_eq!(metric("DCGM_FI_DEV_FB_USED").unit, "MiB");
    let energy = metric("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION");
    assert_eq!(energy.unit, "mJ");
    match &energy.data {
        Some(Data::Sum(s)) => {
            assert!(s.is_monotonic);
            assert_eq!(s.aggregation_temporality, 2, "cumulative");
            assert!(matches!(
                s.data_points[0].value,
                Some(number_data_point::Value::AsInt(_))
            ));
            assert!(s.data_points[0].start_time_unix_nano > 0);
        }
        other => panic!("energy is not a Sum: {other:?}"),
    }
    assert!(
        flat.iter()
            .all(|(_, _, m, _)| m.name != "DCGM_FI_DRIVER_VERSION"),
        "label rows are not instruments"
    );
    for r in &got[1..] {
        assert_values_from_one_poll(&r.req, &OTEL, &expected);
    }
}

both_pipelines!(
    http_host_mode_dcgm_attributes_with_env_config,
    http_host_mode_dcgm_attributes_with_env_config_case
);

fn http_host_mode_dcgm_attributes_with_env_config_case(pipeline: &str) {
    let sink = Sink::http(0, None);
    let exporter = start_exporter(
        &[
            "--simulate",
            "--simulate-seed",
            "1",
            "-c",
            "200",
            "--otel-resource-mode",
            "host",
            "--otel-attribute-style",
            "dcgm",
        ]
        .map(String::from),
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("http://{}", sink.addr),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-api-key=s%20cret,X-Tenant=gpu-team",
            ),
            ("OTEL_SERVICE_NAME", "gpu-fleet"),
            ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta"),
            ("DCGM_OTEL_OTLP_PIPELINE", pipeline),
        ],
    );
    let got = sink.wait_for(3, WAIT);
    drop(exporter);
    let expected = expected_polls(400);
    let r = &got[1];
    assert_eq!(r.via, "http");
    let header = |k: &str| {
        r.headers
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("x-api-key"), Some("s cret"));
    assert_eq!(header("x-tenant"), Some("gpu-team"));
    assert_eq!(header("content-type"), Some("application/x-protobuf"));
    assert_eq!(r.req.resource_metrics.len(), 1, "host mode: one resource");
    let res = attrs(
        &r.req.resource_metrics[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes,
    );
    assert_eq!(res["service.name"], "gpu-fleet");
    assert_eq!(res["Hostname"], "test-node");
    assert!(!res.contains_key("UUID") && !res.contains_key("hw.id"));
    let flat = flatten(&r.req);
    let mut migs = 0;
    for (_, p, _, _) in &flat {
        for k in [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "DCGM_FI_DRIVER_VERSION",
        ] {
            assert!(p.contains_key(k), "data point lacks {k}: {p:?}");
        }
        assert!(
            !p.keys().any(|k| k.contains('.')),
            "dcgm style uses no semconv names: {p:?}"
        );
        if p.contains_key("GPU_I_PROFILE") {
            assert!(p.contains_key("GPU_I_ID"));
            migs += 1;
        }
    }
    assert!(migs > 0);
    let energy = flat
        .iter()
        .find(|(_, _, m, _)| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        .unwrap();
    match &energy.2.data {
        Some(Data::Sum(s)) => assert_eq!(s.aggregation_temporality, 1, "delta"),
        other => panic!("{other:?}"),
    }
    // Gauges are values of one poll (deltas are not, so compare gauges only).
    let mut gauges_only = r.req.clone();
    for rm in &mut gauges_only.resource_metrics {
        for sm in &mut rm.scope_metrics {
            sm.metrics
                .retain(|m| matches!(m.data, Some(Data::Gauge(_))));
        }
    }
    assert_values_from_one_poll(&gauges_only, &DCGM, &expected);
}

both_pipelines!(
    grpc_host_mode_otel_and_http_per_entity_dcgm,
    grpc_host_mode_otel_and_http_per_entity_dcgm_case
);

fn grpc_host_mode_otel_and_http_per_entity_dcgm_case(pipeline: &str) {
    // gRPC, host mode, otel names: one resource, identity on the points.
    let sink = Sink::grpc(0, None);
    let args = piped(
        otlp_args(
            &format!("http://{}", sink.addr),
            &["--otel-resource-mode", "host"],
        ),
        pipeline,
    );
    let exporter = start_exporter(&args, &[]);
    let got = sink.wait_for(2, WAIT);
    drop(exporter);
    let expected = expected_polls(400);
    assert_eq!(got[1].req.resource_metrics.len(), 1);
    for (r, p, _, _) in flatten(&got[1].req) {
        assert_eq!(r["host.name"], "test-node");
        assert!(!r.contains_key("hw.id"));
        assert!(
            p["hw.id"].starts_with("GPU-")
                || (p["hw.id"].starts_with("MIG-") && p["hw.parent"].starts_with("GPU-")),
            "{p:?}"
        );
        assert_eq!(p["hw.type"], "gpu");
    }
    assert_values_from_one_poll(&got[1].req, &OTEL, &expected);

    // HTTP, per-entity, dcgm names: one resource per GPU, board and MIG instance, keyed by dcgm labels.
    let sink = Sink::http(0, None);
    let args = piped(
        otlp_args(
            &format!("http://{}", sink.addr),
            &[
                "--otlp-protocol",
                "http/protobuf",
                "--otel-attribute-style",
                "dcgm",
            ],
        ),
        pipeline,
    );
    let exporter = start_exporter(&args, &[]);
    let got = sink.wait_for(2, WAIT);
    drop(exporter);
    assert_eq!(got[1].req.resource_metrics.len(), GPU_RESOURCES);
    for (r, p, m, _) in flatten(&got[1].req) {
        assert_eq!(p, own_attributes(&m.name, &DCGM));
        assert!(r["UUID"].starts_with("GPU-"));
        assert_eq!(r["Hostname"], "test-node");
        assert_eq!(r["DCGM_FI_DRIVER_VERSION"], "550.144.03");
        assert!(r.contains_key("modelName") && r.contains_key("gpu") && r.contains_key("device"));
    }
    assert_values_from_one_poll(&got[1].req, &DCGM, &expected);
}

#[test]
fn gzip_on_both_transports() {
    let g = Sink::grpc(0, None);
    let exporter = start_exporter(
        &otlp_args(
            &format!("http://{}", g.addr),
            &["--otlp-compression", "gzip"],
        ),
        &[],
    );
    let got = g.wait_for(1, WAIT);
    drop(exporter);
    assert!(
        got[0].gzip,
        "grpc-encoding: gzip expected, headers {:?}",
        got[0].headers
    );
    assert_eq!(got[0].req.resource_metrics.len(), GPU_RESOURCES);

    let h = Sink::http(0, None);
    let exporter = start_exporter(
        &otlp_args(
            &format!("http://{}", h.addr),
            &["--otlp-protocol", "http/protobuf"],
        ),
        &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
    );
    let got = h.wait_for(1, WAIT);
    drop(exporter);
    assert!(got[0].gzip);
    assert_eq!(got[0].req.resource_metrics.len(), GPU_RESOURCES);
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn tls_and_mtls_with_a_test_ca() {
    let pki = make_pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.pem", &pki.ca_pem);
    let cert = write(dir.path(), "client.pem", &pki.client.0);
    let key = write(dir.path(), "client-key.pem", &pki.client.1);
    let server = ServerTls {
        cert_pem: pki.server.0.clone(),
        key_pem: pki.server.1.clone(),
        client_ca_pem: Some(pki.ca_pem.clone()),
    };
    // gRPC over TLS with a client certificate (mTLS), CA and identity from flags.
    let g = Sink::grpc(0, Some(server.clone()));
    let endpoint = format!("https://localhost:{}", g.addr.port());
    let exporter = start_exporter(
        &otlp_args(
            &endpoint,
            &[
                "--otlp-certificate",
                &ca,
                "--otlp-client-certificate",
                &cert,
                "--otlp-client-key",
                &key,
            ],
        ),
        &[],
    );
    let got = g.wait_for(1, WAIT);
    drop(exporter);
    assert_eq!(got[0].req.resource_metrics.len(), GPU_RESOURCES);

    // HTTP over TLS with mTLS, everything from the standard variables.
    let h = Sink::http(0, Some(server));
    let exporter = start_exporter(
        &["--simulate", "-c", "200"].map(String::from),
        &[
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                &format!("https://127.0.0.1:{}/v1/metrics", h.addr.port()),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key),
        ],
    );
    let got = h.wait_for(1, WAIT);
    drop(exporter);
    assert_eq!(got[0].req.resource_metrics.len(), GPU_RESOURCES);

    // Without the client certificate the mTLS receiver gets nothing, and the exporter counts failures.
    let h = Sink::http(
        0,
        Some(ServerTls {
            cert_pem: pki.server.0.clone(),
            key_pem: pki.server.1.clone(),
            client_ca_pem: Some(pki.ca_pem.clone()),
        }),
    );
    let exporter = start_exporter(
        &otlp_args(
            &format!("https://localhost:{}", h.addr.port()),
            &[
                "--otlp-protocol",
                "http/protobuf",
                "--otlp-certificate",
                &ca,
            ],
        ),
        &[],
    );
    let deadline = Instant::now() + WAIT;
    loop {
        let m = common::get(exporter.port, "/metrics").unwrap().text();
        if m.lines()
            .any(|l| l.starts_with("dcgm_otel_otlp_retries_total{") && !l.ends_with(" 0"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no failed OTLP attempt counted:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(h.received().is_empty());
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

both_pipelines!(
    collector_down_at_start_then_up,
    collector_down_at_start_then_up_case
);

fn collector_down_at_start_then_up_case(pipeline: &str) {
    // The collector's port is bound by the test and not listening: connections are refused (the
    // collector is down) and no other process can take the port before the collector comes up on it.
    let (collector_socket, port) = common::refusing_port();
    let args = piped(
        otlp_args(
            &format!("http://127.0.0.1:{port}"),
            &["--otlp-max-pending", "2"],
        ),
        pipeline,
    );
    let exporter = start_exporter(&args, &[]);
    let pid = exporter.child.id();
    let dropped = |port: u16| -> f64 {
        let r = common::get(port, "/metrics").unwrap();
        assert_eq!(r.status, 200);
        r.text()
            .lines()
            .find(|l| l.starts_with("dcgm_otel_otlp_dropped_exports_total{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Collector down: exports fail, are retried with backoff and dropped beyond 2 pending; :9400 serves.
    let wait_dropped = |at_least: f64, what: &str| -> f64 {
        let deadline = Instant::now() + WAIT;
        loop {
            let n = dropped(exporter.port);
            if n >= at_least {
                return n;
            }
            assert!(Instant::now() < deadline, "{what}: {n} dropped exports");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let first = wait_dropped(1.0, "no dropped export counted while the collector is down");
    let rss_down = vm_rss_kib(pid);
    // Ten more requests built and dropped (work done, not time waited) must not grow memory.
    wait_dropped(first + 10.0, "no ten more dropped exports");
    let rss_down_later = vm_rss_kib(pid);
    // Collector up on the same port: data arrives.
    collector_socket.listen(128).unwrap();
    let sink = Sink::grpc_on(collector_socket.into(), None);
    let got = sink.wait_for(2, WAIT);
    assert_eq!(got[1].req.resource_metrics.len(), GPU_RESOURCES);
    let rss_up = vm_rss_kib(pid);
    eprintln!("VmRSS: collector down {rss_down} KiB, ten dropped exports later {rss_down_later} KiB, after recovery {rss_up} KiB");
    assert!(
        rss_down_later < rss_down + 16 * 1024,
        "memory grows while the collector is down"
    );
    assert!(rss_up < 256 * 1024, "VmRSS {rss_up} KiB");
    drop(exporter);
}

/// Data points of every kind in a request.
fn data_points_in(req: &ExportMetricsServiceRequest) -> usize {
    req.resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(Data::Summary(s)) => s.data_points.len(),
            None => 0,
        })
        .sum()
}

/// The export self-metrics are what the receiver got: as many delivered requests as it received,
/// their protobuf bytes summed, and the last request's size, data points and resources (the gauges
/// are set when a request is encoded: the last delivered one, or the next, then in flight).
#[test]
fn the_export_self_metrics_tell_what_was_sent() {
    use prost::Message as _;
    let sink = Sink::grpc(0, None);
    // An export every 2 s, a collection (and a /metrics body) every 200 ms.
    let e = start_exporter(
        &otlp_args(
            &format!("http://{}", sink.addr),
            &["--otlp-export-interval", "2000"],
        ),
        &[],
    );
    let metric = |body: &str, prefix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum()
    };
    let deadline = Instant::now() + WAIT;
    let (body, received_then) = loop {
        let body = common::get(e.port, "/metrics").unwrap().text();
        let received = sink.received().len();
        if metric(&body, "dcgm_otel_otlp_exports_total{") >= 2.0 {
            break (body, received);
        }
        assert!(Instant::now() < deadline, "no two exports counted:\n{body}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let exports = metric(&body, "dcgm_otel_otlp_exports_total{") as usize;
    // Delivered means stored by the receiver (it stores before it answers).
    assert!(
        received_then >= exports,
        "{exports} exports counted, {received_then} received"
    );
    // The next request too, in case the gauges are already its own.
    let got = sink.wait_for(exports + 1, WAIT);
    let sizes: Vec<usize> = got.iter().map(|r| r.req.encoded_len()).collect();
    assert_eq!(
        metric(&body, "dcgm_otel_otlp_sent_bytes_total{") as usize,
        sizes[..exports].iter().sum::<usize>(),
        "sent bytes of {exports} requests of {sizes:?}"
    );
    let gauges = (
        metric(&body, "dcgm_otel_otlp_request_bytes{") as usize,
        metric(&body, "dcgm_otel_otlp_data_points{") as usize,
        metric(&body, "dcgm_otel_otlp_resources{") as usize,
    );
    let of = |i: usize| {
        let req = &got[i].req;
        (sizes[i], data_points_in(req), req.resource_metrics.len())
    };
    assert!(
        gauges == of(exports - 1) || gauges == of(exports),
        "gauges (bytes, points, resources) {gauges:?}; last delivered {:?}, next {:?}",
        of(exports - 1),
        of(exports)
    );
    for zero in [
        "dcgm_otel_otlp_export_failures_total{",
        "dcgm_otel_otlp_retries_total{",
        "dcgm_otel_otlp_dropped_exports_total{",
    ] {
        assert_eq!(metric(&body, zero), 0.0, "{zero}\n{body}");
    }
    for timing in [
        "dcgm_otel_otlp_encode_duration_seconds{",
        "dcgm_otel_otlp_collect_duration_seconds{",
        "dcgm_otel_otlp_export_duration_seconds{",
    ] {
        assert!(metric(&body, timing) > 0.0, "{timing} not set:\n{body}");
    }
}

#[test]
fn bad_otlp_settings_exit_2_naming_the_input() {
    let (code, err) = common::run_to_exit(
        &[
            "--simulate",
            "-a",
            "127.0.0.1:0",
            "--otlp-protocol",
            "http/json",
            "--otlp",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--otlp-protocol"), "{err}");
    let (code, err) = common::run_to_exit(
        &["--simulate", "-a", "127.0.0.1:0"],
        // No scheme: gRPC would take it as https:// (OTEL_EXPORTER_OTLP_INSECURE), HTTP needs one.
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{err}");
    let (code, err) = common::run_to_exit(
        &["--simulate", "-a", "127.0.0.1:0", "--otlp"],
        &[("DCGM_OTEL_OTLP_PIPELINE", "fast")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--otlp-pipeline"), "{err}");
}

// ---- rotel: an independent OTLP receiver ----------------------------------------------------------

#[test]
fn rotel_receives_grpc_and_http() {
    let dir = tempfile::tempdir().unwrap();
    let Some(rotel) = peers::Rotel::start(dir.path(), "metrics") else {
        return;
    };
    let (gp, hp) = (rotel.grpc_port, rotel.http_port);
    let grpc = start_exporter(
        &otlp_args(
            &format!("http://127.0.0.1:{gp}"),
            &["--otel-service-name", "via-grpc"],
        ),
        &[],
    );
    let http = start_exporter(
        &otlp_args(
            &format!("http://127.0.0.1:{hp}"),
            &[
                "--otlp-protocol",
                "http/protobuf",
                "--otel-service-name",
                "via-http",
            ],
        ),
        &[],
    );
    let text = rotel.log_when("both exports", |t| {
        t.contains("Str(via-grpc)")
            && t.contains("Str(via-http)")
            && t.contains("ResourceMetrics #3")
    });
    drop(grpc);
    drop(http);
    peers::assert_rotel_logged(
        &text,
        &[
            "-> Name: DCGM_FI_DEV_SM_CLOCK",
            "-> Unit: MHz",
            "-> DataType: Gauge",
            "-> Name: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "-> DataType: Sum",
            "-> IsMonotonic: true",
            "AGGREGATION_TEMPORALITY_CUMULATIVE",
            "-> hw.id: Str(GPU-",
            "-> hw.type: Str(gpu)",
            "-> nvidia.mig.profile: Str(1g.10gb)",
            "-> service.name: Str(via-grpc)",
            "-> service.name: Str(via-http)",
            "InstrumentationScope dcgm-otel",
        ],
    );
}

/// Read one self-metric sample (`name{...}` or `name`) from /metrics.
fn self_metric(port: u16, prefix: &str) -> f64 {
    let m = common::get(port, "/metrics").unwrap().text();
    m.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

both_pipelines!(
    retryable_failures_are_retried_and_partial_success_counted,
    retryable_failures_are_retried_and_partial_success_counted_case
);

fn retryable_failures_are_retried_and_partial_success_counted_case(pipeline: &str) {
    for (protocol, sink) in [
        ("grpc", Sink::grpc(0, None)),
        ("http/protobuf", Sink::http(0, None)),
    ] {
        sink.behave(2, 3);
        let exporter = start_exporter(
            &piped(
                otlp_args(
                    &format!("http://{}", sink.addr),
                    &["--otlp-protocol", protocol],
                ),
                pipeline,
            ),
            &[],
        );
        let got = sink.wait_for(2, WAIT);
        assert_eq!(got[0].req.resource_metrics.len(), GPU_RESOURCES);
        let deadline = Instant::now() + WAIT;
        loop {
            let retries = self_metric(exporter.port, "dcgm_otel_otlp_retries_total{");
            let rejected = self_metric(exporter.port, "dcgm_otel_otlp_rejected_data_points_total{");
            let partials = self_metric(exporter.port, "dcgm_otel_otlp_partial_successes_total{");
            let exports = self_metric(exporter.port, "dcgm_otel_otlp_exports_total{");
            if retries >= 2.0 && rejected >= 6.0 && partials >= 2.0 && exports >= 2.0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{protocol}: retries {retries}, rejected {rejected}, partial {partials}, exports {exports}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(exporter);
    }
}

both_pipelines!(
    shutdown_sends_the_last_collection,
    shutdown_sends_the_last_collection_case
);

fn shutdown_sends_the_last_collection_case(pipeline: &str) {
    // An export interval far beyond the test: the only export is the one SIGTERM triggers.
    let sink = Sink::grpc(0, None);
    let mut exporter = start_exporter(
        &piped(
            otlp_args(
                &format!("http://{}", sink.addr),
                &["--otlp-export-interval", "3600000"],
            ),
            pipeline,
        ),
        &[],
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(sink.received().is_empty());
    let status = std::process::Command::new("kill")
        .args(["-TERM", &exporter.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = exporter.child.wait().unwrap();
    assert!(code.success(), "{code:?}");
    let got = sink.wait_for(1, WAIT);
    assert_eq!(got[0].req.resource_metrics.len(), GPU_RESOURCES);
}

both_pipelines!(
    hpc_jobs_make_one_resource_per_gpu_and_job,
    hpc_jobs_make_one_resource_per_gpu_and_job_case
);

fn hpc_jobs_make_one_resource_per_gpu_and_job_case(pipeline: &str) {
    // Attribution end to end: GPU 0 runs two HPC jobs (--hpc-job-mapping-dir). Under the entity
    // model GPU 0 is one Resource without job attributes (shared by two jobs: its readings leave
    // once); the SDK path, before that model, makes one Resource per job.
    // GPU 1's MIG instance 1 (3g.40gb) runs one job: its Resource carries it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("0"), "job-a\njob-b\n").unwrap();
    std::fs::write(dir.path().join("1.1"), "job-c\n").unwrap();
    let sink = Sink::grpc(0, None);
    let jobs_dir = dir.path().display().to_string();
    let exporter = start_exporter(
        &piped(
            otlp_args(
                &format!("http://{}", sink.addr),
                &["--hpc-job-mapping-dir", &jobs_dir],
            ),
            pipeline,
        ),
        &[],
    );
    let deadline = Instant::now() + WAIT;
    let resources = loop {
        let got = sink.received();
        if let Some(r) = got.iter().rev().find(|r| r.req.resource_metrics.len() == 5) {
            break r
                .req
                .resource_metrics
                .iter()
                .map(|rm| attrs(&rm.resource.as_ref().unwrap().attributes))
                .collect::<Vec<_>>();
        }
        assert!(
            Instant::now() < deadline,
            "no request with 5 resources (GPU 0 × 2 jobs, or GPU 0 and GPU 1's board, + 3 MIG): {:?}",
            got.last().map(|r| r.req.resource_metrics.len())
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(exporter);
    let mut jobs: Vec<&str> = resources
        .iter()
        .filter(|r| r["nvidia.gpu.index"] == "0")
        .map(|r| r.get("hpc.job.id").map(String::as_str).unwrap_or("-"))
        .collect();
    jobs.sort();
    assert_eq!(jobs, vec!["-"], "a GPU shared by two jobs is one Resource");
    // GPU 1: its board and instances 3 and 7 carry no job; instance 1 carries its one job.
    let gpu1: BTreeMap<String, String> = resources
        .iter()
        .filter(|r| r["nvidia.gpu.index"] == "1")
        .map(|r| {
            (
                r.get("nvidia.mig.instance_id")
                    .cloned()
                    .unwrap_or_else(|| "board".into()),
                r.get("hpc.job.id").cloned().unwrap_or_else(|| "-".into()),
            )
        })
        .collect();
    assert_eq!(
        gpu1,
        BTreeMap::from(
            [("board", "-"), ("1", "job-c"), ("3", "-"), ("7", "-")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        ),
        "{resources:#?}"
    );
}

/// The `DCGM_EXP_*` families go out on OTLP too (the `direct` pipeline writes every derived family):
/// one metric each, on the GPU's resource, the series' own labels as typed data-point attributes
/// (`nvidia.xid.code` an integer, as on `DCGM_FI_DEV_XID_ERRORS`), the `_TOTAL` rows as monotonic sums.
#[test]
fn incident_families_are_pushed_with_their_own_attributes() {
    let sink = Sink::grpc(0, None);
    let scenario = format!(
        "--simulate={}",
        common::fixtures_path("scenarios/incidents-acceptance.yaml")
    );
    let csv = common::fixtures_path("counters/exp.csv");
    let endpoint = format!("http://{}", sink.addr);
    let exporter = common::start(
        &[
            &scenario,
            "-f",
            &csv,
            "-c",
            "100",
            "--otlp-endpoint",
            &endpoint,
        ],
        &[],
    );
    // The XIDs of collection 6 are behind every request from the tenth on.
    let deadline = Instant::now() + WAIT;
    let req = loop {
        let got = sink.received();
        if got.len() >= 10 {
            break got.last().unwrap().req.clone();
        }
        assert!(Instant::now() < deadline, "only {} requests", got.len());
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(exporter);
    let total: Vec<(String, BTreeMap<String, String>, f64)> = flatten(&req)
        .into_iter()
        .filter(|(_, _, m, _)| m.name == "DCGM_EXP_XID_ERRORS_TOTAL")
        .map(|(r, p, _, v)| (r["nvidia.gpu.index"].clone(), p, v))
        .collect();
    let mut gpu1 = BTreeMap::new();
    gpu1.insert("nvidia.xid.code".to_string(), "79".to_string());
    assert!(
        total.contains(&("1".to_string(), gpu1, 3.0)),
        "no XID 79 × 3 on GPU 1 in {total:?}"
    );
    let metric = |name: &str| {
        req.resource_metrics
            .iter()
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .clone()
    };
    let xid_total = metric("DCGM_EXP_XID_ERRORS_TOTAL");
    let Some(Data::Sum(sum)) = &xid_total.data else {
        panic!("DCGM_EXP_XID_ERRORS_TOTAL is not a sum: {xid_total:?}");
    };
    assert!(sum.is_monotonic);
    let code = sum.data_points[0]
        .attributes
        .iter()
        .find(|kv| kv.key == "nvidia.xid.code")
        .and_then(|kv| kv.value.as_ref()?.value.clone());
    assert!(
        matches!(code, Some(any_value::Value::IntValue(_))),
        "{code:?}"
    );
    let mem_fail = flatten(&req).into_iter().any(|(r, a, m, v)| {
        m.name == "DCGM_EXP_GPU_HEALTH_STATUS"
            && r["nvidia.gpu.index"] == "1"
            && a.get("nvidia.health.watch").map(String::as_str) == Some("MEM")
            && a.get("nvidia.health.error_code").map(String::as_str)
                == Some("DCGM_FR_VOLATILE_DBE_DETECTED")
            && v == 20.0
    });
    assert!(mem_fail, "no MEM failure on GPU 1");
}

// ---- semantic-convention metric names (--otel-metric-names) ----------------------------------------

/// The value of `name` on the resource whose `hw.id` is `id` (with point attributes `point`).
fn point_value(flat: &[Point<'_>], id: &str, name: &str, point: &[(&str, &str)]) -> Option<f64> {
    flat.iter()
        .find(|(r, p, m, _)| {
            m.name == name
                && r.get("hw.id").map(String::as_str) == Some(id)
                && point
                    .iter()
                    .all(|(k, v)| p.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, _, v)| *v)
}

#[test]
fn semconv_names_with_both_sets_in_one_request() {
    let sink = Sink::grpc(0, None);
    let args = otlp_args(
        &format!("http://{}", sink.addr),
        &["--otel-metric-names", "both"],
    );
    let exporter = start_exporter(&args, &[]);
    let got = sink.wait_for(2, WAIT);
    drop(exporter);
    let flat = flatten(&got[1].req);
    let mut ids: Vec<&str> = flat
        .iter()
        .map(|(r, _, _, _)| r["hw.id"].as_str())
        .collect();
    ids.sort();
    ids.dedup();
    // GPU 0, GPU 1's board and the three MIG instances of GPU 1.
    assert_eq!(ids.len(), 5, "{ids:?}");
    const MIB: f64 = 1_048_576.0;
    let mut boards_without_memory = 0;
    for id in ids {
        let dcgm = |name: &str| point_value(&flat, id, name, &[]);
        // The framebuffer is measured per MIG instance: a MIG GPU's board Resource has none.
        let Some(used) = dcgm("DCGM_FI_DEV_FB_USED") else {
            assert!(id.starts_with("GPU-"), "{id}");
            assert_eq!(dcgm("hw.gpu.memory.usage"), None, "{id}");
            boards_without_memory += 1;
            continue;
        };
        let free = dcgm("DCGM_FI_DEV_FB_FREE").unwrap();
        let reserved = dcgm("DCGM_FI_DEV_FB_RESERVED").unwrap();
        assert_eq!(dcgm("hw.gpu.memory.usage"), Some(used * MIB), "{id}");
        assert_eq!(
            dcgm("hw.gpu.memory.limit"),
            Some((used + free + reserved) * MIB),
            "{id}"
        );
        let ratio = dcgm("hw.gpu.memory.utilization").unwrap();
        assert!(
            (ratio - used / (used + free + reserved)).abs() < 1e-12,
            "{id}"
        );
        let util = point_value(
            &flat,
            id,
            "hw.gpu.utilization",
            &[("hw.gpu.task", "general")],
        );
        match dcgm("DCGM_FI_DEV_GPU_UTIL") {
            Some(pct) => assert_eq!(util, Some(pct / 100.0), "{id}"),
            // MIG instances have no GPU utilization field.
            None => assert_eq!(util, None, "{id}"),
        }
        if id.starts_with("GPU-") {
            let mj = dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION").unwrap();
            assert_eq!(dcgm("hw.energy"), Some(mj / 1000.0), "{id}");
            assert_eq!(dcgm("hw.power"), dcgm("DCGM_FI_DEV_POWER_USAGE"), "{id}");
            let temp = |loc: &str| {
                point_value(&flat, id, "hw.temperature", &[("hw.sensor_location", loc)])
            };
            assert_eq!(temp("gpu"), dcgm("DCGM_FI_DEV_GPU_TEMP"), "{id}");
            assert_eq!(temp("memory"), dcgm("DCGM_FI_DEV_MEMORY_TEMP"), "{id}");
            assert_eq!(
                point_value(&flat, id, "hw.errors", &[("error.type", "pcie_replay")]),
                dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
                "{id}"
            );
        } else {
            // MIG instances: no board readings of their own (they are their GPU's, once).
            assert_eq!(dcgm("hw.power"), None, "{id}");
            assert_eq!(dcgm("DCGM_FI_DEV_POWER_USAGE"), None, "{id}");
        }
    }
    assert_eq!(boards_without_memory, 1, "GPU 1's board");
    // The board of GPU 1 (MIG mode): power, energy and temperature once, on its own Resource.
    let gpu1 = flat
        .iter()
        .find(|(r, _, _, _)| {
            r.get("nvidia.gpu.index").map(String::as_str) == Some("1")
                && !r.contains_key("nvidia.mig.profile")
        })
        .map(|(r, _, _, _)| r["hw.id"].clone())
        .expect("GPU 1's board Resource");
    for name in ["hw.power", "hw.energy", "DCGM_FI_DEV_POWER_USAGE"] {
        assert!(point_value(&flat, &gpu1, name, &[]).is_some(), "{name}");
    }
}

#[test]
fn semconv_names_reach_the_receiver() {
    let sink = Sink::http(0, None);
    // The default counters plus DCGM's cumulative PCIe byte counters (hw.gpu.io).
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        format!(
            "{}DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL, counter, PCIe bytes sent.\n\
             DCGM_FI_PROF_PCIE_RX_BYTES_TOTAL, counter, PCIe bytes received.\n",
            include_str!("../../src/counters/default-counters.csv")
        ),
    )
    .unwrap();
    let args = otlp_args(
        &format!("http://{}", sink.addr),
        &[
            "--otlp-protocol",
            "http/protobuf",
            "--otel-metric-names",
            "semconv",
            "-f",
            csv.to_str().unwrap(),
        ],
    );
    let exporter = start_exporter(&args, &[]);
    let got = sink.wait_for(3, WAIT);
    drop(exporter);
    let expected = expected_polls(1);
    let mut energy_before: HashMap<String, f64> = HashMap::new();
    let mut io_before: HashMap<(String, String), f64> = HashMap::new();
    for r in &got {
        let flat = flatten(&r.req);
        let names: std::collections::BTreeSet<&str> =
            flat.iter().map(|(_, _, m, _)| m.name.as_str()).collect();
        // Fields with a convention are sent under it only; the others keep their DCGM name.
        for gone in [
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL",
        ] {
            assert!(!names.contains(gone), "{gone} sent in semconv mode");
        }
        assert!(names.contains("hw.gpu.io"), "{names:?}");
        for kept in ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_FREE"] {
            assert!(names.contains(kept), "{kept} missing: {names:?}");
        }
        for (res, point, m, v) in &flat {
            assert!(res["hw.id"].starts_with("GPU-") || res["hw.id"].starts_with("MIG-"));
            assert!(res.contains_key("hw.name"), "{res:?}");
            match m.name.as_str() {
                "hw.gpu.utilization" => {
                    assert_eq!(m.unit, "1");
                    assert!((0.0..=1.0).contains(v), "{v}");
                    assert!(
                        ["general", "encoder", "decoder"].contains(&point["hw.gpu.task"].as_str())
                    );
                }
                "hw.gpu.memory.usage" | "hw.gpu.memory.limit" => {
                    assert_eq!(m.unit, "By");
                    let Some(Data::Sum(s)) = &m.data else {
                        panic!("{} is not a Sum", m.name)
                    };
                    assert!(!s.is_monotonic);
                }
                "hw.energy" => {
                    assert_eq!(m.unit, "J");
                    let Some(Data::Sum(s)) = &m.data else {
                        panic!("hw.energy is not a Sum")
                    };
                    assert!(s.is_monotonic);
                    assert_eq!(s.aggregation_temporality, 2, "cumulative");
                    let before = energy_before.insert(res["hw.id"].clone(), *v);
                    assert!(before.is_none_or(|b| b <= *v), "{before:?} then {v}");
                }
                "hw.gpu.io" => {
                    assert_eq!(m.unit, "By");
                    let Some(Data::Sum(s)) = &m.data else {
                        panic!("hw.gpu.io is not a Sum")
                    };
                    assert!(s.is_monotonic);
                    assert_eq!(point["nvidia.gpu.io.interconnect"], "pcie");
                    let direction = point["network.io.direction"].clone();
                    assert!(["transmit", "receive"].contains(&direction.as_str()));
                    let before = io_before.insert((res["hw.id"].clone(), direction), *v);
                    assert!(before.is_none_or(|b| b <= *v), "{before:?} then {v}");
                }
                "hw.power" => assert_eq!(m.unit, "W"),
                "hw.temperature" => {
                    assert_eq!(m.unit, "Cel");
                    assert!(point.contains_key("hw.sensor_location"));
                }
                "hw.errors" => {
                    assert_eq!(m.unit, "{error}");
                    assert!(point.contains_key("error.type"));
                }
                _ => {}
            }
        }
        // MIG instances: their own hw.id, hw.parent = their GPU's UUID, hw.name nvidia1/gi<id>.
        let gpu1: Vec<String> = expected[0]
            .keys()
            .filter(|(_, gi)| gi.is_some())
            .map(|(uuid, _)| uuid.clone())
            .collect();
        let migs: Vec<&BTreeMap<String, String>> = flat
            .iter()
            .map(|(r, _, _, _)| r)
            .filter(|r| r.contains_key("nvidia.mig.profile"))
            .collect();
        assert!(!migs.is_empty());
        for mig in migs {
            assert_eq!(mig["hw.id"], mig["nvidia.mig.uuid"]);
            assert!(mig["hw.parent"].starts_with("GPU-"), "{mig:?}");
            assert!(gpu1.contains(&mig["hw.parent"]), "{mig:?} {gpu1:?}");
            assert_eq!(
                mig["hw.name"],
                format!("nvidia1/gi{}", mig["nvidia.mig.instance_id"])
            );
        }
        let gpu0 = flat
            .iter()
            .map(|(r, _, _, _)| r)
            .find(|r| r["nvidia.gpu.index"] == "0")
            .unwrap();
        assert_eq!(gpu0["hw.name"], "nvidia0");
        assert_eq!(gpu0["hw.driver_version"], "550.144.03");
        assert!(gpu0["hw.serial_number"].len() == 13, "{gpu0:?}");
        assert!(!gpu0["hw.firmware_version"].is_empty());
        assert!(!gpu0.contains_key("hw.parent"));
    }
}

#[test]
fn semconv_names_refused_with_dcgm_attributes() {
    let (code, err) = common::run_to_exit(
        &["--simulate", "-a", "127.0.0.1:0", "--otlp"],
        &[
            ("DCGM_OTEL_METRIC_NAMES", "both"),
            ("DCGM_OTEL_ATTRIBUTE_STYLE", "dcgm"),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--otel-metric-names both"), "{err}");
    assert!(err.contains("--otel-attribute-style otel"), "{err}");
}

#[test]
fn rotel_receives_semconv_names() {
    let dir = tempfile::tempdir().unwrap();
    let Some(rotel) = peers::Rotel::start(dir.path(), "metrics") else {
        return;
    };
    let gp = rotel.grpc_port;
    let exporter = start_exporter(
        &otlp_args(
            &format!("http://127.0.0.1:{gp}"),
            &["--otel-metric-names", "semconv"],
        ),
        &[],
    );
    let text = rotel.log_when("the export", |t| {
        t.contains("-> Name: hw.energy") && t.contains("ResourceMetrics #3")
    });
    drop(exporter);
    peers::assert_rotel_logged(
        &text,
        &[
            "-> Name: hw.gpu.utilization",
            "-> hw.gpu.task: Str(general)",
            "-> Name: hw.gpu.memory.usage",
            "-> Name: hw.gpu.memory.limit",
            "-> Unit: By",
            "-> IsMonotonic: false",
            "-> Name: hw.energy",
            "-> Unit: J",
            "-> Name: hw.power",
            "-> Name: hw.temperature",
            "-> hw.sensor_location: Str(gpu)",
            "-> Unit: Cel",
            "-> Name: hw.errors",
            "-> error.type: Str(pcie_replay)",
            "-> hw.name: Str(nvidia0)",
            "-> hw.parent: Str(GPU-",
            "-> hw.id: Str(MIG-",
            "-> hw.driver_version: Str(550.144.03)",
            "-> Name: DCGM_FI_DEV_SM_CLOCK",
        ],
    );
    assert!(!text.contains("-> Name: DCGM_FI_DEV_GPU_UTIL"));
}

/// Serial and VBIOS from discovery reach the Resource as hw.serial_number / hw.firmware_version, through
/// libdcgm (dcgmGetDeviceAttributes) and NVML (nvmlDeviceGetSerial / GetVbiosVersion) alike: the fakes
/// answer with the simulated fleet's values.
#[test]
fn semconv_resources_carry_serial_and_vbios_from_dcgm_and_nvml() {
    let dir = tempfile::tempdir().unwrap();
    let dcgm = fake_lib::link(dir.path(), "libfake_libdcgm.so", "libdcgm.so.4");
    let nvml = fake_lib::link(dir.path(), "libfake_libnvml.so", "libnvidia-ml.so.1");
    let fleet =
        dcgm_otel::source::sim::Fleet::new(&Scenario::load("default").unwrap(), 1, "test-node");
    let want: BTreeMap<String, (String, String)> = fleet
        .gpus()
        .iter()
        .map(|g| {
            let id = &g.identity;
            (id.uuid.clone(), (id.serial.clone(), id.vbios.clone()))
        })
        .collect();
    assert!(want.values().all(|(s, v)| !s.is_empty() && !v.is_empty()));
    for source in [
        vec!["--dcgm-library", dcgm.as_str()],
        vec!["--source", "nvml", "--nvml-library", nvml.as_str()],
    ] {
        let sink = Sink::grpc(0, None);
        let endpoint = format!("http://{}", sink.addr);
        let mut args = vec![
            "-c",
            "200",
            "--otlp-endpoint",
            &endpoint,
            "--otel-metric-names",
            "semconv",
        ];
        args.extend(source.iter().copied());
        let exporter = common::start(&args, &[]);
        let got = sink.wait_for(1, WAIT);
        drop(exporter);
        let mut seen = 0;
        for rm in &got[0].req.resource_metrics {
            let r = attrs(&rm.resource.as_ref().unwrap().attributes);
            // Whole GPUs: hw.id is the GPU UUID; MIG instances: hw.parent is.
            let gpu = r.get("hw.parent").unwrap_or(&r["hw.id"]);
            let (serial, vbios) = &want[gpu];
            assert_eq!(r.get("hw.serial_number"), Some(serial), "{source:?} {r:?}");
            assert_eq!(
                r.get("hw.firmware_version"),
                Some(vbios),
                "{source:?} {r:?}"
            );
            seen += 1;
        }
        assert!(seen > 0, "{source:?}");
    }
}

// ---- the entity model: every measurement leaves once, on the Resource of what was measured -------

/// The physical GPUs a :9400 scrape shows (dcgm-exporter's shape: a MIG series carries its parent's
/// `UUID`), by their power series.
fn physical_gpus(port: u16) -> std::collections::BTreeSet<String> {
    let body = common::get(port, "/metrics").unwrap().text();
    body.lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_POWER_USAGE{"))
        .filter_map(|l| {
            let start = l.find("UUID=\"")? + 6;
            let len = l[start..].find('"')?;
            Some(l[start..start + len].to_string())
        })
        .collect()
}

/// The hardware a point describes: its own `hw.id`, else its Resource's.
fn hw_id<'a>(r: &'a BTreeMap<String, String>, p: &'a BTreeMap<String, String>) -> Option<&'a str> {
    p.get("hw.id")
        .or_else(|| r.get("hw.id"))
        .map(String::as_str)
}

/// The rule over one request: no two Resources alike or sharing a hardware identity, no stream
/// (metric, Resource, point attributes) twice, and each physical GPU's power and energy exactly once
/// (per sensor location for temperatures) — in per-entity mode on the GPU's own Resource — so that
/// summing `hw.power` over the request gives the physical total.
fn assert_one_measurement_once(
    req: &ExportMetricsServiceRequest,
    gpus: &std::collections::BTreeSet<String>,
    host_mode: bool,
    what: &str,
) {
    let resources: Vec<BTreeMap<String, String>> = req
        .resource_metrics
        .iter()
        .map(|rm| attrs(&rm.resource.as_ref().unwrap().attributes))
        .collect();
    for (i, a) in resources.iter().enumerate() {
        for b in &resources[i + 1..] {
            assert_ne!(a, b, "{what}: two ResourceMetrics with one Resource");
            if let (Some(x), Some(y)) = (a.get("hw.id"), b.get("hw.id")) {
                assert_ne!(x, y, "{what}: two Resources share hw.id");
            }
        }
    }
    if host_mode {
        assert_eq!(resources.len(), 1, "{what}: host mode has one Resource");
    }
    let flat = flatten(req);
    let mut streams = std::collections::HashSet::new();
    for (r, p, m, _) in &flat {
        assert!(
            streams.insert((m.name.clone(), r.clone(), p.clone())),
            "{what}: stream {} {r:?} {p:?} twice",
            m.name
        );
    }
    assert!(!gpus.is_empty(), "{what}: no GPU on :9400");
    let names: std::collections::BTreeSet<&str> =
        flat.iter().map(|(_, _, m, _)| m.name.as_str()).collect();
    let board = [
        "hw.power",
        "hw.energy",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    ];
    let checked: Vec<&str> = board.into_iter().filter(|n| names.contains(n)).collect();
    assert!(
        checked.contains(&"hw.power") || checked.contains(&"DCGM_FI_DEV_POWER_USAGE"),
        "{what}: no power metric in {names:?}"
    );
    for name in &checked {
        let points: Vec<&Point<'_>> = flat.iter().filter(|(_, _, m, _)| m.name == *name).collect();
        assert_eq!(
            points.len(),
            gpus.len(),
            "{what}: {name} has {} points for {} GPUs",
            points.len(),
            gpus.len()
        );
        for gpu in gpus {
            let on: Vec<_> = points
                .iter()
                .filter(|(r, p, _, _)| hw_id(r, p) == Some(gpu.as_str()))
                .collect();
            assert_eq!(on.len(), 1, "{what}: {name} of {gpu}");
            if !host_mode {
                assert_eq!(
                    on[0].0.get("hw.id"),
                    Some(gpu),
                    "{what}: {name} of {gpu} is not on the GPU's own Resource"
                );
            }
        }
    }
    // Temperatures: one stream per GPU and sensor location.
    let mut temps = std::collections::HashSet::new();
    for (r, p, m, _) in &flat {
        if m.name == "hw.temperature" {
            let key = (
                hw_id(r, p).map(str::to_string),
                p.get("hw.sensor_location").cloned(),
            );
            assert!(
                temps.insert(key.clone()),
                "{what}: temperature {key:?} twice"
            );
            assert!(
                key.0.as_ref().is_some_and(|id| gpus.contains(id)),
                "{what}: a temperature on {key:?}, not a physical GPU"
            );
        }
    }
    // What a backend summing hw.power per host gets is the physical total.
    if checked.contains(&"hw.power") && checked.contains(&"DCGM_FI_DEV_POWER_USAGE") {
        let total = |n: &str| -> f64 {
            flat.iter()
                .filter(|(_, _, m, _)| m.name == n)
                .map(|(_, _, _, v)| v)
                .sum()
        };
        let (semconv, dcgm) = (total("hw.power"), total("DCGM_FI_DEV_POWER_USAGE"));
        assert!(
            (semconv - dcgm).abs() < 1e-6,
            "{what}: {semconv} W vs {dcgm} W"
        );
    }
}

/// One run of the rule: `source` args (a scenario, or the fake libdcgm), a resource mode and a
/// metric-names mode, over gRPC or HTTP; the second request with data is checked (the first
/// collection has no cost counters yet).
fn entity_model_case(source: &[&str], env: &[(&str, &str)], names: &str, host: bool, grpc: bool) {
    let sink = if grpc {
        Sink::grpc(0, None)
    } else {
        Sink::http(0, None)
    };
    let endpoint = format!("http://{}", sink.addr);
    let mut args: Vec<&str> = source.to_vec();
    args.extend([
        "-c",
        "250",
        "--otlp-endpoint",
        &endpoint,
        "--otlp-export-interval",
        "300",
        "--otel-metric-names",
        names,
        "--otel-resource-mode",
        if host { "host" } else { "per-entity" },
    ]);
    if !grpc {
        args.extend(["--otlp-protocol", "http/protobuf"]);
    }
    // As a user runs it: a built-in scenario's pods (a time-sliced GPU, pods on MIG instances) on.
    let exporter = common::start_as_user(&args, env);
    let gpus = physical_gpus(exporter.port);
    let got = sink.wait_for(3, WAIT);
    drop(exporter);
    let what = format!("{source:?} {names} host={host} grpc={grpc}");
    for r in &got[1..3] {
        assert_one_measurement_once(&r.req, &gpus, host, &what);
    }
}

/// Each scenario in both resource modes; the first run also collects processes where the scenario
/// has some (without, `--collect-processes` needs NVML).
macro_rules! entity_model_scenarios {
    ($($name:ident: $scenario:literal, $processes:literal;)*) => {
        $(
            #[test]
            fn $name() {
                let source = concat!("--simulate=", $scenario);
                let first: &[&str] = if $processes {
                    &[source, "--collect-processes"]
                } else {
                    &[source]
                };
                entity_model_case(first, &[], "both", false, true);
                entity_model_case(&[source], &[], "both", true, false);
            }
        )*
    };
}

entity_model_scenarios! {
    entity_model_default: "default", true;
    entity_model_dgx_h100_mig: "dgx-h100-mig", true;
    entity_model_large: "large", true;
    entity_model_hgx_h100: "hgx-h100", false;
    entity_model_grace_hopper: "grace-hopper", false;
    entity_model_incidents: "incidents", false;
    entity_model_demo: "demo", true;
}

/// Every naming mode keeps the rule (the default scenario: a time-sliced GPU, a GPU in MIG mode).
#[test]
fn entity_model_in_every_naming_mode() {
    for names in ["dcgm", "semconv"] {
        entity_model_case(&["--simulate"], &[], names, false, false);
        entity_model_case(&["--simulate"], &[], names, true, true);
    }
}

/// The fake libdcgm's MIG fleets through the real DCGM path.
#[test]
fn entity_model_through_the_fake_libdcgm() {
    let dir = tempfile::tempdir().unwrap();
    let dcgm = fake_lib::link(dir.path(), "libfake_libdcgm.so", "libdcgm.so.4");
    for scenario in ["default", "dgx-h100-mig"] {
        let env = [("FAKE_DCGM_SCENARIO", scenario)];
        entity_model_case(&["--dcgm-library", &dcgm], &env, "both", false, true);
        entity_model_case(&["--dcgm-library", &dcgm], &env, "both", true, false);
    }
}

/// The per-pod view over OTLP sums to what :9400 shows for the same collection: each pod's cost
/// counters (`nvidia.pod.gpu.*` on the pod's Resources against `dcgm_otel_pod_*_total`) and its split of
/// a shared GPU from its processes (`nvidia.pod.gpu.utilization` against
/// `dcgm_otel_pod_gpu_utilization_percent`), while the shared GPU itself is one Resource without pods.
#[test]
fn per_pod_sums_over_otlp_equal_the_scrape() {
    let sink = Sink::http(0, None);
    let endpoint = format!("http://{}", sink.addr);
    let exporter = common::start_as_user(
        &[
            "--simulate",
            "--collect-processes",
            "-c",
            "1500",
            "--otlp-protocol",
            "http/protobuf",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-export-interval",
            "100",
        ],
        &[],
    );
    // :9400 family → (OTLP metric, factor from the OTLP value to the :9400 one).
    let families = [
        (
            "dcgm_otel_pod_gpu_seconds_total",
            "nvidia.pod.gpu.time",
            1.0,
        ),
        (
            "dcgm_otel_pod_gpu_energy_joules_total",
            "nvidia.pod.gpu.energy",
            1.0,
        ),
        (
            "dcgm_otel_pod_gpu_idle_seconds_total",
            "nvidia.pod.gpu.idle_time",
            1.0,
        ),
        (
            "dcgm_otel_pod_gpu_utilization_percent",
            "nvidia.pod.gpu.utilization",
            100.0,
        ),
        (
            "dcgm_otel_pod_gpu_memory_bytes",
            "nvidia.pod.gpu.memory.usage",
            1.0,
        ),
    ];
    let label = |line: &str, key: &str| -> Option<String> {
        let start = line.find(&format!(",{key}=\""))? + key.len() + 3;
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_string())
    };
    let deadline = Instant::now() + WAIT;
    let mut compared = 0;
    while compared < 2 {
        assert!(
            Instant::now() < deadline,
            "no scrape matched an OTLP request"
        );
        std::thread::sleep(Duration::from_millis(150));
        let Some(last) = sink.received().pop() else {
            continue;
        };
        let scrape = common::get(exporter.port, "/metrics").unwrap().text();
        // Per (family, pod): the scrape's sum and the request's.
        let mut want: BTreeMap<(String, String), f64> = BTreeMap::new();
        for line in scrape.lines() {
            for (family, _, _) in &families {
                if line.starts_with(&format!("{family}{{")) {
                    let pod = label(line, "pod").unwrap_or_default();
                    let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
                    *want.entry((family.to_string(), pod)).or_default() += v;
                }
            }
        }
        let mut got: BTreeMap<(String, String), f64> = BTreeMap::new();
        for (r, _, m, v) in flatten(&last.req) {
            if let Some((family, _, factor)) = families.iter().find(|(_, n, _)| *n == m.name) {
                assert!(
                    !r.contains_key("hw.id"),
                    "a pod's view on a device Resource: {r:?}"
                );
                let pod = r.get("k8s.pod.name").cloned().unwrap_or_default();
                *got.entry((family.to_string(), pod)).or_default() += v * factor;
            }
        }
        let equal = !want.is_empty()
            && want.len() == got.len()
            && want.iter().all(|(k, w)| {
                got.get(k)
                    .is_some_and(|g| (g - w).abs() <= 1e-6 * w.abs().max(1.0))
            });
        if equal {
            assert!(want.keys().any(|(f, _)| f.ends_with("utilization_percent")));
            assert!(want.values().any(|v| *v > 0.0));
            compared += 1;
        }
    }
    drop(exporter);
}

/// One holder, one Resource (`--collect-processes --kubernetes-virtual-gpus` on the built-in
/// scenario's cluster): each pod's cost counters, its split of a shared GPU and its processes travel
/// on one Resource of the pod, whose identity is the pod's (`k8s.namespace.name`, `k8s.pod.name`);
/// what differs within the pod (`k8s.container.name`, the GPU replica) is on the points. Before: two
/// Resources per pod, one with `k8s.container.name` for the cost counters, one without for the split
/// and the processes.
#[test]
fn a_pod_is_one_resource_for_its_cost_split_and_processes() {
    let sink = Sink::grpc(0, None);
    let endpoint = format!("http://{}", sink.addr);
    let _exporter = common::start_as_user(
        &[
            "--simulate",
            "--collect-processes",
            "--kubernetes-virtual-gpus",
            "-c",
            "300",
            "--otlp-endpoint",
            &endpoint,
        ],
        &[],
    );
    // The cost counters start at the second collection.
    let deadline = Instant::now() + WAIT;
    let req = loop {
        let req = sink.nth_or_later(1);
        if flatten(&req)
            .iter()
            .any(|(_, _, m, _)| m.name == "nvidia.pod.gpu.time")
        {
            break req;
        }
        assert!(Instant::now() < deadline, "no cost counters arrived");
        std::thread::sleep(Duration::from_millis(100));
    };
    // The pods' own Resources (no hardware identity): (namespace, pod) → their metric names.
    let mut pods: BTreeMap<(String, String), Vec<std::collections::BTreeSet<String>>> =
        BTreeMap::new();
    for rm in &req.resource_metrics {
        let r = attrs(&rm.resource.as_ref().unwrap().attributes);
        if r.contains_key("hw.id") || !r.contains_key("k8s.pod.name") {
            continue;
        }
        assert!(
            !r.contains_key("k8s.container.name") && !r.contains_key("nvidia.gpu.replica"),
            "a pod's Resource names what differs within the pod: {r:?}"
        );
        let names = rm
            .scope_metrics
            .iter()
            .flat_map(|s| s.metrics.iter().map(|m| m.name.clone()))
            .collect();
        pods.entry((r["k8s.namespace.name"].clone(), r["k8s.pod.name"].clone()))
            .or_default()
            .push(names);
    }
    assert!(!pods.is_empty());
    for (pod, resources) in &pods {
        assert_eq!(resources.len(), 1, "{pod:?}: {resources:#?}");
    }
    // A pod sharing a GPU through its processes has all three on its one Resource, the container
    // on the cost counters' points.
    let shared: Vec<_> = pods
        .iter()
        .filter(|(_, r)| r[0].contains("nvidia.pod.gpu.utilization"))
        .collect();
    assert!(!shared.is_empty(), "{pods:#?}");
    for (pod, r) in shared {
        for name in ["nvidia.pod.gpu.time", "nvidia.process.gpu.memory.usage"] {
            assert!(r[0].contains(name), "{pod:?} lacks {name}: {r:#?}");
        }
    }
    for (r, p, m, _) in flatten(&req) {
        if m.name == "nvidia.pod.gpu.time" && !r.contains_key("hw.id") {
            assert!(p.contains_key("k8s.container.name"), "{r:?} {p:?}");
        }
    }
}
