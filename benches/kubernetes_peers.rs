//! Measurements, not checks (no timing assertions): how often the built `dcgm-otel` asks its Kubernetes
//! peers, on the simulated `dgx-h100-mig` node at `-c 1000`, against the tests' fake kubelet and fake
//! API server (`tests/support/kubelet.rs`, `tests/support/api_server.rs`).
//!
//! - `kubelet`: kubelet `List` calls per minute while 10 scrapers hit /metrics concurrently (one call
//!   per collect interval, however many scrapes).
//! - `api`: Kubernetes API requests on a node with 40 pods whose labels change all the time (a pod
//!   relabelled every 1.5 s), pod labels and UIDs on.
//!
//! Run: `cargo bench --bench kubernetes_peers` (60 s each; the figures in docs/performance.md),
//! `-- kubelet` or `-- api` for one, `-- --smoke` (3 s each: proves it runs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dcgm_otel::source::sim::{Fleet, Scenario};
use support::api_server::ApiServer;
use support::common::{binary, get, spawn_on_port_it_reports, Exporter};
use support::kubelet::{container, pod, pods, Kubelet};

/// The simulated node's GPU UUIDs and, flattened, its MIG slices' UUIDs.
fn devices() -> (Vec<String>, Vec<String>) {
    let f = Fleet::new(&Scenario::load("dgx-h100-mig").unwrap(), 1, "node-a");
    let gpus = f.gpus().iter().map(|g| g.identity.uuid.clone()).collect();
    let slices = f
        .gpus()
        .iter()
        .flat_map(|g| g.instances.iter().map(|m| m.uuid.clone()))
        .collect();
    (gpus, slices)
}

/// `dcgm-otel --simulate=dgx-h100-mig -c 1000 -k` on a port it picks (:0, read from its log), asking
/// the kubelet on `socket`.
fn exporter(socket: &Path, extra: &[&str], env: &[(&str, &str)]) -> Exporter {
    let mut cmd = Command::new(binary());
    cmd.args(["--simulate=dgx-h100-mig", "-c", "1000", "-a", "127.0.0.1:0"])
        .args(["-k", "--pod-resources-kubelet-socket"])
        .arg(socket)
        .args(extra)
        .env_clear()
        .env("NODE_NAME", "node-a")
        .envs(env.iter().copied())
        .stdout(Stdio::null());
    spawn_on_port_it_reports(cmd, Duration::from_secs(30))
}

fn scrape(port: u16) -> Option<String> {
    get(port, "/metrics")
        .ok()
        .filter(|r| r.status == 200)
        .map(|r| r.text())
}

/// Scrape until a body contains `needle`; panics after 30 s.
fn wait_for(port: u16, needle: &str) {
    let end = Instant::now() + Duration::from_secs(30);
    while !scrape(port).is_some_and(|b| b.contains(needle)) {
        assert!(Instant::now() < end, "no body with {needle}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Value of one exact series, 0 when absent.
fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

fn kubelet_calls(length: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kubelet.sock");
    let (_, slices) = devices();
    let list = slices
        .iter()
        .enumerate()
        .map(|(i, uuid)| {
            let c = container("c", "nvidia.com/mig-1g.10gb", &[uuid]);
            pod("infer", &format!("i-{i}"), vec![c])
        })
        .collect();
    let kubelet = Kubelet::start(&sock, pods(list));
    let ex = exporter(&sock, &[], &[]);
    wait_for(ex.port, "pod=\"i-0\"");
    let calls0 = kubelet.calls();
    let started = Instant::now();
    let port = ex.port;
    let scrapers: Vec<_> = (0..10)
        .map(|_| {
            std::thread::spawn(move || {
                let mut n = 0u64;
                while started.elapsed() < length {
                    if scrape(port).is_some() {
                        n += 1;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                n
            })
        })
        .collect();
    let scrapes: u64 = scrapers.into_iter().map(|t| t.join().unwrap()).sum();
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let calls = kubelet.calls() - calls0;
    println!(
        "kubelet: -c 1000, 10 concurrent scrapers for {:.0} s: {:.0} scrapes/min, {:.1} kubelet List calls/min",
        length.as_secs_f64(),
        scrapes as f64 / minutes,
        calls as f64 / minutes
    );
}

fn api_requests(length: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kubelet.sock");
    let (gpus, slices) = devices();
    let api = ApiServer::start("node-a");
    let mut list = Vec::new();
    for i in 0..40usize {
        let name = format!("p-{i}");
        api.put_pod("ml", &name, &format!("uid-{i}"), &[("team", "a")]);
        let c = match (i < 8, slices.get(i.saturating_sub(8))) {
            (true, _) => container("c", "nvidia.com/gpu", &[&gpus[i % 4]]),
            (false, Some(u)) => container("c", "nvidia.com/mig-1g.10gb", &[u]),
            _ => container("c", "nvidia.com/gpu", &[&gpus[0]]),
        };
        list.push(pod("ml", &name, vec![c]));
    }
    let _kubelet = Kubelet::start(&sock, pods(list));
    let kubeconfig = api.kubeconfig(dir.path());
    let ex = exporter(
        &sock,
        &[
            "--kubernetes-enable-pod-labels",
            "--kubernetes-enable-pod-uid",
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    );
    wait_for(ex.port, "team=\"a\"");
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < length {
        std::thread::sleep(Duration::from_millis(1500).min(length));
        n += 1;
        api.put_pod(
            "ml",
            &format!("p-{}", n % 40),
            &format!("uid-{}", n % 40),
            &[("team", if n % 2 == 0 { "a" } else { "b" })],
        );
    }
    let (lists, watches) = api.counts();
    let body = scrape(ex.port).unwrap_or_default();
    println!(
        "api: 40 pods, {n} label changes in {:.0} s: {lists} list + {watches} watch requests in total since start ({:.1} per minute); {} watch events received",
        length.as_secs_f64(),
        (lists + watches) as f64 / (started.elapsed().as_secs_f64() / 60.0),
        value(&body, "dcgm_otel_kubernetes_api_watch_events_total{resource=\"pods\"}")
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke =
        args.iter().any(|a| a == "--smoke") || std::env::var_os("DCGM_OTEL_BENCH_SMOKE").is_some();
    let length = Duration::from_secs(if smoke { 3 } else { 60 });
    let wanted: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| name.contains(w.as_str()));
    if run("kubelet") {
        kubelet_calls(length);
    }
    if run("api") {
        api_requests(length);
    }
}
