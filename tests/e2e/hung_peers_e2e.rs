//! Hung peers: a kubelet, a Kubernetes API server and a container runtime that accept the connection and
//! never answer (`support::hung`) — what a wedged kubelet or a stopped `dockerd` behind a live socket
//! looks like. For each, the collections go on at the collect interval and the timeout is counted in the
//! self-metrics.
//!
//! The interval is measured without a clock threshold: a control exporter runs beside the one under test,
//! the same flags but a peer that answers, and over the same window (until the hung peer's timeouts have
//! been counted a few times) the exporter facing the hung peer must have made at least 3/4 as many
//! collections as the control. Both share the machine's load; a collection held up by the hung call (a
//! deadline as long as the interval halves the rate) falls well below it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common::{self, get, Exporter};
use crate::support::hung::Hung;
use crate::support::{api_server, kubelet};

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

/// The collect interval of both exporters.
const INTERVAL_MS: &str = "500";

/// `/metrics` (empty while the exporter does not answer).
fn body(e: &Exporter) -> String {
    get(e.port, "/metrics")
        .map(|r| r.text())
        .unwrap_or_default()
}

/// The value of `series` (written as in the body: `name` or `name{labels}`), 0 when absent.
fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

fn collections(e: &Exporter) -> f64 {
    value(&body(e), "dcgm_otel_collects_total{source=\"simulated\"}")
}

/// Scrape `e` until `cond` holds on the body (every 50 ms), or panic after `limit`.
fn scrape_until(e: &Exporter, what: &str, limit: Duration, cond: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let b = body(e);
        if cond(&b) {
            return b;
        }
        assert!(Instant::now() < deadline, "{what} within {limit:?}:\n{b}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Count collections of the exporter facing the hung peer and of the control over one window, which
/// ends when `window_done` holds on the hung one's body; the hung one must keep at least 3/4 of the
/// control's pace. Returns the hung one's last body.
fn collections_keep_pace(
    hung: &Exporter,
    control: &Exporter,
    limit: Duration,
    window_done: impl Fn(&str) -> bool,
) -> String {
    let (h0, c0) = (collections(hung), collections(control));
    let last = scrape_until(hung, "the hung peer's timeouts counted", limit, window_done);
    let h1 = value(&last, "dcgm_otel_collects_total{source=\"simulated\"}");
    let c1 = collections(control);
    let (made, control_made) = (h1 - h0, c1 - c0);
    eprintln!(
        "collections over the window: {made} facing the hung peer, {control_made} in the control"
    );
    assert!(
        control_made >= 4.0,
        "the control collected {control_made} times"
    );
    assert!(
        made >= 0.75 * control_made,
        "a hung peer slowed collection down: {made} collections against the control's {control_made}"
    );
    last
}

/// The kubelet's pod-resources socket accepts and never answers. Each collection's `List` call ends at
/// its deadline and is counted `result="timeout"`; collection keeps its pace.
#[test]
fn a_hung_kubelet_is_timed_out_and_collection_keeps_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let hung_socket = dir.path().join("hung-kubelet.sock");
    let peer = Hung::unix(&hung_socket);
    let good_socket = dir.path().join("kubelet.sock");
    let _kubelet = kubelet::Kubelet::start(&good_socket, kubelet::pods(vec![]));
    let args = |socket: &Path| {
        [
            "--simulate",
            "-c",
            INTERVAL_MS,
            "-k",
            "--pod-resources-kubelet-socket",
            socket.to_str().unwrap(),
        ]
        .map(String::from)
    };
    let start = |socket: &Path| {
        let a = args(socket);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        common::start(&refs, &[])
    };
    let control = start(&good_socket);
    let hung = start(&hung_socket);
    let timeouts = |b: &str| value(b, "dcgm_otel_kubelet_requests_total{result=\"timeout\"}");
    let before = timeouts(&body(&hung));
    let last = collections_keep_pace(&hung, &control, Duration::from_secs(60), |b| {
        timeouts(b) >= before + 8.0
    });
    assert!(
        peer.accepted() >= 8,
        "the exporter connected {} times",
        peer.accepted()
    );
    // Every call failed by its deadline, none by another error; the series are served meanwhile.
    assert_eq!(
        value(&last, "dcgm_otel_kubelet_requests_total{result=\"ok\"}"),
        0.0
    );
    assert_eq!(
        value(
            &last,
            "dcgm_otel_kubelet_requests_total{result=\"unavailable\"}"
        ) + value(&last, "dcgm_otel_kubelet_requests_total{result=\"error\"}"),
        0.0,
        "{last}"
    );
    assert!(last.contains("\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\""), "{last}");
    let control_body = body(&control);
    assert_eq!(
        value(
            &control_body,
            "dcgm_otel_kubelet_requests_total{result=\"timeout\"}"
        ),
        0.0,
        "the control's kubelet answers"
    );
    let err = common::terminate(hung);
    assert_eq!(
        err.matches("kubelet pod-resources List failed").count(),
        1,
        "logged once per outage:\n{err}"
    );
    assert!(err.contains("List timed out after"), "{err}");
}

/// The Kubernetes API server (pod labels) accepts and never answers: its client runs beside the
/// collector, so collection keeps its pace; the list request is cut off by its own deadline and counted
/// as a failed request.
#[test]
fn a_hung_kubernetes_api_server_is_timed_out_and_collection_keeps_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_socket = dir.path().join("kubelet.sock");
    let _kubelet = kubelet::Kubelet::start(&kubelet_socket, kubelet::pods(vec![]));
    let peer = Hung::tcp();
    let hung_dir = dir.path().join("hung");
    let good_dir = dir.path().join("good");
    std::fs::create_dir_all(&hung_dir).unwrap();
    std::fs::create_dir_all(&good_dir).unwrap();
    let hung_config = api_server::kubeconfig(&hung_dir, peer.port);
    let api = api_server::ApiServer::start("test-node");
    let good_config = api.kubeconfig(&good_dir);
    let start = |config: &Path| {
        common::start(
            &[
                "--simulate",
                "-c",
                INTERVAL_MS,
                "-k",
                "--kubernetes-enable-pod-labels",
                "--pod-resources-kubelet-socket",
                kubelet_socket.to_str().unwrap(),
            ],
            &[("KUBECONFIG", config.to_str().unwrap())],
        )
    };
    let control = start(&good_config);
    let hung = start(&hung_config);
    let failed_lists = |b: &str| {
        value(
            b,
            "dcgm_otel_kubernetes_api_requests_total{resource=\"pods\",verb=\"list\",result=\"error\"}",
        )
    };
    // The list request's deadline is 30 s.
    let last = collections_keep_pace(&hung, &control, Duration::from_secs(90), |b| {
        failed_lists(b) >= 1.0
    });
    assert!(peer.accepted() >= 1);
    assert_eq!(
        value(
            &last,
            "dcgm_otel_kubernetes_api_requests_total{resource=\"pods\",verb=\"list\",result=\"ok\"}"
        ),
        0.0
    );
    // Every collection asked the kubelet as usual (the one under way may not have yet).
    assert!(
        value(&last, "dcgm_otel_kubelet_requests_total{result=\"ok\"}")
            >= value(&last, "dcgm_otel_collects_total{source=\"simulated\"}") - 1.0,
        "{last}"
    );
    assert_eq!(get(hung.port, "/ready").unwrap().status, 200);
    let control_body = body(&control);
    assert!(
        value(
            &control_body,
            "dcgm_otel_kubernetes_api_requests_total{resource=\"pods\",verb=\"list\",result=\"ok\"}"
        ) >= 1.0,
        "the control's API server answers:\n{control_body}"
    );
    let err = common::terminate(hung);
    assert!(
        err.contains("Kubernetes API request failed") && err.contains("no answer within"),
        "{err}"
    );
}

/// A container runtime that answers every request with an empty list (the control's).
fn empty_runtime(socket: &Path) {
    let listener = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[]");
        }
    });
}

/// The container runtime's API socket accepts and never answers (`--container-labels`, no Kubernetes):
/// the runtime is asked on a thread of its own, so collection keeps its pace; each refresh is cut off by
/// its deadline and counted in `dcgm_otel_container_runtime_errors_total`.
#[test]
fn a_hung_container_runtime_is_timed_out_and_collection_keeps_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let hung_socket = dir.path().join("hung-docker.sock");
    let peer = Hung::unix(&hung_socket);
    let good_socket = dir.path().join("docker.sock");
    empty_runtime(&good_socket);
    let start = |socket: &Path| {
        common::start(
            &[
                "--simulate",
                "-n",
                "-c",
                INTERVAL_MS,
                "--container-labels",
                "--container-runtime-socket",
                socket.to_str().unwrap(),
            ],
            &[],
        )
    };
    let control = start(&good_socket);
    let hung = start(&hung_socket);
    let errors = |b: &str| value(b, "dcgm_otel_container_runtime_errors_total");
    collections_keep_pace(&hung, &control, Duration::from_secs(60), |b| {
        errors(b) >= 3.0
    });
    assert!(
        peer.accepted() >= 3,
        "the exporter connected {} times",
        peer.accepted()
    );
    assert_eq!(
        errors(&body(&control)),
        0.0,
        "the control's runtime answers"
    );
    let err = common::terminate(hung);
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("container runtime API failed"))
            .count(),
        1,
        "logged once per outage:\n{err}"
    );
}
