//! Container labels on a Docker host (issue 24): the exporter against a fake Docker Engine API on a
//! unix socket in a temporary directory (list running containers, inspect each), over the simulated
//! fleet: GPUs named by a `--gpus device=` request or by `NVIDIA_VISIBLE_DEVICES` get `container`, a
//! count-only request does not, the label goes when the container stops, and an absent socket
//! delays nothing and is counted; per-process series get their container from a fake /proc's cgroup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::common;
use crate::support::otlp;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The fake API: running containers' inspect answers, editable while it serves.
#[derive(Clone, Default)]
struct FakeDocker {
    containers: Arc<Mutex<Vec<Value>>>,
}

impl FakeDocker {
    fn serve(&self, socket: &Path) {
        let listener = UnixListener::bind(socket).unwrap();
        let state = self.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut request_line = String::new();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                reader.read_line(&mut request_line).unwrap();
                // The rest of the head.
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 2 {
                    line.clear();
                }
                let path = request_line.split_whitespace().nth(1).unwrap_or("");
                let containers = state.containers.lock().unwrap().clone();
                let found = if path == "/containers/json" {
                    Some(Value::Array(
                        containers
                            .iter()
                            .map(|c| json!({"Id": c["Id"], "Names": [c["Name"]]}))
                            .collect(),
                    ))
                } else {
                    containers
                        .iter()
                        .find(|c| format!("/containers/{}/json", c["Id"].as_str().unwrap()) == path)
                        .cloned()
                };
                let answer = match found {
                    Some(body) => {
                        format!("HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{body}")
                    }
                    None => "HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"no such container\"}"
                        .to_string(),
                };
                let _ = conn.write_all(answer.as_bytes());
            }
        });
    }
}

fn gpu_temp_lines(body: &str) -> Vec<&str> {
    body.lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{"))
        .collect()
}

fn scrape(port: u16) -> String {
    common::get(port, "/metrics").unwrap().text()
}

/// Scrape until `cond` holds on the body (one collection every 200 ms), or panic.
fn scrape_until(port: u16, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = scrape(port);
        if cond(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{what}:\n{body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn gpus_given_to_running_containers_carry_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let docker = FakeDocker::default();
    docker.serve(&socket);

    let receiver = otlp::Receiver::http(0, None);
    let endpoint = format!("http://{}", receiver.addr);
    let e = common::start(
        &[
            "--simulate",
            "-n",
            "-c",
            "200",
            "--container-labels",
            "--container-runtime-socket",
            socket.to_str().unwrap(),
            "--otlp-protocol",
            "http/protobuf",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-export-interval",
            "200",
        ],
        &[],
    );
    // GPU 1's UUID, as the fleet reports it.
    let body = scrape(e.port);
    let uuid1 = gpu_temp_lines(&body)
        .iter()
        .find(|l| l.contains("gpu=\"1\""))
        .and_then(|l| l.split("UUID=\"").nth(1))
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    *docker.containers.lock().unwrap() = vec![
        // docker run --gpus device=0 --name trainer
        json!({"Id": "aaa111", "Name": "/trainer", "HostConfig": {"DeviceRequests": [
            {"Driver": "", "Count": 0, "DeviceIDs": ["0"], "Capabilities": [["gpu"]]}]}}),
        // docker run --gpus 2: no GPU named, no label
        json!({"Id": "bbb222", "Name": "/counted", "HostConfig": {"DeviceRequests": [
            {"Driver": "", "Count": 2, "Capabilities": [["gpu"]]}]}}),
        // NVIDIA_VISIBLE_DEVICES=<GPU 1's UUID>: its MIG instances
        json!({"Id": "ccc333", "Name": "/inference", "Config": {"Env": [
            "PATH=/usr/bin", format!("NVIDIA_VISIBLE_DEVICES={uuid1}")]}}),
        // no GPU at all
        json!({"Id": "ddd444", "Name": "/web", "Config": {"Env": ["PATH=/usr/bin"]}}),
    ];
    let body = scrape_until(e.port, "container labels", |b| {
        b.contains("container=\"trainer\"")
    });
    let lines = gpu_temp_lines(&body);
    let gpu0: Vec<&&str> = lines.iter().filter(|l| l.contains("gpu=\"0\"")).collect();
    let gpu1: Vec<&&str> = lines.iter().filter(|l| l.contains("gpu=\"1\"")).collect();
    assert_eq!(gpu0.len(), 1, "{body}");
    // After the identity and the label fields, as dcgm-exporter places attributes.
    assert!(
        gpu0[0].contains(",DCGM_FI_DRIVER_VERSION=\"550.144.03\",container=\"trainer\"} "),
        "{}",
        gpu0[0]
    );
    assert_eq!(gpu1.len(), 3, "{body}");
    for l in &gpu1 {
        assert!(l.contains(",container=\"inference\"} "), "{l}");
    }
    assert!(!body.contains("container=\"counted\""), "{body}");
    assert!(!body.contains("container=\"web\""), "{body}");
    // :9400 keeps dcgm-exporter's label set: no container id label.
    assert!(!body.contains("container_id"), "{body}");
    // OTLP: the container's name and id on the Resource of the device it holds alone (GPU 0), and on
    // each of GPU 1's MIG instances; GPU 1's board is held by no container.
    let deadline = Instant::now() + Duration::from_secs(20);
    let resources = loop {
        let got = receiver.requests().pop();
        if let Some(req) = got {
            let resources = otlp::resources(&req);
            if resources
                .iter()
                .any(|(r, _)| r.get("container.name").map(String::as_str) == Some("trainer"))
            {
                break resources;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no OTLP request with container.name"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let on = |gpu: &str| -> Vec<&std::collections::BTreeMap<String, String>> {
        resources
            .iter()
            .map(|(r, _)| r)
            .filter(|r| r.get("nvidia.gpu.index").map(String::as_str) == Some(gpu))
            .collect()
    };
    let gpu0 = on("0");
    assert_eq!(gpu0.len(), 1, "{gpu0:?}");
    assert_eq!(gpu0[0]["container.name"], "trainer");
    assert_eq!(gpu0[0]["container.id"], "aaa111");
    let gpu1 = on("1");
    assert_eq!(gpu1.len(), 4, "the board and three MIG instances: {gpu1:?}");
    for r in &gpu1 {
        if r.contains_key("hw.parent") {
            assert_eq!(r["container.name"], "inference", "{r:?}");
            assert_eq!(r["container.id"], "ccc333", "{r:?}");
        } else {
            assert!(!r.contains_key("container.name"), "the board: {r:?}");
        }
    }

    // The trainer stops: its label goes with it.
    docker.containers.lock().unwrap().remove(0);
    let body = scrape_until(e.port, "trainer gone", |b| {
        !b.contains("container=\"trainer\"")
    });
    let gpu0 = gpu_temp_lines(&body)
        .into_iter()
        .find(|l| l.contains("gpu=\"0\""))
        .unwrap();
    assert!(!gpu0.contains("container="), "{gpu0}");
}

/// An absent socket: each failed call is counted, and the outage is logged once. (A socket that
/// accepts and never answers, the case that could delay collections, is the next test.)
#[test]
fn an_absent_runtime_socket_is_counted_and_logged_once() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody.sock");
    let e = common::start(
        &[
            "--simulate",
            "-n",
            "-c",
            "200",
            "--container-labels",
            "--container-runtime-socket",
            socket.to_str().unwrap(),
        ],
        &[],
    );
    let body = scrape_until(e.port, "errors counted", |b| {
        b.lines()
            .find_map(|l| l.strip_prefix("dcgm_otel_container_runtime_errors_total "))
            .is_some_and(|v| v.parse::<f64>().unwrap() >= 2.0)
    });
    assert!(!body.contains("container="), "{body}");
    assert!(body.contains("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""));
    let stderr = common::terminate(e);
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("container runtime API failed"))
            .count(),
        1,
        "logged once per outage:\n{stderr}"
    );
}

/// A runtime that accepts and never answers delays no collection: each call is cut off at its 2 s
/// deadline and counted, while collections go on at their 200 ms interval. Measured in what the
/// exporter counts, not in wall-clock limits: collections per cut-off call are ~10 when the call runs
/// beside the collections, and at most ~1 if a collection waited for it; at least 3 are required.
#[test]
fn a_hung_runtime_socket_delays_no_collection_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    // Reads the request, then waits for the exporter to give up (its close ends the read).
    hostile_runtime(&socket, |conn| {
        use std::io::Read as _;
        let _ = conn.read(&mut [0u8; 1]);
    });
    let e = start_with_runtime(&socket);
    let collects = |b: &str| {
        b.lines()
            .find_map(|l| l.strip_prefix("dcgm_otel_collects_total{source=\"simulated\"} "))
            .map_or(0.0, |v| v.parse::<f64>().unwrap())
    };
    let first = scrape_until(e.port, "the first hung call cut off and counted", |b| {
        runtime_errors(b) >= 1.0
    });
    let (c0, n0) = (collects(&first), runtime_errors(&first));
    let started = Instant::now();
    let later = scrape_until(e.port, "two more hung calls cut off and counted", |b| {
        runtime_errors(b) >= n0 + 2.0
    });
    let (c1, n1) = (collects(&later), runtime_errors(&later));
    let (calls, collections) = (n1 - n0, c1 - c0);
    eprintln!(
        "{collections} collections during {calls} hung runtime calls ({:?}): one every {:?}",
        started.elapsed(),
        started.elapsed() / (collections.max(1.0) as u32)
    );
    assert!(
        collections >= 3.0 * calls,
        "{collections} collections during {calls} runtime calls cut off at 2 s: collections waited for the runtime"
    );
    assert!(!later.contains("container="), "{later}");
    assert!(later.contains("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""));
    let err = common::terminate(e);
    assert!(
        err.contains("/containers/json: no complete answer within 2s (cut off)"),
        "{err}"
    );
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("container runtime API failed"))
            .count(),
        1,
        "logged once per outage:\n{err}"
    );
}

#[test]
fn container_labels_need_the_socket() {
    let (code, stderr) = common::run_to_exit(&["--simulate", "--container-labels"], &[]);
    assert_eq!(
        (code, stderr.as_str()),
        (2, "dcgm-otel: --container-labels needs --container-runtime-socket (the Docker or Podman API socket, e.g. /var/run/docker.sock)\n")
    );
}

#[test]
fn processes_get_the_container_of_their_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let docker = FakeDocker::default();
    // Running, no GPU assigned: its processes are labelled, its GPU's series are not.
    docker
        .containers
        .lock()
        .unwrap()
        .push(json!({"Id": id, "Name": "/monitor"}));
    docker.serve(&socket);
    // The simulated fleet's nvidia-smi (pid 5120) runs in the container; python3 (4242) has no cgroup file.
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(proc_root.join("5120")).unwrap();
    std::fs::write(
        proc_root.join("5120/cgroup"),
        format!("0::/system.slice/docker-{id}.scope\n"),
    )
    .unwrap();
    let e = common::start(
        &[
            "--simulate",
            "-n",
            "-c",
            "200",
            "--collect-processes",
            "--proc-root",
            proc_root.to_str().unwrap(),
            "--container-labels",
            "--container-runtime-socket",
            socket.to_str().unwrap(),
        ],
        &[],
    );
    let body = scrape_until(e.port, "process container", |b| {
        b.contains("container=\"monitor\"")
    });
    let process_lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("dcgm_otel_process_gpu_memory_bytes{"))
        .collect();
    let smi = process_lines
        .iter()
        .find(|l| l.contains("pid=\"5120\""))
        .unwrap();
    assert!(
        smi.contains(",pid=\"5120\",process_name=\"nvidia-smi\",container=\"monitor\"}"),
        "{smi}"
    );
    let python = process_lines
        .iter()
        .find(|l| l.contains("pid=\"4242\""))
        .unwrap();
    assert!(!python.contains("container="), "{python}");
    assert!(
        gpu_temp_lines(&body)
            .iter()
            .all(|l| !l.contains("container=")),
        "{body}"
    );
}

/// A hostile runtime socket: every request (its head read) is answered by `write`, whatever it asks.
fn hostile_runtime(
    socket: &Path,
    write: impl Fn(&mut std::os::unix::net::UnixStream) + Send + Sync + 'static,
) {
    let listener = UnixListener::bind(socket).unwrap();
    let write = Arc::new(write);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let write = write.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    line.clear();
                }
                write(&mut conn);
            });
        }
    });
}

fn runtime_errors(body: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix("dcgm_otel_container_runtime_errors_total "))
        .map_or(0.0, |v| v.parse().unwrap())
}

fn start_with_runtime(socket: &Path) -> common::Exporter {
    common::start(
        &[
            "--simulate",
            "-n",
            "-c",
            "200",
            "--container-labels",
            "--container-runtime-socket",
            socket.to_str().unwrap(),
        ],
        &[],
    )
}

/// The exporter's peak resident memory (`VmHWM`), MiB.
fn peak_rss_mib(e: &common::Exporter) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", e.child.id())).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

/// Issue 35: a 16 MiB answer (just under the old cap) was read whole and made a JSON tree: ~296 MB
/// RSS. An answer past `MAX_ANSWER` (4 MiB) is cut off and counted; memory stays small.
#[test]
fn a_huge_runtime_answer_is_cut_off_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    // Ids the exporter never inspects ('.'), so that the exporter of before only built the tree.
    let item = r#"{"Id":"x.y","Names":["/n"]},"#;
    let mut body = String::from("[");
    while body.len() + item.len() < (16 << 20) - 1024 {
        body.push_str(item);
    }
    body.push_str(r#"{"Id":"x.y"}]"#);
    let answer = Arc::new(format!(
        "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{body}"
    ));
    hostile_runtime(&socket, move |conn| {
        let _ = conn.write_all(answer.as_bytes());
    });
    let e = start_with_runtime(&socket);
    scrape_until(e.port, "the huge answer counted", |b| {
        runtime_errors(b) >= 1.0
    });
    let peak = peak_rss_mib(&e);
    eprintln!("16 MiB runtime answer: peak RSS {peak:.1} MiB");
    assert!(peak < 128.0, "peak RSS {peak:.1} MiB");
    let err = common::terminate(e);
    assert!(
        err.contains("/containers/json: answer larger than 4194304 bytes (cut off)"),
        "{err}"
    );
}

/// Issue 35: a runtime dripping one byte every 1.5 s never reached the 2 s read timeout, so the
/// refresher waited forever and counted no error. Each call now has an overall deadline: cut off at
/// 2 s, counted, logged.
#[test]
fn a_dripping_runtime_is_cut_off_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    hostile_runtime(&socket, |conn| {
        let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
        for b in b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n["
            .iter()
            .cycle()
        {
            if conn.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1500));
        }
    });
    let e = start_with_runtime(&socket);
    scrape_until(e.port, "the dripping runtime counted", |b| {
        runtime_errors(b) >= 1.0
    });
    let err = common::terminate(e);
    assert!(
        err.contains("/containers/json: no complete answer within 2s (cut off)"),
        "{err}"
    );
}
