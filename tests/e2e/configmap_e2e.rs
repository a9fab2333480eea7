//! `-m namespace:name` / `DCGM_EXPORTER_CONFIGMAP_DATA` against a fake Kubernetes API server on
//! 127.0.0.1 (plain HTTP, named by a kubeconfig): the counters come from the ConfigMap's `metrics` key,
//! an update reloads them, a bad update keeps the running set (counted), and an absent ConfigMap, a
//! missing key or a bad CSV stops start-up with one line (exit 2).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{get, run_to_exit, start, terminate};

const NS: &str = "gpu-monitoring";
const NAME: &str = "exporter-metrics-config-map";

#[derive(Default)]
struct State {
    /// The ConfigMap's `data` as JSON (`None`: no ConfigMap).
    data: Option<String>,
    rv: u64,
    watchers: Vec<std::sync::mpsc::Sender<String>>,
    requests: Vec<String>,
}

/// Serves GET of the ConfigMap, and list + watch of the namespace's ConfigMaps by `metadata.name`.
#[derive(Clone)]
struct FakeApi {
    state: Arc<Mutex<State>>,
    port: u16,
}

fn object(data: &str, rv: u64) -> String {
    format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{NAME}","namespace":"{NS}","resourceVersion":"{rv}"}},"data":{data}}}"#
    )
}

fn csv_data(csv: &str) -> String {
    format!(r#"{{"metrics":{}}}"#, serde_json::to_string(csv).unwrap())
}

impl FakeApi {
    fn start(data: Option<String>) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let api = FakeApi {
            state: Arc::new(Mutex::new(State {
                data,
                rv: 10,
                ..State::default()
            })),
            port,
        };
        let a = api.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let a = a.clone();
                std::thread::spawn(move || a.serve(conn));
            }
        });
        api
    }

    fn serve(&self, mut conn: TcpStream) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match conn.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).to_string();
        let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let reply = |conn: &mut TcpStream, status: &str, body: &str| {
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        };
        let mut s = self.state.lock().unwrap();
        s.requests.push(target.clone());
        assert!(
            head.contains("Authorization: Bearer t0k3n")
                || head.contains("authorization: Bearer t0k3n"),
            "no token: {head}"
        );
        let one = format!("/api/v1/namespaces/{NS}/configmaps/{NAME}");
        let collection = format!("/api/v1/namespaces/{NS}/configmaps");
        if path == one {
            match &s.data {
                Some(d) => {
                    let body = object(d, s.rv);
                    drop(s);
                    reply(&mut conn, "200 OK", &body);
                }
                None => {
                    drop(s);
                    reply(
                        &mut conn,
                        "404 Not Found",
                        r#"{"kind":"Status","code":404,"reason":"NotFound"}"#,
                    );
                }
            }
            return;
        }
        if path != collection || !query.contains(&format!("fieldSelector=metadata.name%3D{NAME}")) {
            drop(s);
            reply(&mut conn, "404 Not Found", "{}");
            return;
        }
        if !query.contains("watch=") {
            let items = s.data.as_ref().map(|d| object(d, s.rv)).unwrap_or_default();
            let body = format!(
                r#"{{"kind":"ConfigMapList","metadata":{{"resourceVersion":"{}"}},"items":[{items}]}}"#,
                s.rv
            );
            drop(s);
            reply(&mut conn, "200 OK", &body);
            return;
        }
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let _ = conn.flush();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        s.watchers.push(tx);
        drop(s);
        while let Ok(line) = rx.recv() {
            let line = format!("{line}\n");
            if write!(conn, "{:x}\r\n{line}\r\n", line.len()).is_err() || conn.flush().is_err() {
                return;
            }
        }
    }

    /// Change the ConfigMap's data: a MODIFIED event to every watch.
    fn update(&self, data: String) {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        let line = format!(r#"{{"type":"MODIFIED","object":{}}}"#, object(&data, s.rv));
        s.data = Some(data);
        s.watchers.retain(|w| w.send(line.clone()).is_ok());
    }

    fn watching(&self) -> bool {
        !self.state.lock().unwrap().watchers.is_empty()
    }

    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{}'}}\ncontexts:\n- name: test\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user: {{token: t0k3n}}\n",
                self.port
            ),
        )
        .unwrap();
        path
    }
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
    let api = FakeApi::start(Some(csv_data(TEMP)));
    let kubeconfig = api.kubeconfig(dir.path());
    let spec = format!("{NS}:{NAME}");
    let e = start(
        &["--simulate", "-c", "200", "-m", &spec],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    );
    assert_eq!(families(&scrape(e.port)), ["DCGM_FI_DEV_GPU_TEMP"]);
    wait_for("the ConfigMap watch", || api.watching());

    api.update(csv_data(TEMP_POWER));
    wait_for("the updated counters", || {
        families(&scrape(e.port)) == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    });

    // A bad update: the running set stays, the failure is counted.
    api.update(csv_data("DCGM_FI_NOPE, gauge, x\n"));
    wait_for("the failed reload counted", || {
        scrape(e.port).contains("dcgm_otel_config_reloads_total{result=\"failure\"} 1")
    });
    assert_eq!(
        families(&scrape(e.port)),
        ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"]
    );

    // A good one after it applies (the 2 s between reloads may postpone it, never drop it).
    api.update(csv_data(TEMP));
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
            format!("dcgm-otel: ConfigMap {NS}/{NAME} (--configmap-data) does not exist (http://127.0.0.1:PORT)\n"),
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
        let api = FakeApi::start(data);
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
    let (code, err) = run_to_exit(&["--simulate", "-m", "default"], &[]);
    assert_eq!(
        (code, err.as_str()),
        (2, "dcgm-otel: invalid value 'default' for '--configmap-data': expected NAMESPACE:NAME of a ConfigMap (lowercase DNS names), or none\n")
    );
}
