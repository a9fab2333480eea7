//! The fault-matrix soak (issue 18): the built exporter on the fake libdcgm's `large` fleet
//! (8 H100 × 7 MIG instances, over 10,000 series) at `-c 1000`, with every peer failing on a schedule
//! scaled to the run's length — the host engine goes away and returns (the fake's `outage_every_ms`),
//! the kubelet and the Kubernetes API server go away and return, the OTLP collector is down for
//! 10 minutes (a third of a shorter run) — while scrapes arrive at 50/s beside a slowloris crowd, the
//! counters CSV is swapped (symlink) and SIGHUP reloads the web config (basic auth on, probes exempt).
//! Hostile clients (issue 35) run beside the load: hit-and-run wrong passwords and an idle-connection
//! flood ([`hostile`]). The process and its self-metrics are sampled every 10 s (1 s in runs under
//! 10 minutes) and the run fails on a crash, fd or thread growth, RSS over its bound, an outage not
//! visible in the self-metrics or not healed within two collect intervals of its peer's return, a DCGM
//! value served while the source is down, or an authenticated scrape or a `/health` probe that was not
//! answered 200.
//!
//! `#[ignore]`d: `tests/soak/run.sh [--minutes N]` runs it (release exporter); `tests/run-all.sh` runs
//! a 90 s version. Settings: `SOAK_SECONDS` (default 90), `SOAK_BIN` (default: this build's binary),
//! `SOAK_OUT` (default `target/soak`): `samples.csv`, `timeline.csv`, `report.md`, `exporter.log`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test driver fails loudly on purpose

#[path = "../support/mod.rs"]
mod support;

mod hostile;
mod load;
mod peers;
mod probe;
mod verdict;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dcgm_otel::source::sim::{Fleet, Scenario};

use support::api_server::ApiServer;
use support::kubelet::{container, pod, pods, Kubelet};
use verdict::{Event, Sample, Tick};

/// Collect interval of the exporter under test (`-c`), seconds.
pub const INTERVAL_S: f64 = 1.0;
/// Scrape rate of the load and the size of the slowloris crowd.
const SCRAPES_PER_S: u32 = 50;
const SLOWLORIS: u32 = 100;
/// `--otlp-max-pending` (the default, written out so the RSS bound can name it).
pub const MAX_PENDING: u64 = 8;

/// The schedule, in seconds since the soak began.
#[derive(Debug, Clone)]
pub struct Plan {
    pub total: f64,
    pub sample_every: f64,
    /// Load from here; the baseline (fds, threads) is taken just before.
    pub load_from: f64,
    /// Load stops here; the final reading is taken at `total`, once the process settled.
    pub load_until: f64,
    /// Host engine: the first `engine_down` of every `engine_every` of UNIX time.
    pub engine_every: f64,
    pub engine_down: f64,
    pub kubelet: (f64, f64),
    pub api: (f64, f64),
    pub collector: (f64, f64),
    pub csv_swaps: Vec<f64>,
    pub sighups: Vec<f64>,
}

impl Plan {
    pub fn new(total: f64) -> Plan {
        let settle = (0.05 * total).max(15.0);
        let load_from = (0.05 * total).max(8.0);
        let collector_down = (total / 3.0).min(600.0);
        Plan {
            total,
            sample_every: if total >= 600.0 { 10.0 } else { 1.0 },
            load_from,
            load_until: total - settle,
            engine_every: (total / 6.0).round().max(10.0),
            engine_down: (total / 60.0).round().max(3.0),
            kubelet: (0.20 * total, 0.27 * total),
            api: (0.30 * total, 0.37 * total),
            collector: (0.40 * total, 0.40 * total + collector_down),
            csv_swaps: (0..8)
                .map(|i| (1.0 + 2.0 * f64::from(i)) * total / 16.0)
                .collect(),
            sighups: (0..8)
                .map(|i| (1.5 + 2.0 * f64::from(i)) * total / 16.0)
                .collect(),
        }
    }
}

fn unix_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

struct Exporter {
    child: Child,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    std::env::var_os("SOAK_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_dcgm-otel")))
}

/// `libdcgm.so.4` → the fake (built if needed), in `dir/lib`.
fn fake_dir(dir: &Path) -> PathBuf {
    let so = support::fake_lib::built("libfake_libdcgm.so");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::os::unix::fs::symlink(so, lib.join("libdcgm.so.4")).unwrap();
    lib
}

/// Point `counters.csv` at `target` atomically (a new symlink renamed over the old one).
fn point_counters(dir: &Path, target: &str) {
    let tmp = dir.join("counters.csv.new");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(dir.join(target), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("counters.csv")).unwrap();
}

/// The soak's fleet: `large` with incidents all along — on each of the 8 GPUs three XIDs every
/// collection (one on the GPU, two on MIG instances: 24 a collection, an XID storm), a thermal clock
/// event every 10 collections on the even GPUs and a PCIe health warning every 30 on GPU 0 — so the
/// `DCGM_EXP_*` state and the OTLP log records are under load too (the log buffer reaches its bound
/// during a 10-minute collector outage).
fn storm_scenario() -> String {
    let mut yaml = include_str!("../../src/source/sim/scenarios/large.yaml").to_string();
    yaml.push_str("events:\n");
    for g in 0..8 {
        yaml.push_str(&format!(
            "  - {{ at_collection: 5, gpu: {g}, xid: 43, every: 1 }}\n\
             \x20 - {{ at_collection: 5, gpu: {g}, gpu_i_id: {}, xid: 13, every: 1 }}\n\
             \x20 - {{ at_collection: 5, gpu: {g}, gpu_i_id: {}, xid: 31, every: 1 }}\n",
            7 + g % 7,
            7 + (g + 3) % 7
        ));
        if g % 2 == 0 {
            yaml.push_str(&format!(
                "  - {{ at_collection: {}, gpu: {g}, clock_events: [hw_thermal], collections: 3, every: 10 }}\n",
                3 + g
            ));
        }
    }
    yaml.push_str(
        "  - { at_collection: 10, gpu: 0, health: { watch: PCIE, result: warn, error_code: DCGM_FR_PCI_REPLAY_RATE, message: \"PCIe replay rate above threshold\" }, collections: 10, every: 30 }\n",
    );
    yaml
}

/// The `large` counters with the six `DCGM_EXP_*` rows of the `incidents` scenario added.
fn large_counters_with_incidents() -> String {
    dcgm_otel::source::sim::scenario::with_incident_rows(include_str!(
        "../../src/source/sim/scenarios/large-counters.csv"
    ))
}

/// The soak's basic-auth user `soak`, password `soak-pw`: what the scrapers and the monitor send.
pub const AUTHORIZATION: &str = "Basic c29hazpzb2FrLXB3";

/// The two web configs SIGHUP alternates: the same user (so a reload keeps its cached login), another
/// header.
fn web_configs() -> [String; 2] {
    let hash = bcrypt::hash("soak-pw", 10).unwrap();
    ["deny", "sameorigin"].map(|frame| {
        format!(
            "basic_auth_users:\n  soak: {hash}\nhttp_server_config:\n  headers:\n    X-Frame-Options: {frame}\n"
        )
    })
}

#[test]
#[ignore = "long: tests/soak/run.sh, or SOAK_SECONDS=90 cargo nextest run --test soak --run-ignored only"]
fn soak() {
    let total: f64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(90.0);
    let plan = Plan::new(total);
    let out = std::env::var_os("SOAK_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/soak"));
    std::fs::create_dir_all(&out).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    eprintln!(
        "soak: {total:.0} s, plan {plan:?}, output in {}",
        out.display()
    );

    // ---- peers
    let scenario = dir.join("soak-scenario.yaml");
    std::fs::write(&scenario, storm_scenario()).unwrap();
    let fleet = Fleet::new(
        &Scenario::load(scenario.to_str().unwrap()).unwrap(),
        1,
        "soak-node",
    );
    // What a MIG node's kubelet hands out: one MIG device per pod (a whole GPU when not split).
    let uuids: Vec<String> = fleet
        .gpus()
        .iter()
        .flat_map(|g| {
            if g.instances.is_empty() {
                vec![g.identity.uuid.clone()]
            } else {
                g.instances.iter().map(|i| i.uuid.clone()).collect()
            }
        })
        .collect();
    // One pod per device (`soak/job-<i>`, container `cuda`, label `team=soak`).
    let socket = dir.join("kubelet.sock");
    let api = ApiServer::start("soak-node");
    let mut list = Vec::new();
    for (i, uuid) in uuids.iter().enumerate() {
        let name = format!("job-{i}");
        let uid = format!("00000000-0000-4000-8000-{i:012}");
        api.put_pod("soak", &name, &uid, &[("team", "soak")]);
        list.push(pod(
            "soak",
            &name,
            vec![container("cuda", "nvidia.com/gpu", &[uuid])],
        ));
    }
    let mut kubelet = Kubelet::start(&socket, pods(list));
    let kubeconfig = api.kubeconfig(dir);
    // What may take a while (the fake libdcgm is built if needed, waiting for cargo's lock when
    // another build holds it) comes before the schedule's clock starts: the first SIGHUP must not
    // find an exporter that has not started yet.
    let bin = binary();
    let help = Command::new(&bin).arg("--help").output().unwrap();
    let logs = String::from_utf8_lossy(&help.stdout).contains("--otlp-logs");
    let lib = fake_dir(dir);
    let epoch = Instant::now();
    let mut collector = peers::Collector::start(epoch);

    // ---- files the exporter reloads
    std::fs::write(dir.join("large.csv"), large_counters_with_incidents()).unwrap();
    std::fs::write(
        dir.join("default.csv"),
        include_str!("../../src/counters/default-counters.csv"),
    )
    .unwrap();
    point_counters(dir, "large.csv");
    let web_configs = web_configs();
    std::fs::write(dir.join("web.yml"), &web_configs[0]).unwrap();

    // ---- the exporter
    // :0: the exporter binds a port itself and says which in its "serving /metrics" line.
    let mut args: Vec<String> = [
        "-c",
        "1000",
        "-a",
        "127.0.0.1:0",
        "-f",
        dir.join("counters.csv").to_str().unwrap(),
        "--web-config-file",
        dir.join("web.yml").to_str().unwrap(),
        "--web-health-auth=false",
        "-k",
        "--pod-resources-kubelet-socket",
        socket.to_str().unwrap(),
        "--kubernetes-enable-pod-labels",
        "--kubernetes-pod-label-allowlist-regex",
        "^team$",
        "--otlp",
        "--otlp-protocol",
        "http/protobuf",
        "--otlp-endpoint",
        &format!("http://127.0.0.1:{}", collector.port),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if logs {
        args.push("--otlp-logs=true".into());
    }
    let faults = format!(
        "down_ms={},outage_every_ms={}",
        (plan.engine_down * 1000.0) as u64,
        (plan.engine_every * 1000.0) as u64
    );
    let log_path = out.join("exporter.log");
    let child = Command::new(&bin)
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NODE_NAME", "soak-node")
        .env("KUBECONFIG", &kubeconfig)
        .env("LD_LIBRARY_PATH", &lib)
        .env("FAKE_DCGM_SCENARIO", &scenario)
        .env("FAKE_DCGM_FAULTS", &faults)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut exporter = Exporter { child };
    let port = support::common::port_logged_in(
        &log_path,
        support::common::SERVING,
        &mut exporter.child,
        Duration::from_secs(30),
    );
    let pid = exporter.child.id();
    eprintln!(
        "soak: {} pid {pid} on :{port}, OTLP logs {}, faults {faults}",
        bin.display(),
        if logs { "on" } else { "off (no --otlp-logs)" }
    );

    // ---- the monitor: /metrics every 250 ms, the timeline the verdict reads
    let ticks: Arc<Mutex<Vec<Tick>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (ticks, stop) = (ticks.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let t = epoch.elapsed().as_secs_f64();
                let tick = match probe::get(port, "/metrics") {
                    Some((200, body)) => Tick::from(t, &probe::SelfMetrics::parse(&body)),
                    _ => Tick::unanswered(t),
                };
                ticks.lock().unwrap().push(tick);
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };

    // ---- the schedule
    #[derive(Debug)]
    enum Act {
        LoadOn,
        LoadOff,
        Kubelet(bool),
        Api(bool),
        Collector(bool),
        SwapCsv(usize),
        Sighup(usize),
    }
    let mut acts: Vec<(f64, Act)> = vec![
        (plan.load_from, Act::LoadOn),
        (plan.load_until, Act::LoadOff),
        (plan.kubelet.0, Act::Kubelet(false)),
        (plan.kubelet.1, Act::Kubelet(true)),
        (plan.api.0, Act::Api(false)),
        (plan.api.1, Act::Api(true)),
        (plan.collector.0, Act::Collector(false)),
        (plan.collector.1, Act::Collector(true)),
    ];
    acts.extend(
        plan.csv_swaps
            .iter()
            .enumerate()
            .map(|(i, &t)| (t, Act::SwapCsv(i))),
    );
    acts.extend(
        plan.sighups
            .iter()
            .enumerate()
            .map(|(i, &t)| (t, Act::Sighup(i))),
    );
    acts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut acts = acts.into_iter().peekable();

    let unix_at_epoch = unix_s() - epoch.elapsed().as_secs_f64();
    let mut samples: Vec<Sample> = Vec::new();
    let mut events: Vec<Event> = Vec::new();
    let mut load: Option<load::Load> = None;
    let mut load_stats = None;
    let mut hostile: Option<hostile::Hostile> = None;
    let mut hostile_stats = None;
    let mut next_sample = 0.0;
    let mut last_cpu: Option<(f64, f64)> = None;
    let mut crashed = None;
    loop {
        let t = epoch.elapsed().as_secs_f64();
        if t >= total {
            break;
        }
        if let Ok(Some(status)) = exporter.child.try_wait() {
            crashed = Some(format!("exporter exited at t={t:.1}s: {status}"));
            break;
        }
        while acts.peek().is_some_and(|(at, _)| *at <= t) {
            let (_, act) = acts.next().unwrap();
            eprintln!("soak: t={t:.1}s {act:?}");
            match act {
                Act::LoadOn => {
                    load = Some(load::Load::start(port, SCRAPES_PER_S, 8, SLOWLORIS));
                    hostile = Some(hostile::Hostile::start(port));
                }
                Act::LoadOff => {
                    load_stats = load.take().map(load::Load::stop);
                    hostile_stats = hostile.take().map(hostile::Hostile::stop);
                }
                Act::Kubelet(true) => kubelet.up(),
                Act::Kubelet(false) => kubelet.down(),
                Act::Api(true) => api.up(),
                Act::Api(false) => api.down(),
                Act::Collector(true) => collector.up(),
                Act::Collector(false) => collector.down(),
                Act::SwapCsv(i) => point_counters(
                    dir,
                    if i % 2 == 0 {
                        "default.csv"
                    } else {
                        "large.csv"
                    },
                ),
                Act::Sighup(i) => {
                    std::fs::write(dir.join("web.yml"), &web_configs[(i + 1) % 2]).unwrap();
                    let _ = Command::new("kill")
                        .args(["-HUP", &pid.to_string()])
                        .status();
                }
            }
        }
        if t >= next_sample {
            next_sample += plan.sample_every;
            if let Some(p) = probe::proc(pid) {
                let cpu = last_cpu.map_or(0.0, |(t0, c0)| 100.0 * (p.cpu_s - c0) / (t - t0));
                last_cpu = Some((t, p.cpu_s));
                // Readiness: 503 while the source is down or the data is stale (/health stays 200 then).
                let health = probe::get(port, "/ready").map_or(0, |(s, _)| s);
                let m = probe::get(port, "/metrics")
                    .map(|(_, b)| probe::SelfMetrics::parse(&b))
                    .unwrap_or_default();
                let rx = &collector.received;
                samples.push(Sample {
                    t,
                    rss_kib: p.rss_kib,
                    fds: p.fds,
                    threads: p.threads,
                    cpu_percent: cpu,
                    pending: m.sum("dcgm_otel_otlp_pending_exports", &[]),
                    dropped: m.sum("dcgm_otel_otlp_dropped_exports_total", &[]),
                    request_bytes: m.sum("dcgm_otel_otlp_request_bytes", &[]),
                    health,
                    open_connections: m.get("dcgm_otel_http_open_connections"),
                    series: m.dcgm_series,
                    otlp_metrics: rx.metrics.load(Ordering::SeqCst),
                    otlp_logs: rx.logs.load(Ordering::SeqCst),
                    log_records: rx.log_records.load(Ordering::SeqCst),
                    log_buffered: m.sum("dcgm_otel_otlp_log_buffered_records", &[]),
                    log_pending: m.sum("dcgm_otel_otlp_log_pending_exports", &[]),
                    log_dropped: m.sum("dcgm_otel_otlp_log_records_dropped_total", &[]),
                    incidents: m.sum("dcgm_otel_incidents_total", &[]),
                    log_bytes: std::fs::metadata(&log_path).map_or(0, |m| m.len()),
                });
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(l) = load.take() {
        load_stats = Some(l.stop());
    }
    if let Some(h) = hostile.take() {
        hostile_stats = Some(h.stop());
    }
    // What the exporter counted of the hostile clients.
    let final_metrics = probe::get(port, "/metrics")
        .map(|(_, b)| probe::SelfMetrics::parse(&b))
        .unwrap_or_default();
    stop.store(true, Ordering::Relaxed);
    monitor.join().unwrap();
    let alive = exporter.child.try_wait().ok().flatten().is_none();

    // ---- outages, as the peers saw them (seconds since the soak began)
    let mut k = (unix_at_epoch / plan.engine_every).floor();
    loop {
        let start = k * plan.engine_every - unix_at_epoch;
        if start > total {
            break;
        }
        let end = start + plan.engine_down;
        if start > 5.0 && end + 3.0 * INTERVAL_S < plan.total {
            events.push(Event::outage("host engine", start, end));
        }
        k += 1.0;
    }
    events.push(Event::outage("kubelet", plan.kubelet.0, plan.kubelet.1));
    events.push(Event::outage("Kubernetes API", plan.api.0, plan.api.1));
    events.push(Event::outage(
        "OTLP collector",
        plan.collector.0,
        plan.collector.1,
    ));
    if logs {
        events.push(Event::outage(
            "OTLP collector (logs)",
            plan.collector.0,
            plan.collector.1,
        ));
    }
    for &t in &plan.csv_swaps {
        events.push(Event::reload("counters CSV swap", t));
    }
    for &t in &plan.sighups {
        events.push(Event::reload("SIGHUP web config", t));
    }
    let ticks = ticks.lock().unwrap().clone();
    let report = verdict::judge(verdict::Inputs {
        plan: &plan,
        samples: &samples,
        ticks: &ticks,
        events,
        collector_first_since: &|t| collector.first_since(t),
        collector_first_logs_since: &|t| collector.first_logs_since(t),
        received: &collector.received,
        load: load_stats.as_deref(),
        hostile: hostile_stats.as_deref(),
        final_metrics: &final_metrics,
        alive,
        crashed,
        logs,
        faults: &faults,
    });
    verdict::write(&out, &samples, &report);
    verdict::write_timeline(&out, &ticks);
    eprintln!("{}", report.markdown);
    assert!(
        report.failures.is_empty(),
        "soak failed:\n{}\n(see {})",
        report.failures.join("\n"),
        out.display()
    );
}
