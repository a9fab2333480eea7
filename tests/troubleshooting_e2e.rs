//! What a user collects when the exporter misbehaves (issue 24): DCGM's own log passed through
//! (`--enable-dcgm-log`, `--dcgm-log-level`) from the fake libdcgm, which logs like libdcgm does
//! (`tests/fake-libdcgm/src/dbglog.rs`); the debug dump (`--dump-*`) filling and rotating its directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The fake libdcgm as built next to the binary under test.
fn fake_library() -> String {
    let lib = common::binary()
        .parent()
        .unwrap()
        .join("libfake_libdcgm.so");
    assert!(
        lib.exists(),
        "{} is missing: cargo build --workspace",
        lib.display()
    );
    lib.display().to_string()
}

/// Run the exporter on the fake libdcgm until it has collected once, stop it, and return
/// (stdout, stderr).
fn run_on_fake(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let port = common::free_port();
    let mut cmd = Command::new(common::binary());
    cmd.args(["--dcgm-library", &fake_library()])
        .args(["-a", &format!("127.0.0.1:{port}")])
        .args(args)
        .env_remove("__DCGM_DBG_FILE")
        .env_remove("__DCGM_DBG_LVL")
        .env_remove("DCGM_EXPORTER_ENABLE_DCGM_LOG")
        .env_remove("DCGM_EXPORTER_DCGM_LOG_LEVEL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut e = common::Exporter {
        child: cmd.spawn().unwrap(),
        port,
    };
    common::wait_ready(&e, std::time::Duration::from_secs(20));
    let mut out = e.child.stdout.take().unwrap();
    let err = common::terminate(e);
    let mut stdout = String::new();
    out.read_to_string(&mut stdout).unwrap();
    (stdout, err)
}

#[test]
fn dcgm_log_goes_to_stdout_at_the_level_asked() {
    let (stdout, stderr) = run_on_fake(&["--enable-dcgm-log", "--dcgm-log-level=DEBUG"], &[]);
    assert_eq!(
        stdout,
        "fake libdcgm DEBUG: embedded host engine started (mode 1)\n"
    );
    assert!(
        stderr.lines().any(|l| l.contains(
            "DCGM's own log is passed through (--enable-dcgm-log) dcgm_level=\"DEBUG\" to=standard output (__DCGM_DBG_FILE=-)"
        )),
        "{stderr}"
    );
    // By variable, as dcgm-exporter's manifests set them; NONE (the default level) writes nothing.
    let (stdout, _) = run_on_fake(
        &[],
        &[
            ("DCGM_EXPORTER_ENABLE_DCGM_LOG", "true"),
            ("DCGM_EXPORTER_DCGM_LOG_LEVEL", "INFO"),
        ],
    );
    assert_eq!(
        stdout,
        "fake libdcgm INFO: embedded host engine started (mode 1)\n"
    );
    let (stdout, _) = run_on_fake(&["--enable-dcgm-log"], &[]);
    assert_eq!(stdout, "");
}

#[test]
fn dcgm_log_is_off_unless_asked() {
    // The level alone does nothing (as in dcgm-exporter): libdcgm's variables stay unset.
    let (stdout, stderr) = run_on_fake(&["--dcgm-log-level=VERB"], &[]);
    assert_eq!(stdout, "");
    assert!(!stderr.contains("DCGM's own log"), "{stderr}");
}

#[test]
fn dcgm_log_keeps_a_file_the_user_names() {
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("dcgm.log");
    let (stdout, stderr) = run_on_fake(
        &["--enable-dcgm-log", "--dcgm-log-level=VERB"],
        &[("__DCGM_DBG_FILE", file.to_str().unwrap())],
    );
    assert_eq!(stdout, "");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "fake libdcgm VERB: embedded host engine started (mode 1)\n"
    );
    assert!(
        stderr.contains(&format!("to={} (__DCGM_DBG_FILE)", file.display())),
        "{stderr}"
    );
}

#[test]
fn dcgm_log_says_when_it_cannot_apply() {
    let (code, stderr) = common::run_to_exit(&["--dcgm-log-level", "LOUD"], &[]);
    assert_eq!(
        (code, stderr.as_str()),
        (
            2,
            "dcgm-otel: invalid value 'LOUD' for '--dcgm-log-level <LEVEL>'; see --help\n"
        )
    );
    let e = common::start(&["--simulate", "--enable-dcgm-log"], &[]);
    let stderr = common::terminate(e);
    assert!(
        stderr.lines().any(|l| l.contains(
            "--enable-dcgm-log has no effect: DCGM is not used (--simulate or --source nvml)"
        )),
        "{stderr}"
    );
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn backdate(path: &Path, by: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

/// Run the simulated exporter with the dump on into `dir` until `files` metrics files are there;
/// returns the /metrics body scraped at the end and the exporter's stderr.
fn dump_into(dir: &Path, extra: &[&str], files: usize) -> (String, String) {
    let dir_arg = dir.display().to_string();
    let mut args = vec![
        "--simulate",
        "-c",
        "200",
        "--dump-enabled",
        "--dump-directory",
        &dir_arg,
    ];
    args.extend_from_slice(extra);
    let e = common::start(&args, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while names(dir)
        .iter()
        .filter(|n| n.starts_with("metrics-"))
        .count()
        < files
    {
        assert!(Instant::now() < deadline, "dump files: {:?}", names(dir));
        std::thread::sleep(Duration::from_millis(50));
    }
    let body = common::get(e.port, "/metrics").unwrap().text();
    (body, common::terminate(e))
}

fn gunzip(path: &Path) -> String {
    let mut s = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    s
}

/// The `# HELP` lines of a body: which families it has.
fn families(body: &str) -> BTreeSet<&str> {
    body.lines()
        .filter(|l| l.starts_with("# HELP DCGM_"))
        .collect()
}

#[test]
fn dump_directory_fills_and_rotates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Two hours old: a dump file (removed with --dump-retention 1) and a file of the user's (kept);
    // a dump file of a minute ago (kept).
    for name in ["metrics-20200101-000000-1.prom.gz", "notes.txt"] {
        std::fs::write(d.join(name), b"x").unwrap();
        backdate(&d.join(name), Duration::from_secs(7200));
    }
    std::fs::write(d.join("inventory-20200101-000000-1.json"), b"{}").unwrap();
    backdate(
        &d.join("inventory-20200101-000000-1.json"),
        Duration::from_secs(60),
    );

    let (scraped, _) = dump_into(d, &["--dump-retention", "1"], 3);
    let all = names(d);
    assert!(
        !all.contains(&"metrics-20200101-000000-1.prom.gz".to_string()),
        "{all:?}"
    );
    assert!(all.contains(&"notes.txt".to_string()), "{all:?}");
    assert!(
        all.contains(&"inventory-20200101-000000-1.json".to_string()),
        "{all:?}"
    );
    assert!(!all.iter().any(|n| n.ends_with(".tmp")), "{all:?}");

    // Every collection's body, gzipped, with the families /metrics serves.
    let metrics: Vec<&String> = all.iter().filter(|n| n.starts_with("metrics-")).collect();
    assert!(
        metrics.iter().all(|n| n.ends_with(".prom.gz")),
        "{metrics:?}"
    );
    let newest = gunzip(&d.join(metrics.last().unwrap()));
    assert!(
        newest
            .lines()
            .any(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"")),
        "{newest}"
    );
    assert_eq!(families(&newest), families(&scraped));

    // The inventory once (the simulated fleet does not change), naming the GPUs the body has.
    let inventories: Vec<&String> = all
        .iter()
        .filter(|n| n.starts_with("inventory-") && n.ends_with(".json.gz"))
        .collect();
    assert_eq!(inventories.len(), 1, "{all:?}");
    let inventory: serde_json::Value =
        serde_json::from_str(&gunzip(&d.join(inventories[0]))).unwrap();
    let uuids: BTreeSet<&str> = inventory["entities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["gpu"]["uuid"].as_str())
        .collect();
    assert!(!uuids.is_empty(), "{inventory}");
    for uuid in &uuids {
        assert!(
            newest.contains(&format!("UUID=\"{uuid}\"")),
            "{uuid} not in the body"
        );
    }
    // Counted in the self-metrics.
    let written: f64 = scraped
        .lines()
        .find_map(|l| l.strip_prefix("dcgm_otel_dump_files_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(written >= 3.0, "{written}");
}

#[test]
fn dump_without_compression_is_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    dump_into(dir.path(), &["--dump-compression=false"], 1);
    let all = names(dir.path());
    let metrics = all.iter().find(|n| n.starts_with("metrics-")).unwrap();
    assert!(metrics.ends_with(".prom"), "{all:?}");
    let body = std::fs::read_to_string(dir.path().join(metrics)).unwrap();
    assert!(
        body.contains("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"),
        "{body}"
    );
    let inventory = all.iter().find(|n| n.starts_with("inventory-")).unwrap();
    assert!(inventory.ends_with(".json"), "{all:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(inventory)).unwrap())
            .unwrap();
    assert_eq!(v["entities"][0]["kind"], "Gpu", "{v}");
}

#[test]
fn an_unusable_dump_directory_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let bad = file.join("dumps");
    let (code, out) = common::run_to_exit(
        &[
            "--simulate",
            "-a",
            &format!("127.0.0.1:{}", common::free_port()),
            "--dump-enabled",
            "--dump-directory",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        out.lines().last().unwrap(),
        format!(
            "dcgm-otel: --dump-directory '{}': cannot create it: Not a directory (os error 20)",
            bad.display()
        )
    );
}
