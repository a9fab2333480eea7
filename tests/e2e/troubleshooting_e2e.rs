//! What a user collects when the exporter misbehaves (issue 24): DCGM's own log passed through
//! (`--enable-dcgm-log`, `--dcgm-log-level`) from the fake libdcgm, which logs like libdcgm does
//! (`tests/fake-libdcgm/src/dbglog.rs`); the debug dump (`--dump-*`) filling and rotating its directory;
//! CPU profiles (`--enable-pprof`) behind basic auth, read back with a protobuf wire-format reader written
//! here from profile.proto's field numbers (independent of the exporter's encoder).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::common;
use crate::support::fake_lib;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The fake libdcgm as built next to the binary under test.
fn fake_library() -> String {
    fake_lib::built("libfake_libdcgm.so").display().to_string()
}

/// Run the exporter on the fake libdcgm until it has collected once, stop it, and return
/// (stdout, stderr).
fn run_on_fake(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let mut cmd = Command::new(common::binary());
    cmd.args(["--dcgm-library", &fake_library()])
        .args(["-a", "127.0.0.1:0"])
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
    let mut e = common::spawn_on_port_it_reports(cmd, std::time::Duration::from_secs(20));
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
            "127.0.0.1:0",
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

/// One protobuf field: (number, varint value or bytes).
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = b[*at];
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
    }
    v
}

/// The fields of a message, in order (wire types 0, 1, 2 and 5; 64- and 32-bit ones as varints).
fn fields(b: &[u8]) -> Vec<(u64, Wire<'_>)> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < b.len() {
        let key = varint(b, &mut at);
        let value = match key & 7 {
            0 => Wire::Varint(varint(b, &mut at)),
            1 => {
                at += 8;
                Wire::Varint(0)
            }
            2 => {
                let len = varint(b, &mut at) as usize;
                at += len;
                Wire::Bytes(&b[at - len..at])
            }
            5 => {
                at += 4;
                Wire::Varint(0)
            }
            other => panic!("wire type {other} at byte {at}"),
        };
        out.push((key >> 3, value));
    }
    out
}

fn messages(b: &[u8], field: u64) -> Vec<&[u8]> {
    fields(b)
        .into_iter()
        .filter_map(|(n, v)| match v {
            Wire::Bytes(m) if n == field => Some(m),
            _ => None,
        })
        .collect()
}

fn number(b: &[u8], field: u64) -> u64 {
    fields(b)
        .into_iter()
        .find_map(|(n, v)| match v {
            Wire::Varint(x) if n == field => Some(x),
            _ => None,
        })
        .unwrap_or(0)
}

/// A repeated integer field, packed or not.
fn numbers(b: &[u8], field: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (n, v) in fields(b) {
        if n != field {
            continue;
        }
        match v {
            Wire::Varint(x) => out.push(x),
            Wire::Bytes(packed) => {
                let mut at = 0;
                while at < packed.len() {
                    out.push(varint(packed, &mut at));
                }
            }
        }
    }
    out
}

fn web_config_with_user(dir: &Path) -> (String, [(&'static str, &'static str); 1]) {
    let web = dir.join("web.yml");
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    std::fs::write(&web, format!("basic_auth_users:\n  prom: {hash}\n")).unwrap();
    // base64("prom:s3cret")
    (
        web.display().to_string(),
        [("Authorization", "Basic cHJvbTpzM2NyZXQ=")],
    )
}

#[test]
#[cfg(feature = "pprof")]
fn a_cpu_profile_downloads_behind_auth_and_parses() {
    let dir = tempfile::tempdir().unwrap();
    let (web, auth) = web_config_with_user(dir.path());
    let e = common::start(
        // /ready open: the helper waits for it without credentials.
        &[
            "--simulate=large",
            "-c",
            "100",
            "--enable-pprof",
            "--web-config-file",
            &web,
            "--web-health-auth=false",
        ],
        &[],
    );
    common_auth_checks(e.port, &auth);
    let denied = common::get(e.port, "/debug/pprof/profile?seconds=1").unwrap();
    assert_eq!(denied.status, 401);
    let bad = common::get_with(e.port, "/debug/pprof/profile?seconds=0", &auth).unwrap();
    assert_eq!(
        (bad.status, bad.text().as_str()),
        (400, "seconds '0': expected a whole number in 1..=300\n")
    );
    assert_eq!(
        common::get_with(e.port, "/debug/pprof/heap", &auth)
            .unwrap()
            .status,
        404
    );

    // Scrapes keep the exporter busy while it samples itself.
    let port = e.port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = common::get_with(port, "/metrics", &auth);
            }
        })
    };
    let (head, body) = get_slowly(e.port, "/debug/pprof/profile?seconds=2", auth[0].1);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\ncontent-type: application/octet-stream\r\n"),
        "{head}"
    );
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut raw)
        .unwrap();

    // profile.proto: 1 sample_type, 2 sample, 4 location, 5 function, 6 string_table, 11 period_type.
    let strings: Vec<String> = messages(&raw, 6)
        .into_iter()
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    assert_eq!(strings[0], "");
    let s = |i: u64| strings[i as usize].as_str();
    let types: Vec<(&str, &str)> = messages(&raw, 1)
        .into_iter()
        .map(|vt| (s(number(vt, 1)), s(number(vt, 2))))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    let period_type = messages(&raw, 11)[0];
    assert_eq!(
        (s(number(period_type, 1)), s(number(period_type, 2))),
        ("cpu", "nanoseconds")
    );

    let functions: BTreeMap<u64, &str> = messages(&raw, 5)
        .into_iter()
        .map(|f| (number(f, 1), s(number(f, 2))))
        .collect();
    let locations: BTreeMap<u64, Vec<u64>> = messages(&raw, 4)
        .into_iter()
        .map(|l| {
            let lines = messages(l, 4)
                .into_iter()
                .map(|line| number(line, 1))
                .collect();
            (number(l, 1), lines)
        })
        .collect();
    let samples = messages(&raw, 2);
    assert!(!samples.is_empty(), "no sample in 2 s of a busy exporter");
    let mut seen = BTreeSet::new();
    for sample in samples {
        let values = numbers(sample, 2);
        assert_eq!(values.len(), 2);
        assert!(values[0] >= 1);
        for loc in numbers(sample, 1) {
            for f in &locations[&loc] {
                seen.insert(functions[f]);
            }
        }
    }
    // Symbolised: the exporter's own functions are named.
    assert!(seen.iter().any(|f| f.contains("dcgm_otel")), "{seen:?}");

    // A client that goes away does not leave the profiler taken: meanwhile others get 409 (required:
    // one profile at a time), then 200. The probe is sent only once the client's 5 s profile holds the
    // profiler: its request is answered neither at once (a 409 would come within its bcrypt check) nor
    // within 1.5 s. A client answered (it lost the profiler to a probe still running) is sent again;
    // a probe answered 200 (the client's request was still being checked) means another round.
    let send_gone = || {
        use std::io::Write;
        let mut gone = std::net::TcpStream::connect(("127.0.0.1", e.port)).unwrap();
        write!(
            gone,
            "GET /debug/pprof/profile?seconds=5 HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n",
            auth[0].1
        )
        .unwrap();
        gone
    };
    let holding = |gone: &mut std::net::TcpStream| {
        use std::io::Read;
        gone.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let mut byte = [0u8; 1];
        matches!(gone.read(&mut byte), Err(ref err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let gone = loop {
        assert!(
            Instant::now() < deadline,
            "never a 409 while a profile was being taken"
        );
        let mut gone = send_gone();
        if !holding(&mut gone) {
            continue;
        }
        let (head, body) = get_slowly(e.port, "/debug/pprof/profile?seconds=1", auth[0].1);
        if head.starts_with("HTTP/1.1 409 Conflict") {
            assert_eq!(
                String::from_utf8_lossy(&body),
                "a CPU profile is already being taken; retry when it is done\n"
            );
            break gone;
        }
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    };
    drop(gone);
    loop {
        let (head, body) = get_slowly(e.port, "/debug/pprof/profile?seconds=1", auth[0].1);
        if head.starts_with("HTTP/1.1 200 OK") {
            break;
        }
        assert!(head.starts_with("HTTP/1.1 409 Conflict"), "{head}");
        assert_eq!(
            String::from_utf8_lossy(&body),
            "a CPU profile is already being taken; retry when it is done\n"
        );
        assert!(Instant::now() < deadline, "the profiler stayed taken");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// GET with basic auth and a long read limit (the first profile of a debug build also loads its
/// debug information to name the functions): (response head, body).
fn get_slowly(port: u16, path: &str, authorization: &str) -> (String, Vec<u8>) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {authorization}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    (
        String::from_utf8_lossy(&raw[..split + 2]).into_owned(),
        raw[split + 4..].to_vec(),
    )
}

/// /metrics itself stays behind the same auth.
fn common_auth_checks(port: u16, auth: &[(&str, &str)]) {
    assert_eq!(common::get(port, "/metrics").unwrap().status, 401);
    assert_eq!(
        common::get_with(port, "/metrics", auth).unwrap().status,
        200
    );
}

#[test]
fn pprof_is_off_unless_asked() {
    let e = common::start(&["--simulate"], &[]);
    for path in [
        "/debug/pprof/profile?seconds=1",
        "/debug/pprof/",
        "/debug/pprof/heap",
    ] {
        let r = common::get(e.port, path).unwrap();
        assert_eq!(
            (r.status, r.text().as_str()),
            (404, "404 page not found\n"),
            "{path}"
        );
    }
}
