//! Helpers shared by the end-to-end tests: run the built `dcgm-otel` binary on a loopback port it binds
//! itself (:0, read from its log), wait for it, scrape it with a minimal HTTP/1.1 client, and kill it when the test ends.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dcgm-otel"))
}

/// A port that was free a moment ago. Racy: another process may take it before the caller binds it
/// again (issue 40). Used only under [`with_free_port_retried`], for peers that cannot bind :0 and say
/// which port they got; everything else binds :0 itself ([`start`], [`spawn_on_port_it_reports`],
/// [`port_logged_in`]), is handed a listener, or uses [`refusing_port`].
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// How many times [`with_free_port_retried`] tries.
pub const PORT_TRIES: usize = 5;

/// Start a peer that cannot bind :0 and report its port (systemd-socket-activate refuses `:0`, rotel
/// does not say which port it got) on ports free a moment ago, `ports` at a time: `start` returns
/// `Err(why)` when the peer could not bind one of them (another process took it in between — the
/// race [`free_port`] cannot avoid), and it is started again on fresh ports, [`PORT_TRIES`] times at
/// most; panics with the last reason after that. Any other failure is `start`'s to panic on.
pub fn with_free_port_retried<T>(
    ports: usize,
    mut start: impl FnMut(&[u16]) -> Result<T, String>,
) -> T {
    let mut why = String::new();
    for _ in 0..PORT_TRIES {
        let chosen: Vec<u16> = (0..ports).map(|_| free_port()).collect();
        match start(&chosen) {
            Ok(started) => return started,
            Err(e) => {
                eprintln!("a port of {chosen:?} was taken meanwhile; again on fresh ports:\n{e}");
                why = e;
            }
        }
    }
    panic!("no free port held after {PORT_TRIES} tries; last: {why}");
}

/// Whether a peer's output says it could not bind its port (Linux, Go, Rust and systemd wordings).
pub fn says_port_taken(output: &str) -> bool {
    let lower = output.to_ascii_lowercase();
    lower.contains("address already in use") || lower.contains("addrinuse")
}

/// The port a process says it listens on, read from `log` (its output redirected to that file): the
/// first line containing `needle` with `address=HOST:PORT` (text) or `"address":"HOST:PORT"` (JSON) —
/// the exporter's "serving /metrics", Prometheus' and dcgm-exporter's "Listening on" (exporter-toolkit
/// logs the bound address). For a process told to listen on :0. Panics, with the log, when `child`
/// exits or says nothing of the kind within `limit`.
pub fn port_logged_in(
    log: &std::path::Path,
    needle: &str,
    child: &mut Child,
    limit: Duration,
) -> u16 {
    let deadline = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(port) = text.lines().find_map(|l| logged_port(l, needle)) {
            return port;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{} exited ({status}) before logging {needle:?}:\n{text}",
                log.display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} line with an address in {} within {limit:?}:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The port of a log `line` containing `needle`: `address=HOST:PORT` (text) or
/// `"address":"HOST:PORT"` (JSON); the first address when there are several.
pub fn logged_port(line: &str, needle: &str) -> Option<u16> {
    if !line.contains(needle) {
        return None;
    }
    let rest = line
        .split_once("address=")
        .or_else(|| line.split_once("\"address\":\""))?
        .1;
    let addr = rest.split([' ', '"', '\n', ',', ']']).next()?;
    addr.rsplit_once(':')?.1.parse().ok()
}

/// What the exporter logs, with its bound address, once it serves (see [`port_logged_in`]).
pub const SERVING: &str = "serving /metrics";

/// A running exporter, killed on drop.
pub struct Exporter {
    pub child: Child,
    pub port: u16,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Response of [`get`].
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Minimal HTTP/1.1 GET (Connection: close) with extra request headers.
pub fn get_with(port: u16, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

pub fn get(port: u16, path: &str) -> std::io::Result<Response> {
    get_with(port, path, &[])
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = i + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

/// Start the exporter with `args` (plus `-a 127.0.0.1:<port>`) and `env`, and wait until /ready is 200.
/// The simulated fleet is bare (no simulated Kubernetes node) unless the test passes `-k`.
pub fn start(args: &[&str], env: &[(&str, &str)]) -> Exporter {
    start_with(args, env, true)
}

/// [`start`] exactly as a user would run it: the built-in scenarios' simulated cluster on by default.
pub fn start_as_user(args: &[&str], env: &[(&str, &str)]) -> Exporter {
    start_with(args, env, false)
}

fn start_with(args: &[&str], env: &[(&str, &str)], bare_fleet: bool) -> Exporter {
    let mut cmd = Command::new(binary());
    // Port 0: the exporter binds a free port itself and says which in its "serving /metrics" line
    // (never a port found free here and bound again there: another test may take it in between).
    cmd.args(args)
        .args(["-a", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .env_remove("NODE_NAME")
        .env("NODE_NAME", "test-node")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if bare_fleet {
        // A bare fleet unless the test asks for Kubernetes (`-k` on the command line wins): built-in
        // scenarios with pods otherwise play a Kubernetes node under --simulate.
        cmd.env("DCGM_EXPORTER_KUBERNETES", "false");
    } else {
        cmd.env_remove("DCGM_EXPORTER_KUBERNETES");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let exporter = spawn_on_port_it_reports(cmd, Duration::from_secs(20));
    wait_ready(&exporter, Duration::from_secs(20));
    exporter
}

/// Spawn `cmd` (the exporter, told `-a 127.0.0.1:0`) and read its port from its "serving /metrics"
/// log line (text or JSON) within `limit`. Its stderr is relayed through a pipe of ours, so that
/// `child.stderr` still reads all of it (that line included), as [`terminate`] does; panics with what
/// it wrote when it exits or says nothing of the kind within `limit`.
pub fn spawn_on_port_it_reports(mut cmd: Command, limit: Duration) -> Exporter {
    use std::io::BufRead;
    cmd.stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("cannot start dcgm-otel");
    let own = child.stderr.take().expect("stderr is piped");
    let (relayed, mut relay) = std::io::pipe().expect("a pipe");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(own);
        let mut tx = Some(tx);
        let mut line = Vec::new();
        let mut relaying = true;
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if let Some(port) = tx.as_ref().and_then(|_| serving_port(&line)) {
                let _ = tx.take().map(|tx| tx.send(port));
            }
            // Whoever holds the read end may drop it (a test that is done with the log): keep
            // draining, so that the exporter never blocks on a full pipe.
            relaying = relaying && relay.write_all(&line).is_ok();
        }
    });
    child.stderr = Some(std::process::ChildStderr::from(std::os::fd::OwnedFd::from(
        relayed,
    )));
    match rx.recv_timeout(limit) {
        Ok(port) => Exporter { child, port },
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            let mut said = String::new();
            if let Some(mut s) = child.stderr.take() {
                let _ = s.read_to_string(&mut said);
            }
            panic!("dcgm-otel said no \"serving /metrics\" address ({e}); its stderr:\n{said}");
        }
    }
}

/// The port of a "serving /metrics" log line ([`logged_port`]).
fn serving_port(line: &[u8]) -> Option<u16> {
    logged_port(&String::from_utf8_lossy(line), SERVING)
}

/// A loopback port bound by this test and not listening: a connection to it is refused for as long
/// as the returned socket lives, and no other process can take the port meanwhile (unlike a port
/// "assumed closed", such as 9). `listen` on the socket turns it into a server on the same port.
pub fn refusing_port() -> (socket2::Socket, u16) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket");
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind 127.0.0.1:0");
    let port = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map(|a| a.port())
        .expect("a bound port");
    (socket, port)
}

/// The exporter's stderr, line by line as it writes them (taken from `e`: [`terminate`] then returns
/// nothing of it). For a test that must see a line before it goes on, with [`next_line_with`].
pub fn follow_stderr(e: &mut Exporter) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = e
        .child
        .stderr
        .take()
        .expect("stderr is piped and not taken");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line of `lines` ([`follow_stderr`]) that contains `needle`; panics after `limit`, with
/// the lines read meanwhile.
pub fn next_line_with(
    lines: &std::sync::mpsc::Receiver<String>,
    needle: &str,
    limit: Duration,
) -> String {
    let deadline = Instant::now() + limit;
    let mut read = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(line) => read.push(line),
            Err(e) => panic!(
                "no line with {needle:?} within {limit:?} ({e}); read meanwhile:\n{}",
                read.join("\n")
            ),
        }
    }
}

/// Poll /ready until 200 or panic after `limit`.
pub fn wait_ready(e: &Exporter, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(r) = get(e.port, "/ready") {
            if r.status == 200 {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "dcgm-otel did not become ready on port {} within {:?}",
        e.port, limit
    );
}

/// Send a signal (`-HUP`, `-TERM`, ...) to the exporter with the shell's kill builtin.
pub fn signal(e: &Exporter, sig: &str) {
    let status = Command::new("sh")
        .args(["-c", &format!("kill {sig} {}", e.child.id())])
        .status()
        .expect("cannot run sh");
    assert!(status.success(), "kill {sig} failed");
}

/// Stop the exporter like a supervisor does (SIGTERM) and return its stderr; panics when it does
/// not exit within 15 s.
pub fn terminate(mut e: Exporter) -> String {
    signal(&e, "-TERM");
    let deadline = Instant::now() + Duration::from_secs(15);
    while e.child.try_wait().ok().flatten().is_none() {
        assert!(
            Instant::now() < deadline,
            "dcgm-otel did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut err = String::new();
    if let Some(mut s) = e.child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    err
}

/// How long [`run_to_exit`] lets the binary run. Every call is a command that exits by itself in
/// well under a second (a bad flag, `--help`, a missing library); the margin is for a loaded CI
/// machine. One still running then (say a bad input stopped being fatal and it serves on :9400)
/// fails the test instead of hanging it.
pub const RUN_TO_EXIT_LIMIT: Duration = Duration::from_secs(10);

/// Run the binary to completion with `args`; returns (exit code, stderr then stdout). Kills it and
/// fails the test, with the arguments and the output so far, when it has not exited within
/// [`RUN_TO_EXIT_LIMIT`].
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    run_to_exit_within(args, env, RUN_TO_EXIT_LIMIT)
}

/// [`run_to_exit`] with another limit.
pub fn run_to_exit_within(args: &[&str], env: &[(&str, &str)], limit: Duration) -> (i32, String) {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("cannot run dcgm-otel");
    // Both pipes are drained on threads, so a chatty child never blocks on a full pipe and the
    // output so far can be shown when it has to be killed.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&buf);
        let reader = std::thread::spawn(move || {
            let Some(mut pipe) = pipe else { return };
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        (buf, reader)
    };
    let (stderr, err_reader) = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let (stdout, out_reader) = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for dcgm-otel") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = err_reader.join();
    let _ = out_reader.join();
    let text = |b: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>| {
        String::from_utf8_lossy(&b.lock().unwrap()).into_owned()
    };
    let output = text(&stderr) + &text(&stdout);
    let Some(status) = status else {
        panic!(
            "dcgm-otel {args:?} (env {env:?}) did not exit within {limit:?}: killed. A command \
             expected to end by itself is still running (serving?). Its output so far:\n{output}"
        );
    };
    (status.code().unwrap_or(-1), output)
}

/// Data copied from NVIDIA's DCGM and dcgm-exporter into the repository (`tests/fixtures/dcgm/README.md`).
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dcgm")
}

/// A file under `tests/fixtures/` as a string path.
pub fn fixtures_path(relative: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(relative)
        .display()
        .to_string()
}

/// Where golden files live.
pub fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// True on a CI machine (any non-empty `CI`, as CI services set it).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Compare a body with `tests/golden/<name>`; `UPDATE_GOLDEN=1` rewrites the file instead (never in
/// CI, where a rewrite would make the comparison pass without comparing).
pub fn check_golden(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        assert!(
            !in_ci(),
            "UPDATE_GOLDEN is set in CI: golden files are compared there, never rewritten"
        );
        std::fs::write(&path, actual).unwrap();
        eprintln!("rewrote {} (UPDATE_GOLDEN)", path.display());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(5)
            .map(|(i, (a, b))| format!("line {}:\n  golden: {a}\n  actual: {b}", i + 1))
            .collect();
        panic!(
            "/metrics differs from {} ({} vs {} lines; UPDATE_GOLDEN=1 rewrites it):\n{}",
            path.display(),
            expected.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
}

/// `/metrics` of the exporter on `port`, which must answer 200.
pub fn scrape(port: u16) -> String {
    let r = get(port, "/metrics").unwrap();
    assert_eq!(r.status, 200);
    r.text()
}

/// The `DCGM_FI_*` series of a body: `name{labels}` without values.
pub fn series(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| l.starts_with("DCGM_FI_"))
        .filter_map(|l| l.rsplit_once(' ').map(|(s, _)| s.to_string()))
        .collect()
}
