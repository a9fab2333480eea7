//! Files a hostile local user prepares for the exporter (issue 35, items 1, 5, 6), each attack played
//! against the built binary: a dump directory that is a link, someone else's or writable by others;
//! links planted where the dump writer makes its files, dump files of another user in the sweep; an
//! HPC job file that is a link to a root-only file, a FIFO, an oversized file, job ids with characters
//! a label should not carry; a counters CSV, web config or config file that is a FIFO or oversized, at
//! start and on a SIGHUP reload; and SIGTERM while a DCGM call never returns.
//!
//! `DCGM_OTEL_TEST_BINARY` runs them against another build (e.g. the code before the fix, where each
//! fails).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::common;
use crate::support::fake_lib::Fake;

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Someone else: the uid and gid of `nobody`.
const OTHER_UID: u32 = 65534;

fn binary() -> PathBuf {
    std::env::var_os("DCGM_OTEL_TEST_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(common::binary)
}

/// A running exporter with its stderr in a file; killed on drop.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn start(dir: &Path, args: &[&str], env: &[(String, String)]) -> Running {
        // One log per start within `dir` (a test may start several there).
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = dir.join(format!("exporter-{n}.log"));
        let mut cmd = Command::new(binary());
        // :0: the exporter binds a port itself and says which in its "serving /metrics" line
        // ([`Running::port`]).
        cmd.args(args)
            .args(["-a", "127.0.0.1:0"])
            .env_remove("RUST_LOG")
            .env("NODE_NAME", "test-node")
            .env("DCGM_EXPORTER_KUBERNETES", "false")
            .env_remove("DCGM_EXPORTER_WEB_CONFIG_FILE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Running {
            child: cmd.spawn().expect("cannot start dcgm-otel"),
            log,
        }
    }

    /// The port it serves on, once its log says so.
    fn port(&self) -> Option<u16> {
        self.log()
            .lines()
            .find_map(|l| common::logged_port(l, common::SERVING))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The exit status once the process ends, or `None` when it still runs after `limit`.
    fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("sh")
            .args(["-c", &format!("kill {sig} {}", self.child.id())])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    /// Scrape until `pred` holds (30 s at most).
    fn body_when(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Some(Ok(r)) = self.port().map(|port| common::get(port, "/metrics")) {
                let body = r.text();
                if r.status == 200 && pred(&body) {
                    return body;
                }
                last = body;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "timed out waiting for: {what}\nlast body (tail):\n{}\nlog:\n{}",
            &last[last.len().saturating_sub(3000)..],
            self.log()
        );
    }

    /// SIGTERM; the process must be gone within 15 s.
    fn terminate(mut self) -> String {
        self.signal("-TERM");
        let status = self.exit_within(Duration::from_secs(15));
        assert!(
            status.is_some(),
            "still running 15 s after SIGTERM; log:\n{}",
            self.log()
        );
        self.log()
    }
}

/// Start with `args` and expect exit code 2 within 20 s; returns the last stderr line.
fn refused(dir: &Path, args: &[&str]) -> String {
    let mut r = Running::start(dir, args, &[]);
    let status = r.exit_within(Duration::from_secs(20));
    let log = r.log();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(2),
        "{args:?} should stop start-up with exit code 2; log:\n{log}"
    );
    log.lines().last().unwrap_or_default().to_string()
}

/// Make `path` another user's (needs root, as the test command runs). Elsewhere: SKIP the case (fails
/// under `CI`).
fn give_to_another_user(path: &Path) -> bool {
    match std::os::unix::fs::chown(path, Some(OTHER_UID), Some(OTHER_UID)) {
        Ok(()) => true,
        Err(e) => {
            assert!(!common::in_ci(), "chown {}: {e}", path.display());
            println!(
                "SKIP: cannot give {} to another user ({e}); not root",
                path.display()
            );
            false
        }
    }
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn backdate(path: &Path, by: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

const COLLECTS: &str = "dcgm_otel_collects_total{source=\"simulated\"}";

/// A self-metric's value in a body (0 when absent).
fn metric(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

// ---- item 1: the dump directory ----------------------------------------------------------------------

#[test]
fn a_dump_directory_others_could_write_in_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let real = d.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let foreign = d.join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    let foreign_ok = give_to_another_user(&foreign);
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700)).unwrap();
    let shared = d.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let euid = std::fs::metadata(d).unwrap().uid();
    let mut cases = vec![
        (&link, "it is a symbolic link; refused (give the directory it points to, if that is yours)".to_string()),
        (&shared, "writable by group or others (mode 1777); refused: they could plant links or files in it (chmod go-w, or give another directory)".to_string()),
    ];
    if foreign_ok {
        cases.push((&foreign, format!("owned by uid {OTHER_UID}, not by this process's user (uid {euid}); refused: its owner could plant links or files in it")));
    }
    for (dir, expected) in cases {
        let line = refused(
            d,
            &[
                "--simulate",
                "--dump-enabled",
                "--dump-directory",
                dir.to_str().unwrap(),
            ],
        );
        assert_eq!(
            line,
            format!(
                "dcgm-otel: --dump-directory '{}': {expected}",
                dir.display()
            )
        );
        assert!(std::fs::read_dir(dir).unwrap().next().is_none(), "{dir:?}");
    }
    // A new directory is made private to the exporter's user.
    let fresh = d.join("new/dumps");
    let e = Running::start(
        d,
        &[
            "--simulate",
            "-c",
            "200",
            "--dump-enabled",
            "--dump-directory",
            fresh.to_str().unwrap(),
        ],
        &[],
    );
    e.body_when("a first collection", |b| b.contains("DCGM_FI_DEV_GPU_TEMP"));
    e.terminate();
    assert_eq!(mode(&fresh), 0o700);
}

/// `YYYYMMDD-HHMMSS` (UTC) of UNIX time `secs`, as the dump writer names its files.
fn stamp(secs: u64) -> String {
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y%m%d-%H%M%S"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn dump_files_are_private_and_never_follow_planted_links_or_sweep_others_files() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let dir = tmp.path().join("dump");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Links at every name the writer used to make predictably: its write test and, for the next
    // seconds, the temporary names of the first collections' files.
    let plant = |name: &str| std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
    plant(".dcgm-otel-write-test");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for s in now..now + 20 {
        let stamp = stamp(s);
        for seq in 1..=3 {
            plant(&format!(".metrics-{stamp}-{seq}.prom.gz.tmp"));
            plant(&format!(".inventory-{stamp}-{seq}.json.gz.tmp"));
        }
    }
    // Two hours old: a dump file of another user (kept), one of the exporter's user (removed).
    let others = dir.join("metrics-20200101-000000-1.prom.gz");
    let own = dir.join("metrics-20200101-000000-2.prom.gz");
    for f in [&others, &own] {
        std::fs::write(f, b"x").unwrap();
        backdate(f, Duration::from_secs(7200));
    }
    let others_ok = give_to_another_user(&others);
    if !others_ok {
        std::fs::remove_file(&others).unwrap();
    }

    let e = Running::start(
        tmp.path(),
        &[
            "--simulate",
            "-c",
            "200",
            "--dump-enabled",
            "--dump-retention",
            "1",
            "--dump-directory",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    let written = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                (n.starts_with("metrics-") || n.starts_with("inventory-"))
                    && !n.starts_with("metrics-2020")
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while written(&dir).len() < 4 {
        assert!(Instant::now() < deadline, "dump files: {:?}", written(&dir));
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = e.terminate();
    assert_eq!(
        String::from_utf8_lossy(&std::fs::read(&victim).unwrap()),
        "precious\n",
        "a planted link was followed; log:\n{log}"
    );
    assert!(
        !others_ok || others.exists(),
        "another user's file was swept"
    );
    assert!(!own.exists(), "the exporter's own old file was kept");
    for f in written(&dir) {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    assert!(
        !log.contains("debug dump: cannot write"),
        "the planted links made writes fail:\n{log}"
    );
}

// ---- item 5: HPC job files ---------------------------------------------------------------------------

#[test]
fn hpc_job_files_are_read_only_when_regular_small_and_plain() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("root-only");
    std::fs::write(&secret, "SECRET-LINE\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let jobs = tmp.path().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    std::os::unix::fs::symlink(&secret, jobs.join("0")).unwrap();
    mkfifo(&jobs.join("1"));
    let mut big = "big-job\n".to_string();
    big.push_str(&"#".repeat(70 * 1024));
    std::fs::write(jobs.join("2"), big).unwrap();
    std::fs::write(
        jobs.join("3"),
        "ok-1\nbad\"quote\nspace d\n{brace}\nok_2[3]\n",
    )
    .unwrap();
    let e = Running::start(
        tmp.path(),
        &[
            "--simulate=hgx-h100",
            "-c",
            "200",
            "--hpc-job-mapping-dir",
            jobs.to_str().unwrap(),
        ],
        &[],
    );
    let body = e.body_when("GPU 3's jobs", |b| {
        b.contains("hpc_job=\"ok_2[3]\"")
            && metric(b, "dcgm_otel_hpc_job_files_refused_total") >= 3.0
    });
    let jobs_seen: std::collections::BTreeSet<&str> = body
        .lines()
        .filter_map(|l| l.split_once("hpc_job=\"")?.1.split_once('"'))
        .map(|(job, _)| job)
        .collect();
    assert_eq!(
        jobs_seen.into_iter().collect::<Vec<_>>(),
        ["ok-1", "ok_2[3]"]
    );
    assert!(!body.contains("SECRET"), "a linked root-only file was read");
    assert!(metric(&body, "dcgm_otel_hpc_job_ids_refused_total") >= 3.0);
    // Collection went on past the FIFO, and so does shutdown.
    let later = e.body_when("more collections", |b| {
        metric(b, COLLECTS) >= metric(&body, COLLECTS) + 3.0
    });
    assert!(later.contains("hpc_job=\"ok-1\""));
    let log = e.terminate();
    assert_eq!(
        log.matches("HPC job files or ids refused").count(),
        1,
        "refusals are logged once:\n{log}"
    );
}

// ---- item 6: configuration files that never end, and a DCGM call that never returns ----------------

#[test]
fn configuration_files_that_are_fifos_or_oversized_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let fifo = d.join("fifo");
    mkfifo(&fifo);
    let huge = d.join("huge.csv");
    let mut text = "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n".repeat(30_000);
    text.push_str("# padding\n");
    std::fs::write(&huge, text).unwrap();
    let f = fifo.display().to_string();
    let cases: [(Vec<&str>, String); 4] = [
        (
            vec!["--simulate", "-f", &f],
            format!("dcgm-otel: {f}: cannot read counters CSV: not a regular file (it is a FIFO); only regular files are read"),
        ),
        (
            vec!["--simulate", "-f", huge.to_str().unwrap()],
            format!("dcgm-otel: {}: cannot read counters CSV: larger than 1048576 bytes; refused", huge.display()),
        ),
        (
            vec!["--simulate", "--web-config-file", &f],
            format!("dcgm-otel: web config {f}: cannot read: not a regular file (it is a FIFO); only regular files are read"),
        ),
        (
            vec!["--simulate", "--config-file", &f],
            format!("dcgm-otel: {f}: cannot read the config file: not a regular file (it is a FIFO); only regular files are read"),
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(refused(d, &args), expected, "{args:?}");
    }
}

#[test]
fn a_counters_file_swapped_for_a_fifo_is_refused_on_reload_and_collection_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("counters.csv");
    std::fs::write(&csv, "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n").unwrap();
    let e = Running::start(
        tmp.path(),
        &["--simulate", "-c", "200", "-f", csv.to_str().unwrap()],
        &[],
    );
    let first = e.body_when("a first collection", |b| b.contains("DCGM_FI_DEV_GPU_TEMP"));
    let fifo = tmp.path().join("fifo");
    mkfifo(&fifo);
    std::fs::rename(&fifo, &csv).unwrap();
    e.signal("-HUP");
    let body = e.body_when("a failed reload and more collections", |b| {
        metric(b, "dcgm_otel_config_reloads_total{result=\"failure\"}") >= 1.0
            && metric(b, COLLECTS) >= metric(&first, COLLECTS) + 5.0
    });
    assert!(
        body.contains("DCGM_FI_DEV_GPU_TEMP"),
        "the running counters stay"
    );
    let log = e.terminate();
    assert!(log.contains("not a regular file (it is a FIFO)"), "{log}");
}

#[test]
fn sigterm_exits_while_a_dcgm_call_never_returns() {
    let fake = Fake::new();
    // The third poll blocks for an hour.
    let env = fake.ld_env(&[("FAKE_DCGM_FAULTS", "hang_ms=3600000@3")]);
    let tmp = tempfile::tempdir().unwrap();
    let mut e = Running::start(tmp.path(), &["-c", "200"], &env);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fake.calls().iter().any(|c| c.starts_with("hang begins")) {
        assert!(
            Instant::now() < deadline,
            "the hang did not begin; log:\n{}",
            e.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    e.signal("-TERM");
    // The shutdown limit is 12 s; a stuck collector is left after 3 s. 30 s is the test's patience.
    let status = e.exit_within(Duration::from_secs(30));
    let log = e.log();
    assert!(status.is_some(), "still running 30 s after SIGTERM:\n{log}");
    assert!(
        log.contains("the collector did not stop in time (a source call that does not return?); exiting without it"),
        "{log}"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");
    let mut calls = String::new();
    std::fs::File::open(fake.log_path())
        .unwrap()
        .read_to_string(&mut calls)
        .unwrap();
    assert!(!calls.contains("dcgmShutdown"), "the hung call returned?");
}
