//! GPU incidents end to end (issue 13): the `DCGM_EXP_*` families on :9400 with dcgm-exporter's names,
//! labels and values, from a scenario's `events:` — through the simulated source and through the fake
//! libdcgm (values-since with timestamps, a health group and check, P2P status), which must show the
//! same series. Golden file: `UPDATE_GOLDEN=1 cargo nextest run --test e2e incidents_e2e` rewrites
//! tests/golden/incidents-exp.prom (the `DCGM_EXP_*` lines only).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::common;
use crate::support::{fake_lib, otlp};

use std::time::{Duration, Instant};

use crate::support::fake_lib::Fake;
use common::{check_golden, fixtures_path, scrape, start};

/// Collections the exporter has made, from its self-metric.
fn collections(body: &str) -> u64 {
    body.lines()
        .filter(|l| l.starts_with("dcgm_otel_collects_total"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Scrape until the exporter has made at least `n` collections (every scenario event is then behind
/// it); panics after a minute.
fn scrape_after(port: u16, n: u64) -> String {
    let started = Instant::now();
    loop {
        let body = scrape(port);
        if collections(&body) >= n {
            return scrape(port);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no {n} collections in a minute"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `DCGM_EXP_*` lines of a body (HELP, TYPE and samples).
fn exp_lines(body: &str) -> String {
    body.lines()
        .filter(|l| {
            l.starts_with("DCGM_EXP_")
                || l.starts_with("# HELP DCGM_EXP_")
                || l.starts_with("# TYPE DCGM_EXP_")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

const GPU0: &str = "gpu=\"0\",UUID=\"GPU-1014a9ed-7550-917e-d8dc-3eef7ed5481c\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"golden-host\"";
const GPU1: &str = "gpu=\"1\",UUID=\"GPU-dd3fced7-2ce4-9e7d-0b6b-9f5458ddca3d\",pci_bus_id=\"00000000:2A:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"golden-host\"";

/// What the issue asks to see, line by line.
fn assert_issue_lines(exp: &str) {
    for line in [
        format!("DCGM_EXP_XID_ERRORS_COUNT{{{GPU0},window_size_in_ms=\"300000\",xid=\"31\"}} 1"),
        format!("DCGM_EXP_XID_ERRORS_COUNT{{{GPU0},window_size_in_ms=\"300000\",xid=\"48\"}} 1"),
        // Three XIDs within one collection interval count three.
        format!("DCGM_EXP_XID_ERRORS_COUNT{{{GPU1},window_size_in_ms=\"300000\",xid=\"79\"}} 3"),
        format!("DCGM_EXP_XID_ERRORS_TOTAL{{{GPU1},xid=\"79\"}} 3"),
        format!("DCGM_EXP_XID_ERRORS_TOTAL{{{GPU0},xid=\"31\"}} 1"),
        format!("DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU0},window_size_in_ms=\"300000\"}} 0"),
        // hw_thermal held for three collections: three samples with it set (dcgm-exporter's count).
        format!("DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU1},clock_event=\"hw_thermal\",window_size_in_ms=\"300000\"}} 3"),
        format!("DCGM_EXP_CLOCK_EVENTS_TOTAL{{{GPU1},clock_event=\"hw_thermal\"}} 1"),
        format!("DCGM_EXP_GPU_HEALTH_STATUS{{{GPU1},health_error_code=\"DCGM_FR_VOLATILE_DBE_DETECTED\",health_watch=\"MEM\"}} 20"),
        format!("DCGM_EXP_GPU_HEALTH_STATUS{{{GPU1},health_error_code=\"DCGM_FR_UNKNOWN(4242)\",health_watch=\"PCIE\"}} 10"),
        format!("DCGM_EXP_GPU_HEALTH_STATUS{{{GPU0},health_error_code=\"DCGM_FR_OK\",health_watch=\"MEM\"}} 0"),
        format!("DCGM_EXP_P2P_STATUS{{{GPU0},link_status=\"OK\",peer_gpu=\"1\"}} 0"),
        "# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter".to_string(),
    ] {
        assert!(exp.lines().any(|l| l == line), "missing {line} in:\n{exp}");
    }
}

#[test]
fn simulated_events_show_the_dcgm_exporter_series() {
    let scenario = format!(
        "--simulate={}",
        fixtures_path("scenarios/incidents-acceptance.yaml")
    );
    let csv = fixtures_path("counters/exp.csv");
    let e = start(
        &[&scenario, "-f", &csv, "-c", "100"],
        &[("NODE_NAME", "golden-host")],
    );
    let body = scrape_after(e.port, 10);
    let exp = exp_lines(&body);
    assert_issue_lines(&exp);
    check_golden("incidents-exp.prom", &exp);
    // Every incident counted once in the self-metrics: 5 XIDs, 1 clock event, 2 health transitions.
    for line in [
        "dcgm_otel_incidents_total{kind=\"xid\"} 5",
        "dcgm_otel_incidents_total{kind=\"clock_event\"} 1",
        "dcgm_otel_incidents_total{kind=\"health\"} 2",
    ] {
        assert!(body.lines().any(|l| l == line), "missing {line}");
    }
}

/// The fake libdcgm (fake_lib::Fake: `libdcgm.so.4` in a private directory, its call log) serving
/// `scenario` with `faults`, read by the exporter with the exp.csv counters.
fn start_fake_with(fake: &Fake, scenario: &str, faults: &str) -> common::Exporter {
    let csv = fixtures_path("counters/exp.csv");
    fake.start(
        &["-f", &csv, "-c", "100"],
        &[
            ("FAKE_DCGM_SCENARIO", scenario),
            ("FAKE_DCGM_FAULTS", faults),
            ("NODE_NAME", "golden-host"),
        ],
    )
}

fn start_fake(fake: &Fake, faults: &str) -> common::Exporter {
    start_fake_with(
        fake,
        &fixtures_path("scenarios/incidents-acceptance.yaml"),
        faults,
    )
}

/// The same scenario served by the fake libdcgm: the exporter reads XIDs and clock events with
/// dcgmGetValuesSince_v2 from a cursor, health with one dcgmHealthCheck of its own health group per
/// collection, P2P with dcgmGetNvLinkP2PStatus — and shows exactly the simulated source's series.
#[test]
fn fake_libdcgm_shows_the_same_series_as_the_simulator() {
    let fake = Fake::new();
    let e = start_fake(&fake, "");
    let exp = exp_lines(&scrape_after(e.port, 10));
    assert_issue_lines(&exp);
    check_golden("incidents-exp.prom", &exp);
    drop(e);
    let calls = fake.calls();
    let count = |name: &str| calls.iter().filter(|l| l.starts_with(name)).count();
    assert_eq!(
        count("dcgmHealthSet "),
        1,
        "health watches set once per connection"
    );
    let polls = count("dcgmEntitiesGetLatestValues")
        - calls
            .iter()
            .filter(|l| l.starts_with("dcgmEntitiesGetLatestValues") && l.contains("flags=1"))
            .count();
    // Once per collection (never per scrape): as many as the polling latest-values calls; history
    // once more when first watched (what DCGM had before the start is not counted).
    for (call, extra) in [
        ("dcgmGetValuesSince_v2 ", 1),
        ("dcgmHealthCheck ", 0),
        ("dcgmGetNvLinkP2PStatus ", 0),
    ] {
        assert_eq!(
            count(call),
            polls + extra,
            "{call} per collection in:\n{}",
            calls.join("\n")
        );
    }
}

/// A throttle held longer than the window (hw_thermal for a minute, a 5 s window, -c 1000), through the
/// fake libdcgm: 17 s in, `_COUNT` is the number of bitmask samples of the window with hw_thermal set
/// (dcgm-exporter's count: one per watch interval, so about 5 here, never 0 while it is held) and
/// `_TOTAL` counts the one time it began. Counting edges instead would show no hw_thermal `_COUNT` at all.
#[test]
fn a_throttle_held_longer_than_the_window_keeps_its_count() {
    let fake = Fake::new();
    let csv = fixtures_path("counters/exp.csv");
    let e = fake.start(
        &[
            "-f",
            &csv,
            "-c",
            "1000",
            "--clock-events-count-window-size",
            "5000",
        ],
        &[
            (
                "FAKE_DCGM_SCENARIO",
                &fixtures_path("scenarios/held-throttle.yaml"),
            ),
            ("NODE_NAME", "golden-host"),
        ],
    );
    let exp = exp_lines(&scrape_after(e.port, 17));
    let value = |prefix: &str| -> Option<f64> {
        exp.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
    };
    let count = value(&format!(
        "DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU1},clock_event=\"hw_thermal\",window_size_in_ms=\"5000\"}}"
    ));
    assert!(count.is_some_and(|n| n >= 3.0), "{count:?} in:\n{exp}");
    assert_eq!(
        value(&format!(
            "DCGM_EXP_CLOCK_EVENTS_TOTAL{{{GPU1},clock_event=\"hw_thermal\"}}"
        )),
        Some(1.0),
        "{exp}"
    );
    // GPU 0 is never throttled: one series with 0 and no clock_event label.
    assert!(
        exp.lines()
            .any(|l| l
                == format!("DCGM_EXP_CLOCK_EVENTS_COUNT{{{GPU0},window_size_in_ms=\"5000\"}} 0")),
        "{exp}"
    );
}

/// The host engine goes away after the 7th collection (every event is behind it) and comes back: the
/// cursor, the health group and the watch are created again, nothing is counted twice and no total
/// goes back.
#[test]
fn counters_survive_a_host_engine_reconnect() {
    let fake = Fake::new();
    let e = start_fake(&fake, "disconnect_after_polls=7,down_ms=300");
    let before = exp_lines(&scrape_after(e.port, 7));
    let started = Instant::now();
    loop {
        let calls = fake.calls();
        let sets = calls
            .iter()
            .filter(|l| l.starts_with("dcgmHealthSet "))
            .count();
        if sets >= 2 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no reconnect");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = exp_lines(&scrape_after(e.port, 20));
    assert_issue_lines(&after);
    for line in before.lines().filter(|l| l.contains("_TOTAL{")) {
        assert!(
            after.lines().any(|l| l == line),
            "total changed across the reconnect: {line}\nafter:\n{after}"
        );
    }
}

/// A failing health check is logged and skipped: the exporter keeps serving and the next check
/// brings the health series.
#[test]
fn a_failing_health_check_does_not_stop_the_exporter() {
    let fake = Fake::new();
    let e = start_fake(&fake, "health_check_error=2");
    let body = scrape_after(e.port, 10);
    assert_issue_lines(&exp_lines(&body));
    assert!(
        body.lines()
            .any(|l| l == "dcgm_otel_incident_read_errors_total 1"),
        "no error counted"
    );
    let err = common::terminate(e);
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("cannot read GPU incidents"))
            .count(),
        1,
        "{err}"
    );
}

const GPU3_MIG_2G: &str = "gpu=\"3\",UUID=\"GPU-b39c99dc-0938-7574-42a3-23265a551491\",pci_bus_id=\"00000000:5D:00.0\",device=\"nvidia3\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"2g.20gb\",GPU_I_ID=\"3\",Hostname=\"golden-host\"";

/// An XID on a MIG instance is counted on that instance, not on its parent GPU's index (where
/// dcgm-exporter looks it up): the built-in `incidents` scenario's XID 43 on GPU 3's 2g.20gb instance
/// (collection 25), through the simulator and through the fake libdcgm alike.
#[test]
fn a_mig_instance_xid_is_counted_on_that_instance() {
    let csv = format!(
        "{}/src/source/sim/scenarios/incidents-counters.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let want = format!("DCGM_EXP_XID_ERRORS_TOTAL{{{GPU3_MIG_2G},DCGM_FI_DRIVER_VERSION=\"550.144.03\",xid=\"43\"}} 1");
    let sim = start(
        &["--simulate=incidents", "-f", &csv, "-c", "100"],
        &[("NODE_NAME", "golden-host")],
    );
    let fake = Fake::new();
    let dcgm = fake.start(
        &["-f", &csv, "-c", "100"],
        &[
            ("FAKE_DCGM_SCENARIO", "incidents"),
            ("NODE_NAME", "golden-host"),
        ],
    );
    for (path, e) in [("simulated", &sim), ("fake libdcgm", &dcgm)] {
        let exp = exp_lines(&scrape_after(e.port, 30));
        let xid43: Vec<&str> = exp.lines().filter(|l| l.contains("xid=\"43\"")).collect();
        assert_eq!(
            xid43
                .iter()
                .filter(|l| l.starts_with("DCGM_EXP_XID_ERRORS_TOTAL"))
                .collect::<Vec<_>>(),
            vec![&want.as_str()],
            "{path}:\n{exp}"
        );
    }
}

/// A DCGM that cannot report P2P status: asked once, logged and counted once, the family stays empty
/// and everything else is served.
#[test]
fn p2p_not_supported_is_asked_once() {
    let fake = Fake::new();
    let e = start_fake(&fake, "p2p_unsupported=1");
    let body = scrape_after(e.port, 10);
    let exp = exp_lines(&body);
    assert!(!exp.contains("DCGM_EXP_P2P_STATUS"), "{exp}");
    assert!(
        exp.lines()
            .any(|l| l.starts_with("DCGM_EXP_XID_ERRORS_TOTAL{") && l.ends_with("xid=\"79\"} 3")),
        "{exp}"
    );
    assert!(
        body.lines()
            .any(|l| l == "dcgm_otel_incident_read_errors_total 1"),
        "not counted once"
    );
    drop(e);
    let asked = fake
        .calls()
        .iter()
        .filter(|l| l.starts_with("dcgmGetNvLinkP2PStatus "))
        .count();
    assert_eq!(asked, 1);
}

/// Issue 15's `hw.status` and `hw.errors{error.type="xid"}` come from these families: with
/// `--otel-metric-names semconv`, GPU 1's MEM health failure is `hw.status{hw.state="failed"}` = 1 (and
/// 0 for `ok`), and GPU 0's XID 31 and 48 are `hw.errors{error.type="xid"}` = 2, at a real receiver.
#[test]
fn incident_families_feed_the_semconv_status_and_errors() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};

    let receiver = otlp::Receiver::http(0, None);
    let scenario = format!(
        "--simulate={}",
        fixtures_path("scenarios/incidents-acceptance.yaml")
    );
    let csv = fixtures_path("counters/exp.csv");
    let endpoint = format!("http://{}", receiver.addr);
    let e = start(
        &[
            &scenario,
            "-f",
            &csv,
            "-c",
            "100",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
            "--otel-metric-names",
            "semconv",
        ],
        &[],
    );
    scrape_after(e.port, 10);
    let seen = receiver.requests().len();
    let req = receiver.nth_or_later(seen + 1);
    drop(e);
    // (GPU index, metric, its point's attributes) → value
    let mut points = std::collections::BTreeMap::new();
    for rm in &req.resource_metrics {
        let res = rm.resource.as_ref().unwrap();
        let attr = |k: &str| {
            res.attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.as_ref()?.value.clone())
        };
        if attr("hw.parent").is_some() {
            continue; // MIG instances: no health of their own
        }
        let Some(Value::StringValue(gpu)) = attr("nvidia.gpu.index").or(attr("gpu")) else {
            continue;
        };
        for m in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
            let dps = match &m.data {
                Some(Data::Sum(s)) => &s.data_points,
                Some(Data::Gauge(g)) => &g.data_points,
                _ => continue,
            };
            for p in dps {
                let v = match p.value {
                    Some(number_data_point::Value::AsDouble(d)) => d,
                    Some(number_data_point::Value::AsInt(i)) => i as f64,
                    None => continue,
                };
                // `hw.*` points name their hardware (`hw.id`, `hw.type`); keyed here by the rest.
                if m.name.starts_with("hw.") {
                    assert!(
                        p.attributes.iter().any(|kv| kv.key == "hw.id"),
                        "{}",
                        m.name
                    );
                }
                let mut a: Vec<String> = p
                    .attributes
                    .iter()
                    .filter(|kv| kv.key != "hw.id" && kv.key != "hw.type")
                    .map(|kv| format!("{}={:?}", kv.key, kv.value.as_ref().unwrap().value))
                    .collect();
                a.sort();
                points.insert((gpu.clone(), m.name.clone(), a.join(",")), v);
            }
        }
    }
    let get = |gpu: &str, name: &str, attrs: &str| {
        points
            .get(&(gpu.to_string(), name.to_string(), attrs.to_string()))
            .copied()
            .unwrap_or_else(|| panic!("no {name}{{{attrs}}} on GPU {gpu} in {points:#?}"))
    };
    let state = |s: &str| format!("hw.state=Some(StringValue({s:?}))");
    assert_eq!(get("1", "hw.status", &state("failed")), 1.0);
    assert_eq!(get("1", "hw.status", &state("ok")), 0.0);
    assert_eq!(get("0", "hw.status", &state("ok")), 1.0);
    assert_eq!(
        get("0", "hw.errors", "error.type=Some(StringValue(\"xid\"))"),
        2.0
    );
}

/// The built-in `incidents` scenario read through NVML (`--source nvml`, the fake
/// `libnvidia-ml.so.1`) and through DCGM (the fake libdcgm): XIDs from the NVML event set (a MIG
/// instance's `gpuInstanceId` included) and clock events from the throttle-reason bitmask give exactly
/// DCGM's XID and clock-event series once every event is behind both; the health and P2P families need
/// DCGM, so through NVML they are not exported (absent, not a made-up "healthy"), said once at start.
#[test]
fn nvml_source_shows_the_same_xid_and_clock_event_series_as_dcgm() {
    let lib = fake_lib::built("libfake_libnvml.so");
    let dir = tempfile::tempdir().unwrap();
    let nvml_lib = dir.path().join("libnvidia-ml.so.1");
    std::os::unix::fs::symlink(lib, &nvml_lib).unwrap();
    let csv = format!(
        "{}/src/source/sim/scenarios/incidents-counters.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let nvml = start(
        &[
            "--source",
            "nvml",
            "--nvml-library",
            nvml_lib.to_str().unwrap(),
            "-f",
            &csv,
            "-c",
            "100",
        ],
        &[
            ("FAKE_NVML_SCENARIO", "incidents"),
            ("NODE_NAME", "golden-host"),
        ],
    );
    let fake = Fake::new();
    let dcgm = fake.start(
        &["-f", &csv, "-c", "100"],
        &[
            ("FAKE_DCGM_SCENARIO", "incidents"),
            ("NODE_NAME", "golden-host"),
        ],
    );
    // The scenario's last event ends at collection 49.
    let through_nvml = exp_lines(&scrape_after(nvml.port, 55));
    let through_dcgm = exp_lines(&scrape_after(dcgm.port, 55));
    let dcgm_only =
        |l: &str| l.contains("DCGM_EXP_GPU_HEALTH_STATUS") || l.contains("DCGM_EXP_P2P_STATUS");
    let want: String = through_dcgm
        .lines()
        .filter(|l| !dcgm_only(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        want.contains("xid=\"43\"} 1") && want.contains("clock_event=\"power_cap\"} 2"),
        "{want}"
    );
    assert_eq!(through_nvml, want);
    let err = common::terminate(nvml);
    assert_eq!(
        err.matches("rows=DCGM_EXP_GPU_HEALTH_STATUS,DCGM_EXP_P2P_STATUS")
            .count(),
        1,
        "{err}"
    );
}

/// The `demo` scenario (what `docker compose up` runs) has every kind of incident within its first 40
/// collections, and they come again (`every:`): the XID on GPU 0 counts 2 once it recurred.
#[test]
fn the_compose_demo_scenario_keeps_its_incidents_coming() {
    let e = start(
        &["--simulate=demo", "-c", "100"],
        &[("NODE_NAME", "golden-host")],
    );
    let exp = exp_lines(&scrape_after(e.port, 75));
    let has = |prefix: &str, suffix: &str| {
        exp.lines()
            .any(|l| l.starts_with(prefix) && l.ends_with(suffix))
    };
    assert!(
        has("DCGM_EXP_XID_ERRORS_TOTAL{gpu=\"0\"", "xid=\"31\"} 2"),
        "{exp}"
    );
    assert!(
        has("DCGM_EXP_XID_ERRORS_TOTAL{gpu=\"1\"", "xid=\"43\"} 1"),
        "{exp}"
    );
    assert!(
        has(
            "DCGM_EXP_CLOCK_EVENTS_TOTAL{gpu=\"0\"",
            "clock_event=\"power_cap\"} 3"
        ),
        "{exp}"
    );
    assert!(
        has(
            "DCGM_EXP_CLOCK_EVENTS_TOTAL{gpu=\"1\"",
            "clock_event=\"hw_thermal\"} 1"
        ),
        "{exp}"
    );
    assert!(
        exp.lines()
            .any(|l| l.starts_with("DCGM_EXP_GPU_HEALTH_STATUS{gpu=\"1\"")
                && l.contains("health_watch=\"PCIE\"")),
        "{exp}"
    );
}
