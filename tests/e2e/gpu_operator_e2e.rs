//! The NVIDIA GPU Operator's own DaemonSet for dcgm-exporter, run against dcgm-otel: its container
//! env and its liveness/readiness probes as the operator ships them
//! (`tests/fixtures/gpu-operator/0800_daemonset.yaml`, vendored from NVIDIA/gpu-operator), while the
//! fake libdcgm's host engine is gone for 60 s (refusing connections) or stops answering for 60 s (a
//! blocked call). The probes run as the kubelet runs them: `GET` with the probe's timeout, every
//! `periodSeconds`, success on 200-399. Liveness must never fail (a restart cures nothing here and
//! CrashLoopBackOff would delay the exporter after DCGM is back); readiness reports the outage.
//!
//! Also: the image (Dockerfile) ships dcgm-exporter's counters CSVs at dcgm-exporter's paths,
//! byte-identical to the vendored copies, so the operator's `DCGM_EXPORTER_COLLECTORS` finds its file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::fake_lib::Fake;
use serde_norway::Value;

/// How long the host engine is away: the 60 s.
const OUTAGE: Duration = Duration::from_secs(60);

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// `/etc/dcgm-exporter/NAME` -> the repository file the Dockerfile installs there.
fn image_counters_files() -> BTreeMap<String, PathBuf> {
    let dockerfile = std::fs::read_to_string(repo("Dockerfile")).unwrap();
    let mut files = BTreeMap::new();
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = words.iter().position(|w| *w == "install") else {
            continue;
        };
        let args: Vec<&str> = words[i + 1..]
            .iter()
            .copied()
            .take_while(|w| *w != "\\" && *w != "&&")
            .collect();
        if let [.., src, dest] = args.as_slice() {
            if let Some(path) = dest.strip_prefix("/out") {
                if path.starts_with("/etc/dcgm-exporter/") {
                    files.insert(path.to_string(), repo(src));
                }
            }
        }
    }
    files
}

#[test]
fn the_image_ships_dcgm_exporters_counters_files_at_its_paths() {
    let files = image_counters_files();
    // The release dcgm-otel's defaults follow (4.8.3's copies are beside them, one folder up).
    let fixtures = repo("tests/fixtures/dcgm/dcgm-exporter-csv/4.5.3-4.8.2");
    for name in ["dcp-metrics-included.csv", "1.x-compatibility-metrics.csv"] {
        let installed = files
            .get(&format!("/etc/dcgm-exporter/{name}"))
            .unwrap_or_else(|| {
                panic!("the Dockerfile installs no /etc/dcgm-exporter/{name}: {files:?}")
            });
        assert_eq!(
            std::fs::read(installed).unwrap(),
            std::fs::read(fixtures.join(name)).unwrap(),
            "{} differs from dcgm-exporter 4.5.3-4.8.2's {name}",
            installed.display()
        );
    }
    // Ours, with the same rows as dcgm-exporter's (the next test compares them).
    assert_eq!(
        files.get("/etc/dcgm-exporter/default-counters.csv"),
        Some(&repo("src/counters/default-counters.csv"))
    );
}

/// The built-in default counters are dcgm-exporter 4.5.3-4.8.2's rows, in its order: the same fields,
/// Prometheus types (`DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` a counter, as that release ships it) and help
/// texts, so every `# HELP` / `# TYPE` line of a default scrape is dcgm-exporter's.
#[test]
fn the_built_in_default_counters_are_dcgm_exporter_4_8_2s_rows() {
    use dcgm_otel::counters;
    let rows = |set: &counters::CounterSet| -> Vec<(String, String, String)> {
        set.rows
            .iter()
            .map(|r| (r.name.clone(), r.kind.as_str().to_string(), r.help.clone()))
            .collect()
    };
    let ours = counters::parse(counters::DEFAULT_COUNTERS_CSV, "built-in").unwrap();
    let path = repo("tests/fixtures/dcgm/dcgm-exporter-csv/4.5.3-4.8.2/default-counters.csv");
    let theirs = counters::load_file(&path).unwrap();
    assert_eq!(rows(&ours), rows(&theirs));
    let nvlink = ours
        .rows
        .iter()
        .find(|r| r.name == "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")
        .unwrap();
    assert_eq!(nvlink.kind.as_str(), "counter");
}

/// One probe of a container, as the kubelet runs it.
#[derive(Debug)]
struct Probe {
    path: String,
    period: Duration,
    timeout: Duration,
    failure_threshold: u64,
}

impl Probe {
    fn from_spec(spec: &Value) -> Probe {
        let get = &spec["httpGet"];
        assert_eq!(get["port"].as_u64(), Some(9400), "{spec:?}");
        let seconds =
            |key: &str, default: u64| Duration::from_secs(spec[key].as_u64().unwrap_or(default));
        Probe {
            path: get["path"].as_str().unwrap().to_string(),
            // Kubernetes defaults: period 10 s, timeout 1 s, failure threshold 3.
            period: seconds("periodSeconds", 10),
            timeout: seconds("timeoutSeconds", 1),
            failure_threshold: spec["failureThreshold"].as_u64().unwrap_or(3),
        }
    }

    /// The HTTP status, or `None` when there was none within the timeout (a probe failure).
    fn run(&self, port: u16) -> Option<u16> {
        let deadline = Instant::now() + self.timeout;
        let mut s =
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), self.timeout).ok()?;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        s.set_read_timeout(Some(left)).ok()?;
        s.set_write_timeout(Some(left)).ok()?;
        write!(
            s,
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/1.35\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            self.path
        )
        .ok()?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head).ok()?;
        std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
    }
}

/// The operator's dcgm-exporter container: its env (NODE_NAME from the downward API) and probes.
struct OperatorContainer {
    env: Vec<(String, String)>,
    liveness: Probe,
    readiness: Probe,
}

fn operator_container() -> OperatorContainer {
    let text =
        std::fs::read_to_string(repo("tests/fixtures/gpu-operator/0800_daemonset.yaml")).unwrap();
    let ds: Value = serde_norway::from_str(&text).unwrap();
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"].as_str(), Some("nvidia-dcgm-exporter"));
    let counters = image_counters_files();
    let mut env = Vec::new();
    for e in c["env"].as_sequence().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        let value = match e["value"].as_str() {
            Some(v) if name == "DCGM_EXPORTER_COLLECTORS" => {
                // The file the image has at that path.
                let file = counters
                    .get(v)
                    .unwrap_or_else(|| panic!("the image has no {v}, which the operator sets"));
                file.display().to_string()
            }
            Some(v) => v.to_string(),
            None => {
                assert_eq!(
                    e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
                    Some("spec.nodeName")
                );
                "gpu-node-1".to_string()
            }
        };
        env.push((name, value));
    }
    let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "DCGM_EXPORTER_LISTEN",
            "DCGM_EXPORTER_KUBERNETES",
            "DCGM_EXPORTER_COLLECTORS",
            "NODE_NAME"
        ],
        "the operator's env changed: review this test"
    );
    OperatorContainer {
        env,
        liveness: Probe::from_spec(&c["livenessProbe"]),
        readiness: Probe::from_spec(&c["readinessProbe"]),
    }
}

/// What the probes saw.
#[derive(Default)]
struct Seen {
    liveness: Vec<Option<u16>>,
    liveness_in_outage: usize,
    readiness_in_outage: Vec<Option<u16>>,
    ready_after: bool,
}

/// Run the operator's container with `faults` and probe it until the outage (`began`/`ended` read
/// from the fake's call log) is over and readiness is back.
fn probe_through_outage(
    faults: &str,
    began: impl Fn(&[String]) -> bool,
    ended: impl Fn(&[String]) -> bool,
) -> (Seen, String, Probe) {
    let op = operator_container();
    let fake = Fake::new();
    let mut env: Vec<(&str, &str)> = op
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.push(("FAKE_DCGM_FAULTS", faults));
    // The operator's DaemonSet passes no arguments (dcgm-exporter's 30 s interval); 1 s makes every
    // second of the outage a failing collection and the freshness limit 7 s, so readiness shows it.
    let e = fake.start(&["-c", "1000"], &env);
    let mut seen = Seen::default();
    let started = Instant::now();
    let mut next_live = Instant::now();
    let mut next_ready = Instant::now();
    let mut outage: Option<Instant> = None;
    let mut over: Option<Instant> = None;
    loop {
        assert!(
            started.elapsed() < OUTAGE + Duration::from_secs(90),
            "the outage did not begin and end: {:#?}",
            fake.calls()
        );
        let calls = fake.calls();
        if outage.is_none() && began(&calls) {
            outage = Some(Instant::now());
        }
        if outage.is_some() && over.is_none() && ended(&calls) {
            over = Some(Instant::now());
        }
        let now = Instant::now();
        if now >= next_live {
            let status = op.liveness.run(e.port);
            seen.liveness.push(status);
            if outage.is_some() && over.is_none() {
                seen.liveness_in_outage += 1;
            }
            next_live += op.liveness.period;
            // One more liveness period after readiness is back, then stop.
            if seen.ready_after {
                break;
            }
        }
        if now >= next_ready {
            let status = op.readiness.run(e.port);
            if outage.is_some() && over.is_none() {
                seen.readiness_in_outage.push(status);
            }
            if over.is_some() && status == Some(200) {
                seen.ready_after = true;
            }
            next_ready += op.readiness.period;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // What our own readiness endpoint said is checked by the callers through /ready's body.
    let stderr = common::terminate(e);
    (seen, stderr, op.liveness)
}

fn assert_liveness_never_failed(seen: &Seen, liveness: &Probe) {
    // The kubelet restarts after `failureThreshold` failures in a row; not one failure is allowed.
    let failures = seen
        .liveness
        .iter()
        .filter(|s| !matches!(s, Some(200..=399)))
        .count();
    assert_eq!(
        failures, 0,
        "liveness probe failed (the kubelet restarts after {} in a row): {:?}",
        liveness.failure_threshold, seen.liveness
    );
    eprintln!(
        "{} liveness probes, {} of them during the outage, all 200; readiness during the outage: {:?}",
        seen.liveness.len(),
        seen.liveness_in_outage,
        seen.readiness_in_outage
    );
    // The outage was probed: at least as many probes as the kubelet's failure threshold (3 in a
    // row restart the container), so a failing liveness would have been seen and acted on. About
    // 12 come in 60 s at the operator's 5 s period; the bound is not a count of the clock's seconds
    // (a loaded machine probes late), only what makes the check meaningful.
    assert!(
        seen.liveness_in_outage as u64 >= liveness.failure_threshold,
        "only {} liveness probes during the outage (failure threshold {}): {:?}",
        seen.liveness_in_outage,
        liveness.failure_threshold,
        seen.liveness
    );
}

#[test]
fn host_engine_gone_for_60_s_under_the_operators_probes_restarts_nothing() {
    let down = format!("disconnect_after_polls=3,down_ms={}", OUTAGE.as_millis());
    let refused = |calls: &[String]| {
        calls
            .iter()
            .any(|c| c.starts_with("dcgmStartEmbedded") && c.ends_with("rc=-21"))
    };
    let reconnected = |calls: &[String]| {
        calls
            .iter()
            .filter(|c| c.starts_with("dcgmStartEmbedded") && c.ends_with("rc=0"))
            .count()
            >= 2
    };
    let (seen, stderr, liveness) = probe_through_outage(&down, refused, reconnected);
    assert_liveness_never_failed(&seen, &liveness);
    assert!(seen.ready_after, "never ready after the outage");
    // The operator probes readiness on /health too, so the pod stays Ready (as with dcgm-exporter);
    // the outage shows on /ready, dcgm_otel_source_up and the withdrawn series.
    assert!(
        seen.readiness_in_outage.iter().all(|s| *s == Some(200)),
        "{:?}",
        seen.readiness_in_outage
    );
    assert!(
        stderr.contains("source unavailable; its series are withdrawn until it is back"),
        "{stderr}"
    );
    assert!(
        stderr.contains("source is back; collection resumed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("dcp-metrics-included.csv"),
        "the operator's counters file was not loaded:\n{stderr}"
    );
}

#[test]
fn host_engine_hung_for_60_s_under_the_operators_probes_restarts_nothing() {
    let hang = format!("hang_ms={}@4", OUTAGE.as_millis());
    let hung = |calls: &[String]| calls.iter().any(|c| c.starts_with("hang begins"));
    let returned = |calls: &[String]| {
        calls
            .iter()
            .position(|c| c.starts_with("hang begins"))
            .is_some_and(|i| {
                calls[i + 1..]
                    .iter()
                    .any(|c| c.starts_with("dcgmEntitiesGetLatestValues"))
            })
    };
    let (seen, stderr, liveness) = probe_through_outage(&hang, hung, returned);
    assert_liveness_never_failed(&seen, &liveness);
    assert!(seen.ready_after, "never ready after the hang");
    assert!(
        stderr.contains("collection stuck: the source has not answered"),
        "{stderr}"
    );
}

/// During the outage our own `/ready` (what the chart's and the manifests' readiness probe asks)
/// reports it while `/health` stays 200.
#[test]
fn ready_reports_the_outage_that_health_does_not() {
    let op = operator_container();
    let fake = Fake::new();
    let mut env: Vec<(&str, &str)> = op
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.push(("FAKE_DCGM_FAULTS", "disconnect_after_polls=3,down_ms=5000"));
    let e = fake.start(&["-c", "200"], &env);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            Instant::now() < deadline,
            "/ready never reported the outage"
        );
        let ready = common::get(e.port, "/ready").unwrap();
        if ready.status == 503 {
            assert!(
                ready.text().starts_with("not ready: source down: "),
                "{}",
                ready.text()
            );
            let health = common::get(e.port, "/health").unwrap();
            assert_eq!((health.status, health.text().as_str()), (200, "OK\n"));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    common::wait_ready(&e, Duration::from_secs(30));
}
