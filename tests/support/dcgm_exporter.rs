//! NVIDIA's dcgm-exporter as a test peer: where its binary is, how it is started on the fake libdcgm,
//! and the captures of its `/metrics` committed in `tests/golden/dcgm-exporter/` for machines without
//! it. The binary is never built by the tests: `DCGM_EXPORTER_BIN` names one, or `tests/run-all.sh`
//! builds the pinned module (`tests/peers/dcgm-exporter/`) into `target/peers/dcgm-exporter/` when the
//! Go module proxy serves it (today it refuses: `tests/peers/dcgm-exporter/README.md`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{self, get};

/// The release the captures and the deliberate-difference list are about.
pub const RELEASE: &str = "4.5.3-4.8.2";
/// Its commit (NVIDIA/dcgm-exporter), and the go-dcgm commit its go.mod pins.
pub const COMMIT: &str = "691c92762eb551313c825f6efe4ceeee20982801";
pub const GO_DCGM_COMMIT: &str = "ec245c09fe3e";

/// Where the expected output comes from.
#[derive(Clone, Debug)]
pub enum Oracle {
    /// A dcgm-exporter binary, run beside dcgm-otel.
    Live(PathBuf),
    /// The committed captures of its output.
    Captures,
}

/// The binary the pinned build leaves (`tests/run-all.sh`): `target/peers/dcgm-exporter/dcgm-exporter`.
pub fn pinned_build() -> PathBuf {
    let bin = common::binary();
    let target = bin
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| Path::new("target"));
    target.join("peers/dcgm-exporter/dcgm-exporter")
}

/// `DCGM_EXPORTER_BIN` if set (it must be a file), else the pinned build if present, else the captures.
pub fn oracle() -> Oracle {
    if let Some(p) = std::env::var_os("DCGM_EXPORTER_BIN").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "DCGM_EXPORTER_BIN={} is not a file",
            p.display()
        );
        return Oracle::Live(p);
    }
    let pinned = pinned_build();
    if pinned.is_file() {
        return Oracle::Live(pinned);
    }
    Oracle::Captures
}

/// One line saying which oracle a test compares with.
pub fn describe(oracle: &Oracle) -> String {
    match oracle {
        Oracle::Live(p) => format!("oracle: dcgm-exporter {RELEASE} running beside dcgm-otel ({})", p.display()),
        Oracle::Captures => format!(
            "oracle: the committed captures of dcgm-exporter {RELEASE} (tests/golden/dcgm-exporter/): no \
             dcgm-exporter binary here (set DCGM_EXPORTER_BIN, or see tests/peers/dcgm-exporter/README.md)"
        ),
    }
}

/// `tests/golden/dcgm-exporter/<case>.prom`.
pub fn capture_path(case: &str) -> PathBuf {
    common::golden_path(&format!("dcgm-exporter/{case}.prom"))
}

/// A running dcgm-exporter, killed on drop.
pub struct Running {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Its log so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Start `bin --disable-startup-validate -a 127.0.0.1:0 <args>` in `dir` with only `env` (and
/// `PATH`) in its environment, its log in `dir/dcgm-exporter.log`; read the port it bound from its
/// "Listening on" line (exporter-toolkit logs the listener's address), then wait until `/health`
/// answers 200 (panics after 30 s, with its log).
pub fn start(bin: &Path, args: &[String], env: &[(String, String)], dir: &Path) -> Running {
    let log = dir.join("dcgm-exporter.log");
    let log = log.as_path();
    let out = std::fs::File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    let child = Command::new(bin)
        .arg("--disable-startup-validate")
        .args(["-a", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let mut running = Running {
        child,
        port: 0,
        log: log.to_path_buf(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    running.port = common::port_logged_in(
        log,
        "Listening on",
        &mut running.child,
        Duration::from_secs(30),
    );
    let port = running.port;
    loop {
        if get(port, "/health").is_ok_and(|r| r.status == 200) {
            return running;
        }
        if let Ok(Some(status)) = running.child.try_wait() {
            panic!(
                "dcgm-exporter exited ({status}) before serving:\n{}",
                running.log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "dcgm-exporter did not answer /health within 30 s:\n{}",
            running.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
