//! Through a real Prometheus (Debian's `prometheus` 2.42, which `tests/run-all.sh` installs; `SKIP`
//! without it outside CI): two dcgm-otel nodes with a GPU time-sliced by two pods — `--simulate`, whose
//! scenario's pods share GPU 0, and the fake libdcgm with the fake kubelet handing GPU 0 to two pods as
//! the `::0`/`::1` replicas of the NVIDIA device plugin — scraped every second. The queries that users
//! of dcgm-exporter data run count every device once: one series per device and GPU instance, a
//! `group_right` join on the UUID has no duplicate match group, a per-GPU sum of a ratio stays a ratio,
//! and NVIDIA's dashboard's "GPU Power Total" adds each GPU's power once.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::common::{self, get};
use crate::support::fake_lib::Fake;
use crate::support::kubelet::{container, pod, pods, Kubelet};
use crate::support::peers;
use dcgm_otel::source::sim::{Fleet, Scenario};

/// A Prometheus server on a loopback port of its own choosing (:0), scraping `targets` every second; stopped on drop.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(bin: &Path, dir: &Path, targets: &[u16]) -> Prometheus {
        let list: Vec<String> = targets
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
                 scrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: [{}]\n",
                list.join(", ")
            ),
        )
        .unwrap();
        let log_path = dir.join("prometheus.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        // Prometheus binds :0 itself and logs the bound address ("Listening on" address=...); killed
        // on drop should it never say so.
        let mut prometheus = Prometheus { child, port: 0 };
        prometheus.port = common::port_logged_in(
            &log_path,
            "Listening on",
            &mut prometheus.child,
            Duration::from_secs(30),
        );
        prometheus
    }

    /// An instant query's whole JSON answer (`status`, `data` or `error`).
    fn query(&self, promql: &str) -> Value {
        self.try_query(promql)
            .unwrap_or_else(|e| panic!("{promql}: Prometheus does not answer: {e}"))
    }

    /// [`Prometheus::query`], or why Prometheus did not answer (still starting).
    fn try_query(&self, promql: &str) -> Result<Value, String> {
        let encoded: String = promql
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let r =
            get(self.port, &format!("/api/v1/query?query={encoded}")).map_err(|e| e.to_string())?;
        serde_json::from_slice(&r.body).map_err(|e| format!("{e}: {}", r.text()))
    }

    /// The result vector of a query that must succeed: (labels, value) per sample.
    fn vector(&self, promql: &str) -> Vec<(Value, f64)> {
        let answer = self.query(promql);
        assert_eq!(answer["status"], "success", "{promql}: {answer}");
        answer["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let v = s["value"][1].as_str().unwrap().parse().unwrap();
                (s["metric"].clone(), v)
            })
            .collect()
    }
}

#[test]
fn a_shared_gpu_is_counted_once_by_promql() {
    let Some(bin) = peers::prometheus() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Node 1: the simulated node, its scenario's pods (GPU 0 time-sliced by two of them).
    let simulated = common::start(
        &["--simulate", "-k", "-c", "1000"],
        &[("NODE_NAME", "node-sim")],
    );
    // Node 2: the fake libdcgm's GPUs; the fake kubelet gives GPU 0 to two pods as shared replicas.
    let gpu0 = Fleet::new(&Scenario::load("default").unwrap(), 1, "node-fake").gpus()[0]
        .identity
        .uuid
        .clone();
    let socket = dir.path().join("kubelet.sock");
    let _kubelet = Kubelet::start(
        &socket,
        pods(vec![
            pod(
                "a-team",
                "replica-0",
                vec![container("w", "nvidia.com/gpu", &[&format!("{gpu0}::0")])],
            ),
            pod(
                "b-team",
                "replica-1",
                vec![container("w", "nvidia.com/gpu", &[&format!("{gpu0}::1")])],
            ),
        ]),
    );
    let fake = Fake::new();
    let through_dcgm = fake.start(
        &[
            "-c",
            "1000",
            "-k",
            "--pod-resources-kubelet-socket",
            socket.to_str().unwrap(),
        ],
        &[("NODE_NAME", "node-fake")],
    );
    let prom = Prometheus::start(&bin, dir.path(), &[simulated.port, through_dcgm.port]);
    // Both nodes scraped, with their pods.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = prom
            .try_query("count by (instance) (DCGM_FI_DEV_GPU_UTIL{pod!=\"\"})")
            .unwrap_or_else(Value::String);
        let nodes = answer["data"]["result"].as_array().map_or(0, Vec::len);
        if nodes == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus has not scraped both nodes' pod series: {answer}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // One series per device and GPU instance: count by (UUID, GPU_I_ID) is 1 everywhere.
    for family in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
    ] {
        let counts = prom.vector(&format!("count by (UUID, GPU_I_ID) ({family})"));
        assert!(counts.len() >= 2, "{family}: {counts:?}");
        assert!(
            counts.iter().all(|(_, n)| *n == 1.0),
            "{family}: a device written more than once: {counts:?}"
        );
    }
    // CEEMS' kind of join: one GPU_UTIL series per UUID on the `one` side, no duplicate match group.
    let joined =
        prom.vector("DCGM_FI_DEV_GPU_UTIL * on (UUID) group_right () DCGM_FI_DEV_GPU_TEMP");
    assert!(!joined.is_empty());
    // A per-GPU sum of a ratio (the OpenShift console's GPU view) stays a ratio.
    let engine = prom.vector("sum by (UUID) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_ID=\"\"})");
    assert!(engine.len() >= 2, "{engine:?}");
    assert!(
        engine.iter().all(|(_, v)| (0.0..=1.0).contains(v)),
        "{engine:?}"
    );
    // NVIDIA's dashboard's "GPU Power Total": each GPU's power once.
    let excess = prom.vector(
        "sum(DCGM_FI_DEV_POWER_USAGE{GPU_I_ID=\"\"}) - sum(max by (UUID) (DCGM_FI_DEV_POWER_USAGE{GPU_I_ID=\"\"}))",
    );
    assert_eq!(excess.len(), 1);
    assert!(excess[0].1.abs() < 1e-6, "{excess:?}");
}
