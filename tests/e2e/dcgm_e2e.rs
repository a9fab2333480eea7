//! End to end through libdcgm: the built `dcgm-otel` binary loads the fake libdcgm
//! (`tests/fake-libdcgm`, built by `cargo build --workspace` as `target/<profile>/libfake_libdcgm.so`)
//! under the name `libdcgm.so.4`, found through `LD_LIBRARY_PATH` or `--dcgm-library`, in embedded and
//! remote modes. The fake serves the simulated fleet through NVIDIA's C ABI and writes a call log
//! (`FAKE_DCGM_CALL_LOG`), which the tests read to check what the exporter asked DCGM.
//!
//! Golden file: `UPDATE_GOLDEN=1 cargo nextest run --test e2e dcgm_e2e` rewrites
//! tests/golden/dcgm-fake-default.prom.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::common;
use crate::support::fake_lib::Fake;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{get, run_to_exit, scrape, series, start, terminate, Exporter};

fn refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn start_with(args: &[&str], env: &[(String, String)]) -> Exporter {
    start(args, &refs(env))
}

/// Wait until `cond` holds (checked every 20 ms) or panic after `limit`; returns the time it took.
fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while started.elapsed() < limit {
        if cond() {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

fn health(port: u16) -> u16 {
    get(port, "/health").map(|r| r.status).unwrap_or(0)
}

fn ready(port: u16) -> u16 {
    get(port, "/ready").map(|r| r.status).unwrap_or(0)
}

const GPU0_LABELS: &str = "gpu=\"0\",UUID=\"GPU-1014a9ed-7550-917e-d8dc-3eef7ed5481c\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\"";
const GPU1_LABELS: &str = "gpu=\"1\",UUID=\"GPU-dd3fced7-2ce4-9e7d-0b6b-9f5458ddca3d\",pci_bus_id=\"00000000:2A:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\"";

fn mem_clock_lines(host: &str) -> (String, String) {
    (
        format!("DCGM_FI_DEV_MEM_CLOCK{{{GPU0_LABELS},Hostname=\"{host}\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"}} 2619"),
        format!("DCGM_FI_DEV_MEM_CLOCK{{{GPU1_LABELS},GPU_I_PROFILE=\"2g.20gb\",GPU_I_ID=\"3\",Hostname=\"{host}\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"}} 2619"),
    )
}

#[test]
fn embedded_through_ld_library_path_exact_gpu_and_mig_lines() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "60000"],
        &fake.ld_env(&[("NODE_NAME", "golden-host")]),
    );
    let body = scrape(e.port);
    let (gpu, mig) = mem_clock_lines("golden-host");
    assert!(body.lines().any(|l| l == gpu), "missing {gpu} in:\n{body}");
    assert!(body.lines().any(|l| l == mig), "missing {mig} in:\n{body}");
    // Flex mode: GPU 1 has MIG instances, so it is monitored through them, not as a whole (its one
    // series of its own is dcgm-otel's MIG roll-up).
    assert!(!body
        .lines()
        .any(|l| l.starts_with("DCGM_FI_") && l.contains(&format!("{{{GPU1_LABELS},Hostname"))));
    // Not supported on MIG instances (the fake, like DCGM, says so): present for GPU 0 only.
    let util: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{"))
        .collect();
    assert_eq!(util.len(), 1, "{util:?}");
    assert!(body.contains("dcgm_otel_source_up{source=\"dcgm\"} 1"));
    for sentinel in [
        "2147483632",
        "9223372036854775792",
        "140737488355328",
        "<<<",
    ] {
        assert!(!body.contains(sentinel), "sentinel {sentinel} leaked");
    }
    let calls = fake.calls();
    assert!(calls
        .iter()
        .any(|c| c.starts_with("dcgmStartEmbedded mode=1 ")));
    assert!(!calls.iter().any(|c| c.starts_with("dcgmConnect")));
    // SIGHUP (logrotate, a config tool) leaves the DCGM-backed exporter serving.
    for _ in 0..3 {
        common::signal(&e, "-HUP");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(series(&scrape(e.port)).contains(gpu.rsplit_once(' ').unwrap().0));
}

#[test]
fn golden_default_scenario() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "60000", "--no-self-metrics"],
        &fake.ld_env(&[
            ("NODE_NAME", "golden-host"),
            ("FAKE_DCGM_SCENARIO", "default"),
            ("FAKE_DCGM_SEED", "1"),
        ]),
    );
    common::check_golden("dcgm-fake-default.prom", &scrape(e.port));
}

#[test]
fn dcgm_library_flag_and_remote_unix_socket() {
    let fake = Fake::new();
    // No LD_LIBRARY_PATH: the library comes from --dcgm-library only.
    let e = start_with(
        &[
            "-c",
            "60000",
            "--dcgm-library",
            &fake.lib_path(),
            "-r",
            "unix:///run/nvidia/nv-hostengine.sock",
        ],
        &fake.env(&[("NODE_NAME", "golden-host")]),
    );
    let body = scrape(e.port);
    // A unix socket is local: the host label is the local host name.
    let (gpu, mig) = mem_clock_lines("golden-host");
    assert!(body.lines().any(|l| l == gpu), "missing {gpu} in:\n{body}");
    assert!(body.lines().any(|l| l == mig), "missing {mig}");
    let calls = fake.calls();
    assert!(
        calls.iter().any(|c| c
            .starts_with("dcgmConnect_v2 address=/run/nvidia/nv-hostengine.sock unix=1 ")
            && c.ends_with("rc=0")),
        "{calls:#?}"
    );
    assert!(!calls.iter().any(|c| c.starts_with("dcgmStartEmbedded")));
}

#[test]
fn environment_variable_names_the_library() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "60000"],
        &fake.env(&[
            ("NODE_NAME", "golden-host"),
            ("DCGM_OTEL_LIBDCGM", &fake.lib_path()),
        ]),
    );
    let (gpu, _) = mem_clock_lines("golden-host");
    assert!(scrape(e.port).lines().any(|l| l == gpu));
}

#[test]
fn remote_tcp_waits_for_the_host_engine_and_labels_its_host() {
    let fake = Fake::new();
    // The first two connection attempts are refused: start-up waits and retries.
    let e = start_with(
        &["-c", "60000", "-r", "gpu-node-7:5555"],
        // The fake's fleet (the host engine's GPUs) is golden-host's; the label is the engine's host.
        &fake.ld_env(&[
            ("FAKE_DCGM_FAULTS", "refuse_connect=2"),
            ("NODE_NAME", "golden-host"),
        ]),
    );
    let body = scrape(e.port);
    let (gpu, _) = mem_clock_lines("gpu-node-7");
    assert!(body.lines().any(|l| l == gpu), "missing {gpu} in:\n{body}");
    let connects: Vec<String> = fake
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("dcgmConnect_v2 address=gpu-node-7:5555 unix=0 "))
        .collect();
    assert_eq!(connects.len(), 3, "{connects:#?}");
    assert!(connects[0].ends_with("rc=-21") && connects[1].ends_with("rc=-21"));
    assert!(connects[2].ends_with("rc=0"));
}

#[test]
fn blank_field_is_absent_not_a_number() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "60000"],
        &fake.ld_env(&[("FAKE_DCGM_FAULTS", "blank_field=150")]),
    );
    let body = scrape(e.port);
    assert!(
        !body.lines().any(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{")),
        "a blank GPU temperature was rendered:\n{body}"
    );
    assert!(body
        .lines()
        .any(|l| l.starts_with("DCGM_FI_DEV_MEMORY_TEMP{")));
    assert!(body.contains(
        "dcgm_otel_absent_values_total{field=\"DCGM_FI_DEV_GPU_TEMP\",reason=\"blank\"}"
    ));
}

#[test]
fn profiling_off_skips_dcp_rows_with_one_warning() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "200"],
        &fake.ld_env(&[("FAKE_DCGM_PROFILING", "off")]),
    );
    // Three collections' reads in the call log (a deadline, not a sleep).
    wait_for("three latest-value reads", Duration::from_secs(20), || {
        fake.calls()
            .iter()
            .filter(|c| c.starts_with("dcgmEntitiesGetLatestValues"))
            .count()
            >= 3
    });
    let body = scrape(e.port);
    assert!(
        !body.contains("DCGM_FI_PROF_"),
        "DCP rows rendered:\n{body}"
    );
    assert!(body.lines().any(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{")));
    assert!(body.contains("dcgm_otel_source_up{source=\"dcgm\"} 1"));
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("dcgmProfGetSupportedMetricGroups") && c.ends_with("rc=-33")),
        "{calls:#?}"
    );
    // No profiling field is ever watched or read: none of DCGM's profiling ids (1000..1100), which
    // include the five DCP rows of the default counters.
    let dcp_ids: Vec<u16> =
        dcgm_otel::counters::parse(dcgm_otel::counters::DEFAULT_COUNTERS_CSV, "built-in")
            .unwrap()
            .rows
            .iter()
            .filter(|r| r.name.starts_with("DCGM_FI_PROF_"))
            .map(|r| r.field.id)
            .collect();
    assert_eq!(dcp_ids.len(), 5, "{dcp_ids:?}");
    assert!(dcp_ids.iter().all(|id| (1000..1100).contains(id)));
    let asked: Vec<(&String, u16)> = calls
        .iter()
        .filter(|c| {
            c.starts_with("dcgmFieldGroupCreate") || c.starts_with("dcgmEntitiesGetLatestValues")
        })
        .flat_map(|c| {
            kv(c)
                .get("fields")
                .map(|f| {
                    f.split(',')
                        .filter_map(|id| id.parse().ok())
                        .collect::<Vec<u16>>()
                })
                .unwrap_or_default()
                .into_iter()
                .map(move |id| (c, id))
        })
        .collect();
    assert!(
        asked.len() > 20,
        "no field ids read from the call log: {calls:#?}"
    );
    let profiling: Vec<&(&String, u16)> = asked
        .iter()
        .filter(|(_, id)| (1000..1100).contains(id))
        .collect();
    assert!(
        profiling.is_empty(),
        "profiling fields asked for: {profiling:#?}"
    );
    let err = terminate(e);
    assert_eq!(
        err.matches("Not collecting DCP metrics").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("datacenter-gpu-manager-4-proprietary"),
        "{err}"
    );
}

/// The host engine goes away after 16 reads and refuses connections for 700 ms; `connect_call` is the
/// call-log prefix of a successful (re)connection in this mode.
fn loss_and_recovery(extra_args: &[&str], connect_call: &str) {
    let fake = Fake::new();
    let mut args = vec!["-c", "200"];
    args.extend_from_slice(extra_args);
    let e = start_with(
        &args,
        &fake.ld_env(&[("FAKE_DCGM_FAULTS", "disconnect_after_polls=16,down_ms=700")]),
    );
    let before = series(&scrape(e.port));
    assert!(!before.is_empty());
    wait_for(
        "/ready 503 after the disconnect",
        Duration::from_secs(20),
        || ready(e.port) == 503,
    );
    let down = scrape(e.port);
    // Liveness stays 200: the exporter reconnects by itself, a restart would cure nothing.
    assert_eq!(health(e.port), 200);
    assert!(
        series(&down).is_empty(),
        "series served while down:\n{down}"
    );
    assert!(
        down.contains("dcgm_otel_source_up{source=\"dcgm\"} 0"),
        "{down}"
    );
    let took = wait_for(
        "/ready 200 after the host engine is back",
        Duration::from_secs(20),
        || ready(e.port) == 200,
    );
    eprintln!(
        "recovered {took:?} after /ready turned 503 (host engine down for 700 ms, interval 200 ms)"
    );
    assert_eq!(
        series(&scrape(e.port)),
        before,
        "a different set of series came back"
    );
    let calls = fake.calls();
    let connects = calls
        .iter()
        .filter(|c| c.starts_with(connect_call) && c.ends_with("rc=0"))
        .count();
    assert_eq!(connects, 2, "one connection, one reconnection: {calls:#?}");
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("dcgmInit")).count(),
        1
    );
    // Every watch was re-created after the reconnect.
    let watches = calls
        .iter()
        .filter(|c| c.starts_with("dcgmWatchFields") && c.ends_with("rc=0"))
        .count();
    assert_eq!(watches, 4, "{calls:#?}");
}

#[test]
fn host_engine_loss_withdraws_series_then_recovers_without_restart() {
    loss_and_recovery(&[], "dcgmStartEmbedded mode=1 ");
}

#[test]
fn remote_host_engine_loss_reconnects() {
    loss_and_recovery(
        &["-r", "unix:///run/nvidia/nv-hostengine.sock"],
        "dcgmConnect_v2 address=/run/nvidia/nv-hostengine.sock unix=1 ",
    );
}

/// Regression (soak, issue 18): while the host engine is away every collection tries to reconnect, so
/// the series are back at the first collection after it returns. The reconnection delay used to double
/// up to 30 s: a 4 s outage at `-c 200` saw 5 attempts and the series stayed away 2 s after its return.
#[test]
fn reconnection_is_tried_every_collection_while_the_host_engine_is_away() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "200"],
        &fake.ld_env(&[("FAKE_DCGM_FAULTS", "disconnect_after_polls=10,down_ms=4000")]),
    );
    // While the host engine is away, /ready says when the next attempt comes: never more than one
    // collect interval ahead (a schedule the exporter states, whatever the machine's load; the
    // attempts themselves happen on a loaded machine's time). Doubling delays said up to 1.6 s here.
    let next_attempt = |text: &str| -> Option<f64> {
        text.split_once("next attempt in ")?
            .1
            .split_once('s')?
            .0
            .parse()
            .ok()
    };
    wait_for(
        "/ready 503 after the disconnect",
        Duration::from_secs(20),
        || ready(e.port) == 503,
    );
    // Each 503 reason is either an attempt's own failure (the attempt was made at that collection) or
    // names the next attempt; on a loaded machine every collection may find an attempt due, so the
    // reasons are counted and every named next attempt is checked.
    let (mut reasons, mut said) = (0, Vec::new());
    wait_for(
        "/ready 200 after the host engine is back",
        Duration::from_secs(30),
        || match get(e.port, "/ready") {
            Ok(r) if r.status == 200 => true,
            Ok(r) => {
                reasons += 1;
                said.extend(next_attempt(&r.text()));
                false
            }
            Err(_) => false,
        },
    );
    let refused = fake
        .calls()
        .iter()
        .filter(|c| c.starts_with("dcgmStartEmbedded") && c.ends_with("rc=-21"))
        .count();
    eprintln!(
        "{refused} refused reconnection attempts; {reasons} /ready reasons; next attempts named: {said:?}"
    );
    assert!(
        reasons >= 5,
        "/ready answered 503 only {reasons} times during the outage"
    );
    assert!(
        said.iter().all(|s| *s <= 0.2),
        "a next attempt more than one interval (0.2 s) ahead: {said:?}"
    );
    assert!(refused >= 2, "{refused} reconnection attempts");
}

#[test]
fn hanging_host_engine_withdraws_series_until_it_answers() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "1000"],
        &fake.ld_env(&[("FAKE_DCGM_FAULTS", "hang_ms=15000@4")]),
    );
    let before = series(&scrape(e.port));
    assert!(!before.is_empty());
    let hung = |calls: &[String]| calls.iter().position(|c| c.starts_with("hang begins"));
    wait_for("the hang to begin", Duration::from_secs(20), || {
        hung(&fake.calls()).is_some()
    });
    let hang_start = Instant::now();
    // The blocked call is logged when it returns: the first latest-values line after the hang line.
    let returned = |calls: &[String]| {
        hung(calls).is_some_and(|i| {
            calls[i + 1..]
                .iter()
                .any(|c| c.starts_with("dcgmEntitiesGetLatestValues"))
        })
    };
    let withdrawn = |ready: &common::Response, body: &str| {
        ready.status == 503
            && ready.text().starts_with("not ready: collection stuck for ")
            && series(body).is_empty()
            && body.contains("dcgm_otel_source_up{source=\"dcgm\"} 0")
            && body.contains("dcgm_otel_collect_stuck_total{source=\"dcgm\"} 1")
    };
    let (mut samples, mut withdrawn_samples) = (0, 0);
    while !returned(&fake.calls()) {
        let elapsed = hang_start.elapsed();
        assert!(elapsed < Duration::from_secs(60), "the hang never ended");
        let h = get(e.port, "/ready").unwrap();
        let live = get(e.port, "/health").unwrap();
        let body = scrape(e.port);
        if returned(&fake.calls()) {
            break;
        }
        samples += 1;
        assert_eq!(
            (live.status, live.text().as_str()),
            (200, "OK\n"),
            "{elapsed:?} into the hang"
        );
        if withdrawn_samples > 0 || withdrawn(&h, &body) {
            // Once withdrawn, withdrawn until the call returns.
            assert!(
                withdrawn(&h, &body),
                "{elapsed:?} into the hang, after {withdrawn_samples} withdrawn samples: /ready {} {}\n{body}",
                h.status,
                h.text()
            );
            withdrawn_samples += 1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("{samples} samples during the hang, {withdrawn_samples} of them withdrawn");
    assert!(
        withdrawn_samples > 0,
        "the series were never withdrawn during a 15 s hang ({samples} samples)"
    );
    let took = wait_for(
        "/ready 200 and the series after the call returned",
        Duration::from_secs(30),
        || ready(e.port) == 200 && series(&scrape(e.port)) == before,
    );
    eprintln!("back {took:?} after the blocked call returned");
    let err = terminate(e);
    assert_eq!(
        err.matches("collection stuck").count(),
        1,
        "logged once:\n{err}"
    );
}

#[test]
fn vanished_gpu_is_removed_without_restart() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "200"],
        &fake.ld_env(&[("FAKE_DCGM_FAULTS", "vanish_gpu=0@6")]),
    );
    let rediscovered = || {
        fake.calls()
            .iter()
            .filter(|c| c.starts_with("dcgmGetAllSupportedDevices count=1 "))
            .count()
            == 1
    };
    wait_for(
        "GPU 0 to vanish and be rediscovered",
        Duration::from_secs(20),
        rediscovered,
    );
    // The first body without GPU 0 (a deadline, not a sleep), GPU 1's instances still there.
    let mut body = String::new();
    wait_for("a body without GPU 0", Duration::from_secs(20), || {
        body = scrape(e.port);
        !body.contains("gpu=\"0\"")
    });
    assert!(body.contains("GPU_I_ID=\"3\""), "{body}");
    assert_eq!(health(e.port), 200);
    let calls = fake.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("dcgmStartEmbedded"))
            .count(),
        1,
        "the engine was restarted"
    );
    // The new group holds only GPU 1's instances.
    let last_group = calls
        .iter()
        .rposition(|c| c.starts_with("dcgmGroupCreate"))
        .unwrap();
    let added: Vec<&String> = calls[last_group..]
        .iter()
        .filter(|c| c.starts_with("dcgmGroupAddEntity"))
        .collect();
    assert_eq!(added.len(), 3, "{added:#?}");
    assert!(
        added.iter().all(|c| c.contains("entityGroup=4 ")),
        "{added:#?}"
    );
}

#[test]
fn missing_library_is_one_clear_error_and_exit_1() {
    let (code, err) = run_to_exit(&["--dcgm-library", "/nonexistent/libdcgm.so.4"], &[]);
    assert_eq!(code, 1, "{err}");
    for needle in [
        "/nonexistent/libdcgm.so.4",
        "datacenter-gpu-manager-4-core",
        "--simulate",
        "-r HOST:PORT",
    ] {
        assert!(err.contains(needle), "'{needle}' missing from: {err}");
    }
    // The soname search: an empty LD_LIBRARY_PATH directory, unless this machine has a real DCGM.
    let system_has_dcgm = [
        "/usr/lib/x86_64-linux-gnu/libdcgm.so.4",
        "/usr/lib64/libdcgm.so.4",
        "/usr/lib/x86_64-linux-gnu/libdcgm.so.3",
    ]
    .iter()
    .find(|p| Path::new(p).exists());
    if let Some(real) = system_has_dcgm {
        eprintln!("SKIP: the soname search (empty LD_LIBRARY_PATH) is not checked: this machine has a real DCGM ({real}), which the search finds");
    } else {
        let empty = tempfile::tempdir().unwrap();
        let dir = empty.path().display().to_string();
        let (code, err) = run_to_exit(&[], &[("LD_LIBRARY_PATH", &dir)]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("libdcgm.so.4, libdcgm.so.3"), "{err}");
        assert!(err.contains("datacenter-gpu-manager-4-core"), "{err}");
    }
}

#[test]
fn bad_remote_address_and_absent_devices_exit_2() {
    let (code, err) = run_to_exit(&["-r", "fd00::1:5555"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("an IPv6 address needs brackets"), "{err}");
    let fake = Fake::new();
    let env = fake.ld_env(&[]);
    let (code, err) = run_to_exit(&["-d", "g:0,5"], &refs(&env));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("device selection asks for GPU 5, which does not exist (present: 0,1)"),
        "{err}"
    );
}

/// Parse `key=value` words of a call-log line.
fn kv(line: &str) -> BTreeMap<&str, &str> {
    line.split(' ').filter_map(|w| w.split_once('=')).collect()
}

#[test]
fn call_log_one_read_per_entity_per_cycle_unique_watches_nothing_after_shutdown() {
    let fake = Fake::new();
    let e = start_with(&["-c", "100"], &fake.ld_env(&[]));
    // At least 6 collections' reads (a deadline, not a sleep).
    wait_for(
        "six latest-value reads of GPU 0",
        Duration::from_secs(30),
        || {
            fake.calls()
                .iter()
                .filter(|c| {
                    c.starts_with("dcgmEntitiesGetLatestValues")
                        && kv(c)["entities"].split(',').any(|e| e == "1:0")
                })
                .count()
                >= 6
        },
    );
    let err = terminate(e);
    let calls = fake.calls();
    assert_eq!(
        calls.last().map(String::as_str),
        Some("dcgmShutdown rc=0"),
        "{err}\n{calls:#?}"
    );
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("dcgmShutdown"))
            .count(),
        1
    );
    // No (connection, group, field group) watch is created twice.
    let mut watches = BTreeSet::new();
    for c in calls.iter().filter(|c| c.starts_with("dcgmWatchFields")) {
        let f = kv(c);
        assert!(
            watches.insert((f["handle"], f["group"], f["fieldGroup"])),
            "watched twice: {c}"
        );
        assert_eq!(
            f["freq"], "100000",
            "watch frequency is the collect interval in µs: {c}"
        );
        // Three collect intervals (0.3 s) and as many samples (+1), not dcgm-exporter's 600 s.
        assert_eq!(f["maxKeepAge"], "0.3");
        assert_eq!(f["maxKeepSamples"], "4");
    }
    assert_eq!(watches.len(), 2, "basic and DCP field groups");
    // Steady state: between the first update and the first unwatch only cached latest-value reads.
    let first_update = calls
        .iter()
        .position(|c| c.starts_with("dcgmUpdateAllFields"))
        .unwrap();
    let teardown = calls
        .iter()
        .position(|c| c.starts_with("dcgmUnwatchFields"))
        .unwrap();
    let steady = &calls[first_update + 1..teardown];
    assert!(steady.len() >= 4, "{steady:#?}");
    for c in steady {
        assert!(
            c.starts_with("dcgmEntitiesGetLatestValues ") && kv(c)["flags"] == "0",
            "unexpected call in a cycle: {c}"
        );
    }
    // Each cycle reads every monitored entity exactly once, in at most two calls (GPUs and MIG
    // instances ask for different fields once DCGM said which ones instances do not support).
    let mut reads: BTreeMap<String, usize> = BTreeMap::new();
    for c in steady {
        for ent in kv(c)["entities"].split(',') {
            *reads.entry(ent.to_string()).or_default() += 1;
        }
    }
    let cycles = reads["1:0"];
    // GPU utilization (203) is not supported on MIG instances: asked once, then never again there.
    let asked_203_on_instances = steady
        .iter()
        .filter(|c| {
            kv(c)["entities"].contains("4:8") && kv(c)["fields"].split(',').any(|f| f == "203")
        })
        .count();
    assert_eq!(asked_203_on_instances, 1, "{steady:#?}");
    assert_eq!(
        reads.keys().cloned().collect::<Vec<_>>(),
        ["1:0", "4:10", "4:8", "4:9"]
    );
    assert!(reads.values().all(|&n| n == cycles), "{reads:?}");
    assert!(
        steady.len() <= 2 * cycles,
        "{} calls for {cycles} cycles",
        steady.len()
    );
    eprintln!("{} latest-value calls for {cycles} cycles", steady.len());
    // Orderly teardown after the last read: unwatch, destroy, stop, shut down.
    let tail: Vec<&str> = calls[teardown..]
        .iter()
        .map(|c| c.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(
        tail,
        [
            "dcgmUnwatchFields",
            "dcgmUnwatchFields",
            "dcgmFieldGroupDestroy",
            "dcgmFieldGroupDestroy",
            "dcgmGroupDestroy",
            "dcgmStopEmbedded",
            "dcgmShutdown"
        ]
    );
}

/// The same fleet read through the fake libdcgm and simulated directly yields the same series (names,
/// labels, label order), NvLinks included, for the same counters.
#[test]
fn same_series_as_the_simulated_source_including_nvlinks() {
    let fake = Fake::new();
    let csv = fake.dir.path().join("links.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature.\n\
         DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL, counter, Link down events.\n\
         DCGM_FI_DRIVER_VERSION, label, Driver version.\n",
    )
    .unwrap();
    let csv = csv.display().to_string();
    for scenario in ["default", "dgx-h100-mig"] {
        let dcgm = start_with(
            &["-c", "60000", "-f", &csv],
            &fake.ld_env(&[
                ("NODE_NAME", "golden-host"),
                ("FAKE_DCGM_SCENARIO", scenario),
            ]),
        );
        let sim_flag = format!("--simulate={scenario}");
        let sim = start(
            &[&sim_flag, "-c", "60000", "-f", &csv],
            &[("NODE_NAME", "golden-host")],
        );
        let (a, b) = (series(&scrape(dcgm.port)), series(&scrape(sim.port)));
        assert!(
            a.iter().any(|s| s.contains("nvlink=")),
            "no NvLink series: {a:#?}"
        );
        assert_eq!(
            a, b,
            "{scenario}: series differ between libdcgm and the simulation"
        );
    }
}

#[test]
fn uri_forms_go_through_dcgm_connect_v3() {
    let fake = Fake::new();
    let e = start_with(
        &["-c", "60000", "-r", "tcp://gpu-node-9:5555"],
        &fake.ld_env(&[("NODE_NAME", "golden-host")]),
    );
    let (gpu, _) = mem_clock_lines("gpu-node-9");
    assert!(scrape(e.port).lines().any(|l| l == gpu));
    let calls = fake.calls();
    assert!(
        calls.iter().any(
            |c| c.starts_with("dcgmConnect_v3 address=tcp://gpu-node-9:5555 ")
                && c.ends_with("rc=0")
        ),
        "{calls:#?}"
    );
    assert!(!calls.iter().any(|c| c.starts_with("dcgmConnect_v2")));
}

/// The goldens of the exporter reading the fake libdcgm are the simulated goldens, byte for byte, and
/// that identity is the point: the fake serves the same scenario through NVIDIA's C ABI, so every
/// difference would be a distortion the DCGM path alone introduces (values read from
/// `dcgmFieldValue_v1/v2` by their type and status, blanks, entity discovery, the MIG hierarchy, the
/// labels from `dcgmGetDeviceAttributes`). Each golden is compared with live output by its own test
/// (`golden_default_scenario` here, `entities_e2e.rs` for hgx-h100 and grace-hopper); this one keeps
/// the two files from drifting apart when one of them is rewritten with `UPDATE_GOLDEN`.
#[test]
fn fake_libdcgm_goldens_are_the_simulated_goldens() {
    for scenario in ["default", "hgx-h100", "grace-hopper"] {
        let read = |name: String| {
            let path = common::golden_path(&name);
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let through = read(format!("dcgm-fake-{scenario}.prom"));
        let simulated = read(format!("simulated-{scenario}.prom"));
        let differ: Vec<String> = simulated
            .lines()
            .zip(through.lines())
            .filter(|(a, b)| a != b)
            .take(5)
            .map(|(a, b)| format!("  simulated: {a}\n  libdcgm:   {b}"))
            .collect();
        assert!(
            through == simulated,
            "{scenario}: the libdcgm golden differs from the simulated one ({} vs {} lines):\n{}",
            through.lines().count(),
            simulated.lines().count(),
            differ.join("\n")
        );
    }
}
