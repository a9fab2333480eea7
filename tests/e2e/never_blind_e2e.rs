//! Never blind, never crash-looping (issue 39), end to end through the fake libdcgm
//! (`FAKE_DCGM_STARTUP`): a host engine that comes up after the exporter (remote, as the GPU
//! Operator starts `nvidia-dcgm` beside it, and an embedded engine that fails to start at first), a
//! profiling module that is back after a reconnection, and a host engine that answers with no GPU on
//! a node that has them — whose `/ready` and alert a promtool test checks on the exporter's own
//! output.
//!
//! Waits are deadlines on conditions; the one number the issue gives for start-up (`/health` 200 and
//! `/ready` 503 3 s in) is a deadline from the spawn. "Within two collect intervals" of the engine's
//! return is checked through what makes it true: the call log shows a connection attempt at every
//! collection while the engine was away.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common::{self, binary, get, scrape, series, Exporter};
use crate::support::fake_lib::Fake;
use crate::support::peers;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Start the exporter without waiting for `/ready` (the point is that it is 503 for a while).
fn spawn(fake: &Fake, args: &[&str], env: &[(&str, &str)]) -> (Exporter, Instant) {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .args(["-a", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .env("NODE_NAME", "test-node")
        .env("DCGM_EXPORTER_KUBERNETES", "false")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in fake.ld_env(env) {
        cmd.env(k, v);
    }
    let spawned = Instant::now();
    // The port it binds (:0) is read from its "serving /metrics" line, which comes as it binds,
    // before any collection (readiness is what the tests then watch).
    let exporter = common::spawn_on_port_it_reports(cmd, Duration::from_secs(20));
    (exporter, spawned)
}

/// Wait until `cond(port)` holds, checking that the exporter is still running, or panic after `limit`.
fn wait_for(what: &str, limit: Duration, e: &mut Exporter, mut cond: impl FnMut(u16) -> bool) {
    let started = Instant::now();
    loop {
        assert_alive(e);
        if cond(e.port) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process never exits on its own.
fn assert_alive(e: &mut Exporter) {
    if let Ok(Some(status)) = e.child.try_wait() {
        let mut err = String::new();
        if let Some(mut s) = e.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut s, &mut err);
        }
        panic!("dcgm-otel exited ({status}):\n{err}");
    }
}

fn status(port: u16, path: &str) -> (u16, String) {
    get(port, path)
        .map(|r| (r.status, r.text().trim_end().to_string()))
        .unwrap_or((0, String::new()))
}

/// `/metrics`, or nothing while the exporter does not answer yet.
fn metrics(port: u16) -> String {
    get(port, "/metrics").map(|r| r.text()).unwrap_or_default()
}

/// The value of the first line of `body` starting with `series` (name and labels, then a space).
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A host engine that comes up `late` after the exporter: 3 s in, `/health` 200 and `/ready` 503
/// naming what it waits for, no series, `dcgm_otel_source_up 0`; once the engine is up, the series and
/// `/ready` 200; the process never exits; an attempt at every collection meanwhile. `connect`: the
/// call-log prefix of a connection attempt in this mode; `waits_for`: in the `/ready` reason.
fn late_host_engine(
    args: &[&str],
    interval: Duration,
    late: Duration,
    startup: &str,
    connect: &str,
    waits_for: &str,
) {
    let fake = Fake::new();
    let (mut e, spawned) = spawn(&fake, args, &[("FAKE_DCGM_STARTUP", startup)]);
    let mut ready = (0, String::new());
    wait_for(
        "/health 200 and /ready 503 naming the host engine 3 s after the start",
        Duration::from_secs(3).saturating_sub(spawned.elapsed()),
        &mut e,
        |port| {
            ready = status(port, "/ready");
            status(port, "/health").0 == 200
                && ready.0 == 503
                && ready.1.starts_with("not ready: source down: ")
                && ready.1.contains(waits_for)
        },
    );
    eprintln!("/ready: {}", ready.1);
    let body = scrape(e.port);
    assert!(series(&body).is_empty(), "{body}");
    assert_eq!(
        value(&body, "dcgm_otel_source_up{source=\"dcgm\"}"),
        Some(0.0)
    );
    let connected = |calls: &[String]| {
        calls
            .iter()
            .any(|c| c.starts_with(connect) && c.ends_with("rc=0"))
    };
    assert!(
        !connected(&fake.calls()),
        "the engine was up before {late:?}"
    );
    wait_for(
        "the series and /ready 200 after the host engine is up",
        late + Duration::from_secs(30),
        &mut e,
        |port| status(port, "/ready").0 == 200 && !series(&metrics(port)).is_empty(),
    );
    let body = scrape(e.port);
    assert_eq!(
        value(&body, "dcgm_otel_source_up{source=\"dcgm\"}"),
        Some(1.0)
    );
    assert!(body.contains("DCGM_FI_PROF_GR_ENGINE_ACTIVE{"), "{body}");
    let calls = fake.calls();
    let refused = calls
        .iter()
        .filter(|c| c.starts_with(connect) && !c.ends_with("rc=0"))
        .count();
    let collections = (late.as_millis() / interval.as_millis()) as usize;
    // An attempt per collection (a loaded machine skips a few): the engine is used at the first
    // collection after it is up, within two collect intervals.
    assert!(
        refused * 2 >= collections,
        "{refused} attempts while the engine was away for {collections} collections:\n{calls:#?}"
    );
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("dcgmInit")).count(),
        1,
        "one process, one dcgmInit"
    );
    assert_alive(&mut e);
    let err = common::terminate(e);
    assert_eq!(
        err.matches("cannot reach DCGM at start-up").count(),
        1,
        "logged once:\n{err}"
    );
}

#[test]
fn remote_host_engine_twenty_seconds_late() {
    late_host_engine(
        &["-c", "1000", "-r", "nvidia-dcgm:5555"],
        Duration::from_millis(1000),
        Duration::from_secs(20),
        "hostengine_up_after_ms=20000",
        "dcgmConnect_v2 address=nvidia-dcgm:5555 ",
        "nv-hostengine at nvidia-dcgm:5555",
    );
}

/// The same with the embedded engine failing to start at first (the driver not loaded yet); a
/// shorter delay, the same semantics.
#[test]
fn embedded_host_engine_failing_at_first() {
    late_host_engine(
        &["-c", "500"],
        Duration::from_millis(500),
        Duration::from_secs(6),
        "embedded_fails_ms=6000",
        "dcgmStartEmbedded",
        "embedded host engine",
    );
}

/// A profiling module that is not loaded on the first connection and is after a reconnection: the
/// DCP series come back without a restart, and `dcgm_otel_profiling_available` follows.
#[test]
fn profiling_comes_back_after_a_reconnection() {
    let fake = Fake::new();
    let (mut e, _) = spawn(
        &fake,
        &["-c", "200"],
        &[
            ("FAKE_DCGM_STARTUP", "profiling_from_connect=2"),
            ("FAKE_DCGM_FAULTS", "disconnect_after_polls=25,down_ms=300"),
        ],
    );
    let pid = e.child.id();
    wait_for("/ready 200", Duration::from_secs(20), &mut e, |port| {
        status(port, "/ready").0 == 200
    });
    let before = scrape(e.port);
    let started = |calls: Vec<String>| {
        calls
            .iter()
            .filter(|c| c.starts_with("dcgmStartEmbedded") && c.ends_with("rc=0"))
            .count()
    };
    assert_eq!(
        started(fake.calls()),
        1,
        "the engine was lost before the first scrape (a slow machine): raise disconnect_after_polls"
    );
    assert!(!before.contains("DCGM_FI_PROF_"), "{before}");
    assert!(before.contains("DCGM_FI_DEV_GPU_TEMP{"), "{before}");
    assert_eq!(
        value(
            &before,
            "dcgm_otel_profiling_available{reason=\"module_not_loaded\"}"
        ),
        Some(0.0),
        "{before}"
    );
    wait_for(
        "the DCP series after the reconnection",
        Duration::from_secs(30),
        &mut e,
        |port| metrics(port).contains("DCGM_FI_PROF_GR_ENGINE_ACTIVE{"),
    );
    let after = scrape(e.port);
    assert_eq!(value(&after, "dcgm_otel_profiling_available"), Some(1.0));
    assert!(!after.contains("reason=\"module_not_loaded\""), "{after}");
    assert!(
        after.contains("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{"),
        "{after}"
    );
    assert_eq!(e.child.id(), pid);
    let calls = fake.calls();
    let probes: Vec<&String> = calls
        .iter()
        .filter(|c| c.starts_with("dcgmProfGetSupportedMetricGroups"))
        .collect();
    assert!(probes[0].ends_with("rc=-33"), "{probes:#?}");
    assert!(probes.last().unwrap().ends_with("rc=0"), "{probes:#?}");
    assert_alive(&mut e);
}

/// `dir/nvidia0`, `dir/nvidia1`, ...: a node's device files.
fn device_files(dir: &Path, n: usize) -> String {
    for i in 0..n {
        std::fs::write(dir.join(format!("nvidia{i}")), "").unwrap();
    }
    std::fs::write(dir.join("nvidiactl"), "").unwrap();
    dir.display().to_string()
}

/// A promtool test of the shipped rules whose input is `lines` (self-metric lines as served), each
/// held for 40 minutes of 1-minute scrapes, expecting `alert` not to fire at 2 minutes and to fire
/// with `labels` and `annotations` (promtool compares both; the strings of
/// `tests/rules/dcgm-otel-gpu.test.yml`) at 35 minutes.
fn promtool_fires(lines: &[&str], alert: &str, labels: &str, annotations: [&str; 3]) {
    let Some(promtool) = peers::promtool() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rules =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/rules/dcgm-otel-gpu.rules.yml");
    let mut test = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n",
        rules.display()
    );
    for line in lines {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let series = match series.split_once('{') {
            Some((name, rest)) => {
                format!("{name}{{job=\"dcgm-otel\",instance=\"gpu-node-1:9400\",{rest}")
            }
            None => format!("{series}{{job=\"dcgm-otel\",instance=\"gpu-node-1:9400\"}}"),
        };
        test.push_str(&format!(
            "      - series: '{series}'\n        values: '{value}x40'\n"
        ));
    }
    let [summary, description, runbook] = annotations;
    test.push_str(&format!(
        "    alert_rule_test:\n      - alertname: {alert}\n        eval_time: 2m\n        exp_alerts: []\n      - alertname: {alert}\n        eval_time: 35m\n        exp_alerts:\n          - exp_labels: {labels}\n            exp_annotations:\n              summary: {summary:?}\n              description: {description:?}\n              runbook: {runbook:?}\n"
    ));
    let file = dir.path().join("fires.test.yml");
    std::fs::write(&file, &test).unwrap();
    let out = Command::new(promtool)
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{alert} did not fire as expected on the exporter's output:\n{}{}\n{test}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A host engine that answers with zero GPUs on a node with two device files: `/ready` 503 with the
/// reason, `dcgm_otel_gpus_missing` 2 (and the alert fires on that line in a promtool test); when
/// DCGM lists the GPUs (the fake's window ends), the rediscovery brings the series and `/ready` 200.
#[test]
fn zero_gpus_on_a_node_with_devices_is_not_ready_and_alerts() {
    let fake = Fake::new();
    let dev = tempfile::tempdir().unwrap();
    let dev_root = device_files(dev.path(), 2);
    let (mut e, _) = spawn(
        &fake,
        &[
            "-c",
            "200",
            "--dev-root",
            &dev_root,
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
        ],
        &[("FAKE_DCGM_STARTUP", "gpus_after_ms=8000")],
    );
    let reason = format!(
        "not ready: DCGM reports 0 GPUs but the node has 2 (2 NVIDIA device files in {dev_root}); rediscovering"
    );
    let mut body = String::new();
    wait_for(
        "/ready 503 saying why, 2 GPUs missing",
        Duration::from_secs(20),
        &mut e,
        |port| {
            body = metrics(port);
            status(port, "/ready") == (503, reason.clone())
                && body.contains("dcgm_otel_gpus_missing{source=\"dcgm\"} 2\n")
        },
    );
    assert_eq!(status(e.port, "/health").0, 200);
    assert!(series(&body).is_empty(), "{body}");
    assert_eq!(
        value(&body, "dcgm_otel_source_up{source=\"dcgm\"}"),
        Some(1.0)
    );
    let missing = body
        .lines()
        .find(|l| l.starts_with("dcgm_otel_gpus_missing{"))
        .unwrap()
        .to_string();
    assert_eq!(missing, "dcgm_otel_gpus_missing{source=\"dcgm\"} 2");
    assert!(
        value(
            &body,
            "dcgm_otel_discoveries_missing_gpus_total{source=\"dcgm\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{body}"
    );
    promtool_fires(
        &[&missing],
        "DcgmOtelGpusMissing",
        "{severity: critical, job: dcgm-otel, instance: \"gpu-node-1:9400\", source: dcgm}",
        [
            "DCGM on gpu-node-1:9400 does not report 2 of the node's GPUs",
            "dcgm-otel on gpu-node-1:9400 reads DCGM, but DCGM has reported 2 GPU(s) fewer than the node has for 5 minutes: those GPUs have no series, so no GPU alert can fire for them. The exporter keeps rediscovering and its /ready answers 503 with the counts.",
            "Compare nvidia-smi -L on the node with dcgmi discovery -l; a host engine started before the driver (or before a GPU was reset) needs a restart of the host engine (the nvidia-dcgm pod or service); a GPU missing from nvidia-smi too fell off the bus (dmesg, XID 79).",
        ],
    );
    wait_for(
        "the GPUs' series and /ready 200 once DCGM lists them",
        Duration::from_secs(40),
        &mut e,
        |port| status(port, "/ready").0 == 200 && series(&metrics(port)).len() > 10,
    );
    let body = scrape(e.port);
    assert_eq!(
        value(&body, "dcgm_otel_gpus_missing{source=\"dcgm\"}"),
        Some(0.0)
    );
    assert_alive(&mut e);
}

/// Profiling that stays unavailable on a GPU that supports it fires its alert (on the exporter's own
/// line); a GPU without profiling does not.
#[test]
fn profiling_unavailable_alerts_on_the_exporters_line() {
    let fake = Fake::new();
    let (mut e, _) = spawn(&fake, &["-c", "200"], &[("FAKE_DCGM_PROFILING", "off")]);
    wait_for("/ready 200", Duration::from_secs(20), &mut e, |port| {
        status(port, "/ready").0 == 200
    });
    let body = scrape(e.port);
    let line = body
        .lines()
        .find(|l| l.starts_with("dcgm_otel_profiling_available"))
        .unwrap()
        .to_string();
    assert_eq!(
        line,
        "dcgm_otel_profiling_available{reason=\"module_not_loaded\"} 0"
    );
    promtool_fires(
        &[&line],
        "DcgmOtelProfilingUnavailable",
        "{severity: warning, job: dcgm-otel, instance: \"gpu-node-1:9400\", reason: module_not_loaded}",
        [
            "Profiling metrics unavailable on gpu-node-1:9400 (module_not_loaded)",
            "dcgm-otel on gpu-node-1:9400 has not been able to read DCGM's profiling (DCP) fields for 30 minutes (module_not_loaded): DCGM_FI_PROF_* series (SM, tensor and memory activity) are missing.",
            "module_not_loaded: install datacenter-gpu-manager-4-proprietary with the host engine, and run one host engine per node; no_permission: give the exporter (or nv-hostengine) root and CAP_SYS_ADMIN; watch_failed: stop other profilers (Nsight, a second host engine) on the node. The exporter's log names the cause.",
        ],
    );
    assert_alive(&mut e);
}
