//! Programs outside the repository that some tests drive (rotel, promtool, prometheus): where they are, the rule
//! when one is missing, and the one way each is run and checked ([`Rotel`], [`promtool_accepts`]). `tests/run-all.sh` installs them all, so under the test command every
//! such test runs for real; in CI (any non-empty `CI`) a missing peer fails the test; elsewhere (a
//! fresh clone's `cargo test`) the test prints `SKIP: <why>` and passes without checking anything.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{self, in_ci};

/// The peer `what`: the file named by the environment variable `env` if set, else `program` on `PATH`.
/// `None` (after printing why) when it is missing outside CI; panics when it is missing in CI.
pub fn find(what: &str, env: Option<&str>, program: &str) -> Option<PathBuf> {
    let from_env = env.and_then(std::env::var_os).map(PathBuf::from);
    let found = match &from_env {
        Some(p) => p.is_file().then(|| p.clone()),
        None => on_path(program),
    };
    if found.is_none() {
        let how = match env {
            Some(var) => format!("set {var} or put {program} on PATH"),
            None => format!("put {program} on PATH"),
        };
        let how = match (&from_env, env) {
            (Some(p), Some(var)) => format!("{var}={} is not a file", p.display()),
            _ => how,
        };
        assert!(
            !in_ci(),
            "{what} is required in CI: {how} (tests/run-all.sh installs it)"
        );
        eprintln!("SKIP: {what} not found: {how} (tests/run-all.sh installs it)");
    }
    found
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| is_executable(p))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// rotel, a real OTLP collector (`ROTEL_BIN`; tests/run-all.sh installs it into `.venv`).
pub fn rotel() -> Option<PathBuf> {
    find("rotel", Some("ROTEL_BIN"), "rotel-agent")
}

/// Prometheus' promtool (the `prometheus` Debian package).
pub fn promtool() -> Option<PathBuf> {
    find("promtool", None, "promtool")
}

/// Prometheus' server (the `prometheus` Debian package, 2.42 on Debian 12, beside promtool).
pub fn prometheus() -> Option<PathBuf> {
    find("prometheus", None, "prometheus")
}

/// Whether every program in `programs` is on `PATH` (the [`find`] rule for each missing one).
pub fn have(programs: &[&str]) -> bool {
    programs
        .iter()
        .filter(|p| find(p, None, p).is_none())
        .count()
        == 0
}

/// How long [`Rotel`] waits for its listeners and for what it logs.
const ROTEL_WAIT: Duration = Duration::from_secs(30);

/// A running rotel (`rotel-agent start`), killed on drop: OTLP/gRPC and OTLP/HTTP on free loopback
/// ports, the blackhole exporter, and the detailed debug log of one signal in `<dir>/rotel.log`.
pub struct Rotel {
    child: Child,
    pub grpc_port: u16,
    pub http_port: u16,
    pub log: PathBuf,
}

impl Rotel {
    /// Start rotel logging `signal` (`metrics` or `logs`) and wait until both ports listen; `None`
    /// when rotel is missing (the [`find`] rule). Rotel takes its endpoints from flags and does not
    /// say which port it got for `:0`, so it gets ports free a moment ago and is started again on
    /// fresh ones when it could not bind them ("Address already in use": another process took one in
    /// between), [`common::with_free_port_retried`].
    pub fn start(dir: &Path, signal: &str) -> Option<Rotel> {
        let bin = rotel()?;
        Some(common::with_free_port_retried(2, |ports| {
            Rotel::start_on(&bin, dir, signal, ports[0], ports[1])
        }))
    }

    /// [`Rotel::start`] on these ports: `Err` with its log when it could not bind one of them.
    fn start_on(
        bin: &Path,
        dir: &Path,
        signal: &str,
        grpc_port: u16,
        http_port: u16,
    ) -> Result<Rotel, String> {
        let log = dir.join("rotel.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(["start", "--otlp-grpc-endpoint"])
            .arg(format!("127.0.0.1:{grpc_port}"))
            .arg("--otlp-http-endpoint")
            .arg(format!("127.0.0.1:{http_port}"))
            .args(["--exporter", "blackhole", "--debug-log", signal])
            .args(["--debug-log-verbosity", "detailed", "--pid-file"])
            .arg(dir.join("rotel.pid"))
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("cannot start rotel");
        let mut rotel = Rotel {
            child,
            grpc_port,
            http_port,
            log,
        };
        let deadline = Instant::now() + ROTEL_WAIT;
        loop {
            // Exited: it could not bind (the port was taken) or failed otherwise.
            if let Ok(Some(status)) = rotel.child.try_wait() {
                let said = std::fs::read_to_string(&rotel.log).unwrap_or_default();
                if common::says_port_taken(&said) {
                    return Err(said);
                }
                panic!("rotel exited ({status}) before listening:\n{said}");
            }
            if TcpStream::connect(("127.0.0.1", grpc_port)).is_ok()
                && TcpStream::connect(("127.0.0.1", http_port)).is_ok()
            {
                return Ok(rotel);
            }
            assert!(Instant::now() < deadline, "rotel did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The debug log once `done` holds for it; panics ("rotel did not log `what`", with the log's
    /// start) when it does not within 30 s.
    pub fn log_when(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + ROTEL_WAIT;
        loop {
            let t = std::fs::read_to_string(&self.log).unwrap_or_default();
            if done(&t) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "rotel did not log {what}:\n{}",
                &t[..t.len().min(4000)]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Asserts that rotel's debug log `text` contains every one of `needles`.
pub fn assert_rotel_logged(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            text.contains(needle),
            "rotel log lacks '{needle}':\n{}",
            &text[..text.len().min(6000)]
        );
    }
}

impl Drop for Rotel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts that `promtool check metrics` accepts `body` (exit 0, or 3 for lint warnings only, about
/// dcgm-exporter's own names such as counters without `_total`); `what` names the body.
pub fn promtool_accepts(promtool: &Path, body: &str, what: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 3,
        "promtool check metrics exit {code} for {what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
