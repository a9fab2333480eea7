//! The exporter under systemd (issue 24): `systemd-analyze verify` and `security` of the units in
//! packaging/systemd/, and the binary started by `systemd-socket-activate` (as systemd starts it from
//! dcgm-otel.socket) serving /metrics on the socket it inherited, with and without basic auth; and
//! each wrong hand-over (no socket, another process's, not a socket, closed, a unix socket) as the one
//! line and exit code 2 a user sees. Needs Debian's systemd package (tests/run-all.sh installs it);
//! skipped without it outside CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{common, peers};

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `tool` is installed; outside CI a missing tool skips the test, in CI it fails it.
fn have(tool: &str) -> bool {
    peers::have(&[tool])
}

/// A root for `systemd-analyze --root`: the host's system units, `kill`, the two units under
/// /etc/systemd/system and the built binary as /usr/bin/dcgm-otel (verify checks ExecStart= exists).
fn unit_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for dir in ["usr/bin", "usr/lib/systemd", "etc/systemd/system"] {
        std::fs::create_dir_all(r.join(dir)).unwrap();
    }
    std::os::unix::fs::symlink("usr/bin", r.join("bin")).unwrap();
    std::os::unix::fs::symlink("usr/lib", r.join("lib")).unwrap();
    let copied = Command::new("cp")
        .args(["-a", "/usr/lib/systemd/system"])
        .arg(r.join("usr/lib/systemd/"))
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::copy(common::binary(), r.join("usr/bin/dcgm-otel")).unwrap();
    std::fs::copy("/usr/bin/kill", r.join("usr/bin/kill")).unwrap();
    for unit in ["dcgm-otel.service", "dcgm-otel.socket"] {
        std::fs::copy(
            repo().join("packaging/systemd").join(unit),
            r.join("etc/systemd/system").join(unit),
        )
        .unwrap();
    }
    root
}

#[test]
fn units_verify_clean_and_the_service_is_hardened() {
    if !have("systemd-analyze") {
        return;
    }
    let root = unit_root();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.path().display()))
        .args(["dcgm-otel.service", "dcgm-otel.socket"])
        .output()
        .unwrap();
    // verify exits 0 on unknown keys and bad values too: any message is a defect.
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.is_empty(), "{said}");

    // systemd's own exposure score (0 = locked down, 10 = unprotected; --threshold counts tenths):
    // fails above 3.0 (it is 2.1).
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=30", "--no-pager"])
        .arg(format!("--root={}", root.path().display()))
        .arg("dcgm-otel.service")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("Overall exposure level for dcgm-otel.service"),
        "{said}"
    );

    // The restart policy dcgm-exporter's unit has, the environment file, the socket hand-over.
    let service =
        std::fs::read_to_string(repo().join("packaging/systemd/dcgm-otel.service")).unwrap();
    for line in [
        "Restart=on-failure",
        "RestartSec=10s",
        "StartLimitIntervalSec=0",
        "EnvironmentFile=-/etc/default/dcgm-otel",
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "Requires=dcgm-otel.socket",
        "ExecStart=/usr/bin/dcgm-otel --web-systemd-socket $DCGM_OTEL_ARGS",
    ] {
        assert!(service.lines().any(|l| l == line), "no {line} in the unit");
    }
    let socket =
        std::fs::read_to_string(repo().join("packaging/systemd/dcgm-otel.socket")).unwrap();
    assert!(socket.lines().any(|l| l == "ListenStream=9400"));
}

/// `systemd-socket-activate` listening on a loopback port, ready to start the exporter with `args` on
/// the first connection; killed (with the exporter it became) on drop.
struct Activated {
    child: Child,
    port: u16,
}

impl Drop for Activated {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// systemd-socket-activate refuses `--listen=127.0.0.1:0` ("Invalid argument") and cannot be handed a
/// socket, so it gets a port free a moment ago and is started again on a fresh one when another
/// process took that port in between (it says "Address already in use" and exits): the bounded retry
/// of [`common::with_free_port_retried`].
fn socket_activate(args: &[&str]) -> Activated {
    common::with_free_port_retried(1, |ports| socket_activate_on(ports[0], args))
}

/// [`socket_activate`] on `port`: `Err` with what it said when it could not bind it.
fn socket_activate_on(port: u16, args: &[&str]) -> Result<Activated, String> {
    use std::io::BufRead;
    let mut child = Command::new("systemd-socket-activate")
        .arg(format!("--listen=127.0.0.1:{port}"))
        .args([
            "-E",
            "DCGM_EXPORTER_KUBERNETES=false",
            "-E",
            "NODE_NAME=test-node",
        ])
        .arg(common::binary())
        .args(["--simulate", "--web-systemd-socket"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    // Its lines until it says it listens (or fails); then drained, so that the exporter it becomes
    // never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let activated = Activated { child, port };
    let mut said = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line.starts_with("Listening on ") => return Ok(activated),
            Ok(line) => said.push(line),
            Err(e) => {
                let said = said.join("\n");
                if common::says_port_taken(&said) {
                    return Err(said);
                }
                panic!("systemd-socket-activate did not listen on :{port} ({e}):\n{said}");
            }
        }
    }
}

/// GET `path` until the answer is not 503 (the first collection pending); the first connection is
/// what makes systemd-socket-activate start the exporter.
fn get_when_ready(port: u16, path: &str, headers: &[(&str, &str)]) -> common::Response {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match common::get_with(port, path, headers) {
            Ok(r) if r.status != 503 => return r,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            other => panic!("no answer on the activated socket :{port}: {other:?}"),
        }
    }
}

fn assert_serves_metrics(body: &str) {
    assert!(
        body.lines()
            .any(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"")),
        "{body}"
    );
}

#[test]
fn socket_activation_serves_metrics_on_the_inherited_socket() {
    if !have("systemd-socket-activate") {
        return;
    }
    // -a names a port the test holds and never listens on: with --web-systemd-socket the address is
    // not bound (an exporter that bound it would fail to start, or would answer there).
    let (_held, unused) = common::refusing_port();
    let a = socket_activate(&["-a", &format!("127.0.0.1:{unused}")]);
    assert_eq!(get_when_ready(a.port, "/ready", &[]).status, 200);
    let r = common::get(a.port, "/metrics").unwrap();
    assert_eq!(r.status, 200);
    assert_serves_metrics(&r.text());
    assert!(std::net::TcpStream::connect(("127.0.0.1", unused)).is_err());
}

#[test]
fn socket_activation_keeps_basic_auth() {
    if !have("systemd-socket-activate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    std::fs::write(&web, format!("basic_auth_users:\n  prom: {hash}\n")).unwrap();
    let a = socket_activate(&["--web-config-file", web.to_str().unwrap()]);
    let denied = get_when_ready(a.port, "/metrics", &[]);
    assert_eq!(denied.status, 401);
    assert_eq!(denied.text(), "401 Unauthorized\n");
    // base64("prom:s3cret")
    let auth = [("Authorization", "Basic cHJvbTpzM2NyZXQ=")];
    let r = get_when_ready(a.port, "/metrics", &auth);
    assert_eq!(r.status, 200);
    assert_serves_metrics(&r.text());
}

/// Run `sh -c script` with the binary as `$0`, wait, and return (exit code, stderr, pid).
fn run_shell(script: &str) -> (i32, String, u32) {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script])
        .arg(common::binary())
        .args(["--simulate", "--web-systemd-socket"])
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        pid,
    )
}

#[test]
fn a_missing_or_wrong_socket_is_one_line_and_exit_2() {
    let prefix = "dcgm-otel: --web-systemd-socket: ";
    // `exec` keeps the shell's pid, so LISTEN_PID=$$ names the exporter.
    let cases: [(&str, &str); 5] = [
        (
            r#"exec "$0" "$@""#,
            "no socket was passed (LISTEN_PID and LISTEN_FDS are not set): start dcgm-otel from a socket unit such as dcgm-otel.socket, or drop the flag",
        ),
        (
            r#"export LISTEN_PID=1 LISTEN_FDS=1; exec "$0" "$@""#,
            "LISTEN_PID is 1 but this process is {pid}: the sockets were passed to another process",
        ),
        (
            r#"export LISTEN_PID=$$ LISTEN_FDS=one; exec "$0" "$@""#,
            "LISTEN_FDS 'one' is not a count of descriptors in 1..=64",
        ),
        (
            r#"export LISTEN_PID=$$ LISTEN_FDS=1; exec "$0" "$@" 3</dev/null"#,
            "descriptor 3 (LISTEN_FDS=1) is not a socket but /dev/null",
        ),
        (
            r#"export LISTEN_PID=$$ LISTEN_FDS=1; exec "$0" "$@" 3<&-"#,
            "descriptor 3 (LISTEN_FDS=1) is not open",
        ),
    ];
    for (script, expected) in cases {
        let (code, stderr, pid) = run_shell(script);
        let expected = format!("{prefix}{}\n", expected.replace("{pid}", &pid.to_string()));
        assert_eq!((code, stderr.as_str()), (2, expected.as_str()), "{script}");
    }
}

#[test]
fn a_unix_socket_passed_is_refused() {
    if !have("systemd-socket-activate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.sock");
    let mut child = Command::new("systemd-socket-activate")
        .arg(format!("--listen={}", path.display()))
        .arg(common::binary())
        .args(["--simulate", "--web-systemd-socket"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first connection starts the exporter.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&path).is_err() {
        assert!(Instant::now() < deadline, "no unix socket at {path:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = wait_exit(&mut child, Duration::from_secs(20));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    // systemd-socket-activate says what it does before it execs the exporter; then the exporter's line.
    let ours: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.starts_with("Execing "))
        .skip(1)
        .collect();
    assert_eq!(
        (status, ours),
        (2, vec!["dcgm-otel: --web-systemd-socket: descriptor 3 (LISTEN_FDS=1) is a unix socket; dcgm-otel serves HTTP on a listening TCP socket (ListenStream=9400 in the .socket unit)"]),
        "{stderr}"
    );
}

fn wait_exit(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the exporter did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
