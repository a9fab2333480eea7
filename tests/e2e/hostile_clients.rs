//! Clients that try to hurt :9400 (issue 35, items 2, 3, 8; issue 33's pprof item), each attack played
//! against the built binary on 127.0.0.1: hit-and-run wrong passwords (bcrypt work bounded by its two
//! slots, counted in threads), a crowd of wrong passwords and a flood of idle connections from other
//! loopback addresses beside authenticated scrapes and probes (which stay 200), bcrypt costs above 14
//! at start and on reload, and `--enable-pprof` with and without a web config: open with a warning as
//! in dcgm-exporter, refused on a web config without TLS or auth, switched off by a reload that removes
//! them, the Go-only endpoints answered 404 with the reason, and a profile's memory given back.
//!
//! Assertions are on status codes and counts, not durations. `DCGM_OTEL_TEST_BINARY` runs them against
//! another build (the code before the fix, where each fails).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn binary() -> PathBuf {
    std::env::var_os("DCGM_OTEL_TEST_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(common::binary)
}

/// `Basic base64(user:password)`.
fn basic(user_password: &str) -> String {
    format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, user_password)
    )
}

/// A running exporter with its stderr in a file; killed on drop.
struct Running {
    child: Child,
    port: u16,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Start `--simulate -c 500` with `web` (if any) as web.yml; wait until the port answers.
    fn start(web: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Running {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mut cmd = Command::new(binary());
        // :0: the exporter binds a port itself and says which in its "serving /metrics" line.
        cmd.args(["--simulate", "-c", "500", "-a", "127.0.0.1:0"])
            .args(args)
            .current_dir(&dir)
            .env("DCGM_EXPORTER_KUBERNETES", "false")
            .env_remove("RUST_LOG")
            .env_remove("DCGM_EXPORTER_WEB_CONFIG_FILE")
            .env_remove("DCGM_EXPORTER_ENABLE_PPROF")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(text) = web {
            std::fs::write(dir.join("web.yml"), text).unwrap();
            cmd.args(["--web-config-file", "web.yml"]);
        }
        let mut r = Running {
            child: cmd.spawn().expect("cannot start dcgm-otel"),
            port: 0,
            dir,
            _tmp: tmp,
        };
        let log = r.dir.join("stderr.log");
        r.port =
            common::port_logged_in(&log, common::SERVING, &mut r.child, Duration::from_secs(20));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", r.port)).is_err() {
            if let Some(status) = r.child.try_wait().unwrap() {
                panic!("exited ({status}) at start:\n{}", r.log());
            }
            assert!(Instant::now() < deadline, "not listening:\n{}", r.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("sh")
            .args(["-c", &format!("kill {sig} {}", self.child.id())])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    /// Wait until the log has `n` lines containing `needle`.
    fn log_lines(&self, needle: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = self.log();
            if log.matches(needle).count() >= n {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "{n} x {needle:?} not logged:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Run to exit (20 s at most); (exit status, stderr).
fn run_to_exit(web: &str, args: &[&str]) -> (Option<ExitStatus>, String) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("web.yml"), web).unwrap();
    let log = tmp.path().join("stderr.log");
    let mut child = Command::new(binary())
        .args(["--simulate", "-a", "127.0.0.1:0"])
        .args(["--web-config-file", "web.yml"])
        .args(args)
        .current_dir(tmp.path())
        .env_remove("DCGM_EXPORTER_ENABLE_PPROF")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

/// A connection to the exporter from `source` (any 127.x.y.z address is this host).
fn connect_from(source: [u8; 4], port: u16) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::from((source, 0)).into())?;
    s.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    Ok(s.into())
}

/// GET `path` from `source` with optional basic auth; the status code, 0 when there is no answer.
fn status_from(source: [u8; 4], port: u16, path: &str, authorization: Option<&str>) -> u16 {
    let Ok(mut s) = connect_from(source, port) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    if write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
    )
    .is_err()
    {
        return 0;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    std::str::from_utf8(&out[..out.len().min(12)])
        .ok()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

const LEGIT: [u8; 4] = [127, 0, 0, 1];

/// A self-metric of the exporter's own /metrics (with credentials), 0 when absent or unreadable.
fn metric(port: u16, authorization: Option<&str>, series: &str) -> f64 {
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    common::get_with(port, "/metrics", &headers)
        .ok()
        .filter(|r| r.status == 200)
        .and_then(|r| {
            r.text().lines().find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .parse::<f64>()
                    .ok()
            })
        })
        .unwrap_or(0.0)
}

fn threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A web config with one basic-auth user `prom` (password `pw`) at bcrypt `cost`.
fn users_config(cost: u32) -> String {
    format!(
        "basic_auth_users:\n  prom: {}\n",
        bcrypt::hash("pw", cost).unwrap()
    )
}

// ---- item 2: bcrypt ------------------------------------------------------------------------------------

#[test]
fn hit_and_run_wrong_passwords_never_run_more_bcrypts_than_its_slots() {
    // Cost 12: each verification takes a few hundred ms, so abandoned ones pile up if unbounded.
    let e = Running::start(Some(&users_config(12)), &["--web-max-requests", "512"], &[]);
    let good = basic("prom:pw");
    assert_eq!(status_from(LEGIT, e.port, "/metrics", Some(&good)), 200);
    let baseline = threads(e.pid());
    let stop = Arc::new(AtomicBool::new(false));
    let peak = {
        let (stop, pid) = (stop.clone(), e.pid());
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(threads(pid));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    // 8 clients, 25 times each: send a wrong password, wait a moment for the server to take it up,
    // and hang up without waiting for the answer.
    std::thread::scope(|scope| {
        for c in 0..8u8 {
            let port = e.port;
            scope.spawn(move || {
                for i in 0..25 {
                    if let Ok(mut s) = connect_from([127, 0, 0, 10 + c], port) {
                        let wrong = basic(&format!("prom:wrong-{c}-{i}"));
                        let _ = write!(
                            s,
                            "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {wrong}\r\n\r\n"
                        );
                        std::thread::sleep(Duration::from_millis(30));
                    }
                }
            });
        }
    });
    stop.store(true, Ordering::Relaxed);
    let peak = peak.join().unwrap();
    println!("hit-and-run wrong passwords: threads {baseline} before, peak {peak}");
    // bcrypt has two threads of its own, started with the web config (in the baseline): whatever the
    // clients do, no thread is added (one more is left for an unrelated short-lived one).
    assert!(
        peak <= baseline + 1,
        "threads: {baseline} before the attack, {peak} at its peak"
    );
    // The exporter still answers the right password.
    assert_eq!(status_from(LEGIT, e.port, "/metrics", Some(&good)), 200);
}

#[test]
fn bcrypt_costs_above_14_are_refused_at_start_and_on_reload() {
    // A cost-15 hash is a cost-10 hash with its cost field changed (the format is all that is checked
    // before use: nothing here runs a cost-15 bcrypt).
    let cost15 = bcrypt::hash("pw", 10).unwrap().replacen("$10$", "$15$", 1);
    let slow = format!(
        "basic_auth_users:\n  prom: {}\n  slow: {cost15}\n",
        bcrypt::hash("pw", 10).unwrap()
    );
    let (status, log) = run_to_exit(&slow, &[]);
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{log}");
    assert_eq!(
        log.lines().last().unwrap_or_default(),
        "dcgm-otel: web config web.yml: line 3: basic_auth_users.slow: bcrypt cost 15 is above the maximum 14 (every login, right or wrong, would cost the server 32x a cost-10 one); regenerate with: htpasswd -nBC 10 USER"
    );
    assert!(!log.contains(&cost15));

    let e = Running::start(Some(&users_config(10)), &[], &[]);
    std::fs::write(e.dir.join("web.yml"), &slow).unwrap();
    e.signal("-HUP");
    let log = e.log_lines("keeping the previous web config", 1);
    assert!(
        log.contains("basic_auth_users.slow: bcrypt cost 15 is above the maximum 14"),
        "{log}"
    );
    assert_eq!(
        status_from(LEGIT, e.port, "/metrics", Some(&basic("prom:pw"))),
        200
    );
    assert_eq!(
        status_from(LEGIT, e.port, "/metrics", Some(&basic("slow:pw"))),
        401
    );
}

// ---- item 3: request slots and connections ------------------------------------------------------------

#[test]
fn wrong_passwords_and_idle_floods_leave_scrapes_and_probes_at_200() {
    let e = Running::start(
        Some(&users_config(12)),
        &["--web-health-auth=false", "--web-max-requests", "4"],
        &[],
    );
    let port = e.port;
    let good = basic("prom:pw");
    // Prometheus logs in once (the pair is then cached).
    assert_eq!(status_from(LEGIT, port, "/metrics", Some(&good)), 200);

    // 70 clients with wrong passwords, from four other addresses, for as long as the checks below run.
    let stop = Arc::new(AtomicBool::new(false));
    let wrong_codes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let crowd: Vec<_> = (0..70u8)
        .map(|c| {
            let (stop, codes) = (stop.clone(), wrong_codes.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let wrong = basic(&format!("prom:wrong-{c}-{i}"));
                    let code = status_from([127, 0, 0, 20 + c % 4], port, "/metrics", Some(&wrong));
                    codes.lock().unwrap().push(code);
                    i += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut scrapes = Vec::new();
    let mut probes = Vec::new();
    for _ in 0..30 {
        scrapes.push(status_from(LEGIT, port, "/metrics", Some(&good)));
        probes.push(status_from(LEGIT, port, "/health", None));
        probes.push(status_from(LEGIT, port, "/ready", None));
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in crowd {
        t.join().unwrap();
    }
    let wrong: Vec<u16> = wrong_codes.lock().unwrap().clone();
    println!(
        "70 wrong-password clients: {} answers ({} x 401, {} x 429); scrapes {:?}; probes {:?}",
        wrong.len(),
        wrong.iter().filter(|c| **c == 401).count(),
        wrong.iter().filter(|c| **c == 429).count(),
        scrapes,
        probes
    );
    assert!(scrapes.iter().all(|c| *c == 200), "scrapes: {scrapes:?}");
    assert!(probes.iter().all(|c| *c == 200), "probes: {probes:?}");
    assert!(wrong.iter().all(|c| *c == 401 || *c == 429), "{wrong:?}");
    assert!(wrong.contains(&429), "bcrypt slots never busy?");

    // An idle-connection flood from one address: 512 connections opened and left silent.
    let flood: Vec<TcpStream> = (0..512)
        .filter_map(|_| connect_from([127, 0, 0, 2], port).ok())
        .collect();
    assert_eq!(flood.len(), 512);
    let refused = "dcgm_otel_http_rejected_connections_total{reason=\"max_client_connections\"}";
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(port, Some(&good), refused) < 480.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut scrapes = Vec::new();
    let mut probes = Vec::new();
    for _ in 0..10 {
        scrapes.push(status_from(LEGIT, port, "/metrics", Some(&good)));
        probes.push(status_from(LEGIT, port, "/health", None));
    }
    assert!(
        scrapes.iter().all(|c| *c == 200),
        "scrapes next to the flood: {scrapes:?}"
    );
    assert!(
        probes.iter().all(|c| *c == 200),
        "probes next to the flood: {probes:?}"
    );
    // The flood's address has its 32, no more.
    assert_eq!(metric(port, Some(&good), refused), 480.0);
    drop(flood);
}

// ---- item 8 and issue 33: pprof -----------------------------------------------------------------------

/// GET with a long read limit (a first profile also loads debug information): (status, body).
fn fetch(port: u16, path: &str, authorization: Option<&str>) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let status = std::str::from_utf8(&raw[9..12]).unwrap().parse().unwrap();
    (status, raw[split + 4..].to_vec())
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

#[test]
#[cfg(feature = "pprof")]
fn pprof_without_a_web_config_starts_as_in_dcgm_exporter_with_one_warning() {
    let e = Running::start(None, &[], &[("DCGM_EXPORTER_ENABLE_PPROF", "true")]);
    let log = e.log_lines("serving /metrics", 1);
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("CPU profiles")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].contains(" WARN ")
            && warnings[0].contains("served without TLS or basic auth (no --web-config-file, as in dcgm-exporter): anyone who reaches the port can take one"),
        "{log}"
    );
    let (status, body) = fetch(e.port, "/debug/pprof/profile?seconds=1", None);
    assert_eq!(status, 200, "{}", text(&body));
    assert_eq!(&body[..2], [0x1f, 0x8b], "gzip");
    let (status, index) = fetch(e.port, "/debug/pprof/", None);
    assert_eq!(status, 200);
    assert!(text(&index).contains("<a href=\"profile?seconds=30\">profile</a>"));
    // Every endpoint dcgm-exporter lists that dcgm-otel does not serve: 404 naming it and why.
    for name in [
        "heap",
        "allocs",
        "goroutine",
        "threadcreate",
        "block",
        "mutex",
        "trace",
        "cmdline",
        "symbol",
    ] {
        let (status, body) = fetch(e.port, &format!("/debug/pprof/{name}"), None);
        let body = text(&body);
        assert_eq!(status, 404, "{name}");
        assert!(
            body.starts_with(&format!(
                "404 /debug/pprof/{name} is not served by dcgm-otel: "
            )) && body.ends_with(". CPU profiles: /debug/pprof/profile?seconds=N\n"),
            "{body}"
        );
    }
    assert_eq!(fetch(e.port, "/debug/pprof/other", None).0, 404);
}

#[test]
#[cfg(feature = "pprof")]
fn pprof_needs_tls_or_auth_in_a_web_config_and_a_reload_that_removes_them_switches_it_off() {
    let headers_only = "http_server_config:\n  headers:\n    X-Frame-Options: deny\n";
    let (status, log) = run_to_exit(headers_only, &["--enable-pprof"]);
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{log}");
    assert_eq!(
        log.lines().last().unwrap_or_default(),
        "dcgm-otel: --enable-pprof: the web config web.yml has neither tls_server_config nor basic_auth_users, so CPU profiles would be open to anyone who reaches the port; add one of them, or leave out --web-config-file to serve profiles without protection as dcgm-exporter does"
    );
    let (status, log) = run_to_exit("", &["--enable-pprof"]);
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(2),
        "an empty file: {log}"
    );

    let users = users_config(10);
    let good = basic("prom:pw");
    let e = Running::start(Some(&users), &["--enable-pprof"], &[]);
    let log = e.log_lines("serving /metrics", 1);
    assert!(
        log.lines().any(|l| l.contains(" INFO ")
            && l.contains("CPU profiles at /debug/pprof/profile?seconds=N (--enable-pprof) protection=\"basic auth (no TLS: credentials and data in clear text)\"")),
        "{log}"
    );
    assert_eq!(fetch(e.port, "/debug/pprof/profile?seconds=1", None).0, 401);
    assert_eq!(
        fetch(e.port, "/debug/pprof/profile?seconds=1", Some(&good)).0,
        200
    );
    // The users go: profiles switch off, saying so, and nobody gets one.
    std::fs::write(e.dir.join("web.yml"), headers_only).unwrap();
    e.signal("-HUP");
    let log = e.log_lines("CPU profiles (--enable-pprof) switched off", 1);
    assert!(
        log.contains("the reloaded web config has neither TLS nor basic auth (/debug/pprof/ answers 404 until a reload brings one back)"),
        "{log}"
    );
    let (status, body) = fetch(e.port, "/debug/pprof/profile?seconds=1", None);
    assert_eq!(
        (status, text(&body).as_str()),
        (404, "404 CPU profiles are switched off: the web config has neither TLS nor basic auth (--enable-pprof with --web-config-file needs one of them)\n")
    );
    assert_eq!(fetch(e.port, "/debug/pprof/", None).0, 404);
    assert_eq!(status_from(LEGIT, e.port, "/metrics", None), 200);
    // They come back: so do profiles.
    std::fs::write(e.dir.join("web.yml"), &users).unwrap();
    e.signal("-HUP");
    e.log_lines("CPU profiles (--enable-pprof) served again", 1);
    assert_eq!(fetch(e.port, "/debug/pprof/profile?seconds=1", None).0, 401);
    assert_eq!(
        fetch(e.port, "/debug/pprof/profile?seconds=1", Some(&good)).0,
        200
    );
}

/// (VmRSS, RssAnon, RssFile) of a process, KiB.
fn memory_kib(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

#[test]
#[cfg(feature = "pprof")]
fn a_profile_gives_its_memory_back() {
    // A web config with a user: the code before the fix needed one for --enable-pprof.
    let e = Running::start(Some(&users_config(10)), &["--enable-pprof"], &[]);
    let good = basic("prom:pw");
    // Settle: a few collections and scrapes first.
    for _ in 0..5 {
        assert_eq!(status_from(LEGIT, e.port, "/metrics", Some(&good)), 200);
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = memory_kib(e.pid());
    let mut after = Vec::new();
    for _ in 0..3 {
        let (status, body) = fetch(e.port, "/debug/pprof/profile?seconds=1", Some(&good));
        assert_eq!(status, 200, "{}", text(&body));
        after.push(memory_kib(e.pid()));
    }
    println!("(VmRSS, RssAnon, RssFile) KiB: {before:?} before the profiles, {after:?} after each");
    // Naming the functions maps and parses the binary's symbol and line tables (hundreds of MiB for a
    // debug build). Dropped after each profile, its pages given back: what stays is the sampler's own
    // table (about 70 MiB, allocated by the first profile and kept by the pprof crate), the file is no
    // longer mapped, and a second and third profile add nothing.
    let (first, last) = (after[0], after[2]);
    assert!(
        last.0 <= before.0 + 100 * 1024,
        "VmRSS {} KiB before the profiles, {} KiB after",
        before.0,
        last.0
    );
    assert!(
        last.2 <= before.2 + 16 * 1024,
        "the binary's tables stay mapped: RssFile {} KiB before, {} KiB after",
        before.2,
        last.2
    );
    assert!(
        last.0 <= first.0 + 16 * 1024,
        "each profile keeps more: VmRSS {} KiB after the first, {} KiB after the third",
        first.0,
        last.0
    );
}
