//! `-m namespace:name` / `DCGM_EXPORTER_CONFIGMAP_DATA` against the fake Kubernetes API server
//! (`support::api_server`: HTTPS on 127.0.0.1, named by a kubeconfig with its CA and a bearer token): the
//! counters come from the ConfigMap's `metrics` key, an update reloads them, a bad update keeps the
//! running set (counted), and an absent ConfigMap, a missing key or a bad CSV stops start-up with one
//! line (exit 2).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::api_server::ApiServer;
use crate::support::common;

use std::time::{Duration, Instant};

use common::{get, run_to_exit, start, terminate};

const NS: &str = "gpu-monitoring";
const NAME: &str = "exporter-metrics-config-map";

fn csv_data(csv: &str) -> String {
    format!(r#"{{"metrics":{}}}"#, serde_json::to_string(csv).unwrap())
}

/// The fake API server serving the ConfigMap `NS/NAME` with `data` (none: no ConfigMap).
fn api_with(data: Option<String>) -> ApiServer {
    let api = ApiServer::start("node-a");
    if let Some(data) = data {
        api.put_configmap(NS, NAME, data);
    }
    api
}

/// The DCGM families of a body.
fn families(body: &str) -> Vec<String> {
    let mut f: Vec<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter(|l| l.starts_with("DCGM_FI_"))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    f.dedup();
    f
}

fn scrape(port: u16) -> String {
    get(port, "/metrics").unwrap().text()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

const TEMP: &str = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature in C.\n";
const TEMP_POWER: &str =
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature in C.\nDCGM_FI_DEV_POWER_USAGE, gauge, Power draw in W.\n";

#[test]
fn counters_from_the_configmap_follow_its_updates_and_keep_the_set_on_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let api = api_with(Some(csv_data(TEMP)));
    let kubeconfig = api.kubeconfig(dir.path());
    let spec = format!("{NS}:{NAME}");
    let e = start(
        &["--simulate", "-c", "200", "-m", &spec],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    );
    assert_eq!(families(&scrape(e.port)), ["DCGM_FI_DEV_GPU_TEMP"]);
    wait_for("the ConfigMap watch", || api.watches_configmap(NS, NAME));

    api.put_configmap(NS, NAME, csv_data(TEMP_POWER));
    wait_for("the updated counters", || {
        families(&scrape(e.port)) == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    });

    // A bad update: the running set stays, the failure is counted.
    api.put_configmap(NS, NAME, csv_data("DCGM_FI_NOPE, gauge, x\n"));
    wait_for("the failed reload counted", || {
        scrape(e.port).contains("dcgm_otel_config_reloads_total{result=\"failure\"} 1")
    });
    assert_eq!(
        families(&scrape(e.port)),
        ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    );

    // A good one after it applies (the 2 s between reloads may postpone it, never drop it).
    api.put_configmap(NS, NAME, csv_data(TEMP));
    wait_for("the good update after the bad one", || {
        families(&scrape(e.port)) == ["DCGM_FI_DEV_GPU_TEMP"]
    });
    let err = terminate(e);
    assert_eq!(
        err.matches("ConfigMap gpu-monitoring/exporter-metrics-config-map key metrics:1:1: unknown DCGM field 'DCGM_FI_NOPE'")
            .count(),
        1,
        "{err}"
    );
    assert_eq!(err.matches("counters reloaded").count(), 2, "{err}");
    assert!(err.contains("the counters ConfigMap changed"), "{err}");
}

#[test]
fn absent_configmap_missing_key_and_bad_csv_stop_start_up_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("{NS}:{NAME}");
    let cases = [
        (
            None,
            format!("dcgm-otel: ConfigMap {NS}/{NAME} (--configmap-data) does not exist (https://127.0.0.1:PORT)\n"),
        ),
        (
            Some(r#"{"other":"x"}"#.to_string()),
            format!("dcgm-otel: ConfigMap {NS}/{NAME} (--configmap-data) has no key 'metrics' with the counters CSV\n"),
        ),
        (
            Some(csv_data("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_GPU_TEMP, gauges, t\n")),
            format!("dcgm-otel: ConfigMap {NS}/{NAME} key metrics:2:23: unknown metric type 'gauges' (expected gauge, counter or label)\n"),
        ),
    ];
    for (data, want) in cases {
        let api = api_with(data);
        let kubeconfig = api.kubeconfig(dir.path());
        let (code, err) = run_to_exit(
            &["--simulate", "-m", &spec],
            &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        );
        assert_eq!(
            (code, err),
            (2, want.replace("PORT", &api.port.to_string()))
        );
    }
    // Without any way to the API.
    let (code, err) = run_to_exit(
        &["--simulate"],
        &[
            ("DCGM_EXPORTER_CONFIGMAP_DATA", spec.as_str()),
            ("KUBECONFIG", ""),
        ],
    );
    assert_eq!(
        (code, err.as_str()),
        (2, "dcgm-otel: --configmap-data gpu-monitoring:exporter-metrics-config-map needs the Kubernetes API: no in-cluster service account and no KUBECONFIG\n")
    );
    // Issue 35: a token for a plain-http server would go in clear; refused before any request.
    let api = api_with(Some(csv_data(TEMP)));
    let plain = crate::support::api_server::kubeconfig_with(
        dir.path(),
        &format!("http://127.0.0.1:{}", api.port),
        None,
        Some(crate::support::api_server::TOKEN),
    );
    let (code, err) = run_to_exit(
        &["--simulate", "-m", &spec],
        &[("KUBECONFIG", plain.to_str().unwrap())],
    );
    assert_eq!(
        (code, err),
        (2, format!("dcgm-otel: Kubernetes API configuration from KUBECONFIG {}: server 'http://127.0.0.1:{}' is plain http: a bearer token or client certificate is never sent without TLS; use https:// (or a kubectl proxy without a user)\n", plain.display(), api.port))
    );
    assert!(api.requests().is_empty(), "{:?}", api.requests());
    let (code, err) = run_to_exit(&["--simulate", "-m", "default"], &[]);
    assert_eq!(
        (code, err.as_str()),
        (2, "dcgm-otel: invalid value 'default' for '--configmap-data': expected NAMESPACE:NAME of a ConfigMap (lowercase DNS names), or none\n")
    );
}
