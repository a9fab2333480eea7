//! What a user collects when the exporter misbehaves (issue 24): DCGM's own log passed through
//! (`--enable-dcgm-log`, `--dcgm-log-level`) from the fake libdcgm, which logs like libdcgm does
//! (`tests/fake-libdcgm/src/dbglog.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

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
